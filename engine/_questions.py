"""Questions a delegation asks a person, and the one answer each of them takes.

This module owns the engine's model of human-in-the-loop. A remote agent that waits for input
(an A2A task in `input-required` or `auth-required`, an AG-UI run that ends on an interrupt, an
in-process agent's `ask`) becomes one open `Question`: what it asks, who asks (its `lineage`,
from the delegation down to the nested subagent that asks), how an answer must look (a JSON
Schema) and until when it waits. Any surface may answer (the Python API, the HTTP answer
endpoint, the page, an AG-UI resume, MCP elicitation, an A2A follow-up message); the first
valid answer closes the question and every later one is refused with who answered it
(`QuestionBook`). Nothing here does I/O or reads a clock of its own: the delegation actor
passes the time in.

Answers are checked against the question's schema (JSON Schema 2020-12,
https://json-schema.org/draft/2020-12/json-schema-validation) with `jsonschema`; a schema the
remote sent that is itself invalid is not held against the answer (it is dropped when the
question is asked, see `usable_schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
import jsonschema  # type: ignore[import-untyped]
import jsonschema.exceptions  # type: ignore[import-untyped]

from engine._results import DelegationError, ErrorCode

__all__ = [
    "AnswerSurface",
    "check_answer",
    "closed_error",
    "Question",
    "QuestionBook",
    "QuestionOutcome",
    "QuestionReason",
    "usable_schema",
]


class QuestionReason:
    """Why a remote waits: for input in general, or for credentials (A2A `auth-required`)."""

    INPUT: Final = "input_required"
    AUTH: Final = "auth_required"


class QuestionOutcome:
    """How a question closed."""

    ANSWERED: Final = "answered"
    #: Nobody answered before `expires_at`.
    EXPIRED: Final = "expired"
    #: The delegation ended (cancelled, failed, returned to the parent) while it was open.
    WITHDRAWN: Final = "withdrawn"
    #: A person declined to answer (an MCP elicitation declined, an AG-UI resume cancelled);
    #: the agent's policy said what became of the delegation.
    DECLINED: Final = "declined"


class AnswerSurface:
    """Where an answer came from (free-form values are allowed; these are the engine's own)."""

    API: Final = "api"
    HTTP: Final = "http"
    PAGE: Final = "page"
    AGUI_RESUME: Final = "agui_resume"
    MCP_ELICITATION: Final = "mcp_elicitation"
    A2A: Final = "a2a"


#: Longest `answered_by` / `surface` kept (they are shown to people, never trusted).
MAX_LABEL_CHARS: Final = 200
#: Closed questions one delegation remembers (to tell a late answer who answered), newest kept.
MAX_CLOSED_REMEMBERED: Final = 256
#: Largest response schema kept, as characters of its JSON (a remote's payload).
MAX_SCHEMA_CHARS: Final = 64 * 1024


@attrs.frozen(kw_only=True)
class Question:
    """One question of one delegation. Open while `outcome` is None; a closed question is the
    same question with `outcome`, `surface`, `answered_by` and `closed_at` set."""

    id: str
    run_id: str
    delegation_id: str
    agent_key: str = ""
    agent_name: str = ""
    text: str = ""
    reason: str = QuestionReason.INPUT
    response_schema: dict[str, Any] | None = None
    auth_url: str | None = None
    asked_at: float = 0.0
    expires_at: float | None = None
    #: The delegation id, then the nested subagents' engine ids down to the one that asks.
    lineage: tuple[str, ...] = ()
    #: The nested subagent that asks (its engine id); None: the delegation's remote itself.
    asker: str | None = None
    outcome: str | None = None
    surface: str | None = None
    answered_by: str | None = None
    closed_at: float | None = None

    @property
    def open(self) -> bool:
        return self.outcome is None


def usable_schema(schema: Any) -> dict[str, Any] | None:
    """`schema` if it is a valid JSON Schema object of bounded size, else None (a remote's
    broken schema must not make every answer fail)."""
    if not isinstance(schema, dict) or not schema:
        return None
    try:
        if len(repr(schema)) > MAX_SCHEMA_CHARS:
            return None
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except (jsonschema.exceptions.SchemaError, RecursionError, TypeError, ValueError):
        return None
    return schema


def _label(value: str | None) -> str | None:
    if value is None:
        return None
    value = str(value).strip()[:MAX_LABEL_CHARS]
    return value or None


class QuestionBook:
    """The questions of one delegation: at most one open, the closed ones remembered so a
    late or duplicate answer is told who answered. Driven by one actor; `answer` is
    synchronous so two surfaces can never both win."""

    def __init__(self) -> None:
        self.current: Question | None = None
        self._closed: dict[str, Question] = {}

    @property
    def last_closed(self) -> Question | None:
        return next(reversed(self._closed.values()), None) if self._closed else None

    def ask(self, question: Question) -> None:
        self.current = question

    def check_open(self, question_id: str | None, *, delegation_id: str) -> Question:
        """The open question `question_id` names (None: the open one), or a typed refusal."""
        if question_id is not None and question_id in self._closed:
            raise closed_error(self._closed[question_id])
        current = self.current
        if current is None or (question_id is not None and question_id != current.id):
            if current is None and question_id is None and self._closed:
                raise closed_error(list(self._closed.values())[-1])
            raise DelegationError(
                code=ErrorCode.INVALID_INPUT,
                message=(
                    f"Delegation {delegation_id} has no open question"
                    + (f" {question_id[:80]!r}." if question_id else ".")
                ),
            )
        return current

    def check_answer(
        self,
        text: str | None,
        data: Mapping[str, Any] | None,
        *,
        question_id: str | None,
        delegation_id: str,
    ) -> Question:
        """The open question this answer is for, or a typed refusal (see `Run.answer`)."""
        current = self.check_open(question_id, delegation_id=delegation_id)
        check_answer(current, text, data)
        return current

    def close(
        self,
        outcome: str,
        *,
        time: float,
        surface: str | None = None,
        answered_by: str | None = None,
    ) -> Question | None:
        """Close the open question (None if none was open): the closed question."""
        current = self.current
        if current is None:
            return None
        closed = attrs.evolve(
            current,
            outcome=outcome,
            surface=_label(surface),
            answered_by=_label(answered_by),
            closed_at=time,
        )
        self.current = None
        self._closed[closed.id] = closed
        while len(self._closed) > MAX_CLOSED_REMEMBERED:
            del self._closed[next(iter(self._closed))]
        return closed


def closed_error(question: Question) -> DelegationError:
    """The `question_closed` refusal of an answer to `question` (closed), saying how it
    closed and who answered."""
    how = {
        QuestionOutcome.ANSWERED: "was already answered",
        QuestionOutcome.EXPIRED: "expired",
        QuestionOutcome.WITHDRAWN: "was withdrawn (its delegation ended)",
        QuestionOutcome.DECLINED: "was declined",
    }.get(question.outcome or "", "is closed")
    who = ""
    if question.outcome in (QuestionOutcome.ANSWERED, QuestionOutcome.DECLINED):
        who = f" via {question.surface or 'unknown'}"
        if question.answered_by:
            who += f" by {question.answered_by}"
    metadata: dict[str, Any] = {"question_id": question.id, "outcome": question.outcome}
    if question.surface:
        metadata["surface"] = question.surface
    if question.answered_by:
        metadata["answered_by"] = question.answered_by
    return DelegationError(
        code=ErrorCode.QUESTION_CLOSED,
        message=f"Question {question.id} {how}{who}.",
        metadata=metadata,
    )


def check_answer(question: Question, text: str | None, data: Mapping[str, Any] | None) -> None:
    """Raise `DelegationError` `answer_invalid` (metadata: `question_id`, `reason`, `path`) when
    `question` would refuse this answer: blank, or not what its `response_schema` describes
    (JSON Schema, https://json-schema.org/draft/2020-12/json-schema-validation; `data` is
    checked as the object it is, `text` as a string). A surface that answers several questions
    at once checks each first, so that none is answered while another is refused."""
    has_text = isinstance(text, str) and text.strip() != ""
    if not has_text and not data:
        raise _invalid(question, "An answer needs text (not blank) or data.", "")
    schema = question.response_schema
    if schema is None:
        return
    value: Any = dict(data) if data else text
    try:
        jsonschema.validate(value, schema)
    except jsonschema.exceptions.ValidationError as exc:
        path = "/".join(str(part) for part in exc.absolute_path)
        reason = f"The answer does not match: {exc.message[:300]}"
        raise _invalid(question, reason, path) from None
    except (jsonschema.exceptions.SchemaError, RecursionError):
        pass  # not the answer's fault (see usable_schema)


def _invalid(question: Question, reason: str, path: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.ANSWER_INVALID,
        message=reason,
        metadata={"question_id": question.id, "reason": reason, "path": path},
    )
