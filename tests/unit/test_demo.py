"""The main job (`subagent-engine demo`): the ordered stream a user sees on a fresh machine."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from web.demo import run_demo


def run_json_demo() -> list[dict]:
    out = io.StringIO()
    assert run_demo(as_json=True, fast=True, out=out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_demo_stream_is_ordered_and_complete() -> None:
    lines = run_json_demo()
    cursors = [line["cursor"] for line in lines]
    assert cursors == sorted(set(cursors)), "cursors strictly increase"
    kinds = [line["event"]["kind"] for line in lines]
    assert kinds[0] == "run.started" and kinds[-1] == "run.finished"
    by_agent: dict[str, list[str]] = {}
    for line in lines:
        event = line["event"]
        if "delegation_id" in event:
            by_agent.setdefault(event["agent_key"], []).append(event["kind"])
    assert set(by_agent) == {"research", "review"}
    for agent_kinds in by_agent.values():
        assert agent_kinds[0] == "subagent.started"
        assert agent_kinds[-1] == "subagent.finished"
        assert agent_kinds.count("subagent.finished") == 1
    # Each parent tool result comes after the terminal of the subagent it carries.
    for line in lines:
        event = line["event"]
        if event["kind"] == "tool_call.result":
            result = event["result"]
            terminal = next(
                other["cursor"]
                for other in lines
                if other["event"].get("delegation_id") == result["delegation_id"]
                and other["event"]["kind"] == "subagent.finished"
            )
            assert terminal < line["cursor"]
            assert result["status"] == "completed"
            assert result["parent_tool_call_id"] == event["tool_call_id"]
    text = "".join(
        line["event"].get("delta", "")
        for line in lines
        if line["event"]["kind"] == "subagent.text.delta"
        and line["event"]["agent_key"] == "research"
    )
    assert text == "Trio nurseries give structured cancellation; memory channels carry events."


def test_console_script_prints_the_human_stream() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "demo", "--fast"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "run.started" in lines[0] and "run.finished" in lines[-1]
    assert any("subagent.finished" in line and "[review]" in line for line in lines)
