"""Which tools a run's endpoint lists, as the official mcp client sees them.

No delegation tool without agents (a model offered one calls it only to be refused), and
`readOnlyHint` exactly when the host declared every agent a tool reaches read-only: parent CLIs
read it to decide whether two calls of one turn may run at the same time.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import ASK_TOOL
from engine import AgentSpec
from tests.helpers.mcp_endpoint import mcp_session, open_endpoint_run


async def _answer(task: LocalTask) -> str:
    return "ok"


def _agent(key: str, *, read_only: bool) -> AgentSpec:
    return AgentSpec(key=key, target=InProcessTarget(_answer), read_only=read_only)


class _Requester:
    async def ask(self, run: Any, question: str) -> str:
        return "yes"


async def _tools(agents: list[AgentSpec], **settings: Any) -> dict[str, Any]:
    async with (
        open_endpoint_run(agents, **settings) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        return {tool.name: tool for tool in (await session.list_tools()).tools}


async def test_without_agents_nothing_is_listed() -> None:
    assert await _tools([], shortcuts={"research"}) == {}


async def test_without_agents_a_requester_still_gets_ask_requester() -> None:
    tools = await _tools([], shortcuts={"research"}, requester=_Requester())
    assert list(tools) == [ASK_TOOL]


@pytest.mark.parametrize(("review_read_only", "generic"), [(True, True), (False, False)])
async def test_read_only_hints_follow_the_agents(review_read_only: bool, generic: bool) -> None:
    agents = [_agent("research", read_only=True), _agent("review", read_only=review_read_only)]
    tools = await _tools(agents, shortcuts={"research", "review"})
    assert list(tools) == [
        "delegate_to_agent",
        "delegate_to_research",
        "delegate_to_review",
        "read_delegation_output",
    ]
    assert tools["delegate_to_agent"].annotations.read_only_hint is generic
    assert tools["read_delegation_output"].annotations.read_only_hint is True
    assert tools["delegate_to_research"].annotations.read_only_hint is True
    assert tools["delegate_to_review"].annotations.read_only_hint is review_read_only
