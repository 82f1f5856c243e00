"""The engine owns its targets: it prepares each when it opens and closes each when it closes;
and the delegation actor reads the session's declared members (no attribute probing)."""

from __future__ import annotations

import logging

import attrs
import pytest
import trio
import trio.testing

from engine import (
    AgentSpec,
    BaseTargetSession,
    DelegationError,
    DelegationRequest,
    DelegationTask,
    Emit,
    Engine,
    EngineLimits,
    ErrorCode,
    Kind,
    RemoteCancel,
    Status,
    TargetPrepareError,
)
from engine._actors import RUN_CLOSE_TIMEOUT
from tests.helpers.fakes import ScriptedTarget, finished, started


@attrs.define
class Lifetime(ScriptedTarget):
    """A scripted target that writes what happens to it into a shared log, and whose prepare
    and aclose do what the test says."""

    name: str = "t"
    log: list[str] = attrs.field(factory=list)
    prepare_does: str = "ok"  # ok | refuse | down | crash | hang
    close_does: str = "ok"  # ok | raise | hang

    async def prepare(self) -> None:
        await super().prepare()
        self.log.append(f"prepare {self.name}")
        if self.prepare_does == "refuse":
            raise DelegationError(
                code=ErrorCode.AGENT_UNAVAILABLE, message="the card has no name", retryable=False
            )
        if self.prepare_does == "down":
            raise DelegationError(code=ErrorCode.AGENT_UNAVAILABLE, message="connection refused")
        if self.prepare_does == "crash":
            raise RuntimeError("bug holding sk-LIVE-0123456789")
        if self.prepare_does == "hang":
            await trio.sleep_forever()

    async def aclose(self) -> None:
        await super().aclose()
        self.log.append(f"close {self.name}")
        if self.close_does == "raise":
            raise OSError("socket already gone")
        if self.close_does == "hang":
            await trio.sleep_forever()


def agent(target: Lifetime, key: str | None = None, **fields: object) -> AgentSpec:
    return AgentSpec(key=key or target.name, target=target, **fields)  # type: ignore[arg-type]


async def test_opening_prepares_each_target_once_and_closing_closes_each_once() -> None:
    log: list[str] = []
    shared = Lifetime(name="a", log=log, start=[[started(), finished("done")]])
    other = Lifetime(name="b", log=log)
    async with Engine([agent(shared), agent(shared, key="a2"), agent(other)]) as eng:
        assert sorted(log) == ["prepare a", "prepare b"]  # one object under two keys: once
        async with eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="a2", objective="x"))
        assert result.status == Status.COMPLETED
        assert log.count("prepare a") == 2  # and again before its delegation
        assert shared.target_closes == other.target_closes == 0
    assert (shared.target_closes, other.target_closes) == (1, 1)
    assert shared.closed == 1  # its session was closed before it


async def test_a_target_that_cannot_work_keeps_the_engine_from_opening() -> None:
    log: list[str] = []
    broken = Lifetime(name="broken", log=log, prepare_does="refuse")
    fine = Lifetime(name="fine", log=log)
    with pytest.raises(TargetPrepareError) as refused:
        async with Engine([agent(fine), agent(broken)]):
            raise AssertionError("the engine opened")
    assert set(refused.value.failures) == {"broken"}
    assert refused.value.failures["broken"].code == ErrorCode.AGENT_UNAVAILABLE
    assert str(refused.value) == (
        "agent 'broken' cannot be used: agent_unavailable: the card has no name"
    )
    assert (broken.target_closes, fine.target_closes) == (1, 1)  # closed again


async def test_a_crashing_prepare_refuses_the_engine_without_its_secret() -> None:
    secret = "sk-LIVE-0123456789"
    crashing = Lifetime(name="crashing", prepare_does="crash")
    with pytest.raises(TargetPrepareError) as refused:
        async with Engine([agent(crashing, secrets=(secret,))]):
            pass
    error = refused.value.failures["crashing"]
    assert error.code == ErrorCode.INTERNAL_ERROR and not error.retryable
    assert "RuntimeError" in error.message and secret not in str(refused.value)


async def test_a_target_whose_remote_is_down_lets_the_engine_open_and_its_delegation_fail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = Lifetime(name="down", prepare_does="down")
    with caplog.at_level(logging.WARNING, logger="subagent_engine"):
        async with Engine([agent(down)]) as eng, eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="down", objective="x"))
    assert "agent down is not ready yet (agent_unavailable: connection refused)" in caplog.text
    assert result.error is not None and result.error.code == ErrorCode.AGENT_UNAVAILABLE
    assert down.prepares == 2 and down.calls == []  # nothing was sent


