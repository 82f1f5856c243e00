"""A CLI parent that prints nothing while no tool call is in flight is stopped: model silence.

`SilenceWatch` on a `MockClock` (autojump at 0: the time only moves when every task waits):
silence with no tool call open ends the wait at the limit, an output line restarts the clock, a
tool call the output started and a running delegation each pause it. Then the driver with a fake
CLI (`tests/helpers/fakes_cli.py`; the clock jumps once the fake has been idle for 1 s): a
silent CLI is stopped and the run fails with `model_unavailable`, one with a tool call in flight
is not; and the limit's default and validation.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import CodexConfig, CodexParent, ParentEvent, ParentProcessError
from adapters.parents._process import (
    BUSY_POLL_SECONDS,
    MODEL_SILENCE_MARGIN,
    SilenceWatch,
    delegations_running,
)
from engine import AgentSpec, DelegationRequest, Engine, ErrorCode, Kind, Run, RunEndpoint
from tests.helpers.fakes_cli import CODEX_SIGINT, read_log, write_fake_cli

GRACES: dict[str, Any] = {"interrupt_grace": 2.0, "terminate_grace": 2.0, "kill_grace": 2.0}
LIMIT = 100.0


def start(call_id: str) -> ParentEvent:
    return ParentEvent(Kind.PARENT_TOOL_CALL_START, {"tool_call_id": call_id, "tool_name": "t"})


def result(call_id: str) -> ParentEvent:
    return ParentEvent(Kind.PARENT_TOOL_CALL_RESULT, {"tool_call_id": call_id, "result": "r"})


async def silent_at(watch: SilenceWatch, nursery: trio.Nursery) -> list[float]:
    """Start waiting for silence; the list gets the time the wait ended and the silence."""
    ended: list[float] = []

    async def wait() -> None:
        silence = await watch.wait_silent()
        ended.extend([trio.current_time(), silence])

    nursery.start_soon(wait)
    await trio.testing.wait_all_tasks_blocked()
    return ended


async def test_silence_with_no_tool_call_ends_the_wait_at_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    began = trio.current_time()
    watch = SilenceWatch(LIMIT)
    async with trio.open_nursery() as nursery:
        ended = await silent_at(watch, nursery)
    assert ended == [began + LIMIT, LIMIT]


async def test_an_output_line_restarts_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    began = trio.current_time()
    watch = SilenceWatch(LIMIT)
    async with trio.open_nursery() as nursery:
        ended = await silent_at(watch, nursery)
        await trio.sleep(LIMIT - 1)
        watch.heard([ParentEvent(Kind.PARENT_TEXT_DELTA, {"delta": "x"})])
        await trio.sleep(LIMIT - 1)
        assert ended == []
        watch.heard()  # a line the parser made nothing of counts too
    assert ended == [began + 2 * (LIMIT - 1) + LIMIT, LIMIT]


async def test_a_long_tool_call_pauses_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    watch = SilenceWatch(LIMIT)
    async with trio.open_nursery() as nursery:
        watch.heard([start("a"), start("b")])
        ended = await silent_at(watch, nursery)
        await trio.sleep(50 * LIMIT)
        watch.heard([result("a")])
        assert watch.open_calls == {"b"}
        await trio.sleep(50 * LIMIT)
        assert ended == []
        watch.heard([result("b")])
        finished = trio.current_time()
    assert watch.open_calls == set()
    assert ended == [finished + LIMIT, LIMIT]


async def test_a_call_in_flight_elsewhere_pauses_the_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy = True
    watch = SilenceWatch(LIMIT, busy_elsewhere=lambda: busy)
    async with trio.open_nursery() as nursery:
        ended = await silent_at(watch, nursery)
        # Between two polls, so that no poll and this change fall on the same instant (which of
        # two tasks woken at one MockClock time runs first is up to the scheduler).
        await trio.sleep(50 * LIMIT + BUSY_POLL_SECONDS / 2)
        assert ended == []
        busy = False
        idle_from = trio.current_time()
    # Counted from the last poll that saw it in flight, which came less than one poll earlier.
    assert idle_from - BUSY_POLL_SECONDS + LIMIT < ended[0] <= idle_from + LIMIT
    assert ended[1] == pytest.approx(LIMIT)


async def test_a_running_delegation_is_a_call_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def waits(task: LocalTask) -> str:
        await release.wait()
        return "done"

    async with (
        Engine([AgentSpec(key="slow", target=InProcessTarget(waits))]) as eng,
        eng.open_run() as run,
    ):
        running = delegations_running(run)
        assert not running()
        handle = run.start_delegation(DelegationRequest(agent="slow", objective="o"))
        await trio.testing.wait_all_tasks_blocked()
        assert running()
        release.set()
        await handle.wait()
        assert not running()


def test_the_default_limit_follows_the_retry_bounds_and_zero_turns_it_off() -> None:
    config = CodexConfig(max_retries=1, request_timeout=10.0)
    assert config.silence_limit() == 2 * 10.0 + MODEL_SILENCE_MARGIN
    assert CodexConfig(model_silence=45).silence_limit() == 45
    assert CodexConfig(model_silence=0).silence_limit() is None


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_model_silence_must_be_a_finite_number_not_below_zero(bad: float) -> None:
    with pytest.raises(ValueError, match="model_silence"):
        CodexConfig(model_silence=bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf")])
def test_a_silence_watch_needs_a_positive_limit(bad: float) -> None:
    with pytest.raises(ValueError, match="silence limit"):
        SilenceWatch(bad)


# -- the driver, with a fake CLI -------------------------------------------------------------


class StaticEndpoints:
    """An endpoint provider with nothing behind it (the fake CLI does not connect)."""

    async def open_endpoint(self, run: Run) -> RunEndpoint:
        token = secrets.token_urlsafe(32)
        return RunEndpoint(url=f"http://127.0.0.1:9/runs/{run.run_id}/mcp", token=token)

    async def close_endpoint(self, run_id: str) -> None:
        pass


async def failed_run(parent: CodexParent) -> tuple[ParentProcessError, list[Any]]:
    async with Engine([], endpoints=StaticEndpoints()) as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError) as caught:
            await parent.run(run, "hello")
        journal = eng.journal(run.run_id)
        assert journal is not None
        events = [entry.event for entry in await journal.store.read_after(0, journal.head)]
    return caught.value, events


def signals(wrapper: Path) -> list[str]:
    return [r["signal"] for r in read_log(wrapper) if r["event"] == "signal"]


THREAD = {"out_json": {"type": "thread.started", "thread_id": "t"}}
TURN = {"out_json": {"type": "turn.started"}}


async def test_a_silent_cli_is_stopped_and_the_run_fails_as_model_unavailable(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    wrapper = write_fake_cli(
        tmp_path, {"steps": [THREAD, TURN, {"pause": True}], "on_sigint": CODEX_SIGINT}
    )
    # No run deadline: the silence alone must end the run.
    config = CodexConfig(binary=str(wrapper), max_retries=0, request_timeout=20.0, **GRACES)
    limit = config.silence_limit()
    assert limit == 20.0 + MODEL_SILENCE_MARGIN
    before = trio.current_time()
    error, events = await failed_run(CodexParent(config))
    assert limit <= trio.current_time() - before < limit + 10
    assert error.code == ErrorCode.MODEL_UNAVAILABLE
    assert "model was silent for" in error.message and "no tool call in flight" in error.message
    assert signals(wrapper) == ["SIGINT"]
    assert events[-1].kind == Kind.RUN_FAILED
    assert events[-1].error.code == ErrorCode.MODEL_UNAVAILABLE


async def test_a_cli_with_a_tool_call_in_flight_is_not_stopped_for_silence(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    call = {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": "subagents",
        "tool": "delegate_to_agent",
        "arguments": {"agent": "a", "objective": "o"},
    }
    steps = [THREAD, TURN, {"out_json": {"type": "item.started", "item": call}}, {"pause": True}]
    wrapper = write_fake_cli(tmp_path, {"steps": steps, "on_sigint": CODEX_SIGINT})
    # The silence limit passes many times over during the call; the run deadline ends it.
    config = CodexConfig(binary=str(wrapper), model_silence=30, run_deadline=600, **GRACES)
    before = trio.current_time()
    error, _ = await failed_run(CodexParent(config))
    assert 600 <= trio.current_time() - before < 610
    assert error.code == ErrorCode.RUN_DEADLINE, error.message
    assert signals(wrapper) == ["SIGINT"]


async def test_a_zero_model_silence_turns_the_watch_off(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    wrapper = write_fake_cli(
        tmp_path, {"steps": [THREAD, {"pause": True}], "on_sigint": CODEX_SIGINT}
    )
    config = CodexConfig(binary=str(wrapper), model_silence=0, run_deadline=3600, **GRACES)
    error, _ = await failed_run(CodexParent(config))
    assert error.code == ErrorCode.RUN_DEADLINE, error.message
