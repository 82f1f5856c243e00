"""Nested questions through `a2a-serve`: asked deep down, answered from the top, all real parts.

The chain: an outer engine delegates over A2A to `a2a-serve` (its own process on 127.0.0.1:
`tools/peers/a2a_serve_delegating.py`, the real a2a-serve server and engine wiring, whose
scripted parent delegates the task to every agent of its host), whose inner engine run delegates
to remote agents that ask: the a2a-sdk agent `input` (`tools/peers/a2a_faulty.py`: "What is
your name?", then "got: <answer>") and the AG-UI agent `nested_question`
(`tools/peers/agui_app.py`: a nested subagent asks for `{"approved": <boolean>}`). Their agents'
policy surfaces questions, so the inner run waits for an answer and a2a-serve's task turns
`input-required` with the question and its lineage.

- The outer run gets the question with the lineage below its own delegation (the inner
  delegation, down to the nested subagent that asks); `outer_run.answer(...)` goes down as the
  follow-up message and reaches the innermost agent, which uses it.
- A plain a2a-sdk client sees the question's text and data part, answers with a follow-up
  message on the same task and context, and the task completes with the innermost answer.
- An answer that does not match the question's schema keeps the task `input-required`, saying
  why; two questions open at once are asked one after the other.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from a2a.client import Client
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf import json_format, struct_pb2

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import (
    AgentSpec,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    InputRequiredMode,
    Kind,
    Question,
    QuestionOutcome,
    Run,
    Status,
)
from tests.helpers import REPO_ROOT
from tests.helpers.a2a_builders import user_request
from tests.helpers.a2a_clients import sdk_client, state_of
from tests.helpers.peers import A2AFaultyServer, ServedAgent, agui_app
from tests.helpers.processes import ready_server
from tools.peers.a2a_faulty import INPUT_QUESTION
from tools.peers.agui_app import NESTED_QUESTION, NESTED_QUESTION_SCHEMA

OBJECTIVE = "Introduce yourself"


@pytest.fixture(scope="module")
def agui_base() -> Iterator[str]:
    with agui_app() as peer:
        yield peer.base_url


def _asking_agent(key: str, protocol: str, where: str, policy: str = "") -> str:
    setting = "card_url" if protocol == "a2a" else "url"
    return (
        f'[[agents]]\nkey = "{key}"\nprotocol = "{protocol}"\n{setting} = "{where}"\n'
        '[agents.policy]\ninput_required = "surface"\n' + (policy or "input_wait_timeout = 60\n")
    )


@contextmanager
def served_delegating(config: Path, toml: str) -> Iterator[ServedAgent]:
    config.write_text(toml)
    argv = [
        sys.executable,
        "-m",
        "tools.peers.a2a_serve_delegating",
        "--config",
        str(config),
        "--port",
        "0",
        "--watch-stdin",
    ]
    with ready_server(argv, cwd=REPO_ROOT, name="a2a_serve_delegating") as (port, pid, stderr):
        agent = ServedAgent(port=port, pid=pid, stderr_path=stderr)
        try:
            yield agent
        finally:
            agent._http.close()


@pytest.fixture(scope="module")
def one_asker(
    tmp_path_factory: pytest.TempPathFactory, a2a_server: A2AFaultyServer
) -> Iterator[ServedAgent]:
    """a2a-serve delegating to `research`: the a2a-sdk agent that asks for a name."""
    toml = _asking_agent("research", "a2a", a2a_server.card_url("input"))
    with served_delegating(tmp_path_factory.mktemp("one") / "host.toml", toml) as served:
        yield served


@pytest.fixture(scope="module")
def two_askers(
    tmp_path_factory: pytest.TempPathFactory, a2a_server: A2AFaultyServer, agui_base: str
) -> Iterator[ServedAgent]:
    """a2a-serve delegating to `research` (A2A, asks a name) and `cleanup` (AG-UI, its nested
    subagent asks for `{"approved": <boolean>}`) at once."""
    toml = _asking_agent("research", "a2a", a2a_server.card_url("input"))
    toml += _asking_agent("cleanup", "agui", f"{agui_base}/agents/nested_question")
    with served_delegating(tmp_path_factory.mktemp("two") / "host.toml", toml) as served:
        yield served


@pytest.fixture(scope="module")
def impatient_asker(
    tmp_path_factory: pytest.TempPathFactory, a2a_server: A2AFaultyServer
) -> Iterator[ServedAgent]:
    """a2a-serve delegating to `research`, whose questions expire after 0.5 s (the delegation
    then returns to the parent)."""
    policy = 'input_wait_timeout = 0.5\non_input_expiry = "return"\n'
    toml = _asking_agent("research", "a2a", a2a_server.card_url("input"), policy)
    with served_delegating(tmp_path_factory.mktemp("impatient") / "host.toml", toml) as served:
        yield served


def outer_agent(served: ServedAgent) -> AgentSpec:
    return AgentSpec(
        key="served",
        protocol="a2a",
        target=A2ATarget(A2AAgentConfig(card_url=served.card_url)),
        policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE, input_wait_timeout=60),
    )


async def next_question(run: Run, after: int, seen: int = 0) -> tuple[Question, int]:
    """The next `subagent.input_required` question of `run` journaled after cursor `after`
    (skipping the first `seen` of them), and its cursor."""
    with trio.fail_after(30):
        async with run.events(after=after) as events:
            async for entry in events:
                event = entry.event
                if event.kind == Kind.INPUT_REQUIRED:
                    if seen:
                        seen -= 1
                        continue
                    assert event.question is not None, event
                    return event.question, entry.cursor
                assert event.kind not in Kind.DELEGATION_TERMINALS, event
    raise AssertionError("the run ended without a question")


def status_text(event: StreamResponse) -> str:
    return "".join(p.text for p in event.status_update.status.message.parts if p.text)


def question_part(event: StreamResponse) -> dict[str, Any]:
    """The question's data part of an input-required status (and its metadata says so)."""
    message = event.status_update.status.message
    assert json_format.MessageToDict(message.metadata)["subagentEngine"]["kind"] == "question"
    [data] = [p for p in message.parts if p.WhichOneof("content") == "data"]
    found: dict[str, Any] = json_format.MessageToDict(data.data)
    return found


