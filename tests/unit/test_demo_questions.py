"""The demo's review agent asks a clarifying question when its task asks for one.

The rule (`demo.agents.asks_for_a_question`), the question surfaced to whoever watches the run
(`subagent.input_required` with the open question, then `subagent.input_closed`), an answer that
the review uses in its text and verdict, the wait that expires into a result for the parent, and
`demo --print`, which cannot answer and so never sees a question.
"""

from __future__ import annotations

import io
import json

import pytest
import trio

from demo import demo_agents, run_demo, scripted_parent
from demo.agents import REVIEW_INPUT_WAIT, REVIEW_QUESTION, asks_for_a_question
from engine import (
    AnswerSurface,
    DelegationEvent,
    DelegationResult,
    Engine,
    InputRequiredMode,
    Kind,
    QuestionOutcome,
    Run,
    Status,
)

ASKING_PROMPT = "ask me which framework to review"


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("ask me which framework to review", True),
        ("Please ASK ME first", True),
        ("clarify the scope, then review", True),
        ("I have a question about the design", True),
        ("Any questions before you start?", True),
        ("Review the engine design.", False),
        ("How does Trio stream events?", False),
        ("task me with it", False),  # "ask me" only as words
        ("unclarified", False),
        ("", False),
    ],
)
def test_the_rule_is_ask_me_clarify_or_question(text: str, asks: bool) -> None:
    assert asks_for_a_question(text) is asks
    assert asks_for_a_question(None, text) is asks


def test_the_review_agent_surfaces_its_questions_and_waits_a_bounded_time() -> None:
    review = {agent.key: agent for agent in demo_agents()}["review"]
    assert review.policy.input_required == InputRequiredMode.SURFACE
    assert review.policy.input_wait_timeout == REVIEW_INPUT_WAIT
    assert 60 <= REVIEW_INPUT_WAIT <= 3600
    # The delegation lasts long enough for the question to expire rather than be cut short.
    assert review.policy.default_timeout > REVIEW_INPUT_WAIT


async def _play(
    eng: Engine, run: Run, prompt: str | None, answer: str | None
) -> tuple[list[DelegationEvent], dict[str, DelegationResult]]:
    """The scripted parent with `prompt`; when the review asks, answer (unless `answer` is None).
    Returns the run's delegation events from its journal, in order, and the results by agent."""

    async def answer_questions() -> None:
        async with run.events() as entries:
            async for entry in entries:
                event = entry.event
                if event.kind == Kind.INPUT_REQUIRED and answer is not None:
                    assert isinstance(event, DelegationEvent) and event.question is not None
                    run.answer(
                        event.delegation_id,
                        answer,
                        question_id=event.question.id,
                        surface=AnswerSurface.PAGE,
                        answered_by="a tester",
                    )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_questions)
        results = await scripted_parent(run, prompt)
        nursery.cancel_scope.cancel()
    journal = eng.journal(run.run_id)
    assert journal is not None
    entries = await journal.store.read_after(0, journal.head)
    seen = [e.event for e in entries if isinstance(e.event, DelegationEvent)]
    return seen, {r.agent: r for r in results}


async def test_a_prompt_that_asks_for_a_question_gets_one_and_the_review_uses_the_answer() -> None:
    async with Engine(demo_agents(pause=0)) as eng, eng.open_run() as run:
        seen, results = await _play(eng, run, ASKING_PROMPT, "Trio")
    asked = [e for e in seen if e.kind == Kind.INPUT_REQUIRED]
    assert [e.agent_key for e in asked] == ["review"]
    question = asked[0].question
    assert question is not None and question.open
    assert question.text == REVIEW_QUESTION == asked[0].text
    closed = [e.question for e in seen if e.kind == Kind.INPUT_CLOSED]
    assert len(closed) == 1 and closed[0] is not None
    assert closed[0].id == question.id
    assert closed[0].outcome == QuestionOutcome.ANSWERED
    assert (closed[0].surface, closed[0].answered_by) == (AnswerSurface.PAGE, "a tester")
    said = "".join(
        e.delta or "" for e in seen if e.kind == Kind.TEXT_DELTA and e.agent_key == "review"
    )
    assert said == "Reviewed Trio: the design is sound; add a replay window."
    assert results["review"].status == Status.COMPLETED
    assert "Approve Trio, with a replay window." in (results["review"].summary or "")
    assert results["research"].status == Status.COMPLETED


async def test_an_unanswered_question_expires_and_the_review_comes_back_to_the_parent(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Engine(demo_agents(pause=0)) as eng, eng.open_run() as run:
        start = trio.current_time()
        seen, results = await _play(eng, run, ASKING_PROMPT, None)
        waited = trio.current_time() - start
    closed = [e.question for e in seen if e.kind == Kind.INPUT_CLOSED]
    assert len(closed) == 1 and closed[0] is not None
    assert closed[0].outcome == QuestionOutcome.EXPIRED
    assert REVIEW_INPUT_WAIT <= waited < REVIEW_INPUT_WAIT + 1
    assert results["review"].status == Status.INPUT_REQUIRED
    assert results["research"].status == Status.COMPLETED


@pytest.mark.parametrize("prompt", [None, "Review the engine design."])
async def test_a_prompt_that_asks_nothing_gets_no_question(prompt: str | None) -> None:
    async with Engine(demo_agents(pause=0)) as eng, eng.open_run() as run:
        seen, results = await _play(eng, run, prompt, None)
    assert not [e for e in seen if e.kind in (Kind.INPUT_REQUIRED, Kind.INPUT_CLOSED)]
    assert (
        results["review"].summary and "Approve, with a replay window." in results["review"].summary
    )


def test_demo_print_never_asks() -> None:
    out = io.StringIO()
    assert run_demo(as_json=True, fast=True, out=out) == 0
    kinds = [json.loads(line)["event"]["kind"] for line in out.getvalue().splitlines()]
    assert Kind.INPUT_REQUIRED not in kinds and kinds[-1] == "run.finished"
