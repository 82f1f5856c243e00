"""A CLI parent whose model endpoint does not answer ends in bounded time, with a typed error.

The process side (`adapters.parents._process`) with a fake CLI (`tests/helpers/fakes_cli.py`):
the retry bounds handed to each CLI (Claude Code's environment, Codex's provider settings), the
retries each CLI reports becoming the run's `parent.status` events, Codex stopped once it
retries past `max_retries` (it retries a refused connection forever on its own), the run deadline
(`run_deadline`, on a `MockClock`), and `probe_model_endpoint` against a closed port, a port that
accepts and never answers, and one that answers.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from adapters.parents import (
    STATUS_EVENT,
    ClaudeCodeConfig,
    ClaudeCodeParent,
    CodexConfig,
    CodexJsonlParser,
    CodexParent,
    ParentProcessError,
    probe_model_endpoint,
)
from engine import Engine, ErrorCode, Kind, Run, RunEndpoint
from tests.helpers import ports
from tests.helpers.fakes_cli import CLAUDE_SIGINT, CODEX_SIGINT, read_log, write_fake_cli

GRACES: dict[str, Any] = {"interrupt_grace": 2.0, "terminate_grace": 2.0, "kill_grace": 2.0}


class StaticEndpoints:
    """An endpoint provider with nothing behind it (the fake CLI does not connect)."""

    async def open_endpoint(self, run: Run) -> RunEndpoint:
        token = secrets.token_urlsafe(32)
        return RunEndpoint(url=f"http://127.0.0.1:9/runs/{run.run_id}/mcp", token=token)

    async def close_endpoint(self, run_id: str) -> None:
        pass


def out(*lines: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"out_json": line} for line in lines]


def started(wrapper: Path) -> dict[str, Any]:
    return next(record for record in read_log(wrapper) if record["event"] == "start")


def signals(wrapper: Path) -> list[str]:
    return [r["signal"] for r in read_log(wrapper) if r["event"] == "signal"]


async def failed_run(
    parent: ClaudeCodeParent | CodexParent,
) -> tuple[ParentProcessError, list[Any]]:
    """Run `parent` to its failure: (the error raised, the run's journal)."""
    async with Engine([], endpoints=StaticEndpoints()) as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError) as caught:
            await parent.run(run, "hello")
        journal = eng.journal(run.run_id)
        assert journal is not None
        events = [entry.event for entry in await journal.store.read_after(0, journal.head)]
    return caught.value, events


def statuses(events: list[Any]) -> list[dict[str, Any]]:
    return [e.raw for e in events if e.kind == Kind.PARENT_CUSTOM and e.name == STATUS_EVENT]


RECONNECTING = "Reconnecting... waiting for network (Connection failed: error sending request)"


async def test_codex_retrying_past_max_retries_is_stopped_and_the_run_fails_typed(
    tmp_path: Path,
) -> None:
    steps = [
        *out({"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"}),
        *out(*({"type": "error", "message": RECONNECTING} for _ in range(3))),
        {"pause": True},
    ]
    wrapper = write_fake_cli(tmp_path, {"steps": steps, "on_sigint": CODEX_SIGINT})
    config = CodexConfig(
        binary=str(wrapper), base_url="http://127.0.0.1:9/v1", max_retries=2, **GRACES
    )
    error, events = await failed_run(CodexParent(config))
    assert error.code == ErrorCode.MODEL_UNAVAILABLE
    assert "did not answer after 2 retries" in error.message
    assert signals(wrapper) == ["SIGINT"]  # stopped by the engine, not ended by itself
    assert [s["attempt"] for s in statuses(events)] == [1, 2, 3]
    assert all(s["text"].startswith("Reconnecting...") for s in statuses(events))
    assert events[-1].kind == Kind.RUN_FAILED
    assert events[-1].error.code == ErrorCode.MODEL_UNAVAILABLE
    # Codex is told the same bounds for what it does bound itself.
    argv = started(wrapper)["argv"]
    provider = next(a for a in argv if a.startswith("model_providers."))
    assert "request_max_retries=2" in provider and "stream_max_retries=2" in provider
    assert "stream_idle_timeout_ms=120000" in provider


