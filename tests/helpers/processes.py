"""Running a test server as a child process (tests only): one way for every fixture, and
`serve_process` for `subagent-engine serve` itself, which announces its URL instead.

The server prints `READY <port>` as its first stdout line once it listens, exits when its stdin
closes (so even a SIGKILLed pytest leaves nothing behind), and runs in its own process group so
teardown can signal everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from tools.peers.children import read_ready_port, stop_process_group


@contextmanager
def ready_server(
    argv: Sequence[str],
    *,
    cwd: Path,
    name: str,
    ready_timeout: float = 20.0,
    stop_timeout: float = 5.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[int, int, str]]:
    """Start `argv` (with `env`, default: this process's environment), wait for its READY line,
    yield (port, pid, stderr path); always stop it.

    A server that does not start fails the test with its stderr tail.
    """
    with tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".stderr") as stderr:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            try:
                port = read_ready_port(proc, ready_timeout)
            except (TimeoutError, RuntimeError) as exc:
                stderr.seek(0)
                tail = stderr.read().decode(errors="replace").strip()[-3000:]
                pytest.fail(f"{name} did not start: {exc}\n{tail}", pytrace=False)
            yield port, proc.pid, stderr.name
        finally:
            stop_process_group(proc, stop_timeout)


#: How `subagent-engine serve` announces it listens: its first stdout line.
SERVING = "subagent-engine serving on http://127.0.0.1:"


@contextmanager
def serve_process(
    *args: str, env: Mapping[str, str] | None = None, stderr: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """`subagent-engine serve args...` in its own process group (its stderr into the file
    `stderr`, else discarded); yields the process, once it announced it listens, its base URL
    and that announcing line. The rest of its stdout (the banner, the stopping lines) is the
    test's to read. Whatever is still running on leaving is killed, its process group with it."""
    with (
        stderr.open("w") if stderr is not None else open(os.devnull, "w") as errors,
        subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", *args],
            cwd=REPO_ROOT,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            said = stderr.read_text() if stderr is not None else ""
            assert line.startswith(SERVING), line + said
            yield proc, line.split()[3], line
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
