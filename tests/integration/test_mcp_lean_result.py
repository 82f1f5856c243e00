"""Lean results over MCP, with the official mcp client: the answer once, within the agent's
budget, and the rest read back through `read_delegation_output` and `resources/read`; another
run's delegations and made-up ids are refused with typed errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from adapters.inprocess import LocalTask
from adapters.mcp import output_uri
from engine import DelegationPolicy, ErrorCode, delegation_output
from tests.helpers.agents import local_agent
from tests.helpers.mcp_endpoint import call_args, mcp_session, open_endpoint_run

BUDGET = 4000
PARTS = [f"part {n}: " + " ".join(f"w{n}.{i}" for i in range(500)) for n in range(3)]


async def _long_answer(task: LocalTask) -> str:
    for part in PARTS:
        await task.say(part)
    return PARTS[-1]  # the summary repeats the final message, as many remotes do


def _chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


async def test_a_long_answer_comes_once_within_budget_and_the_rest_is_read_back() -> None:
    agent = local_agent("research", _long_answer, policy=DelegationPolicy(max_result_chars=BUDGET))
    async with open_endpoint_run([agent]) as (_, eng, run), mcp_session(run.endpoint) as session:
        result = await session.call_tool("delegate_to_agent", call_args())
        text = result.content[0].text  # type: ignore[union-attr]
        structured = result.structured_content
        assert structured is not None and not result.is_error
        delegation_id = structured["delegation_id"]
        whole = delegation_output(run.result(delegation_id))  # type: ignore[arg-type]
        assert len(text) <= BUDGET and _chars(structured) <= BUDGET
        assert text.count(PARTS[0][:40]) == 1  # said once, though summary and message repeat it
        output = structured["output"]
        assert output["truncated"] and output["total_chars"] == len(whole)
        offset = output["next_offset"]
        assert f"offset={offset}" in text and output["uri"] in text
        assert output["uri"] == output_uri(run.run_id, delegation_id)

        # The tool, page by page, gives exactly the missing text, each page within budget.
        rest, pages = "", 0
        while offset is not None:
            page = await session.call_tool(
                "read_delegation_output", {"delegation_id": delegation_id, "offset": offset}
            )
            assert not page.is_error and page.structured_content is not None
            assert len(page.content[0].text) <= BUDGET  # type: ignore[union-attr]
            rest += page.content[0].text  # type: ignore[union-attr]
            offset = page.structured_content["next_offset"]
            pages += 1
        assert output["text"] + rest == whole and pages >= 2

        # The resource gives the same, bounded the same way.
        read = await session.read_resource(f"{output['uri']}?offset={output['next_offset']}")
        first = read.contents[0]
        assert first.text == rest[:BUDGET]  # type: ignore[union-attr]
        templates = await session.list_resource_templates()
        assert templates.resource_templates[0].uri_template.startswith("subagent://runs/")

        # Unknown ids and another run's delegations are refused the same typed way.
        async with eng.open_run() as other, mcp_session(other.endpoint) as other_session:
            foreign = await other_session.call_tool(
                "read_delegation_output", {"delegation_id": delegation_id}
            )
            with pytest.raises(MCPError) as refused:
                await other_session.read_resource(output["uri"])
        assert foreign.is_error
        assert foreign.structured_content["error"]["code"] == ErrorCode.DELEGATION_NOT_FOUND  # type: ignore[index]
        assert refused.value.error.data == {"code": ErrorCode.DELEGATION_NOT_FOUND}
        unknown = await session.call_tool("read_delegation_output", {"delegation_id": "del-nope"})
        assert unknown.structured_content["error"]["code"] == ErrorCode.DELEGATION_NOT_FOUND  # type: ignore[index]
        past = await session.call_tool(
            "read_delegation_output", {"delegation_id": delegation_id, "offset": len(whole) + 1}
        )
        assert past.structured_content["error"]["code"] == ErrorCode.INVALID_INPUT  # type: ignore[index]
        with pytest.raises(MCPError) as missing:
            await session.read_resource(output_uri(run.run_id, "del-nope"))
        assert missing.value.error.data["code"] == ErrorCode.DELEGATION_NOT_FOUND


async def test_a_short_answer_is_whole_and_names_no_reference() -> None:
    async with open_endpoint_run([local_agent()]) as (_, _, run), mcp_session(run.endpoint) as s:
        result = await s.call_tool("delegate_to_agent", call_args())
    assert result.structured_content is not None
    output = result.structured_content["output"]
    assert not output["truncated"] and output["next_offset"] is None
    assert "truncated" not in result.content[0].text  # type: ignore[union-attr]
