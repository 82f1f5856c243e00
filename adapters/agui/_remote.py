"""Where a remote AG-UI agent's stream becomes engine updates (sans-IO).

`AguiRemoteMapper` translates the SSE body of a remote AG-UI agent's run (the response to the
`RunAgentInput` the engine POSTed) into protocol-neutral `TargetUpdate`s. It performs no I/O, never
awaits and imports no Trio: the session in `adapters.agui._target` moves bytes and calls it. It
never raises either: malformed input sets `error` (a `DelegationError`, `malformed_remote_payload`;
`stream_interrupted` for a stream that ended without a terminal), returns the updates of everything
before it, and ignores everything after it. The caller emits what it got, then raises `error`.

It owns the rules of the remote's stream the engine cannot see, because they need AG-UI's own
fields: SSE framing (`RemoteSseDecoder`: the rules of `adapters.agui._sse.parse_sse`, read
incrementally and, as a consumer of a remote, with every line ending SSE allows and `id:` lines
ignored as the AG-UI transport spec asks), chunk expansion (`ChunkExpander`, the official
client's `transformChunks`, applied first as the client does), the run's lifecycle (nothing
before RUN_STARTED but a RUN_ERROR, nothing after the run ended), and the open/close discipline of
messages and tool calls (content for a message that was never started is malformed). It must not
repeat the rules of `engine._delegation.DelegationState`, which consumes its output: that one
synthesizes a missing start, keeps exactly one terminal, folds unchanged statuses and bounds the
text.

A hostile remote. Frames are bounded by bytes as they arrive, before any decoding or JSON
(`max_frame_bytes`). A terminal before RUN_STARTED: RUN_ERROR is the remote's failure (it said
why), RUN_FINISHED is malformed. A lifecycle event repeated right after itself (the same JSON:
a retransmission) is ignored, and so is RUN_STARTED again for the run already running; a
repeated delta is text the remote sent and is kept. A stream is one run
(https://docs.ag-ui.com/concepts/events, "Lifecycle events"): RUN_STARTED may name a run id of
the remote's own (it becomes the remote task id), but a second RUN_STARTED for another run, or a
RUN_FINISHED / RUN_ERROR naming another run or thread, is malformed rather than ignored (ignoring
a foreign terminal would leave the delegation waiting for one that never comes). A body that ends
inside a frame is `stream_interrupted`, never a half event.

Theory of operation. RUN_STARTED yields `subagent.started` (the remote run id is the remote task
id, the thread id the remote context id). TEXT_MESSAGE_* and REASONING_MESSAGE_* keep their
message lifecycle as `subagent.text.*` / `subagent.reasoning.*`; TOOL_CALL_* become
`subagent.tool_call.*`, the remote's own tools, never the parent's; STEP_* are statuses; CUSTOM
keeps its name and value, and RAW, STATE_*, MESSAGES_SNAPSHOT and ACTIVITY_* become
`subagent.custom` named `agui.<type>` with the payload (bounded) in `raw["value"]`.
RUN_FINISHED ends the delegation: its `result` is the summary; an `interrupt` outcome is
`subagent.input_required` and suspends the mapper with every interrupt id kept in `interrupts`
until `resume()` (the session's answer starts the remote's resume run, whose RUN_STARTED is a
`working` status, not a second start). Its update names who asks and how an answer must look:
`subagent_id` is the `subagentRunId` the interrupts name when they all name the same one (the
engine builds the question's lineage down to that nested subagent; interrupts of several
subagents, or of none, are the remote's own question), and `response_schema` the one
interrupt's `responseSchema` (an object, bounded; with several interrupts there is none: one
answer then answers every interrupt, or `data` keyed by interrupt id each). A `cancelled`
outcome is `subagent.cancelled`. RUN_ERROR
is `subagent.failed` (`remote_failed`). Messages and tool calls still open when the run ends or
suspends are closed first.

Nesting. The remote's own subagents (SUBAGENT_STARTED / FINISHED / ERROR) become the engine's
nested lifecycle (`subagent.nested.started` with `parent_subagent_id`, the spawning tool call and
message; `subagent.nested.finished`, `status` `suspended` for a `suspended` outcome;
`subagent.nested.failed`), and every update carries the remote subagent that produced it in
`subagent_id`: an event's own `subagentRunId`, or for a continuation or end of a message or tool
call, the subagent that opened it (the first writer stays the owner: "Rules clients enforce",
https://docs.ag-ui.com/concepts/subagents). The mapper only reads the remote's ids;
`DelegationState` namespaces them, keeps one terminal each, continues a suspended one and folds
what is deeper than the policy allows. `remote_subagents` records the announcements (bounded).
"""

from __future__ import annotations

import json
import re
from collections import Counter, OrderedDict
from collections.abc import Iterator
from typing import Any, Final

from adapters.agui._chunks import ChunkError, ChunkExpander
from adapters.agui._sse import _finite_float, _refuse_constant
from engine import DelegationError, ErrorCode, Kind, TargetUpdate

