"""MCP tool calls counted for the metrics: by the tool's name when the endpoint lists it, and as
`other` for any name a model invents (a label never grows with input). The official mcp client
calls a real endpoint on 127.0.0.1; the engine's reading is what `/metrics` exports
(`subagent_engine_mcp_tool_calls_total{tool}`)."""

from __future__ import annotations

from adapters.inprocess import InProcessTarget, LocalTask
from engine import AgentSpec
from tests.helpers.mcp_endpoint import call_args, mcp_session, open_endpoint_run


async def _done(task: LocalTask) -> str:
    return "done"


async def test_tool_calls_are_counted_by_listed_name_and_invented_names_as_other() -> None:
    agents = [
        AgentSpec(key="research", target=InProcessTarget(_done)),
        AgentSpec(key="review", target=InProcessTarget(_done)),
    ]
    async with (
        open_endpoint_run(agents, shortcuts={"review"}) as (_, eng, run),
        mcp_session(run.endpoint) as session,
    ):
        await session.call_tool("delegate_to_agent", call_args("research"))
        await session.call_tool("delegate_to_review", {"objective": "look"})
        await session.call_tool("delegate_to_agent", call_args("review"))
        for invented in ("delegate_to_research", "rm -rf /", "x" * 300):
            refused = await session.call_tool(invented, {})
            assert refused.is_error
        calls = eng.statistics().tool_calls
    assert calls == {"delegate_to_agent": 2, "delegate_to_review": 1, "other": 3}
