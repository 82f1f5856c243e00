"""The soak's questions: a seeded soak whose runs all ask, then the question accounting alone.

The soak run (`tools.soak.run_soak` with every run adding asking agents) must account every
question as closed exactly once in the journal, answered by exactly the one answer the journal
names, every other answer refused as it should be, and each asker saying exactly the answers
that won; and with this seed every answer pattern, every surface (in-process API, HTTP, page)
and an expiry happen. The accountant's own tests feed it a journal and answer records that
break one rule each (two answers accepted, an accepted answer lost, a question closed twice or
never, a refusal naming the wrong winner, a 500, an agent told something else, an expiry that
did not end the delegation by its policy) and check it reports each one.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import (
    DelegationError,
    DelegationEvent,
    DelegationResult,
    ErrorCode,
    Kind,
    MemoryJournalStore,
    Question,
    QuestionOutcome,
    RunJournal,
    Status,
)
from engine._questions import closed_error
from tools.soak import (
    APPROVAL_SCHEMA,
    QUESTION_PATTERNS,
    SoakConfig,
    SoakReport,
    _account_questions,
    _Asked,
    _Attempt,
    _echo,
    _plan,
    _RecordingStore,
    _RunOutcome,
    run_soak,
)

pytestmark = pytest.mark.filterwarnings(
    # A viewer that drops its connection mid-stream leaves httpcore's body generator to the GC.
    "ignore:Exception ignored in.*:pytest.PytestUnraisableExceptionWarning",
)

#: With this seed and run count every answer pattern, surface and an expiry happen.
QUESTION_SEED = 2
QUESTION_RUNS = 12


def test_a_soak_whose_runs_ask_accounts_one_answer_per_question() -> None:
    report = run_soak(
        SoakConfig(
            seed=QUESTION_SEED,
            runs=QUESTION_RUNS,
            concurrency=4,
            question_probability=1.0,
            http_probability=0.7,
        )
    )
    assert report.ok, "the soak found problems:\n" + report.format()
    assert report.questions_asked == report.questions_closed_once > 0, report.format()
    assert set(QUESTION_PATTERNS) <= set(report.question_patterns), report.format()
    for closure in ("answered via api", "answered via http", "answered via page", "expired"):
        assert report.question_outcomes[closure] > 0, (closure, report.format())
    for got in ("question_closed", "answer_invalid", "accepted api", "accepted http"):
        assert report.answers[got] > 0, (got, report.format())


# -- the accountant alone ---------------------------------------------------------------------

RUN = "r"
DID = "d"


def _question(number: int = 0, **fields: Any) -> Question:
    return Question(
        id=f"{DID}-input-{number}",
        run_id=RUN,
        delegation_id=DID,
        agent_key=fields.pop("agent_key", "asker"),
        text=f"{RUN}/0 q{number}: may I go on?",
        response_schema=APPROVAL_SCHEMA,
        **fields,
    )


def _attempt(label: str, outcome: str, **fields: Any) -> _Attempt:
    surface = fields.pop("surface", "api")
    return _Attempt(
        DID,
        f"{DID}-input-0",
        surface,
        label,
        data={"approved": True, "note": label},
        outcome=outcome,
        **fields,
    )


def _closed_error(question: Question) -> dict[str, Any]:
    """The details of the `question_closed` refusal the engine gives for `question`."""
    error: DelegationError = closed_error(question)
    return dict(error.metadata or {})


async def _account(
    closures: list[Question],
    attempts: list[_Attempt],
    *,
    pattern: str = "race2",
    said: str | None = None,
    status: str = Status.COMPLETED,
    error: str | None = None,
    agent_key: str = "asker",
    handled: bool = True,
) -> SoakReport:
    """The question accounting of a run whose one delegation asked one question, which the
    journal closed `closures`, the soak answered with `attempts` and the agent answered with
    `said` (default: the echo of the journaled winner)."""
    store = _RecordingStore(MemoryJournalStore(RUN))
    journal = RunJournal(RUN, store=store)
    fields: dict[str, Any] = {"run_id": RUN, "delegation_id": DID, "agent_key": agent_key}
    asked = _question(agent_key=agent_key)
    await journal.append(DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN))
    await journal.append(DelegationEvent(kind=Kind.STARTED, **fields))
    await journal.append(DelegationEvent(kind=Kind.INPUT_REQUIRED, question=asked, **fields))
    for closed in closures:
        event = DelegationEvent(kind=Kind.INPUT_CLOSED, question=closed, **fields)
        await journal.append(event)
    if said is None:
        winner = next(
            (a for a in attempts if closures and a.answered_by == closures[0].answered_by), None
        )
        said = _echo(0, winner.text, winner.data) if winner is not None else ""
    if said:
        await journal.append(
            DelegationEvent(kind=Kind.TEXT_DELTA, message_id="m", delta=said, **fields)
        )
    await journal.append(DelegationEvent(kind=Kind.FINISHED, **fields))
    await journal.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN))
    failure = DelegationError(code=error, message="x") if error else None
    result = DelegationResult(
        delegation_id=DID,
        agent=agent_key,
        remote_protocol="inprocess",
        status=status,
        error=failure,
    )
    outcome = _RunOutcome(
        plan=_plan(SoakConfig(), 0),
        store=store,
        handles=[],
        objectives={DID: f"{RUN}/0"},
        viewers=[],
        results=[result],
        cancelled=False,
        questions=[_Asked(asked, pattern, attempts)] if handled else [],
    )
    report = SoakReport(seed=0)
    _account_questions(outcome, report)
    return report


def _answered(by: str, surface: str = "api") -> Question:
    return _question(outcome=QuestionOutcome.ANSWERED, answered_by=by, surface=surface)


async def test_the_question_accounting_passes_one_accepted_answer_and_its_refused_rival() -> None:
    winner = _answered("a")
    report = await _account(
        [winner],
        [
            _attempt("a", "accepted"),
            _attempt(
                "b",
                ErrorCode.QUESTION_CLOSED,
                surface="http",
                status=409,
                details=_closed_error(winner),
            ),
            _attempt("c", "forwarded", surface="page", status=202),
            _attempt("d", ErrorCode.ANSWER_INVALID, status=422, valid=False),
        ],
    )
    assert report.ok, report.format()
    assert report.questions_asked == report.questions_closed_once == 1
    assert report.answers == {
        "accepted api": 1,
        "question_closed": 1,
        "forwarded": 1,
        "answer_invalid": 1,
    }
    assert report.question_outcomes == {"answered via api": 1}


async def test_the_question_accounting_catches_two_accepted_answers() -> None:
    report = await _account(
        [_answered("a")], [_attempt("a", "accepted"), _attempt("b", "accepted")]
    )
    assert any("2 answers accepted" in m for m in report.mismatches), report.format()
    assert any("'b' accepted, journaled 'a'" in m for m in report.mismatches), report.format()


async def test_the_question_accounting_catches_an_accepted_answer_the_journal_lost() -> None:
    withdrawn = _question(outcome=QuestionOutcome.WITHDRAWN)
    report = await _account([withdrawn], [_attempt("a", "accepted")], status=Status.CANCELLED)
    assert any("'a' was accepted, the journal says withdrawn" in m for m in report.lost)


@pytest.mark.parametrize("times", [0, 2])
async def test_the_question_accounting_catches_a_question_not_closed_exactly_once(
    times: int,
) -> None:
    report = await _account([_answered("a")] * times, [_attempt("a", "accepted")], said="")
    assert any(f"closed {times} times" in m for m in report.lost), report.format()


async def test_the_question_accounting_catches_a_question_the_answerer_never_saw() -> None:
    report = await _account([_answered("a")], [], handled=False, said="")
    assert any("never seen by the soak's answerer" in m for m in report.lost), report.format()


async def test_the_question_accounting_catches_a_winner_nobody_sent() -> None:
    report = await _account([_answered("ghost")], [_attempt("a", "question_closed")], said="")
    assert any("answered by 'ghost', no answer of the soak's" in m for m in report.mismatches)


async def test_the_question_accounting_catches_wrong_and_unexpected_refusals() -> None:
    winner = _answered("a")
    someone_else = _closed_error(_answered("z", surface="page"))
    report = await _account(
        [winner],
        [
            _attempt("a", "accepted"),
            _attempt("b", ErrorCode.QUESTION_CLOSED, details=someone_else),
            _attempt("c", "internal_error", surface="http", status=500),
            _attempt("d", ErrorCode.ANSWER_INVALID, status=422),  # it was valid
            _attempt("e", ErrorCode.QUESTION_CLOSED, surface="http", status=500),
        ],
    )
    problems = "\n".join(report.mismatches)
    assert "'b': question_closed names 'z' on page, journaled 'a' on api" in problems
    assert "'c': refused 'internal_error' (HTTP 500)" in problems
    assert "'d': a valid answer refused as invalid" in problems
    assert "'e': question_closed with HTTP 500" in problems


async def test_the_question_accounting_catches_an_agent_told_something_else() -> None:
    report = await _account([_answered("a")], [_attempt("a", "accepted")], said="[0] other\n")
    assert any("said '[0] other\\n'" in m for m in report.mismatches), report.format()


async def test_the_question_accounting_catches_a_winner_on_another_surface_or_invalid() -> None:
    report = await _account(
        [_answered("a", surface="page")],
        [_attempt("a", "accepted", surface="http", valid=False)],
    )
    problems = "\n".join(report.mismatches)
    assert "answered on http, journaled page" in problems
    assert "an answer its schema refuses was taken" in problems


async def test_the_question_accounting_checks_an_expiry_ends_the_delegation_by_policy() -> None:
    expired = _question(outcome=QuestionOutcome.EXPIRED)
    late = _attempt("late", ErrorCode.QUESTION_CLOSED, late=True, details=_closed_error(expired))
    fine = await _account(
        [expired],
        [late],
        pattern="never+late",
        agent_key="asker_expiring_fail",
        status=Status.FAILED,
        error=ErrorCode.INPUT_REQUIRED,
    )
    assert fine.ok, fine.format()
    completed = await _account(
        [expired], [], pattern="never", agent_key="asker_expiring", status=Status.COMPLETED
    )
    assert any("expired, then the delegation ended completed" in m for m in completed.mismatches)
    answered_yet_expired = await _account(
        [expired], [], pattern="once", status=Status.INPUT_REQUIRED, error=ErrorCode.INPUT_REQUIRED
    )
    assert any("expired, though the soak answered it" in m for m in answered_yet_expired.mismatches)
