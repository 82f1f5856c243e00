"""`Target.cancel_remote`: a remote task cancelled with no session, from the ids a journal kept,
as the engine does for the delegations of a process that died.

Each remote task is started by one target's session (its updates carry the ids the engine
journals: `remote_task_id`, `remote_context_id`); a *new* target object, as after a restart,
then cancels it from those ids alone. The session's stream stays open meanwhile, so the remote's
own answer shows on it: the task really ended there, not just our request. Remotes: the
a2a-sdk server (`tools/peers/a2a_faulty.py`), the raw A2A server (a card whose interface
nothing listens at, a malformed card) and the AG-UI agent (`tools/peers/agui_app.py`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.agui import AguiAgentConfig, AguiTarget
from engine import (
    DelegationPolicy,
    DelegationRequest,
    DelegationTask,
    Kind,
    RemoteCancel,
    RemoteTaskRef,
    Target,
    TargetUpdate,
)
from tests.helpers.peers import AguiApp, agui_app
from tests.helpers.ports import closed_port
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a

#: Every step of a test is bounded by this (a stuck remote fails the test, never hangs it).
STEP_SECONDS = 10.0


@attrs.define
class RunningTask:
    """A remote task one target's session started and still streams."""

    ref: RemoteTaskRef
    updates: list[TargetUpdate]
    ended: trio.Event

    async def wait_for_end(self) -> TargetUpdate:
        """The terminal the session's stream carried (the remote's own word that it ended)."""
        with trio.fail_after(STEP_SECONDS):
            await self.ended.wait()
        return next(u for u in self.updates if u.kind in Kind.DELEGATION_TERMINALS)


@asynccontextmanager
async def running_task(target: Target, delegation_id: str) -> AsyncIterator[RunningTask]:
    """Start a task with `target`'s session and keep its stream open; the ref carries the ids
    the session's updates reported, as the journal keeps them."""
    task = DelegationTask(
        run_id="run-crashed",
        delegation_id=delegation_id,
        agent_key="remote",
        request=DelegationRequest(agent="remote", objective="run until cancelled"),
        policy=DelegationPolicy(),
        timeout=STEP_SECONDS,
        stream=True,
    )
    updates: list[TargetUpdate] = []
    named = trio.Event()
    ended = trio.Event()

    async def emit(update: TargetUpdate) -> None:
        updates.append(update)
        if update.remote_task_id:
            named.set()
        if update.kind in Kind.DELEGATION_TERMINALS:
            ended.set()

    with trio.fail_after(STEP_SECONDS):
        await target.prepare()
    try:
        async with trio.open_nursery() as nursery:
            session = target.open_session(task, nursery)
            nursery.start_soon(session.start, emit)
            with trio.fail_after(STEP_SECONDS):
                await named.wait()
            first = next(u for u in updates if u.remote_task_id)
            ref = RemoteTaskRef(
                delegation_id=delegation_id,
                agent_key="remote",
                run_id=task.run_id,
                remote_task_id=first.remote_task_id,
                remote_context_id=first.remote_context_id,
            )
            try:
                yield RunningTask(ref=ref, updates=updates, ended=ended)
            finally:
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await session.aclose()
    finally:
        with trio.CancelScope(shield=True):
            await target.aclose()


async def cancel_remote(target: Target, ref: RemoteTaskRef) -> str:
    """`target.cancel_remote(ref)` with a fresh target (closed after), bounded like a caller."""
    try:
        with trio.fail_after(STEP_SECONDS):
            return await target.cancel_remote(ref)
    finally:
        with trio.CancelScope(shield=True):
            await target.aclose()


def nothing_named(delegation_id: str) -> RemoteTaskRef:
    """What the journal keeps of a delegation that never reached its remote: no ids."""
    return RemoteTaskRef(delegation_id=delegation_id, agent_key="remote", run_id="run-crashed")


# -- A2A ------------------------------------------------------------------------------------------


def a2a_target(card_url: str, **config: Any) -> A2ATarget:
    return A2ATarget(A2AAgentConfig(card_url=card_url, tenant="acme", **config))


