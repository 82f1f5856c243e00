"""The demo's in-process agents and its in-process parent, with no model and no API key.

`demo_agents()` are the two subagents `subagent-engine serve` offers on embedded defaults and
`demo --print` delegates to (`research` streams thinking, a tool call, text and an artifact;
`review` streams statuses and text); `scripted_parent` is `demo --print`'s parent, which calls
both at once as tool calls and answers from their results.
"""

from __future__ import annotations

import trio

import engine
from adapters.inprocess import InProcessTarget, LocalTask
from engine import AgentSpec, DelegationRequest, Kind, Run

__all__ = ["demo_agents", "scripted_parent"]


def demo_agents(pause: float = 0.05) -> list[AgentSpec]:
    """The two embedded demo subagents, both read-only (they change nothing)."""

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
            read_only=True,  # it only reads and answers: parents may run both at once
        ),
        AgentSpec(
            key="review",
            display_name="Review Agent",
            description="Reviews a design and gives a verdict.",
            target=InProcessTarget(review),
            read_only=True,  # it only reads and answers: parents may run both at once
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
