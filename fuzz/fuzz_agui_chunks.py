"""Fuzz harness: AG-UI chunk expansion (`adapters.agui._chunks`) and the checker over chunk streams.

Any bytes are read as a JSON array of events (anything else is wrapped into one: a JSON value
becomes a one-event stream, bytes that are not JSON become a program, below). The sequence goes
through `ChunkExpander`, which may refuse an event only with `ChunkError` (carrying a known
`code` and only dict events in `partial`) and must emit only what it was given or dict events
with a string `type`; whatever the expander does, `check_events` must return `Violation`s with
indexes inside the stream, never raise, and reach the same verdict when fed event by event.

Bytes that are not JSON spell a program, two bytes per event (which event, then its id, tag,
delta and extras), so the fuzzer reaches chunk streams with lanes, continuations and terminals
without having to write JSON first.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters"):
    from adapters.agui import ChunkError, ChunkExpander, StreamChecker, Violation, check_events
    from adapters.agui._chunks import UNDEFINED

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input", "program"]

_CODES: Final = frozenset(
    {"missing_id", "missing_name", "owner_conflict", "field_conflict", "ambiguous", "not_an_object"}
)
_MAX_PROGRAM_BYTES: Final = 256
_IDS: Final = (None, "m1", "m2", "", 1, "c1")
_TAGS: Final = (None, "s1", "s2", "")
_DELTAS: Final = (None, "a", "", "\u2028")

#: (type, the field that names its entity) for each op byte modulo the table's length.
_OPS: Final = (
    ("TEXT_MESSAGE_CHUNK", "messageId"),
    ("TEXT_MESSAGE_CHUNK", "messageId"),
    ("TOOL_CALL_CHUNK", "toolCallId"),
    ("TOOL_CALL_CHUNK", "toolCallId"),
    ("REASONING_MESSAGE_CHUNK", "messageId"),
    ("TEXT_MESSAGE_START", "messageId"),
    ("TEXT_MESSAGE_CONTENT", "messageId"),
    ("TEXT_MESSAGE_END", "messageId"),
    ("TOOL_CALL_START", "toolCallId"),
    ("TOOL_CALL_END", "toolCallId"),
    ("TOOL_CALL_RESULT", "toolCallId"),
    ("SUBAGENT_STARTED", None),
    ("SUBAGENT_FINISHED", None),
    ("SUBAGENT_ERROR", None),
    ("MESSAGES_SNAPSHOT", None),
    ("RUN_STARTED", None),
    ("RUN_FINISHED", None),
    ("RUN_ERROR", None),
    ("RAW", None),
    ("CUSTOM", None),
)

SEEDS: list[bytes] = [
    b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},'
    b'{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"},'
    b'{"type":"TEXT_MESSAGE_CHUNK","delta":"b"},'
    b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"}]',
    b'[{"type":"TOOL_CALL_CHUNK","toolCallId":"c"},{"type":"TEXT_MESSAGE_CHUNK"}]',
    b'[{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":"s1"},'
    b'{"type":"TEXT_MESSAGE_CHUNK","messageId":"b","subagentRunId":"s2"},'
    b'{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}]',
    b'[{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","role":"x","__proto__":{}},null,7]',
    b'[{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"assistant",'
    b'"subagentRunId":"s","toolCalls":[{"id":"c"}]}]}]',
    b'{"type":"TEXT_MESSAGE_CHUNK","messageId":{"o":1},"subagentRunId":null}',
    # Programs.
    bytes([15, 0, 11, 1, 0, 0x11, 0, 0x01, 2, 0x23, 12, 1, 16, 0]),
    bytes(range(0, 64)),
]

DICTIONARY: list[bytes] = [
    b'"type"',
    b'"TEXT_MESSAGE_CHUNK"',
    b'"TOOL_CALL_CHUNK"',
    b'"REASONING_MESSAGE_CHUNK"',
    b'"messageId"',
    b'"toolCallId"',
    b'"toolCallName"',
    b'"parentMessageId"',
    b'"subagentRunId"',
    b'"delta"',
    b'"role"',
    b'"metadata"',
    b'"rawEvent"',
    b'"RUN_STARTED"',
    b'"RUN_FINISHED"',
    b'"SUBAGENT_FINISHED"',
    b'"MESSAGES_SNAPSHOT"',
    b"null",
]


def fuzz_one_input(data: bytes) -> None:
    events = _events(data)
    _expand(events)
    _check(events)


def _events(data: bytes) -> list[Any]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return program(data)
    return value if isinstance(value, list) else [value]


def program(data: bytes) -> list[Any]:
    """The events two bytes per event spell (an odd last byte is ignored)."""
    data = data[:_MAX_PROGRAM_BYTES]
    return [_event(op, arg) for op, arg in zip(data[::2], data[1::2], strict=False)]


def _event(op: int, arg: int) -> dict[str, Any]:
    kind, id_key = _OPS[op % len(_OPS)]
    tag = _TAGS[(arg >> 3) % len(_TAGS)]
    event: dict[str, Any] = {"type": kind}
    if kind.startswith("RUN_"):
        event.update(threadId="t", runId="r", message="m")
    elif kind.startswith("SUBAGENT_"):
        event.update(subagentRunId=tag or "s0", name="n", message="m")
    elif kind == "MESSAGES_SNAPSHOT":
        event["messages"] = [{"id": "m1", "role": "assistant", "content": "x"}]
        if tag is not None:
            event["messages"][0]["subagentRunId"] = tag
    elif kind in ("RAW", "CUSTOM"):
        event.update(event=arg, name="n", value=arg)
    else:
        entity = _IDS[arg % len(_IDS)]
        if entity is not None:
            event[id_key or "messageId"] = entity
        if tag is not None:
            event["subagentRunId"] = tag
        delta = _DELTAS[(arg >> 5) % len(_DELTAS)]
        if delta is not None:
            event["delta"] = delta
        if arg & 0x80:
            event.update(toolCallName="f", role="assistant", content="r", messageId="r1")
        if op & 0x80:
            event["metadata"] = {"k": op}
    return event


def _expand(events: list[Any]) -> None:
    expander = ChunkExpander()
    for event in events:
        try:
            out = expander.feed(event)
        except ChunkError as exc:
            if exc.code not in _CODES or not isinstance(exc.message, str):
                raise AssertionError(f"ChunkError without a known code: {exc.code!r}") from exc
            _check_emitted(event, exc.partial, synthesized_only=True)
            continue
        _check_emitted(event, out, synthesized_only=False)
    expander.close()
    if expander.pending:
        raise AssertionError(f"close() left streams pending: {expander.pending!r}")
    for warning in expander.warnings:
        if not isinstance(warning, str):
            raise AssertionError(f"a warning that is not text: {warning!r}")


def _check_emitted(event: Any, out: list[Any], *, synthesized_only: bool) -> None:
    """Emitted: the event itself (at most once, last) or new dicts with a string `type`."""
    passed = [item for item in out if item is event]
    if len(passed) > 1 or (passed and out[-1] is not event) or (passed and synthesized_only):
        raise AssertionError(f"the event was passed on wrongly: {out!r}")
    for item in out:
        if item is not event and not (isinstance(item, dict) and isinstance(item.get("type"), str)):
            raise AssertionError(f"the expander emitted {item!r}")
        if item is not event and any(value is UNDEFINED for value in item.values()):
            raise AssertionError(f"`undefined` leaked into an emitted event: {item!r}")


def _check(events: list[Any]) -> None:
    violations = check_events(events)
    for violation in violations:
        if not isinstance(violation, Violation) or not 0 <= violation.index <= len(events):
            raise AssertionError(f"checker reported {violation!r} for {len(events)} events")
    checker = StreamChecker()
    fed = [v for event in events for v in checker.feed(event)] + checker.finish()
    if fed != violations:
        raise AssertionError("feeding event by event gave other violations than check_events")
