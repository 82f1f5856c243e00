"""Multi-turn on `subagent-engine a2a-serve`: the served parent asks whoever sent the task.

The server runs as a child process with the scripted parent's `ask` script: it calls
`ask_requester` on its run's MCP endpoint, the A2A task turns `input-required` with the question,
and a follow-up message on the same task and context is the tool's answer; the parent then
answers with it. The client is the official a2a-sdk client (A2A 1.0, both bindings). Also:
CancelTask while the task waits, follow-ups that cannot continue a task (typed errors, the task
left as it was), and the wait limit (`--ask-timeout`): the tool gets an error and the task goes
on.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from tests.helpers.a2a_builders import user_request
from tests.helpers.a2a_clients import sdk_client, state_of
from tests.helpers.peers import (
    CODEX_MODEL,
    MODEL_KEY_ENV,
    ScriptedModel,
    ServedAgent,
    served_agent,
)

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
BINDINGS = (JSONRPC, REST)
PROMPT = "Summarize the design"
QUESTION = f"Which format should the answer to '{PROMPT}' take?"


@pytest.fixture(scope="module")
def ask_agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "scripted", "--script", "ask") as agent:
        yield agent


@pytest.fixture(scope="module")
def impatient_agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "scripted", "--script", "ask", "--ask-timeout", "0.5") as a:
        yield a


def status_text(event: StreamResponse) -> str:
    return "".join(p.text for p in event.status_update.status.message.parts)


async def until_input_required(client: Client, text: str) -> list[StreamResponse]:
    """Send `text` as a new task; the stream's events up to where it ends (input-required)."""
    with trio.fail_after(10):
        return [event async for event in client.send_message(user_request(text))]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_parent_asks_the_client_answers_on_the_same_task_and_it_completes(
    ask_agent: ServedAgent, binding: str
) -> None:
    async with sdk_client(ask_agent, binding) as client:
        await _asks_and_completes(ask_agent, client)


async def _asks_and_completes(ask_agent: ServedAgent, client: Client) -> None:
    first = await until_input_required(client, PROMPT)
    # The first stream ends at the question: A2A's interrupted states end a stream.
    assert state_of(first[0]) == "task:TASK_STATE_SUBMITTED"
    assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(first[-1]) == QUESTION
    task_id, context_id = first[0].task.id, first[0].task.context_id
    assert (ask_agent.health())["tasks_running"] == 1
    waiting = await client.get_task(GetTaskRequest(id=task_id))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    with trio.fail_after(10):
        second = [
            event
            async for event in client.send_message(
                user_request("three bullet points", task_id=task_id, context_id=context_id)
            )
        ]
    states = [state_of(e) for e in second]
    assert states[0] == "TASK_STATE_WORKING", states  # back to working first
    assert states[-1] == "TASK_STATE_COMPLETED", states
    assert "TASK_STATE_INPUT_REQUIRED" not in states
    for event in second:
        payload = getattr(event, event.WhichOneof("payload") or "task")
        assert payload.task_id == task_id and payload.context_id == context_id
    answer = f"Answering '{PROMPT}' as you asked: three bullet points."
    assert status_text(second[-1]) == answer
    task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "".join(p.text for p in task.artifacts[0].parts) == answer
    # Both messages are the task's history, in order.
    user_texts = [m.parts[0].text for m in task.history if m.role == Role.ROLE_USER]
    assert user_texts == [PROMPT, "three bullet points"]
    # A follow-up to the completed task is refused with a typed error.
    with pytest.raises(UnsupportedOperationError):
        async for _ in client.send_message(
            user_request("more", task_id=task_id, context_id=context_id)
        ):
            pass
    health = await ask_agent.idle()
    assert health["tasks_running"] == 0 and health["parent_threads"] == 0


async def test_cancel_while_waiting_cancels_the_run(
    ask_agent: ServedAgent,
) -> None:
    async with sdk_client(ask_agent) as client:
        await _cancel_while_waiting(ask_agent, client)


async def _cancel_while_waiting(ask_agent: ServedAgent, client: Client) -> None:
    first = await until_input_required(client, PROMPT)
    task_id = first[0].task.id
    assert (ask_agent.health())["parent_threads"] == 1
    with trio.fail_after(10):
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    health = await ask_agent.idle()
    assert health["tasks_running"] == 0 and health["parent_threads"] == 0
    with pytest.raises(UnsupportedOperationError):
        async for _ in client.send_message(user_request("late", task_id=task_id)):
            pass


async def test_follow_ups_that_cannot_answer_are_refused_and_the_task_still_waits(
    ask_agent: ServedAgent,
) -> None:
    async with sdk_client(ask_agent) as client:
        await _refused_follow_ups(ask_agent, client)


