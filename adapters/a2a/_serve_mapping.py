"""Where a parent run becomes an A2A task: the served side of `subagent-engine a2a-serve` (sans-IO).

`ParentTaskMapper` translates the journal events of one run, whose parent agent (Codex, Claude
Code, the scripted parent) is served as an A2A 1.0 agent, into the a2a-sdk updates of the one A2A
task that stands for that run: `TaskStatusUpdateEvent`s and `TaskArtifactUpdateEvent`s, ready to be
enqueued on the SDK's event queue. It performs no I/O, never awaits and imports no Trio or asyncio:
`adapters.a2a.serving` moves the events from the run's Trio thread to the SDK's asyncio loop and
calls it. It is the mirror of `adapters.a2a._mapping` (what a remote A2A agent says -> engine
events) and must stay readable by it: what this module writes, the engine's own A2A client reads
without a `malformed_remote_payload` (the fuzz harness checks exactly that).

Theory of operation. Feed it the events of the run in journal order, in batches (`feed`); it
returns the updates to publish, in order. Which events become what, and why:

- `run.started` -> a `working` status (no message).
- The parent's assistant text (`text.start|delta|end`) -> chunks of one artifact named
  `assistant-output` (what the engine's client, and A2A agents generally, stream as the agent's
  output). Its first chunk has `append=false`, every later one `append=true`; the text deltas of
  one `feed` call are merged into one chunk (text is merged, never reordered or lost), and the
  text of consecutive messages is separated by a blank line. `lastChunk=true` comes on an empty
  closing chunk when the task ends, since only then is it known that no more text follows. Each
  chunk's artifact metadata numbers it (`{"subagentEngine": {"chunk": n}}`): the same text
  streamed twice in a row must not look like a duplicate delivery, which clients drop.
- Reasoning (`reasoning.*`) -> one `working` status per reasoning message when it ends (or each
  time its text passes `MAX_STATUS_TEXT_CHARS`), the text in the status message, whose metadata
  says `{"subagentEngine": {"kind": "reasoning"}}`. A2A has no reasoning type; a status message
  is what agents use for intermediate thoughts, and a whole thought per status (not a status per
  token) keeps a client's status list readable and the task store small.
- Tool calls -> a `working` status when the call's arguments are complete (`tool_call.end`, or
  its result if the end never came) and one when its result arrives. The message has a short
  text (`Calling <tool> (<id>)`, `<tool> returned (<id>)`) and a data part with the structured
  call (`{"kind": "tool_call", "toolCallId", "toolName", "args"}` or `{"kind": "tool_result",
  "toolCallId", "toolName", "result", "isError"}`); its metadata names the kind as for reasoning.
  Structured content belongs in a data part (any A2A client can read it; the engine's client
  carries it as `status_data`). A data part stays within `MAX_DATA_BYTES` as JSON (what the
  engine's client carries): arguments or a result that do not fit are replaced by
  `{"omitted": "too_large", "bytes": n}`, ones that are not JSON by `{"omitted": "not_json"}`.
- `stream.gap` (journal entries the reader could not get) -> a `working` status with a
  `{"kind": "stream.gap", ...}` data part, so a client knows that something is missing.
- `run.finished` -> `completed`, the status message carrying the final text: the run's own
  (a CLI's final result) or else the text of the parent's last assistant message.
  `run.failed` -> `failed` with the reason; `run.cancelled` -> `canceled` with the reason.
- `custom` named `parent.status` (`Kind.PARENT_STATUS_NAME`: the parent's status line, such as
  a CLI retrying its model request) -> a `working` status with its text, metadata kind `status`.
- Everything else (other `custom`, the run's own delegations' `subagent.*` events, `stream.dropped`)
  -> nothing: they are the parent's internals, not its answer.

A question the parent asks whoever sent the task (`ask_requester`, see `adapters.a2a.serving`)
is not a journal event this mapper reads: the server calls `interrupt(question)` (an
`input-required` status whose message is the question, metadata kind `question`) and, when the
answer came or the wait ended, `resume(note)` (`working` again). A question one of the run's
own delegations asks (`subagent.input_required` carrying an engine `Question`) is surfaced the
same way by `ask(question)`: the status (`input-required`, or `auth-required` for a question
about credentials) has the question's text and a data part with who asks and how an answer
must look (`question_data`: `kind` `question`, `questionId`, `delegationId`, `agentKey`,
`agentName`, `lineage`, `asker`, `reason`, `responseSchema`, `authUrl`, `askedAt`,
`expiresAt`), so that a client can answer with the right data and an engine that delegated
to this agent keeps the lineage (`adapters.a2a._mapping` reads it back).

Exactly one terminal status is written, and nothing after it: `conclude(state, reason)` ends the
task when the run cannot (its thread died, a cancel that was not confirmed in time) and is a no-op
once the task ended. Texts that go into a status message are cut to `MAX_STATUS_TEXT_CHARS`;
lone surrogates (not encodable as UTF-8, so not writable into a protobuf string) become U+FFFD.
Ids are derived from the task id and timestamps come from the injected clock, so the output is
a pure function of the input.
"""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    json_format,
    struct_pb2,
)

