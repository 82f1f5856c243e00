"""The delegation state machine: target updates in, ordered delegation events out (sans-IO).

`DelegationState` owns one delegation's lifecycle rules, independent of protocol and of I/O:
`subagent.started` comes first (synthesized from the first update if the remote never said so);
exactly one terminal, after which nothing else is emitted; duplicate and stale remote terminals
are ignored and counted; a status is emitted only when it changes; text and reasoning messages are
opened before their deltas and closed before the terminal; artifacts are counted against
`max_artifacts` (the excess is announced with `subagent.stream.dropped`) and their bytes against
`max_artifact_bytes` (exceeding it ends the delegation with `artifact_too_large`, keeping the
partial result). It also builds the `DelegationResult`: the summary, the assistant messages, the
artifact references and the remote ids.

Theory of operation: the actor calls `feed(update)` for each `TargetUpdate` and its own
`fail()/cancelled()/...` for outcomes it decides (timeouts, cancels, crashes); every call returns
the events to publish, in order, already stamped with identity, sequence and time. Nothing here
awaits, so every rule is unit-, property- and fuzz-testable in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from engine._events import DelegationEvent, DropReport, Kind
from engine._redact import Redactor
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
_CLOSERS: Final = {"text": Kind.TEXT_END, "reasoning": Kind.REASONING_END}


@attrs.frozen(kw_only=True)
class DelegationIdentity:
    """Who a delegation is (000 §8), stamped on every event it emits."""

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
        self.identity = identity
        self.policy = policy
        self._clock = clock
        self._redactor = redactor or Redactor()
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
        self.remote_task_id: str | None = None
        self.remote_context_id: str | None = None
        self.card_fingerprint: str | None = None
        #: Ended by one of our limits (text, artifact bytes) while the remote task still runs:
        #: the actor must cancel it and say so with `note_remote_cancel`.
        self.ended_by_limit = False
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

    # -- reading state -------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        return self.terminal_kind is not None

    @property
    def result(self) -> DelegationResult | None:
        """The final result once the delegation ended (recorded before its terminal event)."""
        return self._result

    def snapshot(self) -> DelegationResult:
        """The result so far: final once ended, otherwise status `running`."""
        return self._result or self._build(Status.RUNNING, None, None)

    # -- feeding updates -----------------------------------------------------------------

    def feed(self, update: TargetUpdate) -> list[DelegationEvent]:
        """Events for one target update (possibly none: duplicates and late updates vanish)."""
        if self.terminal_kind is not None:
            self.ignored_after_terminal += 1
            return []
        if self._redactor:
            # Redact at the boundary: everything derived (events, result, errors) is then clean.
            update = self._redact_update(update)
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
        if kind == Kind.STATUS:
            self._status(out, update.status, update)
        elif kind in _TEXT_KINDS:
            self._text(out, update)
        elif kind == Kind.ARTIFACT:
            self._artifact(out, update)
        elif kind == Kind.INPUT_REQUIRED:
            self.awaiting_input = update.text or ""
            self.status = self.remote_status = update.status or "input_required"
            out.append(self._event(Kind.INPUT_REQUIRED, update, status=self.status))
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
        else:
            # Tool calls, custom payloads and anything newer pass through with identity added.
            out.append(self._event(kind, update))
        return out

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
        update = TargetUpdate(kind=Kind.STATUS, status=status, text=text)
        redacted = self._redact_update(update) if self._redactor else update
        self._status(out, status, redacted, remote=False)
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
        message_id = update.message_id or self._default_message_id(family)
        open_message = self._open.get(message_id)
        if step == "start":
            if open_message is not None:
                return  # a repeated start of an open message adds nothing
            self._open[message_id] = _OpenMessage(family, update.role or "assistant")
            out.append(
                self._event(
                    update.kind, update, message_id=message_id, role=update.role or "assistant"
                )
            )
            return
        if open_message is None:
            open_message = _OpenMessage(family, update.role or "assistant")
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
            open_message.parts.append(update.delta)
            out.append(self._event(update.kind, update, message_id=message_id))
            return
        self._close_message(out, message_id, update)

    def _default_message_id(self, family: str) -> str:
        # Remotes that never name their messages get one message per family until it ends.
        for message_id, open_message in self._open.items():
            if open_message.family == family:
                return message_id
        self._anonymous += 1
        return f"{self.identity.delegation_id}:{family}:{self._anonymous}"

    def _close_message(
        self, out: list[DelegationEvent], message_id: str, update: TargetUpdate | None
    ) -> None:
        open_message = self._open.pop(message_id)
        # Redacted again whole: a secret split across two deltas is only visible joined.
        text = self._redactor.text("".join(open_message.parts))
        if open_message.family == "text" and text:
            self._messages.append(ResultMessage(role=open_message.role, text=text))
        out.append(
            self._event(
                _CLOSERS[open_message.family], update, message_id=message_id, delta=None, text=None
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
        for message_id in list(self._open):
            self._close_message(out, message_id, None)
        kind = {
            Status.COMPLETED: Kind.FINISHED,
            Status.INPUT_REQUIRED: Kind.FINISHED,
            Status.FAILED: Kind.FAILED,
            Status.CANCELLED: Kind.CANCELLED,
        }[status]
        if error is not None:
            error = self._redact_model(
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
            messages=tuple(
                ResultMessage(role=m.role, text=m.text[:limit]) for m in self._messages[-5:]
            ),
            error=error,
            remote_cancel=remote_cancel,
            card_fingerprint=self.card_fingerprint,
            metadata=metadata or None,
        )

    def _redact_update(self, update: TargetUpdate) -> TargetUpdate:
        text = self._redactor.text
        value = self._redactor.value
        changes: dict[str, Any] = {
            name: text(field) if isinstance(field, str) else value(field)
            for name, field in attrs.asdict(update, recurse=False).items()
            if isinstance(field, str | dict | list)
        }
        changes["artifact"] = self._redact_model(update.artifact)
        changes["error"] = self._redact_model(update.error)
        return attrs.evolve(update, **changes)

    def _redact_model(self, value: Any) -> Any:
        if isinstance(value, ArtifactRef):
            return ArtifactRef(
                id=value.id,
                name=value.name and self._redactor.text(value.name),
                description=value.description and self._redactor.text(value.description),
                mime_type=value.mime_type,
                uri=value.uri and self._redactor.text(value.uri),
                size_bytes=value.size_bytes,
                metadata=self._redactor.value(value.metadata),
            )
        if isinstance(value, DelegationError):
            return DelegationError(
                code=value.code,
                message=self._redactor.text(value.message),
                retryable=value.retryable,
                remote_status=value.remote_status and self._redactor.text(value.remote_status),
                metadata=self._redactor.value(value.metadata),
            )
        return value

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
