"""Fuzz harness: the remote AG-UI -> update mapping, `adapters.agui._remote.AguiRemoteMapper`.

Any bytes go in, read two ways: as the raw SSE body of a remote's response (fed whole, and cut
in three pieces, which must give the same updates and the same error), and, when they are JSON,
as events (a list of them, or one) framed as SSE by this harness. Each body is fed to one mapper,
then `end()`; a suspended mapper is resumed and fed the body again. The mapper may never raise;
its `error` may only be `malformed_remote_payload` or `stream_interrupted`. Anything else is a
bug, and so is an update that breaks the contract: a kind outside `subagent.*`, more than one
start or terminal or anything after the terminal, a terminal together with an error, an empty
or unowned text delta, a tool-call update without its id, an unbounded failure message, a
payload in `raw` larger than the carrying limit, or updates the engine's own `DelegationState`
cannot take.

Two hostile variants of every body: read with a tiny frame limit (`_SMALL_FRAME_BYTES`), it must
give a prefix of the same updates and, where it stops early, a typed error naming the byte
limit; and, for JSON events, with every frame sent twice in a row, which must keep the contract
above and end as the single stream did (a retransmitted lifecycle event changes nothing).
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from adapters.agui._remote import MAX_CARRIED_JSON_BYTES, MAX_ERROR_CHARS, AguiRemoteMapper
    from engine._delegation import DelegationIdentity, DelegationState
    from engine._events import Kind
    from engine._registry import DelegationPolicy
    from engine._results import DelegationError, ErrorCode
    from engine._targets import TargetUpdate

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_IDENTITY: Final = DelegationIdentity(
    run_id="run", delegation_id="del", agent_key="agent", agent_name="Agent", protocol="agui"
)
_ERRORS: Final = frozenset({ErrorCode.MALFORMED_REMOTE_PAYLOAD, ErrorCode.STREAM_INTERRUPTED})
_TOOL_KINDS: Final = frozenset(
    {Kind.TOOL_CALL_START, Kind.TOOL_CALL_ARGS, Kind.TOOL_CALL_END, Kind.TOOL_CALL_RESULT}
)
#: JSON of a carried payload may be this much larger than the limit (the marker itself).
_MAX_RAW_BYTES: Final = MAX_CARRIED_JSON_BYTES * 2 + 4096

#: A frame limit small enough that the seeds and the fuzzer's inputs pass it.
_SMALL_FRAME_BYTES: Final = 64

_STARTED: Final = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
_FINISHED: Final = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def _events(*events: Any) -> bytes:
    return json.dumps(list(events)).encode()


def _sse(*events: Any, end: str = "\n") -> bytes:
    return "".join(f"data: {json.dumps(e)}{end}{end}" for e in events).encode()


SEEDS: list[bytes] = [
    # A whole run as JSON events: text, reasoning, a tool call, custom payloads, a result.
    _events(
        _STARTED,
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hi"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "hmm"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x", "content": "ok"},
        {"type": "CUSTOM", "name": "n", "value": {"a": [1, None]}},
        {"type": "STATE_SNAPSHOT", "snapshot": {}},
        {**_FINISHED, "result": {"k": 1}},
    ),
    # Chunks, remote subagents, an interrupt.
    _events(
        _STARTED,
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s", "name": "n"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "a", "subagentRunId": "s"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "b"},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s"},
        {**_FINISHED, "outcome": {"type": "interrupt", "interrupts": [{"id": "i", "reason": "r"}]}},
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r2"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r2", "outcome": {"type": "cancelled"}},
    ),
    # Malformed: content before the start, content for an unopened message, an error.
    _events({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}, _STARTED),
    _events(_STARTED, {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "x"}),
    _events({"type": "RUN_ERROR", "message": "boom", "code": "E"}),
    # Early terminals: RUN_FINISHED or RUN_ERROR before RUN_STARTED, then a whole run.
    _events(_FINISHED, _STARTED, {"type": "CUSTOM", "name": "n", "value": 1}, _FINISHED),
    _events({"type": "RUN_ERROR", "message": "early"}, _STARTED, _FINISHED),
    # Duplicated frames; terminals naming another run or thread.
    _sse(_STARTED, _STARTED, {"type": "TEXT_MESSAGE_START", "messageId": "m"})
    + _sse({"type": "TEXT_MESSAGE_START", "messageId": "m"}, _FINISHED, _FINISHED),
    _events(_STARTED, {**_FINISHED, "runId": "other"}),
    _events(_STARTED, {**_FINISHED, "threadId": "other"}),
    # Oversized: one frame far over the limit (4-byte characters), a cut inside a frame.
    _sse(_STARTED) + b'data: {"type":"CUSTOM","name":"n","value":"' + "\U0001f600".encode() * 64,
    _sse(_STARTED) + b'data: {"type":"TEXT_MESSAGE_START","mess',
    # Raw SSE bodies: CRLF framing with comments and ids, a bad frame, a cut-off frame.
    b": hi\r\nid: 1\r\n" + _sse(_STARTED, _FINISHED, end="\r\n"),
    _sse(_STARTED) + b"data: {nope\n\n" + _sse(_FINISHED),
    _sse(_STARTED) + b'data: {"type":"TEXT_MESSAGE_START","messageId":"\\ud800"}',
    b"\xef\xbb\xbfdata: [1]\n\ndata: \xff\n\n",
    b"",
]

DICTIONARY: list[bytes] = [
    b"data: ",
    b"\n\n",
    b"\r\n",
    b'"type"',
    b'"RUN_STARTED"',
    b'"RUN_FINISHED"',
    b'"RUN_ERROR"',
    b'"TEXT_MESSAGE_START"',
    b'"TEXT_MESSAGE_CONTENT"',
    b'"TEXT_MESSAGE_END"',
    b'"TEXT_MESSAGE_CHUNK"',
    b'"TOOL_CALL_START"',
    b'"TOOL_CALL_ARGS"',
    b'"TOOL_CALL_CHUNK"',
    b'"REASONING_MESSAGE_START"',
    b'"CUSTOM"',
    b'"SUBAGENT_STARTED"',
    b'"messageId"',
    b'"toolCallId"',
    b'"toolCallName"',
    b'"delta"',
    b'"threadId"',
    b'"runId"',
    b'"subagentRunId"',
    b'"outcome"',
    b'"interrupt"',
    b'"interrupts"',
]


def fuzz_one_input(data: bytes) -> None:
    _run(data)
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return
    events = document if isinstance(document, list) else [document]
    try:
        frames = [
            f"data: {json.dumps(event, allow_nan=False)}\n\n".encode("utf-8", "surrogatepass")
            for event in events
        ]
    except (ValueError, RecursionError):
        return
    once, once_error = _run(b"".join(frames))
    twice, twice_error = _run(b"".join(frame * 2 for frame in frames))
    # A stream that ended cleanly ends the same way with every frame sent twice.
    ended = once_error is None and bool(once) and once[-1].kind in Kind.DELEGATION_TERMINALS
    if ended and (twice_error is not None or not twice or twice[-1].kind != once[-1].kind):
        raise AssertionError(f"every frame twice ended otherwise: {twice_error!r} {twice!r}")


def _run(body: bytes) -> tuple[list[TargetUpdate], DelegationError | None]:
    """`body` mapped whole, cut in three, and with a tiny frame limit; its updates and error."""
    whole = AguiRemoteMapper(max_frame_bytes=1 << 16)
    updates = whole.feed(body) + whole.end()
    cut = AguiRemoteMapper(max_frame_bytes=1 << 16)
    third = max(1, len(body) // 3)
    pieces = cut.feed(body[:third]) + cut.feed(body[third : 2 * third])
    pieces += cut.feed(body[2 * third :]) + cut.end()
    if pieces != updates or cut.error != whole.error:
        raise AssertionError(f"cutting the body changed the mapping: {updates!r} != {pieces!r}")
    small = AguiRemoteMapper(max_frame_bytes=_SMALL_FRAME_BYTES)
    bounded = small.feed(body) + small.end()
    small_cut = AguiRemoteMapper(max_frame_bytes=_SMALL_FRAME_BYTES)
    small_pieces = [u for i in range(0, len(body), 7) for u in small_cut.feed(body[i : i + 7])]
    small_pieces += small_cut.end()
    if small_pieces != bounded or small_cut.error != small.error:
        raise AssertionError(f"cutting changed the bounded mapping: {small_cut.error!r}")
    if small.error != whole.error or bounded != updates:
        # A smaller limit may only stop earlier, with a typed error that names it.
        if bounded != updates[: len(bounded)]:
            raise AssertionError(f"a smaller frame limit changed the mapping: {bounded!r}")
        if small.error is None or (
            f"longer than {_SMALL_FRAME_BYTES + 16} bytes" not in small.error.message
            and f"longer than {_SMALL_FRAME_BYTES} bytes" not in small.error.message
            and small.error != whole.error
        ):
            raise AssertionError(f"a smaller frame limit stopped without saying so: {small.error}")
    error = whole.error
    if whole.suspended:
        whole.resume()
        updates += whole.feed(body) + whole.end()
    _check(whole, updates)
    return updates, error


def _check(mapper: AguiRemoteMapper, updates: list[TargetUpdate]) -> None:
    if mapper.error is not None and mapper.error.code not in _ERRORS:
        raise AssertionError(f"unexpected error {mapper.error!r}")
    if sum(u.kind == Kind.STARTED for u in updates) > 1:
        raise AssertionError(f"more than one start: {updates!r}")
    terminals = [i for i, u in enumerate(updates) if u.kind in Kind.DELEGATION_TERMINALS]
    if len(terminals) > 1 or (terminals and terminals[0] != len(updates) - 1):
        raise AssertionError(f"more than one terminal, or updates after it: {updates!r}")
    if terminals and mapper.error is not None:
        raise AssertionError(f"a terminal and an error: {mapper.error!r}")
    state = DelegationState(_IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    for update in updates:
        if not isinstance(update, TargetUpdate) or not update.kind.startswith("subagent."):
            raise AssertionError(f"not a subagent TargetUpdate: {update!r}")
        if update.kind in (Kind.TEXT_DELTA, Kind.REASONING_DELTA) and not (
            update.delta and update.message_id
        ):
            raise AssertionError(f"an empty or unowned delta: {update!r}")
        if update.kind in _TOOL_KINDS and not update.tool_call_id:
            raise AssertionError(f"a tool-call update without its id: {update!r}")
        if update.kind == Kind.FAILED and (
            update.error is None or len(update.error.message) > MAX_ERROR_CHARS
        ):
            raise AssertionError(f"a failure without a bounded error: {update!r}")
        if update.raw is not None:
            size = len(json.dumps(update.raw).encode())
            if size > _MAX_RAW_BYTES:
                raise AssertionError(f"raw carries {size} bytes")
        state.feed(update)
        if update.kind == Kind.INPUT_REQUIRED:
            state.resume()
