"""The main job until the web server lands: a scripted parent and two in-process subagents.

It opens one run on the embedded defaults (no network, no API keys), lets a scripted parent say
something, call `delegate_to_agent` twice at once (a researcher and a reviewer, both in-process
agents), use their results and answer, and prints the run's ordered event stream as it happens:
one line per journal entry (or JSON lines with `--json`). It composes the engine and the
in-process adapter; it holds no rules of its own.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

import trio

import engine
from adapters.inprocess import InProcessTarget, LocalTask
from engine import AgentSpec, DelegationRequest, Engine, JournalEntry, Kind, Run

__all__ = ["demo_agents", "run_demo", "scripted_parent"]


def demo_agents(pause: float = 0.05) -> list[AgentSpec]:
    """The two embedded demo subagents."""

    async def research(task: LocalTask) -> str:
        await task.status("working", "Looking for sources")
        await task.think(
            "The objective asks for ", "streaming API shapes; ", "check the docs first."
        )
        await task.tool_call("search", {"query": task.objective}, {"hits": 3})
        words = [
            "Trio ",
            "nurseries ",
            "give ",
            "structured ",
            "cancellation; ",
            "memory ",
            "channels ",
            "carry ",
            "events.",
        ]
        message = await task.text_start()
        for word in words:
            await task.text_delta(word, message_id=message)
            await trio.sleep(pause)
        await task.text_end(message)
        await task.artifact("notes.md", data="# Notes\n- nurseries\n", mime_type="text/markdown")
        return "Trio nurseries give structured cancellation; channels carry events."

    async def review(task: LocalTask) -> str:
        await task.status("working", "Reading the design")
        await trio.sleep(pause)
        await task.say("The design ", "is sound; ", "add a replay window.")
        await task.status("working", "Writing the verdict")
        await trio.sleep(pause)
        return "Approve, with a replay window."

    return [
        AgentSpec(
            key="research",
            display_name="Research Agent",
            description="Finds and summarizes sources.",
            target=InProcessTarget(research),
        ),
        AgentSpec(
            key="review",
            display_name="Review Agent",
            description="Reviews a design and gives a verdict.",
            target=InProcessTarget(review),
        ),
    ]


async def _say(run: Run, message_id: str, *chunks: str) -> None:
    await run.emit(Kind.PARENT_TEXT_START, message_id=message_id, role="assistant")
    for chunk in chunks:
        await run.emit(Kind.PARENT_TEXT_DELTA, message_id=message_id, delta=chunk)
    await run.emit(Kind.PARENT_TEXT_END, message_id=message_id)


async def scripted_parent(run: Run) -> list[engine.DelegationResult]:
    """Say, call two delegations concurrently as tool calls, use the results, answer."""
    await _say(run, "parent-1", "I'll ask two specialists ", "at the same time.")
    calls = [
        (
            "call-research",
            DelegationRequest(agent="research", objective="How does Trio stream events?"),
        ),
        ("call-review", DelegationRequest(agent="review", objective="Review the engine design.")),
    ]
    handles = []
    for call_id, request in calls:
        args = {"agent": request.agent, "objective": request.objective}
        await run.emit(
            Kind.PARENT_TOOL_CALL_START, tool_call_id=call_id, tool_name="delegate_to_agent"
        )
        await run.emit(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call_id, args=args)
        await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=call_id)
        request = DelegationRequest(
            agent=request.agent, objective=request.objective, parent_tool_call_id=call_id
        )
        handles.append((call_id, run.start_delegation(request)))
    results = []
    for call_id, handle in handles:
        result = await handle.wait()
        results.append(result)
        await run.emit(
            Kind.PARENT_TOOL_CALL_RESULT,
            tool_call_id=call_id,
            result=engine.to_jsonable(result),
        )
    summaries = "; ".join(f"{r.agent}: {r.summary}" for r in results)
    await _say(run, "parent-2", "Both specialists answered. ", summaries)
    return results


def _describe(entry: JournalEntry) -> str:
    event = entry.event
    who = f"[{event.agent_key}]" if event.agent_key else "[parent]"
    status = event.status and (f"{event.status}: {event.text}" if event.text else event.status)
    if isinstance(event.result, dict) and "delegation_id" in event.result:
        status = f"{event.result.get('status')} ({event.result['delegation_id']})"
    detail = (
        event.delta
        or status
        or (event.error and f"{event.error.code}: {event.error.message}")
        or event.text
        or event.tool_name
        or (event.artifact and f"{event.artifact.name} -> {event.artifact.uri}")
        or (event.args and json.dumps(event.args))
        or ""
    )
    call = f" <{event.parent_tool_call_id}>" if event.parent_tool_call_id else ""
    return f"{entry.cursor:>4}  {event.kind:<26} {who:<11}{call} {detail}".rstrip()


async def _print_events(run: Run, out: TextIO, as_json: bool) -> None:
    async with run.events() as events:
        async for entry in events:
            if as_json:
                print(
                    json.dumps({"cursor": entry.cursor, "event": engine.to_jsonable(entry.event)}),
                    file=out,
                )
            else:
                print(_describe(entry), file=out)
            out.flush()


async def _demo(as_json: bool, fast: bool, out: TextIO) -> None:
    async with (
        Engine(demo_agents(pause=0 if fast else 0.05)) as eng,
        trio.open_nursery() as nursery,
        eng.open_run() as run,
    ):
        nursery.start_soon(_print_events, run, out, as_json)
        await scripted_parent(run)


def run_demo(*, as_json: bool = False, fast: bool = False, out: TextIO | None = None) -> int:
    trio.run(_demo, as_json, fast, out or sys.stdout)
    return 0