def follow_up(
    task_id: str, context_id: str, text: str | None = None, data: dict[str, Any] | None = None
) -> SendMessageRequest:
    parts = [Part(text=text)] if text is not None else []
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return SendMessageRequest(
        message=Message(
            role=Role.ROLE_USER,
            message_id=f"answer-{task_id[:8]}-{len(parts)}-{text}",
            task_id=task_id,
            context_id=context_id,
            parts=parts,
        )
    )


async def stream(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    with trio.fail_after(30):
        return [event async for event in client.send_message(request)]


# -- the outer engine answers ---------------------------------------------------------------------


async def test_the_outer_run_gets_the_nested_question_and_its_answer_reaches_the_asker(
    one_asker: ServedAgent, a2a_server: A2AFaultyServer
) -> None:
    asked_before = len(a2a_server.entries("input", "messages"))
    spec = outer_agent(one_asker)
    async with Engine([spec]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="served", objective=OBJECTIVE))
        question, _ = await next_question(run, 0)
        did = handle.delegation_id
        assert question.delegation_id == did and question.text == INPUT_QUESTION
        # The lineage goes below the outer delegation: the inner run's delegation asks.
        assert question.lineage[0] == did and len(question.lineage) == 2, question.lineage
        inner = question.lineage[1]
        assert inner != did and question.asker == inner
        assert run.questions() == [question]
        closed = run.answer(did, text="Ada", question_id=question.id, answered_by="ada")
        assert closed.outcome == QuestionOutcome.ANSWERED
        with trio.fail_after(30):
            result = await handle.wait()
        events = [entry.event async for entry in _journal(run)]
    await spec.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    # The innermost agent got the answer as its follow-up message and used it.
    messages = a2a_server.entries("input", "messages")[asked_before:]
    assert [m["text"] for m in messages] == [OBJECTIVE, "Ada"]
    assert result.summary is not None and "research: completed: got: Ada" in result.summary
    # The outer run's event keeps what the remote said of its question.
    [asked] = [e for e in events if e.kind == Kind.INPUT_REQUIRED]
    assert asked.raw is not None
    remote = asked.raw["question"]
    assert remote["delegationId"] == inner and remote["agentKey"] == "research"
    assert remote["questionId"].startswith(f"{inner}-input-")
    health = await one_asker.idle()
    assert health["tasks_running"] == 0 and health["parent_threads"] == 0


async def _journal(run: Run) -> Any:
    async with run.events(after=0) as events:
        while True:
            with trio.move_on_after(0.2) as idle:
                batch = await events.receive_batch()
            if idle.cancelled_caught:
                return
            for entry in batch:
                yield entry


# -- a plain a2a-sdk client answers ---------------------------------------------------------------


async def test_a_plain_a2a_client_sees_the_nested_question_and_answers_it_on_the_same_task(
    one_asker: ServedAgent, a2a_server: A2AFaultyServer
) -> None:
    async with sdk_client(one_asker) as client:
        first = await stream(client, user_request(OBJECTIVE))
        assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED", [state_of(e) for e in first]
        assert status_text(first[-1]) == INPUT_QUESTION
        asked = question_part(first[-1])
        task_id, context_id = first[0].task.id, first[0].task.context_id
        assert asked["kind"] == "question" and asked["agentKey"] == "research"
        assert asked["lineage"] == [asked["delegationId"]] and asked["reason"] == "input_required"
        assert asked["questionId"].startswith(asked["delegationId"] + "-input-")
        second = await stream(client, follow_up(task_id, context_id, "Grace"))
        states = [state_of(e) for e in second]
        assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED", states
        assert "research: completed: got: Grace" in status_text(second[-1])
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert [m["text"] for m in a2a_server.entries("input", "messages")[-2:]] == [
        OBJECTIVE,
        "Grace",
    ]
    assert task.status.state == second[-1].status_update.status.state
    await one_asker.idle()


