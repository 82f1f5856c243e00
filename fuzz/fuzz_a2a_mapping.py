"""Fuzz harness: the A2A -> event mapping, `adapters.a2a._mapping.A2AEventMapper`.

Any bytes go in, read two ways: as JSON (one stream item, or a list of them, parsed into
`StreamResponse`s the way the a2a-sdk parses the wire, unknown fields ignored) and as binary
protobuf items separated by `---`. Each sequence is fed to one mapper, through `feed`,
`from_send_response` and, for tasks, `snapshot`. The one expected refusal is
`DelegationError(malformed_remote_payload)`; any other exception is a bug. So is an update that
breaks the contract: a kind outside `subagent.*`, another task's id, an artifact without a URI or
with content in its text, an empty text delta, an over-long failure message, an item fed twice in
a row that is not ignored the second time, updates the engine's own `DelegationState` cannot
take, more than one terminal out of that state, or a terminal status for no announced task (sent
before any item named the task, or naming none) that ends the delegation.

The same bytes are also read as the body of an event stream through the frame bound every A2A
response is read with (`adapters._remote_http.FrameBoundedStream`, a small limit, chunked as the
input says): it must give the body back unchanged, or refuse it with `FrameTooLargeError`, and it
must refuse exactly when a frame (what lies between blank lines, as the SSE spec defines them)
is over the limit, give or take the few bytes of the line ends around it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    import httpx
    from a2a.types import StreamResponse
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]
    from google.protobuf import message as proto_message  # type: ignore[import-untyped, unused-ignore]

    from adapters._remote_http import FrameBoundedStream, FrameTooLargeError
    from adapters.a2a._mapping import MAX_ERROR_CHARS, A2AEventMapper
    from engine._delegation import DelegationIdentity, DelegationState
    from engine._events import Kind
    from engine._registry import DelegationPolicy
    from engine._results import DelegationError, ErrorCode
    from engine._targets import TargetUpdate

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_BINARY_SEPARATOR: Final = b"---"
_IDENTITY: Final = DelegationIdentity(
    run_id="run", delegation_id="del", agent_key="agent", agent_name="Agent", protocol="a2a"
)


def _items(*items: dict[str, Any]) -> bytes:
    return json.dumps(list(items)).encode()


_TASK: Final = {"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}


def _status(state: str, text: str = "", task_id: str = "t") -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if text:
        status["message"] = {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    return {"statusUpdate": {"taskId": task_id, "contextId": "c", "status": status}}


def _chunk(artifact_id: str, name: str, part: dict[str, Any], **flags: bool) -> dict[str, Any]:
    artifact = {"artifactId": artifact_id, "name": name, "parts": [part]}
    return {"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": artifact, **flags}}


SEEDS: list[bytes] = [
    # A streaming happy path: task, status, assistant text, a file artifact, completed.
    _items(
        _TASK,
        _status("TASK_STATE_WORKING", "Searching"),
        _chunk("out", "assistant-output", {"text": "Hel"}),
        _chunk("out", "", {"text": "lo"}, append=True, lastChunk=True),
        _chunk("f", "notes.md", {"raw": "aGVsbG8=", "mediaType": "text/markdown"}),
        _chunk("f", "", {"data": {"k": [1, None]}}, append=True),
        _status("TASK_STATE_COMPLETED", "done"),
    ),
    # Duplicates, a foreign task, and a terminal before any task.
    _items(
        _status("TASK_STATE_FAILED", "boom"),
        _status("TASK_STATE_FAILED", "boom"),
        _status("TASK_STATE_COMPLETED", task_id="other"),
    ),
    # Input required, then a snapshot with history, artifacts and a stale timestamp.
    _items(
        _status("TASK_STATE_INPUT_REQUIRED", "Which year?"),
        {
            "task": {
                "id": "t",
                "status": {"state": "TASK_STATE_WORKING", "timestamp": "1970-01-01T00:00:01Z"},
                "artifacts": [{"artifactId": "out", "name": "response", "parts": [{"text": "x"}]}],
                "history": [{"messageId": "u", "role": "ROLE_USER", "parts": [{"text": "q"}]}],
            }
        },
        _status("TASK_STATE_REJECTED"),
    ),
    # A direct reply and a user echo.
    _items(
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "Hi"}]}},
        {"message": {"messageId": "u", "role": "ROLE_USER", "parts": [{"text": "q"}]}},
    ),
    # Unknown states, empty items, missing artifact ids.
    _items(
        {"statusUpdate": {"taskId": "t", "status": {"state": 42}}},
        {},
        {"artifactUpdate": {"taskId": "t", "artifact": {"parts": [{"text": "x"}]}}},
        {"statusUpdate": {"taskId": "t"}},
    ),
    # Binary protobuf: a task, then a completed status update.
    StreamResponse(task={"id": "t", "status": {"state": 2}}).SerializeToString()
    + _BINARY_SEPARATOR
    + StreamResponse(status_update={"task_id": "t", "status": {"state": 3}}).SerializeToString(),
    b'{"task":{"id":"t"}}',
    # An end claimed before the task is announced, for it and for another task, then the task
    # streams and ends for real.
    _items(
        _status("TASK_STATE_COMPLETED", "too early"),
        _status("TASK_STATE_FAILED", "not yours", task_id="ghost"),
        _status("TASK_STATE_CANCELED", task_id=""),
        _TASK,
        _status("TASK_STATE_WORKING", "Searching"),
        _chunk("out", "assistant-output", {"text": "real"}, lastChunk=True),
        _status("TASK_STATE_REJECTED", task_id=""),
        _status("TASK_STATE_COMPLETED", "the real end"),
    ),
    # A frame over the limit between small ones, with every kind of SSE line end.
    b"data: 1\r\n\r\ndata: " + b"x" * 200 + b"\n\ndata: 2\r\rdata: 3\n\r\n",
    b'[{"statusU\\ud800pdate":{}},{"statusUpdate":"x"},{"statusUpdate":{"status":{"state":5.5}}},'
    b'{"statusUpdate":{"status":{"state":1e999}}}]',
    b"",
]

DICTIONARY: list[bytes] = [
    b'"task"',
    b'"message"',
    b'"statusUpdate"',
    b'"artifactUpdate"',
    b'"taskId"',
    b'"contextId"',
    b'"status"',
    b'"state"',
    b'"artifact"',
    b'"artifactId"',
    b'"parts"',
    b'"text"',
    b'"raw"',
    b'"url"',
    b'"data"',
    b'"append"',
    b'"lastChunk"',
    b'"messageId"',
    b'"role"',
    b'"timestamp"',
    b'"TASK_STATE_COMPLETED"',
    b'"TASK_STATE_INPUT_REQUIRED"',
    b'"ROLE_AGENT"',
    b'"assistant-output"',
    b'"TASK_STATE_FAILED"',
    b"\r\n\r\n",
    b"\n\n",
    b"\r\r",
    b"data: ",
    _BINARY_SEPARATOR,
]


def fuzz_one_input(data: bytes) -> None:
    for items in (_json_items(data), _binary_items(data)):
        # Holding streamed text back (as a streaming session does) merges deltas, never changes
        # the text the remote sent.
        plain = _run(items, hold_text=False)
        held = _run(items, hold_text=True)
        if held != plain:
            raise AssertionError(f"holding text changed it: {held!r} != {plain!r}")
    _check_frames(data)


#: The frame limit the bytes are read with, and the line-end bytes a frame's count may differ
#: by from its content (its last line end and the blank line, split across reads or not).
_FRAME_LIMIT: Final = 64
_LINE_END_SLACK: Final = 6
_LINE: Final = re.compile(rb"([^\r\n]*)(\r\n|\r|\n)")


def _frame_sizes(data: bytes) -> list[int]:
    """The bytes of each frame of an event stream before its blank line (the last one whether
    ended or not): a plain reading of the SSE spec's line rules, one line at a time."""
    sizes, size, pos = [], 0, 0
    for line in _LINE.finditer(data):
        pos = line.end()
        if not line.group(1):  # an empty line ends the frame (if any)
            if size:
                sizes.append(size)
            size = 0
        else:
            size += len(line.group(0))
    sizes.append(size + len(data) - pos)
    return sizes


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def _read_bounded(chunks: list[bytes], content_type: str) -> bytes:
    """Read a `FrameBoundedStream` to its end without an event loop (nothing in it waits)."""
    stream = FrameBoundedStream(_Chunks(chunks), limit=_FRAME_LIMIT, content_type=content_type)
    reader = stream.__aiter__()
    out = []
    try:
        while True:
            try:
                reader.__anext__().send(None)  # type: ignore[attr-defined]
            except StopIteration as step:
                out.append(step.value)
            except StopAsyncIteration:
                return b"".join(out)
    finally:
        try:
            reader.aclose().send(None)  # type: ignore[attr-defined]
        except StopIteration:
            pass


