"""`python -m fuzz.listeners`: raw request bytes against the three listeners, invariants checked.

    python -m fuzz.listeners --seconds N [--seed S ...] [--only serve|mcp|a2a-serve]
    python -m fuzz.listeners --only serve --seed S --input I [--input J ...] [--show]

This module owns the black-box fuzzing of our HTTP edges as a user runs them: `subagent-engine
serve --port 0` (the bundled server, and in the same process the MCP endpoint whose URL it
prints) and `subagent-engine a2a-serve --port 0 --token-env NAME`, each a child process started
from the repository root in its own process group (stdin a pipe; stopped with SIGTERM, then
SIGKILL after `STOP_GRACE`; asked by the kernel to die with this process), reached only through
TCP on 127.0.0.1. serve's process (its listener, then its MCP listener) and a2a-serve's are
fuzzed at the same time, each by `--workers` connections at once. Every run first sends the
named regression inputs of `fuzz._http_grammar.regressions`, then each seed's drawn inputs
for `--seconds`: input `i` of seed `S` comes from its own `random.Random`, so it is drawn again
by `--seed S --input i` (with that session's port, run ids and tokens in place); `--show`
prints it without sending it. What comes back is read by `fuzz._http_answers`. It never
imports or edits the servers' code; the final checks read serve's stream with the project's
AG-UI parser and checker.

Invariants, and what each protects:

- The process stays alive and answers a fresh request (serve: `/healthz`; MCP: an unknown
  run's path; a2a-serve: its card) within `HEALTH_TIMEOUT`, checked every `HEALTH_INTERVAL`:
  one peer's bytes must never end or wedge the service for everyone else.
- No answer is a server error: a 5xx status line (every response of a pipeline, and the
  `:status` of HTTP/2 after h2c or the preface), a WebSocket close 1011 (RFC 6455 section
  7.4.1) or serve's 45xx close codes (a route's 5xx after the handshake), an HTTP/2
  INTERNAL_ERROR (RFC 9113 section 7), a JSON-RPC internal error -32603 (JSON-RPC 2.0
  section 5.1, the 500 of an answer that is 200 on the wire). A server error means a request
  reached code that failed instead of refusing it (`README.md`: "never a 500"). A connection
  closed without an answer is fine for garbage. Two 5xx are answers, not failures: 503 from a
  lone `/readyz` (starting), and 501 to a request that names a transfer coding (RFC 9112
  section 6.1 tells a server that does not understand one to send it).
- A peer that stops mid-head is dropped within the keep-alive timeout plus `DROP_MARGIN`: a
  handful of silent sockets must not hold connection slots and descriptors forever. Peers that
  stop mid-body are counted and shown, not judged (no listener promises a body deadline).
- Resident memory (VmRSS) after all inputs is within `RSS_BOUND` of the baseline taken after
  warm-up: a leak of a few KiB per request shows within thousands of requests. The bound is
  what the inputs may leave behind in the allocator: at most `HUGE_AT_ONCE` bodies at the
  4 MiB limit are in flight at once, each held a few times over (kernel buffer, parser buffer,
  joined bytes, decoded text, parsed document: 40-60 MiB together), plus the runs and tasks
  the inputs start (journals and task stores keep what they are meant to keep), plus slack.
- Open descriptors (/proc/<pid>/fd) return to within `FD_SLACK` of the baseline once every
  connection of ours is closed: a socket the server forgets to close is a slot lost for good.
- A normal request still works afterwards: serve starts a run (`POST /runs`) whose AG-UI
  stream (`GET /runs/<id>/events?token=`) ends with RUN_FINISHED and passes the AG-UI checker
  (the run calls the MCP endpoint through the scripted parent); a2a-serve completes a JSON-RPC
  SendMessage; the MCP listener answers unknown runs and paths with 401 and 404.

A failure is printed with where its input came from, its kind and its exact bytes (repr,
truncated), and the report shows the tracebacks the server wrote; exit status 1. Inputs run
concurrently, so when the process dies every input in flight is listed: replay each alone.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import httpx
import trio

from fuzz._http_answers import H2_INTERNAL_ERROR, WS_INTERNAL_ERROR, AnswerReader
from fuzz._http_grammar import (
    CUT,
    HALF_CLOSE,
    RESET,
    SILENT_BODY,
    SILENT_HEAD,
    Probe,
    Route,
    Surface,
    draw_probe,
    regressions,
    run_input_body,
)

__all__ = ["LISTENERS", "FuzzOptions", "ListenerReport", "fuzz_listeners", "main"]

REPO: Final = Path(__file__).resolve().parents[1]
LISTENERS: Final = ("serve", "mcp", "a2a-serve")

SERVE_ROUTES: Final = (
    Route("GET", "/"),
    Route("GET", "/healthz"),
    Route("GET", "/readyz"),
    Route("POST", "/agui", body="run", starts_run=True),
    Route("POST", "/runs", body="run", starts_run=True),
    Route("GET", "/runs/{run}/events"),
    Route("GET", "/runs/{run}/ws", websocket=True),
    Route("POST", "/runs/{run}/stop"),
    Route("POST", "/runs/{run}/answer", body="answer"),
    Route("GET", "/static/index.html"),
)
MCP_ROUTES: Final = (
    Route("POST", "/runs/{run}/mcp", body="mcp"),
    Route("GET", "/runs/{run}/mcp"),
    Route("DELETE", "/runs/{run}/mcp"),
    Route("POST", "/mcp", body="mcp"),
)
A2A_ROUTES: Final = (
    Route("GET", "/.well-known/agent-card.json"),
    Route("POST", "/a2a/jsonrpc", body="jsonrpc"),
    Route("POST", "/a2a/rest/message:send", body="a2a-message"),
    Route("POST", "/a2a/rest/message:stream", body="a2a-message"),
    Route("GET", "/a2a/rest/tasks/{task}"),
    Route("POST", "/a2a/rest/tasks/{task}:cancel", body="a2a-message"),
    Route("GET", "/a2a/rest/tasks/{task}:subscribe"),
    Route("GET", "/a2a/rest/tasks"),
    Route("GET", "/a2a/rest/extendedAgentCard"),
    Route("GET", "/healthz"),
)
#: Request bodies each listener reads at most (`[server] max_body_bytes`; the MCP endpoint's and
#: a2a-serve's `MAX_BODY_BYTES`).
BODY_LIMITS: Final = {"serve": 1 << 20, "mcp": 4 << 20, "a2a-serve": 4 << 20}

#: Seconds an answer may take before the request counts as unanswered (a safety net: a request
#: is normally answered in milliseconds, `POST /runs/<id>/stop` in about a second).
ANSWER_TIMEOUT: Final = 5.0
#: Seconds of quiet after which garbage (no request the server must answer) is done with.
GARBAGE_QUIET: Final = 1.0
#: Seconds of quiet that end reading a stream (SSE, WebSocket, HTTP/2) that is still open.
STREAM_QUIET: Final = 0.5
#: Seconds a liveness probe may take.
HEALTH_TIMEOUT: Final = 10.0
#: Seconds between liveness probes.
HEALTH_INTERVAL: Final = 1.0
#: Both servers close a connection idle before (or between) requests after 5 s.
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: What a silent peer is allowed beyond the keep-alive timeout before it must be dropped.
DROP_MARGIN: Final = 2.0
#: Growth of resident memory allowed over the baseline (see the module docstring).
RSS_BOUND: Final = 150 << 20
#: Descriptors allowed above the baseline at the end (pools the final runs may keep open).
FD_SLACK: Final = 8
#: How long descriptors may take to settle once our connections are closed.
FD_SETTLE_TIMEOUT: Final = 20.0
#: Inputs larger than this count as huge; at most `HUGE_AT_ONCE` of them are in flight.
HUGE_INPUT: Final = 512 * 1024
HUGE_AT_ONCE: Final = 2
#: Silent connections held open at once (beyond that a silent input is cut instead).
SILENT_AT_ONCE: Final = 24
#: Runs that inputs may start on serve (then bodies to run routes are never JSON objects):
#: with the harness's own runs, well under `max_active_runs` (32) and the 64 runs whose replay
#: the engine keeps for `replay_retention_seconds`, beyond which a new run is refused with 429.
RUN_BUDGET: Final = 20
#: Runs the surface keeps (the newest), the harness's own and those inputs started.
LEARNED_RUNS: Final = 8
#: Reads and writes of one connection.
RECEIVE_BYTES: Final = 65536
#: Failures shown of each kind (invariant and detail); the rest are counted.
SHOWN_FAILURES: Final = 3
#: How much of an input's bytes a failure shows.
SHOWN_BYTES: Final = 600
#: Seconds a server gets to stop after SIGTERM before its group is killed.
STOP_GRACE: Final = 10.0
#: The token a2a-serve is started with (through its environment, as `--token-env` reads it).
A2A_TOKEN_ENV: Final = "FUZZ_A2A_TOKEN"


# --- reports -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """Where an input came from: input `index` of `seed`, or the regression input `name`."""

    seed: int | None = None
    index: int | None = None
    name: str | None = None

    def describe(self) -> str:
        if self.name is not None:
            return f"regression input {self.name!r}"
        return f"input {self.index} of seed {self.seed}"

    def replay(self, listener: str) -> str:
        if self.name is not None:
            return "sent first by every run"
        return (
            f"replay: python -m fuzz.listeners --only {listener} --seed {self.seed} "
            f"--input {self.index}"
        )


@dataclass
class Failure:
    """One violated invariant, and the input that violated it when one did."""

    listener: str
    invariant: str
    detail: str
    origin: Origin | None = None
    probe: Probe | None = None

    def render(self) -> str:
        lines = [f"FAIL {self.listener}: {self.invariant}: {self.detail}"]
        if self.origin is not None and self.probe is not None:
            lines.append(
                f"  {self.origin.describe()} ({self.probe.kind}); "
                f"{self.origin.replay(self.listener)}"
            )
            for number, write in enumerate(self.probe.writes):
                lines.append(f"  write {number}: {shown(write)}")
            if self.probe.after_upgrade:
                lines.append(f"  after the upgrade: {shown(self.probe.after_upgrade)}")
        return "\n".join(lines)


def shown(data: bytes) -> str:
    if len(data) <= SHOWN_BYTES:
        return repr(data)
    return f"{data[:SHOWN_BYTES]!r} ... ({len(data)} bytes)"


@dataclass
class ListenerReport:
    """What one listener got and how it answered."""

    name: str
    seeds: list[int] = field(default_factory=list)
    inputs: int = 0
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    status_classes: Counter[str] = field(default_factory=Counter)
    #: Connections the server closed without any answer (fine for garbage).
    closed_unanswered: int = 0
    #: Requests the server should have answered that got nothing within `ANSWER_TIMEOUT`.
    unanswered: list[tuple[Origin, Probe]] = field(default_factory=list)
    silent_head: Counter[str] = field(default_factory=Counter)
    silent_body: Counter[str] = field(default_factory=Counter)
    runs_started: int = 0
    rss_before: int = 0
    rss_after: int = 0
    rss_peak: int = 0
    fds_before: int = 0
    fds_after: int = 0
    fd_kinds: str = ""
    #: What the server wrote to its stderr during the session: bytes, and the longest line.
    stderr_bytes: int = 0
    stderr_longest_line: int = 0
    #: Connection failures the hardened listener contained (logged, the connection closed):
    #: Hypercorn raising on a peer's bytes. Not violations, but each is a bug upstream.
    contained: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(
        self,
        invariant: str,
        detail: str,
        origin: Origin | None = None,
        probe: Probe | None = None,
    ) -> None:
        self.failures.append(Failure(self.name, invariant, detail, origin, probe))

    def render(self) -> str:
        rate = self.inputs / self.seconds if self.seconds else 0.0
        classes = "  ".join(f"{c} {self.status_classes[c]}" for c in sorted(self.status_classes))
        mib = 1 << 20
        lines = [
            f"{self.name}: seeds {', '.join(map(str, self.seeds))}; {self.inputs} inputs in "
            f"{self.seconds:.1f} s ({rate:.0f}/s); {len(self.failures)} failures",
            f"  answers: {classes or 'none'}; closed without an answer {self.closed_unanswered};"
            f" unanswered within {ANSWER_TIMEOUT:g} s {len(self.unanswered)}",
            f"  RSS {self.rss_before / mib:.1f} -> {self.rss_after / mib:.1f} MiB (peak "
            f"{self.rss_peak / mib:.1f}, bound +{RSS_BOUND // mib}); descriptors "
            f"{self.fds_before} -> {self.fds_after} ({self.fd_kinds})"
            if self.rss_after
            else f"  RSS {self.rss_before / mib:.1f} MiB before; not measured after (see below)",
            f"  silent mid-head: {_counts(self.silent_head)}; silent mid-body (not judged): "
            f"{_counts(self.silent_body)}; runs started by inputs {self.runs_started}",
            f"  server stderr: {self.stderr_bytes} bytes "
            f"({self.stderr_bytes / max(1, self.inputs):.0f} per input), longest line "
            f"{self.stderr_longest_line} bytes",
            f"  connection failures the listener contained: {_counts(self.contained)}",
            f"  kinds: {_counts(self.kinds)}",
        ]
        for origin, probe in self.unanswered[:3]:
            lines.append(
                f"  unanswered: {origin.describe()} ({probe.kind}): "
                f"{shown(probe.writes[0] if probe.writes else b'')[:300]}"
            )
        lines += [f"  note: {note}" for note in self.notes]
        # The first few failures of each kind, with how many more there were like them.
        shown_kinds: Counter[tuple[str, str]] = Counter()
        for failure in self.failures:
            shown_kinds[failure.invariant, failure.detail] += 1
            if shown_kinds[failure.invariant, failure.detail] <= SHOWN_FAILURES:
                lines.append(failure.render())
        for (invariant, detail), count in shown_kinds.items():
            if count > SHOWN_FAILURES:
                more = count - SHOWN_FAILURES
                lines.append(f"FAIL {self.name}: {invariant}: {detail}: {more} more like it")
        if self.tracebacks:
            lines.append(f"  server stderr: {len(self.tracebacks)} tracebacks; the first ones:")
            for text in self.tracebacks[:3]:
                lines += ["  | " + line for line in text.splitlines()[-40:]]
        return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counter.items())) or "none"


# --- child processes -----------------------------------------------------------------------------

#: Run in the child before it becomes the server: die with this process (Linux PR_SET_PDEATHSIG),
#: so that nothing outlives a harness that is killed.
_LAUNCH: Final = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


@dataclass
class Child:
    """A server process we started: its pid, its stderr (a file), its resources."""

    name: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in bytes."""
        fields = {}
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    fields[name] = int(value.split()[0]) * 1024
        return fields.get("VmRSS", 0), fields.get("VmHWM", 0)

    def fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return -1

    def fd_summary(self) -> str:
        kinds: Counter[str] = Counter()
        with contextlib.suppress(OSError):
            for name in os.listdir(f"/proc/{self.pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{self.pid}/fd/{name}")
                    kinds[target.split(":", 1)[0] if ":" in target else "file"] += 1
        return _counts(kinds)

    def stderr(self, start: int = 0) -> str:
        try:
            with self.stderr_path.open("rb") as file:
                file.seek(start)
                return file.read().decode(errors="replace")
        except OSError:
            return ""

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    def tracebacks(self, start: int = 0) -> list[str]:
        """Each traceback in the server's stderr after `start`, with the log line before it."""
        found = []
        lines = self.stderr(start).splitlines()
        for number, line in enumerate(lines):
            if line.startswith("Traceback") or line.startswith("  + Exception Group Traceback"):
                end = number + 1
                while end < len(lines) and (
                    lines[end].startswith((" ", "|", "+")) or lines[end].startswith("During")
                ):
                    end += 1
                found.append("\n".join(lines[max(0, number - 1) : end + 1]))
        return found