# -- a schema, and two questions at once ----------------------------------------------------------


async def test_two_questions_are_asked_one_after_the_other_and_a_refused_answer_keeps_waiting(
    two_askers: ServedAgent,
) -> None:
    """Both inner delegations ask at once: the task asks one, then the other. An answer the
    AG-UI question's schema refuses leaves the task waiting with the reason; data that matches
    is taken."""
    async with sdk_client(two_askers) as client:
        updates = await stream(client, user_request(OBJECTIVE))
        task_id, context_id = updates[0].task.id, updates[0].task.context_id
        answered: list[str] = []
        for _ in range(2):
            assert state_of(updates[-1]) == "TASK_STATE_INPUT_REQUIRED", [
                state_of(e) for e in updates
            ]
            asked = question_part(updates[-1])
            if asked["agentKey"] == "cleanup":
                assert status_text(updates[-1]) == NESTED_QUESTION
                assert asked["responseSchema"] == NESTED_QUESTION_SCHEMA
                inner = asked["delegationId"]
                assert asked["lineage"] == [inner, f"{inner}/planner-1", f"{inner}/deleter-1"]
                assert asked["asker"] == f"{inner}/deleter-1"
                refused = await stream(client, follow_up(task_id, context_id, "sure"))
                assert [state_of(e) for e in refused] == ["TASK_STATE_INPUT_REQUIRED"]
                assert status_text(refused[-1]).startswith("The answer was not accepted: ")
                assert question_part(refused[-1])["questionId"] == asked["questionId"]
                updates = await stream(
                    client, follow_up(task_id, context_id, data={"approved": True})
                )
            else:
                assert status_text(updates[-1]) == INPUT_QUESTION
                updates = await stream(client, follow_up(task_id, context_id, "Ada"))
            assert state_of(updates[0]) == "TASK_STATE_WORKING"
            answered.append(asked["agentKey"])
        assert sorted(answered) == ["cleanup", "research"]
        assert state_of(updates[-1]) == "TASK_STATE_COMPLETED", [state_of(e) for e in updates]
    final = status_text(updates[-1])
    assert "research: completed: got: Ada" in final
    assert f"cleanup: completed: {json.dumps({'approved': True})}" in final
    await two_askers.idle()


async def test_the_outer_run_answers_two_nested_questions_in_turn(
    two_askers: ServedAgent,
) -> None:
    spec = outer_agent(two_askers)
    async with Engine([spec]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="served", objective=OBJECTIVE))
        did = handle.delegation_id
        cursor = 0
        askers: list[str] = []
        for _ in range(2):
            question, cursor = await next_question(run, cursor)
            assert question.lineage[0] == did and question.asker == question.lineage[-1]
            if question.response_schema is not None:
                assert question.response_schema == NESTED_QUESTION_SCHEMA
                assert [i.rsplit("/", 1)[-1] for i in question.lineage[2:]] == [
                    "planner-1",
                    "deleter-1",
                ]
                run.answer(did, data={"approved": True}, question_id=question.id)
                askers.append("cleanup")
            else:
                assert question.text == INPUT_QUESTION and len(question.lineage) == 2
                run.answer(did, text="Ada", question_id=question.id)
                askers.append("research")
        with trio.fail_after(30):
            result = await handle.wait()
    await spec.target.aclose()  # type: ignore[attr-defined]
    assert sorted(askers) == ["cleanup", "research"]
    assert result.status == Status.COMPLETED, result
    assert result.summary is not None and "research: completed: got: Ada" in result.summary


async def test_a_question_that_expires_in_the_inner_run_takes_the_task_back_to_working(
    impatient_asker: ServedAgent,
) -> None:
    async with sdk_client(impatient_asker) as client:
        first = await stream(client, user_request(OBJECTIVE))
        assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
        task_id = first[0].task.id
        followed: list[StreamResponse] = []
        with trio.fail_after(30):
            # Another process's task: followed until its end (refused if it ended first).
            with contextlib.suppress(UnsupportedOperationError):
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    followed.append(event)
            task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    notes = [status_text(e) for e in followed if state_of(e) == "TASK_STATE_WORKING"]
    notes += [p.text for m in task.history for p in m.parts if p.text]
    assert "The question expired unanswered." in notes, notes
    # The parent went on without the answer: the delegation returned for it to decide.
    assert "research: input_required" in task.status.message.parts[0].text
    # A late answer finds no question waiting.
    with pytest.raises(UnsupportedOperationError):
        async for _ in client_send_late(impatient_asker, task_id):
            pass
    await impatient_asker.idle()


async def client_send_late(served: ServedAgent, task_id: str) -> Any:
    async with sdk_client(served) as client:
        async for event in client.send_message(user_request("Ada", task_id=task_id)):
            yield event
