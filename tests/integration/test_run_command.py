"""`subagent-engine run` as a user runs it: a subprocess, real A2A remotes, a real CLI parent.

The remotes are `a2a-serve` processes playing the demo's research and review scripts (and the
fault-injecting a2a-sdk server's `fail` agent for a failing one), listed as `[[agents]]` in a
temporary host TOML. With stdout a pipe the tree comes as plain appended lines (no escape
sequence), then the result, and the exit status says how the run ended; through a pty the tree
is redrawn in place with ANSI cursor movement. Ctrl-C cancels the run and its remote tasks and
exits 130. The real Claude Code binary, on the scripted model endpoint, drives one run.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from tests.helpers.peers import MODEL_KEY_ENV, A2AFaultyServer, ScriptedModel, served_agent

RUN = [sys.executable, "-m", "cli", "run"]


def agents_toml(cards: Mapping[str, str]) -> str:
    return "".join(
        f'[[agents]]\nkey = "{key}"\nprotocol = "a2a"\ncard_url = "{url}"\n\n'
        for key, url in cards.items()
    )


def run_command(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUN, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def remotes() -> Iterator[dict[str, str]]:
    """research and review: a2a-serve with the demo's scripted remotes (card URLs by key)."""
    with ExitStack() as stack:
        cards = {}
        for key in ("research", "review"):
            agent = stack.enter_context(
                served_agent("--parent", "scripted", "--script", key, "--name", key, name=key)
            )
            cards[key] = agent.card_url
        yield cards


def test_a_scripted_run_over_a2a_draws_its_tree_and_prints_the_result(
    remotes: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(agents_toml(remotes))
    done = run_command("--config", str(config), "How do nurseries cancel?")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b" not in out  # a pipe: plain lines only
    lines = out.splitlines()
    assert lines[0].startswith("parent (scripted) [")
    assert "  delegate_to_agent [running, " in out and "→ research: Research: How do" in out
    # Each delegation under its call (two levels down), from start to done.
    for key in ("research", "review"):
        assert any(line.startswith(f"    {key} [starting") for line in lines)
        assert any(line.startswith(f"    {key} [done") for line in lines)
    # The result text last: the scripted parent's answer quoting both remotes.
    result = out[out.rindex("\n\n") :]
    assert "research: completed" in result and "review: completed" in result


def test_a_failing_remote_gives_the_failed_exit_status(
    a2a_server: A2AFaultyServer, remotes: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "host.toml"
    cards = {"research": a2a_server.card_url("fail"), "review": remotes["review"]}
    config.write_text(agents_toml(cards))
    done = run_command("--config", str(config), "Anything")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert any(line.startswith("    research [failed") for line in done.stdout.splitlines())
    assert any(line.startswith("    review [done") for line in done.stdout.splitlines())


def test_bad_options_exit_2_before_anything_runs(tmp_path: Path) -> None:
    assert run_command("--parent", "gpt", "x").returncode == 2
    missing = run_command("--config", str(tmp_path / "none.toml"), "x")
    assert missing.returncode == 2 and "none.toml" in missing.stderr
    empty = run_command("  ")
    assert empty.returncode == 2 and "prompt is empty" in empty.stderr


def test_ctrl_c_cancels_the_run_and_its_remote_tasks(tmp_path: Path) -> None:
    with served_agent("--parent", "scripted", "--script", "slow", name="slow") as slow:
        config = tmp_path / "host.toml"
        config.write_text(agents_toml({"research": slow.card_url, "review": slow.card_url}))
        proc = subprocess.Popen(
            [*RUN, "--config", str(config), "Take your time"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:  # wait until a remote task streams
                seen.append(line)
                if line.startswith("    research [streaming"):
                    break
            assert slow.health()["tasks_running"] >= 1, seen
            proc.send_signal(signal.SIGINT)
            rest, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, (rest, err)
        assert "research [cancelled" in rest and "The run was cancelled" in rest
        health = _idle(slow.health)
        assert health["tasks_running"] == 0  # the remote tasks were cancelled


def _idle(read: object) -> dict[str, int]:
    """Another process's counters settle after its CancelTask: read until idle, 10 s at most."""
    assert callable(read)
    deadline = time.monotonic() + 10
    while True:
        health: dict[str, int] = read()
        if health["tasks_running"] == 0 or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def test_a_terminal_gets_the_tree_redrawn_in_place() -> None:
    """Through a pty: stdout is a TTY, so frames replace each other (cursor up, erase)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [*RUN, "How do nurseries cancel?"], cwd=REPO_ROOT, stdout=follower, env=env
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, "no output for 60 s"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=30) == 0
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = b"".join(chunks).decode()
    assert "\x1b[?25l" in out and out.rstrip().endswith("\x1b[?25h")  # cursor hidden, shown
    frames = out.split("\r\x1b[")
    assert len(frames) > 3
    assert any(frame.split("A", 1)[0].isdigit() for frame in frames)  # cursor up over a frame
    assert "\x1b[J" in out and "\x1b[32mdone\x1b[0m" in out
    assert "└─ review" in out and "Here is what the specialists found" in out


def test_claude_code_drives_a_run_and_the_tree_shows_its_delegation(
    cli_bin: Path, model: ScriptedModel, tmp_path: Path
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        "[parent]\n"
        f'binary = "{cli_bin / "claude"}"\n'
        f'model_endpoint = "{model.base_url}"\n'
        'model = "claude-scripted"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "tool_timeout = 120\n"
    )
    objective = "How do Trio nurseries cancel children?"
    prompt = "Please ask research.\nDELEGATE: " + json.dumps(
        {"agent": "research", "objective": objective}
    )
    done = run_command(
        "--config",
        str(config),
        "--parent",
        "claude",
        prompt,
        env={"HOME": str(tmp_path), MODEL_KEY_ENV: "sk-scripted-not-a-key"},
        timeout=150,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("parent (claude-code) [")
    assert any("delegate_to_agent [running" in line for line in lines)
    assert any(line.startswith("    research [done") for line in lines)
    assert "Delegation result:" in done.stdout[done.stdout.rindex("\n\n") :]