def _check_frames(data: bytes) -> None:
    step = 1 + (data[0] % 13 if data else 0)
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    for content_type, sizes in (
        ("text/event-stream", _frame_sizes(data)),
        ("application/json", [len(data)]),
    ):
        slack = _LINE_END_SLACK if content_type == "text/event-stream" else 0
        try:
            body = _read_bounded(chunks, content_type)
        except FrameTooLargeError as refused:
            if max(sizes) + slack <= _FRAME_LIMIT:
                raise AssertionError(f"frames of {sizes} bytes refused at {_FRAME_LIMIT}") from None
            if refused.limit != _FRAME_LIMIT or refused.content_type != content_type:
                raise AssertionError(
                    f"the refusal misnames its limit or type: {refused!r}"
                ) from None
            continue
        if body != data:
            raise AssertionError("the bounded stream changed the body")
        if max(sizes) > _FRAME_LIMIT:
            raise AssertionError(f"a frame of {max(sizes)} bytes passed a {_FRAME_LIMIT} limit")


def _json_items(data: bytes) -> list[StreamResponse]:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return []
    documents = document if isinstance(document, list) else [document]
    items = []
    for one in documents:
        try:
            items.append(json_format.ParseDict(one, StreamResponse(), ignore_unknown_fields=True))
        except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError):
            continue
        except (SystemError, ArithmeticError):
            # protobuf's own parser on a lone surrogate in a key, or an enum of 1e999: the SDK
            # parses the wire the same way, so such items never reach the mapper.
            continue
    return items


