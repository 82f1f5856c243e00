"""When `open_run` returns, nothing the run started is still running (the actor tree's promise).

`tests.helpers.task_tracker` tells which tasks the run started and which still run.
"""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing

from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AgentSpec,
    BaseTarget,
    BaseTargetSession,
    DelegationPolicy,
    DelegationRequest,
    DelegationTask,
    Emit,
    Engine,
    ErrorCode,
    Kind,
    Status,
    TargetCapabilities,
    TargetUpdate,
)
from tests.helpers.task_tracker import tracking

POLICY = DelegationPolicy(default_timeout=60, max_timeout=60, cancel_timeout=1)


def agent_spec(target: object, key: str = "agent") -> AgentSpec:
    return AgentSpec(key=key, target=target, policy=POLICY)  # type: ignore[arg-type]


async def chatty(task: LocalTask) -> str:
    await task.status("working", "reading")
    await task.say("Hello ", "there")
    await task.think("hmm")
    await task.tool_call("search", {"q": "x"}, {"hits": 1})
    await task.artifact("notes.md", data="abc")
    return "done"


async def sleeps_forever(task: LocalTask) -> str:
    await task.say("about to sleep")
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def delegation_tasks(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("delegation ")]


async def test_no_task_outlives_a_normal_run() -> None:
    agents = [
        agent_spec(InProcessTarget(chatty), "chatty"),
        agent_spec(InProcessTarget(sleeps_forever), "sleepy"),
    ]
    async with Engine(agents) as eng:
        with tracking() as tracker:
            async with eng.open_run() as run:
                results = [
                    await run.delegate(DelegationRequest(agent="chatty", objective="a")),
                    await run.delegate(DelegationRequest(agent="chatty", objective="b")),
                ]
                # A delegation still running when the body ends is cancelled by the close.
                sleepy = run.start_delegation(DelegationRequest(agent="sleepy", objective="c"))
                await trio.testing.wait_all_tasks_blocked()
                assert not sleepy.finished
            assert tracker.alive() == []
        journal = eng.journal(run.run_id)
        assert journal is not None
        assert journal.ended
    assert [r.status for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert [r.summary for r in results] == ["done", "done"]
    assert sleepy.result().status == Status.CANCELLED
    assert len(delegation_tasks(tracker.names())) == 3
    assert sum(n.startswith("in-process agent") for n in tracker.names()) == 3
    assert eng.active_delegations == 0


async def test_no_task_outlives_a_cancelled_run() -> None:
    async with Engine([agent_spec(InProcessTarget(sleeps_forever))]) as eng:
        with tracking() as tracker:
            async with eng.open_run() as run:
                handles = [
                    run.start_delegation(DelegationRequest(agent="agent", objective=str(i)))
                    for i in range(3)
                ]
                await trio.testing.wait_all_tasks_blocked()
                assert eng.active_delegations == 3
                run.cancel("user pressed stop")
                await trio.sleep_forever()  # the body is cancelled by run.cancel()
            assert tracker.alive() == []
    assert len(delegation_tasks(tracker.names())) == 3
    assert [h.finished for h in handles] == [True, True, True]
    assert [h.result().status for h in handles] == [Status.CANCELLED] * 3
    assert eng.active_delegations == 0


async def test_no_task_outlives_a_delegation_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with Engine([agent_spec(InProcessTarget(sleeps_forever))]) as eng:
        with tracking() as tracker:
            async with eng.open_run() as run:
                start = trio.current_time()
                result = await run.delegate(
                    DelegationRequest(agent="agent", objective="x", timeout_seconds=5)
                )
                assert trio.current_time() - start == pytest.approx(5)
            assert tracker.alive() == []
    assert result.status == Status.FAILED
    assert result.error is not None
    assert result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert len(delegation_tasks(tracker.names())) == 1


@attrs.define
class RaisingTarget(BaseTarget):
    """A target whose session starts a background task in the delegation's nursery, emits,
    and then raises (a bug in the target): the actor must supervise it and clean up."""

    capabilities: TargetCapabilities = attrs.field(factory=TargetCapabilities)

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _RaisingSession:
        return _RaisingSession(nursery)


class _RaisingSession(BaseTargetSession):
    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    async def start(self, emit: Emit) -> None:
        self._nursery.start_soon(trio.sleep, math.inf, name="target watcher")
        await emit(TargetUpdate(kind=Kind.STARTED, status="working", remote_task_id="t-1"))
        await emit(TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="partial"))
        raise RuntimeError("target bug")

    async def resubscribe(self, emit: Emit) -> None:
        raise AssertionError("not called")

    async def poll(self, emit: Emit) -> None:
        raise AssertionError("not called")

    async def answer(self, answer: object, emit: Emit) -> None:
        raise AssertionError("not called")

    async def cancel(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


async def raising_agent(task: LocalTask) -> str:
    await task.say("partial")
    raise RuntimeError("agent bug")


@pytest.mark.parametrize(
    ("target", "code"),
    [
        (RaisingTarget(), ErrorCode.INTERNAL_ERROR),
        (InProcessTarget(raising_agent), ErrorCode.REMOTE_FAILED),
    ],
    ids=["session raises", "in-process agent raises"],
)
async def test_no_task_outlives_a_raising_target(target: object, code: str) -> None:
    async with Engine([agent_spec(target)]) as eng:
        with tracking() as tracker:
            async with eng.open_run() as run:
                result = await run.delegate(DelegationRequest(agent="agent", objective="x"))
                after = await run.delegate(DelegationRequest(agent="agent", objective="y"))
            assert tracker.alive() == []
    assert result.status == Status.FAILED
    assert result.error is not None
    assert result.error.code == code
    assert [m.text for m in result.messages] == ["partial"]
    assert after.status == Status.FAILED  # the run went on after the first crash
    assert len(delegation_tasks(tracker.names())) == 2
    assert eng.active_delegations == 0