__all__ = [
    "MAX_CARRIED_JSON_BYTES",
    "MAX_ERROR_CHARS",
    "MAX_FRAME_BYTES",
    "AguiRemoteMapper",
    "RemoteSseDecoder",
]

#: Longest SSE frame (or unterminated line) accepted from a remote, in bytes.
MAX_FRAME_BYTES: Final = 4 << 20
#: A remote payload (custom value, state, result, interrupt) larger than this as JSON is not
#: carried; a marker says how large it was.
MAX_CARRIED_JSON_BYTES: Final = 64 << 10
#: A remote failure message or summary rendered from JSON is cut to this many characters.
MAX_ERROR_CHARS: Final = 500
#: The largest interrupt `responseSchema` carried (as JSON bytes).
MAX_SCHEMA_BYTES: Final = 64 * 1024
#: Longest id (message, tool call, run, thread, interrupt, subagent) accepted.
MAX_ID_CHARS: Final = 512
#: Messages, reasoning messages and tool calls open at once; interrupts of one suspension.
MAX_OPEN: Final = 1024
MAX_INTERRUPTS: Final = 256
#: Remote subagents remembered (for nesting later), oldest forgotten first.
TRACKED_SUBAGENTS: Final = 1024

_TEXT_ROLES: Final = frozenset({"developer", "system", "assistant", "user"})
#: Room a line has beyond `max_frame_bytes` for its field name (`data: `).
_FIELD_BYTES: Final = 16
_LINE_END_BYTES: Final = re.compile(rb"\r\n|\r|\n")
_ESCAPED_SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: Events that open, close or announce something: one repeated right after itself (the same
#: JSON) is a retransmission and is ignored. Content (text, reasoning and argument deltas,
#: chunks) is never ignored: a repeated delta is text the remote sent; nor are statuses (a
#: repeated step is news the engine folds).
_LIFECYCLE: Final = frozenset(
    {
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "REASONING_START",
        "REASONING_END",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
    }
)

_CUSTOM_TYPES: Final = {
    "RAW": "agui.raw",
    "STATE_SNAPSHOT": "agui.state_snapshot",
    "STATE_DELTA": "agui.state_delta",
    "MESSAGES_SNAPSHOT": "agui.messages_snapshot",
    "ACTIVITY_SNAPSHOT": "agui.activity_snapshot",
    "ACTIVITY_DELTA": "agui.activity_delta",
}
#: Fields of an event that are envelope, not payload, when the payload is the event itself.
_ENVELOPE: Final = frozenset({"type", "timestamp", "rawEvent", "metadata", "subagentRunId"})
#: Known types that carry nothing the delegation shows (the remote's reasoning phases, its
#: encrypted reasoning): accepted, counted in `ignored`.
_SILENT: Final = frozenset({"REASONING_START", "REASONING_END", "REASONING_ENCRYPTED_VALUE"})

# Phases of the remote run, as the mapper sees it.
_WAITING: Final = "waiting"  # for RUN_STARTED (first run, or the resume run)
_RUNNING: Final = "running"
_SUSPENDED: Final = "suspended"  # RUN_FINISHED with an interrupt outcome
_ENDED: Final = "ended"  # a terminal was mapped, or `error` is set


class _Malformed(Exception):
    """Internal: what a rule found wrong; becomes `error`."""


class RemoteSseDecoder:
    """An SSE response body, fed in pieces, as the AG-UI events it frames.

    The rules of `adapters.agui._sse.parse_sse` (blocks separated by a blank line, `data:` lines
    joined by LF, `:` comments and `event:` / `retry:` / unknown fields ignored, data that is not
    a JSON object, NaN/Infinity tokens or out-of-range numbers refused), read incrementally and
    as a consumer: CRLF and CR line endings are legal SSE (sse-starlette sends CRLF) and `id:`
    lines are ignored, as the AG-UI transport spec requires.

    Bounded by bytes as they arrive: lines are split on the raw bytes (CR and LF never occur
    inside a UTF-8 sequence), and a line, or a frame's `data`, longer than `max_frame_bytes`
    bytes is refused the moment the bytes read pass the limit, before anything is decoded or
    parsed. A piece is scanned once (a long line is not searched again when the next piece
    comes), so a body costs time in proportion to its size. `feed` yields events as they
    complete and raises `DelegationError(malformed_remote_payload)` at the first frame it cannot
    read. `close` reads a last frame without its blank line when it is a JSON object; a last
    frame that is not is a stream cut in the middle of a frame (`stream_interrupted`).
    """

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        # A line may hold a whole frame's data and its field name (`data: `).
        self._max_line_bytes = max_frame_bytes + _FIELD_BYTES
        #: Bytes of the line not yet ended.
        self._partial = bytearray()
        #: The last piece ended with CR: an LF opening the next one completes that CRLF.
        self._after_cr = False
        self._first_line = True
        self._data: list[str] = []
        self._data_bytes = 0

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        data = bytes(data)
        start = 0
        if self._after_cr and data:
            self._after_cr = False
            if data[:1] == b"\n":
                start = 1
        position = start
        for match in _LINE_END_BYTES.finditer(data, start):
            piece = data[position : match.start()]
            position = match.end()
            if self._partial:
                self._grow(piece)
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = piece
                if len(line) > self._max_line_bytes:
                    raise _malformed(_too_long("an SSE line", self.max_frame_bytes))
            if position == len(data) and match.group() == b"\r":
                self._after_cr = True
            event = self._line(line)
            if event is not None:
                yield event
        if position < len(data):
            self._grow(data[position:])

    def close(self) -> Iterator[dict[str, Any]]:
        """The body ended: the last frame counts without its blank line when it is whole."""
        if self._partial:
            line = bytes(self._partial)
            self._partial.clear()
            event = self._line(line)
            if event is not None:
                yield event
        if self._data:
            yield self._dispatch(at_end=True)

    def _grow(self, piece: bytes) -> None:
        self._partial += piece
        if len(self._partial) > self._max_line_bytes:
            self._partial = bytearray()
            raise _malformed(_too_long("an SSE line", self.max_frame_bytes))

    def _line(self, raw: bytes) -> dict[str, Any] | None:
        if self._first_line:
            self._first_line = False
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # SSE: one leading BOM is ignored
        if not raw:
            return self._dispatch() if self._data else None
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _malformed(f"the stream is not UTF-8 ({exc.reason})") from None
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            value = value.removeprefix(" ")
            # The value's bytes and the LF that joins it to the next line.
            self._data_bytes += len(raw) - (6 if raw.startswith(b"data: ") else 5) + 1
            if self._data_bytes > self.max_frame_bytes:
                raise _malformed(_too_long("an SSE frame", self.max_frame_bytes))
            self._data.append(value)
        # `id:` (AG-UI consumers MUST ignore it), `event:`, `retry:` and unknown fields: ignored.
        return None

    def _dispatch(self, *, at_end: bool = False) -> dict[str, Any]:
        text = "\n".join(self._data)
        size = self._data_bytes
        self._data = []
        self._data_bytes = 0
        try:
            event = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except (ValueError, RecursionError) as exc:
            if at_end:  # no blank line, and not whole: the body was cut inside the frame
                raise DelegationError(
                    code=ErrorCode.STREAM_INTERRUPTED,
                    message="The remote AG-UI stream ended in the middle of a frame "
                    f"({size} bytes of data without the blank line that ends a frame).",
                ) from None
            raise _malformed(f"an SSE frame's data is not JSON: {str(exc)[:120]}") from None
        if _ESCAPED_SURROGATE.search(text):
            # JSON can spell unpaired surrogates ("\\ud800"); they cannot be sent on as UTF-8.
            try:
                event = _without_lone_surrogates(event)
            except RecursionError:
                raise _malformed("an SSE frame's data is nested too deeply") from None
        if not isinstance(event, dict):
            raise _malformed(f"an SSE frame's data is a JSON {type(event).__name__}, not an event")
        return event


class AguiRemoteMapper:
    """Translates one delegation's remote AG-UI runs into `TargetUpdate`s. Not thread-safe.

    `feed(data)` takes the response body as it arrives (`end()` when it ended), `feed_event`
    one already parsed event. Each returns the updates to emit, in order (often none), and never
    raises: see `error`. After `subagent.input_required`, `resume()` prepares for the resume
    run's stream. `task_id` is the first run's id, `run_id` the current run's, `thread_id` the
    remote's thread; `interrupts` the interrupts of the last suspension (every one of them).
    """

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        #: Why the mapper stopped (`malformed_remote_payload`, `stream_interrupted`), or None.
        self.error: DelegationError | None = None
        self.task_id: str | None = None
        self.run_id: str | None = None
        self.thread_id: str | None = None
        self.run_ids: list[str] = []
        #: The interrupts of the last RUN_FINISHED with an interrupt outcome, as the remote sent
        #: them (`id`, `reason`, `message`, `toolCallId`, `subagentRunId`, ...).
        self.interrupts: list[dict[str, Any]] = []
        #: `finished`, `failed` or `cancelled` once the remote's run ended that way.
        self.terminal: str | None = None
        #: Remote subagents announced (SUBAGENT_STARTED): id -> announcement (bounded).
        self.remote_subagents: OrderedDict[str, dict[str, Any]] = OrderedDict()
        #: Events accepted but not shown, by reason (`after_end`, `unknown_type`, ...).
        self.ignored: Counter[str] = Counter()
        self.events = 0
        self._phase = _WAITING
        self._resuming = False
        self._decoder = RemoteSseDecoder(max_frame_bytes=max_frame_bytes)
        self._chunks = ChunkExpander()
        # The event before this one (a lifecycle event repeated right after itself is a
        # retransmission), and the thread the current run named.
        self._previous: dict[str, Any] | None = None
        self._run_thread: str | None = None
        # Open message id -> (family "text" | "reasoning", the remote subagent that opened it).
        self._texts: dict[str, tuple[str, str | None]] = {}
        # Open tool call id -> (name, the remote subagent that opened it).
        self._tools: dict[str, tuple[str, str | None]] = {}
        # Ended tool calls' owners (bounded): a result belongs to whoever opened its call.
        self._call_owners: OrderedDict[str, str | None] = OrderedDict()

    # -- public surface -----------------------------------------------------------------------

    @property
    def suspended(self) -> bool:
        """The remote's run ended with an interrupt outcome and waits for `resume()`."""
        return self._phase == _SUSPENDED

    @property
    def done(self) -> bool:
        """Nothing more will be mapped: a terminal, an error, or a suspension."""
        return self._phase in (_ENDED, _SUSPENDED)

    def feed(self, data: bytes) -> list[TargetUpdate]:
        """Updates for the next piece of the SSE response body."""
        if self.done:
            return []
        return self._decoded(self._decoder.feed(data))

    def end(self) -> list[TargetUpdate]:
        """The response body ended. A run that neither ended nor suspended is
        `stream_interrupted` (in `error`)."""
        out: list[TargetUpdate] = []
        if not self.done:
            out = self._decoded(self._decoder.close())
        if self._phase in (_WAITING, _RUNNING) and self.error is None:
            where = "before RUN_STARTED" if self._phase == _WAITING else "before the run ended"
            self._fail(
                DelegationError(
                    code=ErrorCode.STREAM_INTERRUPTED,
                    message=f"The remote AG-UI stream ended {where} "
                    f"(no RUN_FINISHED or RUN_ERROR after {self.events} events).",
                )
            )
        return out

    def resume(self) -> None:
        """The input request was answered with a resume run: expect its stream (a new body,
        opened by RUN_STARTED)."""
        if self._phase != _SUSPENDED:
            return
        self._phase = _WAITING
        self._resuming = True
        self._decoder = RemoteSseDecoder(max_frame_bytes=self.max_frame_bytes)
        self._chunks = ChunkExpander()
        self._previous = None

    def feed_event(self, event: Any) -> list[TargetUpdate]:
        """Updates for one parsed AG-UI event (chunk events are expanded first)."""
        if self._phase == _ENDED:
            return []
        out: list[TargetUpdate] = []
        try:
            self._event(event, out)
        except _Malformed as exc:
            self._fail(_malformed(str(exc)))
        return out

    # -- feeding ------------------------------------------------------------------------------

    def _decoded(self, events: Iterator[dict[str, Any]]) -> list[TargetUpdate]:
        out: list[TargetUpdate] = []
        try:
            for event in events:
                self._event(event, out)
                if self.done:
                    break  # what follows the run's end is not read (however the body was cut)
        except DelegationError as error:
            self._fail(error)
        except _Malformed as exc:
            self._fail(_malformed(str(exc)))
        return out

    def _fail(self, error: DelegationError) -> None:
        if self.error is None:
            self.error = error
        self._phase = _ENDED

    def _event(self, event: Any, out: list[TargetUpdate]) -> None:
        if not isinstance(event, dict):
            raise _Malformed(f"an event is a JSON {type(event).__name__}, not an object")
        self.events += 1
        if self._phase == _SUSPENDED:
            self.ignored["after_end"] += 1
            return
        previous, self._previous = self._previous, event
        kind = event.get("type")
        if (
            previous is not None
            and isinstance(kind, str)
            and kind in _LIFECYCLE
            and previous.get("type") == kind
            and previous == event
        ):
            self.ignored["duplicate"] += 1
            return
        try:
            expanded = self._chunks.feed(event)
        except ChunkError as exc:
            problem = f"a chunk event cannot be expanded ({exc.code}): {exc.message}"
            raise _Malformed(problem) from None
        for one in expanded:
            if self._phase in (_ENDED, _SUSPENDED):
                self.ignored["after_end"] += 1
                continue
            self._map(one, out)

    def _map(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        kind = event.get("type")
        if not isinstance(kind, str):
            raise _Malformed("an event has no string `type`")
        if self._phase == _WAITING:
            if kind == "RUN_STARTED":
                self._run_started(event, out)
            elif kind == "RUN_ERROR":
                # A remote that fails before it starts (bad input, no capacity) still says why:
                # its message is worth more to the parent than "malformed".
                self._run_error(event, out, before_start=True)
            else:
                raise _Malformed(f"{_type_name(kind)} before RUN_STARTED")
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, out)
        elif kind in _CUSTOM_TYPES:
            self._carried_custom(kind, event, out)
        elif kind in _SILENT:
            _attribution(event)
            self.ignored[kind.lower()] += 1
        else:
            self.ignored["unknown_type"] += 1

    # -- the run ------------------------------------------------------------------------------

    def _run_started(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        thread_id = _id(event, "threadId")
        run_id = _id(event, "runId")
        self._phase = _RUNNING
        self._run_thread = thread_id
        previous = self.run_id
        self.run_id = run_id
        self.run_ids.append(run_id)
        if self.thread_id is None:
            self.thread_id = thread_id
        raw = _drop_none({"runId": run_id, "threadId": thread_id})
        parent = event.get("parentRunId")
        if isinstance(parent, str):
            raw["parentRunId"] = parent
        if self.task_id is None:
            self.task_id = run_id
            out.append(self._update(Kind.STARTED, status="working", raw=raw))
            return
        # The resume run (a continuation of the same subagent): news, not a second start.
        raw["resumedFrom"] = previous
        out.append(
            self._update(Kind.STATUS, status="working", text=f"resumed as run {run_id}", raw=raw)
        )

    def _second_start(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        run_id, thread_id = _id(event, "runId"), _id(event, "threadId")
        if run_id == self.run_id and thread_id == self._run_thread:
            self.ignored["duplicate"] += 1  # the same start again: nothing new happened
            return
        raise _Malformed(
            f"a second RUN_STARTED (run {run_id[:64]!r}) before run {self.run_id!r} ended"
        )

    def _same_run(self, event: dict[str, Any], *, required: bool) -> None:
        """A terminal names the run and thread this stream's RUN_STARTED named (one stream, one
        run): one for another run would end this delegation on a run it never saw."""
        for key, ours in (("runId", self.run_id), ("threadId", self._run_thread)):
            if not required and event.get(key) is None:
                continue
            theirs = _id(event, key)
            if theirs != ours:
                raise _Malformed(
                    f"{event['type']} names {key} {theirs[:64]!r}, but this stream runs {ours!r}"
                )

    def _run_finished(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        self._same_run(event, required=True)
        outcome = event.get("outcome")
        kind = "success"
        if outcome is not None:
            if not isinstance(outcome, dict) or not isinstance(outcome.get("type"), str):
                raise _Malformed("RUN_FINISHED has an outcome without a string `type`")
            kind = outcome["type"]
        if kind == "interrupt" and isinstance(outcome, dict):
            interrupts = _interrupts(outcome)
            self._close_open(out)
            self._phase = _SUSPENDED
            self.interrupts = interrupts
            questions = [str(i.get("message") or i.get("reason") or i["id"]) for i in interrupts]
            raw: dict[str, Any] = {
                "runId": self.run_id,
                "interruptIds": [i["id"] for i in interrupts],
                "interrupts": _carried(interrupts),
            }
            askers = {i.get("subagentRunId") for i in interrupts}
            asker = askers.pop() if len(askers) == 1 else None
            out.append(
                self._update(
                    Kind.INPUT_REQUIRED,
                    status="input_required",
                    text=_truncate("\n".join(questions), 4 * MAX_ERROR_CHARS),
                    raw=raw,
                    subagent_id=asker if isinstance(asker, str) else None,
                    response_schema=_response_schema(interrupts),
                )
            )
            return
        self._close_open(out)
        self._phase = _ENDED
        raw = {"runId": self.run_id}
        if kind == "cancelled":
            self.terminal = "cancelled"
            out.append(self._update(Kind.CANCELLED, status="cancelled", raw=raw))
            return
        # Success, or an outcome this version does not know: 1.0 says a consumer reads an
        # unknown outcome as success (it is stripped).
        if kind != "success":
            raw["outcome"] = kind
        result = event.get("result")
        if result is not None:
            raw["result"] = _carried(result)
        self.terminal = "finished"
        out.append(self._update(Kind.FINISHED, status="completed", text=_summary(result), raw=raw))

    def _run_error(
        self, event: dict[str, Any], out: list[TargetUpdate], *, before_start: bool = False
    ) -> None:
        if not before_start:
            self._same_run(event, required=False)
        message = event.get("message")
        code = event.get("code")
        metadata: dict[str, Any] = {}
        if isinstance(code, str) and code:
            metadata["remote_code"] = code[:MAX_ID_CHARS]
        if before_start:
            metadata["before_run_started"] = True
        error = DelegationError(
            code=ErrorCode.REMOTE_FAILED,
            message=_truncate(message)
            if isinstance(message, str) and message
            else "The remote AG-UI agent reported that the run failed.",
            remote_status="failed",
            metadata=metadata or None,
        )
        self._close_open(out)
        self._phase = _ENDED
        self.terminal = "failed"
        raw = _drop_none({"runId": self.run_id, "code": metadata.get("remote_code")})
        out.append(self._update(Kind.FAILED, status="failed", error=error, raw=raw or None))

    def _close_open(self, out: list[TargetUpdate]) -> None:
        """Close what the remote left open (the engine would close messages, not tool calls)."""
        for tool_call_id, (_, owner) in list(self._tools.items()):
            del self._tools[tool_call_id]
            out.append(self._tool_update(Kind.TOOL_CALL_END, tool_call_id, subagent_id=owner))
        for message_id, (family, owner) in list(self._texts.items()):
            del self._texts[message_id]
            end = Kind.TEXT_END if family == "text" else Kind.REASONING_END
            out.append(
                self._update(
                    end, message_id=message_id, remote_message_id=message_id, subagent_id=owner
                )
            )

    # -- messages -----------------------------------------------------------------------------

    def _message_start(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        family = "text" if event["type"] == "TEXT_MESSAGE_START" else "reasoning"
        message_id = _id(event, "messageId")
        owner = _attribution(event)
        if message_id in self._texts:
            raise _Malformed(f"{event['type']} for message {message_id!r}, which is already open")
        if len(self._texts) >= MAX_OPEN:
            raise _Malformed(f"more than {MAX_OPEN} messages open at once")
        role = event.get("role")
        if family == "text":
            if role is None:
                role = "assistant"
            elif role not in _TEXT_ROLES:
                raise _Malformed(f"TEXT_MESSAGE_START with role {_type_name(role)}")
        else:
            role = "reasoning"
        name = event.get("name")
        self._texts[message_id] = (family, owner)
        out.append(
            self._update(
                Kind.TEXT_START if family == "text" else Kind.REASONING_START,
                message_id=message_id,
                remote_message_id=message_id,
                role=role,
                name=name if isinstance(name, str) and name else None,
                subagent_id=owner,
            )
        )

    def _message_content(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        family = "text" if event["type"] == "TEXT_MESSAGE_CONTENT" else "reasoning"
        message_id, owner = self._open_message(event, family)
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise _Malformed(f"{event['type']} without a string delta")
        if not delta:
            self.ignored["empty_delta"] += 1
            return
        out.append(
            self._update(
                Kind.TEXT_DELTA if family == "text" else Kind.REASONING_DELTA,
                message_id=message_id,
                remote_message_id=message_id,
                delta=delta,
                subagent_id=owner,
            )
        )

    def _message_end(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        family = "text" if event["type"] == "TEXT_MESSAGE_END" else "reasoning"
        message_id, owner = self._open_message(event, family)
        del self._texts[message_id]
        out.append(
            self._update(
                Kind.TEXT_END if family == "text" else Kind.REASONING_END,
                message_id=message_id,
                remote_message_id=message_id,
                subagent_id=owner,
            )
        )

    def _open_message(self, event: dict[str, Any], family: str) -> tuple[str, str | None]:
        """The id of the open message `event` continues, and who opened it: the first writer
        stays the owner, whatever a continuation says."""
        message_id = _id(event, "messageId")
        _attribution(event)
        opened = self._texts.get(message_id)
        if opened is None or opened[0] != family:
            noun = "message" if family == "text" else "reasoning message"
            raise _Malformed(
                f"{event['type']} for a {noun} that was never started ({message_id!r})"
            )
        return message_id, opened[1]

    # -- tool calls ---------------------------------------------------------------------------

    def _tool_start(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        tool_call_id = _id(event, "toolCallId")
        name = _id(event, "toolCallName")
        owner = _attribution(event)
        raw = None
        parent = event.get("parentMessageId")
        if isinstance(parent, str) and parent:
            raw = {"parentMessageId": parent[:MAX_ID_CHARS]}
        if tool_call_id in self._tools:
            raise _Malformed(
                f"TOOL_CALL_START for tool call {tool_call_id!r}, which is already open"
            )
        if len(self._tools) >= MAX_OPEN:
            raise _Malformed(f"more than {MAX_OPEN} tool calls open at once")
        self._tools[tool_call_id] = (name, owner)
        out.append(
            self._tool_update(
                Kind.TOOL_CALL_START, tool_call_id, tool_name=name, raw=raw, subagent_id=owner
            )
        )

    def _tool_args(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        tool_call_id = self._open_tool(event)
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise _Malformed("TOOL_CALL_ARGS without a string delta")
        if not delta:
            self.ignored["empty_delta"] += 1
            return
        name, owner = self._tools[tool_call_id]
        out.append(
            self._tool_update(
                Kind.TOOL_CALL_ARGS, tool_call_id, tool_name=name, delta=delta, subagent_id=owner
            )
        )

    def _tool_end(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        tool_call_id = self._open_tool(event)
        name, owner = self._tools.pop(tool_call_id)
        self._ended_call(tool_call_id, owner)
        out.append(
            self._tool_update(Kind.TOOL_CALL_END, tool_call_id, tool_name=name, subagent_id=owner)
        )

    def _ended_call(self, tool_call_id: str, owner: str | None) -> None:
        self._call_owners[tool_call_id] = owner
        while len(self._call_owners) > TRACKED_SUBAGENTS:
            self._call_owners.popitem(last=False)

    def _tool_result(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        tool_call_id = _id(event, "toolCallId")
        message_id = _id(event, "messageId")
        content = event.get("content")
        if not isinstance(content, str | list):
            raise _Malformed("TOOL_CALL_RESULT without a string or list content")
        tag = _attribution(event)
        raw = {"messageId": message_id}
        name, owner = self._tools.pop(tool_call_id, (None, tag))
        if name is None:
            # The call ended earlier (or in an earlier run): its opener still owns it.
            owner = self._call_owners.pop(tool_call_id, tag)
        else:  # a result closes its call (the client sees END before RESULT)
            out.append(
                self._tool_update(
                    Kind.TOOL_CALL_END, tool_call_id, tool_name=name, subagent_id=owner
                )
            )
        # A result for a call this stream never started is legal: it answers an earlier run's.
        result = content if isinstance(content, str) else _carried(content)
        out.append(
            self._tool_update(
                Kind.TOOL_CALL_RESULT,
                tool_call_id,
                tool_name=name,
                result=result,
                raw=raw,
                subagent_id=owner,
            )
        )

    def _open_tool(self, event: dict[str, Any]) -> str:
        tool_call_id = _id(event, "toolCallId")
        _attribution(event)
        if tool_call_id not in self._tools:
            raise _Malformed(
                f"{event['type']} for a tool call that was never started ({tool_call_id!r})"
            )
        return tool_call_id

    # -- statuses, custom payloads and the remote's own subagents -----------------------------

    def _step(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        name = _id(event, "stepName")
        raw = {"type": event["type"], "stepName": name}
        verb = "started" if event["type"] == "STEP_STARTED" else "finished"
        out.append(
            self._update(
                Kind.STATUS,
                status="working",
                text=f"step {name} {verb}",
                raw=raw,
                subagent_id=_attribution(event),
            )
        )

    def _custom(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        name = event.get("name")
        if not isinstance(name, str) or not name:
            raise _Malformed("CUSTOM without a name")
        if "value" not in event:
            raise _Malformed("CUSTOM without a value")
        raw = {"value": _carried(event["value"])}
        out.append(
            self._update(
                Kind.CUSTOM, name=name[:MAX_ID_CHARS], raw=raw, subagent_id=_attribution(event)
            )
        )

    def _carried_custom(self, kind: str, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        payload = {key: value for key, value in event.items() if key not in _ENVELOPE}
        raw = {"value": _carried(payload)}
        out.append(
            self._update(
                Kind.CUSTOM, name=_CUSTOM_TYPES[kind], raw=raw, subagent_id=_attribution(event)
            )
        )

    def _subagent_started(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        subagent = _id(event, "subagentRunId")
        name = _id(event, "name")
        links: dict[str, str | None] = {}
        for key in ("parentSubagentRunId", "parentToolCallId", "parentMessageId"):
            value = event.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                raise _Malformed(f"SUBAGENT_STARTED with a {key} that is not an id")
            links[key] = value[:MAX_ID_CHARS] if isinstance(value, str) else None
        description = event.get("description")
        self.remote_subagents[subagent] = {
            k: v for k, v in event.items() if k not in _ENVELOPE and isinstance(v, str)
        }
        self.remote_subagents.move_to_end(subagent)
        while len(self.remote_subagents) > TRACKED_SUBAGENTS:
            self.remote_subagents.popitem(last=False)
        metadata = event.get("metadata")
        out.append(
            self._update(
                Kind.NESTED_STARTED,
                subagent_id=subagent,
                parent_subagent_id=links["parentSubagentRunId"],
                name=name[:MAX_ID_CHARS],
                text=_truncate(description) if isinstance(description, str) else None,
                tool_call_id=links["parentToolCallId"],
                message_id=links["parentMessageId"],
                raw={"metadata": _carried(metadata)} if isinstance(metadata, dict) else None,
            )
        )

    def _subagent_finished(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        subagent = _id(event, "subagentRunId")
        outcome = event.get("outcome")
        kind = "success"
        if outcome is not None:
            if not isinstance(outcome, dict) or not isinstance(outcome.get("type"), str):
                raise _Malformed("SUBAGENT_FINISHED has an outcome without a string `type`")
            kind = outcome["type"]
        raw: dict[str, Any] = {}
        if kind == "suspended" and isinstance(outcome, dict):
            ids = outcome.get("interruptIds")
            if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
                raw["interruptIds"] = ids[:MAX_INTERRUPTS]
        result = event.get("result")
        if result is not None:
            raw["result"] = _carried(result)
        out.append(
            self._update(
                Kind.NESTED_FINISHED,
                subagent_id=subagent,
                status="suspended" if kind == "suspended" else "completed",
                text=_summary(result),
                raw=raw or None,
            )
        )

    def _subagent_error(self, event: dict[str, Any], out: list[TargetUpdate]) -> None:
        subagent = _id(event, "subagentRunId")
        message = event.get("message")
        code = event.get("code")
        error = DelegationError(
            code=ErrorCode.REMOTE_FAILED,
            message=_truncate(message)
            if isinstance(message, str) and message
            else "The remote's subagent failed.",
            remote_status="failed",
            metadata={"remote_code": code[:MAX_ID_CHARS]} if isinstance(code, str) else None,
        )
        out.append(
            self._update(Kind.NESTED_FAILED, subagent_id=subagent, status="failed", error=error)
        )

    # -- building updates ---------------------------------------------------------------------

    def _update(self, kind: str, **fields: Any) -> TargetUpdate:
        return TargetUpdate(
            kind=kind, remote_task_id=self.task_id, remote_context_id=self.thread_id, **fields
        )

    def _tool_update(self, kind: str, tool_call_id: str, **fields: Any) -> TargetUpdate:
        return self._update(
            kind, tool_call_id=tool_call_id, remote_tool_call_id=tool_call_id, **fields
        )


_HANDLERS: Final = {
    "RUN_STARTED": AguiRemoteMapper._second_start,
    "RUN_FINISHED": AguiRemoteMapper._run_finished,
    "RUN_ERROR": AguiRemoteMapper._run_error,
    "TEXT_MESSAGE_START": AguiRemoteMapper._message_start,
    "TEXT_MESSAGE_CONTENT": AguiRemoteMapper._message_content,
    "TEXT_MESSAGE_END": AguiRemoteMapper._message_end,
    "REASONING_MESSAGE_START": AguiRemoteMapper._message_start,
    "REASONING_MESSAGE_CONTENT": AguiRemoteMapper._message_content,
    "REASONING_MESSAGE_END": AguiRemoteMapper._message_end,
    "TOOL_CALL_START": AguiRemoteMapper._tool_start,
    "TOOL_CALL_ARGS": AguiRemoteMapper._tool_args,
    "TOOL_CALL_END": AguiRemoteMapper._tool_end,
    "TOOL_CALL_RESULT": AguiRemoteMapper._tool_result,
    "STEP_STARTED": AguiRemoteMapper._step,
    "STEP_FINISHED": AguiRemoteMapper._step,
    "CUSTOM": AguiRemoteMapper._custom,
    "SUBAGENT_STARTED": AguiRemoteMapper._subagent_started,
    "SUBAGENT_FINISHED": AguiRemoteMapper._subagent_finished,
    "SUBAGENT_ERROR": AguiRemoteMapper._subagent_error,
}


# -- reading fields ---------------------------------------------------------------------------


def _malformed(problem: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.MALFORMED_REMOTE_PAYLOAD,
        message=f"The remote AG-UI agent sent a malformed stream: {problem}.",
    )


def _too_long(what: str, limit: int) -> str:
    return f"{what} is longer than {limit} bytes (read no further)"


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:64])
    return f"a JSON {type(value).__name__}"


def _id(event: dict[str, Any], key: str) -> str:
    """A required id-like string field: present, a non-empty string, bounded."""
    value = event.get(key)
    if not isinstance(value, str) or not value:
        raise _Malformed(f"{_type_name(event.get('type'))} without a string {key}")
    if len(value) > MAX_ID_CHARS:
        raise _Malformed(f"{key} longer than {MAX_ID_CHARS} characters")
    return value


def _attribution(event: dict[str, Any]) -> str | None:
    """The remote subagent an event names (`subagentRunId`), if any."""
    value = event.get("subagentRunId")
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise _Malformed(f"{_type_name(event.get('type'))} with a subagentRunId that is not an id")
    return value


def _interrupts(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    interrupts = outcome.get("interrupts")
    if not isinstance(interrupts, list) or not interrupts:
        raise _Malformed("an interrupt outcome without interrupts")
    if len(interrupts) > MAX_INTERRUPTS:
        raise _Malformed(f"more than {MAX_INTERRUPTS} interrupts")
    seen: set[str] = set()
    for interrupt in interrupts:
        if not isinstance(interrupt, dict):
            raise _Malformed("an interrupt that is not an object")
        interrupt_id = _id({**interrupt, "type": "interrupt"}, "id")
        if interrupt_id in seen:
            raise _Malformed(f"interrupt {interrupt_id!r} named twice")
        seen.add(interrupt_id)
        _attribution({**interrupt, "type": "interrupt"})
    return interrupts


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with every unpaired surrogate replaced by U+FFFD (json pairs the valid ones)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_lone_surrogates(key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    return value


def _drop_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return None


def _response_schema(interrupts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one interrupt's `responseSchema` (a JSON object no larger than
    `MAX_SCHEMA_BYTES` as JSON), else None (the engine checks it is a valid schema)."""
    if len(interrupts) != 1:
        return None
    schema = interrupts[0].get("responseSchema")
    if not isinstance(schema, dict) or not schema:
        return None
    text = _json(schema)
    if text is None or len(text.encode("utf-8", "surrogatepass")) > MAX_SCHEMA_BYTES:
        return None
    return schema


def _carried(value: Any) -> Any:
    """A remote payload small enough to carry along, else a marker saying why it was left out."""
    text = _json(value)
    if text is None:
        return {"omitted": "not_json"}
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CARRIED_JSON_BYTES:
        return {"omitted": "too_large", "bytes": size}
    return value


def _summary(result: Any) -> str | None:
    """RUN_FINISHED's `result` as the delegation's summary (JSON for anything but a string)."""
    if result is None:
        return None
    if isinstance(result, str):
        return result or None
    text = _json(result)
    return None if text is None else _truncate(text, MAX_CARRIED_JSON_BYTES)


def _truncate(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