from engine import DelegationEvent, Kind, Question, QuestionReason

__all__ = [
    "ASSISTANT_OUTPUT",
    "MAX_DATA_BYTES",
    "MAX_STATUS_TEXT_CHARS",
    "METADATA_KEY",
    "QUESTION_KIND",
    "A2AUpdate",
    "ParentTaskMapper",
    "question_data",
]

#: The name of the artifact that carries the parent's assistant text.
ASSISTANT_OUTPUT: Final = "assistant-output"
#: The metadata key under which this mapper says what a status is (`{"kind": ...}`) and numbers
#: a chunk: camelCase like every field name of A2A's JSON serialization, so that a client
#: checking the payload's field names finds none in snake_case.
METADATA_KEY: Final = "subagentEngine"
#: A data part's value larger than this (as JSON) is replaced by a marker. Matches what the
#: engine's A2A client carries (`adapters.a2a._mapping.MAX_CARRIED_JSON_BYTES`).
MAX_DATA_BYTES: Final = 4096
#: The `kind` of a status that asks (its metadata and its question's data part say so).
QUESTION_KIND: Final = "question"
#: A question's data part larger than this (as JSON) goes without its `responseSchema` (the
#: engine keeps schemas up to 64 Ki characters; this leaves room for the rest).
MAX_QUESTION_DATA_BYTES: Final = 80 * 1024
#: A question's lineage longer than this is cut (the ids nearest the asker are kept).
MAX_LINEAGE: Final = 64
#: Ids and names in a data part are cut to this many characters.
MAX_DATA_ID_CHARS: Final = 256
#: A status message's text is cut to this many characters (the artifact has the whole text).
MAX_STATUS_TEXT_CHARS: Final = 16_000
#: Tool calls remembered (for their names and whether their call was published).
TRACKED_TOOL_CALLS: Final = 1024
#: Between the text of two assistant messages in the one `assistant-output` artifact.
MESSAGE_SEPARATOR: Final = "\n\n"

#: The latest time a protobuf Timestamp holds (9999-12-31T23:59:59Z).
_MAX_SECONDS: Final = 253402300799.0

_SURROGATE: Final = re.compile("[\ud800-\udfff]")

A2AUpdate = TaskStatusUpdateEvent | TaskArtifactUpdateEvent

#: Terminal states by name, as `conclude()` takes them.
_TERMINAL_STATES: Final[dict[str, int]] = {
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}
_RUN_TERMINALS: Final = {
    Kind.RUN_FINISHED: "completed",
    Kind.RUN_FAILED: "failed",
    Kind.RUN_CANCELLED: "canceled",
}
_DEFAULT_REASONS: Final = {
    "failed": "The parent agent failed.",
    "canceled": "The task was cancelled.",
}


class _ToolCall:
    __slots__ = ("args", "deltas", "has_args", "name", "published")

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.args: Any = None
        self.has_args = False
        self.deltas: list[str] = []
        self.published = False


