"""Claude Code's heartbeat of a waiting delegation reaches the viewer as the call's progress.

Claude Code (2.1.332) writes a `tool_progress` line for a tool call that has waited 30 s, and
every 30 s after. The delegation here blocks until the viewer's stream shows that progress on
the parent's `delegate_to_agent` call (a CUSTOM `tool_call.progress` naming the call), so the
test waits for the CLI, not for a clock; no `claude.raw` event may appear.
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
from engine import AgentSpec
from tests.helpers.peers import MODEL_KEY_ENV, ScriptedModel
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

pytestmark = pytest.mark.slow


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


async def test_a_waiting_call_shows_claudes_heartbeat_as_its_progress(
    cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    seen_progress = trio.Event()

    async def waits_for_the_heartbeat(task: LocalTask) -> str:
        await seen_progress.wait()
        return "done after the heartbeat"

    toml = (
        '[parent]\nkind = "claude-code"\n'
        f'binary = "{cli_bin / "claude"}"\nmodel_endpoint = "{model.base_url}"\n'
        f'model = "claude-scripted"\napi_key_env = "{MODEL_KEY_ENV}"\ntool_timeout = 120\n'
    )
    config = parse_config(toml, "host.toml")
    agents = [AgentSpec(key="research", target=InProcessTarget(waits_for_the_heartbeat))]
    text = "DELEGATE: " + json.dumps({"agent": "research", "objective": "Take a while."})
    body = {"threadId": "t-1", "messages": [{"id": "u1", "role": "user", "content": text}]}
    events: list[dict[str, Any]] = []
    async with (
        open_host(config, agents, config.parent_factory()) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        with trio.fail_after(100):
            async with http.stream("POST", f"{base}/agui", json=body) as response:
                buffer = b""
                async for chunk in response.aiter_bytes():
                    buffer += chunk
                    for _, event in parse_sse(buffer[: buffer.rfind(b"\n\n") + 2]):
                        if event.get("name") == "tool_call.progress":
                            seen_progress.set()
    frames = parse_sse(buffer)
    assert check_frames(frames) == []
    events = [event for _, event in frames]
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START" and "subagentRunId" not in e]
    progress = [e for e in events if e.get("name") == "tool_call.progress"]
    assert progress, "no heartbeat reached the viewer"
    assert progress[0]["value"]["tool_call_id"] == call["toolCallId"]
    assert progress[0]["value"]["heartbeat"] is True
    assert progress[0]["value"]["elapsed_seconds"] >= 15
    assert not [e for e in events if e.get("name") == "claude.raw"]
    assert events[-1]["type"] == "RUN_FINISHED"