async def test_a_new_a2a_target_cancels_a_task_a_dead_process_left_running(
    a2a_server: Any,
) -> None:
    card_url = a2a_server.card_url("hang")
    async with running_task(a2a_target(card_url), "del-a2a-restart") as task:
        ref = task.ref
        assert ref.remote_task_id and ref.remote_context_id
        outcome = await cancel_remote(a2a_target(card_url, forward_identity=True), ref)
        assert outcome == RemoteCancel.CONFIRMED
        # The remote's own stream of the task says it was cancelled.
        assert (await task.wait_for_end()).kind == Kind.CANCELLED
    (cancel,) = a2a_server.entries("hang", "cancels", ref.remote_task_id)
    assert cancel["outcome"] == "TASK_STATE_CANCELED"
    assert cancel["tenant"] == "acme"
    assert cancel["metadata"] == {
        "delegation_id": "del-a2a-restart",
        "agent_key": "remote",
        "run_id": "run-crashed",
        "reason": "the delegating process ended",
    }
    assert cancel["x_headers"]["x-delegation-id"] == "del-a2a-restart"
    assert cancel["x_headers"]["x-parent-run-id"] == "run-crashed"
    assert cancel["x_tenant"] == "acme"


async def test_an_a2a_task_the_remote_does_not_know_is_pending(a2a_server: Any) -> None:
    # The a2a-sdk server answers TaskNotFoundError to CancelTask and to the GetTask that
    # follows: it did not say the task ended (it may have forgotten it, or keep it under
    # another tenant), so the cancel is not confirmed.
    ref = attrs.evolve(nothing_named("del-a2a-unknown"), remote_task_id="no-such-task")
    outcome = await cancel_remote(a2a_target(a2a_server.card_url("hang")), ref)
    assert outcome == RemoteCancel.PENDING
    (cancel,) = a2a_server.entries("hang", "cancels", "no-such-task")
    assert (cancel["outcome"], cancel["error"]) == ("error", "TaskNotFoundError")
    assert a2a_server.entries("hang", "get_tasks", "no-such-task")


async def test_an_a2a_cancel_the_remote_refuses_is_pending_while_the_task_runs(
    a2a_server: Any,
) -> None:
    card_url = a2a_server.card_url("nocancel")
    async with running_task(a2a_target(card_url), "del-a2a-refused") as task:
        outcome = await cancel_remote(a2a_target(card_url), task.ref)
        assert outcome == RemoteCancel.PENDING
        assert not task.ended.is_set()
    task_id = task.ref.remote_task_id
    assert [c["outcome"] for c in a2a_server.entries("nocancel", "cancels", task_id)] == ["refused"]
    # The refusal is not taken for an answer: the task's state was read, and it still works.
    assert a2a_server.entries("nocancel", "get_tasks", task_id)


async def test_an_a2a_cancel_that_never_answers_is_pending_within_the_request_timeout(
    a2a_server: Any,
) -> None:
    card_url = a2a_server.card_url("hangcancel")
    async with running_task(a2a_target(card_url), "del-a2a-unanswered") as task:
        bound = 0.5
        started = time.monotonic()
        outcome = await cancel_remote(a2a_target(card_url, request_timeout=bound), task.ref)
        elapsed = time.monotonic() - started
        assert outcome == RemoteCancel.PENDING
        assert bound <= elapsed < STEP_SECONDS
    # The remote got the cancel and has not answered it.
    (cancel,) = a2a_server.entries("hangcancel", "cancels", task.ref.remote_task_id)
    assert "outcome" not in cancel


async def test_an_unreachable_a2a_agent_is_pending(nursery: trio.Nursery) -> None:
    ref = attrs.evolve(nothing_named("del-a2a-gone"), remote_task_id="t-1")
    # Nothing listens where the card would be ...
    url = f"http://127.0.0.1:{closed_port()}/.well-known/agent-card.json"
    assert await cancel_remote(a2a_target(url), ref) == RemoteCancel.PENDING
    # ... or the card is served but nothing listens at the interface it names.
    scenario = RawScenario(interface_url=f"http://127.0.0.1:{closed_port()}/jsonrpc")
    await nursery.start(serve_raw_a2a, scenario)
    assert await cancel_remote(a2a_target(scenario.card_url), ref) == RemoteCancel.PENDING
    assert "CancelTask" not in scenario.methods()  # it went to the interface, which is gone


