"""Session fixtures shared by all tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.processes import ready_server

# --- fault-injecting a2a-sdk server (tools/peers/a2a_faulty.py) -------------------------------

REPO_ROOT = Path(__file__).resolve().parent.parent
_FAULTY_READY_TIMEOUT = 20.0
_FAULTY_STOP_TIMEOUT = 5.0


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
    _http: httpx.Client = field(repr=False, default_factory=lambda: httpx.Client(timeout=5.0))

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


@pytest.fixture(scope="session")
def a2a_server() -> Iterator[A2AFaultyServer]:
    """The fault-injecting a2a-sdk server, one process (own process group) for the session."""
    argv = [sys.executable, "-m", "tools.peers.a2a_faulty", "--port", "0", "--watch-stdin"]
    with ready_server(
        argv,
        cwd=REPO_ROOT,
        name="a2a_faulty",
        ready_timeout=_FAULTY_READY_TIMEOUT,
        stop_timeout=_FAULTY_STOP_TIMEOUT,
    ) as (port, pid, stderr_path):
        server = A2AFaultyServer(
            base_url=f"http://127.0.0.1:{port}", port=port, pid=pid, stderr_path=stderr_path
        )
        try:
            yield server
        finally:
            server._http.close()