async def test_a_prepare_that_never_returns_holds_the_engine_only_prepare_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = Lifetime(name="slow", prepare_does="hang")
    before = trio.current_time()
    async with Engine([agent(slow)], limits=EngineLimits(prepare_timeout=3.0)):
        assert trio.current_time() - before == pytest.approx(3.0)
    assert slow.target_closes == 1


class _Hanging(BaseTargetSession):
    """Runs until cancelled; writes its cancel and its close into the target's log."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def start(self, emit: Emit) -> None:
        await emit(started())
        await trio.sleep_forever()

    async def cancel(self) -> bool:
        self.log.append("cancel remote")
        return True

    async def aclose(self) -> None:
        self.log.append("close session")


@attrs.define
class HangingLifetime(Lifetime):
    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _Hanging:
        return _Hanging(self.log)


@pytest.mark.parametrize("outcome", ["body raises", "caller cancelled"])
async def test_targets_are_closed_after_their_runs_whatever_ends_the_engine(
    outcome: str, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[str] = []
    hanging = HangingLifetime(name="hang", log=log)
    with trio.move_on_after(5) as deadline:
        try:
            async with Engine([agent(hanging)]) as eng, eng.open_run() as run:
                run.start_delegation(DelegationRequest(agent="hang", objective="x"))
                await trio.sleep(1)
                if outcome == "body raises":
                    raise KeyError("parent crashed")
                await trio.sleep_forever()
        except KeyError:
            pass
    assert deadline.cancelled_caught == (outcome == "caller cancelled")
    assert log == ["prepare hang", "prepare hang", "cancel remote", "close session", "close hang"]


async def test_a_target_that_fails_or_hangs_closing_does_not_hold_the_engine(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    raising = Lifetime(name="raising", log=log, close_does="raise")
    hanging = Lifetime(name="hanging", log=log, close_does="hang")
    fine = Lifetime(name="fine", log=log)
    async with Engine([agent(raising), agent(hanging), agent(fine)]):
        opened = trio.current_time()
    assert trio.current_time() - opened == pytest.approx(RUN_CLOSE_TIMEOUT)
    assert sorted(e for e in log if e.startswith("close")) == [
        "close fine",
        "close hanging",
        "close raising",
    ]
    assert "agent raising: closing its target failed: OSError" in caplog.text


# -- the session's declared members -------------------------------------------------------------


@attrs.define
class Declaring(ScriptedTarget):
    """Sessions that say who they are (a card, a name) and whether the remote may run."""

    remote_may_run: bool = True
    fails: bool = False

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> BaseTargetSession:
        target = self

        class Session(BaseTargetSession):
            card_fingerprint = "sha256:feed"
            agent_name = "  The Remote's Own Name  "

            async def start(self, emit: Emit) -> None:
                if target.fails:
                    raise DelegationError(code=ErrorCode.REMOTE_REJECTED, message="no")
                await emit(started())
                await trio.sleep_forever()

            async def cancel(self) -> bool:
                target.calls.append("cancel")
                return True

        session = Session()
        session.remote_may_run = self.remote_may_run
        return session


async def test_a_session_names_the_agent_and_its_card_even_when_it_fails_at_once() -> None:
    target = Declaring(fails=True)
    async with Engine([AgentSpec(key="remote", target=target)]) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
        journal = eng.journal(run.run_id)
        assert journal is not None
        events = [e.event for e in await journal.store.read_after(0, journal.head)]
    assert result.card_fingerprint == "sha256:feed"
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_REJECTED
    named = {e.agent_name for e in events if e.kind in (Kind.STARTED, Kind.FAILED)}
    assert named == {"The Remote's Own Name"}


@pytest.mark.parametrize("may_run", [True, False])
async def test_a_session_that_says_its_remote_cannot_run_is_not_cancelled(
    may_run: bool, autojump_clock: trio.testing.MockClock
) -> None:
    target = Declaring(remote_may_run=may_run)
    async with Engine([AgentSpec(key="remote", target=target)]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        await trio.sleep(1)
        handle.cancel("stop")
        result = await handle.wait()
    assert result.status == Status.CANCELLED
    if may_run:
        assert result.remote_cancel == RemoteCancel.CONFIRMED and target.calls == ["cancel"]
    else:
        assert result.remote_cancel == RemoteCancel.NOT_NEEDED and target.calls == []
