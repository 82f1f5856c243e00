"""Property: a configured secret never reaches a journaled event or a result.

Hypothesis writes random update scripts for an in-process agent and embeds the agent's secret in
random string fields (whole, one field at a time: the redactor cannot see a secret split across
deltas, see `engine._redact`). The scripts run through the real actor tree (`engine.open_run`),
and every journal entry and every recorded result is serialized with `engine.to_json` and searched.

Secrets are drawn from uppercase letters and filler text from a disjoint alphabet, so any
occurrence in the output can only come from a secret the engine let through (not from filler,
ids, JSON keys, or the `[REDACTED]` marker itself).
"""

from __future__ import annotations

import string
from typing import Any

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    REDACTED,
    AgentSpec,
    ArtifactRef,
    DelegationError,
    DelegationRequest,
    ErrorCode,
    Kind,
    Status,
    TargetUpdate,
)

SECRET_ALPHABET = string.ascii_uppercase
FILLER_ALPHABET = string.ascii_lowercase + string.digits + " .,:/-_=?"

filler = st.text(FILLER_ALPHABET, max_size=10)
secrets = st.text(SECRET_ALPHABET, min_size=6, max_size=16).filter(lambda s: s not in REDACTED)

STEP_KINDS = (
    "status",
    "started",
    "text_start",
    "text_delta",
    "text_end",
    "reasoning_delta",
    "tool_args",
    "tool_result",
    "custom",
    "artifact",
    "input_required",
)
ENDINGS = (
    "return",
    "return_none",
    "raise_delegation_error",
    "raise_runtime_error",
    "emit_finished",
    "emit_failed",
    "emit_cancelled",
)


@attrs.frozen
class Scenario:
    secret: str
    updates: tuple[TargetUpdate, ...]
    ending: str
    ending_text: str
    placed: int  # how many fields carry the secret


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    secret = draw(secrets)
    placed = 0

    def field() -> str:
        nonlocal placed
        before, after = draw(filler), draw(filler)
        if draw(st.booleans()):
            placed += 1
            return before + secret + after
        return before + after

    def raw() -> dict[str, Any]:
        return {field(): [field(), {"nested": field()}]}

    message_ids = st.sampled_from(["m1", "m2", None])
    updates: list[TargetUpdate] = []
    for kind in draw(st.lists(st.sampled_from(STEP_KINDS), max_size=12)):
        with_raw = raw() if draw(st.booleans()) else None
        if kind == "status":
            update = TargetUpdate(
                kind=Kind.STATUS,
                status=draw(st.sampled_from(["working", "submitted"])),
                text=field(),
                raw=with_raw,
            )
        elif kind == "started":
            update = TargetUpdate(kind=Kind.STARTED, status="working", text=field(), raw=with_raw)
        elif kind == "text_start":
            update = TargetUpdate(kind=Kind.TEXT_START, message_id=draw(message_ids))
        elif kind == "text_delta":
            update = TargetUpdate(
                kind=Kind.TEXT_DELTA, message_id=draw(message_ids), delta=field(), raw=with_raw
            )
        elif kind == "text_end":
            update = TargetUpdate(kind=Kind.TEXT_END, message_id=draw(message_ids))
        elif kind == "reasoning_delta":
            update = TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta=field())
        elif kind == "tool_args":
            update = TargetUpdate(
                kind=Kind.TOOL_CALL_ARGS, tool_call_id="t1", args={"query": field()}
            )
        elif kind == "tool_result":
            update = TargetUpdate(
                kind=Kind.TOOL_CALL_RESULT, tool_call_id="t1", result=[field(), 1]
            )
        elif kind == "custom":
            update = TargetUpdate(kind=Kind.CUSTOM, name=field(), raw=raw())
        elif kind == "artifact":
            artifact_id = draw(st.sampled_from(["a1", "a2", "a3"]))
            update = TargetUpdate(
                kind=Kind.ARTIFACT,
                artifact=ArtifactRef(
                    id=artifact_id,
                    name=field(),
                    description=field(),
                    uri="https://files.example/" + field(),
                ),
                artifact_bytes=draw(st.integers(0, 64)),
                artifact_append=draw(st.booleans()),
                remote_artifact_id=artifact_id,
                raw=with_raw,
            )
        else:
            update = TargetUpdate(
                kind=Kind.INPUT_REQUIRED, status="input_required", text=field(), raw=with_raw
            )
        updates.append(update)
    ending = draw(st.sampled_from(ENDINGS))
    return Scenario(secret, tuple(updates), ending, field(), placed)


def make_agent(scenario: Scenario) -> Any:
    async def agent(task: LocalTask) -> str | None:
        for update in scenario.updates:
            await task._emit(update)
        ending, text = scenario.ending, scenario.ending_text
        if ending == "return":
            return text
        if ending == "raise_delegation_error":
            raise DelegationError(code=ErrorCode.AUTH_REQUIRED, message=text)
        if ending == "raise_runtime_error":
            raise RuntimeError(text)
        if ending == "emit_finished":
            await task._emit(TargetUpdate(kind=Kind.FINISHED, text=text))
        elif ending == "emit_failed":
            await task._emit(
                TargetUpdate(
                    kind=Kind.FAILED,
                    error=DelegationError(code=ErrorCode.REMOTE_FAILED, message=text),
                )
            )
        elif ending == "emit_cancelled":
            await task._emit(TargetUpdate(kind=Kind.CANCELLED, text=text))
        return None

    return agent


async def drive(scenario: Scenario) -> tuple[list[engine.JournalEntry], list[Any]]:
    spec = AgentSpec(
        key="agent", target=InProcessTarget(make_agent(scenario)), secrets=(scenario.secret,)
    )
    async with engine.open_run([spec], clock=lambda: 0.0) as run:
        returned = await run.delegate(DelegationRequest(agent="agent", objective="do it"))
    entries = []
    async with run.events() as events:
        async for entry in events:
            entries.append(entry)
    return entries, [returned, *run.delegations()]


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_secret_never_reaches_journal_or_results(scenario: Scenario) -> None:
    entries, results = trio.run(drive, scenario)
    secret = scenario.secret

    kinds = [e.event.kind for e in entries]
    assert kinds[0] == Kind.RUN_STARTED
    assert kinds[-1] == Kind.RUN_FINISHED
    terminals = [k for k in kinds if k in Kind.DELEGATION_TERMINALS]
    assert len(terminals) == 1
    assert results[0].status in Status.TERMINAL
    assert results[0] == results[1]

    leaks = []
    for entry in entries:
        text = engine.to_json(entry.event)
        if secret in text:
            leaks.append(text)
    for result in results:
        text = engine.to_json(result)
        if secret in text:
            leaks.append(text)
    assert leaks == []