async def test_an_a2a_target_that_cannot_work_as_configured_is_unsupported(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(card_override={"name": "no interface"})
    await nursery.start(serve_raw_a2a, scenario)
    ref = attrs.evolve(nothing_named("del-a2a-malformed"), remote_task_id="t-1")
    assert await cancel_remote(a2a_target(scenario.card_url), ref) == RemoteCancel.UNSUPPORTED


async def test_an_a2a_reference_without_a_task_id_is_not_needed() -> None:
    # Nothing listens there: the answer comes without asking the remote anything.
    url = f"http://127.0.0.1:{closed_port()}/.well-known/agent-card.json"
    ref = attrs.evolve(nothing_named("del-a2a-nothing"), remote_context_id="ctx-only")
    assert await cancel_remote(a2a_target(url), ref) == RemoteCancel.NOT_NEEDED


# -- AG-UI ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agui_peer() -> Iterator[AguiApp]:
    with agui_app() as peer:
        yield peer


def agui_target(url: str, stop_url: str | None, **config: Any) -> AguiTarget:
    return AguiTarget(AguiAgentConfig(url=url, stop_url=stop_url, tenant="acme", **config))


async def test_a_new_agui_target_stops_a_run_a_dead_process_left_running(
    agui_peer: AguiApp,
) -> None:
    url = agui_peer.url("hang")
    async with running_task(agui_target(url, f"{url}/stop"), "del-agui-restart") as task:
        ref = task.ref
        assert ref.remote_task_id and ref.remote_context_id
        target = agui_target(url, f"{url}/stop", forward_identity=True)
        assert await cancel_remote(target, ref) == RemoteCancel.CONFIRMED
        # The remote's own stream of the run says it was stopped.
        assert (await task.wait_for_end()).kind == Kind.CANCELLED
    (stop,) = agui_peer.stops("del-agui-restart")
    assert stop["found"] and stop["path"] == "/agents/hang/stop"
    assert stop["body"] == {
        "threadId": ref.remote_context_id,
        "runId": ref.remote_task_id,
        "delegationId": "del-agui-restart",
        "reason": "the delegating process ended",
    }
    assert stop["x_headers"]["x-delegation-id"] == "del-agui-restart"
    assert stop["x_headers"]["x-parent-run-id"] == "run-crashed"
    assert stop["x_headers"]["x-tenant"] == "acme"


async def test_an_agui_stop_the_remote_refuses_is_pending(agui_peer: AguiApp) -> None:
    url = agui_peer.url("stubborn")
    async with running_task(agui_target(url, f"{url}/stop"), "del-agui-refused") as task:
        assert await cancel_remote(agui_target(url, f"{url}/stop"), task.ref) == "pending"
        assert not task.ended.is_set()
    assert len(agui_peer.stops("del-agui-refused")) == 1


async def test_an_unreachable_agui_stop_endpoint_is_pending() -> None:
    url = f"http://127.0.0.1:{closed_port()}/agents/hang"
    ref = attrs.evolve(nothing_named("del-agui-gone"), remote_task_id="run-1")
    assert await cancel_remote(agui_target(url, f"{url}/stop"), ref) == RemoteCancel.PENDING


async def test_an_agui_stop_url_that_needs_a_thread_id_the_journal_lacks_is_pending(
    agui_peer: AguiApp,
) -> None:
    url = agui_peer.url("hang")
    ref = attrs.evolve(nothing_named("del-agui-threadless"), remote_task_id="run-1")
    target = agui_target(url, f"{url}/stop?thread={{thread_id}}")
    assert await cancel_remote(target, ref) == RemoteCancel.PENDING
    assert agui_peer.stops("del-agui-threadless") == []  # not asked with a URL it cannot build


async def test_an_agui_target_without_stop_url_is_unsupported(agui_peer: AguiApp) -> None:
    url = agui_peer.url("hang")
    ref = attrs.evolve(nothing_named("del-agui-nostop"), remote_task_id="run-1")
    assert await cancel_remote(agui_target(url, None), ref) == RemoteCancel.UNSUPPORTED
    assert agui_peer.stops("del-agui-nostop") == []


async def test_an_agui_reference_without_a_run_id_is_not_needed(agui_peer: AguiApp) -> None:
    url = agui_peer.url("hang")
    ref = attrs.evolve(nothing_named("del-agui-nothing"), remote_context_id="thread-only")
    for stop_url in (f"{url}/stop", None):
        assert await cancel_remote(agui_target(url, stop_url), ref) == RemoteCancel.NOT_NEEDED
    assert agui_peer.stops("del-agui-nothing") == []
