"""A delegation cancelled after its SendStreamingMessage reached the remote but before the remote's
first event named the task (the soak found such tasks left `cancel_pending`:
tests/soak/test_soak_findings.py): the engine finds the task with ListTasks, by the message id it
chose, and cancels it. Against the real a2a-sdk server (`hang`), and a raw server without ListTasks.

The window is made deterministic by a network backend whose connections never hand over the
bytes of an SSE event: the remote has created the task and sent its first event, and the client
has not read it when the run is cancelled.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.a2a._target import FIND_ATTEMPTS
from engine import (
    AgentSpec,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    RemoteCancel,
    Status,
)
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a, task_frame


class _HoldingStream(httpcore.AsyncNetworkStream):
    """A connection that never hands over bytes carrying an SSE event (`data:`): it says they
    arrived and waits, inside the read, until cancelled (so the cancellation unwinds httpcore
    and the SDK the way a real one does)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, arrived: trio.Event) -> None:
        self._inner = inner
        self._arrived = arrived

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data = await self._inner.read(max_bytes, timeout)
        if b"data:" in data:
            self._arrived.set()
            await trio.sleep_forever()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class HoldFirstEvent(httpcore.AsyncNetworkBackend):
    """Connections whose first SSE event (the one naming the task) never reaches the client."""

    def __init__(self) -> None:
        self._inner = httpcore.TrioBackend()
        self.first_event_arrived = trio.Event()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _HoldingStream(inner, self.first_event_arrived)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _cancel_while_first_event_is_held(card_url: str) -> tuple[Any, A2ATarget]:
    backend = HoldFirstEvent()
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(network_backend=backend)
    http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(10.0, read=None))
    target = A2ATarget(A2AAgentConfig(card_url=card_url, tenant="acme"), http=http)
    spec = AgentSpec(
        key="remote",
        protocol="a2a",
        target=target,
        policy=DelegationPolicy(cancel_timeout=5.0, cancel_retry_window=0.0),
    )
    try:
        async with Engine([spec]) as eng:
            async with eng.open_run() as run:
                handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
                with trio.fail_after(10):
                    await backend.first_event_arrived.wait()
                run.cancel("the parent gave up")
            result = handle.result()
            assert eng.active_delegations == 0 and eng.open_runs == 0
    finally:
        await target.aclose()
        await http.aclose()
    return result, target


async def test_cancel_before_the_task_id_finds_the_task_and_cancels_it(a2a_server: Any) -> None:
    a2a_server.reset()
    result, target = await _cancel_while_first_event_is_held(a2a_server.card_url("hang"))
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert target.can_list_tasks
    messages = [
        m
        for m in a2a_server.entries("hang", "messages")
        if m["request_metadata"].get("delegation_id") == result.delegation_id
    ]
    assert len(messages) == 1, messages
    cancels = a2a_server.entries("hang", "cancels", messages[0]["task_id"])
    assert len(cancels) == 1, a2a_server.log()["hang"]["cancels"]
    assert cancels[0]["tenant"] == "acme"
    assert cancels[0]["metadata"]["delegation_id"] == result.delegation_id
    # The remote task really is cancelled (the SDK's own answer, not just our request).
    assert a2a_server.entries("hang", "cancels")  # recorded before the SDK cancelled it


async def test_without_list_tasks_the_cancel_stays_pending(nursery: trio.Nursery) -> None:
    scenario = RawScenario(stream=[task_frame("t-held", "TASK_STATE_WORKING")])
    await nursery.start(serve_raw_a2a, scenario)
    result, _ = await _cancel_while_first_event_is_held(scenario.card_url)
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.PENDING
    methods = scenario.methods()
    # The raw server answers ListTasks with an error: one lookup, no guess, no CancelTask.
    assert methods.count("ListTasks") == 1 <= FIND_ATTEMPTS
    assert "CancelTask" not in methods
