"""The bundled server with a real CLI as every run's parent, configured as a host would.

`[parent] kind = "claude-code"` / `"codex"` in the host TOML (`HostConfig.parent_factory`), the
pinned binaries of tests/cli_agents, the scripted model of tools/peers/scripted_model.py on
loopback and the two in-process demo agents: a viewer POSTs a prompt to `/agui` and reads the
run's AG-UI stream. The stream must show the CLI's own text and its `delegate_to_agent` call, the
subagent under that call (announced after the call's arguments ended, finished before the call's
result), and one RUN_FINISHED; the whole stream passes the AG-UI checker. Stopping a run while
its CLI waits on a delegation ends the CLI and cancels the delegation.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from demo import demo_agents
from engine import AgentSpec
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel
from web.config import ConfigError, parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

KINDS = {"claude": "claude-code", "codex": "codex"}
OBJECTIVE = "How do Trio nurseries cancel children?"


def host_toml(cli: str, bin_dir: Path, model_url: str) -> str:
    endpoint = model_url if cli == "claude" else f"{model_url}/v1"
    name = CODEX_MODEL if cli == "codex" else "claude-scripted"
    return (
        "[parent]\n"
        f'kind = "{KINDS[cli]}"\n'
        f'binary = "{bin_dir / cli}"\n'
        f'model_endpoint = "{endpoint}"\n'
        f'model = "{name}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "tool_timeout = 120\n"
    )


@asynccontextmanager
async def cli_server(
    cli: str, bin_dir: Path, model_url: str, agents: list[AgentSpec]
) -> AsyncIterator[str]:
    config = parse_config(host_toml(cli, bin_dir, model_url), "host.toml")
    async with (
        open_host(config, agents, config.parent_factory()) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base


def prompt(objective: str = OBJECTIVE) -> dict[str, Any]:
    text = "Please ask research.\nDELEGATE: " + json.dumps(
        {"agent": "research", "objective": objective}
    )
    return {"threadId": "t-1", "messages": [{"id": "u1", "role": "user", "content": text}]}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLIs inherit HOME: a throwaway one, and the model key the config names."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_the_server_streams_a_cli_parent_with_its_subagent_under_its_call(
    cli: str, cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    async with (
        cli_server(cli, cli_bin, model.base_url, demo_agents(pause=0)) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        with trio.fail_after(120):
            response = await http.post(f"{base}/agui", json=prompt())
    assert response.status_code == 200
    frames = parse_sse(response.content)
    assert check_frames(frames) == [], [str(v) for v in check_frames(frames)]
    events = [event for _, event in frames]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("RUN_FINISHED") == 1 and "outcome" not in events[-1]
    parent_calls = [
        e for e in events if e["type"] == "TOOL_CALL_START" and "subagentRunId" not in e
    ]
    [call] = [e for e in parent_calls if e["toolCallName"].endswith("delegate_to_agent")]
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert started["parentToolCallId"] == call["toolCallId"]
    position = {
        name: next(i for i, e in enumerate(events) if match(e))
        for name, match in {
            "end": lambda e: e["type"] == "TOOL_CALL_END" and e["toolCallId"] == call["toolCallId"],
            "started": lambda e: e["type"] == "SUBAGENT_STARTED",
            "finished": lambda e: e["type"] == "SUBAGENT_FINISHED",
            "result": lambda e: (
                e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call["toolCallId"]
            ),
        }.items()
    }
    assert position["end"] < position["started"] < position["finished"] < position["result"]
    sub_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT"
        and e.get("subagentRunId") == started["subagentRunId"]
    )
    assert "Trio nurseries" in sub_text  # the demo research agent streamed, under its subagent
    parent_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e
    )
    assert "Delegation result:" in parent_text  # the CLI's final answer used the result
    # The model got the structured result, never the subagent's live stream.
    tool_results = [r for r in model.requests() if r["api"] is not None]
    assert len(tool_results) == 2


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_stopping_a_run_ends_its_cli_and_cancels_the_delegation(
    cli: str, cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    asked = trio.Event()

    async def stalls(task: LocalTask) -> str:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    agents = [AgentSpec(key="research", target=InProcessTarget(stalls))]
    async with (
        cli_server(cli, cli_bin, model.base_url, agents) as base,
        httpx.AsyncClient(timeout=60) as http,
    ):
        started = (await http.post(f"{base}/runs", json=prompt())).json()
        auth = {"authorization": f"Bearer {started['viewer_token']}"}
        with trio.fail_after(90):
            await asked.wait()
            stopped = await http.post(f"{base}/runs/{started['run_id']}/stop", headers=auth)
            assert stopped.json()["stopped"] is True
            stream = await http.get(f"{base}{started['events_url']}", headers=auth)
    frames = parse_sse(stream.content)
    assert check_frames(frames) == []
    events = [event for _, event in frames]
    [error] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert error["code"] == "cancelled"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}


def test_a_cli_parent_that_is_not_installed_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config(
        f'[parent]\nkind = "codex"\nbinary = "{tmp_path / "no-codex"}"\n', "host.toml"
    )
    with pytest.raises(ConfigError) as caught:
        config.parent_factory()
    assert str(caught.value).startswith("host.toml:3: parent.binary: the codex CLI")
    monkeypatch.setenv("PATH", str(tmp_path))  # no `claude` there
    missing = parse_config('[parent]\nkind = "claude-code"\n', "host.toml")
    with pytest.raises(ConfigError, match=r"host.toml:2: parent.kind: the claude-code CLI"):
        missing.parent_factory()
