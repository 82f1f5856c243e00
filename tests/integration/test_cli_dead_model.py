"""The real Claude Code and Codex binaries against a model endpoint that does not answer.

Each CLI runs as a run's parent (its adapter, a real MCP endpoint, the pinned binaries of
tests/cli_agents) pointed at (a) a closed port and (b) a port that accepts connections and never
answers, with small bounds (`max_retries`, `request_timeout`, `run_deadline`). Left alone, Codex
0.171 retries a refused connection forever and Claude Code 2.1.332 for ~180 s; here each run
must end with a typed error (`model_unavailable`, or `run_deadline` for a CLI that waits in
silence) well within its bound, the CLI stopped, and the retries the CLI reported shown as the
run's `parent.status` events. Without a run deadline, Codex on the silent port is stopped by the
model-silence watch (`model_unavailable`) within its default bound.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.mcp import DelegationEndpoint
from adapters.parents import (
    STATUS_EVENT,
    ClaudeCodeConfig,
    ClaudeCodeParent,
    CodexConfig,
    CodexParent,
    ParentProcessError,
)
from demo import demo_agents
from engine import Engine, ErrorCode, Kind
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV

pytestmark = pytest.mark.slow

#: Graces short enough that a stopped CLI is gone quickly.
GRACES: dict[str, Any] = {"interrupt_grace": 2.0, "terminate_grace": 2.0, "kill_grace": 2.0}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


@pytest.fixture
def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """Accepts connections (the kernel completes them) and never answers a byte."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def parent(cli: str, bin_dir: Path, url: str, **bounds: Any) -> ClaudeCodeParent | CodexParent:
    if cli == "claude":
        return ClaudeCodeParent(
            ClaudeCodeConfig(
                binary=str(bin_dir / "claude"),
                base_url=url,
                model="claude-scripted",
                api_key_env=MODEL_KEY_ENV,
                **GRACES,
                **bounds,
            )
        )
    return CodexParent(
        CodexConfig(
            binary=str(bin_dir / "codex"),
            base_url=f"{url}/v1",
            model=CODEX_MODEL,
            api_key_env=MODEL_KEY_ENV,
            **GRACES,
            **bounds,
        )
    )


async def fails_within(
    agent: ClaudeCodeParent | CodexParent, bound: float
) -> tuple[ParentProcessError, list[Any], float]:
    """Run `agent` to its failure, which must come within `bound` seconds: (the error, the
    run's journal, the seconds it took)."""
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(demo_agents(pause=0), endpoints=endpoint) as eng,
        eng.open_run() as run,
    ):
        began = time.monotonic()
        with trio.fail_after(bound), pytest.raises(ParentProcessError) as caught:
            await agent.run(run, "Say hello.")
        took = time.monotonic() - began
        journal = eng.journal(run.run_id)
        assert journal is not None
        events = [entry.event for entry in await journal.store.read_after(0, journal.head)]
    process = agent.process
    assert process is not None and process.returncode is not None  # the CLI is gone
    return caught.value, events, took


def statuses(events: list[Any]) -> list[dict[str, Any]]:
    return [e.raw for e in events if e.kind == Kind.PARENT_CUSTOM and e.name == STATUS_EVENT]


def assert_failed(events: list[Any], code: str) -> None:
    assert events[-1].kind == Kind.RUN_FAILED
    assert events[-1].error.code == code


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_a_closed_model_port_fails_the_run_as_model_unavailable(
    cli: str, cli_bin: Path, cli_env: None, closed_url: str
) -> None:
    agent = parent(cli, cli_bin, closed_url, max_retries=1, request_timeout=5.0, run_deadline=90)
    error, events, took = await fails_within(agent, 100)
    assert error.code == ErrorCode.MODEL_UNAVAILABLE, error.message
    assert_failed(events, ErrorCode.MODEL_UNAVAILABLE)
    assert statuses(events), "the CLI's retries were not shown as the run's status"
    assert took < 60, took


async def test_claude_against_a_silent_model_gives_up_after_its_request_timeout(
    cli_bin: Path, cli_env: None, silent_url: str
) -> None:
    # Two requests of 3 s each (one retry): Claude Code ends by itself, well before the deadline.
    agent = parent(
        "claude", cli_bin, silent_url, max_retries=1, request_timeout=3.0, run_deadline=60
    )
    error, events, took = await fails_within(agent, 70)
    assert error.code == ErrorCode.MODEL_UNAVAILABLE, error.message
    assert_failed(events, ErrorCode.MODEL_UNAVAILABLE)
    assert [s["attempt"] for s in statuses(events)] == [1]
    assert 5 < took < 40, took


async def test_codex_against_a_silent_model_is_stopped_at_the_run_deadline(
    cli_bin: Path, cli_env: None, silent_url: str
) -> None:
    # Codex waits on a connection that never answers whatever its stream_idle_timeout_ms: the
    # run deadline is what ends it.
    agent = parent("codex", cli_bin, silent_url, max_retries=1, request_timeout=3.0, run_deadline=8)
    error, events, took = await fails_within(agent, 30)
    assert error.code == ErrorCode.RUN_DEADLINE, error.message
    assert_failed(events, ErrorCode.RUN_DEADLINE)
    assert "run deadline (8 s)" in error.message
    assert 8 <= took < 20, took


async def test_codex_against_a_silent_model_without_a_deadline_fails_on_its_silence(
    cli_bin: Path, cli_env: None, silent_url: str
) -> None:
    # No run deadline: the model-silence watch (its default, from the retry bounds) ends the run.
    agent = parent("codex", cli_bin, silent_url, max_retries=0, request_timeout=2.0)
    limit = agent.config.silence_limit()
    assert limit == 32.0
    error, events, took = await fails_within(agent, limit + 30)
    assert error.code == ErrorCode.MODEL_UNAVAILABLE, error.message
    assert_failed(events, ErrorCode.MODEL_UNAVAILABLE)
    assert "model was silent for" in error.message
    assert limit <= took < limit + 15, took
