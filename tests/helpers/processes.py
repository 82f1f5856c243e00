"""Running a test server as a child process (tests only): one way for every fixture.

The server prints `READY <port>` as its first stdout line once it listens, exits when its stdin
closes (so even a SIGKILLed pytest leaves nothing behind), and runs in its own process group so
teardown can signal everything it started.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

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