class ParentTaskMapper:
    """One A2A task's view of one parent run: engine events in, a2a-sdk task updates out.

    `feed(events)` maps one batch (merging its text deltas); `conclude(state, reason)` ends the
    task if the run did not; `done` says whether the terminal status was written and
    `terminal_state` which one (`completed`, `failed`, `canceled`).
    """

    def __init__(
        self,
        task_id: str,
        context_id: str,
        *,
        clock: Callable[[], float],
        artifact_name: str = ASSISTANT_OUTPUT,
    ) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.artifact_name = artifact_name
        self.artifact_id = f"{task_id}-{artifact_name}"
        self.terminal_state: str | None = None
        self._clock = clock
        self._message_ids = 0
        self._artifact_open = False  # a first chunk was written
        self._chunks = 0
        self._pending_text: list[str] = []  # deltas of this batch, not yet written
        self._text_message: str | None = None  # the message the last delta belonged to
        self._message_text: dict[str, list[str]] = {}  # open assistant messages
        self._last_message_text: str | None = None
        self._reasoning: dict[str, list[str]] = {}
        self._reasoning_chars: dict[str, int] = {}
        self._tools: OrderedDict[str, _ToolCall] = OrderedDict()
        self._started = False

    @property
    def done(self) -> bool:
        return self.terminal_state is not None

    # -- input --------------------------------------------------------------------------

    def feed(self, events: Iterable[DelegationEvent]) -> list[A2AUpdate]:
        """The updates for a batch of the run's events, in order; nothing once `done`."""
        out: list[A2AUpdate] = []
        for event in events:
            if self.done:
                break
            self._event(event, out)
        if not self.done:
            self._flush_text(out)
        return out

    def conclude(self, state: str, reason: str | None = None) -> list[A2AUpdate]:
        """End the task in `state` (`completed`, `failed` or `canceled`) unless it has ended:
        open reasoning and text are written first, then the closing chunk and the terminal."""
        if self.done:
            return []
        if state not in _TERMINAL_STATES:
            raise ValueError(f"not a terminal state: {state!r}")
        out: list[A2AUpdate] = []
        for message_id in list(self._reasoning):
            self._flush_reasoning(message_id, out)
        self._flush_text(out)
        if self._artifact_open:
            out.append(self._chunk("", append=True, last_chunk=True))
        text = reason or None
        if state == "completed":
            text = text or self._final_text()
        else:
            text = text or _DEFAULT_REASONS[state]
        out.append(self._status(_TERMINAL_STATES[state], text))
        self.terminal_state = state
        return out

    def interrupt(self, question: str) -> list[A2AUpdate]:
        """The task turns `input-required`, asking `question` (the parent asked whoever sent
        the task): open reasoning and text are written first; nothing once `done`."""
        if self.done:
            return []
        out: list[A2AUpdate] = []
        for message_id in list(self._reasoning):
            self._flush_reasoning(message_id, out)
        self._flush_text(out)
        out.append(self._status(TaskState.TASK_STATE_INPUT_REQUIRED, question, kind="question"))
        return out

    def ask(self, question: Question, *, refused: str | None = None) -> list[A2AUpdate]:
        """The task turns `input-required` (`auth-required` for credentials) for a question of
        one of the run's delegations: its text, and its `question_data` as a data part. With
        `refused`, the status says first why the last answer was not taken (the question is
        still open). Nothing once `done`."""
        if self.done:
            return []
        out: list[A2AUpdate] = []
        for message_id in list(self._reasoning):
            self._flush_reasoning(message_id, out)
        self._flush_text(out)
        text = question.text or f"{question.agent_name or question.agent_key} asks for input."
        if refused:
            text = f"The answer was not accepted: {refused}\n\n{text}"
        state = (
            TaskState.TASK_STATE_AUTH_REQUIRED
            if question.reason == QuestionReason.AUTH
            else TaskState.TASK_STATE_INPUT_REQUIRED
        )
        status = self._status(state, text, kind=QUESTION_KIND)
        status.status.message.parts.append(
            Part(data=json_format.ParseDict(question_data(question), struct_pb2.Value()))
        )
        out.append(status)
        return out

    def resume(self, note: str | None = None) -> list[A2AUpdate]:
        """The task is `working` again (answered, or its wait ended: `note` says so)."""
        return [] if self.done else [self._status(TaskState.TASK_STATE_WORKING, note)]

    # -- one event ----------------------------------------------------------------------

    def _event(self, event: DelegationEvent, out: list[A2AUpdate]) -> None:
        kind = event.kind
        if kind == Kind.PARENT_TEXT_START:
            self._message_text.setdefault(event.message_id or "", [])
        elif kind == Kind.PARENT_TEXT_DELTA:
            self._text_delta(event)
        elif kind == Kind.PARENT_TEXT_END:
            parts = self._message_text.pop(event.message_id or "", None)
            if parts:
                self._last_message_text = "".join(parts)
        elif kind in (Kind.PARENT_REASONING_START, Kind.PARENT_REASONING_DELTA):
            self._reasoning_delta(event, out)
        elif kind == Kind.PARENT_REASONING_END:
            self._flush_reasoning(event.message_id or "", out)
        elif kind == Kind.PARENT_TOOL_CALL_START:
            call = self._tool(event.tool_call_id)
            call.name = event.tool_name or call.name
        elif kind == Kind.PARENT_TOOL_CALL_ARGS:
            self._tool_args(event)
        elif kind == Kind.PARENT_TOOL_CALL_END:
            self._publish_call(event.tool_call_id or "", out)
        elif kind == Kind.PARENT_TOOL_CALL_RESULT:
            self._tool_result(event, out)
        elif kind == Kind.RUN_STARTED:
            if not self._started:
                self._started = True
                self._flush_text(out)
                out.append(self._status(TaskState.TASK_STATE_WORKING, None))
        elif kind == Kind.GAP:
            self._gap(event, out)
        elif kind == Kind.PARENT_CUSTOM and event.name == Kind.PARENT_STATUS_NAME:
            text = event.raw.get("text") if isinstance(event.raw, Mapping) else None
            if isinstance(text, str) and text:
                self._flush_text(out)
                out.append(self._status(TaskState.TASK_STATE_WORKING, text, kind="status"))
        elif kind in _RUN_TERMINALS:
            state = _RUN_TERMINALS[kind]
            reason = event.text
            if not reason and event.error is not None:
                reason = event.error.message
            out.extend(self.conclude(state, reason))

    def _text_delta(self, event: DelegationEvent) -> None:
        delta = event.delta
        if not isinstance(delta, str) or not delta:
            return
        message_id = event.message_id or ""
        self._message_text.setdefault(message_id, []).append(delta)
        if self._text_message is not None and self._text_message != message_id:
            delta = MESSAGE_SEPARATOR + delta
        self._text_message = message_id
        self._pending_text.append(delta)

    def _reasoning_delta(self, event: DelegationEvent, out: list[A2AUpdate]) -> None:
        message_id = event.message_id or ""
        parts = self._reasoning.setdefault(message_id, [])
        delta = event.delta
        if not isinstance(delta, str) or not delta:
            return
        parts.append(delta)
        chars = self._reasoning_chars.get(message_id, 0) + len(delta)
        self._reasoning_chars[message_id] = chars
        if chars >= MAX_STATUS_TEXT_CHARS:
            self._flush_reasoning(message_id, out, keep_open=True)

    def _flush_reasoning(
        self, message_id: str, out: list[A2AUpdate], *, keep_open: bool = False
    ) -> None:
        parts = self._reasoning.pop(message_id, None)
        self._reasoning_chars.pop(message_id, None)
        if keep_open:
            self._reasoning[message_id] = []
        text = "".join(parts or ())
        while text:
            self._flush_text(out)
            piece, text = text[:MAX_STATUS_TEXT_CHARS], text[MAX_STATUS_TEXT_CHARS:]
            out.append(
                self._status(TaskState.TASK_STATE_WORKING, piece, kind="reasoning", cut=False)
            )

    def _tool(self, tool_call_id: str | None) -> _ToolCall:
        key = tool_call_id or ""
        call = self._tools.get(key)
        if call is None:
            call = self._tools[key] = _ToolCall(None)
            while len(self._tools) > TRACKED_TOOL_CALLS:
                self._tools.popitem(last=False)
        return call

    def _tool_args(self, event: DelegationEvent) -> None:
        call = self._tool(event.tool_call_id)
        if event.args is not None:
            call.args, call.has_args = event.args, True
        elif isinstance(event.delta, str) and event.delta:
            call.deltas.append(event.delta)
            if sum(len(d) for d in call.deltas) > 4 * MAX_DATA_BYTES:
                # Bounded: the call's arguments will be shown as too large anyway.
                call.deltas = ["".join(call.deltas)[: 4 * MAX_DATA_BYTES + 1]]

    def _publish_call(self, tool_call_id: str, out: list[A2AUpdate]) -> None:
        call = self._tool(tool_call_id)
        if call.published:
            return
        call.published = True
        args: Any = call.args
        if not call.has_args and call.deltas:
            joined = "".join(call.deltas)
            try:
                args = json.loads(joined)
            except (ValueError, RecursionError):
                args = joined
        name = call.name or "tool"
        data = {"kind": "tool_call", "toolCallId": tool_call_id, "toolName": name, "args": args}
        self._flush_text(out)
        text = f"Calling {name} ({tool_call_id})"
        out.append(
            self._status(
                TaskState.TASK_STATE_WORKING, text, kind="tool_call", data=data, payload="args"
            )
        )

    def _tool_result(self, event: DelegationEvent, out: list[A2AUpdate]) -> None:
        tool_call_id = event.tool_call_id or ""
        self._publish_call(tool_call_id, out)
        call = self._tool(tool_call_id)
        name = call.name or "tool"
        failed = bool((event.extra or {}).get("is_error"))
        data = {
            "kind": "tool_result",
            "toolCallId": tool_call_id,
            "toolName": name,
            "result": event.result,
            "isError": failed,
        }
        text = f"{name} {'failed' if failed else 'returned'} ({tool_call_id})"
        out.append(
            self._status(
                TaskState.TASK_STATE_WORKING, text, kind="tool_result", data=data, payload="result"
            )
        )

    def _gap(self, event: DelegationEvent, out: list[A2AUpdate]) -> None:
        report = event.dropped
        data: dict[str, Any] = {"kind": "stream.gap"}
        if report is not None:
            data.update(
                count=report.count, firstCursor=report.first_cursor, lastCursor=report.last_cursor
            )
        self._flush_text(out)
        text = "Some of the parent agent's events could not be read."
        out.append(self._status(TaskState.TASK_STATE_WORKING, text, kind="stream.gap", data=data))

    # -- output -------------------------------------------------------------------------

    def _flush_text(self, out: list[A2AUpdate]) -> None:
        if not self._pending_text:
            return
        text = "".join(self._pending_text)
        self._pending_text.clear()
        out.append(self._chunk(text, append=self._artifact_open, last_chunk=False))
        self._artifact_open = True

    def _final_text(self) -> str | None:
        open_messages = [parts for parts in self._message_text.values() if parts]
        if open_messages:
            return "".join(open_messages[-1])
        return self._last_message_text

    def _chunk(self, text: str, *, append: bool, last_chunk: bool) -> TaskArtifactUpdateEvent:
        self._chunks += 1
        artifact = Artifact(
            artifact_id=self.artifact_id,
            name=self.artifact_name,
            parts=[Part(text=_utf8(text), media_type="text/plain")],
        )
        # Numbered, so that the same text streamed twice in a row ("\n", "\n") is never
        # byte-identical to a duplicate delivery, which clients drop (the engine's does).
        artifact.metadata.update({METADATA_KEY: {"chunk": self._chunks}})
        return TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=artifact,
            append=append,
            last_chunk=last_chunk,
        )

    def _status(
        self,
        state: int,
        text: str | None,
        *,
        kind: str | None = None,
        data: dict[str, Any] | None = None,
        payload: str | None = None,
        cut: bool = True,
    ) -> TaskStatusUpdateEvent:
        status = TaskStatus(state=state)  # type: ignore[arg-type]
        status.timestamp.FromNanoseconds(_nanoseconds(self._clock()))
        if text or data is not None:
            self._message_ids += 1
            message = Message(
                role=Role.ROLE_AGENT,
                message_id=f"{self.task_id}-status-{self._message_ids}",
                task_id=self.task_id,
                context_id=self.context_id,
            )
            if text:
                message.parts.append(Part(text=_utf8(_cut(text) if cut else text)))
            if data is not None:
                message.parts.append(Part(data=_data_value(data, payload)))
            if kind is not None:
                message.metadata.update({METADATA_KEY: {"kind": kind}})
            status.message.CopyFrom(message)
        return TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=status
        )


