"""A CLI served by `a2a-serve` whose model fails every request: its caller sees why, soon.

The real Claude Code and Codex binaries behind `a2a-serve` (a child process) and a model endpoint
on loopback that passes the start-up check (it answers GET) but answers every model request
(POST) with 503. The CLI retries (`[parent] max_retries = 1`); each retry it reports becomes a
`working` status whose message says so, which the engine's A2A client shows as the delegation's
status text, and the delegation fails well before any tool timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, Kind, Status
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, served_agent
from tests.helpers.runs import delegate_for_events

pytestmark = pytest.mark.slow


class Unavailable(BaseHTTPRequestHandler):
    """GET (the start-up probe): 404; POST (a model request): 503, closed."""

    def do_GET(self) -> None:
        self._answer(404)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self._answer(503, b'{"error": {"type": "overloaded", "message": "unavailable"}}')

    def _answer(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def unavailable_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_a_served_cli_s_model_retries_are_its_task_s_status_and_it_fails_soon(
    cli: str,
    cli_bin: Path,
    unavailable_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")
    endpoint = unavailable_model if cli == "claude" else f"{unavailable_model}/v1"
    config = tmp_path / "host.toml"
    config.write_text(
        "[parent]\n"
        f'kind = "{"claude-code" if cli == "claude" else "codex"}"\n'
        f'model_endpoint = "{endpoint}"\n'
        f'model = "{CODEX_MODEL if cli == "codex" else "claude-scripted"}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "max_retries = 1\n"
        "request_timeout_seconds = 5\n"
        "run_deadline_seconds = 60\n"
    )
    with served_agent("--config", str(config), "--binary", str(cli_bin / cli)) as served:
        target = A2ATarget(A2AAgentConfig(card_url=served.card_url))
        began = time.monotonic()
        result, events = await delegate_for_events(AgentSpec(key="served", target=target))
        took = time.monotonic() - began
    assert result.status == Status.FAILED, result
    assert result.error is not None and "503" in result.error.message  # the CLI's own words
    assert took < 45, took
    texts = [e.text for e in events if e.kind == Kind.STATUS and e.text]
    retrying = "Retrying the model request" if cli == "claude" else "Reconnecting..."
    assert any(t.startswith(retrying) for t in texts), texts
