"""The delegation state machine: target updates in, ordered delegation events out (sans-IO).

`DelegationState` owns one delegation's lifecycle rules, independent of protocol and of I/O:
`subagent.started` comes first (synthesized from the first update if the remote never said so);
exactly one terminal, after which nothing else is emitted; duplicate and stale remote terminals
are ignored and counted; a status is emitted only when it changes; text and reasoning messages are
opened before their deltas and closed before the terminal; artifacts are counted against
`max_artifacts` (the excess is announced with `subagent.stream.dropped`) and their bytes against
`max_artifact_bytes` (exceeding it ends the delegation with `artifact_too_large`, keeping the
partial result). It also builds the `DelegationResult`: the summary (clipped to
`max_summary_chars`, marked "…"), the artifact references, the remote ids and every assistant
message whole. The messages are not cut: their text is already bounded as it streams (past
`max_text_chars` the delegation ends `output_too_large` and keeps what came), so the whole output
a parent reads by reference (`engine._parent_view`) is exactly what the remote said.

Nested subagents (ones the remote itself reports: `TargetUpdate.subagent_id` and the
`subagent.nested.*` kinds) follow the same rules one level down. Each gets an engine id
namespaced under the delegation (`<delegation id>/<remote id>`, `#2`... when the remote reuses
an id that already ended), one `subagent.nested.started` (synthesized for content or a terminal
of a subagent never announced) and exactly one terminal; content after it is ignored and
counted. A nested subagent that ends `suspended` (paused on an interrupt) stays open: the resume
run announces the same id again and continues it (a continuation, as AG-UI allows for a
suspended subagent: https://docs.ag-ui.com/concepts/subagents, "Suspension"), so a viewer never
sees it announced twice. When a nested subagent ends, its open descendants and messages end first;
when the delegation ends, every nested subagent still open ends before it (`suspended` when the
delegation ends waiting for input, else `subagent.nested.cancelled`). Subagents deeper than
`policy.max_nesting_depth` are folded: one `subagent.nested.folded` marker, then their events are
their deepest shown ancestor's. Nested subagents' text is theirs: it is not the delegation's
result (messages, summary), but it counts against `max_text_chars`.

What a target sends is cleaned where it enters (`engine._redact`): every string made valid
Unicode and, with secrets configured, redacted, so events, results and errors derive from clean
values only. A message's deltas and a tool call's streamed arguments are redacted as the one text
they are: each goes through its own `RedactedStream`, whose held tail is released (as one more
delta) before the message's end, the tool call's end or result, its subagent's end or the
delegation's terminal, so a secret split across deltas reaches no viewer, merged or not.

Theory of operation: the actor calls `feed(update)` for each `TargetUpdate` and its own
`fail()/cancelled()/...` for outcomes it decides (timeouts, cancels, crashes); every call returns
the events to publish, in order, already stamped with identity, sequence and time. Nothing here
awaits, so every rule is unit-, property- and fuzz-testable in memory.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

import attrs

from engine._events import DelegationEvent, DropReport, Kind
from engine._questions import Question, QuestionBook, QuestionOutcome, QuestionReason, usable_schema
from engine._redact import RedactedStream, Redactor, is_valid_unicode, valid_text, valid_value
from engine._registry import DelegationPolicy
from engine._results import (
    ArtifactRef,
    DelegationError,
    DelegationResult,
    ErrorCode,
    RemoteCancel,
    ResultMessage,
    Status,
)
from engine._targets import TargetUpdate

__all__ = ["DelegationIdentity", "DelegationState"]

_TEXT_KINDS: Final = {
    Kind.TEXT_START: ("text", "start"),
    Kind.TEXT_DELTA: ("text", "delta"),
    Kind.TEXT_END: ("text", "end"),
    Kind.REASONING_START: ("reasoning", "start"),
    Kind.REASONING_DELTA: ("reasoning", "delta"),
    Kind.REASONING_END: ("reasoning", "end"),
}
_OPENERS: Final = {"text": Kind.TEXT_START, "reasoning": Kind.REASONING_START}
_DELTAS: Final = {"text": Kind.TEXT_DELTA, "reasoning": Kind.REASONING_DELTA}
_CLOSERS: Final = {"text": Kind.TEXT_END, "reasoning": Kind.REASONING_END}
_NESTED_LIFECYCLE: Final = frozenset({Kind.NESTED_STARTED, *Kind.NESTED_TERMINALS})
#: Kinds whose `delta` is one piece of a longer text: redacted by the text's `RedactedStream`.
_STREAMED: Final = frozenset({Kind.TEXT_DELTA, Kind.REASONING_DELTA, Kind.TOOL_CALL_ARGS})
#: The events of a tool call after its start: where its streamed arguments are held and released.
_TOOL_KINDS: Final = frozenset({Kind.TOOL_CALL_ARGS, Kind.TOOL_CALL_END, Kind.TOOL_CALL_RESULT})
#: The fields of a `TargetUpdate` that may hold text (all but the artifact's byte count and flag).
_UPDATE_FIELDS: Final = tuple(
    f.name
    for f in attrs.fields(TargetUpdate)
    if f.name not in ("artifact_bytes", "artifact_append")
)
_update_values: Final = operator.attrgetter(*_UPDATE_FIELDS)
#: Kinds that describe the delegation as a whole: never attributed to a nested subagent.
_UNATTRIBUTABLE: Final = frozenset(
    {Kind.STARTED, Kind.INPUT_REQUIRED, *Kind.DELEGATION_TERMINALS, *_NESTED_LIFECYCLE}
)
#: Nested subagents one delegation tracks; later ones are folded into the delegation.
MAX_NESTED: Final = 1024

_OPEN: Final = "open"
_SUSPENDED: Final = "suspended"
_CLOSED: Final = "closed"


@attrs.frozen(kw_only=True)
class DelegationIdentity:
    """Who a delegation is, stamped on every event it emits."""

    run_id: str
    delegation_id: str
    agent_key: str
    agent_name: str
    protocol: str
    parent_tool_call_id: str | None = None
    #: The model's own id of the tool call, when the parent names it differently (Codex's
    #: `item_N` vs the model's `call_id`): on `subagent.started` and in the result's metadata.
    model_tool_call_id: str | None = None


@attrs.define
class _OpenMessage:
    family: str
    role: str
    parts: list[str] = attrs.field(factory=list)
    #: The shown nested subagent it is attributed to (None: the delegation).
    nested: str | None = None
    #: The nested subagent that produced it (None: the remote agent itself: result text).
    origin: str | None = None
    #: Its deltas redacted as one text (secrets configured only).
    stream: RedactedStream | None = None


@attrs.define
class _HeldArgs:
    """A tool call's streamed arguments redacted as one text, and the last update of them (whose
    attribution the held tail is released with)."""

    stream: RedactedStream
    update: TargetUpdate


@attrs.define
class _Nested:
    """A subagent the remote reported. `visible` is where its events are shown: its own id,
    or (folded) its deepest shown ancestor's (None: the delegation)."""

    id: str
    remote_id: str
    parent: str | None
    depth: int
    visible: str | None
    state: str = _OPEN

    @property
    def shown(self) -> bool:
        return self.visible == self.id


