"""Running a test server as a child process (tests only): one way for every fixture.

The server prints `READY <port>` as its first stdout line once it listens, exits when its stdin
closes (so even a SIGKILLed pytest leaves nothing behind), and runs in its own process group so
teardown can signal everything it started.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest


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
                raise RuntimeError(f"server exited before READY (exit code {proc.poll()})")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    match = re.fullmatch(r"READY (\d+)", line)
    if match is None:
        raise RuntimeError(f"unexpected first stdout line {line!r}")
    return int(match.group(1))


def _stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
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


@contextmanager
def ready_server(
    argv: Sequence[str],
    *,
    cwd: Path,
    name: str,
    ready_timeout: float = 20.0,
    stop_timeout: float = 5.0,
) -> Iterator[tuple[int, int, str]]:
    """Start `argv`, wait for its READY line, yield (port, pid, stderr path); always stop it.

    A server that does not start fails the test with its stderr tail.
    """
    with tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".stderr") as stderr:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            try:
                port = _read_ready_port(proc, ready_timeout)
            except (TimeoutError, RuntimeError) as exc:
                stderr.seek(0)
                tail = stderr.read().decode(errors="replace").strip()[-3000:]
                pytest.fail(f"{name} did not start: {exc}\n{tail}", pytrace=False)
            yield port, proc.pid, stderr.name
        finally:
            _stop_group(proc, stop_timeout)
