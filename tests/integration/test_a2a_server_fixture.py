"""The fault-injecting a2a-sdk server (tools/peers/a2a_faulty.py), checked with the real client.

These tests pin the server's behaviour per scenario so that the engine's A2A tests can rely on
it. They use the a2a-sdk client under Trio and leave streams by cancel scope, never by `break`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError

from tests.helpers.a2a_builders import user_request
from tests.helpers.peers import A2AFaultyServer

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


@asynccontextmanager
async def a2a_client(
    server: A2AFaultyServer,
    scenario: str,
    *,
    binding: str = JSONRPC,
    headers: dict[str, str] | None = None,
    polling: bool = False,
) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(headers=headers, timeout=10.0) as http:
        card = await A2ACardResolver(http, server.agent_url(scenario)).get_agent_card()
        config = ClientConfig(
            httpx_client=http, polling=polling, supported_protocol_bindings=[binding]
        )
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


async def send_into(
    events: list[StreamResponse], client: Client, req: SendMessageRequest
) -> list[StreamResponse]:
    """Append every event of one send to `events`, until the server ends the stream."""
    with trio.fail_after(10):
        async for event in client.send_message(req):
            events.append(event)
    return events


async def send_all(client: Client, req: SendMessageRequest) -> list[StreamResponse]:
    return await send_into([], client, req)


async def start_working(client: Client, text: str) -> str:
    """Send, wait for WORKING, then leave the stream by cancel scope. Returns the task id."""
    task_id = ""
    with trio.fail_after(5), trio.CancelScope() as scope:
        async for event in client.send_message(user_request(text)):
            if event.HasField("task"):
                task_id = event.task.id
            if (
                event.HasField("status_update")
                and event.status_update.status.state == TaskState.TASK_STATE_WORKING
            ):
                scope.cancel()
    assert task_id
    return task_id


def kinds(events: list[StreamResponse]) -> list[str]:
    out = []
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "status_update":
            out.append(TaskState.Name(event.status_update.status.state))
        elif kind == "artifact_update":
            out.append("artifact:" + event.artifact_update.artifact.name)
        else:
            out.append(str(kind))
    return out


def status_text(event: StreamResponse) -> str:
    return "".join(p.text for p in event.status_update.status.message.parts)


async def test_cards_advertise_both_bindings_with_absolute_urls(
    a2a_server: A2AFaultyServer,
) -> None:
    async with httpx.AsyncClient() as http:
        scenarios = (await http.get(f"{a2a_server.base_url}/_test/scenarios")).json()
        assert {"stream", "nostream", "drop", "dup", "input", "auth", "huge"} <= set(scenarios)
        for scenario in scenarios:
            raw = (await http.get(a2a_server.card_url(scenario))).json()
            card = await A2ACardResolver(http, a2a_server.agent_url(scenario)).get_agent_card()
            assert raw["name"] == card.name == f"faulty-{scenario}"
            urls = {i.protocol_binding: i.url for i in card.supported_interfaces}
            expected = {JSONRPC: a2a_server.jsonrpc_url(scenario)}
            if scenario != "v03":  # the 0.3 card names one JSON-RPC url (0.3 shape)
                expected[REST] = a2a_server.rest_url(scenario)
            assert urls == expected
            assert all(u.startswith(f"http://127.0.0.1:{a2a_server.port}/") for u in urls.values())
            assert card.capabilities.streaming is (scenario != "nostream")
            assert ("bearer" in card.security_schemes) is (scenario == "auth")


@pytest.mark.parametrize("binding", [JSONRPC, REST])
async def test_stream_chunks_report_and_completion(
    a2a_server: A2AFaultyServer, binding: str
) -> None:
    headers = {"x-user-id": "u-7", "x-tenant": "acme"}
    async with a2a_client(a2a_server, "stream", binding=binding, headers=headers) as client:
        events = await send_all(client, user_request("hello"))
    assert kinds(events) == [
        "task",
        "TASK_STATE_WORKING",
        *["artifact:assistant-output"] * 3,
        "artifact:report.md",
        "TASK_STATE_COMPLETED",
    ]
    task_id = events[0].task.id
    assert status_text(events[1]) == "working on it"
    chunks = [e.artifact_update for e in events[2:5]]
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert "".join(c.artifact.parts[0].text for c in chunks) == "Hello from the stream agent."
    report = events[5].artifact_update
    assert report.last_chunk and report.artifact.parts[0].media_type == "text/markdown"
    assert status_text(events[6]).startswith("done: ")
    [seen] = a2a_server.entries("stream", "messages", task_id)
    assert seen["text"] == "hello" and seen["binding"] == (
        "jsonrpc" if binding == JSONRPC else "rest"
    )
    assert (seen["x_user_id"], seen["x_tenant"], seen["authorization_present"]) == (
        "u-7",
        "acme",
        False,
    )
    assert (seen["client_task_id"], seen["follow_up"]) == ("", False)


async def test_nostream_card_and_polling(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "nostream", polling=True) as client:
        [first] = await send_all(client, user_request("poll me"))  # SendMessage, returnImmediately
        assert first.task.status.state == TaskState.TASK_STATE_SUBMITTED
        states = [first.task.status.state]
        with trio.fail_after(5):
            while states[-1] not in TERMINAL:
                await trio.sleep(0.03)
                task = await client.get_task(GetTaskRequest(id=first.task.id))
                if task.status.state != states[-1]:
                    states.append(task.status.state)
    assert states == [
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    ]
    assert task.artifacts[0].parts[0].text == "polled result"
    # The SDK refuses a streaming call to a non-streaming agent.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    }
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as http:
        refused = (await http.post(a2a_server.jsonrpc_url("nostream"), json=body)).json()
    assert "Streaming is not supported" in refused["error"]["message"]


async def test_fail_and_reject_are_terminal(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "fail") as client:
        events = await send_all(client, user_request("x"))
    assert kinds(events) == ["task", "TASK_STATE_WORKING", "TASK_STATE_FAILED"]
    assert status_text(events[-1]) == "failed: simulated failure"
    async with a2a_client(a2a_server, "reject", binding=REST) as client:
        events = await send_all(client, user_request("x"))
    assert kinds(events) == ["task", "TASK_STATE_REJECTED"]
    assert status_text(events[-1]).startswith("rejected")


async def test_drop_aborts_stream_then_subscribe_recovers(a2a_server: A2AFaultyServer) -> None:
    events: list[StreamResponse] = []
    async with a2a_client(a2a_server, "drop") as client:
        with pytest.raises(A2AClientError, match="Network communication error"):
            await send_into(events, client, user_request("x"))
        assert kinds(events) == ["task", "TASK_STATE_WORKING", "artifact:assistant-output"]
        task_id = events[0].task.id
        with trio.fail_after(5):
            resumed = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert kinds(resumed) == ["task", "artifact:assistant-output", "TASK_STATE_COMPLETED"]
    assert resumed[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert resumed[1].artifact_update.append and resumed[1].artifact_update.last_chunk
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for p in task.artifacts[0].parts] == ["before the drop, ", "after the drop."]
    log = a2a_server.log()["drop"]
    assert [c["mode"] for c in log["cuts"] if c["task_id"] == task_id] == ["abort"]
    assert [s["task_id"] for s in log["subscribes"]].count(task_id) == 1


async def test_dropclean_ends_quietly_then_get_task_completes(
    a2a_server: A2AFaultyServer,
) -> None:
    async with a2a_client(a2a_server, "dropclean", binding=REST) as client:
        events = await send_all(client, user_request("x"))  # no error, no terminal
        assert kinds(events) == ["task", "TASK_STATE_WORKING", "artifact:assistant-output"]
        task_id = events[0].task.id
        assert (await client.get_task(GetTaskRequest(id=task_id))).status.state == (
            TaskState.TASK_STATE_WORKING
        )
        with trio.fail_after(5):
            while True:
                task = await client.get_task(GetTaskRequest(id=task_id))
                if task.status.state in TERMINAL:
                    break
                await trio.sleep(0.05)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert a2a_server.entries("dropclean", "cuts", task_id)[0]["mode"] == "clean"


async def test_dup_sends_every_event_twice(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "dup") as client:
        events = await send_all(client, user_request("x"))
    assert kinds(events) == [
        "task",
        *["TASK_STATE_WORKING"] * 2,
        *["artifact:assistant-output"] * 2,
        *["TASK_STATE_COMPLETED"] * 2,
    ]
    assert events[3] == events[4] and events[5] == events[6]


async def test_input_required_then_continues_on_answer(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "input") as client:
        first = await send_all(client, user_request("start"))
        assert kinds(first) == ["task", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
        assert status_text(first[-1]) == "What is your name?"
        task = first[0].task
        answer = user_request("Ada", task_id=task.id, context_id=task.context_id)
        second = await send_all(client, answer)
    assert kinds(second) == [
        "TASK_STATE_WORKING",
        "artifact:assistant-output",
        "TASK_STATE_COMPLETED",
    ]
    assert second[1].artifact_update.artifact.parts[0].text == "got: Ada"
    assert status_text(second[-1]) == "got: Ada"
    seen = a2a_server.entries("input", "messages", task.id)
    assert [(m["text"], m["follow_up"], m["client_task_id"]) for m in seen] == [
        ("start", False, ""),
        ("Ada", True, task.id),
    ]


async def test_auth_401_without_token_works_with_it(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "auth") as client:  # the card itself needs no token
        with pytest.raises(A2AClientError, match="401"):
            await send_all(client, user_request("x"))
    token = {"Authorization": "Bearer test-token"}
    async with a2a_client(a2a_server, "auth", binding=REST, headers=token) as client:
        events = await send_all(client, user_request("x"))
    assert kinds(events)[-1] == "TASK_STATE_COMPLETED"
    log = a2a_server.log()["auth"]
    assert any(r["authorization_present"] is False for r in log["auth_rejections"])
    assert log["messages"][-1]["authorization_present"] is True
    assert "test-token" not in str(log)


@pytest.mark.parametrize("binding", [JSONRPC, REST])
async def test_cancel_on_hang_is_recorded_with_tenant(
    a2a_server: A2AFaultyServer, binding: str
) -> None:
    metadata: dict[str, Any] = {"reason": "parent_cancelled", "delegationId": "d-1"}
    async with a2a_client(a2a_server, "hang", binding=binding) as client:
        task_id = await start_working(client, "x")
        # The dropped stream did not cancel anything.
        assert (await client.get_task(GetTaskRequest(id=task_id))).status.state == (
            TaskState.TASK_STATE_WORKING
        )
        with trio.fail_after(5):
            cancelled = await client.cancel_task(
                CancelTaskRequest(id=task_id, tenant="acme", metadata=metadata)
            )
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    [record] = a2a_server.entries("hang", "cancels", task_id)
    assert record["tenant"] == "acme"
    assert record["metadata"] == metadata
    assert record["outcome"] == "TASK_STATE_CANCELED"
    assert record["binding"] == ("jsonrpc" if binding == JSONRPC else "rest")


async def test_slowcancel_confirms_after_three_seconds(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "slowcancel") as client:
        task_id = await start_working(client, "x")
        started = time.monotonic()
        with trio.fail_after(8):
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        elapsed = time.monotonic() - started
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert 2.8 <= elapsed < 6.0
    [record] = a2a_server.entries("slowcancel", "cancels", task_id)
    assert record["finished_at"] - record["time"] >= 2.8


async def test_nocancel_refuses_and_hangcancel_never_answers(
    a2a_server: A2AFaultyServer,
) -> None:
    async with a2a_client(a2a_server, "nocancel") as client:
        task_id = await start_working(client, "x")
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_WORKING
    [refused] = a2a_server.entries("nocancel", "cancels", task_id)
    assert refused["outcome"] == "refused"

    async with a2a_client(a2a_server, "hangcancel") as client:
        task_id = await start_working(client, "x")
        with pytest.raises(A2AClientTimeoutError):
            await client.cancel_task(
                CancelTaskRequest(id=task_id), context=ClientCallContext(timeout=0.5)
            )
    [pending] = a2a_server.entries("hangcancel", "cancels", task_id)
    assert "outcome" not in pending


async def test_huge_artifact_chunk_arrives_whole(a2a_server: A2AFaultyServer) -> None:
    async with a2a_client(a2a_server, "huge") as client:
        events = await send_all(client, user_request("x"))
    assert kinds(events) == [
        "task",
        "TASK_STATE_WORKING",
        "artifact:huge.txt",
        "TASK_STATE_COMPLETED",
    ]
    chunk = events[2].artifact_update
    assert chunk.last_chunk and len(chunk.artifact.parts[0].text) == 5 * 1024 * 1024