async def _refused_follow_ups(ask_agent: ServedAgent, client: Client) -> None:
    first = await until_input_required(client, PROMPT)
    task_id, context_id = first[0].task.id, first[0].task.context_id
    # Another context than the task's.
    with pytest.raises(InvalidParamsError):
        async for _ in client.send_message(
            user_request("x", task_id=task_id, context_id=str(uuid.uuid4()))
        ):
            pass
    # No text to answer with.
    blank = user_request(" ", task_id=task_id, context_id=context_id)
    with pytest.raises(InvalidParamsError):
        async for _ in client.send_message(blank):
            pass
    task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # Without a contextId the follow-up continues the task's own context.
    with trio.fail_after(10):
        second = [e async for e in client.send_message(user_request("a table", task_id=task_id))]
    assert state_of(second[-1]) == "TASK_STATE_COMPLETED"
    assert second[-1].status_update.context_id == context_id
    assert status_text(second[-1]).endswith("as you asked: a table.")
    await ask_agent.idle()


async def test_a_question_not_answered_in_time_gives_the_parent_an_error_and_the_task_goes_on(
    impatient_agent: ServedAgent,
) -> None:
    async with sdk_client(impatient_agent) as client:
        await _no_answer_in_time(impatient_agent, client)


async def _no_answer_in_time(impatient_agent: ServedAgent, client: Client) -> None:
    first = await until_input_required(client, PROMPT)
    task_id = first[0].task.id
    assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
    # No answer: the wait ends after 0.5 s and the run goes on to its end by itself, which a
    # subscriber follows (unless it ended before the subscription: then it is refused).
    followed: list[StreamResponse] = []
    with trio.fail_after(10):
        with contextlib.suppress(UnsupportedOperationError):
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                followed.append(event)
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    if followed:
        states = [state_of(e) for e in followed]
        assert states[-1] == "TASK_STATE_COMPLETED", states
        resumed = [e for e in followed if state_of(e) == "TASK_STATE_WORKING"]
        assert resumed and "No answer came within 0.5 s" in status_text(resumed[0])
    final = task.status.message.parts[0].text
    assert "no answer (no_answer)" in final and "within 0.5 s" in final
    # The question's wait is over: a late answer is refused.
    with pytest.raises(UnsupportedOperationError):
        async for _ in client.send_message(user_request("too late", task_id=task_id)):
            pass
    await impatient_agent.idle()


# --- the real CLIs (Claude Code, Codex) against the scripted model endpoint --------------------

CLI_KINDS = {"claude": "claude-code", "codex": "codex"}
CLI_QUESTION = "Which colour should the report use?"


@contextmanager
def served_cli(cli: str, tmp_path: Path, bin_dir: Path, model_url: str) -> Iterator[ServedAgent]:
    """`a2a-serve --parent <cli>` on the scripted model, with no agents to delegate to."""
    config = tmp_path / f"{cli}.toml"
    config.write_text(
        "[parent]\n"
        f'kind = "{CLI_KINDS[cli]}"\n'
        f'binary = "{bin_dir / cli}"\n'
        f'model_endpoint = "{model_url if cli == "claude" else f"{model_url}/v1"}"\n'
        f'model = "{CODEX_MODEL if cli == "codex" else "claude-scripted"}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
    )
    with served_agent("--config", str(config)) as served:
        yield served


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_a_served_cli_asks_through_input_required_and_its_next_turn_sees_the_answer(
    cli: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_bin: Path,
    model: ScriptedModel,
) -> None:
    """The model calls `ask_requester`; the A2A client sees input-required with the question,
    answers on the same task, and the model's next turn quotes the answer; the task completes."""
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")
    with served_cli(cli, tmp_path, cli_bin, model.base_url) as served:
        async with sdk_client(served) as client:
            with trio.fail_after(120):
                first = [
                    event
                    async for event in client.send_message(
                        user_request(f"ASK: {CLI_QUESTION}\nWrite the report.")
                    )
                ]
            assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED", served.stderr()
            assert status_text(first[-1]) == CLI_QUESTION
            task_id, context_id = first[0].task.id, first[0].task.context_id
            with trio.fail_after(120):
                second = [
                    event
                    async for event in client.send_message(
                        user_request("Teal, please.", task_id=task_id, context_id=context_id)
                    )
                ]
            task = await client.get_task(GetTaskRequest(id=task_id))
        health = await served.idle()
    states = [state_of(e) for e in second]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED", states
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "Requester said: Teal, please." in status_text(second[-1])
    # The call is shown as the parent's tool call (Codex shows it once it has ended).
    calls = [e for e in first + second if status_text(e).startswith("Calling")]
    assert calls and "ask_requester" in status_text(calls[0])
    # The model's turn after the call got the answer as the tool's result.
    replies = [r["reply"] for r in model.model_requests() if r.get("reply")]
    asked = [r for r in replies if r.get("kind") == "tool_call"]
    assert [r["arguments"] for r in asked] == [{"question": CLI_QUESTION}]
    assert health["tasks_running"] == 0 and health["parent_threads"] == 0
