"""Fuzz harness: the A2A -> event mapping, `adapters.a2a._mapping.A2AEventMapper`.

Any bytes go in, read two ways: as JSON (one stream item, or a list of them, parsed into
`StreamResponse`s the way the a2a-sdk parses the wire, unknown fields ignored) and as binary
protobuf items separated by `---`. Each sequence is fed to one mapper, through `feed`,
`from_send_response` and, for tasks, `snapshot`. The one expected refusal is
`DelegationError(malformed_remote_payload)`; any other exception is a bug. So is an update that
breaks the contract: a kind outside `subagent.*`, another task's id, an artifact without a URI or
with content in its text, an empty text delta, an over-long failure message, an item fed twice in
a row that is not ignored the second time, or updates the engine's own `DelegationState` cannot
take.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from a2a.types import StreamResponse
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]
    from google.protobuf import message as proto_message  # type: ignore[import-untyped, unused-ignore]

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

    def take(updates: list[TargetUpdate]) -> None:
        for update in updates:
            _check(mapper, update)
            state.feed(update)
            if update.kind == Kind.TEXT_DELTA and update.message_id and update.delta:
                texts[update.message_id] = texts.get(update.message_id, "") + update.delta

    for item in items:
        for call in (mapper.feed, mapper.from_send_response):
            updates = _call(call, item)
            if updates is None:
                continue
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