async def test_claude_is_given_its_retry_bounds_and_its_retries_become_the_runs_status(
    tmp_path: Path,
) -> None:
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 1,
        "retry_delay_ms": 500,
        "error_status": None,
        "error": "unknown",
    }
    synthetic = {
        "type": "assistant",
        "message": {
            "id": "m",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: Connection error."}],
        },
    }
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "result": "API Error: Connection error.",
        "session_id": "s",
    }
    steps = [*out(retry, synthetic, result), {"exit": 1}]
    wrapper = write_fake_cli(tmp_path, {"steps": steps, "on_sigint": CLAUDE_SIGINT})
    config = ClaudeCodeConfig(
        binary=str(wrapper), max_retries=1, request_timeout=7.5, api_key_env=None, **GRACES
    )
    error, events = await failed_run(ClaudeCodeParent(config))
    env = started(wrapper)["env"]
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "1"
    assert env["API_TIMEOUT_MS"] == "7500"
    [status] = statuses(events)
    assert status["attempt"] == 1 and status["max_retries"] == 1
    assert status["source"] == "claude" and "Retrying the model request" in status["text"]
    # Its retries were the last word on the model: the failure says the model was unavailable.
    assert error.code == ErrorCode.MODEL_UNAVAILABLE
    assert events[-1].error.code == ErrorCode.MODEL_UNAVAILABLE


def test_a_model_answer_after_a_retry_clears_it() -> None:
    parser = CodexJsonlParser(max_retries=1)
    retry = json.dumps({"type": "error", "message": RECONNECTING})
    parser.feed(retry)
    assert parser.model_failing and parser.fatal is None
    parser.feed(json.dumps({"type": "item.started", "item": {"id": "i", "type": "reasoning"}}))
    assert not parser.model_failing
    parser.feed(retry)  # one retry again, within the bound
    assert parser.fatal is None
    parser.feed(retry)
    assert parser.fatal is not None and "after 1 retry" in parser.fatal
    # An error that is not a retry is shown as the status, and not counted.
    other = CodexJsonlParser(max_retries=0)
    [_, status] = other.feed(json.dumps({"type": "error", "message": "stream disconnected"}))
    assert status.fields == {
        "name": STATUS_EVENT,
        "raw": {"text": "stream disconnected", "source": "codex"},
    }
    assert other.fatal is None and not other.model_failing


async def test_a_run_past_its_deadline_is_stopped_and_fails_with_run_deadline(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    steps = [*out({"type": "thread.started", "thread_id": "t"}), {"pause": True}]
    wrapper = write_fake_cli(tmp_path, {"steps": steps, "on_sigint": CODEX_SIGINT})
    config = CodexConfig(binary=str(wrapper), run_deadline=300.0, **GRACES)
    before = trio.current_time()
    error, events = await failed_run(CodexParent(config))
    assert 300.0 <= trio.current_time() - before < 310.0
    assert error.code == ErrorCode.RUN_DEADLINE
    assert "run deadline (300 s)" in error.message
    assert signals(wrapper) == ["SIGINT"]
    assert events[-1].kind == Kind.RUN_FAILED
    assert events[-1].error.code == ErrorCode.RUN_DEADLINE


@pytest.mark.parametrize("bad", [0, -1.0, float("inf")])
def test_a_run_deadline_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="run_deadline"):
        CodexConfig(run_deadline=bad)


def test_max_retries_must_be_a_count() -> None:
    with pytest.raises((TypeError, ValueError)):
        ClaudeCodeConfig(max_retries=-1)
    with pytest.raises(TypeError):
        ClaudeCodeConfig(max_retries=1.5)  # type: ignore[arg-type]


# -- the start-up probe ---------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    return ports.closed_port()


@pytest.fixture
def silent_port() -> Iterator[int]:
    with ports.silent_port() as port:
        yield port


def test_the_probe_names_a_closed_endpoint(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    problem = probe_model_endpoint(url, timeout=2.0)
    assert problem is not None and problem.startswith(f"the model endpoint {url} cannot be reached")


def test_the_probe_gives_up_on_an_endpoint_that_never_answers(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}/v1"
    began = time.monotonic()
    problem = probe_model_endpoint(url, timeout=0.5)
    assert time.monotonic() - began < 3.0
    assert problem == f"the model endpoint {url} did not answer within 0.5 s"


def test_any_http_answer_passes_the_probe() -> None:
    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert probe_model_endpoint(f"http://127.0.0.1:{server.server_port}", timeout=5) is None
    finally:
        server.shutdown()
        server.server_close()