@contextlib.contextmanager
def started(name: str, args: Sequence[str], env: dict[str, str]) -> Iterator[Child]:
    """Start `python -m cli ARGS` from the repository root in its own process group, stdin
    a pipe, stderr a temporary file; on exit SIGTERM its group, SIGKILL it after `STOP_GRACE`,
    and remove the file (the report has kept what it needs of it)."""
    stderr_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (kept past the block on purpose)
        prefix=f"fuzz-{name}-", suffix=".stderr", delete=False
    )
    command = [sys.executable, "-c", _LAUNCH, str(os.getpid()), "-m", "cli", *args]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        start_new_session=True,
    )
    stderr_file.close()
    try:
        yield Child(name, proc, Path(stderr_file.name))
    finally:
        stop(proc)
        Path(stderr_file.name).unlink(missing_ok=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it after `STOP_GRACE`, then close the pipes. The
    pipes stay open until the server is gone: `serve` says "stopping" on its stdout as it stops,
    and a closed pipe would turn that into a BrokenPipeError."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE)
            break
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def read_stdout_until(child: Child, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
    """The first match of `pattern` in what the child has written to its stdout, or
    RuntimeError with its stderr if it exits or writes no match within `timeout` (a safety
    net: a server that starts says so in a few seconds)."""
    assert child.proc.stdout is not None
    fd = child.proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            found = pattern.search(seen.decode(errors="replace"))
            if found is not None:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{child.name}: no {pattern.pattern!r} within {timeout:g} s; stdout "
                        f"{seen[-500:]!r}; stderr {child.stderr()[-2000:]}"
                    )
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(
                    f"{child.name} exited ({child.proc.poll()}) before it was ready: "
                    f"{child.stderr()[-2000:]}"
                )
            seen += chunk


_SERVING: Final = re.compile(
    r"serving on http://127\.0\.0\.1:(\d+) .*\n.*MCP: http://127\.0\.0\.1:(\d+)"
)
_READY: Final = re.compile(r"^READY (\d+)$", re.MULTILINE)


# --- one connection ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one probe's connection got."""

    reader: AnswerReader
    closed: bool = False  # the server closed (EOF or reset)
    quiet: bool = False  # reading stopped on a quiet timeout
    #: Set once the server sent anything or closed.
    heard: trio.Event = field(default_factory=trio.Event)
    #: Set once the server switched protocols (101, or an HTTP/2 reply to the preface).
    upgraded: trio.Event = field(default_factory=trio.Event)


async def _receive(stream: trio.SocketStream) -> bytes:
    try:
        return await stream.receive_some(RECEIVE_BYTES)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


def _reset(stream: trio.SocketStream) -> None:
    with contextlib.suppress(OSError):
        # l_onoff 1, l_linger 0: close() sends RST instead of FIN.
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def exchange(port: int, probe: Probe) -> Outcome:
    """Send `probe` on a new connection and read the answers as its `then` says.

    Sending and reading run at once: a server that answers (413, 400) and closes before taking
    the whole input is read, not stuck behind a blocked send."""
    outcome = Outcome(AnswerReader(probe.methods))
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        if probe.then in (CUT, RESET):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                with trio.move_on_after(ANSWER_TIMEOUT):
                    for write in probe.writes:
                        await stream.send_all(write)
            if probe.then == RESET:
                _reset(stream)
            return outcome
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                try:
                    for number, write in enumerate(probe.writes):
                        if number:
                            # A later write follows an interim answer (100 Continue), or waits a
                            # moment for one, as a client does (RFC 9110 section 10.1.1).
                            with trio.move_on_after(STREAM_QUIET):
                                await outcome.heard.wait()
                        await stream.send_all(write)
                    if probe.then == HALF_CLOSE:
                        await stream.send_eof()
                    if probe.after_upgrade:
                        await outcome.upgraded.wait()
                        await stream.send_all(probe.after_upgrade)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the server closed first; what it sent is still read

            nursery.start_soon(send)
            await _read_answers(stream, probe, outcome)
            nursery.cancel_scope.cancel()
    return outcome


async def _read_answers(stream: trio.SocketStream, probe: Probe, outcome: Outcome) -> None:
    reader = outcome.reader
    while True:
        if reader.mode in ("websocket", "h2") or reader.streaming:
            quiet = STREAM_QUIET
        elif probe.answers and reader.complete < probe.answers:
            quiet = ANSWER_TIMEOUT
        else:
            quiet = GARBAGE_QUIET
        data = b""
        with trio.move_on_after(quiet) as scope:
            data = await _receive(stream)
        if scope.cancelled_caught:
            outcome.quiet = True
            return
        outcome.heard.set()
        if not data:
            outcome.closed = True
            reader.close()
            return
        reader.feed(data)
        if reader.mode in ("websocket", "h2"):
            outcome.upgraded.set()
        if reader.mode == "http" and reader.streaming and reader.statuses:
            return  # an event stream: its status is in; the run goes on without us
        if reader.websocket_closes:
            return
        if reader.mode == "http" and probe.answers and reader.complete >= probe.answers:
            return


async def silent(port: int, probe: Probe, hold: float) -> Outcome:
    """Send `probe`'s bytes, then nothing: does the server close within `hold` seconds?"""
    outcome = Outcome(AnswerReader(probe.methods))
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            for write in probe.writes:
                await stream.send_all(write)
        with trio.move_on_after(hold):
            while data := await _receive(stream):
                outcome.reader.feed(data)
            outcome.closed = True
            outcome.reader.close()
    return outcome


async def status_of(port: int, request: bytes, within: float) -> int | None:
    """The status of the first answer to `request` on a new connection; None without one."""
    with trio.move_on_after(within):
        try:
            outcome = await exchange(port, Probe("health", (request,), methods=(b"GET",)))
        except OSError:
            return None
        statuses = outcome.reader.statuses
        return statuses[0] if statuses else None
    return None


# --- the listeners -------------------------------------------------------------------------------


@dataclass
class Target:
    """A listener under test: where it is, what it serves, how to check on it."""

    name: str
    child: Child
    surface: Surface
    #: A request for a fresh connection after every batch, and the statuses that mean "alive".
    health_request: bytes
    healthy: frozenset[int]
    #: The final check: what is wrong with a normal request now (nothing: an empty list).
    still_works: Callable[[], Awaitable[list[str]]]


def _health_request(port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()


async def start_run(client: httpx.AsyncClient, base: str) -> tuple[str, str, list[str]]:
    """A normal run on serve: (run id, viewer token, its AG-UI stream's problems)."""
    from adapters.agui import check_frames, parse_sse

    started = await client.post(f"{base}/runs", content=run_input_body(), headers=_JSON)
    if started.status_code != 201:
        ready = (await client.get(f"{base}/readyz")).text[:200]
        problem = (
            f"POST /runs answered {started.status_code}: {started.text[:300]} (/readyz: {ready})"
        )
        return "", "", [problem]
    run = started.json()
    events = await client.get(f"{base}{run['events_url']}?token={run['viewer_token']}")
    problems = []
    if events.status_code != 200:
        problems.append(f"GET events answered {events.status_code}: {events.text[:300]}")
    frames = parse_sse(events.content)
    kinds = [event.get("type") for _, event in frames]
    if not kinds or kinds[-1] != "RUN_FINISHED":
        problems.append(f"the stream ended with {kinds[-3:]} rather than RUN_FINISHED")
    problems += [f"AG-UI checker: {problem}" for problem in check_frames(frames)[:3]]
    return run["run_id"], run["viewer_token"], problems


_JSON: Final = {"Content-Type": "application/json"}


async def send_message(client: httpx.AsyncClient, base: str, token: str) -> tuple[str, str]:
    """A JSON-RPC SendMessage on a2a-serve: (task id, what went wrong or "")."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": f"m-{uuid.uuid4().hex}",
                "role": "ROLE_USER",
                "parts": [{"text": "hello"}],
            }
        },
    }
    headers = {**_JSON, "A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    answer = await client.post(f"{base}/a2a/jsonrpc", content=json.dumps(body), headers=headers)
    if answer.status_code != 200:
        return "", f"SendMessage answered {answer.status_code}: {answer.text[:300]}"
    task = answer.json().get("result", {}).get("task", {})
    state = task.get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":
        return task.get("id", ""), f"SendMessage ended in {state!r}: {answer.text[:300]}"
    return task["id"], ""


# --- a fuzzing session ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FuzzOptions:
    seconds: float = 10.0
    seeds: tuple[int, ...] = (1,)
    only: tuple[str, ...] = LISTENERS
    inputs: tuple[int, ...] = ()  # replay these inputs (one seed) instead of fuzzing for a time
    workers: int = 6


class Session:
    """One listener fuzzed by `workers` connections at once, its invariants checked."""

    def __init__(self, target: Target, options: FuzzOptions) -> None:
        self.target = target
        self.options = options
        self.report = ListenerReport(target.name, seeds=list(options.seeds))
        self.huge = trio.Semaphore(HUGE_AT_ONCE)
        self.silent_slots = trio.Semaphore(SILENT_AT_ONCE)
        self.in_flight: dict[Origin, Probe] = {}
        self.dead = False

    @property
    def port(self) -> int:
        return self.target.surface.port

    def allow_runs(self) -> bool:
        return self.report.runs_started < RUN_BUDGET

    async def run(self) -> ListenerReport:
        """Regression inputs first, then each seed's inputs for its time; then the final
        checks. Silent inputs are held aside (the regression ones for their whole window)."""
        report, child = self.report, self.target.child
        report.fds_before = child.fds()
        report.rss_before = child.rss()[0]
        stderr_start = child.stderr_size()
        started_at = trio.current_time()
        async with trio.open_nursery() as silent_nursery:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, nursery.cancel_scope)
                if not self.options.inputs:  # a replay sends its inputs alone
                    for name, probe in regressions(self.target.surface):
                        await self._send(Origin(name=name), probe, None, silent_nursery)
                for seed in self.options.seeds:
                    if self.dead:
                        break
                    await self._fuzz_seed(seed, silent_nursery)
                nursery.cancel_scope.cancel()
            report.seconds = trio.current_time() - started_at
            if self.dead:
                silent_nursery.cancel_scope.cancel()
        if not self.dead:
            await self._final_checks()
        report.tracebacks = child.tracebacks(stderr_start)
        written = child.stderr(stderr_start)
        report.stderr_bytes = len(written.encode(errors="replace"))
        report.stderr_longest_line = max(map(len, written.splitlines()), default=0)
        for found in _CONTAINED.finditer(written):
            report.contained[found.group(1)[:100]] += 1 + int(found.group(2) or 0)
        return report

    async def _fuzz_seed(self, seed: int, silent_nursery: trio.Nursery) -> None:
        replay = bool(self.options.inputs)
        indexes: Iterator[int] = iter(self.options.inputs) if replay else itertools.count()
        deadline = None if replay else trio.current_time() + self.options.seconds
        async with trio.open_nursery() as nursery:
            for _ in range(1 if replay else self.options.workers):
                nursery.start_soon(self._worker, seed, indexes, deadline, silent_nursery)

    async def _worker(
        self,
        seed: int,
        indexes: Iterator[int],
        deadline: float | None,
        silent_nursery: trio.Nursery,
    ) -> None:
        for index in indexes:
            if self.dead or (deadline is not None and trio.current_time() >= deadline):
                return
            surface = self.target.surface
            probe = draw_probe(seed, self.target.name, index, surface, self.allow_runs())
            await self._send(Origin(seed, index), probe, deadline, silent_nursery)

    async def _send(
        self, origin: Origin, probe: Probe, deadline: float | None, silent_nursery: trio.Nursery
    ) -> None:
        """One input: sent and judged, or (a silent one) handed to `silent_nursery`."""
        if self.dead:
            return
        self.report.inputs += 1
        self.report.kinds[probe.kind] += 1
        if probe.then in (SILENT_HEAD, SILENT_BODY):
            if self.silent_slots.value > 0:
                await self.silent_slots.acquire()
                silent_nursery.start_soon(self._silent, origin, probe, deadline)
                return
            probe = replace(probe, then=CUT)
        self.in_flight[origin] = probe
        outcome: Outcome | None = None
        try:
            if probe.size > HUGE_INPUT:
                async with self.huge:
                    outcome = await exchange(self.port, probe)
            else:
                outcome = await exchange(self.port, probe)
        except OSError as exc:
            if self.target.child.alive():
                self.report.notes.append(f"{origin.describe()}: {exc!r}")
        finally:
            self.in_flight.pop(origin, None)
        if outcome is not None:
            self._judge(origin, probe, outcome)
        if not self.target.child.alive():
            self._died([(origin, probe)])

    async def _silent(self, origin: Origin, probe: Probe, deadline: float | None) -> None:
        """Hold a silent probe until the server drops it or its window ends; a drawn one's
        window ends with its seed's time (then it is not judged)."""
        window = KEEP_ALIVE_TIMEOUT + DROP_MARGIN
        hold = window if deadline is None else min(window, deadline - trio.current_time())
        counter = self.report.silent_head if probe.then == SILENT_HEAD else self.report.silent_body
        try:
            outcome = await silent(self.port, probe, max(hold, 0.0))
        except OSError:
            return
        finally:
            self.silent_slots.release()
        if not outcome.closed and hold < window:
            counter["not judged"] += 1
            return
        if outcome.closed:
            answer = outcome.reader.statuses[0] if outcome.reader.statuses else "no answer"
            counter[f"dropped ({answer})"] += 1
        else:
            counter["held open"] += 1
            if probe.then == SILENT_HEAD:
                self.report.fail(
                    "a silent peer is dropped",
                    f"a connection silent mid-head was still open after {window:g} s "
                    f"(keep-alive timeout {KEEP_ALIVE_TIMEOUT:g} s + {DROP_MARGIN:g} s)",
                    origin,
                    probe,
                )
        self._check_answers(origin, probe, outcome)

    def _judge(self, origin: Origin, probe: Probe, outcome: Outcome) -> None:
        reader, report = outcome.reader, self.report
        statuses = reader.all_statuses
        for status in statuses:
            allowed = status >= 500 and _allowed_5xx(status, probe)
            report.status_classes[f"{status} (allowed)" if allowed else f"{status // 100}xx"] += 1
        if probe.may_start_run:
            report.runs_started += sum(1 for status in statuses if 200 <= status < 300)
            self._learn_runs(reader)
        if not statuses and not reader.websocket_closes:
            if outcome.closed:
                report.closed_unanswered += 1
            elif probe.answers and outcome.quiet and not reader.received:
                report.unanswered.append((origin, probe))
        self._check_answers(origin, probe, outcome)

    def _learn_runs(self, reader: AnswerReader) -> None:
        """Runs the inputs started (`POST /runs`' JSON, `POST /agui`'s headers) join the
        surface, so later inputs reach live runs' streams, stops and answers too."""
        for status, headers, body in zip(
            reader.statuses, reader.headers, reader.bodies, strict=True
        ):
            run = None
            if status == 201:
                with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
                    document = json.loads(body)
                    run = (str(document["run_id"]), str(document["viewer_token"]))
            elif status == 200 and b"x-run-id" in headers and b"x-viewer-token" in headers:
                run = (headers[b"x-run-id"].decode(), headers[b"x-viewer-token"].decode())
            if run is not None:
                surface = self.target.surface
                runs = (*surface.runs, run)[-LEARNED_RUNS:]
                self.target.surface = replace(surface, runs=runs)

    def _check_answers(self, origin: Origin, probe: Probe, outcome: Outcome) -> None:
        reader, fail = outcome.reader, self.report.fail
        for status in reader.all_statuses:
            if status >= 500 and not _allowed_5xx(status, probe):
                fail("no 5xx", f"the server answered {status}", origin, probe)
        for code in reader.websocket_closes:
            if code == WS_INTERNAL_ERROR or 4500 <= code < 4600:
                fail("no 5xx", f"the WebSocket was closed with code {code}", origin, probe)
        for kind, code in reader.h2_errors:
            if code == H2_INTERNAL_ERROR:
                fail("no 5xx", f"an HTTP/2 {kind} with INTERNAL_ERROR", origin, probe)
        for body in reader.bodies:
            if _JSONRPC_INTERNAL_ERROR.search(body):
                fail("no 5xx", "a JSON-RPC internal error (-32603)", origin, probe)

    def _died(self, last: list[tuple[Origin, Probe]]) -> None:
        if self.dead:
            return
        self.dead = True
        code = self.target.child.proc.poll()
        in_flight = [*self.in_flight.items(), *last]
        self.report.fail(
            "the process stays alive",
            f"it exited with {code} with {len(in_flight)} inputs in flight (listed below); "
            f"its stderr ends:\n{self.target.child.stderr()[-3000:]}",
        )
        for origin, probe in in_flight:  # each shown: any of them may be the cause
            detail = f"in flight when it died: {origin.describe()}"
            self.report.fail("the process stays alive", detail, origin, probe)

    async def _watch(self, scope: trio.CancelScope) -> None:
        """After every batch (each `HEALTH_INTERVAL`): alive, and answering a fresh request."""
        while True:
            await trio.sleep(HEALTH_INTERVAL)
            if not self.target.child.alive():
                self._died([])
                scope.cancel()
                return
            status = await status_of(self.port, self.target.health_request, HEALTH_TIMEOUT)
            if status not in self.target.healthy:
                in_flight = ", ".join(origin.describe() for origin in self.in_flight)
                self.report.fail(
                    "the process answers",
                    f"a liveness request ({self.target.health_request!r}) got "
                    f"{status} within {HEALTH_TIMEOUT:g} s; in flight: {in_flight[:1000]}",
                )
                self.dead = True
                scope.cancel()
                return

    async def _final_checks(self) -> None:
        """Descriptors settle, memory is bounded, and a normal request still works."""
        report, child = self.report, self.target.child
        with trio.move_on_after(FD_SETTLE_TIMEOUT):
            while child.fds() > report.fds_before + FD_SLACK:  # noqa: ASYNC110 (a /proc count)
                await trio.sleep(0.1)
        report.fds_after, report.fd_kinds = child.fds(), child.fd_summary()
        if report.fds_after > report.fds_before + FD_SLACK:
            report.fail(
                "descriptors return to the baseline",
                f"{report.fds_after} open {FD_SETTLE_TIMEOUT:g} s after our last connection "
                f"closed (baseline {report.fds_before}, slack {FD_SLACK}): "
                f"{child.fd_summary()}",
            )
        report.rss_after, report.rss_peak = child.rss()
        if report.rss_after > report.rss_before + RSS_BOUND:
            report.fail(
                "memory is bounded",
                f"VmRSS grew from {report.rss_before >> 20} to {report.rss_after >> 20} MiB "
                f"(bound +{RSS_BOUND >> 20} MiB)",
            )
        for problem in await self.target.still_works():
            report.fail("a normal request still works", problem)


#: The hardened listener's line for a connection it contained (`adapters.listener._serve`).
_CONTAINED: Final = re.compile(
    r"a connection failed and was closed: (.*?)(?: \((\d+) more like it in the last [\d.]+ s\))?$",
    re.MULTILINE,
)
#: JSON-RPC 2.0 section 5.1: "Internal JSON-RPC error", the 500 of a JSON-RPC answer.
_JSONRPC_INTERNAL_ERROR: Final = re.compile(rb'"code"\s*:\s*-32603\b')
_TRANSFER_ENCODING: Final = re.compile(rb"(?im)^transfer-encoding[ \t]*:")


def _allowed_5xx(status: int, probe: Probe) -> bool:
    """The two 5xx answers that are not failures: 503 from a lone `/readyz` (the server is
    starting), and 501 to a request that names a transfer coding, which RFC 9112 section 6.1
    tells a server that does not understand it to send (h11 understands only "chunked")."""
    if status == 503:
        return len(probe.methods) == 1 and any(
            write.split(b" ", 2)[1:2] == [b"/readyz"] for write in probe.writes[:1]
        )
    if status == 501:
        return any(_TRANSFER_ENCODING.search(write) for write in probe.writes)
    return False


# --- the three listeners -------------------------------------------------------------------------


class SetupError(Exception):
    """A listener did not start, or did not work before any input was sent."""


async def fuzz_listeners(options: FuzzOptions) -> list[ListenerReport]:
    """Start the listeners' processes, fuzz them for `options`, check them, stop them.

    serve's process (serve, then its MCP listener) and a2a-serve's are fuzzed at the same
    time; each report is about its own listener and process."""
    wanted = set(options.only)
    results: dict[str, list[ListenerReport]] = {}
    with contextlib.ExitStack() as stack:
        children: dict[str, Child] = {}
        token = secrets.token_urlsafe(24)
        if wanted & {"serve", "mcp"}:
            children["serve"] = stack.enter_context(
                started("serve", ["serve", "--port", "0"], dict(os.environ))
            )
        if "a2a-serve" in wanted:
            args = ["a2a-serve", "--port", "0", "--watch-stdin", "--token-env", A2A_TOKEN_ENV]
            env = {**os.environ, A2A_TOKEN_ENV: token}
            children["a2a-serve"] = stack.enter_context(started("a2a-serve", args, env))
        async with trio.open_nursery() as nursery:
            if "serve" in children:
                names = [name for name in ("serve", "mcp") if name in wanted]

                async def serve_side() -> None:
                    results["serve"] = await _fuzz_serve(children["serve"], options, names)

                nursery.start_soon(serve_side)
            if "a2a-serve" in children:

                async def a2a_side() -> None:
                    child = children["a2a-serve"]
                    results["a2a-serve"] = await _fuzz_a2a_serve(child, options, token)

                nursery.start_soon(a2a_side)
    return [report for side in ("serve", "a2a-serve") for report in results.get(side, [])]


async def _fuzz_serve(
    child: Child, options: FuzzOptions, names: Sequence[str]
) -> list[ListenerReport]:
    try:
        found = await trio.to_thread.run_sync(read_stdout_until, child, _SERVING, 60.0)
    except RuntimeError as exc:
        return [_setup_failed(name, options, str(exc)) for name in names]
    serve_port, mcp_port = int(found.group(1)), int(found.group(2))
    base = f"http://127.0.0.1:{serve_port}"
    reports = []
    async with httpx.AsyncClient(timeout=60.0) as client:
        runs = []
        for _ in range(2):  # runs whose ids and viewer tokens the inputs may use
            run_id, viewer_token, problems = await start_run(client, base)
            if problems:
                message = f"a normal run failed before any input: {problems}"
                return [_setup_failed(name, options, message) for name in names]
            runs.append((run_id, viewer_token))

        async def serve_works() -> list[str]:
            return (await start_run(client, base))[2]

        async def mcp_works() -> list[str]:
            problems = []
            for path, allowed in (
                ("/runs/run-nope/mcp", {401}),
                (f"/runs/{runs[0][0]}/mcp", {401}),
                ("/nope", {404}),
            ):
                status = await status_of(mcp_port, _health_request(mcp_port, path), HEALTH_TIMEOUT)
                if status not in allowed:
                    problems.append(f"GET {path} answered {status}, not {sorted(allowed)}")
            return problems + await serve_works()

        if "serve" in names:
            surface = Surface(
                "serve", serve_port, SERVE_ROUTES, BODY_LIMITS["serve"], runs=tuple(runs)
            )
            health = _health_request(serve_port, "/healthz")
            target = Target("serve", child, surface, health, frozenset({200}), serve_works)
            reports.append(await Session(target, options).run())
        if "mcp" in names:
            if not child.alive():
                return [*reports, _setup_failed("mcp", options, "serve's process is gone")]
            surface = Surface("mcp", mcp_port, MCP_ROUTES, BODY_LIMITS["mcp"], runs=tuple(runs))
            health = _health_request(mcp_port, "/runs/run-nope/mcp")
            target = Target("mcp", child, surface, health, frozenset({401}), mcp_works)
            reports.append(await Session(target, options).run())
    return reports


async def _fuzz_a2a_serve(child: Child, options: FuzzOptions, token: str) -> list[ListenerReport]:
    try:
        found = await trio.to_thread.run_sync(read_stdout_until, child, _READY, 60.0)
    except RuntimeError as exc:
        return [_setup_failed("a2a-serve", options, str(exc))]
    port = int(found.group(1))
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(timeout=60.0) as client:
        task_id, problem = await send_message(client, base, token)
        if problem:
            message = f"SendMessage failed before any input: {problem}"
            return [_setup_failed("a2a-serve", options, message)]

        async def works() -> list[str]:
            problem = (await send_message(client, base, token))[1]
            return [problem] if problem else []

        surface = Surface(
            "a2a-serve",
            port,
            A2A_ROUTES,
            BODY_LIMITS["a2a-serve"],
            bearer=token,
            tasks=(task_id,),
        )
        # Its card, not /healthz: reading /healthz prunes the finished tasks' parent threads
        # (`parent_threads`), which a liveness request each second must not do for the server.
        health = _health_request(port, "/.well-known/agent-card.json")
        target = Target("a2a-serve", child, surface, health, frozenset({200}), works)
        return [await Session(target, options).run()]


def _setup_failed(name: str, options: FuzzOptions, message: str) -> ListenerReport:
    report = ListenerReport(name, seeds=list(options.seeds))
    report.fail("the listener starts and works", message)
    return report


# --- the command ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz.listeners", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="fuzzing time per listener and seed (10)"
    )
    parser.add_argument(
        "--seed", type=int, action="append", help="a seed (repeatable; default: one random)"
    )
    parser.add_argument("--only", choices=LISTENERS, action="append", help="one listener")
    parser.add_argument(
        "--input", type=int, action="append", metavar="I", help="replay input I of the seed"
    )
    parser.add_argument("--show", action="store_true", help="with --input: print, do not send")
    parser.add_argument("--workers", type=int, default=6, help="connections at once (6)")
    return parser


def show(seed: int, listener: str, index: int) -> str:
    """Input `index` of `seed` as it is drawn against a placeholder surface (port 1, one run)."""
    routes = {"serve": SERVE_ROUTES, "mcp": MCP_ROUTES, "a2a-serve": A2A_ROUTES}[listener]
    surface = Surface(
        listener,
        1,
        routes,
        BODY_LIMITS[listener],
        bearer="fuzz-token-fuzz-token" if listener == "a2a-serve" else None,
        runs=(("run-0123456789abcdef", "viewer-token"),) if listener != "a2a-serve" else (),
        tasks=("task-1",) if listener == "a2a-serve" else (),
    )
    probe = draw_probe(seed, listener, index, surface, True)
    lines = [f"input {index} of seed {seed} for {listener}: {probe.kind}, then {probe.then}"]
    lines += [f"  write {n}: {shown(write)}" for n, write in enumerate(probe.writes)]
    if probe.after_upgrade:
        lines.append(f"  after the upgrade: {shown(probe.after_upgrade)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seeds = tuple(args.seed or [random.SystemRandom().randrange(1, 2**31)])
    only = tuple(args.only or LISTENERS)
    inputs = tuple(args.input or ())
    if inputs and len(seeds) != 1:
        print("--input needs exactly one --seed", file=sys.stderr)
        return 2
    if args.seconds <= 0 or args.workers <= 0:
        print("--seconds and --workers must be positive", file=sys.stderr)
        return 2
    if args.show:
        for listener in only:
            for index in inputs or (0,):
                print(show(seeds[0], listener, index))
        return 0
    options = FuzzOptions(
        seconds=args.seconds, seeds=seeds, only=only, inputs=inputs, workers=args.workers
    )
    print(f"fuzz.listeners: seeds {', '.join(map(str, seeds))}; {', '.join(only)}", flush=True)
    reports = trio.run(fuzz_listeners, options)
    for report in reports:
        print(report.render(), flush=True)
    failed = sum(len(report.failures) for report in reports)
    print(f"fuzz.listeners: {len(reports)} listeners, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
