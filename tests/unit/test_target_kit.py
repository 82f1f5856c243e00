"""The target conformance kit (`engine.testing.check_target`): the in-process target passes it,
and each way of breaking the target seam is caught by the check that owns that promise.

The real remote targets (A2A, AG-UI) are held to the same kit against real servers in
tests/integration/test_target_conformance.py.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    Answer,
    DelegationError,
    DelegationTask,
    Emit,
    ErrorCode,
    Kind,
    Target,
    TargetSession,
    TargetUpdate,
)
from engine.testing import (
    TARGET_CHECKS,
    Scenario,
    TargetContractError,
    check_target,
)


async def _finish(task: LocalTask) -> str:
    await task.say("working on ", task.objective)
    return "done"


async def _hang(task: LocalTask) -> str:
    await task.status("working")
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def _ask(task: LocalTask) -> str:
    answer = await task.ask("Proceed?")
    return f"got {answer.text}"


AGENTS = {Scenario.FINISH: _finish, Scenario.HANG: _hang, Scenario.ASK: _ask}


@attrs.define
class InProcessHarness:
    """In-process agents play the scenarios; `make` builds the target around the function."""

    make: Any = InProcessTarget

    async def target(self, scenario: str) -> Target | None:
        agent = AGENTS.get(scenario)
        return None if agent is None else self.make(agent)


async def test_the_in_process_target_passes_the_kit(autojump_clock: trio.abc.Clock) -> None:
    outcomes = await check_target(InProcessHarness())
    assert outcomes == {
        "prepare": "passed",
        "start and stream": "passed",
        "cancel": "passed",
        "resubscribe": "skipped: the harness has no 'drop' remote",
        "answer": "passed",
        "close": "passed",
    }


# -- targets that break a promise, and the check that catches each ------------------------------


@attrs.define
class Faulty(InProcessTarget):
    """The in-process target with one `fault`; see `FAULTS`."""

    fault: str = ""
    closes: int = 0
    refreshing: bool = False

    @property
    def secrets(self) -> Any:  # type: ignore[override]
        return ["token"] if self.fault == "secrets in a list" else ()

    async def prepare(self) -> None:
        if self.fault == "prepare crashes":
            raise ValueError("bad config")
        if self.fault == "leaks a task" and not self.refreshing:
            self.refreshing = True
            trio.lowlevel.spawn_system_task(trio.sleep_forever, name="card refresher")
        if self.fault == "cannot be prepared again" and self.closes:
            raise DelegationError(code=ErrorCode.AGENT_UNAVAILABLE, message="closed for good")

    async def aclose(self) -> None:
        self.closes += 1
        if self.fault == "closes only once" and self.closes > 1:
            raise RuntimeError("already closed")

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> TargetSession:
        return FaultySession(self.fault, super().open_session(task, nursery))


class FaultySession:
    def __init__(self, fault: str, inner: Any) -> None:
        self.fault = fault
        self.inner = inner
        self.card_fingerprint: str | None = None
        self.agent_name: str | None = None
        self.streaming = True

    @property
    def remote_may_run(self) -> bool:
        return self.fault != "denies its remote runs"

    async def start(self, emit: Emit) -> None:
        fault = self.fault
        if fault == "emits a dict":
            await emit({"kind": "subagent.started"})  # type: ignore[arg-type]
        if fault == "hides what emit raised":
            try:
                await emit({"kind": "subagent.started"})  # type: ignore[arg-type]
            except Exception:
                raise DelegationError(code=ErrorCode.REMOTE_FAILED, message="oops") from None
        if fault == "no progress":
            await emit(TargetUpdate(kind=Kind.FINISHED, text="done"))
            return
        if fault == "returns without a terminal":
            await emit(TargetUpdate(kind=Kind.STARTED, status="working"))
            return

        async def relay(update: TargetUpdate) -> None:
            await emit(update)
            if fault == "two terminals" and update.kind == Kind.FINISHED:
                await emit(TargetUpdate(kind=Kind.FAILED))

        try:
            await self.inner.start(relay)
        except trio.Cancelled:
            if fault == "keeps streaming when cancelled":
                with trio.CancelScope(shield=True):
                    await trio.sleep(60)
            raise

    async def resubscribe(self, emit: Emit) -> None:
        await self.inner.resubscribe(emit)

    async def poll(self, emit: Emit) -> None:
        await self.inner.poll(emit)

    async def answer(self, answer: Answer, emit: Emit) -> None:
        if self.fault == "ignores the answer":
            await emit(TargetUpdate(kind=Kind.FAILED))
            return
        await self.inner.answer(answer, emit)

    async def cancel(self) -> bool:
        confirmed: bool = await self.inner.cancel()
        return confirmed and self.fault != "never confirms a cancel"

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.fault == "session close raises":
            raise OSError("socket gone")


#: fault -> (the check that catches it, what its message says)
FAULTS = {
    "secrets in a list": ("prepare", "secrets is not a tuple of strings: list"),
    "prepare crashes": ("prepare", "prepare() raised ValueError (bad config), not a Delegation"),
    "leaks a task": ("prepare", "still run after the target was closed: ['card refresher']"),
    "emits a dict": ("start and stream", "emitted dict, not a TargetUpdate"),
    "hides what emit raised": ("start and stream", "emitted dict, not a TargetUpdate"),
    "two terminals": (
        "start and stream",
        "emitted subagent.failed after subagent.finished ended the call",
    ),
    "returns without a terminal": (
        "start and stream",
        "the call returned before the remote's task ended (no terminal): ['subagent.started']",
    ),
    "no progress": ("start and stream", "finished without any update before its terminal"),
    "denies its remote runs": ("cancel", "remote_may_run is False while the remote task runs"),
    "keeps streaming when cancelled": ("cancel", "start() to end once cancelled"),
    "never confirms a cancel": ("cancel", "cancel() returned False"),
    "ignores the answer": ("answer", "the task ended subagent.failed"),
    "session close raises": ("start and stream", "the session's aclose() raised OSError"),
    "closes only once": ("close", "the target's aclose() raised RuntimeError (already closed)"),
    "cannot be prepared again": (
        "close",
        "prepare() refused a target that should work: agent_unavailable: closed for good",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_the_kit_rejects_a_target_that_breaks_a_promise(
    fault: str, autojump_clock: trio.abc.Clock
) -> None:
    check, message = FAULTS[fault]
    harness = InProcessHarness(make=lambda agent: Faulty(agent, fault=fault))
    with pytest.raises(TargetContractError) as broken:
        await check_target(harness)
    assert str(broken.value).startswith(f"{check}: "), broken.value  # the first to meet it
    assert message in str(broken.value)


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (
            DelegationError(code=ErrorCode.AGENT_UNAVAILABLE, message="unreachable"),
            "refused as retryable (agent_unavailable: unreachable)",
        ),
        (None, "prepare() accepted a target that cannot work as configured"),
    ],
)
async def test_a_malformed_target_must_be_refused_for_good(
    prepare: DelegationError | None, message: str, autojump_clock: trio.abc.Clock
) -> None:
    @attrs.define
    class Misconfigured(InProcessTarget):
        async def prepare(self) -> None:
            if prepare is not None:
                raise prepare

    @attrs.define
    class Harness(InProcessHarness):
        async def target(self, scenario: str) -> Target | None:
            if scenario == Scenario.MALFORMED:
                return Misconfigured(_finish)
            return await super().target(scenario)

    with pytest.raises(TargetContractError, match="prepare: ") as broken:
        await check_target(Harness())
    assert message in str(broken.value)


async def test_every_step_is_bounded(autojump_clock: trio.abc.Clock) -> None:
    async def never_says_anything(task: LocalTask) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @attrs.define
    class Mute(InProcessTarget):
        def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> TargetSession:
            session = super().open_session(task, nursery)

            async def start(emit: Emit) -> None:
                await trio.sleep_forever()  # not even the acceptance

            session.start = start  # type: ignore[method-assign]
            return session

    harness = InProcessHarness(make=lambda agent: Mute(never_says_anything))
    before = trio.current_time()
    with pytest.raises(TargetContractError, match=r"start\(\) did not end within 2 s"):
        await TARGET_CHECKS["start and stream"](harness, step_seconds=2.0)
    assert trio.current_time() - before == pytest.approx(2.0, abs=0.1)
