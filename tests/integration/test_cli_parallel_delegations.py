"""Two delegations of one model turn run at the same time under a real CLI parent.

The scripted model (tools/peers/scripted_model.py, `PARALLEL: yes`) answers the first request
with two `delegate_to_agent` calls in one reply. Both pinned CLIs run the MCP calls of one turn
concurrently only when the tool is annotated `readOnlyHint: true` (Claude Code 2.1.332: an MCP
tool is "concurrency safe" exactly then; Codex 0.171.0: its tool dispatch takes a shared lock for
such calls and an exclusive one otherwise, with `parallel_tool_calls: true` in its Responses
request already), which the endpoint does when every agent the tool reaches is declared
read-only (`AgentSpec.read_only`).

The overlap is shown deterministically: each agent, once started, waits for the other one to
start before it answers. Run one after the other, the first would wait in vain (until a bound,
then it says so and the test fails); run together, both start before either ends. Without the
declaration the same turn runs them one after the other (the agents then do not wait).
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
from engine import AgentSpec
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

pytestmark = pytest.mark.slow

KEYS = ("research", "review")
#: How long an agent waits for the other to start before it gives up (the failing case).
MEETING_WAIT = 30.0


class Meeting:
    """Two agents that record when they start and end; with `wait`, each waits for the other."""

    def __init__(self, *, wait: bool) -> None:
        self.wait = wait
        self.started = {key: trio.Event() for key in KEYS}
        self.log: list[tuple[str, str]] = []
        self.met: dict[str, bool] = {}

    def agent(self, key: str, *, read_only: bool) -> AgentSpec:
        other = next(k for k in KEYS if k != key)

        async def run(task: LocalTask) -> str:
            self.log.append(("start", key))
            self.started[key].set()
            if self.wait:
                with trio.move_on_after(MEETING_WAIT):
                    await self.started[other].wait()
            self.met[key] = self.started[other].is_set()
            self.log.append(("end", key))
            return f"{key} done"

        return AgentSpec(key=key, target=InProcessTarget(run), read_only=read_only)


def host_toml(cli: str, bin_dir: Path, model_url: str, args: tuple[str, ...] = ()) -> str:
    kind, endpoint, name = {
        "claude": ("claude-code", model_url, "claude-scripted"),
        "codex": ("codex", f"{model_url}/v1", CODEX_MODEL),
    }[cli]
    return (
        "[parent]\n"
        f'kind = "{kind}"\n'
        f'binary = "{bin_dir / cli}"\n'
        f'model_endpoint = "{endpoint}"\n'
        f'model = "{name}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        f"args = {json.dumps(list(args))}\n"
        "tool_timeout = 120\n"
    )


@asynccontextmanager
async def cli_server(
    cli: str, bin_dir: Path, model_url: str, agents: list[AgentSpec], args: tuple[str, ...] = ()
) -> AsyncIterator[str]:
    config = parse_config(host_toml(cli, bin_dir, model_url, args), "host.toml")
    async with (
        open_host(config, agents, config.parent_factory()) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base


def two_at_once() -> dict[str, Any]:
    lines = ["Ask both at once.", "PARALLEL: yes"]
    lines += [
        "DELEGATE: " + json.dumps({"agent": key, "objective": f"Look at part {n}."})
        for n, key in enumerate(KEYS, 1)
    ]
    text = "\n".join(lines)
    return {"threadId": "t-1", "messages": [{"id": "u1", "role": "user", "content": text}]}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


async def run_turn(
    cli: str,
    bin_dir: Path,
    model: ScriptedModel,
    meeting: Meeting,
    read_only: bool,
    args: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    agents = [meeting.agent(key, read_only=read_only) for key in KEYS]
    async with (
        cli_server(cli, bin_dir, model.base_url, agents, args) as base,
        httpx.AsyncClient(timeout=180) as http,
    ):
        with trio.fail_after(180):
            response = await http.post(f"{base}/agui", json=two_at_once())
    assert response.status_code == 200
    frames = parse_sse(response.content)
    assert check_frames(frames) == [], [str(v) for v in check_frames(frames)]
    events = [event for _, event in frames]
    assert events[-1]["type"] == "RUN_FINISHED" and "outcome" not in events[-1]
    # The model asked for both in one reply.
    [reply] = [r for r in model.model_requests() if (r.get("reply") or {}).get("more_calls")]
    assert len(reply["reply"]["more_calls"]) == 1
    return events


def lifecycle(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"] in ("SUBAGENT_STARTED", "SUBAGENT_FINISHED")]


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_read_only_agents_of_one_turn_run_at_the_same_time(
    cli: str, cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    meeting = Meeting(wait=True)
    events = await run_turn(cli, cli_bin, model, meeting, read_only=True)
    assert meeting.met == {"research": True, "review": True}, meeting.log
    assert [step for step, _ in meeting.log] == ["start", "start", "end", "end"]
    # The viewer sees it too: both subagents started before either finished.
    assert lifecycle(events) == ["SUBAGENT_STARTED"] * 2 + ["SUBAGENT_FINISHED"] * 2


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_without_the_declaration_they_run_one_after_the_other(
    cli: str, cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    meeting = Meeting(wait=False)
    events = await run_turn(cli, cli_bin, model, meeting, read_only=False)
    assert [step for step, _ in meeting.log] == ["start", "end", "start", "end"]
    assert lifecycle(events) == ["SUBAGENT_STARTED", "SUBAGENT_FINISHED"] * 2
