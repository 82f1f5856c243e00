"""The AG-UI conformance checker: is a captured event stream one a consumer accepts?

This module owns the verifier rules our streams are held to, as typed `Violation`s with the index
of the offending event. It is sans-IO and keeps no state between checks: `StreamChecker` takes
decoded events (dicts, as `parse_sse` returns them) one at a time; `check_events` and
`check_frames` run it over a whole capture. It must not repair anything: the encoder does that.

The rules are @ag-ui/client 1.0.0's `verifyEvents` (the "Rules clients enforce" of
https://docs.ag-ui.com/concepts/subagents) plus the ones it leaves out (it checks neither that a
stream ends with RUN_FINISHED / RUN_ERROR nor that a tag names an open subagent), each a `Rule`
constant:

- every event is an AG-UI 1.0 event: a known type whose fields validate against the
  `ag-ui-protocol` models, camelCase keys, no `null` for an absent field (`malformed_event`);
  RUN_STARTED / RUN_FINISHED / RUN_ERROR / MESSAGES_SNAPSHOT carry no `subagentRunId`;
- the first event is RUN_STARTED or RUN_ERROR; RUN_STARTED does not come while a run is active;
  each run ends with exactly one RUN_FINISHED or RUN_ERROR and only a new RUN_STARTED may follow
  it (stricter than @ag-ui/client, which lets a RUN_ERROR follow RUN_FINISHED); a stream that
  stops without a terminal is reported;
- start/end discipline per text message id, tool call id, reasoning span and reasoning message
  id, step (keyed by owner and name) and subagent run id: no second start while open, content and
  ends only for open ids;
- owner consistency (OwnerMismatch, as @ag-ui/client 1.0.0 checks it): a continuation, end
  or re-open that names a different subagent than the one that first opened the id in this run
  (messages, tool calls, reasoning, activities, encrypted values); a tool call tagged unlike the
  message that carries it; a step finished by another owner than the one that started it. A bare
  continuation is accepted and the first writer stays the owner. Beyond the client: a
  `subagentRunId` tag must name an open subagent;
- subagents: a nested SUBAGENT_STARTED names a parent started in this run; an id is announced
  once per run
  (@ag-ui/client refuses a second announcement in the same run even after a `suspended`
  outcome; a continuation re-announces it in the run that resumes); SUBAGENT_FINISHED /
  SUBAGENT_ERROR close an open id;
- tool results answer a call that was started, after its TOOL_CALL_END, and after every subagent
  that call spawned has ended (agents as tools: the subagent's terminal before the result);
- nothing is open at RUN_FINISHED: text, tool calls, steps, reasoning, subagents;
- interrupts (https://docs.ag-ui.com/spec/1.0/basic/patterns/interrupt-resume), beyond the
  client (`interrupt_mismatch`): the interrupts of a RUN_FINISHED `interrupt` outcome have
  unique ids, and an interrupt's `subagentRunId` names a subagent that ended suspended in this
  run naming that interrupt among its `interruptIds` (the reverse is not required: a
  delegation that ended waiting and was handed back to its parent names a question that is
  not the run's interrupt). A run that starts after an interrupted one continues it: a
  TOOL_CALL_RESULT may answer a tool call the interrupted run left unanswered (the parent's call
  that waited on the suspended subagent);
- CUSTOM `subagent.*` groups (the `custom` mode: untagged CUSTOM events whose value names a
  `delegationId`): events only inside a group opened by `subagent.started`, exactly one
  terminal (`subagent.finished` / `failed` / `cancelled`), none open at RUN_FINISHED, and the
  group's terminal before its parent tool call's result;
- `check_frames` also checks that SSE ids strictly increase.

Chunks are judged as the client judges them: @ag-ui/client runs `transformChunks` between schema
enforcement and `verifyEvents`, so every well-formed event first goes through
`adapters.agui._chunks.ChunkExpander` (a chunk stripped, as enforcement strips it, to the fields
its schema describes) and the rules above apply to what comes out: a TEXT_MESSAGE_CHUNK /
TOOL_CALL_CHUNK / REASONING_MESSAGE_CHUNK as the START / CONTENT (ARGS) it expands to, and the
ENDs the expansion inserts before an event that closes a pending chunk stream (a run event, the
stream's subagent terminal, an explicit event of the same lane). A violation still names the
index and type of the event as captured; its message says when it concerns an expanded event.
Where the expansion itself throws, the checker reports it (with the client's message):
`not_started` for a chunk that opens a stream without an id, `owner_mismatch` for a chunk whose
tag contradicts the lane holding its id, `chunk_rejected` for an opening TOOL_CALL_CHUNK without
`toolCallName`, a continuation that changes role / name / toolCallName / parentMessageId, or an
id-less, untagged continuation while several lanes hold that kind. A chunk stream that stops
without a terminal gets no synthesized END (the client discards them), only `missing_terminal`.

Replayed history registers owners, as the client's verifier records them: each message of a
MESSAGES_SNAPSHOT (replacing a recorded owner) and of the RUN_STARTED `input` (only ids not yet
claimed), in the bucket its role streams through (reasoning, activity, else message), with an
assistant message's tool calls under the message's owner; a later opener, continuation, tool
call or chunk that names another subagent is an `owner_mismatch`, a message tagged
`subagentRunId: null` is `malformed_event`, and a TOOL_CALL_RESULT may answer a call that only
the replayed history holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs
from ag_ui.core import Event, EventType

from adapters.agui._chunks import CHUNK_FIELDS, CHUNK_TYPES, ChunkError, ChunkExpander

__all__ = [
    "Rule",
    "StreamChecker",
    "Violation",
    "check_events",
    "check_frames",
]


class Rule:
    """The rule a `Violation` breaks."""

    MALFORMED_EVENT: Final = "malformed_event"
    NOT_ATTRIBUTABLE: Final = "not_attributable"
    FIRST_EVENT: Final = "first_event"
    RUN_ALREADY_STARTED: Final = "run_already_started"
    AFTER_TERMINAL: Final = "after_terminal"
    MISSING_TERMINAL: Final = "missing_terminal"
    OPEN_AT_FINISH: Final = "open_at_finish"
    DUPLICATE_START: Final = "duplicate_start"
    NOT_STARTED: Final = "not_started"
    OWNER_MISMATCH: Final = "owner_mismatch"
    UNKNOWN_SUBAGENT: Final = "unknown_subagent"
    PARENT_NOT_OPEN: Final = "parent_not_open"
    SUBAGENT_REUSED: Final = "subagent_reused"
    RESULT_FOR_UNKNOWN_CALL: Final = "result_for_unknown_call"
    RESULT_BEFORE_CALL_END: Final = "result_before_call_end"
    RESULT_BEFORE_SUBAGENT_END: Final = "result_before_subagent_end"
    INTERRUPT_MISMATCH: Final = "interrupt_mismatch"
    ID_NOT_INCREASING: Final = "id_not_increasing"
    CHUNK_REJECTED: Final = "chunk_rejected"


#: The rule each `ChunkError.code` breaks.
_CHUNK_RULES: Final = {
    "missing_id": Rule.NOT_STARTED,
    "owner_conflict": Rule.OWNER_MISMATCH,
    "missing_name": Rule.CHUNK_REJECTED,
    "field_conflict": Rule.CHUNK_REJECTED,
    "ambiguous": Rule.CHUNK_REJECTED,
    "not_an_object": Rule.MALFORMED_EVENT,
}


@attrs.frozen
class Violation:
    """One broken rule: `index` is the offending event's position (the number of events for a
    problem at the end of the stream), `event_type` its type when it has one."""

    index: int
    rule: str
    message: str
    event_type: str | None = None

    def __str__(self) -> str:
        where = f"event #{self.index}" + (f" ({self.event_type})" if self.event_type else "")
        return f"{where}: {self.rule}: {self.message}"


_TYPES: Final = frozenset(t.value for t in EventType)
_NOT_ATTRIBUTABLE: Final = frozenset(
    {"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"}
)
_SUBAGENT_LIFECYCLE: Final = frozenset({"SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"})
#: Fields whose value may be JSON null because the field is required and typed "any".
_NULL_OK: Final = {"CUSTOM": frozenset({"value"}), "RAW": frozenset({"event"})}
_CUSTOM_TERMINALS: Final = frozenset({"subagent.finished", "subagent.failed", "subagent.cancelled"})

_validator: Any = None
_UNKNOWN: Final = object()


def _validate(event: dict[str, Any]) -> str | None:
    """None if `event` validates against the ag-ui-protocol models, else the first error."""
    global _validator
    if _validator is None:
        from pydantic import TypeAdapter

        _validator = TypeAdapter(Event)
    try:
        _validator.validate_python(event)
    except Exception as exc:  # pydantic.ValidationError, or anything odd the models raise
        errors = getattr(exc, "errors", None)
        if callable(errors):
            try:
                first = errors()[0]
                location = ".".join(str(part) for part in first.get("loc", ())[1:])
                return f"{location or 'event'}: {first.get('msg', 'invalid')}"
            except Exception:
                pass
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


@attrs.define
class _Subagent:
    open: bool
    parent_tool_call_id: str | None


class StreamChecker:
    """Checks one stream event by event: `feed(event)` returns the violations that event adds,
    `finish()` those of the end of the stream (a missing terminal)."""

    def __init__(self) -> None:
        self.index = -1
        self._first = True
        self._active = False  # a run is started and not terminated
        self._finished = False  # the last run ended with RUN_FINISHED
        self._errored = False  # the stream ended with RUN_ERROR
        self._chunks = ChunkExpander()
        #: The unanswered tool calls (and their owners) of a run that ended at an interrupt:
        #: the run that continues it may answer them.
        self._carried: dict[str, str | None] = {}
        self._reset()

    def _reset(self) -> None:
        # Open entities, and who opened each id in this run (kept after it closes: the first
        # writer stays the owner, as @ag-ui/client records it).
        self._texts: set[str] = set()
        self._calls: set[str] = set()
        self._spans: set[str] = set()  # REASONING_START .. REASONING_END
        self._reasoning_messages: set[str] = set()
        self._steps: dict[str | None, set[str]] = {}
        self._message_owner: dict[str, str | None] = {}
        self._call_owner: dict[str, str | None] = {}
        self._reasoning_owner: dict[str, str | None] = {}
        self._activity_owner: dict[str, str | None] = {}
        self._subagents: dict[str, _Subagent] = {}
        self._groups: dict[str, _Subagent] = {}  # CUSTOM subagent.* groups by delegationId
        self._answered: set[str] = set()  # tool calls with a result in this run
        #: The interrupt ids each subagent that ended suspended in this run names.
        self._suspended: dict[str, list[Any]] = {}

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, event: Any) -> list[Violation]:
        self.index += 1
        out: list[Violation] = []
        kind = event.get("type") if isinstance(event, dict) else None
        kind = kind if isinstance(kind, str) else None
        said: set[tuple[str, str]] = set()

        def reporter(note: str) -> Callable[[str, str], None]:
            def report(rule: str, message: str) -> None:
                if (rule, message) not in said:  # a chunk's START and CONTENT fail alike
                    said.add((rule, message))
                    out.append(Violation(self.index, rule, message + note, kind))

            return report

        report = reporter("")
        if not self._well_formed(event, kind, report):
            if self._first:
                self._first = False
                self._active = True
            return out
        assert isinstance(event, dict) and kind is not None
        if kind in _NOT_ATTRIBUTABLE and "subagentRunId" in event:
            report(
                Rule.NOT_ATTRIBUTABLE, f"{kind} describes the whole run and cannot be attributed"
            )

        # The client expands chunks (after enforcing the schema, which strips what a chunk's
        # schema does not describe) before it verifies: judge what it would verify.
        if kind in CHUNK_TYPES:
            event = {k: v for k, v in event.items() if k in CHUNK_FIELDS[kind]}
        failure: ChunkError | None = None
        try:
            expanded = self._chunks.feed(event)
        except ChunkError as exc:
            failure, expanded = exc, exc.partial
        for item in expanded:
            if item is event:
                self._check(item, report)
            elif kind in CHUNK_TYPES:
                self._check(item, reporter(f" (in the {item['type']} this chunk expands to)"))
            else:
                note = f" (in the {item['type']} chunk expansion inserts before this event)"
                self._check(item, reporter(note))
        if failure is not None:
            report(_CHUNK_RULES[failure.code], failure.message)
            if self._first:
                self._first = False
                self._active = True
        return out

    def _check(self, event: dict[str, Any], report: Callable[[str, str], None]) -> None:
        """The rules for one event as the verifier sees it (chunks already expanded)."""
        kind: str = event["type"]
        tag = event.get("subagentRunId") if kind not in _SUBAGENT_LIFECYCLE else None

        if self._first:
            self._first = False
            if kind not in ("RUN_STARTED", "RUN_ERROR"):
                report(Rule.FIRST_EVENT, "the first event must be RUN_STARTED (or RUN_ERROR)")
            self._active = True
            if kind == "RUN_STARTED":
                self._seed_owners(_input_messages(event), False, report)
                return
        elif self._errored or self._finished:
            if kind == "RUN_STARTED":  # a new run on the same stream
                self._finished = self._errored = False
                self._active = True
                self._reset()
                self._call_owner.update(self._carried)  # a continuation answers them
                self._carried = {}
                self._seed_owners(_input_messages(event), False, report)
            else:
                ended = "RUN_ERROR" if self._errored else "RUN_FINISHED"
                report(Rule.AFTER_TERMINAL, f"after {ended} only a new RUN_STARTED may come")
            return
        elif kind == "RUN_STARTED":
            report(Rule.RUN_ALREADY_STARTED, "RUN_STARTED while a run is still active")
            return

        if tag is not None:
            subagent = self._subagents.get(tag)
            if subagent is None or not subagent.open:
                report(Rule.UNKNOWN_SUBAGENT, f"subagentRunId {tag!r} names no open subagent")

        handler = getattr(self, "_on_" + kind.lower(), None)
        if handler is not None:
            handler(event, tag, report)

    def finish(self) -> list[Violation]:
        """Violations of the stream's end: no events at all, or no terminal."""
        self._chunks.close()  # as the client's: pending chunk streams get no END
        index = self.index + 1
        if self._first:
            return [Violation(index, Rule.MISSING_TERMINAL, "the stream has no events")]
        if self._active and not (self._finished or self._errored):
            return [
                Violation(
                    index,
                    Rule.MISSING_TERMINAL,
                    "the stream ends without RUN_FINISHED or RUN_ERROR",
                )
            ]
        return []

    def _well_formed(self, event: Any, kind: str | None, report: Any) -> bool:
        if not isinstance(event, dict):
            report(Rule.MALFORMED_EVENT, "an event must be a JSON object")
            return False
        if kind is None:
            report(Rule.MALFORMED_EVENT, "the event has no string `type`")
            return False
        if kind not in _TYPES:
            report(Rule.MALFORMED_EVENT, f"unknown event type {kind[:64]!r}")
            return False
        nullable = _NULL_OK.get(kind, frozenset())
        for key, value in event.items():
            if not isinstance(key, str) or "_" in key:
                report(Rule.MALFORMED_EVENT, f"field {str(key)[:64]!r} is not camelCase")
                return False
            if value is None and key not in nullable:
                report(Rule.MALFORMED_EVENT, f"field {key!r} is null (leave it out instead)")
                return False
        problem = _validate(event)
        if problem is not None:
            report(Rule.MALFORMED_EVENT, problem)
            return False
        return True

    # -- owners ------------------------------------------------------------------------------

    @staticmethod
    def _mismatch(
        owners: dict[str, str | None], key: str, tag: str | None, what: str, report: Any
    ) -> bool:
        if tag is None or key not in owners or owners[key] == tag:
            return False
        opener = f"subagent {owners[key]!r}" if owners[key] is not None else "the parent agent"
        report(Rule.OWNER_MISMATCH, f"{what} was opened by {opener}, not subagent {tag!r}")
        return True

    def _open(
        self,
        active: set[str],
        owners: dict[str, str | None],
        key: str,
        tag: str | None,
        what: str,
        report: Any,
    ) -> None:
        if key in active:
            report(Rule.DUPLICATE_START, f"{what} is already open")
        elif not self._mismatch(owners, key, tag, what, report):
            active.add(key)
            owners.setdefault(key, tag)

    def _use(
        self,
        active: set[str],
        owners: dict[str, str | None],
        key: str,
        tag: str | None,
        what: str,
        report: Any,
        *,
        close: bool,
    ) -> None:
        if key not in active:
            report(Rule.NOT_STARTED, f"{what} is not open")
        elif not self._mismatch(owners, key, tag, what, report) and close:
            active.discard(key)

    def _seed_owners(self, messages: Any, authoritative: bool, report: Any) -> None:
        """Owners from replayed history, as @ag-ui/client's verifier records them: each message
        of a MESSAGES_SNAPSHOT (`authoritative`: its owner replaces a recorded one) or of the
        RUN_STARTED input (only ids nobody claimed yet), in the bucket its role streams through,
        and an assistant message's tool calls under the message's owner."""
        if not isinstance(messages, list):
            return
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                continue
            mid = message["id"]
            if "subagentRunId" in message and message["subagentRunId"] is None:
                report(
                    Rule.MALFORMED_EVENT,
                    f"message {mid!r} has subagentRunId null (leave it out instead)",
                )
                return
            owner = message.get("subagentRunId")
            role = message.get("role")
            owners = (
                self._reasoning_owner
                if role == "reasoning"
                else self._activity_owner
                if role == "activity"
                else self._message_owner
            )
            if authoritative or mid not in owners:
                owners[mid] = owner
            calls = message.get("toolCalls")
            for call in calls if isinstance(calls, list) else ():
                cid = call.get("id") if isinstance(call, dict) else None
                if isinstance(cid, str) and (authoritative or cid not in self._call_owner):
                    self._call_owner[cid] = owner

    def _on_messages_snapshot(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        self._seed_owners(event.get("messages"), True, report)

    # -- text, tool calls, reasoning, steps --------------------------------------------------

    def _on_text_message_start(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"text message {mid!r}"
        self._open(self._texts, self._message_owner, mid, tag, what, report)

    def _on_text_message_content(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"text message {mid!r}"
        self._use(self._texts, self._message_owner, mid, tag, what, report, close=False)

    def _on_text_message_end(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"text message {mid!r}"
        self._use(self._texts, self._message_owner, mid, tag, what, report, close=True)

    def _on_tool_call_start(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        cid = event["toolCallId"]
        what = f"tool call {cid!r}"
        if cid in self._calls:
            report(Rule.DUPLICATE_START, f"{what} is already open")
            return
        parent = event.get("parentMessageId")
        parent_owner: Any = _UNKNOWN
        if isinstance(parent, str) and parent in self._message_owner:
            parent_owner = self._message_owner[parent]
            if self._mismatch(
                self._message_owner, parent, tag, f"{what}'s parent message {parent!r}", report
            ):
                return
        if cid in self._call_owner:
            if self._mismatch(self._call_owner, cid, tag, what, report):
                return
            if (
                tag is None
                and parent_owner is not _UNKNOWN
                and parent_owner != self._call_owner[cid]
            ):
                report(Rule.OWNER_MISMATCH, f"{what} and its parent message {parent!r} differ")
                return
        self._calls.add(cid)
        if cid not in self._call_owner:
            inherited = None if parent_owner is _UNKNOWN else parent_owner
            self._call_owner[cid] = tag if tag is not None else inherited

    def _on_tool_call_args(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        cid = event["toolCallId"]
        what = f"tool call {cid!r}"
        self._use(self._calls, self._call_owner, cid, tag, what, report, close=False)

    def _on_tool_call_end(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        cid = event["toolCallId"]
        what = f"tool call {cid!r}"
        self._use(self._calls, self._call_owner, cid, tag, what, report, close=True)

    def _on_tool_call_result(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        cid = event["toolCallId"]
        self._answered.add(cid)
        self._message_owner[event["messageId"]] = tag
        if cid in self._calls:
            report(Rule.RESULT_BEFORE_CALL_END, f"tool call {cid!r} has not ended")
        elif cid not in self._call_owner:
            report(Rule.RESULT_FOR_UNKNOWN_CALL, f"tool call {cid!r} was never started")
        for table, what in ((self._subagents, "subagent"), (self._groups, "subagent group")):
            for sid, subagent in table.items():
                if subagent.open and subagent.parent_tool_call_id == cid:
                    report(
                        Rule.RESULT_BEFORE_SUBAGENT_END,
                        f"{what} {sid!r} spawned by tool call {cid!r} has not ended",
                    )

    def _on_reasoning_start(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"reasoning span {mid!r}"
        self._open(self._spans, self._reasoning_owner, mid, tag, what, report)

    def _on_reasoning_end(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"reasoning span {mid!r}"
        self._use(self._spans, self._reasoning_owner, mid, tag, what, report, close=True)

    def _on_reasoning_message_start(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"reasoning message {mid!r}"
        self._open(self._reasoning_messages, self._reasoning_owner, mid, tag, what, report)

    def _on_reasoning_message_content(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"reasoning message {mid!r}"
        owners = self._reasoning_owner
        self._use(self._reasoning_messages, owners, mid, tag, what, report, close=False)

    def _on_reasoning_message_end(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        what = f"reasoning message {mid!r}"
        owners = self._reasoning_owner
        self._use(self._reasoning_messages, owners, mid, tag, what, report, close=True)

    def _on_reasoning_encrypted_value(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        entity = event["entityId"]
        if event["subtype"] == "tool-call":
            self._mismatch(self._call_owner, entity, tag, f"tool call {entity!r}", report)
        elif entity in self._message_owner:
            self._mismatch(self._message_owner, entity, tag, f"message {entity!r}", report)
        else:
            what = f"reasoning message {entity!r}"
            self._mismatch(self._reasoning_owner, entity, tag, what, report)

    def _on_activity_snapshot(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        if mid not in self._activity_owner or event.get("replace") is not False:
            self._activity_owner[mid] = tag

    def _on_activity_delta(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        mid = event["messageId"]
        self._mismatch(self._activity_owner, mid, tag, f"activity {mid!r}", report)

    def _on_step_started(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        name = event["stepName"]
        steps = self._steps.setdefault(tag, set())
        if name in steps:
            report(Rule.DUPLICATE_START, f"step {name!r} is already active")
        else:
            steps.add(name)

    def _on_step_finished(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        name = event["stepName"]
        steps = self._steps.get(tag, set())
        if name in steps:
            steps.discard(name)
            return
        others = [owner for owner, names in self._steps.items() if owner != tag and name in names]
        if others:
            holder = f"subagent {others[0]!r}" if others[0] is not None else "the parent agent"
            report(Rule.OWNER_MISMATCH, f"step {name!r} is open under {holder}")
        else:
            report(Rule.NOT_STARTED, f"step {name!r} was not started")

    # -- subagents ---------------------------------------------------------------------------

    def _on_subagent_started(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        sid = event["subagentRunId"]
        existing = self._subagents.get(sid)
        parent = event.get("parentSubagentRunId")
        if parent is not None and parent not in self._subagents:
            report(Rule.PARENT_NOT_OPEN, f"parent subagent {parent!r} was not started in this run")
        if existing is not None and existing.open:
            report(Rule.DUPLICATE_START, f"subagent {sid!r} is already open")
            return
        if existing is not None:
            report(Rule.SUBAGENT_REUSED, f"subagent {sid!r} already ended in this run")
        self._subagents[sid] = _Subagent(True, event.get("parentToolCallId"))

    def _on_subagent_finished(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        self._end_subagent(event["subagentRunId"], report)
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "suspended":
            ids = outcome.get("interruptIds")
            self._suspended[event["subagentRunId"]] = list(ids) if isinstance(ids, list) else []

    def _on_subagent_error(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        self._end_subagent(event["subagentRunId"], report)

    def _end_subagent(self, sid: str, report: Any) -> None:
        subagent = self._subagents.get(sid)
        if subagent is None or not subagent.open:
            report(Rule.NOT_STARTED, f"subagent {sid!r} is not open")
            return
        subagent.open = False

    def _on_custom(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        name = event["name"]
        value = event.get("value")
        if tag is not None or not name.startswith("subagent.") or not isinstance(value, dict):
            return
        did = value.get("delegationId")
        if not isinstance(did, str):
            return
        group = self._groups.get(did)
        if name == "subagent.started":
            if group is not None:
                report(Rule.DUPLICATE_START, f"subagent group {did!r} was already started")
                return
            call = value.get("parentToolCallId")
            self._groups[did] = _Subagent(True, call if isinstance(call, str) else None)
        elif group is None or not group.open:
            state = "has ended" if group is not None else "was never started"
            report(Rule.NOT_STARTED, f"{name} for subagent group {did!r}, which {state}")
        elif name in _CUSTOM_TERMINALS:
            group.open = False

    # -- run terminals -----------------------------------------------------------------------

    def _on_run_finished(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        open_things: list[str] = []
        open_things += [f"text message {k!r}" for k in self._texts]
        open_things += [f"tool call {k!r}" for k in self._calls]
        open_things += [f"step {name!r}" for names in self._steps.values() for name in names]
        open_things += [f"reasoning span {k!r}" for k in self._spans]
        open_things += [f"reasoning message {k!r}" for k in self._reasoning_messages]
        open_things += [f"subagent {k!r}" for k, s in self._subagents.items() if s.open]
        open_things += [f"subagent group {k!r}" for k, s in self._groups.items() if s.open]
        for thing in open_things:
            report(Rule.OPEN_AT_FINISH, f"{thing} is still open at RUN_FINISHED")
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
            self._check_interrupts(outcome.get("interrupts"), report)
            self._carried = {
                cid: owner for cid, owner in self._call_owner.items() if cid not in self._answered
            }
        self._finished = True
        self._active = False

    def _check_interrupts(self, interrupts: Any, report: Any) -> None:
        if not isinstance(interrupts, list):
            return
        seen: set[Any] = set()
        for interrupt in interrupts:
            if not isinstance(interrupt, dict):
                continue
            iid = interrupt.get("id")
            if iid in seen:
                report(Rule.INTERRUPT_MISMATCH, f"interrupt id {iid!r} is not unique in the run")
            seen.add(iid)
            sid = interrupt.get("subagentRunId")
            if sid is None:
                continue
            if sid not in self._suspended:
                report(
                    Rule.INTERRUPT_MISMATCH,
                    f"interrupt {iid!r} names subagent {sid!r}, which did not end suspended",
                )
            elif iid not in self._suspended[sid]:
                report(
                    Rule.INTERRUPT_MISMATCH,
                    f"interrupt {iid!r} is not among subagent {sid!r}'s interruptIds",
                )

    def _on_run_error(self, event: dict[str, Any], tag: Any, report: Any) -> None:
        self._errored = True
        self._active = False


def _input_messages(event: dict[str, Any]) -> Any:
    run_input = event.get("input")
    return run_input.get("messages") if isinstance(run_input, dict) else None


def check_events(events: Iterable[Any]) -> list[Violation]:
    """Every violation of a whole stream of decoded events, in order."""
    checker = StreamChecker()
    out: list[Violation] = []
    for event in events:
        out.extend(checker.feed(event))
    out.extend(checker.finish())
    return out


def check_frames(frames: Sequence[tuple[int | None, Any]]) -> list[Violation]:
    """`check_events` over `parse_sse` output, plus: SSE ids strictly increase."""
    out: list[Violation] = []
    checker = StreamChecker()
    last: int | None = None
    for index, (cursor, event) in enumerate(frames):
        out.extend(checker.feed(event))
        if cursor is not None:
            if last is not None and cursor <= last:
                kind = event.get("type") if isinstance(event, dict) else None
                out.append(
                    Violation(
                        index,
                        Rule.ID_NOT_INCREASING,
                        f"id {cursor} does not follow id {last}",
                        kind if isinstance(kind, str) else None,
                    )
                )
            last = cursor
    out.extend(checker.finish())
    return out