def _nanoseconds(seconds: float) -> int:
    """A protobuf timestamp's nanoseconds for a clock reading (clamped to what it can hold)."""
    if math.isnan(seconds) or seconds < 0:
        return 0
    return int(min(seconds, _MAX_SECONDS) * 1_000_000_000)


def _utf8(text: str) -> str:
    """`text` writable into a protobuf string: lone surrogates become U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _cut(text: str) -> str:
    if len(text) <= MAX_STATUS_TEXT_CHARS:
        return text
    return text[: MAX_STATUS_TEXT_CHARS - 1] + "…"


def _json_value(value: Any) -> Any:
    """`value` as plain JSON data protobuf can hold, else a marker saying why not."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=_not_json)
        plain = json.loads(_utf8(text))
        json_format.ParseDict(plain, struct_pb2.Value())
    except (ValueError, TypeError, RecursionError):
        return {"omitted": "not_json"}
    except (json_format.ParseError, OverflowError):
        return {"omitted": "not_representable"}  # a number no double holds (10**400)
    return plain


def _json_size(value: Any) -> int:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8"))


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _data_value(data: dict[str, Any], payload: str | None) -> struct_pb2.Value:
    """A data part's value, no larger than `MAX_DATA_BYTES` as JSON: identity strings are cut
    to `MAX_DATA_ID_CHARS`, and the `payload` field is replaced by a marker if it does not fit."""
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key == payload:
            continue
        fields[key] = _utf8(value[:MAX_DATA_ID_CHARS]) if isinstance(value, str) else value
    if payload is not None:
        value = _json_value(data.get(payload))
        room = MAX_DATA_BYTES - _json_size(fields) - len(payload) - 4
        size = _json_size(value)
        if size > room:
            value = {"omitted": "too_large", "bytes": size}
        fields[payload] = value
    return json_format.ParseDict(fields, struct_pb2.Value())