def _binary_items(data: bytes) -> list[StreamResponse]:
    items = []
    for chunk in data.split(_BINARY_SEPARATOR):
        try:
            items.append(StreamResponse.FromString(chunk))
        except proto_message.DecodeError:
            continue
    return items


def _run(items: list[StreamResponse], *, hold_text: bool) -> dict[str, str]:
    """Feed `items`; the text each message received (released text included)."""
    mapper = A2AEventMapper(hold_text=hold_text)
    state = DelegationState(_IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    texts: dict[str, str] = {}

    terminals = 0

    def take(updates: list[TargetUpdate]) -> None:
        nonlocal terminals
        for update in updates:
            _check(mapper, update)
            terminals += len(_terminals(state.feed(update)))
            if terminals > 1:
                raise AssertionError("the delegation got more than one terminal")
            if update.kind == Kind.TEXT_DELTA and update.message_id and update.delta:
                texts[update.message_id] = texts.get(update.message_id, "") + update.delta

    for item in items:
        for call in (mapper.feed, mapper.from_send_response):
            claim = _unannounced_terminal(mapper, item)
            ended = mapper.terminal_state
            updates = _call(call, item)
            if updates is None:
                continue
            if claim and (mapper.terminal_state != ended or _terminals(updates)):
                raise AssertionError(f"an end claimed for no announced task ended it: {item!r}")
            take(updates)
            again = _call(call, item)
            if again:
                raise AssertionError(f"an item fed twice in a row was not ignored: {again!r}")
        if item.WhichOneof("payload") == "task":
            take(_call(mapper.snapshot, item.task) or [])
    take(mapper.release())
    if mapper.holding:
        raise AssertionError("text is still held after release()")
    return texts


_TERMINAL_KINDS: Final = frozenset({Kind.FINISHED, Kind.FAILED, Kind.CANCELLED})
_TERMINAL_STATES: Final = frozenset({3, 4, 5, 7})  # COMPLETED, FAILED, CANCELED, REJECTED


def _terminals(items: list[Any]) -> list[Any]:
    return [item for item in items if item.kind in _TERMINAL_KINDS]


def _unannounced_terminal(mapper: A2AEventMapper, item: StreamResponse) -> bool:
    """A terminal status update while no task was announced, or naming no task."""
    if item.WhichOneof("payload") != "status_update":
        return False
    event = item.status_update
    terminal = event.HasField("status") and event.status.state in _TERMINAL_STATES
    return terminal and (mapper.task_id is None or not event.task_id)


def _call(call: Any, item: Any) -> list[TargetUpdate] | None:
    try:
        updates: list[TargetUpdate] = call(item)
    except DelegationError as error:
        if error.code != ErrorCode.MALFORMED_REMOTE_PAYLOAD:
            raise AssertionError(f"unexpected refusal {error!r}") from error
        return None
    if not isinstance(updates, list):
        raise AssertionError(f"{call.__name__} returned {type(updates).__name__}, not a list")
    return updates


def _check(mapper: A2AEventMapper, update: Any) -> None:
    if not isinstance(update, TargetUpdate) or not update.kind.startswith("subagent."):
        raise AssertionError(f"not a subagent TargetUpdate: {update!r}")
    if update.remote_task_id not in (None, mapper.task_id):
        raise AssertionError(f"an update names another task: {update!r}")
    if update.kind == Kind.ARTIFACT:
        if update.artifact is None or not update.artifact.uri or update.artifact_bytes < 0:
            raise AssertionError(f"an artifact without a reference or size: {update!r}")
        if update.text is not None or update.delta is not None:
            raise AssertionError(f"artifact content leaked into text: {update!r}")
    if update.kind == Kind.TEXT_DELTA and (not update.delta or not update.message_id):
        raise AssertionError(f"an empty or unowned text delta: {update!r}")
    failed = update.kind == Kind.FAILED
    if failed and (update.error is None or len(update.error.message) > MAX_ERROR_CHARS):
        raise AssertionError(f"a failure without a bounded error: {update!r}")
