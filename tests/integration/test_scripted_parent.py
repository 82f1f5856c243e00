"""The built-in scripted parent drives a run through the real MCP endpoint (no model, no keys)."""

from __future__ import annotations

import pytest

from adapters.mcp import DelegationEndpoint
from adapters.parents import Answer, Delegate, Say, ScriptedParent
from demo import demo_agents
from engine import Engine, Kind, Status


async def test_default_script_delegates_twice_over_mcp_and_answers() -> None:
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(demo_agents(pause=0), endpoints=endpoint) as eng,
    ):
        async with eng.open_run() as run:
            results = await ScriptedParent().run(run, "How does Trio stream events?")
        journal = eng.journal(run.run_id)
        assert journal is not None
        events = [e.event for e in await journal.store.read_after(0, journal.head)]
    assert [r["status"] for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert [r["agent"] for r in results] == ["research", "review"]
    calls = [e for e in events if e.kind == Kind.PARENT_TOOL_CALL_START]
    assert [c.tool_name for c in calls] == ["delegate_to_agent"] * 2
    # Every subagent event sits under the parent's tool call that started it (strong correlation).
    by_call = {r["delegation_id"]: r["parent_tool_call_id"] for r in results}
    assert sorted(by_call.values()) == sorted(c.tool_call_id for c in calls)
    for event in events:
        if event.delegation_id:
            assert event.parent_tool_call_id == by_call[event.delegation_id]
    texts = "".join(e.delta or "" for e in events if e.kind == Kind.PARENT_TEXT_DELTA)
    assert "You asked: How does Trio stream events?" in texts
    assert "- research: completed: Trio nurseries" in texts
    kinds = [e.kind for e in events]
    assert kinds.index(Kind.PARENT_REASONING_START) < kinds.index(Kind.PARENT_TOOL_CALL_START)
    results_at = [i for i, e in enumerate(events) if e.kind == Kind.PARENT_TOOL_CALL_RESULT]
    assert len(results_at) == 2
    assert max(i for i, e in enumerate(events) if e.kind == Kind.FINISHED) < max(results_at)


async def test_a_refused_call_becomes_a_failed_result_the_parent_reports() -> None:
    script = (
        Say(("Trying an agent that is not there.",)),
        Delegate(({"agent": "nobody", "objective": "x"},)),
        Answer("Result:"),
    )
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(demo_agents(pause=0), endpoints=endpoint) as eng,
        eng.open_run() as run,
    ):
        results = await ScriptedParent(script).run(run, "")
    assert results[0]["status"] == Status.FAILED
    assert results[0]["error"]["code"] == "agent_not_found"


async def test_without_an_endpoint_the_parent_says_what_is_missing() -> None:
    async with Engine(demo_agents(pause=0)) as eng, eng.open_run() as run:
        with pytest.raises(RuntimeError, match="endpoint provider"):
            await ScriptedParent().run(run, "x")
