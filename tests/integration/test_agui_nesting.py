"""Nested subagents of a remote AG-UI agent, against real servers on 127.0.0.1.

Two remotes: `tools/peers/agui_app.py` (the official `ag-ui-protocol` encoder, its own process)
streaming subagents two levels deep and a subagent that pauses on an interrupt and is continued;
and this project's own bundled server (`web/`: the scripted parent delegating over MCP to the
in-process demo agents), served as the remote AG-UI agent of an outer engine: an engine run as a
remote for another engine, whose own subagents show up as subagents of the outer subagent. The
outer stream, encoded in every visibility mode as the server encodes it, must pass the Python
checker and the official verifier (@ag-ui/client, tests/agui_verify/verify.mjs). Cancelling the
outer delegation must stop the inner run and its delegations.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.agui import (
    MODES,
    AguiAgentConfig,
    AguiStreamEncoder,
    AguiTarget,
    check_frames,
    parse_sse,
)
from adapters.parents import ScriptedParent
from demo import demo_agents
from engine import (
    AgentSpec,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    InputRequiredMode,
    JournalEntry,
    Kind,
    Status,
)
from tests.helpers.node_packages import ensure_npm_packages, run_node_json_lines
from tests.helpers.peers import agui_app
from tests.helpers.runs import journal_so_far
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

VERIFY_DIR = Path(__file__).resolve().parents[1] / "agui_verify"
PARENT_CALL = "toolu_outer"


@pytest.fixture(scope="module")
def agui_base() -> Iterator[str]:
    with agui_app() as peer:
        yield peer.base_url


@pytest.fixture(scope="module")
def node() -> str:
    return ensure_npm_packages(VERIFY_DIR)


def agui_agent(url: str, key: str = "remote", **policy: Any) -> AgentSpec:
    return AgentSpec(
        key=key,
        display_name=f"AG-UI {key}",
        protocol="agui",
        target=AguiTarget(AguiAgentConfig(url=url)),
        policy=DelegationPolicy(**policy),
    )


def ask(objective: str, agent: str = "remote") -> DelegationRequest:
    return DelegationRequest(agent=agent, objective=objective, parent_tool_call_id=PARENT_CALL)


async def call(run: Any, request: DelegationRequest) -> Any:
    """The parent's own tool call around a delegation, as a parent agent streams it."""
    await run.emit(Kind.PARENT_TOOL_CALL_START, tool_call_id=PARENT_CALL, tool_name="delegate")
    await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=PARENT_CALL)
    result = await run.delegate(request)
    await run.emit(
        Kind.PARENT_TOOL_CALL_RESULT, tool_call_id=PARENT_CALL, result={"status": result.status}
    )
    return result


def streams(entries: list[JournalEntry], run_id: str) -> dict[str, list[Any]]:
    """The outer run's AG-UI stream in every mode (as the server writes it), checker-clean."""
    out = {}
    for mode in MODES:
        body = AguiStreamEncoder("thread", run_id, mode).feed_batch(entries)
        frames = parse_sse(body)
        violations = check_frames(frames)
        assert violations == [], (mode, [str(v) for v in violations])
        out[mode] = frames
    return out


def verify(node: str, tmp_path: Path, frames_by_mode: dict[str, list[Any]]) -> None:
    """Every stream through the official @ag-ui/client verifier."""
    paths = {}
    for mode, frames in frames_by_mode.items():
        text = "".join(
            (f"id: {cursor}\n" if cursor is not None else "")
            + f"data: {json.dumps(event, separators=(',', ':'))}\n\n"
            for cursor, event in frames
        )
        paths[mode] = tmp_path / f"{mode}.sse"
        paths[mode].write_text(text)
    results, _ = run_node_json_lines(
        node, VERIFY_DIR / "verify.mjs", [str(p) for p in paths.values()], timeout=60
    )
    by_source = {r["source"]: r for r in results}
    for mode, path in paths.items():
        result = by_source[str(path)]
        assert result["ok"], (mode, result["stage"], result["error"], result["event"])
        assert result["warnings"] == [], (mode, result["warnings"])


def events_of(frames: list[Any]) -> list[dict[str, Any]]:
    return [event for _, event in frames]