class DelegationState:
    """One delegation's rules and accumulated result. Not thread-safe; one actor drives it."""

    def __init__(
        self,
        identity: DelegationIdentity,
        policy: DelegationPolicy,
        *,
        clock: Callable[[], float],
        max_artifacts: int | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.identity = identity if is_valid_unicode(identity) else valid_value(identity)
        self.policy = policy
        self._clock = clock
        self._redactor = redactor or Redactor()
        #: Secrets are configured: the one check the hot path makes for them.
        self._redacting = bool(self._redactor)
        #: Tool calls' streamed arguments held back, by (producing subagent, tool call id).
        self._tool_args: dict[tuple[str | None, str | None], _HeldArgs] = {}
        self.max_artifacts = (
            policy.max_artifacts
            if max_artifacts is None
            else min(max_artifacts, policy.max_artifacts)
        )
        self.sequence = 0
        self.started = False
        self.terminal_kind: str | None = None
        #: The last status shown (the remote's, or a host note such as `cancel_pending`).
        self.status: str | None = None
        #: The remote's own last status: what errors report as `remote_status`.
        self.remote_status: str | None = None
        self._status_text: str | None = None
        self.awaiting_input: str | None = None  # the remote's question while input is required
        #: The delegation's questions: the open one (if any) and those closed before.
        self.questions = QuestionBook()
        self._unannounced: Question | None = None
        self.remote_task_id: str | None = None
        self.remote_context_id: str | None = None
        self.card_fingerprint: str | None = None
        #: Ended by one of our limits (text, artifact bytes) while the remote task still runs:
        #: the actor must cancel it and say so with `note_remote_cancel`.
        self.ended_by_limit = False
        #: Artifact contents the target gave (`TargetUpdate.artifact_data`), by artifact key;
        #: bounded with the artifacts' bytes by `max_artifact_bytes`.
        self.artifact_contents: dict[str, bytearray] = {}
        self.ignored_after_terminal = 0
        self.ignored_duplicate_starts = 0
        self._open: dict[str, _OpenMessage] = {}
        self._messages: list[ResultMessage] = []
        self._artifacts: dict[str, ArtifactRef] = {}
        self._artifact_bytes = 0
        self._text_chars = 0
        self._artifacts_dropped = 0
        self._summary: str | None = None
        self._result: DelegationResult | None = None
        self._anonymous = 0
        #: Nested subagents by the remote's id (the latest of that id), and all in start order.
        self._nested: dict[str, _Nested] = {}
        self._nested_all: list[_Nested] = []
        #: Past MAX_NESTED: every further nested subagent is this one, folded into the delegation.
        self._overflow: _Nested | None = None
        self.nested_folded = 0
        self.ignored_nested = 0  # content or terminals after a nested subagent ended, ...

    # -- reading state -------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        return self.terminal_kind is not None

    @property
    def result(self) -> DelegationResult | None:
        """The final result once the delegation ended (recorded before its terminal event)."""
        return self._result

    def artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes] | None:
        """An artifact this delegation produced and the content its target gave (None: no
        such artifact, or its target gave only a reference)."""
        content = self.artifact_contents.get(artifact_id)
        reference = self._artifacts.get(artifact_id)
        if content is None or reference is None:
            return None
        return reference, bytes(content)

    def snapshot(self) -> DelegationResult:
        """The result so far: final once ended, otherwise status `running`."""
        return self._result or self._build(Status.RUNNING, None, None)

    # -- feeding updates -----------------------------------------------------------------

    def feed(self, update: TargetUpdate) -> list[DelegationEvent]:
        """Events for one target update (possibly none: duplicates and late updates vanish)."""
        if self.terminal_kind is not None:
            self.ignored_after_terminal += 1
            return []
        if self._redacting or not _valid_unicode(update):
            # Clean at the boundary: everything derived (events, result, errors) is then clean.
            update = self._clean_update(update)
        out: list[DelegationEvent] = []
        self._learn_ids(update)
        kind = update.kind
        if kind == Kind.STARTED:
            if self.started:
                self.ignored_duplicate_starts += 1
                return out
            self._start(out, update)
            return out
        if not self.started:
            self._start(out, None)
        if kind in _NESTED_LIFECYCLE:
            self._nested_lifecycle(out, update)
            return out
        if update.subagent_id is not None and kind not in _UNATTRIBUTABLE:
            nested = self._nested_for(out, update.subagent_id)
            if nested is None:
                self.ignored_nested += 1
                return out
            if kind == Kind.STATUS:
                # A nested subagent's status is its own: never the delegation's status.
                out.append(self._event(Kind.STATUS, update))
                return out
        if kind == Kind.STATUS:
            self._status(out, update.status, update)
        elif kind in _TEXT_KINDS:
            self._text(out, update)
        elif kind == Kind.ARTIFACT:
            self._artifact(out, update)
        elif kind == Kind.INPUT_REQUIRED:
            self._ask(out, update)
        elif kind == Kind.FINISHED:
            if update.text:
                self._summary = update.text
            self._finish(out, Status.COMPLETED, None, update)
        elif kind == Kind.FAILED:
            error = update.error or DelegationError(
                code=ErrorCode.REMOTE_FAILED,
                message="The remote agent reported failure.",
                remote_status=update.status,
            )
            self._finish(out, Status.FAILED, error, update)
        elif kind == Kind.CANCELLED:
            self._finish(out, Status.CANCELLED, None, update, remote_cancel=RemoteCancel.CONFIRMED)
        elif kind in _TOOL_KINDS and self._redacting:
            self._tool(out, update)
        else:
            # Tool calls, custom payloads and anything newer pass through with identity added.
            out.append(self._event(kind, update))
        return out

    def _ask(self, out: list[DelegationEvent], update: TargetUpdate) -> None:
        """The remote waits for input: one open question (a question still open is withdrawn:
        the remote asks anew)."""
        self._announce(out)
        self._close_question(out, QuestionOutcome.WITHDRAWN)
        self.awaiting_input = update.text or ""
        self.status = self.remote_status = update.status or "input_required"
        event = self._event(Kind.INPUT_REQUIRED, update, status=self.status)
        ident = self.identity
        lineage, asker = self._lineage(update.subagent_id)
        if update.remote_lineage:
            # The remote's own ids (another engine's), below the one that asks here.
            lineage = (*lineage, *update.remote_lineage)
            asker = lineage[-1]
        now = self._clock()
        wait = self.policy.input_wait_timeout
        question = Question(
            id=f"{ident.delegation_id}-input-{event.sequence}",
            run_id=ident.run_id,
            delegation_id=ident.delegation_id,
            agent_key=ident.agent_key,
            agent_name=ident.agent_name or ident.agent_key,
            text=self.awaiting_input,
            reason=(
                QuestionReason.AUTH
                if (update.status or "").replace("-", "_") == QuestionReason.AUTH
                else QuestionReason.INPUT
            ),
            response_schema=usable_schema(update.response_schema),
            auth_url=update.auth_url,
            asked_at=now,
            expires_at=now + wait,
            lineage=lineage,
            asker=asker,
        )
        self.questions.ask(question)
        out.append(attrs.evolve(event, question=question))

    def _lineage(self, remote_subagent_id: str | None) -> tuple[tuple[str, ...], str | None]:
        """(the delegation id and the nested ids down to the asker, the asker's engine id)."""
        did = self.identity.delegation_id
        nested = self._nested.get(remote_subagent_id) if remote_subagent_id else None
        if nested is None or not nested.id:
            return (did,), None
        by_id = {n.id: n for n in self._nested_all}
        chain: list[str] = []
        current: _Nested | None = nested
        while current is not None and len(chain) <= MAX_NESTED:
            chain.append(current.id)
            current = by_id.get(current.parent) if current.parent else None
        return (did, *reversed(chain)), nested.id

    def take_answer(
        self,
        text: str | None,
        data: Any,
        *,
        question_id: str | None,
        outcome: str = QuestionOutcome.ANSWERED,
        surface: str | None = None,
        answered_by: str | None = None,
    ) -> Question:
        """Close the open question for this answer (or decline) at once, so that no other
        surface can take it; its `subagent.input_closed` event comes from `announce_closed`.
        Raises the typed refusals of `QuestionBook.check_answer`."""
        if outcome == QuestionOutcome.ANSWERED:
            self.questions.check_answer(
                text, data, question_id=question_id, delegation_id=self.identity.delegation_id
            )
        else:
            self.questions.check_open(question_id, delegation_id=self.identity.delegation_id)
        closed = self.questions.close(
            outcome, time=self._clock(), surface=surface, answered_by=answered_by
        )
        assert closed is not None
        self._unannounced = closed
        return closed

    def announce_closed(self) -> list[DelegationEvent]:
        """The `subagent.input_closed` event of a question `take_answer` closed, once."""
        out: list[DelegationEvent] = []
        self._announce(out)
        return out

    def _announce(self, out: list[DelegationEvent]) -> None:
        closed, self._unannounced = self._unannounced, None
        if closed is not None:
            out.append(
                self._event(
                    Kind.INPUT_CLOSED,
                    None,
                    status=closed.outcome,
                    text=closed.text,
                    question=closed,
                )
            )

    def close_question(self, outcome: str) -> list[DelegationEvent]:
        """Close the open question (expired): its `subagent.input_closed` event."""
        out: list[DelegationEvent] = []
        self._announce(out)
        self._close_question(out, outcome)
        return out

    def _close_question(self, out: list[DelegationEvent], outcome: str) -> None:
        """Close the open question, if any, with `outcome` (expired, withdrawn) and announce it
        (after anything `take_answer` closed, which every caller announces first)."""
        closed = self.questions.close(outcome, time=self._clock())
        if closed is not None:
            self._unannounced = closed
            self._announce(out)

    def resume(self) -> None:
        """The input request was answered; the remote continues."""
        self.awaiting_input = None

    # -- outcomes the actor decides ------------------------------------------------------

    def fail(
        self, error: DelegationError, *, remote_cancel: str | None = None
    ) -> list[DelegationEvent]:
        if self.terminal:
            return []
        out: list[DelegationEvent] = []
        if not self.started:
            self._start(out, None)
        self._finish(out, Status.FAILED, error, None, remote_cancel=remote_cancel)
        return out

    def cancelled(self, *, remote_cancel: str, reason: str = "") -> list[DelegationEvent]:
        """The delegation was cancelled locally; `remote_cancel` says what the remote did."""
        if self.terminal:
            return []
        out: list[DelegationEvent] = []
        if not self.started:
            self._start(out, None)
        if remote_cancel == RemoteCancel.PENDING:
            self._status(out, "cancel_pending", None, remote=False)
        error = DelegationError(
            code=ErrorCode.CANCELLED,
            message=reason or "The delegation was cancelled.",
            remote_status=self.remote_status,
        )
        self._finish(out, Status.CANCELLED, error, None, remote_cancel=remote_cancel)
        return out

    def note_remote_cancel(self, remote_cancel: str) -> None:
        """What became of the remote task after the delegation ended on our side (a limit)."""
        if self._result is not None:
            self._result = attrs.evolve(self._result, remote_cancel=remote_cancel)

    def stop_for_input(self) -> list[DelegationEvent]:
        """End with status `input_required` (policy `return`): the parent decides what next."""
        if self.terminal:
            return []
        out: list[DelegationEvent] = []
        error = DelegationError(
            code=ErrorCode.INPUT_REQUIRED,
            message=f"The remote agent needs more input: {self.awaiting_input or 'unspecified'}",
            remote_status=self.remote_status,
        )
        self._finish(out, Status.INPUT_REQUIRED, error, None)
        return out

    def note_status(self, status: str, text: str | None = None) -> list[DelegationEvent]:
        """A host-side status (e.g. `reconnecting`), emitted only when it changes."""
        if self.terminal:
            return []
        out: list[DelegationEvent] = []
        if not self.started:
            self._start(out, None)
        update = self._clean_update(TargetUpdate(kind=Kind.STATUS, status=status, text=text))
        self._status(out, update.status, update, remote=False)
        return out

    # -- internals -----------------------------------------------------------------------

    def _learn_ids(self, update: TargetUpdate) -> None:
        if update.remote_task_id and self.remote_task_id is None:
            self.remote_task_id = update.remote_task_id
        if update.remote_context_id and self.remote_context_id is None:
            self.remote_context_id = update.remote_context_id
        if update.card_fingerprint:
            self.card_fingerprint = update.card_fingerprint

    def _start(self, out: list[DelegationEvent], update: TargetUpdate | None) -> None:
        self.started = True
        model_id = self.identity.model_tool_call_id
        extra = {"model_tool_call_id": model_id} if model_id else None
        event = self._event(Kind.STARTED, update, synthesized=update is None, extra=extra)
        out.append(event)
        if update is not None and update.status:
            self.status = self.remote_status = update.status

    def _status(
        self,
        out: list[DelegationEvent],
        status: str | None,
        update: TargetUpdate | None,
        *,
        remote: bool = True,
    ) -> None:
        """Show a status once per change; `remote=False` for the host's own notes, which
        never count as the remote's status."""
        text = update.text if update is not None else None
        if remote and status is not None:
            self.remote_status = status
        if status is None or (status, text) == (self.status, self._status_text):
            return
        self.status = status
        self._status_text = text
        out.append(self._event(Kind.STATUS, update, status=status))

    def _text(self, out: list[DelegationEvent], update: TargetUpdate) -> None:
        family, step = _TEXT_KINDS[update.kind]
        nested, origin = self._attribution(update)
        message_id = update.message_id or self._default_message_id(family, origin)
        open_message = self._open.get(message_id)
        if step == "start":
            if open_message is not None:
                return  # a repeated start of an open message adds nothing
            self._open[message_id] = _OpenMessage(
                family, update.role or "assistant", nested=nested, origin=origin
            )
            out.append(
                self._event(
                    update.kind, update, message_id=message_id, role=update.role or "assistant"
                )
            )
            return
        if open_message is None:
            open_message = _OpenMessage(
                family, update.role or "assistant", nested=nested, origin=origin
            )
            self._open[message_id] = open_message
            out.append(
                self._event(
                    _OPENERS[family],
                    update,
                    message_id=message_id,
                    role=open_message.role,
                    delta=None,
                    text=None,
                )
            )
        if step == "delta":
            if not update.delta:
                return
            self._text_chars += len(update.delta)
            if self._text_chars > self.policy.max_text_chars:
                # Text is not an artifact, but it is just as able to flood a viewer and a run.
                error = DelegationError(
                    code=ErrorCode.OUTPUT_TOO_LARGE,
                    message=(
                        f"The remote's text and reasoning exceeded {self.policy.max_text_chars} "
                        "characters; the partial result is kept."
                    ),
                    remote_status=self.remote_status,
                    metadata={"limit_chars": self.policy.max_text_chars},
                )
                self.ended_by_limit = True
                self._finish(out, Status.FAILED, error, None)
                return
            delta = update.delta
            if self._redacting:
                if open_message.stream is None:
                    open_message.stream = self._redactor.stream()
                delta = open_message.stream.feed(delta)
                if not delta:
                    return  # all of it could still be the start of a secret: held
                update = attrs.evolve(update, delta=delta)
            open_message.parts.append(delta)
            out.append(
                self._event(
                    update.kind, update, message_id=message_id, nested_id=open_message.nested
                )
            )
            return
        self._close_message(out, message_id, update)

    def _attribution(self, update: TargetUpdate) -> tuple[str | None, str | None]:
        """(shown nested id, producing nested id) of an update (`_nested_for` ran already)."""
        if update.subagent_id is None:
            return None, None
        nested = self._nested.get(update.subagent_id) or self._overflow
        return (nested.visible, nested.id) if nested is not None else (None, "")

    def _default_message_id(self, family: str, origin: str | None) -> str:
        # Remotes that never name their messages get one message per family (and producer)
        # until it ends.
        for message_id, open_message in self._open.items():
            if open_message.family == family and open_message.origin == origin:
                return message_id
        self._anonymous += 1
        return f"{self.identity.delegation_id}:{family}:{self._anonymous}"

    def _close_message(
        self, out: list[DelegationEvent], message_id: str, update: TargetUpdate | None
    ) -> None:
        open_message = self._open.pop(message_id)
        if open_message.stream is not None:
            # What the message's stream held back goes out before its end, never lost.
            tail = open_message.stream.close()
            if tail:
                open_message.parts.append(tail)
                out.append(
                    self._event(
                        _DELTAS[open_message.family],
                        None,
                        message_id=message_id,
                        delta=tail,
                        nested_id=open_message.nested,
                    )
                )
        # The parts are what was shown: already redacted as one text.
        text = "".join(open_message.parts)
        if open_message.family == "text" and text and open_message.origin is None:
            self._messages.append(ResultMessage(role=open_message.role, text=text))
        out.append(
            self._event(
                _CLOSERS[open_message.family],
                update,
                message_id=message_id,
                delta=None,
                text=None,
                nested_id=open_message.nested,
            )
        )

    def _artifact(self, out: list[DelegationEvent], update: TargetUpdate) -> None:
        artifact = update.artifact or ArtifactRef(id=update.remote_artifact_id)
        key = artifact.id or update.remote_artifact_id or f"artifact-{len(self._artifacts) + 1}"
        known = key in self._artifacts
        if not known and len(self._artifacts) >= self.max_artifacts:
            self._artifacts_dropped += 1
            out.append(
                self._event(
                    Kind.STREAM_DROPPED,
                    None,
                    dropped=DropReport(
                        reason="max_artifacts",
                        count=1,
                        bytes=update.artifact_bytes,
                        kinds={Kind.ARTIFACT: 1},
                    ),
                    remote_artifact_id=key,
                )
            )
            return
        self._artifact_bytes += max(0, update.artifact_bytes)
        if self._artifact_bytes > self.policy.max_artifact_bytes:
            error = DelegationError(
                code=ErrorCode.ARTIFACT_TOO_LARGE,
                message=(
                    f"Artifacts exceeded the {self.policy.max_artifact_bytes}-byte limit "
                    f"(artifact {key!r}); the partial result is kept."
                ),
                remote_status=self.remote_status,
                metadata={"artifact_id": key, "limit_bytes": self.policy.max_artifact_bytes},
            )
            out.append(self._event(Kind.ARTIFACT, update, artifact=artifact, error=error))
            self.ended_by_limit = True
            self._finish(out, Status.FAILED, error, None)
            return
        previous = self._artifacts.get(key)
        size = (previous.size_bytes or 0) if previous is not None and update.artifact_append else 0
        merged = attrs.evolve(
            artifact,
            id=key,
            size_bytes=size + max(0, update.artifact_bytes) or artifact.size_bytes,
        )
        self._artifacts[key] = merged
        if update.artifact_data is not None:
            kept = self.artifact_contents.get(key) if update.artifact_append else None
            if kept is None:
                self.artifact_contents[key] = bytearray(update.artifact_data)
            else:
                kept += update.artifact_data
        out.append(self._event(Kind.ARTIFACT, update, artifact=merged, remote_artifact_id=key))

    def _finish(
        self,
        out: list[DelegationEvent],
        status: str,
        error: DelegationError | None,
        update: TargetUpdate | None,
        *,
        remote_cancel: str | None = None,
    ) -> None:
        self._announce(out)
        self._close_question(out, QuestionOutcome.WITHDRAWN)
        for nested in reversed(self._nested_all):
            if nested.state != _CLOSED:
                self._end_nested_early(out, nested, status)
        for message_id in list(self._open):
            self._close_message(out, message_id, None)
        for key in list(self._tool_args):
            self._release_args(out, key)
        kind = {
            Status.COMPLETED: Kind.FINISHED,
            Status.INPUT_REQUIRED: Kind.FINISHED,
            Status.FAILED: Kind.FAILED,
            Status.CANCELLED: Kind.CANCELLED,
        }[status]
        if error is not None:
            error = self._redactor.value(
                DelegationError(
                    code=error.code,
                    message=error.message,
                    retryable=error.retryable,
                    remote_status=error.remote_status or self.remote_status,
                    metadata=error.metadata,
                )
            )
        self._result = self._build(status, error, remote_cancel)
        self.terminal_kind = kind
        self.awaiting_input = None
        out.append(
            self._event(
                kind,
                update,
                status=status,
                error=error,
                text=self._result.summary,
                delta=None,
            )
        )

    def _build(
        self, status: str, error: DelegationError | None, remote_cancel: str | None
    ) -> DelegationResult:
        limit = self.policy.max_summary_chars
        summary = self._summary
        if summary is None and self._messages:
            summary = self._messages[-1].text
        if summary is not None and len(summary) > limit:
            summary = summary[: max(0, limit - 1)] + "…"
        metadata: dict[str, Any] = {}
        if self._artifacts_dropped:
            metadata["artifacts_dropped"] = self._artifacts_dropped
        if self.identity.model_tool_call_id:
            metadata["model_tool_call_id"] = self.identity.model_tool_call_id
        if self._nested_all:
            metadata["nested_subagents"] = len(self._nested_all)
        if self.nested_folded:
            metadata["nested_folded"] = self.nested_folded
        return DelegationResult(
            delegation_id=self.identity.delegation_id,
            agent=self.identity.agent_key,
            remote_protocol=self.identity.protocol,
            status=status,
            run_id=self.identity.run_id,
            parent_tool_call_id=self.identity.parent_tool_call_id,
            remote_task_id=self.remote_task_id,
            remote_context_id=self.remote_context_id,
            summary=summary,
            artifacts=tuple(self._artifacts.values()),
            messages=tuple(self._messages),
            error=error,
            remote_cancel=remote_cancel,
            card_fingerprint=self.card_fingerprint,
            metadata=metadata or None,
        )

    # -- nested subagents ---------------------------------------------------------------

    def _nested_for(self, out: list[DelegationEvent], remote_id: str) -> _Nested | None:
        """The nested subagent content of `remote_id` belongs to (announced now if it never
        was; a suspended one continues), or None once it ended."""
        nested = self._nested.get(remote_id)
        if nested is None:
            return self._open_nested(out, remote_id, None)
        if nested.state == _SUSPENDED:
            self._continue_nested(out, nested, None)
        return None if nested.state == _CLOSED else nested

    def _nested_lifecycle(self, out: list[DelegationEvent], update: TargetUpdate) -> None:
        remote_id = update.subagent_id
        if not remote_id:
            self.ignored_nested += 1  # a lifecycle that names no subagent says nothing
            return
        nested = self._nested.get(remote_id)
        if update.kind == Kind.NESTED_STARTED:
            if nested is None or nested.state == _CLOSED:
                self._open_nested(out, remote_id, update)  # a reused id: a new invocation
            elif nested.state == _SUSPENDED:
                self._continue_nested(out, nested, update)
            else:
                self.ignored_nested += 1
            return
        if nested is None:
            nested = self._open_nested(out, remote_id, None)
        elif nested.state == _CLOSED:
            self.ignored_nested += 1
            return
        if nested is self._overflow:
            return  # untracked: its terminal has nothing to end
        if update.kind == Kind.NESTED_FINISHED and update.status == "suspended":
            if nested.state == _OPEN:
                self._suspend_nested(out, nested, update)
            return
        status = {
            Kind.NESTED_FINISHED: Status.COMPLETED,
            Kind.NESTED_FAILED: Status.FAILED,
            Kind.NESTED_CANCELLED: Status.CANCELLED,
        }[update.kind]
        self._close_nested(out, nested, update.kind, update, status=status, error=update.error)

    def _open_nested(
        self, out: list[DelegationEvent], remote_id: str, update: TargetUpdate | None
    ) -> _Nested:
        if len(self._nested_all) >= MAX_NESTED:
            if self._overflow is None:
                self._overflow = _Nested(id="", remote_id="", parent=None, depth=0, visible=None)
                self._fold(out, remote_id, update, 0, None, f"more than {MAX_NESTED} subagents")
            return self._overflow
        parent_remote = update.parent_subagent_id if update is not None else None
        parent = self._nested.get(parent_remote) if parent_remote else None
        depth = parent.depth + 1 if parent is not None else 1
        base = f"{self.identity.delegation_id}/{remote_id}"
        engine_id = base
        generation = 1
        taken = {n.id for n in self._nested_all} if remote_id in self._nested else ()
        while engine_id in taken:
            generation += 1
            engine_id = f"{base}#{generation}"
        ancestor = parent.visible if parent is not None else None
        shown = depth <= self.policy.max_nesting_depth
        nested = _Nested(
            id=engine_id,
            remote_id=remote_id,
            parent=parent.id if parent is not None else None,
            depth=depth,
            visible=engine_id if shown else ancestor,
        )
        self._nested[remote_id] = nested
        self._nested_all.append(nested)
        if shown:
            out.append(
                self._event(
                    Kind.NESTED_STARTED,
                    update,
                    nested_id=engine_id,
                    nested_parent_id=nested.parent,
                    remote_subagent_id=remote_id,
                    depth=depth,
                    status="working",
                    synthesized=update is None,
                )
            )
        else:
            reason = f"max_nesting_depth {self.policy.max_nesting_depth}"
            self._fold(out, remote_id, update, depth, ancestor, reason)
        return nested

    def _fold(
        self,
        out: list[DelegationEvent],
        remote_id: str,
        update: TargetUpdate | None,
        depth: int,
        into: str | None,
        reason: str,
    ) -> None:
        """Say that a nested subagent is not shown and that its events become `into`'s."""
        self.nested_folded += 1
        name = update.name if update is not None and update.name else remote_id
        out.append(
            self._event(
                Kind.NESTED_FOLDED,
                None,
                nested_id=into,
                remote_subagent_id=remote_id,
                name=name,
                depth=depth or None,
                status="folded",
                text=(
                    f"Nested subagent {name!r} is beyond {reason}: its events are shown as "
                    "its nearest visible ancestor's."
                ),
            )
        )

    def _continue_nested(
        self, out: list[DelegationEvent], nested: _Nested, update: TargetUpdate | None
    ) -> None:
        """A continuation: the resume run goes on with a suspended nested subagent."""
        nested.state = _OPEN
        if nested.shown:
            text = "continued" if update is not None else "continued (not announced again)"
            out.append(
                self._event(Kind.STATUS, None, nested_id=nested.id, status="working", text=text)
            )

    def _suspend_nested(
        self, out: list[DelegationEvent], nested: _Nested, update: TargetUpdate
    ) -> None:
        for child in reversed(self._nested_all):
            if child.parent == nested.id and child.state == _OPEN:
                self._suspend_nested(out, child, update)
        self._close_messages_of(out, nested.id)
        self._release_args_of(out, nested.remote_id)
        nested.state = _SUSPENDED
        if nested.shown:
            out.append(
                self._event(
                    Kind.STATUS,
                    None,
                    nested_id=nested.id,
                    status="suspended",
                    text=update.text or "waiting for input",
                    raw=update.raw if update.subagent_id == nested.remote_id else None,
                )
            )

    def _close_nested(
        self,
        out: list[DelegationEvent],
        nested: _Nested,
        kind: str,
        update: TargetUpdate | None,
        *,
        status: str,
        error: DelegationError | None = None,
    ) -> None:
        """End one nested subagent: its open descendants and messages first."""
        for child in reversed(self._nested_all):
            if child.parent == nested.id and child.state != _CLOSED:
                self._end_nested_early(out, child, status)
        self._close_messages_of(out, nested.id)
        self._release_args_of(out, nested.remote_id)
        nested.state = _CLOSED
        if nested.shown:
            out.append(
                self._event(
                    kind,
                    update,
                    nested_id=nested.id,
                    remote_subagent_id=nested.remote_id,
                    status=status,
                    error=error,
                    synthesized=update is None,
                )
            )

    def _end_nested_early(self, out: list[DelegationEvent], nested: _Nested, status: str) -> None:
        """End a nested subagent whose parent (or the delegation) ends with `status` first:
        suspended when that parent waits for input, else cancelled."""
        if status == Status.INPUT_REQUIRED:
            self._close_nested(out, nested, Kind.NESTED_FINISHED, None, status="suspended")
            return
        error = DelegationError(
            code=ErrorCode.CANCELLED if status == Status.CANCELLED else ErrorCode.RUN_CLOSED,
            message="Its parent ended before this nested subagent reported an outcome.",
        )
        self._close_nested(
            out, nested, Kind.NESTED_CANCELLED, None, status=Status.CANCELLED, error=error
        )

    def _close_messages_of(self, out: list[DelegationEvent], origin: str) -> None:
        for message_id, open_message in list(self._open.items()):
            if open_message.origin == origin:
                self._close_message(out, message_id, None)

    # -- cleaning what the target sent: valid Unicode, secrets redacted ----------------------

    def _clean_update(self, update: TargetUpdate) -> TargetUpdate:
        """`update` with every string made valid Unicode and, with secrets configured, redacted
        (its kind only made valid: see `engine._redact`); a streamed delta only made valid here:
        its `RedactedStream` redacts it as part of its whole text."""
        changes = self._redactor.fields(update)
        if update.kind in _STREAMED and isinstance(update.delta, str):
            changes["delta"] = valid_text(update.delta)
        return attrs.evolve(update, **changes)

    def _tool(self, out: list[DelegationEvent], update: TargetUpdate) -> None:
        """A tool call's arguments, end or result with secrets configured: streamed arguments
        (`delta`) are redacted as one text per call, and what is held back is released before
        the call's end or result (or its producer's end, or the delegation's terminal)."""
        key = (update.subagent_id, update.tool_call_id)
        if update.kind == Kind.TOOL_CALL_ARGS and update.delta:
            held = self._tool_args.get(key)
            if held is None:
                held = self._tool_args[key] = _HeldArgs(self._redactor.stream(), update)
            held.update = update
            delta = held.stream.feed(update.delta)
            if delta or update.args is not None:
                out.append(self._event(update.kind, update, delta=delta or None))
            return
        if update.kind != Kind.TOOL_CALL_ARGS:
            self._release_args(out, key)
        out.append(self._event(update.kind, update))

    def _release_args(self, out: list[DelegationEvent], key: tuple[str | None, str | None]) -> None:
        held = self._tool_args.pop(key, None)
        if held is None:
            return
        tail = held.stream.close()
        if tail:
            out.append(
                self._event(
                    Kind.TOOL_CALL_ARGS,
                    held.update,
                    delta=tail,
                    args=None,
                    text=None,
                    result=None,
                    raw=None,
                )
            )

    def _release_args_of(self, out: list[DelegationEvent], remote_id: str) -> None:
        for key in [key for key in self._tool_args if key[0] == remote_id]:
            self._release_args(out, key)

    # -- events -------------------------------------------------------------------------

    def _event(self, kind: str, update: TargetUpdate | None, **fields: Any) -> DelegationEvent:
        self.sequence += 1
        ident = self.identity
        base: dict[str, Any] = {}
        if update is not None:
            base = {
                "status": update.status,
                "text": update.text,
                "delta": update.delta,
                "role": update.role,
                "name": update.name,
                "message_id": update.message_id,
                "tool_call_id": update.tool_call_id,
                "tool_name": update.tool_name,
                "args": update.args,
                "result": update.result,
                "artifact": update.artifact,
                "error": update.error,
                "remote_message_id": update.remote_message_id,
                "remote_artifact_id": update.remote_artifact_id,
                "remote_tool_call_id": update.remote_tool_call_id,
                "raw": update.raw,
            }
            if update.subagent_id is not None and kind not in _UNATTRIBUTABLE:
                nested = self._nested.get(update.subagent_id)
                base["nested_id"] = nested.visible if nested is not None else None
        base.update(fields)
        return DelegationEvent(
            kind=kind,
            run_id=ident.run_id,
            sequence=self.sequence,
            time=self._clock(),
            parent_tool_call_id=ident.parent_tool_call_id,
            delegation_id=ident.delegation_id,
            agent_key=ident.agent_key,
            agent_name=ident.agent_name,
            protocol=ident.protocol,
            remote_task_id=self.remote_task_id,
            remote_context_id=self.remote_context_id,
            card_fingerprint=self.card_fingerprint,
            **base,
        )


def _valid_unicode(update: TargetUpdate) -> bool:
    """Whether every string of `update` encodes as UTF-8; an ASCII one costs a flag check."""
    for value in filter(None, _update_values(update)):
        if (value.__class__ is not str or not value.isascii()) and not is_valid_unicode(value):
            return False
    return True
