"""A delegation's question takes exactly one answer, from whichever surface gives it first.

Driven through `Run.answer` / `Run.decline` with in-process agents that ask (the same calls every
surface makes: the HTTP endpoint, the page, an AG-UI resume, MCP elicitation, A2A follow-ups).
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import given, settings

from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AnswerSurface,
    DelegationError,
    DelegationRequest,
    ErrorCode,
    InputExpiry,
    InputRequiredMode,
    Kind,
    Question,
    QuestionOutcome,
    Run,
    Status,
    event_from_json,
    open_run,
    to_json,
)
from engine._questions import MAX_CLOSED_REMEMBERED, QuestionBook, usable_schema
from tests.helpers.agents import spec

SURFACE = {"input_required": InputRequiredMode.SURFACE}
YEAR = {"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}


def asking(schema: dict[str, Any] | None = None, *, times: int = 1) -> InProcessTarget:
    async def agent(task: LocalTask) -> str:
        answers = []
        for n in range(times):
            answer = await task.ask(f"Which year? ({n})", schema=schema)
            answers.append(answer.text if answer.text is not None else str(answer.data))
        await task.say("Using " + ", ".join(answers) + ".")
        return "answered " + ", ".join(answers)

    return InProcessTarget(agent)


def request() -> DelegationRequest:
    return DelegationRequest(agent="remote", objective="do it")


async def asked(run: Run) -> Question:
    """The question the run's one delegation asks, once it is open."""
    while not run.questions():
        await trio.testing.wait_all_tasks_blocked()
        if not run.questions():
            await trio.sleep(0.001)
    (question,) = run.questions()
    return question


async def closures(run: Run) -> list[Question]:
    await run.flush()
    out = []
    async for entry in run.events():
        event = entry.event
        if event.kind == Kind.INPUT_CLOSED:
            assert event.question is not None
            out.append(event.question)
        if event.kind in Kind.DELEGATION_TERMINALS:
            break
    return out


