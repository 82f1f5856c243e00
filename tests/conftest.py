"""Session fixtures shared by all tests."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

# --- fault-injecting a2a-sdk server (tests/servers/a2a_faulty.py) -------------------------------

REPO_ROOT = Path(__file__).resolve().parent.parent
_FAULTY_READY_TIMEOUT = 20.0
_FAULTY_STOP_TIMEOUT = 5.0


@dataclass
class A2AFaultyServer:
    """A running `python -m tests.servers.a2a_faulty` (scenarios: see that module's docstring).

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


def _read_ready_port(proc: subprocess.Popen[bytes], timeout: float) -> int:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no READY line within {timeout:.0f} s")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"server exited before READY (exit code {proc.wait(5)})")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    match = re.fullmatch(r"READY (\d+)", line)
    if match is None:
        raise RuntimeError(f"unexpected first stdout line {line!r}")
    return int(match.group(1))


def _terminate_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group; SIGKILL it if it is still there after `grace` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=grace)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


def _tail(stderr: IO[bytes]) -> str:
    stderr.seek(0)
    return stderr.read().decode(errors="replace").strip()[-3000:]


@pytest.fixture(scope="session")
def a2a_server() -> Iterator[A2AFaultyServer]:
    """The fault-injecting a2a-sdk server, one process (own process group) for the session."""
    with tempfile.NamedTemporaryFile(prefix="a2a_faulty-", suffix=".stderr") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.servers.a2a_faulty", "--port", "0", "--watch-stdin"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,  # it exits when this closes, even if pytest is SIGKILLed
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,  # own process group: teardown signals the whole group
        )
        try:
            try:
                port = _read_ready_port(proc, _FAULTY_READY_TIMEOUT)
            except (TimeoutError, RuntimeError) as exc:
                pytest.fail(f"a2a_faulty server did not start: {exc}\n{_tail(stderr)}")
            server = A2AFaultyServer(
                base_url=f"http://127.0.0.1:{port}",
                port=port,
                pid=proc.pid,
                stderr_path=stderr.name,
            )
            try:
                yield server
            finally:
                server._http.close()
        finally:
            _terminate_group(proc, _FAULTY_STOP_TIMEOUT)
