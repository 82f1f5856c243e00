"""Handles on the peer servers the fixtures start, each in its own process group.

`A2AFaultyServer` is `python -m tools.peers.a2a_faulty`, `A2AJsServer` the @a2a-js/sdk server
(`tools/peers/a2a_js`), `ScriptedModel` the model endpoint the pinned agent CLIs talk to
(`python -m tools.peers.scripted_model`), `ServedAgent` a `subagent-engine a2a-serve`
(`served_agent` starts one), `AguiApp` the AG-UI agent `python -m tools.peers.agui_app`
(`agui_app` starts one). Each reads what its server recorded over the server's own `/_test`
routes (or `/healthz`); the fixtures that start them are in the conftest files.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.helpers import REPO_ROOT
from tests.helpers.processes import ready_server

#: The pinned agent CLIs (Claude Code, Codex): `npm ci` there installs them.
CLI_DIR = REPO_ROOT / "tests" / "cli_agents"
#: The environment variable the CLIs read the scripted model's (any) key from.
MODEL_KEY_ENV = "SCRIPTED_MODEL_API_KEY"
#: Not a model Codex knows: for a known one it would hide MCP tools behind tool_search.
CODEX_MODEL = "scripted-model"

A2A_JS_DIR = REPO_ROOT / "tools" / "peers" / "a2a_js"
A2A_JS_SCENARIOS = ("stream", "fail", "hang")


def _http() -> httpx.Client:
    return httpx.Client(timeout=5.0)


@dataclass
class A2AFaultyServer:
    """A running `python -m tools.peers.a2a_faulty` (scenarios: see that module's docstring).

    One agent per scenario under `/agents/<scenario>/`; `log()` returns what the agents recorded,
    `{scenario: {"messages"|"cancels"|"subscribes"|"get_tasks"|"cuts"|"auth_rejections": [...]}}`.
    """

    base_url: str
    port: int
    pid: int
    stderr_path: str
    _http: httpx.Client = field(repr=False, default_factory=_http)

    def agent_url(self, scenario: str) -> str:
        """Base URL of one agent: what `A2ACardResolver` / `create_client` take."""
        return f"{self.base_url}/agents/{scenario}"

    def card_url(self, scenario: str) -> str:
        """Absolute URL of one agent's card."""
        return f"{self.agent_url(scenario)}/.well-known/agent-card.json"

    def jsonrpc_url(self, scenario: str) -> str:
        return f"{self.agent_url(scenario)}/jsonrpc"

    def rest_url(self, scenario: str) -> str:
        return f"{self.agent_url(scenario)}/rest"

    def log(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """Everything recorded since the last `reset()`, per scenario (GET /_test/log)."""
        response = self._http.get(f"{self.base_url}/_test/log")
        response.raise_for_status()
        data: dict[str, dict[str, list[dict[str, Any]]]] = response.json()
        return data

    def entries(self, scenario: str, kind: str, task_id: str | None = None) -> list[dict[str, Any]]:
        """One list of the log (e.g. `entries("hang", "cancels", task_id)`), oldest first."""
        found = self.log()[scenario][kind]
        return [e for e in found if task_id is None or e.get("task_id") == task_id]

    def reset(self) -> None:
        """Forget everything recorded (POST /_test/reset). Tasks themselves are not touched."""
        self._http.post(f"{self.base_url}/_test/reset").raise_for_status()


@dataclass
class A2AJsServer:
    """A running `node server.mjs` (see its header for the scenarios and routes)."""

    base_url: str
    pid: int
    scenarios: tuple[str, ...] = A2A_JS_SCENARIOS
    _http: httpx.Client = field(repr=False, default_factory=_http)

    def agent_url(self, scenario: str) -> str:
        """Base URL of one agent (what `create_client` / `A2ACardResolver` take)."""
        if scenario not in self.scenarios:
            raise ValueError(f"unknown a2a-js scenario {scenario!r}; have {self.scenarios}")
        return f"{self.base_url}/agents/{scenario}"

    def card_url(self, scenario: str) -> str:
        """Absolute URL of one agent's card."""
        return f"{self.agent_url(scenario)}/.well-known/agent-card.json"

    def log(self) -> list[dict[str, Any]]:
        """Every CancelTask the server received so far, oldest first, across all agents.

        Each record: scenario, binding ("JSONRPC" | "HTTP+JSON"), taskId, tenant (None if absent),
        metadata (as the client sent it, None if absent), sdkMetadata (what @a2a-js/sdk handed its
        request handler: always {} on HTTP+JSON, the SDK drops it there), receivedAt, outcome
        ("TASK_STATE_CANCELED", "error: <name>: <message>", or "pending" while in flight).
        """
        response = self._http.get(f"{self.base_url}/_test/log")
        response.raise_for_status()
        cancels: list[dict[str, Any]] = response.json()["cancels"]
        return cancels

    def cancels_for(self, task_id: str) -> list[dict[str, Any]]:
        return [record for record in self.log() if record["taskId"] == task_id]


@dataclass
class ScriptedModel:
    """A running `python -m tools.peers.scripted_model` (see its docstring for the script)."""

    base_url: str
    _http: httpx.Client = field(repr=False, default_factory=_http)

    def requests(self) -> list[dict[str, Any]]:
        """Every request the CLIs sent since the last `reset()`, oldest first."""
        response = self._http.get(f"{self.base_url}/_test/log")
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["requests"]
        return found

    def model_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["api"] is not None and r["method"] == "POST"]

    def reset(self) -> None:
        self._http.post(f"{self.base_url}/_test/reset").raise_for_status()


@dataclass
class ServedAgent:
    """A running `subagent-engine a2a-serve`."""

    port: int
    pid: int
    stderr_path: str
    _http: httpx.Client = field(repr=False, default_factory=_http)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return f"{self.base_url}/.well-known/agent-card.json"

    def health(self) -> dict[str, Any]:
        response = self._http.get(f"{self.base_url}/healthz")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    async def idle(self, within: float = 15.0) -> dict[str, Any]:
        """The health reading once no task runs and no parent thread is alive (or the last one
        after `within` s). Another process's counters: polled, there is no event to wait on."""
        with trio.move_on_after(within):
            while True:
                health = self.health()
                if health["tasks_running"] == 0 and health["parent_threads"] == 0:
                    return health
                await trio.sleep(0.05)
        return self.health()

    def stderr(self) -> str:
        return Path(self.stderr_path).read_text(errors="replace")


def a2a_serve_argv(*args: str) -> list[str]:
    """`subagent-engine a2a-serve args...` on an ephemeral port, exiting when its stdin closes."""
    return [sys.executable, "-m", "cli", "a2a-serve", "--port", "0", "--watch-stdin", *args]


@contextmanager
def served_agent(*args: str, name: str = "a2a_serve") -> Iterator[ServedAgent]:
    """A running `a2a-serve args...`; it inherits this process's environment (HOME, a model
    key)."""
    with ready_server(a2a_serve_argv(*args), cwd=REPO_ROOT, name=name) as (port, pid, stderr):
        agent = ServedAgent(port=port, pid=pid, stderr_path=stderr)
        try:
            yield agent
        finally:
            agent._http.close()


@dataclass
class AguiApp:
    """A running `python -m tools.peers.agui_app`: one AG-UI agent per scenario under
    `/agents/<scenario>`; `log(kind)` is what its runs (`runs`) or stops (`stops`) received."""

    base_url: str
    _http: httpx.Client = field(repr=False, default_factory=_http)

    def url(self, scenario: str) -> str:
        return f"{self.base_url}/agents/{scenario}"

    def log(self, kind: str) -> list[dict[str, Any]]:
        response = self._http.get(f"{self.base_url}/_test/log")
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()[kind]
        return entries

    def stops(self, delegation_id: str) -> list[dict[str, Any]]:
        """The stop calls that named `delegation_id` in their body."""
        return [
            s for s in self.log("stops") if (s["body"] or {}).get("delegationId") == delegation_id
        ]


@contextmanager
def agui_app() -> Iterator[AguiApp]:
    """A running AG-UI peer (`tools/peers/agui_app.py`) on an ephemeral port, exiting when its
    stdin closes."""
    argv = [sys.executable, "-m", "tools.peers.agui_app", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="agui_app") as (port, _pid, _stderr):
        peer = AguiApp(base_url=f"http://127.0.0.1:{port}")
        try:
            yield peer
        finally:
            peer._http.close()