def announced(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    starts = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    ids = [e["subagentRunId"] for e in starts]
    assert len(ids) == len(set(ids)), ids  # announced once per run
    return {e["subagentRunId"]: e for e in starts}


# -- the official-encoder remote -------------------------------------------------------------------


async def test_remote_subagents_two_levels_deep_are_subagents_of_our_subagent(
    agui_base: str, node: str, tmp_path: Path
) -> None:
    agent = agui_agent(f"{agui_base}/agents/nested")
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await call(
                run,
                DelegationRequest(
                    agent="remote", objective="Plan it.", parent_tool_call_id=PARENT_CALL
                ),
            )
        entries = await journal_so_far(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    assert result.summary == "planned"
    # The nested subagents' text is theirs, not the delegation's result.
    assert [m.text for m in result.messages] == ["Planned: two tasks, two days."]
    did = result.delegation_id
    frames = streams(entries, run.run_id)
    verify(node, tmp_path, frames)

    attributed = events_of(frames["attributed"])
    subagents = announced(attributed)
    planner, estimator = f"{did}/planner-1", f"{did}/estimator-1"
    assert set(subagents) == {did, planner, estimator}
    assert subagents[did]["parentToolCallId"] == PARENT_CALL
    assert subagents[planner]["parentSubagentRunId"] == did
    assert subagents[planner]["parentToolCallId"] == f"{did}:task-1"
    assert subagents[planner]["description"] == "Plans the work"
    assert subagents[estimator]["parentSubagentRunId"] == planner
    texts = {}
    for event in attributed:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["subagentRunId"]] = texts.get(event["subagentRunId"], "") + event["delta"]
    assert texts == {
        planner: "Two tasks: scope, then risks.",
        estimator: "About a day each.",
        did: "Planned: two tasks, two days.",
    }
    tagged = {e.get("subagentRunId") for e in attributed if e["type"].startswith("REASONING")}
    assert tagged == {estimator}
    order = [(e["type"], e.get("subagentRunId")) for e in attributed]
    ends = [sid for kind, sid in order if kind == "SUBAGENT_FINISHED"]
    assert ends == [estimator, planner, did]  # deepest first, the delegation last

    inline = events_of(frames["inline"])
    assert not any(e["type"].startswith("SUBAGENT_") or "subagentRunId" in e for e in inline)
    inline_text = "".join(e["delta"] for e in inline if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "About a day each." in inline_text and "Two tasks" in inline_text
    hidden = events_of(frames["hidden"])
    assert not any(e["type"].startswith(("SUBAGENT_", "TEXT_", "REASONING")) for e in hidden)
    custom = events_of(frames["custom"])
    nested = [e["value"] for e in custom if e.get("name") == "subagent.nested.started"]
    assert [(v["nestedId"], v.get("nestedParentId")) for v in nested] == [
        (planner, None),
        (estimator, planner),
    ]


async def test_the_policy_folds_what_is_deeper_and_says_so(agui_base: str) -> None:
    agent = agui_agent(f"{agui_base}/agents/nested", max_nesting_depth=1)
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await call(
                run,
                DelegationRequest(
                    agent="remote", objective="Plan it.", parent_tool_call_id=PARENT_CALL
                ),
            )
        entries = await journal_so_far(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    did = result.delegation_id
    attributed = events_of(streams(entries, run.run_id)["attributed"])
    assert set(announced(attributed)) == {did, f"{did}/planner-1"}
    (marker,) = [e for e in attributed if e.get("name") == "subagent.nested.folded"]
    assert marker["subagentRunId"] == f"{did}/planner-1"
    assert marker["value"]["remoteSubagentId"] == "estimator-1"
    estimator_text = next(
        e for e in attributed if e.get("delta") == "About a day each."
    )  # folded into the planner
    assert estimator_text["subagentRunId"] == f"{did}/planner-1"
    assert (result.metadata or {})["nested_folded"] == 1


async def test_a_suspended_remote_subagent_continues_under_the_same_id(
    agui_base: str, node: str, tmp_path: Path
) -> None:
    agent = agui_agent(
        f"{agui_base}/agents/nested_interrupt", input_required=InputRequiredMode.SURFACE
    )
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            await run.emit(
                Kind.PARENT_TOOL_CALL_START, tool_call_id=PARENT_CALL, tool_name="delegate"
            )
            await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=PARENT_CALL)
            handle = run.start_delegation(
                DelegationRequest(
                    agent="remote", objective="Clean up.", parent_tool_call_id=PARENT_CALL
                )
            )
            async with run.events() as events:
                async for entry in events:
                    if entry.event.kind == Kind.INPUT_REQUIRED:
                        break
            run.answer(handle.delegation_id, text="yes")
            result = await handle.wait()
            await run.emit(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id=PARENT_CALL, result="ok")
        entries = await journal_so_far(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    did = result.delegation_id
    deleter = f"{did}/deleter-1"
    nested = [e.event for e in entries if e.event.nested_id == deleter]
    assert [e.kind for e in nested].count(Kind.NESTED_STARTED) == 1
    assert [e.kind for e in nested if e.kind in Kind.NESTED_TERMINALS] == [Kind.NESTED_FINISHED]
    assert [e.status for e in nested if e.kind == Kind.STATUS] == ["suspended", "working"]
    frames = streams(entries, run.run_id)
    verify(node, tmp_path, frames)
    attributed = events_of(frames["attributed"])
    assert set(announced(attributed)) == {did, deleter}
    said = "".join(
        e["delta"] for e in attributed if e.get("subagentRunId") == deleter and "delta" in e
    )
    assert said == "This cannot be undone. May I?Deleted."


# -- an engine run as a remote for another engine --------------------------------------------------


@asynccontextmanager
async def inner_server(pause: float = 0.0) -> AsyncIterator[tuple[str, Any]]:
    """This project's bundled server with the scripted parent and the in-process demo agents."""
    config = parse_config('[store]\nkind = "memory"\n', "inner.toml")
    async with (
        open_host(config, demo_agents(pause=pause), ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base, host


async def test_an_engine_as_the_remote_of_another_engine_nests_its_subagents(
    node: str, tmp_path: Path
) -> None:
    async with inner_server() as (inner, inner_host):
        agent = agui_agent(f"{inner}/agui", key="inner")
        async with Engine([agent]) as eng:
            async with eng.open_run() as run:
                result = await call(
                    run,
                    DelegationRequest(
                        agent="inner",
                        objective="How does Trio stream events?",
                        parent_tool_call_id=PARENT_CALL,
                    ),
                )
            entries = await journal_so_far(eng, run.run_id)
        await agent.target.aclose()  # type: ignore[attr-defined]
        assert result.remote_task_id is not None
        # The inner server runs it under an id of its own; the AG-UI run id names it there.
        (inner_run,) = [hosted.run_id for hosted in inner_host.runs_named(result.remote_task_id)]
        inner_journal = await journal_so_far(inner_host.engine, inner_run)
    assert result.status == Status.COMPLETED, result
    assert "research: completed" in (result.summary or "")
    did = result.delegation_id
    frames = streams(entries, run.run_id)
    verify(node, tmp_path, frames)
    attributed = events_of(frames["attributed"])
    subagents = announced(attributed)
    # The inner run's own delegations, under the outer subagent, each under its tool call.
    inner_delegations = {
        e.event.agent_key: e.event.delegation_id
        for e in inner_journal
        if e.event.kind == Kind.STARTED
    }
    assert set(inner_delegations) == {"research", "review"}
    for key, inner_did in inner_delegations.items():
        sid = f"{did}/{inner_did}"
        assert subagents[sid]["parentSubagentRunId"] == did
        assert (
            subagents[sid]["name"] == {"research": "Research Agent", "review": "Review Agent"}[key]
        )
        call_id = subagents[sid]["parentToolCallId"]
        assert call_id.startswith(f"{did}:")
        starts = [e for e in attributed if e.get("toolCallId") == call_id]
        assert starts[0]["type"] == "TOOL_CALL_START" and starts[0]["subagentRunId"] == did
    research = f"{did}/{inner_delegations['research']}"
    research_text = "".join(
        e["delta"]
        for e in attributed
        if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == research
    )
    assert (
        research_text
        == "Trio nurseries give structured cancellation; memory channels carry events."
    )
    assert any(
        e["type"] == "TOOL_CALL_START" and e.get("subagentRunId") == research for e in attributed
    )  # the research agent's own `search` call, two levels down
    assert subagents[did]["parentToolCallId"] == PARENT_CALL
    ends = [e["subagentRunId"] for e in attributed if e["type"] == "SUBAGENT_FINISHED"]
    assert ends[-1] == did and len(ends) == 3


async def test_cancelling_the_outer_delegation_stops_the_inner_run() -> None:
    async with inner_server(pause=0.2) as (inner, inner_host):
        agent = agui_agent(f"{inner}/agui", key="inner")
        async with Engine([agent]) as eng, eng.open_run() as run:
            handle = run.start_delegation(
                DelegationRequest(agent="inner", objective="How does Trio stream events?")
            )
            async with run.events() as events:
                async for entry in events:
                    if entry.event.nested_id and entry.event.kind == Kind.TEXT_DELTA:
                        break  # an inner subagent is streaming
            handle.cancel("user pressed stop")
            result = await handle.wait()
        await agent.target.aclose()  # type: ignore[attr-defined]
        assert result.status == Status.CANCELLED
        assert result.remote_task_id is not None
        (inner_run,) = [hosted.run_id for hosted in inner_host.runs_named(result.remote_task_id)]
        inner = inner_host.engine.journal(inner_run)
        assert inner is not None
        inner_events = []
        with trio.fail_after(10):
            async with inner.subscribe() as sub:
                async for entry in sub:
                    inner_events.append(entry.event)
                    if entry.event.kind in Kind.RUN_TERMINALS:
                        break
    assert inner_events[-1].kind == Kind.RUN_CANCELLED
    terminals = {e.agent_key: e.kind for e in inner_events if e.kind in Kind.DELEGATION_TERMINALS}
    # Research streams for ~2 s: it was still working and is cancelled with the run; review may
    # have finished in the moment between its first words and the cancel.
    assert terminals["research"] == Kind.CANCELLED, terminals
    assert set(terminals.values()) <= {Kind.CANCELLED, Kind.FINISHED}
