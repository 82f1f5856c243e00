"""A real `redis-server` for the tests (Debian's, which `./dev test` installs): one per test.

`start_redis(directory)` starts one on a free loopback port with nothing persisted (`--save ""`,
no append-only file, its files and log in `directory`) and returns once it answers PING;
`RedisServer.kill()` SIGKILLs it for outage tests, `pause()` stops it answering (SIGSTOP) and
`restart()` starts it again on the same port (empty: nothing was persisted). The server runs
in its own process group and dies with the thread that started it (Linux `PR_SET_PDEATHSIG`),
so even a SIGKILLed pytest leaves nothing behind; start it from the test's own thread, never
from a worker thread that exits.

The `redis_server` fixture fails (never skips) when redis-server is missing, naming the command
that installs it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Final

import pytest

from tools.peers.children import stop_process_group

__all__ = ["RedisServer", "RedisServerError", "redis_server", "start_redis"]

#: Debian's package, which `./dev test` installs when it is missing.
REDIS_SERVER: Final = "redis-server"
_PR_SET_PDEATHSIG: Final = 1
_START_ATTEMPTS: Final = 3  # a free port can be taken between choosing it and binding it


class RedisServerError(RuntimeError):
    """redis-server is missing, or did not start (the message carries its log's tail)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL it when the starting thread dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process on 127.0.0.1:`port` (see the module docstring)."""

    def __init__(self, directory: Path, port: int, *, ready_timeout: float) -> None:
        self.directory = directory
        self.port = port
        self.ready_timeout = ready_timeout
        self.log_path = directory / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The running server's process id (None once stopped or killed)."""
        return None if self._proc is None else self._proc.pid

    def log_tail(self, characters: int = 3000) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return text.strip()[-characters:]

    def _start(self) -> None:
        if self._proc is not None:
            raise RedisServerError(f"redis-server is already running (pid {self._proc.pid})")
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            raise RedisServerError(
                "redis-server is not installed: run ./dev test (with no arguments), which "
                "installs Debian's redis-server, or apt-get install redis-server"
            )
        argv = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--logfile", str(self.log_path),
            "--daemonize", "no",
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._proc = proc
        deadline = time.monotonic() + self.ready_timeout
        while not _answers_ping(self.port):
            if proc.poll() is not None or time.monotonic() > deadline:
                reason = (
                    f"exited with code {proc.returncode}"
                    if proc.poll() is not None
                    else f"did not answer PING within {self.ready_timeout:g} s"
                )
                self.kill()
                raise RedisServerError(
                    f"redis-server on port {self.port} {reason}; its log:\n{self.log_tail()}"
                )
            time.sleep(0.02)  # polling a starting child: bounded by the deadline above

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM its process group, SIGKILL after `grace` seconds; waits until it is gone.
        Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:  # a paused server handles SIGTERM only once continued
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGCONT)
            stop_process_group(proc, grace)

    def kill(self) -> None:
        """SIGKILL it at once (an outage: clients see their connections reset). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP it: it keeps its connections but answers nothing (a hung server)."""
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT it after `pause`."""
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Start it again on the same port (after `kill` or `stop`); it comes back empty."""
        self.kill()
        self._start()


def start_redis(directory: Path, *, ready_timeout: float = 10.0) -> RedisServer:
    """A running redis-server on a free loopback port, its files in `directory`.

    Raises `RedisServerError` if redis-server is missing or does not start (with its log).
    """
    directory.mkdir(parents=True, exist_ok=True)
    failure: RedisServerError | None = None
    for _ in range(_START_ATTEMPTS):
        server = RedisServer(directory, _free_port(), ready_timeout=ready_timeout)
        try:
            server._start()
        except RedisServerError as exc:
            if "Address already in use" not in str(exc):
                raise
            failure = exc
            continue
        return server
    assert failure is not None
    raise failure


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server for one test (fails the test if redis-server is missing)."""
    try:
        server = start_redis(tmp_path / "redis")
    except RedisServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
