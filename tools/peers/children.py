"""Child servers that announce themselves with a `READY <port>` line (benchmarks and tests).

A child prints `READY <port>` as its first stdout line once it listens, exits when its stdin
closes, and runs in its own process group (`start_new_session=True`) so stopping it signals
everything it started. This module reads that line and stops such a child (the parent's side;
callers start it), and writes the line (`announce_ready`, the child's side).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress

__all__ = ["announce_ready", "read_ready_port", "stop_process_group"]


def announce_ready(port: int) -> Callable[[], None]:
    """What a child calls once it listens on `port`: its `READY <port>` line, flushed."""

    def announce() -> None:
        print(f"READY {port}", flush=True)

    return announce


def read_ready_port(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """The port of the child's `READY <port>` line; TimeoutError or RuntimeError otherwise."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no READY line within {timeout:g} s")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the process exited before READY (exit code {proc.poll()})")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    match = re.fullmatch(r"READY (\d+)", line)
    if match is None:
        raise RuntimeError(f"unexpected first stdout line {line!r}")
    return int(match.group(1))


def stop_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Close its pipes, SIGTERM its group, SIGKILL the group if still there after `grace`.

    The group is signalled before the child is reaped, so its id cannot have been reused.
    """
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with suppress(OSError):
                pipe.close()
    if proc.poll() is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)
