"""The engine's run and delegation lines (`engine._oplog` on `subagent_engine.runs`): exactly one
start and one end per run and per delegation, whatever way they end, with their fields."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from engine import (
    RUN_LOG,
    DelegationError,
    DelegationRequest,
    Engine,
    EngineLimits,
    ErrorCode,
    _oplog,
    render_fields,
)
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, finished, started

Lines = list[dict[str, Any]]


def request(agent: str = "remote", **fields: Any) -> DelegationRequest:
    return DelegationRequest(agent=agent, objective="do it", **fields)


def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    return [
        {"event": r.event, **{k: v for k, v in r.__dict__.items() if k in _FIELDS}}
        for r in caplog.records
        if r.name == RUN_LOG.name
    ]


_FIELDS = {
    "run_id",
    "delegation_id",
    "agent",
    "status",
    "duration_s",
    "error_code",
    "delegations",
    "parent_tool_call_id",
    "remote_task_id",
    "remote_cancel",
}


def events(found: Lines) -> list[str]:
    return [line["event"] for line in found]


@pytest.fixture
def runs_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=RUN_LOG.name)
    return caplog


async def test_a_finished_run_and_its_delegations_have_one_start_and_one_end_each(
    runs_log: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    ok = ScriptedTarget(start=[[started(), finished("done")]])
    bad = ScriptedTarget(start=[[DelegationError(code=ErrorCode.REMOTE_FAILED, message="no")]])
    engine = Engine([spec(ok, key="ok"), spec(bad, key="bad")])
    async with engine, engine.open_run(run_id="run-a") as run:
        await trio.sleep(2)
        await run.delegate(request("ok", parent_tool_call_id="toolu_1"))
        await run.delegate(request("bad"))
    found = lines(runs_log)
    assert events(found) == [
        "run.start",
        "delegation.start",
        "delegation.end",
        "delegation.start",
        "delegation.end",
        "run.end",
    ]
    assert found[-1] == {
        "event": "run.end",
        "run_id": "run-a",
        "status": "finished",
        "duration_s": pytest.approx(2),
        "delegations": 2,
        "error_code": None,
    }
    ok_end, bad_end = found[2], found[4]
    assert ok_end["agent"] == "ok" and ok_end["status"] == "completed"
    assert ok_end["error_code"] is None and ok_end["parent_tool_call_id"] == "toolu_1"
    assert ok_end["remote_task_id"] == "task-1" and ok_end["delegation_id"].startswith("del-")
    assert found[1]["delegation_id"] == ok_end["delegation_id"]
    assert bad_end["agent"] == "bad" and bad_end["status"] == "failed"
    assert bad_end["error_code"] == ErrorCode.REMOTE_FAILED


async def test_a_cancelled_run_ends_its_hanging_delegation_once(
    runs_log: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with Engine([spec(target)]) as engine, engine.open_run(run_id="run-c") as run:
        run.start_delegation(request())
        await trio.sleep(5)
        run.cancel("stop")
    found = lines(runs_log)
    assert events(found) == ["run.start", "delegation.start", "delegation.end", "run.end"]
    assert found[2]["status"] == "cancelled" and found[2]["duration_s"] == pytest.approx(5)
    assert found[2]["remote_cancel"] == "confirmed"
    assert found[3]["status"] == "cancelled" and found[3]["error_code"] is None


async def test_a_failed_run_names_its_error_code(runs_log: pytest.LogCaptureFixture) -> None:
    async with Engine([spec(ScriptedTarget())]) as engine:
        async with engine.open_run(run_id="run-f") as run:
            await run.fail("the model is gone", ErrorCode.AGENT_UNAVAILABLE)
        with pytest.raises(RuntimeError):
            async with engine.open_run(run_id="run-g"):
                raise RuntimeError("boom")
    found = lines(runs_log)
    assert events(found) == ["run.start", "run.end", "run.start", "run.end"]
    assert (found[1]["status"], found[1]["error_code"]) == ("failed", "agent_unavailable")
    assert (found[3]["status"], found[3]["error_code"]) == ("failed", "internal_error")


async def test_a_refused_delegation_has_its_start_and_end_too(
    runs_log: pytest.LogCaptureFixture,
) -> None:
    limits = EngineLimits(max_concurrent_per_run=1)
    target = ScriptedTarget(start=[[started(), "hang"]])
    engine = Engine([spec(target)], limits=limits)
    async with engine, engine.open_run(run_id="run-r") as run:
        run.start_delegation(request())
        refused = await run.delegate(request())
        unknown = await run.delegate(request("nobody"))
        run.cancel()
    found = lines(runs_log)
    ends = [line for line in found if line["event"] == "delegation.end"]
    starts = [line for line in found if line["event"] == "delegation.start"]
    assert sorted(d["delegation_id"] for d in starts) == sorted(d["delegation_id"] for d in ends)
    by_id = {line["delegation_id"]: line for line in ends}
    assert by_id[refused.delegation_id]["error_code"] == ErrorCode.CONCURRENCY_LIMIT
    assert by_id[unknown.delegation_id]["error_code"] == ErrorCode.AGENT_NOT_FOUND
    assert by_id[unknown.delegation_id]["duration_s"] == 0
    assert len(ends) == 3 and events(found).count("run.end") == 1


async def test_nothing_is_built_when_the_logger_is_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger=RUN_LOG.name)
    built: list[str] = []
    monkeypatch.setattr(_oplog, "_emit", lambda event, fields: built.append(event))
    target = ScriptedTarget(start=[[started(), finished("done")]])
    async with Engine([spec(target)]) as engine, engine.open_run() as run:
        await run.delegate(request())
    assert built == []
    caplog.set_level(logging.INFO, logger=RUN_LOG.name)
    async with Engine([spec(target)]) as engine, engine.open_run() as run:
        await run.delegate(request())
    assert built == ["run.start", "delegation.start", "delegation.end", "run.end"]


def test_the_readable_line_quotes_what_could_forge_a_field_or_a_line() -> None:
    fields = {"run_id": "run-1", "agent": 'x status=ok\nrun.end "', "duration_s": 1.5, "n": None}
    assert render_fields("delegation.end", fields) == (
        'delegation.end run=run-1 agent="x status=ok\\nrun.end \\"" duration=1.500s'
    )
