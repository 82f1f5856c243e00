"""The a2a-sdk Python client against a second A2A implementation: @a2a-js/sdk on Node.

Proves the JS test server (tools/peers/a2a_js/server.mjs) behaves as the engine tests expect:
the card resolves, `stream` streams the assistant-output artifact and completes, `fail` fails,
and cancelling a `hang` task is confirmed and recorded server-side with its tenant and metadata.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import trio
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.constants import TransportProtocol

from tests.helpers.peers import A2A_JS_SCENARIOS, A2AJsServer

BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]
STEP_TIMEOUT = 5.0


async def _card(server: A2AJsServer, scenario: str) -> AgentCard:
    async with httpx.AsyncClient(timeout=STEP_TIMEOUT) as http:
        return await A2ACardResolver(http, server.agent_url(scenario)).get_agent_card()


async def _client(server: A2AJsServer, scenario: str, binding: str) -> Client:
    config = ClientConfig(supported_protocol_bindings=[binding], use_client_preference=True)
    return ClientFactory(config).create(await _card(server, scenario))


def _request(text: str, *, tenant: str = "") -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    return SendMessageRequest(message=message, tenant=tenant)


async def _collect(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Read a stream until the server ends it (each of these scenarios reaches a terminal)."""
    events: list[StreamResponse] = []
    with trio.fail_after(STEP_TIMEOUT):
        async for event in client.send_message(request):
            events.append(event)
    return events


def _states(events: list[StreamResponse]) -> list[TaskState]:
    states: list[TaskState] = []
    for event in events:
        if event.HasField("task"):
            states.append(event.task.status.state)
        elif event.HasField("status_update"):
            states.append(event.status_update.status.state)
    return states


def _status_text(events: list[StreamResponse]) -> str:
    last = next(e for e in reversed(events) if e.HasField("status_update"))
    return "".join(part.text for part in last.status_update.status.message.parts)


async def test_cards_resolve_with_absolute_interfaces(a2a_js_server: A2AJsServer) -> None:
    for scenario in A2A_JS_SCENARIOS:
        card = await _card(a2a_js_server, scenario)
        assert card.name == f"a2a-js {scenario}"
        assert card.capabilities.streaming
        interfaces = [
            (i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces
        ]
        prefix = f"{a2a_js_server.base_url}/agents/{scenario}"
        assert interfaces == [
            ("JSONRPC", f"{prefix}/jsonrpc", "1.0"),
            ("HTTP+JSON", f"{prefix}/rest", "1.0"),
        ]
    async with httpx.AsyncClient(timeout=STEP_TIMEOUT) as http:
        raw = (await http.get(a2a_js_server.card_url("stream"))).json()
    assert raw["name"] == "a2a-js stream"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_yields_assistant_output_chunks_then_completes(
    a2a_js_server: A2AJsServer, binding: str
) -> None:
    async with await _client(a2a_js_server, "stream", binding) as client:
        events = await _collect(client, _request("hello"))

    assert events[0].HasField("task")
    task_id = events[0].task.id
    states = _states(events)
    assert states[0] == TaskState.TASK_STATE_SUBMITTED
    assert TaskState.TASK_STATE_WORKING in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert events[-1].HasField("status_update")
    assert _status_text(events) == "done: js"

    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) == 3
    assert {c.task_id for c in chunks} == {task_id}
    assert {c.artifact.name for c in chunks} == {"assistant-output"}
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    assert "".join(p.text for c in chunks for p in c.artifact.parts) == "Hello from a2a-js."

    async with await _client(a2a_js_server, "stream", binding) as client:
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED


async def test_fail_ends_failed_with_message(a2a_js_server: A2AJsServer) -> None:
    async with await _client(a2a_js_server, "fail", TransportProtocol.JSONRPC.value) as client:
        events = await _collect(client, _request("please fail"))

    states = _states(events)
    assert states[-1] == TaskState.TASK_STATE_FAILED
    assert TaskState.TASK_STATE_WORKING in states
    assert _status_text(events) == "failed: js"
    assert not any(e.HasField("artifact_update") for e in events)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_hang_is_confirmed_and_recorded(
    a2a_js_server: A2AJsServer, binding: str
) -> None:
    tenant = f"tenant-{binding.lower().replace('+', '-')}"
    metadata: dict[str, Any] = {"reason": "parent_cancelled", "delegation_id": str(uuid.uuid4())}
    working = trio.Event()
    task_ids: list[str] = []
    events: list[StreamResponse] = []

    async with await _client(a2a_js_server, "hang", binding) as client:

        async def read_stream() -> None:
            async for event in client.send_message(_request("hang", tenant=tenant)):
                events.append(event)
                if event.HasField("task"):
                    task_ids.append(event.task.id)
                if _states([event]) == [TaskState.TASK_STATE_WORKING]:
                    working.set()

        with trio.fail_after(STEP_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_stream)
                await working.wait()
                # Still working after a while: the remote only ends when cancelled.
                await trio.sleep(0.1)
                assert _states(events)[-1] == TaskState.TASK_STATE_WORKING

                cancel = CancelTaskRequest(id=task_ids[0], tenant=tenant)
                cancel.metadata.update(metadata)
                task = await client.cancel_task(cancel)
                assert task.status.state == TaskState.TASK_STATE_CANCELED
                # The open stream sees CANCELED and the server ends it; a leftover reader
                # would be stopped by this scope's deadline, never by `break`.

    assert _states(events)[-1] == TaskState.TASK_STATE_CANCELED
    records = a2a_js_server.cancels_for(task_ids[0])
    assert len(records) == 1
    record = records[0]
    assert record["scenario"] == "hang"
    assert record["binding"] == binding
    assert record["tenant"] == tenant
    assert record["metadata"] == metadata
    # @a2a-js/sdk 1.3.0 drops CancelTask metadata on its HTTP+JSON binding (not on JSON-RPC).
    assert record["sdkMetadata"] == (metadata if binding == "JSONRPC" else {})
    assert record["outcome"] == "TASK_STATE_CANCELED"
