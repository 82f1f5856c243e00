"""Where engine journal entries become an AG-UI event stream, in one of four visibility modes.

`AguiStreamEncoder` owns the translation of one viewer's journal entries (parent payloads and
every delegation's events, in cursor order) into AG-UI 1.0 events and their SSE framing. It is
sans-IO: it never awaits, reads no clock and keeps no global state, so the same entries always
give the same bytes, and a viewer that reconnects (the server replays the entries up to its
cursor into a fresh encoder and discards their bytes) continues exactly where the old stream was.
It must not decide anything about the run itself: ordering, terminals and gaps are the journal's.

Events are built as plain dicts with the exact camelCase wire names of `ag-ui-protocol` 1.0.0,
whose pydantic models (`ag_ui.core`) do have SUBAGENT_STARTED / SUBAGENT_FINISHED /
SUBAGENT_ERROR and the optional `subagentRunId` on every attributable event; the tests validate
every emitted event against those models. Dicts rather than models because the encoder is on the
hot path of every viewer (`json.dumps` of a dict is ~2.5x an `EventEncoder.encode`). Optional
fields without a value are left out: nothing on the wire is `null`.

Modes (AG-UI subagents and their compatibility: https://docs.ag-ui.com/concepts/subagents):

- `attributed` (default): SUBAGENT_STARTED (name, parentToolCallId, parentMessageId,
  parentSubagentRunId for a delegation spawned by another subagent's tool call, metadata with the
  agent key, protocol and remote ids), `subagentRunId` (the delegation id) on every event a
  subagent produced, SUBAGENT_FINISHED (`result`: the summary, `outcome`: success) or
  SUBAGENT_ERROR (failed, cancelled: `code` is the engine's error code). A subagent's text,
  reasoning and tool calls are native AG-UI events; its statuses, artifacts, input requests,
  drop markers and custom payloads are CUSTOM events named after the engine kind. An input
  request is a CUSTOM `subagent.input_required` naming the interrupt (the engine question's id,
  `<delegation id>-input-<sequence>`, with the question under `question`); by itself the
  subagent stays open while the host waits for the answer (a viewer that cannot end its stream
  at an interrupt answers through the host), and a delegation that ends waiting (status
  `input_required`) ends with SUBAGENT_FINISHED and a `suspended` outcome naming that
  interrupt. A subagent id is never announced twice in one run: @ag-ui/client 1.0.0 refuses
  that; a continuation (the same id again, AG-UI "Suspension") is for the run that resumes it.
- `custom`: the parent's events as AG-UI events; every delegation event is a CUSTOM event named
  `subagent.*` whose value carries the delegation's identity (runId, parentToolCallId, delegationId,
  agentKey, agentName, remoteTaskId, remoteContextId, messageId, delta) plus the event's own
  (status, text, artifact, error, toolCallId, ...), camelCase. An input request is followed by a
  CUSTOM `subagent.interrupt` whose value adds `interrupts`: the AG-UI `Interrupt` objects an
  attributed stream would end with (see "Interrupts"); the stream stays open.
- `inline`: the pre-subagent shape. A subagent's text, reasoning and tool calls arrive as the
  parent's (no `subagentRunId`, no lifecycle); its custom payloads are kept untagged; statuses,
  artifacts, input requests, drop markers and lifecycle are dropped.
- `hidden`: only the parent's own events; everything a delegation produced is dropped.

Nested subagents (the delegation's remote reported its own, `subagent.nested.*` and events with a
`nested_id`): in `attributed` mode each is a SUBAGENT_STARTED of its own (its engine id, which is
namespaced under the delegation, as `subagentRunId`; `parentSubagentRunId` the delegation's id or
its nested parent's; `parentToolCallId` the remote's spawning tool call, as the wire id of the
delegation's tool call), its events carry its id, and it ends with SUBAGENT_FINISHED (`suspended`
with no interrupt ids of its own when it waits with the delegation) or SUBAGENT_ERROR; the folded
marker (`subagent.nested.folded`) is a CUSTOM event of the ancestor it was folded into. In
`custom` mode they are `subagent.nested.*` CUSTOM events of the delegation's group whose value adds
`nestedId`, `nestedParentId`, `remoteSubagentId`, `depth`; in `inline` mode their content is the
parent's like the delegation's own; in `hidden` mode they are dropped. A subagent ends after its
nested subagents (the encoder closes any still open, deepest first), and a tool call's result
waits for the nested subagents that call spawned, as for delegations.

Interrupts (AG-UI 1.0 "Interrupts and Resume", https://docs.ag-ui.com/concepts/interrupts and
https://docs.ag-ui.com/spec/1.0/basic/patterns/interrupt-resume): a stream may end at the
engine's open questions instead of a run terminal. The encoder remembers the questions its
stream showed open (`open_questions`: asked by `subagent.input_required`, not yet closed by
`subagent.input_closed` or their delegation's end); `suspend(questions)` gives the frames that
end the stream there: in `attributed` mode every open subagent ends SUBAGENT_FINISHED with
`outcome: {type: "suspended", interruptIds}` (the asking one, the question's `asker` or else its
delegation, names its questions; its ancestors and every other open subagent name none), every
open message, reasoning message and tool call closes, and RUN_FINISHED carries `outcome:
{type: "interrupt", interrupts}`, one `Interrupt` per question (`id` the question id, `reason`
`input_required`, or `confirmation` for a question whose answer is a boolean, `message` its
text, `responseSchema`, `expiresAt` in ISO 8601 UTC, `subagentRunId` the asking subagent, and
`metadata` with the delegation id, agent and the engine's reason). `inline` and `hidden` end
the same way without subagents (no `subagentRunId`: those modes show none); `custom` does not
suspend (see above). The engine's run goes on: only this stream ended. Tool results held for a
suspended subagent stay held. `resume(run_id)`, on an encoder that has suspended (the one that
did, or a fresh one fed the same entries and suspended with the same questions), gives the
frames that open the continuing stream: RUN_STARTED with the new run id, and every suspended
subagent announced again with its `subagentRunId` and links (a continuation of the same
invocation); what the entries after the suspension give follows, as for any stream.

Ordering guarantees, whatever the entries: the first event is RUN_STARTED (synthesized if
needed); the parent's tool call that spawned a subagent is closed (TOOL_CALL_END) before the
subagent is announced, and that call's TOOL_CALL_RESULT is held back until every subagent it
spawned has ended or suspended (agents as tools: the subagent is the call's work); a delegation
event without a visible start gets a synthesized one; content for a message or tool call that was
never opened opens it; a run terminal first closes every open subagent (SUBAGENT_ERROR /
`subagent.cancelled`, code `run_closed`), releases held results, and closes every open text
message, reasoning message and tool call; exactly one RUN_FINISHED (success, or `outcome:
cancelled`) or RUN_ERROR, and nothing after it. Subagent message and tool-call ids are prefixed
with the delegation id unless they already start with it, so two remotes that both say `msg-1`
never collide.

Odd input never raises (unless `strict=True`, for tests): events after the terminal, after their
delegation's terminal, duplicates and closes of unknown ids are dropped and counted in `dropped`
by reason; unknown kinds become CUSTOM events named after the kind.

Output: frames (`adapters.agui._framing`), one per AG-UI event, its JSON and the cursor it
carries: the last event produced from an entry carries the entry's cursor (only when the cursor
is above the last one given, so ids strictly increase). `frames` / `frames_batch` give them, for
any transport to write (the server writes the same frames as SSE or as WebSocket messages);
`feed` / `feed_batch` write them as SSE (`data: <json>` per event, `id: <cursor>` before it
when it carries one, LF only).

Encoding once for many viewers: the viewers of one run may share a `SharedEncoding` (the server
gives each hosted run one). The JSON of a text delta into an open message, the bulk of every
stream, depends only on the event and the mode, so the first viewer to encode it leaves the bytes
there and the others reuse them; what depends on a viewer's own position (opening, closing,
synthesized starts, held results, the `id:` line) is still decided per viewer, so sharing never
changes a byte of any viewer's stream (the tests compare).
"""

