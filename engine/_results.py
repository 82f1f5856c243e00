"""Delegation outcomes: the structured result and the typed error a parent model receives.

This module owns the vocabulary of how a delegation ends: its status, the error codes a parent
model is given and whether each is worth retrying, and the bounds of how much of a result a parent
model reads (`DEFAULT_MAX_RESULT_CHARS`, `MIN_RESULT_CHARS`; the view itself is
`engine._parent_view`). It holds values only; the JSON
shape is owned by `engine._wire`, and nothing here performs I/O.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "MIN_RESULT_CHARS",
    "ArtifactRef",
    "DelegationError",
    "DelegationResult",
    "ErrorCode",
    "InputArtifact",
    "ResultMessage",
    "Status",
    "RemoteCancel",
]


#: The default budget, in characters, of what a parent model reads of one delegation's result
#: (`DelegationPolicy.max_result_chars`; rendered by `engine._parent_view`).
DEFAULT_MAX_RESULT_CHARS: Final = 16_000
#: The smallest such budget a host may set: room for the ids, the status and a clipped error.
MIN_RESULT_CHARS: Final = 4_000


class ErrorCode:
    """Stable error codes of a delegation, shared by results, events and tool errors."""

    AGENT_NOT_FOUND: Final = "agent_not_found"
    AGENT_UNAVAILABLE: Final = "agent_unavailable"
    CAPABILITY_UNSUPPORTED: Final = "capability_unsupported"
    REMOTE_REJECTED: Final = "remote_rejected"
    REMOTE_FAILED: Final = "remote_failed"
    REMOTE_TIMEOUT: Final = "remote_timeout"
    STREAM_INTERRUPTED: Final = "stream_interrupted"
    ARTIFACT_TOO_LARGE: Final = "artifact_too_large"
    OUTPUT_TOO_LARGE: Final = "output_too_large"
    INPUT_REQUIRED: Final = "input_required"
    INPUT_REQUIRED_UNSUPPORTED: Final = "input_required_unsupported"
    AUTH_REQUIRED: Final = "auth_required"
    INVALID_INPUT: Final = "invalid_input"
    CONCURRENCY_LIMIT: Final = "concurrency_limit"
    CANCELLED: Final = "cancelled"
    RUN_CLOSED: Final = "run_closed"
    MALFORMED_REMOTE_PAYLOAD: Final = "malformed_remote_payload"
    INTERNAL_ERROR: Final = "internal_error"
    #: The tool endpoint could not tell which run a call belongs to (host misconfiguration).
    CONFIGURATION_ERROR: Final = "configuration_error"
    #: Weak (timing-based) correlation found several candidate parent tool calls.
    AMBIGUOUS_CORRELATION: Final = "ambiguous_correlation"
    #: The process serving the run stopped (crashed, was killed) before the run ended; found
    #: and ended when the archive was opened again.
    INTERRUPTED: Final = "interrupted"
    #: The server node that owned the run lost its lease (it stopped or was cut off); another
    #: node ended the run.
    NODE_LOST: Final = "node_lost"
    #: The run's archive could not be written for longer than its buffer allows.
    STORE_UNAVAILABLE: Final = "store_unavailable"
    #: A run's parent did not end within the host's run deadline; it was stopped.
    RUN_DEADLINE: Final = "run_deadline"
    #: A parent's model endpoint did not answer (refused, timed out) within the retries allowed.
    MODEL_UNAVAILABLE: Final = "model_unavailable"
    #: A delegation id that is not one of this run's (unknown, or another run's).
    DELEGATION_NOT_FOUND: Final = "delegation_not_found"
    #: An answer to a question that is already closed (answered elsewhere, expired, withdrawn).
    QUESTION_CLOSED: Final = "question_closed"
    #: An answer that does not match its question's response schema (the question stays open).
    ANSWER_INVALID: Final = "answer_invalid"


#: Whether a parent may reasonably retry the same call after this error.
RETRYABLE_BY_DEFAULT: Final[dict[str, bool]] = {
    ErrorCode.AGENT_NOT_FOUND: False,
    ErrorCode.AGENT_UNAVAILABLE: True,
    ErrorCode.CAPABILITY_UNSUPPORTED: False,
    ErrorCode.REMOTE_REJECTED: False,
    ErrorCode.REMOTE_FAILED: False,
    ErrorCode.REMOTE_TIMEOUT: True,
    ErrorCode.STREAM_INTERRUPTED: True,
    ErrorCode.ARTIFACT_TOO_LARGE: False,
    ErrorCode.OUTPUT_TOO_LARGE: False,
    ErrorCode.INPUT_REQUIRED: False,
    ErrorCode.INPUT_REQUIRED_UNSUPPORTED: False,
    ErrorCode.AUTH_REQUIRED: False,
    ErrorCode.INVALID_INPUT: False,
    ErrorCode.CONCURRENCY_LIMIT: True,
    ErrorCode.CANCELLED: False,
    ErrorCode.RUN_CLOSED: False,
    ErrorCode.MALFORMED_REMOTE_PAYLOAD: False,
    ErrorCode.INTERNAL_ERROR: True,
    ErrorCode.CONFIGURATION_ERROR: False,
    ErrorCode.AMBIGUOUS_CORRELATION: True,
    ErrorCode.INTERRUPTED: True,
    ErrorCode.NODE_LOST: True,
    ErrorCode.STORE_UNAVAILABLE: True,
    ErrorCode.RUN_DEADLINE: False,
    ErrorCode.MODEL_UNAVAILABLE: True,
    ErrorCode.DELEGATION_NOT_FOUND: False,
    ErrorCode.QUESTION_CLOSED: False,
    ErrorCode.ANSWER_INVALID: False,
}


class Status:
    """Status of a delegation as recorded in its result."""

    RUNNING: Final = "running"
    COMPLETED: Final = "completed"
    FAILED: Final = "failed"
    CANCELLED: Final = "cancelled"
    INPUT_REQUIRED: Final = "input_required"

    TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED, INPUT_REQUIRED})


class RemoteCancel:
    """What happened to the remote task when the engine tried to cancel it."""

    NOT_NEEDED: Final = "not_needed"
    CONFIRMED: Final = "confirmed"
    PENDING: Final = "pending"
    UNSUPPORTED: Final = "unsupported"


@attrs.define(kw_only=True, auto_exc=False, eq=True)
class DelegationError(Exception):
    """A typed, structured delegation error; safe to show a parent model.

    `message` must never contain a credential: builders take it from host-written text or from
    already redacted remote text. Not frozen on purpose: Python (contextlib among others) sets
    `__traceback__` on exceptions it re-raises; treat instances as values all the same.
    """

    code: str
    message: str
    retryable: bool | None = None
    remote_status: str | None = None
    metadata: dict[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        if self.retryable is None:
            self.retryable = RETRYABLE_BY_DEFAULT.get(self.code, False)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@attrs.frozen(kw_only=True)
class InputArtifact:
    """A reference the parent model hands to a delegation (never the content itself)."""

    name: str | None = None
    uri: str | None = None
    mime_type: str | None = None


@attrs.frozen(kw_only=True)
class ArtifactRef:
    """An artifact a delegation produced, referenced by URI rather than inlined into text."""

    id: str | None = None
    name: str | None = None
    description: str | None = None
    mime_type: str | None = None
    uri: str | None = None
    size_bytes: int | None = None
    metadata: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ResultMessage:
    """One message kept in a result (the model-facing text layer)."""

    role: str
    text: str


@attrs.frozen(kw_only=True)
class DelegationResult:
    """The terminal (or, while running, provisional) structured outcome of one delegation.

    The parent model receives exactly this shape; `status` is `running` only in
    `Run.delegations()` snapshots of delegations that have not ended yet.
    """

    delegation_id: str
    agent: str
    remote_protocol: str
    status: str
    run_id: str | None = None
    parent_tool_call_id: str | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None
    summary: str | None = None
    artifacts: tuple[ArtifactRef, ...] = ()
    messages: tuple[ResultMessage, ...] = ()
    error: DelegationError | None = None
    remote_cancel: str | None = None
    card_fingerprint: str | None = None
    raw_task: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == Status.COMPLETED and self.error is None