async def test_the_first_answer_wins_and_later_ones_are_told_who_answered() -> None:
    async with open_run([spec(asking(), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        question = await asked(run)
        assert question.id == f"{handle.delegation_id}-input-{question.id.rsplit('-', 1)[1]}"
        assert question.lineage == (handle.delegation_id,) and question.asker is None
        assert question.expires_at is not None and question.expires_at > question.asked_at
        closed = run.answer(
            handle.delegation_id, text="2026", surface=AnswerSurface.PAGE, answered_by="ana"
        )
        assert (closed.outcome, closed.surface, closed.answered_by) == ("answered", "page", "ana")
        assert run.questions() == []
        for late in (
            lambda: run.answer(handle.delegation_id, text="1999", question_id=question.id),
            lambda: run.answer(handle.delegation_id, text="1999"),
        ):
            with pytest.raises(DelegationError) as info:
                late()
            assert info.value.code == ErrorCode.QUESTION_CLOSED
            assert info.value.metadata == {
                "question_id": question.id,
                "outcome": "answered",
                "surface": "page",
                "answered_by": "ana",
            }
            assert "via page by ana" in info.value.message
        result = await handle.wait()
        (announced,) = await closures(run)
    assert result.status == Status.COMPLETED and result.summary == "answered 2026"
    assert announced == closed
    # After the delegation ended, a late answer is still told who answered.
    with pytest.raises(DelegationError) as info:
        run.answer(handle.delegation_id, text="again")
    assert info.value.code == ErrorCode.QUESTION_CLOSED


async def test_an_answer_that_does_not_match_the_schema_leaves_the_question_open() -> None:
    async with open_run([spec(asking(YEAR), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        question = await asked(run)
        assert question.response_schema == YEAR
        for bad in ({"year": "soon"}, {"month": 3}):
            with pytest.raises(DelegationError) as info:
                run.answer(handle.delegation_id, data=bad)
            assert info.value.code == ErrorCode.ANSWER_INVALID
            assert info.value.metadata is not None
            assert info.value.metadata["question_id"] == question.id
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="   ")
        assert info.value.code == ErrorCode.ANSWER_INVALID
        assert run.questions() == [question]
        run.answer(handle.delegation_id, data={"year": 2026})
        result = await handle.wait()
    assert result.summary == "answered {'year': 2026}"


async def test_an_answer_naming_another_question_or_delegation_is_refused() -> None:
    async with open_run([spec(asking(), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        await asked(run)
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="x", question_id="q-other")
        assert info.value.code == ErrorCode.INVALID_INPUT
        with pytest.raises(DelegationError) as info:
            run.answer("del-missing", text="x")
        assert info.value.code == ErrorCode.DELEGATION_NOT_FOUND
        run.answer(handle.delegation_id, text="2026")
        await handle.wait()


@pytest.mark.parametrize(
    ("then", "status", "code"),
    [
        (InputExpiry.FAIL, Status.FAILED, ErrorCode.INPUT_REQUIRED),
        (InputExpiry.RETURN, Status.INPUT_REQUIRED, ErrorCode.INPUT_REQUIRED),
    ],
)
async def test_an_unanswered_question_expires_by_the_agents_policy(
    autojump_clock: trio.testing.MockClock, then: str, status: str, code: str
) -> None:
    policy = {**SURFACE, "input_wait_timeout": 30, "on_input_expiry": then}
    async with open_run([spec(asking(), **policy)]) as run:
        handle = run.start_delegation(request())
        await asked(run)
        result = await handle.wait()
        (expired,) = await closures(run)
    assert expired.outcome == QuestionOutcome.EXPIRED and expired.surface is None
    assert result.status == status
    assert result.error is not None and result.error.code == code
    with pytest.raises(DelegationError) as info:
        run.answer(handle.delegation_id, text="too late", question_id=expired.id)
    assert info.value.code == ErrorCode.QUESTION_CLOSED
    assert info.value.metadata is not None and info.value.metadata["outcome"] == "expired"


@pytest.mark.parametrize(
    ("then", "status"), [(InputExpiry.FAIL, Status.FAILED), ("return", Status.INPUT_REQUIRED)]
)
async def test_a_declined_question_ends_the_delegation_as_asked(then: str, status: str) -> None:
    async with open_run([spec(asking(), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        question = await asked(run)
        closed = run.decline(handle.delegation_id, then=then, surface=AnswerSurface.MCP_ELICITATION)
        assert closed.outcome == QuestionOutcome.DECLINED and closed.id == question.id
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="2026")
        assert info.value.code == ErrorCode.QUESTION_CLOSED
        result = await handle.wait()
    assert result.status == status
    assert result.error is not None and result.error.code == ErrorCode.INPUT_REQUIRED
    with pytest.raises(ValueError, match="then"):
        run.decline(handle.delegation_id, then="shrug")


async def test_a_delegation_cancelled_while_asking_withdraws_its_question() -> None:
    async with open_run([spec(asking(), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        question = await asked(run)
        handle.cancel("stop")
        result = await handle.wait()
        (withdrawn,) = await closures(run)
    assert result.status == Status.CANCELLED
    assert withdrawn.id == question.id and withdrawn.outcome == QuestionOutcome.WITHDRAWN
    with pytest.raises(DelegationError) as info:
        run.answer(handle.delegation_id, text="2026")
    assert info.value.code == ErrorCode.QUESTION_CLOSED


async def test_an_agent_that_does_not_wait_for_answers_refuses_them() -> None:
    release = trio.Event()

    async def slow(task: LocalTask) -> str:
        await release.wait()
        return "done"

    async with open_run([spec(InProcessTarget(slow))]) as run:
        handle = run.start_delegation(request())
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="x")
        assert info.value.code == ErrorCode.INVALID_INPUT
        release.set()
        await handle.wait()


async def test_each_of_several_questions_takes_its_own_answer() -> None:
    async with open_run([spec(asking(times=3), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        seen = []
        for year in ("2024", "2025", "2026"):
            question = await asked(run)
            assert question.id not in seen
            seen.append(question.id)
            run.answer(handle.delegation_id, text=year, question_id=question.id)
            assert question.id not in [q.id for q in run.questions()]  # closed at once
        result = await handle.wait()
        closed = await closures(run)
    assert result.summary == "answered 2024, 2025, 2026"
    assert [q.id for q in closed] == seen and {q.outcome for q in closed} == {"answered"}


async def test_a_question_event_round_trips_through_json() -> None:
    async with open_run([spec(asking(YEAR), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        await asked(run)
        run.answer(handle.delegation_id, data={"year": 1})
        await handle.wait()
        await run.flush()
        events = []
        async for entry in run.events():
            if entry.event.question is not None:
                events.append(entry.event)
            if entry.event.kind in Kind.DELEGATION_TERMINALS:
                break
    assert [e.kind for e in events] == [Kind.INPUT_REQUIRED, Kind.INPUT_CLOSED]
    for event in events:
        assert event_from_json(to_json(event)) == event


def test_a_broken_or_huge_schema_from_a_remote_is_dropped() -> None:
    assert usable_schema({"type": "nonsense"}) is None
    assert usable_schema("string") is None
    assert usable_schema({}) is None
    assert usable_schema({"enum": list(range(100_000))}) is None
    assert usable_schema(YEAR) == YEAR


def test_a_delegation_remembers_a_bounded_number_of_closed_questions() -> None:
    book = QuestionBook()
    for n in range(MAX_CLOSED_REMEMBERED + 10):
        book.ask(Question(id=f"q{n}", run_id="r", delegation_id="d"))
        book.close(QuestionOutcome.WITHDRAWN, time=float(n))
    assert len(book._closed) == MAX_CLOSED_REMEMBERED
    assert book.last_closed is not None and book.last_closed.id == f"q{MAX_CLOSED_REMEMBERED + 9}"


SURFACES = [
    AnswerSurface.API,
    AnswerSurface.HTTP,
    AnswerSurface.PAGE,
    AnswerSurface.AGUI_RESUME,
    AnswerSurface.MCP_ELICITATION,
    AnswerSurface.A2A,
]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(SURFACES), st.booleans(), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_exactly_one_answer_is_accepted_whatever_the_surfaces_and_order(
    attempts: list[tuple[str, bool, bool]],
) -> None:
    """Answers arrive from random surfaces, some naming the question, some not matching the
    schema: exactly the first valid one is accepted and it is the one the agent gets."""

    async def main() -> None:
        async with open_run([spec(asking(YEAR), **SURFACE)]) as run:
            handle = run.start_delegation(request())
            question = await asked(run)
            accepted = []
            for n, (surface, named, valid) in enumerate(attempts):
                data = {"year": n} if valid else {"year": "x"}
                try:
                    closed = run.answer(
                        handle.delegation_id,
                        data=data,
                        question_id=question.id if named else None,
                        surface=surface,
                    )
                except DelegationError as exc:
                    refusal: str | None = exc.code
                else:
                    refusal = None
                    accepted.append((n, closed.surface))
                first_valid = next((i for i, a in enumerate(attempts) if a[2]), None)
                if refusal is not None and valid:
                    assert refusal == ErrorCode.QUESTION_CLOSED
                    assert first_valid is not None and first_valid < n
                elif refusal is not None:
                    assert refusal in (ErrorCode.ANSWER_INVALID, ErrorCode.QUESTION_CLOSED)
            if not accepted:
                run.answer(handle.delegation_id, data={"year": -1})
            result = await handle.wait()
            announced = await closures(run)
        assert len(accepted) <= 1 and len(announced) == 1
        if accepted:
            n, surface = accepted[0]
            assert n == next(i for i, a in enumerate(attempts) if a[2])
            assert announced[0].surface == surface
            assert result.summary == f"answered {{'year': {n}}}"

    trio.run(main)


async def test_a_late_answer_naming_an_earlier_question_is_told_how_that_one_closed() -> None:
    async with open_run([spec(asking(times=2), **SURFACE)]) as run:
        handle = run.start_delegation(request())
        first = await asked(run)
        run.answer(handle.delegation_id, text="2024", surface=AnswerSurface.PAGE, answered_by="ana")
        second = await asked(run)
        run.answer(handle.delegation_id, text="2025", surface=AnswerSurface.HTTP, answered_by="bo")
        await handle.wait()
    refusals = {}
    for question, name in ((first, "first"), (second, "second")):
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="late", question_id=question.id)
        refusals[name] = info.value
    assert refusals["first"].code == ErrorCode.QUESTION_CLOSED
    assert refusals["first"].metadata["question_id"] == first.id
    assert refusals["first"].metadata["answered_by"] == "ana"
    assert refusals["second"].metadata["answered_by"] == "bo"
    with pytest.raises(DelegationError) as unnamed:
        run.answer(handle.delegation_id, text="late")
    assert unnamed.value.metadata["question_id"] == second.id
    with pytest.raises(DelegationError) as unknown:
        run.answer(handle.delegation_id, text="late", question_id="nope")
    assert unknown.value.code == ErrorCode.INVALID_INPUT
