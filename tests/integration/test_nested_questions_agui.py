"""A remote AG-UI agent whose own nested subagent asks, against a real server on 127.0.0.1.

`tools/peers/agui_app.py` (the official `ag-ui-protocol` encoder, its own process), scenario
`nested_question`: the remote's subagent `planner` spawns `deleter`, which asks; the run ends
with one interrupt attributed to `deleter`, with a `responseSchema`. The engine's question must
name the asker below the delegation (lineage: the delegation, `planner`, `deleter`) and keep the
schema; an answer that does not match it is refused and the question stays open; the answer
that matches goes down as the resume run's payload, which the remote echoes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import trio

from adapters.agui import AguiAgentConfig, AguiTarget
from engine import (
    AgentSpec,
    AnswerSurface,
    DelegationError,
    DelegationEvent,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    ErrorCode,
    InputRequiredMode,
    Kind,
    QuestionOutcome,
    Status,
)
from tests.helpers.peers import agui_app
from tools.peers.agui_app import INTERRUPT_IDS, NESTED_QUESTION, NESTED_QUESTION_SCHEMA


@pytest.fixture(scope="module")
def agui_base() -> Iterator[str]:
    with agui_app() as peer:
        yield peer.base_url


def remote(agui_base: str) -> AgentSpec:
    return AgentSpec(
        key="remote",
        protocol="agui",
        target=AguiTarget(AguiAgentConfig(url=f"{agui_base}/agents/nested_question")),
        policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
    )


async def test_a_nested_subagent_asks_its_lineage_names_it_and_the_resume_carries_the_answer(
    agui_base: str,
) -> None:
    agent = remote(agui_base)
    closed_events: list[DelegationEvent] = []
    async with Engine([agent]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="Clean up."))
        asked = None
        with trio.fail_after(20):
            async with run.events() as events:
                async for entry in events:
                    if entry.event.kind == Kind.INPUT_REQUIRED:
                        asked = entry.event
                        break
        assert asked is not None and asked.question is not None
        question = asked.question
        did = handle.delegation_id
        assert question.lineage == (did, f"{did}/planner-1", f"{did}/deleter-1")
        assert question.asker == f"{did}/deleter-1"
        assert question.response_schema == NESTED_QUESTION_SCHEMA
        assert question.text == NESTED_QUESTION
        assert run.questions() == [question]
        # Not what the schema asks for: refused, and the question stays open.
        with pytest.raises(DelegationError) as refused:
            run.answer(did, text="yes, go ahead")
        assert refused.value.code == ErrorCode.ANSWER_INVALID
        assert [q.id for q in run.questions()] == [question.id]
        closed = run.answer(
            did,
            data={"approved": True},
            question_id=question.id,
            surface=AnswerSurface.API,
            answered_by="ada",
        )
        assert closed.outcome == QuestionOutcome.ANSWERED and closed.answered_by == "ada"
        with trio.fail_after(20):
            result = await handle.wait()
        async with run.events(after=0) as events:
            while not closed_events:
                batch = await events.receive_batch()
                closed_events += [e.event for e in batch if e.event.kind == Kind.INPUT_CLOSED]
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    # The resume run answered the interrupt with the answer's data, which the remote echoed.
    assert result.summary == json.dumps({"approved": True}, sort_keys=True)
    async with httpx.AsyncClient() as http:
        runs = (await http.get(f"{agui_base}/_test/log")).json()["runs"]
    resumed = [r for r in runs if r["scenario"] == "nested_question" and r["input"].get("resume")]
    assert resumed[-1]["input"]["resume"] == [
        {"interruptId": INTERRUPT_IDS[0], "status": "resolved", "payload": {"approved": True}}
    ]
    [closed_event] = closed_events
    assert closed_event.question is not None
    assert closed_event.question.lineage == question.lineage
    assert closed_event.question.answered_by == "ada"