def question_data(question: Question) -> dict[str, Any]:
    """The data part of a status that asks `question` (camelCase, as A2A's own JSON): who asks
    (`lineage`: the delegation id, then the nested subagents down to the asker) and how an
    answer must look. Ids are cut to `MAX_DATA_ID_CHARS`, the lineage to its last
    `MAX_LINEAGE` ids; a schema that would make it larger than `MAX_QUESTION_DATA_BYTES` is
    left out (`responseSchemaOmitted` says how large it was)."""

    def ident(value: str | None) -> str | None:
        return _utf8(value[:MAX_DATA_ID_CHARS]) if isinstance(value, str) else None

    data: dict[str, Any] = {
        "kind": QUESTION_KIND,
        "questionId": ident(question.id),
        "delegationId": ident(question.delegation_id),
        "agentKey": ident(question.agent_key),
        "agentName": ident(question.agent_name),
        "lineage": [ident(i) for i in question.lineage[-MAX_LINEAGE:]],
        "asker": ident(question.asker),
        "reason": ident(question.reason),
        "askedAt": _finite(question.asked_at),
        "expiresAt": _finite(question.expires_at),
        "authUrl": ident(question.auth_url) if question.auth_url else None,
    }
    data = {key: value for key, value in data.items() if value is not None}
    if question.response_schema is not None:
        schema = _json_value(question.response_schema)
        size = _json_size(schema)
        if list(schema) == ["omitted"] or size + _json_size(data) > MAX_QUESTION_DATA_BYTES:
            data["responseSchemaOmitted"] = {"bytes": size}
        else:
            data["responseSchema"] = schema
    return data


def _finite(seconds: float | None) -> float | None:
    if seconds is None or not math.isfinite(seconds):
        return None
    return seconds
