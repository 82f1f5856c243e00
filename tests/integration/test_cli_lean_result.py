"""The real Claude Code as a run's parent reads a long delegation result the lean way.

The pinned `claude` of tests/cli_agents talks to the scripted model of
tools/peers/scripted_model.py on loopback; the subagent answers with a text three times the
agent's `max_result_chars` and its summary repeats that answer, as many remotes do. What the
model is sent is what the scripted model recorded: the delegation's tool result carries the
answer once, within the budget, and names where the rest is; the model then calls
`read_delegation_output` (`READ_REST: yes`) and its next request carries exactly the next page
of the answer. Claude Code hands the model an MCP tool result's `structuredContent` as JSON
text when there is one (not its text content), so that is what is asserted on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import check_frames, parse_sse
from adapters.inprocess import LocalTask
from engine import DelegationPolicy
from tests.helpers.agents import local_agent
from tests.helpers.peers import MODEL_KEY_ENV, ScriptedModel
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

BUDGET = 4_000
#: 12,000-odd characters of distinct words: past the budget three times, and past the summary
#: bound (`max_summary_chars`, 4,000), so a result that kept less than the whole would show.
ANSWER = " ".join(f"finding-{i:04d}" for i in range(1_000))
HEAD = ANSWER[:40]


async def _long_answer(task: LocalTask) -> str:
    await task.say(*(ANSWER[i : i + 1_000] for i in range(0, len(ANSWER), 1_000)))
    return ANSWER  # the summary repeats the answer


def _host_toml(bin_dir: Path, model_url: str) -> str:
    return (
        "[parent]\n"
        'kind = "claude-code"\n'
        f'binary = "{bin_dir / "claude"}"\n'
        f'model_endpoint = "{model_url}"\n'
        'model = "claude-scripted"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "tool_timeout = 120\n"
    )


def _prompt() -> dict[str, Any]:
    directive = json.dumps({"agent": "research", "objective": "List every finding."})
    text = f"Please ask research.\nDELEGATE: {directive}\nREAD_REST: yes"
    return {"threadId": "t-1", "messages": [{"id": "u1", "role": "user", "content": text}]}


def _tool_result(body: dict[str, Any], tool_use_id: str) -> str | None:
    """The text a model request carries as the result of `tool_use_id`, if it carries one."""
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
                inner = block.get("content")
                if isinstance(inner, str):
                    return inner
                return "".join(part.get("text", "") for part in inner or [])
    return None


def _first_carrying(requests: list[dict[str, Any]], tool_use_id: str) -> str:
    for request in requests:
        found = _tool_result(request["body"], tool_use_id)
        if found is not None:
            return found
    raise AssertionError(f"no model request carried the result of {tool_use_id}")


def _call_id(requests: list[dict[str, Any]], tool: str) -> str:
    [call_id] = [
        r["reply"]["tool_call_id"]
        for r in requests
        if (r.get("reply") or {}).get("kind") == "tool_call" and tool in r["reply"]["tool_name"]
    ]
    return str(call_id)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLI inherits HOME: a throwaway one, and the model key the config names."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


async def test_claude_reads_a_long_answer_once_within_budget_then_the_next_page_exactly(
    cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    agent = local_agent("research", _long_answer, policy=DelegationPolicy(max_result_chars=BUDGET))
    config = parse_config(_host_toml(cli_bin, model.base_url), "host.toml")
    async with (
        open_host(config, [agent], config.parent_factory()) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        with trio.fail_after(120):
            response = await http.post(f"{base}/agui", json=_prompt())
    assert response.status_code == 200
    requests = model.model_requests()

    # The delegation's result, as the model got it: the structured view as JSON.
    delegate_id = _call_id(requests, "delegate_to_agent")
    sent = _first_carrying(requests, delegate_id)
    assert len(sent) <= BUDGET
    assert sent.count(HEAD) == 1  # said once, though the summary repeats the answer
    view = json.loads(sent)
    output = view["output"]
    assert output["truncated"] and output["total_chars"] == len(ANSWER)
    assert ANSWER.startswith(output["text"]) and output["text"].startswith(HEAD)
    offset = output["next_offset"]
    assert offset == len(output["text"])
    assert output["tool"] == "read_delegation_output"
    assert output["uri"].endswith(f"/delegations/{view['delegation_id']}/output")

    # The model asked for the rest; its next request carries exactly the next page.
    read_id = _call_id(requests, "read_delegation_output")
    [read] = [r["reply"] for r in requests if r["reply"].get("tool_call_id") == read_id]
    assert read["arguments"] == {"delegation_id": view["delegation_id"], "offset": offset}
    page = json.loads(_first_carrying(requests, read_id))
    assert page["text"] == ANSWER[offset : offset + BUDGET]
    assert (page["offset"], page["total_chars"]) == (offset, len(ANSWER))
    assert page["next_offset"] == min(offset + BUDGET, len(ANSWER))

    # The page shows the call's result bounded too: what the parent got, not the whole output.
    frames = parse_sse(response.content)
    assert check_frames(frames) == [], [str(v) for v in check_frames(frames)]
    results = {e["toolCallId"]: e["content"] for _, e in frames if e["type"] == "TOOL_CALL_RESULT"}
    shown = [content for content in results.values() if HEAD in content]
    assert shown and all(len(content) <= 2 * BUDGET for content in shown)