from __future__ import annotations

import datetime
import json
import math
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import attrs
from ag_ui.core import EventType

from adapters.agui._framing import Frame, sse_bytes
from engine import (
    DelegationError,
    DelegationEvent,
    ErrorCode,
    JournalEntry,
    Kind,
    Question,
    to_jsonable,
)

__all__ = [
    "DEFAULT_MODE",
    "INTERRUPT_EVENT",
    "MODES",
    "AguiStreamEncoder",
    "SharedEncoding",
    "frame_events",
    "interrupt_of",
]

#: The visibility modes, default first: the one declaration (the server's `?mode=`, the host
#: configuration's `[server] visibility` and the page's choices are checked against it).
MODES: Final = ("attributed", "custom", "inline", "hidden")
DEFAULT_MODE: Final = MODES[0]

_TEXT_ROLES: Final = frozenset({"developer", "system", "assistant", "user"})

_RUN_STARTED: Final = EventType.RUN_STARTED.value
_RUN_FINISHED: Final = EventType.RUN_FINISHED.value
_RUN_ERROR: Final = EventType.RUN_ERROR.value
_TEXT_START: Final = EventType.TEXT_MESSAGE_START.value
_TEXT_CONTENT: Final = EventType.TEXT_MESSAGE_CONTENT.value
_TEXT_END: Final = EventType.TEXT_MESSAGE_END.value
_REASONING_START: Final = EventType.REASONING_START.value
_REASONING_MESSAGE_START: Final = EventType.REASONING_MESSAGE_START.value
_REASONING_MESSAGE_CONTENT: Final = EventType.REASONING_MESSAGE_CONTENT.value
_REASONING_MESSAGE_END: Final = EventType.REASONING_MESSAGE_END.value
_REASONING_END: Final = EventType.REASONING_END.value
_TOOL_START: Final = EventType.TOOL_CALL_START.value
_TOOL_ARGS: Final = EventType.TOOL_CALL_ARGS.value
_TOOL_END: Final = EventType.TOOL_CALL_END.value
_TOOL_RESULT: Final = EventType.TOOL_CALL_RESULT.value
_CUSTOM: Final = EventType.CUSTOM.value
_SUBAGENT_STARTED: Final = EventType.SUBAGENT_STARTED.value
_SUBAGENT_FINISHED: Final = EventType.SUBAGENT_FINISHED.value
_SUBAGENT_ERROR: Final = EventType.SUBAGENT_ERROR.value

# Engine kinds grouped by the entity they act on: (parent kind, subagent kind) -> action.
_TEXT: Final = {
    Kind.PARENT_TEXT_START: "start",
    Kind.PARENT_TEXT_DELTA: "delta",
    Kind.PARENT_TEXT_END: "end",
    Kind.TEXT_START: "start",
    Kind.TEXT_DELTA: "delta",
    Kind.TEXT_END: "end",
}
_REASONING: Final = {
    Kind.PARENT_REASONING_START: "start",
    Kind.PARENT_REASONING_DELTA: "delta",
    Kind.PARENT_REASONING_END: "end",
    Kind.REASONING_START: "start",
    Kind.REASONING_DELTA: "delta",
    Kind.REASONING_END: "end",
}
_TOOL: Final = {
    Kind.PARENT_TOOL_CALL_START: "start",
    Kind.PARENT_TOOL_CALL_ARGS: "args",
    Kind.PARENT_TOOL_CALL_END: "end",
    Kind.PARENT_TOOL_CALL_RESULT: "result",
    Kind.TOOL_CALL_START: "start",
    Kind.TOOL_CALL_ARGS: "args",
    Kind.TOOL_CALL_END: "end",
    Kind.TOOL_CALL_RESULT: "result",
}

_OPEN: Final = "open"
_CLOSED: Final = "closed"
#: Ended for this stream at an interrupt; open again in the stream that resumes (`resume`).
_SUSPENDED: Final = "suspended"

#: AG-UI interrupt reasons (an open string in the spec; these are the ones clients know).
INTERRUPT_INPUT: Final = "input_required"
INTERRUPT_CONFIRMATION: Final = "confirmation"
#: The CUSTOM event that carries a question's interrupts in `custom` mode.
INTERRUPT_EVENT: Final = "subagent.interrupt"

_NESTED_LIFECYCLE: Final = frozenset({Kind.NESTED_STARTED, *Kind.NESTED_TERMINALS})
_FINISHES: Final = frozenset({Kind.FINISHED, Kind.NESTED_FINISHED})
#: A finish with one of these statuses is a suspension (AG-UI `outcome: suspended`), not a success.
_SUSPENDED_STATUSES: Final = frozenset({"input_required", "suspended"})


class SharedEncoding:
    """Encoded pieces that are the same for every viewer of one run in one mode, by event.

    Keyed by the event object (its identity: every viewer of a run gets the same event objects
    from the journal, and an entry merged under pressure is a new object, so it never matches).
    The newest `capacity` pieces per mode are kept; a viewer far behind the others just encodes
    for itself. Nothing is kept while fewer than two encoders use it. `hits` and `misses` count
    lookups."""

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        #: Encoders alive that use this (`join`); with fewer than two nothing is kept.
        self.viewers = 0
        self._pieces: dict[str, dict[int, tuple[DelegationEvent, bytes]]] = {}

    def join(self, encoder: object) -> None:
        """Count `encoder` as a viewer until it is garbage."""
        self.viewers += 1
        weakref.finalize(encoder, self._leave)

    def _leave(self) -> None:
        self.viewers -= 1
        if self.viewers < 2:
            self._pieces.clear()

    def get(self, mode: str, event: DelegationEvent) -> bytes | None:
        if self.viewers < 2:  # one viewer (the usual case) gains nothing from keeping bytes
            return None
        pieces = self._pieces.get(mode)
        piece = pieces.get(id(event)) if pieces is not None else None
        if piece is not None and piece[0] is event:
            self.hits += 1
            return piece[1]
        self.misses += 1
        return None

    def put(self, mode: str, event: DelegationEvent, data: bytes) -> None:
        if self.viewers < 2:
            return
        pieces = self._pieces.setdefault(mode, {})
        pieces[id(event)] = (event, data)  # the event is held, so its id is not reused
        if len(pieces) > self.capacity:
            del pieces[next(iter(pieces))]


@attrs.define
class _Entity:
    """A text message, reasoning message or tool call the consumer has seen opened."""

    tag: str | None  # the subagentRunId it carries on the wire (None: untagged)
    delegation: str | None  # the subagent that produced it (delegation or nested), even untagged
    open: bool = True
    name: str = ""
    parent_message_id: str | None = None
    result_sent: bool = False


@attrs.define
class _Delegation:
    """A subagent of the stream: a delegation, or a nested subagent inside one (`root` is the
    delegation's id; the delegation's own `root` is its `id`)."""

    id: str
    state: str
    parent_tool_call_id: str | None
    parent_subagent: str | None
    identity: DelegationEvent  # its first event: the identity a synthesized terminal copies
    #                            (`_FORGOTTEN` once it ended: nothing copies it any more)
    interrupt: str | None = None  # the input request it is waiting on, if any
    root: str = ""
    #: The SUBAGENT_STARTED it was announced with (attributed mode): what `resume` repeats.
    announcement: dict[str, Any] | None = None

    @property
    def nested(self) -> bool:
        return self.root != self.id


