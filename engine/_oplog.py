"""Operator log lines: one when a run starts and one when it ends, the same for each delegation.

This module owns what those lines say, not how they are written: each is a `logging` record at
INFO on the `subagent_engine.runs` logger (`RUN_LOG`), its fields in the record's attributes
(`extra`) for a process to format as it likes, and its message the same fields as one readable
line (`run.end run=run-1f2e status=finished duration=1.234s delegations=2`), built only when a
handler formats it. Nothing is built at all when the logger is disabled (`isEnabledFor`).

Lines carry identifiers, statuses, durations and error codes only, never a prompt, a summary, an
error message or a credential: nothing a remote, a parent or a host wrote as text. A value with
a space, a quote, `=` or a control character is written as a JSON string, so a hostile agent key
or remote id cannot forge a second line or a field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from engine._results import DelegationResult

__all__ = [
    "RUN_LOG",
    "delegation_ended",
    "delegation_started",
    "render_fields",
    "run_ended",
    "run_started",
]

#: The logger of the run and delegation lines.
RUN_LOG: Final = logging.getLogger("subagent_engine.runs")

#: How each field is named in the readable line (the record attribute keeps the long name).
_SHORT: Final = {
    "run_id": "run",
    "thread_id": "thread",
    "delegation_id": "delegation",
    "duration_s": "duration",
    "parent_tool_call_id": "parent_call",
    "remote_task_id": "remote_task",
    "remote_context_id": "remote_context",
}


def _value(value: Any) -> str:
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' "=\\'):
        return text
    return json.dumps(text)


def render_fields(event: str, fields: Mapping[str, Any]) -> str:
    """`event key=value ...` for the fields that have a value, in their order; a duration in
    seconds is written with three decimals and its unit."""
    parts = [event]
    for name, value in fields.items():
        if value is None:
            continue
        if name == "duration_s":
            parts.append(f"duration={value:.3f}s")
        else:
            parts.append(f"{_SHORT.get(name, name)}={_value(value)}")
    return " ".join(parts)


class _Line:
    """A record's message, rendered only if a handler formats the record."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: Mapping[str, Any]) -> None:
        self.event = event
        self.fields = fields

    def __str__(self) -> str:
        return render_fields(self.event, self.fields)


def _emit(event: str, fields: dict[str, Any]) -> None:
    RUN_LOG.info("%s", _Line(event, fields), extra={"event": event, **fields})


def run_started(run_id: str, thread_id: str | None) -> None:
    if RUN_LOG.isEnabledFor(logging.INFO):
        _emit("run.start", {"run_id": run_id, "thread_id": thread_id})


def run_ended(
    run_id: str, status: str, duration: float, delegations: int, error_code: str | None
) -> None:
    """`status`: finished, failed or cancelled; `error_code` only for failed."""
    if RUN_LOG.isEnabledFor(logging.INFO):
        fields = {
            "run_id": run_id,
            "status": status,
            "duration_s": duration,
            "delegations": delegations,
            "error_code": error_code,
        }
        _emit("run.end", fields)


def delegation_started(
    run_id: str, delegation_id: str, agent: str, parent_tool_call_id: str | None
) -> None:
    if RUN_LOG.isEnabledFor(logging.INFO):
        fields = {
            "run_id": run_id,
            "delegation_id": delegation_id,
            "agent": agent,
            "parent_tool_call_id": parent_tool_call_id,
        }
        _emit("delegation.start", fields)


def delegation_ended(result: DelegationResult, duration: float) -> None:
    """From the delegation's recorded result (ids already redacted where they enter)."""
    if RUN_LOG.isEnabledFor(logging.INFO):
        fields = {
            "run_id": result.run_id,
            "delegation_id": result.delegation_id,
            "agent": result.agent,
            "status": result.status,
            "duration_s": duration,
            "error_code": result.error.code if result.error is not None else None,
            "remote_task_id": result.remote_task_id,
            "remote_context_id": result.remote_context_id,
            "remote_cancel": result.remote_cancel,
            "parent_tool_call_id": result.parent_tool_call_id,
        }
        _emit("delegation.end", fields)
