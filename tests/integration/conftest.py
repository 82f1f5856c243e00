"""Fixtures for the integration tests: real A2A servers in their own processes, the pinned
agent CLIs (tests/cli_agents) and the scripted model they talk to."""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.processes import ready_server
from tests.node_packages import ensure_npm_packages

# --- @a2a-js/sdk server (tools/peers/a2a_js) -------------------------------------------------

A2A_JS_DIR = Path(__file__).resolve().parents[2] / "tools" / "peers" / "a2a_js"
A2A_JS_SCENARIOS = ("stream", "fail", "hang")
_A2A_JS_READY_TIMEOUT = 20.0
_A2A_JS_STOP_TIMEOUT = 5.0
_A2A_JS_NPM_TIMEOUT = 300.0
_NODE_MIN_MAJOR = 20  # @a2a-js/sdk 1.3.0 declares engines.node >= 20


@dataclass
class A2AJsServer:
    """A running `node server.mjs` (see its header for the scenarios and routes)."""

    base_url: str
    pid: int
    scenarios: tuple[str, ...] = A2A_JS_SCENARIOS
    _http: httpx.Client = field(repr=False, default_factory=lambda: httpx.Client(timeout=5.0))

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


def _require_node_and_npm() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if not path)
        pytest.fail(
            f"{missing} not found on PATH: the a2a-js integration tests need Node.js "
            f">= {_NODE_MIN_MAJOR} with npm (they run a server built on @a2a-js/sdk).",
            pytrace=False,
        )
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=False, timeout=30
    ).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < _NODE_MIN_MAJOR:
        pytest.fail(
            f"Node.js {version or '(unknown version)'} at {node} is too old: "
            f"@a2a-js/sdk needs Node >= {_NODE_MIN_MAJOR}.",
            pytrace=False,
        )
    return node, npm


def _node_modules_current() -> bool:
    marker = A2A_JS_DIR / "node_modules" / ".package-lock.json"  # written by npm at install end
    lock = A2A_JS_DIR / "package-lock.json"
    return marker.is_file() and marker.stat().st_mtime >= lock.stat().st_mtime


def _ensure_node_modules(npm: str) -> None:
    if _node_modules_current():
        return
    # Other test sessions may run at the same time in this tree: install once, under a lock.
    with open(A2A_JS_DIR / ".install.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if _node_modules_current():
                return
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=A2A_JS_DIR,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
                timeout=_A2A_JS_NPM_TIMEOUT,
            )
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-3000:]
        pytest.fail(
            f"`npm ci` in {A2A_JS_DIR} failed (exit {result.returncode}):\n{output}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def a2a_js_server() -> Iterator[A2AJsServer]:
    """One `node server.mjs` for the session, serving the stream / fail / hang agents."""
    node, npm = _require_node_and_npm()
    _ensure_node_modules(npm)
    argv = [node, "server.mjs", "--host", "127.0.0.1", "--port", "0", "--watch-stdin"]
    with ready_server(
        argv,
        cwd=A2A_JS_DIR,
        name="a2a-js server",
        ready_timeout=_A2A_JS_READY_TIMEOUT,
        stop_timeout=_A2A_JS_STOP_TIMEOUT,
    ) as (port, pid, _):
        server = A2AJsServer(base_url=f"http://127.0.0.1:{port}", pid=pid)
        try:
            yield server
        finally:
            server._http.close()


# --- the agent CLIs and their scripted model (tests/cli_agents, tools/peers/scripted_model) --

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_DIR = REPO_ROOT / "tests" / "cli_agents"
MODEL_KEY_ENV = "SCRIPTED_MODEL_API_KEY"
CODEX_MODEL = "scripted-model"  # not a known model: Codex would hide MCP tools behind tool_search


@dataclass
class ScriptedModel:
    """A running `python -m tools.peers.scripted_model` (see its docstring for the script)."""

    base_url: str
    _http: httpx.Client = field(repr=False, default_factory=lambda: httpx.Client(timeout=5.0))

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


@pytest.fixture(scope="module")
def cli_bin() -> Path:
    """tests/cli_agents/node_modules/.bin with the pinned CLIs (`npm ci` when stale)."""
    ensure_npm_packages(CLI_DIR)  # fails, naming what to install, without Node.js and npm
    return CLI_DIR / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    argv = [sys.executable, "-m", "tools.peers.scripted_model", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="scripted_model") as (port, _, _):
        model = ScriptedModel(base_url=f"http://127.0.0.1:{port}")
        try:
            yield model
        finally:
            model._http.close()


@pytest.fixture
def model(scripted_model: ScriptedModel) -> ScriptedModel:
    scripted_model.reset()
    return scripted_model