class AguiStreamEncoder:
    """One viewer's AG-UI stream: `frames(entry)` gives the frames of that journal entry,
    `feed(entry)` the same as SSE bytes.

    `translate(entry)` returns the AG-UI events (dicts) without encoding. Create one per viewer
    (`AguiStreamEncoder(thread_id, run_id, mode)` matches the server's `EncoderFactory`).
    """

    def __init__(
        self,
        thread_id: str = "",
        run_id: str = "",
        mode: str = DEFAULT_MODE,
        *,
        strict: bool = False,
        shared: SharedEncoding | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.thread_id = thread_id
        self.run_id = run_id
        self.mode = mode
        self.strict = strict
        self.shared = shared
        if shared is not None:
            shared.join(self)
        #: Engine events left out, by reason (`hidden`, `after_terminal`, `duplicate_start`...).
        self.dropped: Counter[str] = Counter()
        self._last_id = 0
        self._started = False
        self._ended = False
        self._texts: dict[str, _Entity] = {}  # open text messages by wire id
        self._reasoning: dict[str, _Entity] = {}  # open reasoning messages by wire id
        self._calls: dict[str, _Entity] = {}  # every tool call seen, by wire id
        self._delegations: dict[str, _Delegation] = {}  # every subagent seen, by id
        #: The open ones, in the order they opened: what closing and holding results look at,
        #: so a run's thousandth subagent costs no more than its first.
        self._open_subagents: dict[str, _Delegation] = {}
        #: Wire ids of the tool calls each producer (subagent id; None: the parent) opened.
        self._calls_of: dict[str | None, list[str]] = {}
        self._held: list[tuple[str, dict[str, Any]]] = []  # (tool call id, TOOL_CALL_RESULT)
        #: `_fast_target`'s answers since the generic path last ran.
        self._fast_known: dict[tuple[Any, ...], tuple[str, str | None]] = {}
        #: The questions this stream showed open, by id, oldest first.
        self._questions: dict[str, Question] = {}
        #: The subagents `suspend` ended, deepest and newest first (None: not suspended).
        self._suspended: list[_Delegation] | None = None

    # -- the StreamEncoder protocol: frames --------------------------------------------------

    def frames(self, entry: JournalEntry) -> list[Frame]:
        """The frames of one journal entry (`adapters.agui._framing`): the JSON of each AG-UI
        event it gives, the last carrying the entry's cursor when that is above the last cursor
        given (so ids strictly increase); none for an entry the mode hides."""
        fast = self._fast_delta(entry.event)
        if fast is not None:
            cursor = entry.cursor
            if isinstance(cursor, int) and cursor > self._last_id:
                self._last_id = cursor
                return [(cursor, fast)]
            return [(None, fast)]
        events = self.translate(entry)
        if not events:
            return []
        cursor = entry.cursor
        if isinstance(cursor, int) and cursor > self._last_id:
            self._last_id = cursor
            return _frames_of(events, cursor)
        return _frames_of(events, None)

    def translate(self, entry: JournalEntry) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._fast_known:
            self._fast_known.clear()  # what the generic path changes, `_fast_target` rechecks
        try:
            self._translate(entry.event, out)
        except Exception:
            if self.strict:
                raise
            self.dropped["encoder_error"] += 1
        return out

    def frames_batch(self, entries: Sequence[JournalEntry]) -> list[Frame]:
        """The frames of entries that are ready together (one write): what `frames` gives for
        each, except that a run of text deltas into open messages, with nothing else between
        them, becomes one TEXT_MESSAGE_CONTENT per message (in the order the messages first
        appear), the last carrying the run's highest cursor.

        Deltas of different messages are independent streams, and nothing that opens, closes
        or orders anything is moved, so the stream is what `frames` would give with the deltas
        merged, as a viewer behind the journal gets them anyway; a single delta, or a batch of
        one entry, gives exactly `frames`' frames."""
        if len(entries) == 1:
            return self.frames(entries[0])
        out: list[Frame] = []
        run: dict[tuple[str, str | None], list[str]] = {}
        run_entries: list[JournalEntry] = []
        known_get = self._fast_known.get  # the same dict all along (cleared, never replaced)
        for entry in entries:
            event = entry.event
            # `_fast_target`, its remembered case inlined: this loop sees every delta.
            try:
                known = known_get(
                    (event.kind, event.delegation_id, event.nested_id, event.message_id)
                )
            except TypeError:
                known = None
            if known is not None:
                delta = event.delta if event.delta is not None else event.text
                if type(delta) is str and delta:
                    pieces = run.get(known)
                    if pieces is None:
                        run[known] = [delta]
                    else:
                        pieces.append(delta)
                    run_entries.append(entry)
                    continue
            else:
                target = self._fast_target(event)
                if target is not None:
                    key = (target[0], target[1])
                    pieces = run.get(key)
                    if pieces is None:
                        run[key] = [target[2]]
                    else:
                        pieces.append(target[2])
                    run_entries.append(entry)
                    continue
            if run:
                out += self._merged(run, run_entries)
                run = {}
                run_entries = []
            out += self.frames(entry)
        if run:
            out += self._merged(run, run_entries)
        return out

    def feed(self, entry: JournalEntry) -> bytes:
        """`frames(entry)` as SSE bytes."""
        return sse_bytes(self.frames(entry))

    def feed_batch(self, entries: Sequence[JournalEntry]) -> bytes:
        """`frames_batch(entries)` as SSE bytes (one body write)."""
        return sse_bytes(self.frames_batch(entries))

    def _merged(
        self, run: dict[tuple[str, str | None], list[str]], entries: list[JournalEntry]
    ) -> list[Frame]:
        if len(entries) == 1:
            return self.frames(entries[0])
        cursor = entries[-1].cursor  # entries come in cursor order: the last is the highest
        if not isinstance(cursor, int):
            cursor = 0
        out: list[Frame] = [
            (None, _content_json(wire_id, tag, "".join(pieces)))
            for (wire_id, tag), pieces in run.items()
        ]
        if cursor > self._last_id:
            self._last_id = cursor
            out[-1] = (cursor, out[-1][1])
        return out

    def _fast_target(self, event: DelegationEvent) -> tuple[str, str | None, str] | None:
        """(wire id, subagentRunId tag, delta) of a text delta into an already open message:
        the bulk of every stream, written without the generic path; None whenever anything
        else applies (the same checks as `_translate` -> `_text` for this one case).

        The answer for a (kind, delegation, nested subagent, message) is remembered until the
        generic path next runs: only it opens, closes or re-tags anything, so in between the
        same checks give the same answer (the delta itself is checked every time)."""
        kind = event.kind
        try:
            known = self._fast_known.get(
                (kind, event.delegation_id, event.nested_id, event.message_id)
            )
        except TypeError:  # an unhashable id: the checks below refuse it
            known = None
        if known is not None:
            delta = event.delta if event.delta is not None else event.text
            if type(delta) is not str or not delta:
                return None
            return known[0], known[1], delta
        if not self._started or self._ended:
            return None
        did = event.delegation_id
        if kind == Kind.TEXT_DELTA:
            if not did or type(did) is not str:
                return None
            owner = event.nested_id or did
            mode = self.mode
            if mode == "attributed":
                tag: str | None = owner
            elif mode == "inline":
                tag = None
            else:
                return None
            delegation = self._delegations.get(owner)
            if delegation is None or delegation.state != _OPEN or delegation.root != did:
                return None
            wire_id = _sub_id(owner, event.message_id, "message")
        elif kind == Kind.PARENT_TEXT_DELTA and not did:
            tag = None
            wire_id = _parent_id(event.message_id, "message")
        else:
            return None
        entity = self._texts.get(wire_id)
        if entity is None or entity.tag != tag:
            return None
        delta = event.delta if event.delta is not None else event.text
        if type(delta) is not str or not delta:
            return None
        if type(event.message_id) is str or event.message_id is None:
            self._fast_known[(kind, did, event.nested_id, event.message_id)] = (wire_id, tag)
        return wire_id, tag, delta

    def _fast_delta(self, event: DelegationEvent) -> bytes | None:
        """The JSON of a text delta into an already open message (`_fast_target`), shared
        with the run's other viewers when there is a `SharedEncoding`."""
        # `_fast_target`, its remembered case inlined (as in `frames_batch`): every delta of
        # every viewer comes here.
        try:
            known = self._fast_known.get(
                (event.kind, event.delegation_id, event.nested_id, event.message_id)
            )
        except TypeError:  # an unhashable id: `_fast_target` refuses it
            known = None
        if known is not None:
            delta = event.delta if event.delta is not None else event.text
            if type(delta) is not str or not delta:
                return None
            wire_id, tag = known
        else:
            target = self._fast_target(event)
            if target is None:
                return None
            wire_id, tag, delta = target
        shared = self.shared
        if shared is None or shared.viewers < 2:  # nothing is shared (`SharedEncoding.get`)
            return _content_json(wire_id, tag, delta)
        data = shared.get(self.mode, event)
        if data is None:
            data = _content_json(wire_id, tag, delta)
            shared.put(self.mode, event, data)
        return data

    @property
    def ended(self) -> bool:
        """True once the run's terminal event (or `suspend`'s RUN_FINISHED) was produced."""
        return self._ended

    @property
    def suspended(self) -> bool:
        """True between `suspend` and `resume`."""
        return self._suspended is not None

    @property
    def open_questions(self) -> list[Question]:
        """The questions this stream showed asked (`subagent.input_required`) and not yet
        closed, oldest first: what `suspend` may end the stream at."""
        return list(self._questions.values())

    # -- interrupts --------------------------------------------------------------------------

    def suspend(self, questions: Sequence[Question]) -> list[Frame]:
        """The frames that end this stream at `questions` (the engine's open questions, usually
        `open_questions` less those closed since) without a run terminal: every open subagent
        ends suspended, everything open closes, and RUN_FINISHED carries the interrupt outcome
        (see the module docstring). None when there is nothing to suspend (no questions, or the
        stream already ended); nothing is produced after them until `resume`. Not in `custom`
        mode, whose streams stay open at a question (ValueError)."""
        if self.mode == "custom":
            raise ValueError("custom streams stay open at a question; they do not suspend")
        if self._ended or not questions:
            return []
        self._fast_known.clear()
        out: list[dict[str, Any]] = []
        run_id = self.run_id or questions[0].run_id
        if not self._started:
            self._started = True
            out.append(
                {"type": _RUN_STARTED, "threadId": self.thread_id or run_id, "runId": run_id}
            )
        owned: dict[str, list[str]] = {}
        interrupts: list[dict[str, Any]] = []
        for question in questions:
            asker = self._asker(question)
            if asker is not None:
                owned.setdefault(asker, []).append(question.id)
            interrupts.append(interrupt_of(question, asker if self.mode == "attributed" else None))
        suspended: list[_Delegation] = []
        # Newest first: a subagent opened after another may be its child, never its parent.
        for subagent in reversed(list(self._open_subagents.values())):
            self._close_entities(subagent.id, out)
            subagent.state = _SUSPENDED
            del self._open_subagents[subagent.id]
            suspended.append(subagent)
            if self.mode == "attributed":
                ids = owned.get(subagent.id, [])
                out.append(
                    {
                        "type": _SUBAGENT_FINISHED,
                        "subagentRunId": subagent.id,
                        "outcome": {"type": "suspended", "interruptIds": ids},
                    }
                )
        self._close_entities(None, out)
        self._ended = True
        self._suspended = suspended
        out.append(
            {
                "type": _RUN_FINISHED,
                "threadId": self.thread_id or run_id,
                "runId": run_id,
                "outcome": {"type": "interrupt", "interrupts": interrupts},
            }
        )
        return _frames_of(out, None)

    def resume(self, run_id: str) -> list[Frame]:
        """The frames that open the stream continuing a suspended one as AG-UI run `run_id`:
        RUN_STARTED, then each suspended subagent announced again (the same `subagentRunId`,
        name and links; a link to a subagent that is not announced again is left out).
        ValueError if this encoder has not suspended."""
        suspended = self._suspended
        if suspended is None:
            raise ValueError("resume needs an encoder that suspended")
        self._fast_known.clear()
        self._suspended = None
        self._ended = False
        self.run_id = run_id
        out: list[dict[str, Any]] = [
            {"type": _RUN_STARTED, "threadId": self.thread_id or run_id, "runId": run_id}
        ]
        announced: set[str] = set()
        for subagent in reversed(suspended):  # the order they opened in
            subagent.state = _OPEN
            self._open_subagents[subagent.id] = subagent
            announcement = subagent.announcement
            if self.mode == "attributed" and announcement is not None:
                again = dict(announcement)
                if again.get("parentSubagentRunId") not in announced:
                    again.pop("parentSubagentRunId", None)
                out.append(again)
                announced.add(subagent.id)
        return _frames_of(out, None)

    def _asker(self, question: Question) -> str | None:
        """The open subagent that asks `question`: its `asker`, else the deepest of its
        lineage this stream has open (None: none of them is)."""
        for sid in (question.asker, *reversed(question.lineage), question.delegation_id):
            if not sid:
                continue
            subagent = self._open_subagents.get(sid)
            if subagent is not None and subagent.root == question.delegation_id:
                return subagent.id
        return None

    def _note_question(self, event: DelegationEvent) -> None:
        question = event.question
        if question is None or not isinstance(question.id, str):
            return
        if event.kind == Kind.INPUT_REQUIRED and question.open:
            self._questions.pop(question.id, None)
            self._questions[question.id] = question
        else:
            self._questions.pop(question.id, None)

    # -- dispatch ----------------------------------------------------------------------------

    def _translate(self, event: DelegationEvent, out: list[dict[str, Any]]) -> None:
        kind = event.kind
        if self._ended:
            self.dropped["after_terminal"] += 1
            return
        if not self._started:
            self._started = True
            out.append(
                {
                    "type": _RUN_STARTED,
                    "threadId": self.thread_id or self.run_id or event.run_id,
                    "runId": self.run_id or event.run_id,
                }
            )
            if kind == Kind.RUN_STARTED:
                return
        elif kind == Kind.RUN_STARTED:
            self.dropped["duplicate_run_started"] += 1
            return
        if kind in Kind.RUN_TERMINALS:
            self._terminal(event, out)
        elif event.delegation_id:
            self._subagent_event(event.delegation_id, event, out)
        else:
            self._parent_event(event, out)

    def _parent_event(self, event: DelegationEvent, out: list[dict[str, Any]]) -> None:
        kind = event.kind
        if kind in _TEXT:
            self._text(_TEXT[kind], event, _parent_id(event.message_id, "message"), None, out)
        elif kind in _REASONING:
            self._reason(
                _REASONING[kind], event, _parent_id(event.message_id, "reasoning"), None, out
            )
        elif kind in _TOOL:
            self._tool(_TOOL[kind], event, _parent_id(event.tool_call_id, "tool-call"), None, out)
        elif kind == Kind.PARENT_CUSTOM:
            out.append({"type": _CUSTOM, "name": event.name or kind, "value": _custom_value(event)})
        else:  # gap and drop markers, and kinds this version does not know
            out.append({"type": _CUSTOM, "name": kind, "value": self._payload(event)})

    # -- subagents ---------------------------------------------------------------------------

    def _subagent_event(self, did: str, event: DelegationEvent, out: list[dict[str, Any]]) -> None:
        kind = event.kind
        delegation = self._delegations.get(did)
        if delegation is not None and delegation.state == _CLOSED:
            self.dropped["after_subagent_terminal"] += 1
            return
        if delegation is None:
            delegation = self._open_delegation(did, event, out)
            if kind == Kind.STARTED:
                return
        elif kind == Kind.STARTED:
            self.dropped["duplicate_start"] += 1
            return
        if kind == Kind.INPUT_REQUIRED or kind == Kind.INPUT_CLOSED:
            self._note_question(event)
        if kind in Kind.DELEGATION_TERMINALS:
            self._close_delegation(delegation, event, out)
            return
        owner = delegation
        folded = kind == Kind.NESTED_FOLDED
        if kind in _NESTED_LIFECYCLE or (event.nested_id is not None and not folded):
            nested = self._nested_event(delegation, event, out)
            if nested is None:
                return
            owner = nested
        elif folded and event.nested_id is not None:
            # The marker is shown as the ancestor the folded subagent's events go to.
            nested = self._delegations.get(event.nested_id)
            if nested is not None and nested.state == _OPEN and nested.root == did:
                owner = nested
        self._content(did, delegation, owner, event, out)

    def _content(
        self,
        did: str,
        delegation: _Delegation,
        owner: _Delegation,
        event: DelegationEvent,
        out: list[dict[str, Any]],
    ) -> None:
        """An event a subagent (`owner`: the delegation, or a nested subagent of it) produced.
        Message and tool-call ids are prefixed with the producer's id (the delegation's, or a
        nested subagent's, which starts with the delegation's), so ids never collide across
        owners: AG-UI keeps the first owner of an id for the whole run."""
        kind = event.kind
        mode = self.mode
        sid = owner.id
        if mode == "hidden":
            self.dropped["hidden"] += 1
        elif mode == "custom":
            out.append(self._custom_event(event))
            if kind == Kind.INPUT_REQUIRED and event.question is not None and event.question.open:
                value = _drop_none(
                    {
                        "runId": event.run_id or self.run_id,
                        "parentToolCallId": event.parent_tool_call_id,
                        "delegationId": did,
                        "agentKey": event.agent_key,
                        "agentName": event.agent_name,
                        "nestedId": event.nested_id,
                    }
                )
                asker = event.question.asker or did
                value["interrupts"] = [interrupt_of(event.question, asker)]
                out.append({"type": _CUSTOM, "name": INTERRUPT_EVENT, "value": value})
        elif kind in _TEXT or kind in _REASONING or kind in _TOOL:
            tag = sid if mode == "attributed" else None
            if kind in _TEXT:
                wire_id = _sub_id(sid, event.message_id, "message")
                self._text(_TEXT[kind], event, wire_id, tag, out, sid)
            elif kind in _REASONING:
                wire_id = _sub_id(sid, event.message_id, "reasoning")
                self._reason(_REASONING[kind], event, wire_id, tag, out, sid)
            else:
                wire_id = _sub_id(sid, event.tool_call_id, "tool-call")
                self._tool(_TOOL[kind], event, wire_id, tag, out, sid)
        elif kind == Kind.INPUT_REQUIRED:
            delegation.interrupt = _interrupt_id(did, event)
            if mode == "attributed":
                out.append(self._custom_event(event, tag=sid))
            else:
                self.dropped["inline_lifecycle"] += 1
        elif kind == Kind.CUSTOM:
            name = event.name or kind
            if mode == "attributed":
                event_out = {"type": _CUSTOM, "name": name, "value": _custom_value(event)}
                out.append(_tagged(event_out, sid))
            elif name.startswith("subagent."):
                self.dropped["inline_reserved_name"] += 1
            else:
                out.append({"type": _CUSTOM, "name": name, "value": _custom_value(event)})
        elif mode == "attributed":
            out.append(self._custom_event(event, tag=sid))
        else:
            self.dropped["inline_lifecycle"] += 1

    # -- nested subagents (the remote's own, inside a delegation) -----------------------------

    def _nested_event(
        self, root: _Delegation, event: DelegationEvent, out: list[dict[str, Any]]
    ) -> _Delegation | None:
        """The open nested subagent `event` belongs to (announced first if it never was), or
        None when the event was its lifecycle (handled here) or cannot be shown."""
        kind = event.kind
        nid = event.nested_id
        if not nid:
            self.dropped["nested_without_id"] += 1
            return None
        nested = self._delegations.get(nid)
        if nested is not None and nested.root != root.id:
            self.dropped["nested_id_conflict"] += 1
            return None
        if kind == Kind.NESTED_STARTED:
            if nested is None:
                self._open_nested(root, event, out)
            else:  # open: a repeat; ended: an id is announced once per run (@ag-ui/client)
                self.dropped["duplicate_start" if nested.state == _OPEN else "subagent_reused"] += 1
            return None
        if nested is None:
            nested = self._open_nested(
                root, event.derived(Kind.NESTED_STARTED, **_nesting(event)), out
            )
        elif nested.state == _CLOSED:
            self.dropped["after_subagent_terminal"] += 1
            return None
        if kind in Kind.NESTED_TERMINALS:
            self._close_delegation(nested, event, out)
            return None
        return nested

    def _open_nested(
        self, root: _Delegation, event: DelegationEvent, out: list[dict[str, Any]]
    ) -> _Delegation:
        nid = event.nested_id or ""
        did = root.id
        parent = self._delegations.get(event.nested_parent_id or "")
        if parent is None or parent.root != did:
            parent = root
        # The spawning call is the parent's (agents as tools): its wire id has the parent's prefix.
        call_id = (
            _sub_id(parent.id, event.tool_call_id, "tool-call") if event.tool_call_id else None
        )
        nested = _Delegation(nid, _OPEN, call_id, parent.id, event, root=did)
        self._delegations[nid] = self._open_subagents[nid] = nested
        call = self._calls.get(call_id) if call_id else None
        if call is not None and call.open:
            # Agents as tools, one level down: the call closes, then the subagent runs.
            call.open = False
            out.append(_tagged({"type": _TOOL_END, "toolCallId": call_id}, call.tag))
        if self.mode == "attributed":
            announce: dict[str, Any] = {
                "type": _SUBAGENT_STARTED,
                "subagentRunId": nid,
                "name": event.name or event.remote_subagent_id or "subagent",
            }
            if event.text:
                announce["description"] = event.text
            announce["parentSubagentRunId"] = parent.id
            if call_id is not None and call is not None:
                announce["parentToolCallId"] = call_id
            metadata = _drop_none(
                {
                    "agentKey": event.agent_key,
                    "protocol": event.protocol,
                    "remoteSubagentId": event.remote_subagent_id,
                    "depth": event.depth,
                }
            )
            if metadata:
                announce["metadata"] = metadata
            nested.announcement = dict(announce)
            out.append(announce)
        elif self.mode == "custom":
            out.append(self._custom_event(event))
        return nested

    def _open_delegation(
        self, did: str, event: DelegationEvent, out: list[dict[str, Any]]
    ) -> _Delegation:
        call_id = event.parent_tool_call_id
        parent_subagent = None
        call = self._calls.get(call_id) if call_id else None
        if call is not None and call.delegation is not None:
            owner = self._delegations.get(call.delegation)
            if owner is not None and owner.state == _OPEN:
                parent_subagent = owner.id
        delegation = _Delegation(did, _OPEN, call_id, parent_subagent, event, root=did)
        self._delegations[did] = self._open_subagents[did] = delegation
        if call is not None and call.open:
            # Agents as tools: the consumer sees the call close, then the subagent.
            call.open = False
            out.append(_tagged({"type": _TOOL_END, "toolCallId": call_id}, call.tag))
        if self.mode == "attributed":
            self._announce(delegation, event, out)
        elif self.mode == "custom":
            start = event if event.kind == Kind.STARTED else _synthesized_start(event)
            out.append(self._custom_event(start))
        return delegation

    def _announce(
        self, delegation: _Delegation, event: DelegationEvent, out: list[dict[str, Any]]
    ) -> None:
        announce: dict[str, Any] = {
            "type": _SUBAGENT_STARTED,
            "subagentRunId": delegation.id,
            "name": event.agent_name or event.agent_key or "subagent",
        }
        extra = event.extra or {}
        if isinstance(extra.get("description"), str):
            announce["description"] = extra["description"]
        if delegation.parent_subagent is not None:
            announce["parentSubagentRunId"] = delegation.parent_subagent
        if delegation.parent_tool_call_id:
            announce["parentToolCallId"] = delegation.parent_tool_call_id
            call = self._calls.get(delegation.parent_tool_call_id)
            if call is not None and call.parent_message_id:
                announce["parentMessageId"] = call.parent_message_id
        metadata = _drop_none(
            {
                "agentKey": event.agent_key,
                "protocol": event.protocol,
                "remoteTaskId": event.remote_task_id,
                "remoteContextId": event.remote_context_id,
            }
        )
        if metadata:
            announce["metadata"] = metadata
        delegation.announcement = dict(announce)
        out.append(announce)

    def _close_delegation(
        self, delegation: _Delegation, event: DelegationEvent, out: list[dict[str, Any]]
    ) -> None:
        """End a subagent: its open nested subagents first (deepest first), then what it left
        open, then its terminal."""
        suspended = event.kind in _FINISHES and event.status in _SUSPENDED_STATUSES
        for other in reversed(list(self._open_subagents.values())):
            if (
                other.state == _OPEN
                and other.nested
                and other.root == delegation.root
                and other.parent_subagent == delegation.id
            ):
                self._close_delegation(other, _closing(other, suspended=suspended), out)
        self._close_entities(delegation.id, out)
        delegation.state = _CLOSED
        del self._open_subagents[delegation.id]
        delegation.identity = _FORGOTTEN  # the journal's window may let go of that event
        delegation.announcement = None
        if self._questions and not delegation.nested:  # its questions ended with it
            for qid in [q.id for q in self._questions.values() if q.delegation_id == delegation.id]:
                del self._questions[qid]
        if self.mode == "attributed":
            if suspended:
                # A nested subagent owns no interrupt of this run: the delegation's covers all.
                interrupts = []
                if not delegation.nested:
                    interrupts = [delegation.interrupt or _interrupt_id(delegation.id, event)]
                outcome = {"type": "suspended", "interruptIds": interrupts}
                finished: dict[str, Any] = {"type": _SUBAGENT_FINISHED}
                finished["subagentRunId"] = delegation.id
                finished["outcome"] = outcome
                out.append(finished)
            elif event.kind in _FINISHES:
                finished = {"type": _SUBAGENT_FINISHED, "subagentRunId": delegation.id}
                if event.text:
                    finished["result"] = event.text
                finished["outcome"] = {"type": "success"}
                out.append(finished)
            else:
                error = event.error
                message = (error.message if error else None) or event.text
                code = error.code if error else None
                if code is None and event.kind == Kind.CANCELLED:
                    code = "cancelled"
                failed = {
                    "type": _SUBAGENT_ERROR,
                    "subagentRunId": delegation.id,
                    "message": message or f"The subagent ended: {event.kind}.",
                }
                if code:
                    failed["code"] = code
                out.append(failed)
        elif self.mode == "custom":
            out.append(self._custom_event(event))
        self._release(out)

    def _close_entities(self, did: str | None, out: list[dict[str, Any]]) -> None:
        """Close what `did` (None: everything) left open, in the order it was opened."""
        for wire_id, entity in list(self._texts.items()):
            if did is None or entity.delegation == did:
                del self._texts[wire_id]
                out.append(_tagged({"type": _TEXT_END, "messageId": wire_id}, entity.tag))
        for wire_id, entity in list(self._reasoning.items()):
            if did is None or entity.delegation == did:
                del self._reasoning[wire_id]
                end = {"type": _REASONING_MESSAGE_END, "messageId": wire_id}
                out.append(_tagged(end, entity.tag))
                out.append(_tagged({"type": _REASONING_END, "messageId": wire_id}, entity.tag))
        # Every call when the run ends; otherwise only the calls `did` opened (an ended
        # producer opens none after).
        wire_ids = self._calls if did is None else self._calls_of.pop(did, ())
        for wire_id in wire_ids:
            entity = self._calls[wire_id]
            if entity.open:
                entity.open = False
                out.append(_tagged({"type": _TOOL_END, "toolCallId": wire_id}, entity.tag))

    def _blocked(self, call_id: str) -> bool:
        return any(d.parent_tool_call_id == call_id for d in self._open_subagents.values())

    def _release(self, out: list[dict[str, Any]]) -> None:
        if not self._held:
            return
        still: list[tuple[str, dict[str, Any]]] = []
        for call_id, result in self._held:
            owner = self._delegations.get(result.get("subagentRunId", ""))
            if owner is not None and owner.state == _CLOSED:
                # A subagent's call answered while a subagent it spawned still ran, and the
                # caller has ended since: its tag would name a closed subagent.
                self.dropped["result_of_ended_subagent"] += 1
            elif self._blocked(call_id):
                still.append((call_id, result))
            else:
                out.append(result)
        self._held = still

    # -- run terminal ------------------------------------------------------------------------

    def _terminal(self, event: DelegationEvent, out: list[dict[str, Any]]) -> None:
        for delegation in reversed(list(self._open_subagents.values())):
            if delegation.state == _OPEN:
                self._close_delegation(delegation, _closing(delegation), out)
        self._release(out)  # nothing blocks any more: every subagent has ended
        self._close_entities(None, out)
        self._ended = True
        run_id = self.run_id or event.run_id
        thread_id = self.thread_id or run_id
        if event.kind == Kind.RUN_FAILED:
            error = event.error
            message = event.text or (error.message if error else None) or "The run failed."
            failed: dict[str, Any] = {"type": _RUN_ERROR, "message": message}
            if error is not None and error.code:
                failed["code"] = error.code
            out.append(failed)
            return
        finished: dict[str, Any] = {"type": _RUN_FINISHED, "threadId": thread_id, "runId": run_id}
        if event.kind == Kind.RUN_CANCELLED:
            finished["outcome"] = {"type": "cancelled"}
            if event.text:
                finished["metadata"] = {"reason": event.text}
        elif event.text:
            finished["result"] = event.text
        out.append(finished)

    # -- entities ----------------------------------------------------------------------------

    def _text(
        self,
        action: str,
        event: DelegationEvent,
        wire_id: str,
        tag: str | None,
        out: list[dict[str, Any]],
        owner: str | None = None,
    ) -> None:
        delegation = owner or event.delegation_id or None
        if action == "start":
            if wire_id in self._texts:
                self.dropped["duplicate_start"] += 1
                return
            role = event.role if event.role in _TEXT_ROLES else "assistant"
            self._open_text(wire_id, tag, delegation, role, out)
        elif action == "delta":
            delta = _text_of(event)
            if not delta:
                self.dropped["empty_delta"] += 1
                return
            entity = self._texts.get(wire_id)
            if entity is None:
                entity = self._open_text(wire_id, tag, delegation, "assistant", out)
            content = {"type": _TEXT_CONTENT, "messageId": wire_id, "delta": delta}
            out.append(_tagged(content, entity.tag))
        elif wire_id in self._texts:
            entity = self._texts.pop(wire_id)
            out.append(_tagged({"type": _TEXT_END, "messageId": wire_id}, entity.tag))
        else:
            self.dropped["end_of_unknown"] += 1

    def _open_text(
        self,
        wire_id: str,
        tag: str | None,
        delegation: str | None,
        role: str,
        out: list[dict[str, Any]],
    ) -> _Entity:
        entity = self._texts[wire_id] = _Entity(tag, delegation)
        out.append(_tagged({"type": _TEXT_START, "messageId": wire_id, "role": role}, tag))
        return entity

    def _reason(
        self,
        action: str,
        event: DelegationEvent,
        wire_id: str,
        tag: str | None,
        out: list[dict[str, Any]],
        owner: str | None = None,
    ) -> None:
        delegation = owner or event.delegation_id or None
        if action == "start":
            if wire_id in self._reasoning:
                self.dropped["duplicate_start"] += 1
                return
            self._open_reasoning(wire_id, tag, delegation, out)
        elif action == "delta":
            delta = _text_of(event)
            if not delta:
                self.dropped["empty_delta"] += 1
                return
            entity = self._reasoning.get(wire_id)
            if entity is None:
                entity = self._open_reasoning(wire_id, tag, delegation, out)
            content = {"type": _REASONING_MESSAGE_CONTENT, "messageId": wire_id, "delta": delta}
            out.append(_tagged(content, entity.tag))
        elif wire_id in self._reasoning:
            entity = self._reasoning.pop(wire_id)
            end = {"type": _REASONING_MESSAGE_END, "messageId": wire_id}
            out.append(_tagged(end, entity.tag))
            out.append(_tagged({"type": _REASONING_END, "messageId": wire_id}, entity.tag))
        else:
            self.dropped["end_of_unknown"] += 1

    def _open_reasoning(
        self, wire_id: str, tag: str | None, delegation: str | None, out: list[dict[str, Any]]
    ) -> _Entity:
        entity = self._reasoning[wire_id] = _Entity(tag, delegation)
        out.append(_tagged({"type": _REASONING_START, "messageId": wire_id}, tag))
        start = {"type": _REASONING_MESSAGE_START, "messageId": wire_id, "role": "reasoning"}
        out.append(_tagged(start, tag))
        return entity

    def _tool(
        self,
        action: str,
        event: DelegationEvent,
        wire_id: str,
        tag: str | None,
        out: list[dict[str, Any]],
        owner: str | None = None,
    ) -> None:
        delegation = owner or event.delegation_id or None
        call = self._calls.get(wire_id)
        if action == "start":
            if call is not None:
                self.dropped["duplicate_start"] += 1
                return
            self._open_call(wire_id, event, tag, delegation, out)
        elif action == "args":
            delta = _args_delta(event)
            if call is None:
                call = self._open_call(wire_id, event, tag, delegation, out)
            if not call.open:
                self.dropped["args_after_end"] += 1
            elif delta:
                args = {"type": _TOOL_ARGS, "toolCallId": wire_id, "delta": delta}
                out.append(_tagged(args, call.tag))
            else:
                self.dropped["empty_delta"] += 1
        elif action == "end":
            if call is not None and call.open:
                call.open = False
                out.append(_tagged({"type": _TOOL_END, "toolCallId": wire_id}, call.tag))
            else:
                self.dropped["end_of_unknown"] += 1
        else:
            if call is None:
                call = self._open_call(wire_id, event, tag, delegation, out)
            if call.result_sent:
                self.dropped["duplicate_result"] += 1
                return
            if call.open:
                call.open = False
                out.append(_tagged({"type": _TOOL_END, "toolCallId": wire_id}, call.tag))
            call.result_sent = True
            result: dict[str, Any] = {
                "type": _TOOL_RESULT,
                "messageId": f"{wire_id}-result",
                "toolCallId": wire_id,
                "content": _content(event),
                "role": "tool",
            }
            result = _tagged(result, call.tag)
            if self._blocked(wire_id):
                self._held.append((wire_id, result))  # after the subagents it spawned end
            else:
                out.append(result)

    def _open_call(
        self,
        wire_id: str,
        event: DelegationEvent,
        tag: str | None,
        delegation: str | None,
        out: list[dict[str, Any]],
    ) -> _Entity:
        name = event.tool_name or "unknown"
        parent_message = event.message_id if not event.delegation_id else None
        call = _Entity(tag, delegation, name=name, parent_message_id=parent_message)
        self._calls[wire_id] = call
        self._calls_of.setdefault(delegation, []).append(wire_id)
        start: dict[str, Any] = {"type": _TOOL_START, "toolCallId": wire_id, "toolCallName": name}
        if parent_message:
            start["parentMessageId"] = parent_message
        out.append(_tagged(start, tag))
        return call

    # -- CUSTOM payloads ---------------------------------------------------------------------

    def _custom_event(
        self, event: DelegationEvent, *, tag: str | None = None, interrupt_id: str | None = None
    ) -> dict[str, Any]:
        kind = event.kind
        name = kind if kind.startswith("subagent.") else f"subagent.{kind}"
        value = self._payload(event)
        if interrupt_id is None and kind == Kind.INPUT_REQUIRED and event.delegation_id:
            interrupt_id = _interrupt_id(event.delegation_id, event)
        if interrupt_id is not None:
            value["interruptId"] = interrupt_id
        return _tagged({"type": _CUSTOM, "name": name, "value": value}, tag)

    def _payload(self, event: DelegationEvent) -> dict[str, Any]:
        """The delegation's identity fields first, then the event's own, camelCase, no nulls."""
        value = _drop_none(
            {
                "runId": event.run_id or self.run_id,
                "parentToolCallId": event.parent_tool_call_id,
                "delegationId": event.delegation_id,
                "agentKey": event.agent_key,
                "agentName": event.agent_name,
                "protocol": event.protocol,
                "remoteTaskId": event.remote_task_id,
                "remoteContextId": event.remote_context_id,
                "remoteMessageId": event.remote_message_id,
                "remoteArtifactId": event.remote_artifact_id,
                "remoteToolCallId": event.remote_tool_call_id,
                "cardFingerprint": event.card_fingerprint,
                "messageId": event.message_id,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "name": event.name,
                "role": event.role,
                "delta": event.delta,
                "text": event.text,
                "status": event.status,
                "args": event.args,
                "result": event.result,
                "nestedId": event.nested_id,
                "nestedParentId": event.nested_parent_id,
                "remoteSubagentId": event.remote_subagent_id,
                "depth": event.depth,
            }
        )
        if event.artifact is not None:
            value["artifact"] = _camel(to_jsonable(event.artifact))
        if event.error is not None:
            value["error"] = _camel(to_jsonable(event.error))
        if event.dropped is not None:
            value["dropped"] = _camel(to_jsonable(event.dropped))
        if event.question is not None:
            value["question"] = _drop_none(_camel(to_jsonable(event.question)))
        if event.kind == Kind.CUSTOM:
            value["value"] = _custom_value(event)
        if event.synthesized:
            value["synthesized"] = True
        return value


# -- helpers ---------------------------------------------------------------------------------


def _tagged(event: dict[str, Any], tag: str | None) -> dict[str, Any]:
    if tag is not None:
        event["subagentRunId"] = tag
    return event


def _drop_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _camel(document: Any) -> Any:
    """Top-level snake_case keys of an engine model's JSON -> camelCase (payloads untouched)."""
    if not isinstance(document, dict):
        return document
    out = {}
    for key, value in document.items():
        head, *rest = str(key).split("_")
        out[head + "".join(part[:1].upper() + part[1:] for part in rest)] = value
    return out


def _parent_id(value: str | None, fallback: str) -> str:
    return value if isinstance(value, str) and value else fallback


def _sub_id(did: str, value: str | None, fallback: str) -> str:
    """A subagent's message or tool-call id, made unique across delegations."""
    if not isinstance(value, str) or not value:
        return f"{did}:{fallback}"
    return value if value.startswith(did) else f"{did}:{value}"


def _interrupt_id(did: str, event: DelegationEvent) -> str:
    question = event.question
    if question is not None and isinstance(question.id, str) and question.id:
        return question.id
    return f"{did}-input-{event.sequence}"


def interrupt_of(question: Question, subagent_run_id: str | None = None) -> dict[str, Any]:
    """The AG-UI 1.0 `Interrupt` (camelCase, no nulls) of an engine question: `subagentRunId`
    when given (the subagent that asks, as the stream shows it)."""
    interrupt: dict[str, Any] = {"id": question.id, "reason": _interrupt_reason(question)}
    if question.text:
        interrupt["message"] = question.text
    if isinstance(question.response_schema, dict) and question.response_schema:
        interrupt["responseSchema"] = question.response_schema
    expires_at = _iso_time(question.expires_at)
    if expires_at is not None:
        interrupt["expiresAt"] = expires_at
    if subagent_run_id is not None:
        interrupt["subagentRunId"] = subagent_run_id
    interrupt["metadata"] = _drop_none(
        {
            "runId": question.run_id,
            "delegationId": question.delegation_id,
            "agentKey": question.agent_key or None,
            "agentName": question.agent_name or None,
            "asker": question.asker,
            "engineReason": question.reason,
            "authUrl": question.auth_url,
        }
    )
    return interrupt


def _interrupt_reason(question: Question) -> str:
    """An answer that is one boolean is a confirmation; every other question (credentials
    included: `metadata.engineReason` says `auth_required`) asks for input."""
    schema = question.response_schema
    if isinstance(schema, dict) and schema.get("type") == "boolean":
        return INTERRUPT_CONFIRMATION
    return INTERRUPT_INPUT


def _iso_time(epoch: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (`2026-12-04T06:30:00.000Z`), None for none or nonsense."""
    if epoch is None or isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
        return None
    try:
        moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_of(event: DelegationEvent) -> str:
    delta = event.delta if event.delta is not None else event.text
    return delta if isinstance(delta, str) else ""


def _args_delta(event: DelegationEvent) -> str:
    if isinstance(event.delta, str) and event.delta:
        return event.delta
    args = event.args
    if args is None:
        return ""
    return args if isinstance(args, str) else _dumps(args)


def _content(event: DelegationEvent) -> str:
    result = event.result if event.result is not None else event.text
    if result is None:
        return ""
    return result if isinstance(result, str) else _dumps(result)


def _custom_value(event: DelegationEvent) -> Any:
    raw = event.raw
    if isinstance(raw, dict) and "value" in raw:
        value = raw["value"]
    elif raw is not None:
        value = raw
    else:
        value = event.args if event.args is not None else event.text
    return {} if value is None else value


def _synthesized_start(event: DelegationEvent) -> DelegationEvent:
    return event.derived(Kind.STARTED, synthesized=True)


def _nesting(event: DelegationEvent) -> dict[str, Any]:
    """The nesting fields of a synthesized announcement of `event`'s nested subagent."""
    return {
        "nested_id": event.nested_id,
        "remote_subagent_id": event.remote_subagent_id,
        "synthesized": True,
    }


#: What an ended subagent keeps of its first event: nothing (see `_Delegation.identity`).
_FORGOTTEN: Final = DelegationEvent(kind=Kind.STARTED, run_id="", synthesized=True)


def _closing(subagent: _Delegation, *, suspended: bool = False) -> DelegationEvent:
    """The terminal the encoder gives a subagent nothing ended: the run (or, for a nested one,
    its parent) ended first. A nested subagent of a parent that ends suspended is suspended."""
    identity = subagent.identity
    if subagent.nested:
        kind = Kind.NESTED_FINISHED if suspended else Kind.NESTED_CANCELLED
        fields: dict[str, Any] = {
            "nested_id": subagent.id,
            "remote_subagent_id": identity.remote_subagent_id,
        }
    else:
        kind, fields = Kind.CANCELLED, {}
    if suspended:
        return identity.derived(kind, synthesized=True, status="suspended", **fields)
    return identity.derived(
        kind,
        synthesized=True,
        status="cancelled",
        error=DelegationError(
            code=ErrorCode.RUN_CLOSED,
            message="The run ended before this subagent reported an outcome.",
        ),
        **fields,
    )


# -- JSON and frames ----------------------------------------------------------------------------


#: `json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`, built once:
#: `json.dumps` with non-default options makes a new `JSONEncoder` per call, a third of its cost.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode_json: Final = _ENCODER.encode
#: The JSON string literal of a `str`, as `_ENCODER` writes it (`ensure_ascii=False`).
_quote: Final = json.encoder.encode_basestring
_CONTENT_HEAD: Final = '{"type":' + _quote(_TEXT_CONTENT) + ',"messageId":'


def _content_json(wire_id: str, tag: str | None, delta: str) -> bytes:
    """TEXT_MESSAGE_CONTENT's JSON built as a string (one f-string: the cheapest way to join
    its pieces): exactly what `_encode` writes for the dict `_text` builds (same key order,
    `_dumps`' escaping; the tests compare), at a fraction of the cost; a lone surrogate takes
    `_encode`'s escaping path."""
    if tag is None:
        text = f'{_CONTENT_HEAD}{_quote(wire_id)},"delta":{_quote(delta)}}}'
    else:
        text = (
            f'{_CONTENT_HEAD}{_quote(wire_id)},"delta":{_quote(delta)}'
            f',"subagentRunId":{_quote(tag)}}}'
        )
    try:
        return text.encode()
    except UnicodeEncodeError:
        event = {"type": _TEXT_CONTENT, "messageId": wire_id, "delta": delta}
        if tag is not None:
            event["subagentRunId"] = tag
        return _encode(event)


def _dumps(value: Any) -> str:
    """Compact standard JSON (no NaN/Infinity); anything JSON cannot carry becomes a string."""
    try:
        return _encode_json(value)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(_plain(value, 0), separators=(",", ":"), ensure_ascii=False)


def _plain(value: Any, depth: int) -> Any:
    if depth > 64:
        return "…"
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return str(value)


def _encode(event: dict[str, Any]) -> bytes:
    text = _dumps(event)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escape it, as JSON allows
        return json.dumps(json.loads(text), separators=(",", ":")).encode("ascii")


def _frames_of(events: list[dict[str, Any]], cursor: int | None) -> list[Frame]:
    """The frames of events produced from one entry: `cursor` (if given) on the last one."""
    frames: list[Frame] = [(None, _encode(event)) for event in events]
    if cursor is not None and frames:
        frames[-1] = (cursor, frames[-1][1])
    return frames


def frame_events(events: list[dict[str, Any]], cursor: int | None) -> bytes:
    """SSE bytes for events produced from one entry: `id: cursor` on the last one (if given)."""
    return sse_bytes(_frames_of(events, cursor))
