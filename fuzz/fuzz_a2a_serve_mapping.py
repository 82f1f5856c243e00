"""Fuzz harness: a parent run's events -> A2A task updates, `adapters.a2a._serve_mapping`.

Any bytes go in, read two ways: as JSON (a list of engine events in the engine's wire shape,
read with `engine.event_from_jsonable`; unreadable items are skipped), and as a small byte program
(two bytes per event: which kind, and which message / tool call / text it names), which reaches
odd orders (deltas without starts, results before calls, terminals mid-message) from any bytes.
Each sequence is fed to `ParentTaskMapper` three ways (all at once, one event per batch, in
batches split where the input says), then concluded. Nothing may raise. A bug is also: an update
for another task, one that does not serialize, more than one terminal or anything after it,
artifact chunks out of order (`append` on the first, none on a later one, a chunk after
`lastChunk`), a status text or data part over its bound, batching that changes the artifact text
or the statuses, or updates the engine's own A2A client (`A2AEventMapper`, then
`DelegationState`) refuses or reads as different text.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from a2a.types import StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]

    from adapters.a2a._mapping import A2AEventMapper
    from adapters.a2a._serve_mapping import (
        MAX_DATA_BYTES,
        MAX_STATUS_TEXT_CHARS,
        A2AUpdate,
        ParentTaskMapper,
    )
    from engine._delegation import DelegationIdentity, DelegationState
    from engine._events import DelegationEvent, Kind
    from engine._registry import DelegationPolicy
    from engine._results import DelegationError
    from engine._wire import WireError, event_from_jsonable

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_TASK: Final = "task"
_CONTEXT: Final = "ctx"
_TERMINALS: Final = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)
_IDENTITY: Final = DelegationIdentity(
    run_id="run", delegation_id="del", agent_key="agent", agent_name="Agent", protocol="a2a"
)
#: The byte program's kinds (first byte of each pair, modulo).
_PROGRAM_KINDS: Final = (
    Kind.RUN_STARTED,
    Kind.PARENT_TEXT_START,
    Kind.PARENT_TEXT_DELTA,
    Kind.PARENT_TEXT_DELTA,
    Kind.PARENT_TEXT_END,
    Kind.PARENT_REASONING_START,
    Kind.PARENT_REASONING_DELTA,
    Kind.PARENT_REASONING_END,
    Kind.PARENT_TOOL_CALL_START,
    Kind.PARENT_TOOL_CALL_ARGS,
    Kind.PARENT_TOOL_CALL_END,
    Kind.PARENT_TOOL_CALL_RESULT,
    Kind.PARENT_CUSTOM,
    Kind.GAP,
    Kind.TEXT_DELTA,
    Kind.RUN_FINISHED,
    Kind.RUN_FAILED,
    Kind.RUN_CANCELLED,
)
_TEXTS: Final = ("a", "Hello ", "\n", "ü", "\ud800", "", "x" * 5000, '{"k": [1, 2]}', "{")
_VALUES: Final[tuple[Any, ...]] = (None, {"k": 1}, [1, "two"], "s", 10**400, "x" * 9000, 1.5)
_BATCH_MARK: Final = 0xFF


def _events(*items: dict[str, Any]) -> bytes:
    return json.dumps([{"run_id": "run", **item} for item in items]).encode()


SEEDS: list[bytes] = [
    # A whole run: reasoning, two messages, a tool call, finished.
    _events(
        {"kind": "run.started"},
        {"kind": "reasoning.start", "message_id": "r"},
        {"kind": "reasoning.delta", "message_id": "r", "delta": "plan"},
        {"kind": "reasoning.end", "message_id": "r"},
        {"kind": "text.start", "message_id": "m1"},
        {"kind": "text.delta", "message_id": "m1", "delta": "Hel"},
        {"kind": "text.delta", "message_id": "m1", "delta": "lo"},
        {"kind": "text.end", "message_id": "m1"},
        {"kind": "tool_call.start", "tool_call_id": "c", "tool_name": "search"},
        {"kind": "tool_call.args", "tool_call_id": "c", "delta": '{"q": 1}'},
        {"kind": "tool_call.end", "tool_call_id": "c"},
        {"kind": "tool_call.result", "tool_call_id": "c", "result": {"ok": True}},
        {"kind": "text.start", "message_id": "m2"},
        {"kind": "text.delta", "message_id": "m2", "delta": "Done."},
        {"kind": "run.finished"},
    ),
    # Failed and cancelled runs, terminals twice, events after them.
    _events(
        {"kind": "text.delta", "message_id": "m", "delta": "half"},
        {"kind": "run.failed", "error": {"code": "internal_error", "message": "boom"}},
        {"kind": "text.delta", "message_id": "m", "delta": "late"},
        {"kind": "run.cancelled", "text": "stop"},
    ),
    # A gap, custom and nested delegation events, an unknown kind.
    _events(
        {"kind": "stream.gap", "dropped": {"reason": "replay_gap", "count": 2}},
        {"kind": "custom", "name": "codex.x", "raw": {"a": 1}},
        {"kind": "subagent.text.delta", "delegation_id": "d", "delta": "x"},
        {"kind": "later.kind"},
        {"kind": "run.cancelled"},
    ),
    # Byte programs: open everything then finish; results before calls.
    bytes([0, 0, 1, 1, 2, 1, 3, 2, 6, 3, 8, 4, 9, 6, 11, 1, 15, 0]),
    bytes([11, 7, 9, 8, 10, 9, 2, 4, _BATCH_MARK, 2, 6, 16, 3]),
    bytes([5, 0, 6, 6, 6, 6, 6, 6, _BATCH_MARK, 14, 0, 13, 0, 17, 2]),
    b"[]",
    b"",
]

DICTIONARY: list[bytes] = [
    b'"kind"',
    b'"run_id"',
    b'"message_id"',
    b'"delta"',
    b'"tool_call_id"',
    b'"tool_name"',
    b'"args"',
    b'"result"',
    b'"text"',
    b'"text.delta"',
    b'"text.start"',
    b'"reasoning.delta"',
    b'"tool_call.args"',
    b'"tool_call.result"',
    b'"run.finished"',
    b'"run.failed"',
    b'"run.cancelled"',
    b'"stream.gap"',
    bytes([_BATCH_MARK]),
]


def fuzz_one_input(data: bytes) -> None:
    for events, splits in (_json_events(data), _program(data)):
        if not events:
            continue
        whole = _run([events])
        single = _run([[event] for event in events])
        split = _run(_split(events, splits))
        for other in (single, split):
            if _summary(other) != _summary(whole):
                raise AssertionError(
                    f"batching changed the task: {_summary(other)!r} != {_summary(whole)!r}"
                )


def _json_events(data: bytes) -> tuple[list[DelegationEvent], list[int]]:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return [], []
    if not isinstance(document, list):
        document = [document]
    events = []
    for item in document:
        try:
            events.append(event_from_jsonable(item))
        except (WireError, RecursionError):
            continue
    return events, [len(events) // 2]


def _program(data: bytes) -> tuple[list[DelegationEvent], list[int]]:
    events: list[DelegationEvent] = []
    splits: list[int] = []
    index = 0
    while index + 1 < len(data):
        op = data[index]
        if op == _BATCH_MARK:
            splits.append(len(events))
            index += 1
            continue
        arg = data[index + 1]
        index += 2
        kind = _PROGRAM_KINDS[op % len(_PROGRAM_KINDS)]
        fields: dict[str, Any] = {
            "message_id": f"m{arg % 3}",
            "tool_call_id": f"t{arg % 3}",
            "delta": _TEXTS[arg % len(_TEXTS)],
        }
        if kind == Kind.PARENT_TOOL_CALL_START:
            fields["tool_name"] = _TEXTS[arg % len(_TEXTS)] or None
        elif kind == Kind.PARENT_TOOL_CALL_ARGS and arg & 0x80:
            fields["args"], fields["delta"] = _VALUES[arg % len(_VALUES)], None
        elif kind == Kind.PARENT_TOOL_CALL_RESULT:
            fields["result"] = _VALUES[arg % len(_VALUES)]
            fields["extra"] = {"is_error": bool(arg & 1)}
        elif kind in (Kind.RUN_FINISHED, Kind.RUN_FAILED, Kind.RUN_CANCELLED):
            fields["text"] = _TEXTS[arg % len(_TEXTS)] or None
        events.append(DelegationEvent(kind=kind, run_id="run", **fields))
    return events, splits


def _split(events: list[DelegationEvent], splits: list[int]) -> list[list[DelegationEvent]]:
    batches, start = [], 0
    for at in sorted({s for s in splits if 0 < s < len(events)}):
        batches.append(events[start:at])
        start = at
    batches.append(events[start:])
    return batches


def _run(batches: list[list[DelegationEvent]]) -> list[A2AUpdate]:
    mapper = ParentTaskMapper(_TASK, _CONTEXT, clock=lambda: 1.0)
    updates: list[A2AUpdate] = []
    for batch in batches:
        updates.extend(mapper.feed(batch))
    updates.extend(mapper.conclude("canceled", "concluded by the harness"))
    if not mapper.done or mapper.conclude("failed") != []:
        raise AssertionError("conclude() did not end the task exactly once")
    _check(updates)
    _read_back(updates)
    return updates


def _check(updates: list[A2AUpdate]) -> None:
    terminals = 0
    chunks = 0
    closed = False
    for index, update in enumerate(updates):
        if update.task_id != _TASK or update.context_id != _CONTEXT:
            raise AssertionError(f"an update for another task: {update!r}")
        update.SerializeToString()
        if terminals:
            raise AssertionError(f"an update after the terminal: {update!r}")
        if isinstance(update, TaskArtifactUpdateEvent):
            if closed:
                raise AssertionError("an artifact chunk after lastChunk")
            if update.append != (chunks > 0):
                raise AssertionError(f"chunk {chunks} has append={update.append}")
            chunks += 1
            closed = update.last_chunk
            continue
        status = update.status
        if status.state in _TERMINALS:
            terminals += 1
            if chunks and not closed:
                raise AssertionError("the task ended with its text artifact still open")
            if index != len(updates) - 1:
                raise AssertionError("the terminal is not the last update")
        for part in status.message.parts:
            if part.HasField("text") and len(part.text) > MAX_STATUS_TEXT_CHARS:
                raise AssertionError(f"a status text of {len(part.text)} characters")
            if part.HasField("data"):
                value = json_format.MessageToDict(part.data)
                size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
                if size > MAX_DATA_BYTES:
                    raise AssertionError(f"a data part of {size} bytes")
    if terminals != 1:
        raise AssertionError(f"{terminals} terminal statuses")


def _read_back(updates: list[A2AUpdate]) -> None:
    """Feed the updates to the engine's own A2A client mapping, as the SDK would stream them."""
    client = A2AEventMapper(hold_text=False)
    state = DelegationState(_IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    first = Task(
        id=_TASK, context_id=_CONTEXT, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
    )
    items = [StreamResponse(task=first)]
    for update in updates:
        if isinstance(update, TaskArtifactUpdateEvent):
            items.append(StreamResponse(artifact_update=update))
        else:
            items.append(StreamResponse(status_update=update))
    text = ""
    for item in items:
        try:
            read = client.feed(item)
        except DelegationError as error:
            raise AssertionError(
                f"the engine's client refused a served update: {error!r}"
            ) from error
        for one in read:
            state.feed(one)
            if one.kind == Kind.TEXT_DELTA and one.delta:
                text += one.delta
    served = "".join(
        part.text
        for update in updates
        if isinstance(update, TaskArtifactUpdateEvent)
        for part in update.artifact.parts
    )
    if text != served:
        raise AssertionError(f"the client read {text!r}, the task served {served!r}")
    if client.terminal_state is None:
        raise AssertionError("the client saw no terminal state")


def _summary(updates: list[A2AUpdate]) -> tuple[str, list[tuple[int, str]]]:
    """What batching must not change: the artifact text and the statuses (state, text)."""
    text = ""
    statuses: list[tuple[int, str]] = []
    for update in updates:
        if isinstance(update, TaskArtifactUpdateEvent):
            text += "".join(part.text for part in update.artifact.parts)
        else:
            parts = update.status.message.parts
            statuses.append((update.status.state, "".join(p.text for p in parts)))
    return text, statuses
