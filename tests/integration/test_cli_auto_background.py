"""A delegation longer than Claude Code's auto-background threshold, with the real binary.

Claude Code (2.1.332) moves an MCP call that runs longer than
`CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS` to the background when its environment sets
`CLAUDE_AUTO_BACKGROUND_TASKS` (under `-p` with stdin closed it never does otherwise). Here a
host opts into that, with a 2 s threshold:

- by default the engine hands Claude a threshold of 0 (never), so a 4 s delegation stays a
  plain call: its result is the call's `tool_result` and Claude's answer quotes it;
- with `auto_background_ms=2000` Claude backgrounds the call (a `task_started` system line, a
  placeholder `tool_result`, a turn that ends without the result); the engine does not take that
  for a cancel: the delegation goes on, and when it finishes (released once the viewer saw the
  call backgrounded) Claude gets its result in a follow-up turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ClaudeCodeParent
from adapters.parents._claude_code import ClaudeCodeConfig
from engine import AgentSpec
from tests.helpers.peers import MODEL_KEY_ENV, ScriptedModel
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

pytestmark = pytest.mark.slow

THRESHOLD_MS = 2000
#: What the host sets to opt into Claude's background tasks, threshold included.
OPT_IN = {"CLAUDE_AUTO_BACKGROUND_TASKS": "1", "CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS": "2000"}
SUMMARY = "Summary: the slow answer"


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


async def run_claude(
    config: ClaudeCodeConfig, delegation: Any, *, on_event: Any = None
) -> list[dict[str, Any]]:
    """One run with Claude Code as the parent and `delegation` as the `research` agent: the
    viewer's AG-UI events (each handed to `on_event` as it arrives)."""
    host_config = parse_config('[parent]\nkind = "scripted"\n', "host.toml")
    agents = [AgentSpec(key="research", target=InProcessTarget(delegation))]
    text = "DELEGATE: " + json.dumps({"agent": "research", "objective": "Take a while."})
    body = {"threadId": "t-1", "messages": [{"id": "u1", "role": "user", "content": text}]}
    async with (
        open_host(host_config, agents, lambda: ClaudeCodeParent(config)) as (host, _),
        serve_app(create_app(host, host_config, default_encoder_factory())) as base,
        httpx.AsyncClient(timeout=60) as http,
    ):
        with trio.fail_after(60):
            async with http.stream("POST", f"{base}/agui", json=body) as response:
                buffer, seen = b"", 0
                async for chunk in response.aiter_bytes():
                    buffer += chunk
                    complete = parse_sse(buffer[: buffer.rfind(b"\n\n") + 2])
                    for _, event in complete[seen:]:
                        if on_event is not None:
                            on_event(event)
                    seen = len(complete)
    frames = parse_sse(buffer)
    assert check_frames(frames) == []
    return [event for _, event in frames]


def claude_config(model: ScriptedModel, cli_bin: Path, **options: Any) -> ClaudeCodeConfig:
    return ClaudeCodeConfig(
        binary=str(cli_bin / "claude"),
        base_url=model.base_url,
        model="claude-scripted",
        api_key_env=MODEL_KEY_ENV,
        tool_timeout=60,
        env=OPT_IN,
        **options,
    )


def system_lines(events: list[dict[str, Any]], subtype: str) -> list[dict[str, Any]]:
    return [
        e["value"]
        for e in events
        if e.get("name") == "claude.system" and e["value"].get("subtype") == subtype
    ]


def the_call(events: list[dict[str, Any]]) -> dict[str, Any]:
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START" and "subagentRunId" not in e]
    return call


async def test_by_default_a_long_delegation_stays_a_plain_call_with_its_result(
    cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    async def longer_than_the_threshold(task: LocalTask) -> str:
        await trio.sleep(2 * THRESHOLD_MS / 1000)  # the delegation's length is what is tested
        return SUMMARY

    events = await run_claude(claude_config(model, cli_bin), longer_than_the_threshold)
    assert system_lines(events, "task_started") == []  # never moved to the background
    call = the_call(events)
    [finished] = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert finished["outcome"] == {"type": "success"}
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == call["toolCallId"]
    assert SUMMARY in result["content"] and "moved to the background" not in result["content"]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert SUMMARY.removeprefix("Summary: ") in events[-1]["result"]  # Claude quoted the result


async def test_a_backgrounded_delegation_goes_on_and_its_result_reaches_claude_later(
    cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    backgrounded = trio.Event()
    cancelled: list[bool] = []

    async def until_backgrounded(task: LocalTask) -> str:
        try:
            await backgrounded.wait()
        except trio.Cancelled:  # pragma: no cover - the failure this test looks for
            cancelled.append(True)
            raise
        return SUMMARY

    def watch(event: dict[str, Any]) -> None:
        value = event.get("value") or {}
        if event.get("name") == "claude.system" and value.get("subtype") == "task_started":
            backgrounded.set()

    config = claude_config(model, cli_bin, auto_background_ms=THRESHOLD_MS)
    events = await run_claude(config, until_backgrounded, on_event=watch)
    call = the_call(events)
    [started] = system_lines(events, "task_started")
    assert started["tool_use_id"] == call["toolCallId"] and started["task_type"] == "mcp_task"
    assert not cancelled
    [finished] = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert finished["outcome"] == {"type": "success"} and finished["result"] == SUMMARY
    # The call's own result is Claude's placeholder; the real one comes as a notification.
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "moved to the background" in result["content"]
    [notified] = system_lines(events, "task_notification")
    assert notified["status"] == "completed" and notified["tool_use_id"] == call["toolCallId"]
    # A follow-up turn: two result lines, and the last model request carries the summary.
    assert len([e for e in events if e.get("name") == "claude.result"]) == 2
    last = [r for r in model.requests() if r["api"] is not None][-1]
    assert SUMMARY in json.dumps(last["body"]["messages"][-1])
    assert events[-1]["type"] == "RUN_FINISHED"
