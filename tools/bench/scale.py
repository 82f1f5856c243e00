"""The scale benchmark (`python -m tools.bench scale`): how memory and time grow with delegations.

This module owns three measurements, each printed beside this machine's own limit measured in
the same run:

- Memory: at each size N (default 100, 1,000 and 5,000), one run with N concurrent delegations to an
  in-process agent that reports a status and a short message (7 journal entries) and then waits on
  an event, so every delegation stays active. Each size runs in a fresh child process (`python -m
  tools.bench.scale --memory-child N`), so no earlier size's freed heap hides its growth. Inside it:
  the bundled server (`tools.bench.sse`'s `_serve`: an Engine, a RunHost, `create_app`, Hypercorn)
  hosts the run; the resident set is read from `/proc/self/statm` after `gc.collect()` and glibc's
  `malloc_trim(0)`, before and after each step, and each step's growth is divided by its count. The
  steps, one on top of the other: the N delegations; N idle journal subscriptions
  (`journal.subscribe(after=head)`, each with a task parked in `receive_batch`: what the engine
  keeps per viewer); V = min(N, `MAX_SSE_VIEWERS`) idle SSE viewers (raw sockets in this process,
  `Last-Event-ID` at the head, so the server holds a subscription, an encoder, a Quart request and a
  Hypercorn connection for each, and sends nothing but the `retry:` preamble; the encoder has been
  fed the run so far, so its state for the run's delegations counts); and the floors: N bare Trio
  tasks parked on one event (the least an active delegation could cost), V loopback TCP connections
  with a parked task at each end (the least an SSE viewer could cost, client end included, as it is
  in the SSE row). The same delegations are measured again with a tiny replay window
  (`TINY_WINDOW_EVENTS`), so the replay window's share per delegation is the difference; the goal
  (under `GOAL_DELEGATION_KIB` per delegation) is checked on the tiny window's figure.
- The whole path: for each step d (default 1, 10, 100, 1,000), a run whose parent starts d
  delegations to `bench a2a`'s raw A2A remote in its own process (`python -m tools.bench.a2a
  --serve`), each streaming `chunks` text chunks; the engine maps them into the run's journal (a
  stamping store notes `time.perf_counter()` per cursor, as in `bench sse`) and one httpx SSE viewer
  (`bench sse`'s reader, in this process) reads the run over the real server. Per step: chunks/s
  from the parent's go to the viewer's last byte, per-chunk time, and the append -> viewer latency
  (p50, p99) of every entry appended after the go; beside it two limits on the same remote streams,
  d concurrent raw httpx readers (the wire, nothing parsed) and d concurrent streams of the bare
  a2a-sdk client (the SDK under the engine's A2A target). The remote writes each stream at once, so
  the load saturates this process and the latency is mostly queueing behind the burst. A step under
  `SHORT_STEP` seconds is run `SHORT_STEP_RUNS` times (median kept), the others `repeat` times. The
  text of every delegation at the viewer is checked against what the remote sent. The growth verdict
  compares the per-chunk time at the largest step with the one at the step nearest 10
  (`GOAL_GROWTH`) and fits time = a * chunks^k over the steps from 10 on; a plot (`--plot FILE`,
  matplotlib, optional extra `plot`) draws per-chunk time and p99 against d.
- Cancel cascade: `bench a2a`'s cascade at each size (default 100 and 1,000): that many
  delegations WORKING on the remote's `hang` agent, `run.cancel()`, the time until the last
  CancelTask reaches the remote (stamped there on the same monotonic clock); beside it
  `bench a2a`'s floors, the same number of concurrent CancelTask requests on raw sockets, on
  one httpx client and on the bare a2a-sdk client. The target uses its own pools, as a host's
  does (`bench a2a`'s `_engine_cancel_once`): their sharding is part of what is measured.

`--sizes ""` or `--steps ""` skips that section (e.g. only the cascade: `--sizes "" --steps ""`).

The remote, its streams, the SSE server, the viewer and the stamping store are `bench a2a`'s
and `bench sse`'s own (imported from those modules, private names included), so the three
benchmarks measure the same things the same way.

The measuring process, the server and the viewer share one Trio loop; the remote runs in its
own process, as a real one would. Nothing here may change engine or server behaviour to look
faster: they are driven through their public surface, and counters are read from the
journal's private lists, as `tools.bench.sse` does. Every phase has a deadline, so a broken
engine shows as a failed check, never a hang; timings are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import logging
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, TextIO

import attrs
import httpx
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.types import AgentCard

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AgentSpec,
    DelegationHandle,
    DelegationRequest,
    EngineLimits,
    JournalStore,
    MemoryJournalStore,
    Run,
    RunJournal,
    Status,
)
from tools.bench.a2a import (
    _FLOORS,
    GOAL_CANCEL_P99_MS,
    WARMUP_EVENTS,
    _cancel_floor_once,
    _CancelRun,
    _cascade_pool,
    _engine_cancel_once,
    _fetch_card,
    _http,
    _message,
    _remote_process,
    _RemoteFailed,
    _RemoteProcess,
)
from tools.bench.a2a import _delta as _remote_delta
from tools.bench.journal import percentile, release_free_memory, rss_kib
from tools.bench.sse import (
    _content,
    _httpx_reader,
    _limits,
    _Read,
    _serve,
    _StampingStore,
    _start_run,
)

__all__ = ["bench_scale"]

#: Goals this benchmark checks.
GOAL_DELEGATION_KIB: Final = 50.0
#: Per-chunk time at the largest step over the step nearest 10: at most this is "linear or
#: better" (1.0 is exactly linear; the margin is this shared machine's run-to-run noise).
GOAL_GROWTH: Final = 1.25

#: Default sizes (memory), steps (the whole path) and cascade sizes; and `--quick`'s.
SIZES: Final = (100, 1_000, 5_000)
STEPS: Final = (1, 10, 100, 1_000)
CASCADE: Final = (100, 1_000)
CHUNKS: Final = 100
QUICK_SIZES: Final = (20, 100)
QUICK_STEPS: Final = (1, 4, 16)
QUICK_CASCADE: Final = (20,)
QUICK_CHUNKS: Final = 20
#: SSE viewers per memory size: at most this many (each resumes at the head, which replays the
#: run's journal into its encoder: cheap per viewer, but not 5,000 times over in a bench).
MAX_SSE_VIEWERS: Final = 100
#: The tiny replay window (the default is `EngineLimits()`'s).
TINY_WINDOW_EVENTS: Final = 16
TINY_WINDOW_BYTES: Final = 64 << 10
#: A whole-path step shorter than this (s) is run `SHORT_STEP_RUNS` times, median kept.
SHORT_STEP: Final = 0.5
SHORT_STEP_RUNS: Final = 9
#: Deadlines: a memory child process, one whole-path step, one cascade, one floor.
MEMORY_DEADLINE: Final = 300.0
STEP_DEADLINE: Final = 180.0
CASCADE_DEADLINE: Final = 90.0
#: Where the plot goes unless `--plot` says otherwise.
PLOT_DEFAULT: Final = os.path.join(tempfile.gettempdir(), "subagent-engine-bench-scale.png")
#: How many SSE viewers / floor connections connect at once (a burst of thousands of connects
#: only measures the listen backlog).
CONNECT_CONCURRENCY: Final = 50

_AGENT: Final = "idle"
_ENTRIES_PER_DELEGATION: Final = 7  # started, status, text start, 3 deltas, text end
#: Where `python -m tools.bench.scale` resolves: the checkout holding the `tools` folder.
_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- memory: the child process -------------------------------------------------------------------


async def _sample() -> float:
    await trio.sleep(0.05)  # let whatever was just woken run to its next park
    release_free_memory()
    return rss_kib()


@attrs.define
class _Round:
    """One round of idle delegations: how many, how many have said their piece, and the event
    they wait on."""

    expected: int
    emitted: int = 0
    all_emitted: trio.Event = attrs.field(factory=trio.Event)
    go: trio.Event = attrs.field(factory=trio.Event)
    release: trio.Event = attrs.field(factory=trio.Event)


class _IdleAgents:
    """The in-process agent of the memory figures: a status and a three-delta message, then it
    waits for the round's release (so its delegation stays active), then answers."""

    def __init__(self) -> None:
        self.round = _Round(0)

    async def agent(self, task: LocalTask) -> str:
        round_ = self.round
        await task.status("working", "looking it up")
        await task.say("a short ", "answer, ", "then it waits")
        round_.emitted += 1
        if round_.emitted == round_.expected:
            round_.all_emitted.set()
        await round_.release.wait()
        return "done"


class _IdleParent:
    """Starts the round's delegations on its go, waits for their release, then ends the run."""

    def __init__(self, round_: _Round) -> None:
        self.round = round_
        self.run_handle: Run | None = None
        self.handles: list[DelegationHandle] = []

    async def run(self, run: Run, prompt: str) -> None:
        self.run_handle = run
        await self.round.go.wait()
        self.handles = [
            run.start_delegation(
                DelegationRequest(agent=_AGENT, objective=f"wait {n}", parent_tool_call_id=f"c{n}")
            )
            for n in range(self.round.expected)
        ]
        for handle in self.handles:
            await handle.wait()


async def _idle_subscriber(journal: RunJournal, attached: list[int]) -> None:
    """A journal subscription at the head with a task parked in `receive_batch`."""
    async with journal.subscribe(journal.head) as sub:
        attached[0] += 1
        try:
            while True:
                await sub.receive_batch()
        except trio.EndOfChannel:
            return


async def _idle_sse_viewer(
    base: str, path: str, token: str, after: int, gate: trio.Semaphore, attached: list[int]
) -> None:
    """An SSE viewer on a raw socket resuming at `after` (the head); reads whatever comes."""
    host, _, port = base.removeprefix("http://").partition(":")
    request = (
        f"GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\nauthorization: Bearer {token}\r\n"
        f"accept: text/event-stream\r\nlast-event-id: {after}\r\n\r\n"
    ).encode()
    async with gate:
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise RuntimeError("an SSE viewer's connection closed before its headers")
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            status = head.split(b"\r\n", 1)[0]
            raise RuntimeError(f"an SSE viewer got {status!r}")
    attached[0] += 1
    async with stream:
        while await stream.receive_some(65536):
            pass


async def _floor_connections(
    count: int, nursery: trio.Nursery, gate: trio.Semaphore, attached: list[int]
) -> None:
    """`count` loopback TCP connections to a bare listener, a parked task at each end."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def server_end(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(4096):
                pass

    await nursery.start(trio.serve_listeners, server_end, listeners)

    async def client_end() -> None:
        async with gate:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        attached[0] += 1
        async with stream:
            while await stream.receive_some(4096):
                pass

    for _ in range(count):
        nursery.start_soon(client_end)


async def _wait_for(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 (counters, no event to wait on)
        await trio.sleep(0.01)


async def _memory_child(delegations: int, tiny: bool, viewers: int) -> dict[str, Any]:
    """The memory figures of one size, in this (fresh) process; see the module docstring."""
    n = delegations
    window = (
        {"replay_window_events": TINY_WINDOW_EVENTS, "replay_window_bytes": TINY_WINDOW_BYTES}
        if tiny
        else {}
    )
    limits = EngineLimits(
        max_concurrent_per_run=max(8, n), max_concurrent_global=max(256, n), **window
    )
    agents = _IdleAgents()
    spec = AgentSpec(key=_AGENT, display_name="Idle", target=InProcessTarget(agents.agent))
    stores: list[MemoryJournalStore] = []

    def store_factory(run_id: str, limits: EngineLimits) -> JournalStore:
        store = MemoryJournalStore(
            run_id, max_events=limits.replay_window_events, max_bytes=limits.replay_window_bytes
        )
        stores.append(store)
        return store

    parents: list[_IdleParent] = []
    figures: dict[str, Any] = {"delegations": n, "tiny": tiny, "viewers": viewers}
    gate = trio.Semaphore(CONNECT_CONCURRENCY)

    async def sample(key: str, measure: bool) -> None:
        if measure:
            figures[key] = await _sample()

    async with _serve(lambda: parents.pop(0), limits, [spec], store_factory) as (host, _, base):

        async def one_round(count: int, sse_viewers: int, measure: bool) -> None:
            """A run of `count` idle delegations; unless measuring the tiny window, `count`
            idle subscriptions and `sse_viewers` idle SSE viewers of it; when measuring, the
            floors on top. Every step is sampled; then everything is released."""
            round_ = agents.round = _Round(count)
            parent = _IdleParent(round_)
            parents.append(parent)
            async with httpx.AsyncClient() as http:
                run_id, token = await _start_run(http, base)
            journal = host.engine.journal(run_id)
            assert journal is not None
            store = stores[-1]
            async with trio.open_nursery() as nursery:
                await sample("rss_baseline_kib", measure)
                round_.go.set()
                await round_.all_emitted.wait()
                assert parent.run_handle is not None
                await parent.run_handle.flush()
                await sample("rss_delegations_kib", measure)
                figures["journal_head"] = journal.head
                figures["window_entries"] = journal.head - store.first_cursor + 1
                figures["window_bytes"] = store.window_bytes
                figures["retained_critical"] = len(store._critical)
                figures["active_delegations"] = host.engine.active_delegations
                if not (measure and tiny):
                    subscribed = [0]
                    for _ in range(count):
                        nursery.start_soon(_idle_subscriber, journal, subscribed)
                    await _wait_for(
                        lambda: (
                            subscribed[0] == count
                            and journal.statistics().live_subscribers == count
                        )
                    )
                    await sample("rss_subscriptions_kib", measure)
                    path = f"/runs/{run_id}/events"
                    attached = [0]
                    for _ in range(sse_viewers):
                        nursery.start_soon(
                            _idle_sse_viewer, base, path, token, journal.head, gate, attached
                        )
                    await _wait_for(
                        lambda: (
                            attached[0] == sse_viewers
                            and journal.statistics().live_subscribers == count + sse_viewers
                        )
                    )
                    await sample("rss_sse_kib", measure)
                if measure and not tiny:
                    parked = trio.Event()
                    for _ in range(count):
                        nursery.start_soon(parked.wait)
                    await sample("rss_tasks_kib", measure)
                    connected = [0]
                    await _floor_connections(sse_viewers, nursery, gate, connected)
                    await _wait_for(lambda: connected[0] == sse_viewers)
                    await sample("rss_connections_kib", measure)
                round_.release.set()
                nursery.cancel_scope.cancel()
            await journal.wait_ended()
            results = host.engine.results(run_id)
            figures["completed"] = sum(r.status == Status.COMPLETED for r in results)

        # Warm-up: imports, code paths and the server's first requests, unmeasured and small.
        await one_round(2, 1, measure=False)
        release_free_memory()
        await one_round(n, viewers, measure=True)
    figures["rss_peak_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return figures


def _memory_child_main(argv: Sequence[str]) -> int:
    """`python -m tools.bench.scale --memory-child N [--tiny] [--viewers V]`: one size's memory
    figures in a fresh process, printed as one `RESULT <json>` line."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.scale",
        description="one memory measurement of `python -m tools.bench scale`, in its own process",
    )
    parser.add_argument("--memory-child", type=int, required=True, metavar="N")
    parser.add_argument("--tiny", action="store_true", help="a tiny replay window")
    parser.add_argument("--viewers", type=int, default=0, help="idle SSE viewers")
    args = parser.parse_args(argv)
    if args.memory_child < 1 or args.viewers < 0:
        parser.error("N must be at least 1 and --viewers at least 0")
    _raise_file_limit()
    _quiet_hypercorn()
    figures = trio.run(_memory_child, args.memory_child, args.tiny, args.viewers)
    print("RESULT " + json.dumps(figures), flush=True)
    return 0


def _warnings_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def _quiet_hypercorn() -> None:
    """Hypercorn announces every server it starts (one per step) at INFO, and resets its
    logger's level each time; a filter stays, and keeps its warnings."""
    logger = logging.getLogger("hypercorn.error")
    if _warnings_only not in logger.filters:
        logger.addFilter(_warnings_only)


def _raise_file_limit() -> None:
    """Thousands of sockets need thousands of descriptors: raise the soft limit to the hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- memory: the measuring side ------------------------------------------------------------------


@attrs.frozen
class _Memory:
    """One size's figures: the default window's child and the tiny window's."""

    delegations: int
    viewers: int
    default: dict[str, Any]
    tiny: dict[str, Any]

    def per(self, figures: dict[str, Any], before: str, after: str, count: int) -> float:
        """KiB per item: growth of the resident set between two samples over `count`."""
        if before not in figures or after not in figures or count < 1:
            return math.nan
        return float(figures[after] - figures[before]) / count


def _memory_child_run(delegations: int, tiny: bool, viewers: int) -> dict[str, Any]:
    """Run one memory child to its end (deadline `MEMORY_DEADLINE`); its figures, or
    `{"problem": ...}`."""
    command = [sys.executable, "-m", "tools.bench.scale", "--memory-child", str(delegations)]
    command += ["--viewers", str(viewers)] + (["--tiny"] if tiny else [])
    label = f"memory at {delegations:,} delegations ({'tiny' if tiny else 'default'} window)"
    try:
        done = subprocess.run(
            command, capture_output=True, cwd=_ROOT, timeout=MEMORY_DEADLINE, check=False
        )
    except subprocess.TimeoutExpired:
        return {"problem": f"FAILED {label}: no result within {MEMORY_DEADLINE:g} s"}
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("RESULT "):
            figures: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
            return figures
    tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
    return {"problem": f"FAILED {label}: exit code {done.returncode}: {' | '.join(tail)}"}


def _measure_memory(sizes: Sequence[int], out: TextIO) -> tuple[list[_Memory], list[str]]:
    results: list[_Memory] = []
    problems: list[str] = []
    for n in sizes:
        viewers = min(n, MAX_SSE_VIEWERS)
        default = _memory_child_run(n, False, viewers)
        tiny = _memory_child_run(n, True, 0)
        for figures in (default, tiny):
            if "problem" in figures:
                problems.append(figures["problem"])
            elif figures.get("completed") != n or figures.get("active_delegations") != n:
                problems.append(
                    f"FAILED memory at {n:,}: {figures.get('active_delegations')} active, "
                    f"{figures.get('completed')} completed of {n:,}"
                )
        results.append(_Memory(n, viewers, default, tiny))
        print(f"  memory at {n:,} delegations measured", file=out, flush=True)
    return results, problems


def _print_memory(results: Sequence[_Memory], out: TextIO) -> None:
    print(
        "memory: KiB of resident set per item (growth / count; gc.collect and malloc_trim "
        "before each sample), one fresh process per size",
        file=out,
    )
    header = (
        f"{'delegations':>11} {'deleg tiny':>10} {'deleg dflt':>10} {'window':>7} "
        f"{'task floor':>10} {'subscr':>7} {'SSE viewers':>11} {'SSE':>7} {'conn floor':>10} "
        f"{'entries':>8} {'in window':>9} {'window est':>10}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for m in results:
        n = m.delegations
        tiny = m.per(m.tiny, "rss_baseline_kib", "rss_delegations_kib", n)
        dflt = m.per(m.default, "rss_baseline_kib", "rss_delegations_kib", n)
        row = [
            f"{n:>11,}",
            f"{tiny:>10.1f}",
            f"{dflt:>10.1f}",
            f"{dflt - tiny:>7.1f}",
            f"{m.per(m.default, 'rss_sse_kib', 'rss_tasks_kib', n):>10.1f}",
            f"{m.per(m.default, 'rss_delegations_kib', 'rss_subscriptions_kib', n):>7.1f}",
            f"{m.viewers:>11,}",
            f"{m.per(m.default, 'rss_subscriptions_kib', 'rss_sse_kib', m.viewers):>7.1f}",
            f"{m.per(m.default, 'rss_tasks_kib', 'rss_connections_kib', m.viewers):>10.1f}",
            f"{m.default.get('journal_head', 0):>8,}",
            f"{m.default.get('window_entries', 0):>9,}",
            f"{m.default.get('window_bytes', 0) / 1024 / n:>10.2f}",
        ]
        print(" ".join(row), file=out)
    print(
        f"deleg tiny / dflt: per active delegation with a {TINY_WINDOW_EVENTS}-entry replay "
        f"window / the default ({EngineLimits().replay_window_events:,} entries); "
        "window: their difference (the replay window's share per delegation); task "
        "floor: a bare Trio task parked on an event; subscr: an idle journal subscription at "
        "the head with its task (one per delegation); SSE: an idle SSE viewer resuming at the "
        "head (server and raw-socket client in this process); conn floor: a loopback TCP "
        "connection with a parked task at each end; entries: the run's journal (deltas merge "
        "under back-pressure), in window: those the default window holds, window est: their "
        "weight as the engine counts it, KiB per delegation",
        file=out,
    )
    worst = max(
        (m.per(m.tiny, "rss_baseline_kib", "rss_delegations_kib", m.delegations) for m in results),
        default=math.nan,
    )
    sse = [
        (m.delegations, m.per(m.default, "rss_subscriptions_kib", "rss_sse_kib", m.viewers))
        for m in results
    ]
    sse = [(n, kib) for n, kib in sse if math.isfinite(kib)]
    if len(sse) >= 2 and sse[-1][0] > sse[0][0]:
        per_delegation = (sse[-1][1] - sse[0][1]) / (sse[-1][0] - sse[0][0]) * 1024
        print(
            f"an idle SSE viewer grows with the run it watches: {per_delegation:,.0f} bytes per "
            f"delegation of the run ({sse[0][0]:,} -> {sse[-1][0]:,} delegations), over "
            f"{sse[0][1] - sse[0][0] * per_delegation / 1024:,.1f} KiB of its own",
            file=out,
        )
    verdict = "MET" if worst < GOAL_DELEGATION_KIB else "NOT MET"
    print(
        f"goal: < {GOAL_DELEGATION_KIB:g} KiB per active delegation, replay window excluded: "
        f"{verdict} (worst {worst:.1f} KiB)",
        file=out,
        flush=True,
    )


# -- the whole path ------------------------------------------------------------------------------


class _PathParent:
    """Starts `delegations` delegations to the remote's streaming agent on its go, waits for
    every result, and ends the run."""

    def __init__(self, agent: str, delegations: int, go: trio.Event) -> None:
        self.agent = agent
        self.delegations = delegations
        self.go = go
        self.completed = 0

    async def run(self, run: Run, prompt: str) -> None:
        await self.go.wait()
        handles = [
            run.start_delegation(
                DelegationRequest(
                    agent=self.agent, objective=f"stream {n}", parent_tool_call_id=f"call-{n}"
                )
            )
            for n in range(self.delegations)
        ]
        for handle in handles:
            result = await handle.wait()
            self.completed += result.status == Status.COMPLETED


@attrs.frozen
class _Step:
    delegations: int
    chunks: int  # per delegation
    seconds: float  # from the go to the viewer's last byte
    entries: int  # journal entries appended after the go
    messages: int  # SSE messages the viewer read
    latencies: list[float]  # seconds, append -> viewer, one per entry appended after the go
    completed: int  # delegations whose result is completed
    texts_complete: int  # delegations whose text at the viewer is the remote's, whole
    complete: bool  # the viewer read the journal's last cursor
    catch_ups: int  # times the viewer's subscription read on from the replay window

    @property
    def total_chunks(self) -> int:
        return self.delegations * self.chunks


async def _path_step(remote: _RemoteProcess, agent: str, delegations: int, chunks: int) -> _Step:
    """One step of the whole path; see the module docstring."""
    http = _http(connections=_cascade_pool(delegations))
    target = A2ATarget(A2AAgentConfig(card_url=remote.card_url(agent)), http=http)
    spec = AgentSpec(key=agent, display_name="Streamer", protocol="a2a", target=target)
    limits = _limits(delegations)
    stores: list[_StampingStore] = []

    def store_factory(run_id: str, limits: EngineLimits) -> JournalStore:
        store = _StampingStore(
            MemoryJournalStore(
                run_id, max_events=limits.replay_window_events, max_bytes=limits.replay_window_bytes
            )
        )
        stores.append(store)
        return store

    go = trio.Event()
    parent = _PathParent(agent, delegations, go)
    read: list[_Read] = []
    try:
        await target.prepare()  # the card fetch stays outside the clock
        async with _serve(lambda: parent, limits, [spec], store_factory) as (host, _, base):
            async with httpx.AsyncClient() as client:
                run_id, token = await _start_run(client, base)
            journal = host.engine.journal(run_id)
            assert journal is not None
            ready = trio.Event()

            async def viewer() -> None:
                url = f"{base}/runs/{run_id}/events"
                read.append(await _httpx_reader(url, token, ready, stamp=True, keep=True))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(viewer)
                await ready.wait()
                await _wait_for(lambda: journal.statistics().live_subscribers >= 1)
                subscriptions = list(journal._live)
                started = time.perf_counter()
                go.set()
            head = journal.head
    finally:
        await target.aclose()
        await http.aclose()
    got = read[0]
    stamps = stores[0].stamps
    latencies = []
    complete = got.last_id == head
    for cursor, stamped in stamps.items():
        if stamped < started:
            continue  # the run's start, journaled before the viewer connected
        index = bisect.bisect_left(got.cursors, cursor)
        if index == len(got.cursors):
            complete = False
            continue
        latencies.append(got.arrivals[index] - stamped)
    expected = "".join(_remote_delta(n) for n in range(chunks))
    texts = _content(got.body).texts
    return _Step(
        delegations=delegations,
        chunks=chunks,
        seconds=got.ended_at - started,
        entries=len(latencies),
        messages=got.messages,
        latencies=latencies,
        completed=parent.completed,
        texts_complete=sum(text == expected for text in texts.values()),
        complete=complete,
        catch_ups=sum(sub.catch_ups for sub in subscriptions),
    )


async def _raw_step(remote: _RemoteProcess, agent: str, delegations: int) -> tuple[float, int]:
    """The limit of a step: `delegations` concurrent raw httpx readers of the remote's stream
    (`aiter_lines`, counting `data:` lines, nothing parsed); (seconds, items read)."""
    request = {"jsonrpc": "2.0", "id": "raw", "method": "SendStreamingMessage", "params": {}}
    counts: list[int] = []
    async with _http(connections=_cascade_pool(delegations)) as client:

        async def one() -> None:
            count = 0
            async with client.stream("POST", remote.rpc_url(agent), json=request) as response:
                async for line in response.aiter_lines():
                    count += line.startswith("data:")
            counts.append(count)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(delegations):
                nursery.start_soon(one)
        seconds = time.perf_counter() - start
    return seconds, sum(counts)


async def _bare_step(card: AgentCard, delegations: int) -> tuple[float, int]:
    """The SDK's own limit at a step: `delegations` concurrent streams read with the bare
    a2a-sdk client (one client, one httpx pool), counting the items it yields."""
    counts: list[int] = []
    async with _http(connections=_cascade_pool(delegations)) as client:
        sdk = ClientFactory(ClientConfig(streaming=True, httpx_client=client)).create(card)

        async def one() -> None:
            count = 0
            async with aclosing(sdk.send_message(_message())) as stream:  # type: ignore[type-var]
                async for _ in stream:
                    count += 1
            counts.append(count)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(delegations):
                nursery.start_soon(one)
        seconds = time.perf_counter() - start
        await sdk.close()
    return seconds, sum(counts)


@attrs.frozen
class _StepFigures:
    delegations: int
    engine: list[_Step]
    raw: list[tuple[float, int]]
    bare: list[tuple[float, int]]

    @property
    def engine_seconds(self) -> float:
        return statistics.median(s.seconds for s in self.engine) if self.engine else math.nan

    @property
    def raw_seconds(self) -> float:
        return statistics.median(s for s, _ in self.raw) if self.raw else math.nan

    @property
    def bare_seconds(self) -> float:
        return statistics.median(s for s, _ in self.bare) if self.bare else math.nan


# -- the run -------------------------------------------------------------------------------------


@attrs.define
class _Figures:
    steps: list[_StepFigures] = attrs.field(factory=list)
    cancels: dict[int, list[_CancelRun]] = attrs.field(factory=dict)
    floors: dict[int, dict[str, list[tuple[float, int]]]] = attrs.field(factory=dict)
    problems: list[str] = attrs.field(factory=list)


async def _measure_remote(
    remote: _RemoteProcess,
    steps: Sequence[int],
    chunks: int,
    cascade: Sequence[int],
    repeat: int,
    short_step_runs: int,
    out: TextIO,
) -> _Figures:
    figures = _Figures()

    async def timed(label: str, deadline: float, measure: Callable[[], Awaitable[Any]]) -> Any:
        gc.collect()
        with trio.move_on_after(deadline):
            return await measure()
        figures.problems.append(f"FAILED {label}: no end within {deadline:g} s")
        return None

    # Warm-up: imports, code paths and the server's first requests, unclocked.
    warmup = min(chunks, WARMUP_EVENTS)
    await timed("warm-up", STEP_DEADLINE, partial(_path_step, remote, "warmup", 1, warmup))
    await timed("warm-up", STEP_DEADLINE, partial(_raw_step, remote, "warmup", 1))
    async with _http() as client:
        cards = {a: await _fetch_card(client, remote, a) for a in ("firehose", "warmup", "hang")}
    await timed("warm-up", STEP_DEADLINE, partial(_bare_step, cards["warmup"], 1))
    for d in steps:
        step = _StepFigures(d, [], [], [])
        runs = repeat
        while len(step.engine) < runs:
            raw = await timed(
                f"raw readers, {d:,} streams",
                STEP_DEADLINE,
                partial(_raw_step, remote, "firehose", d),
            )
            if raw is not None:
                step.raw.append(raw)
            bare = await timed(
                f"bare a2a-sdk client, {d:,} streams",
                STEP_DEADLINE,
                partial(_bare_step, cards["firehose"], d),
            )
            if bare is not None:
                step.bare.append(bare)
            engine = await timed(
                f"whole path, {d:,} delegations",
                STEP_DEADLINE,
                partial(_path_step, remote, "firehose", d, chunks),
            )
            if engine is None:
                break
            step.engine.append(engine)
            if len(step.engine) == 1 and engine.seconds < SHORT_STEP:
                runs = max(repeat, short_step_runs)  # a few ms: a median of several
        figures.steps.append(step)
        print(f"  whole path at {d:,} delegations measured", file=out, flush=True)
    hang = cards["hang"]
    for n in cascade:
        figures.cancels[n] = []
        figures.floors[n] = {floor: [] for floor in _FLOORS}
        for _ in range(repeat):
            for floor in _FLOORS:
                outcome = await timed(
                    f"{floor} cancel floor, {n:,} requests",
                    CASCADE_DEADLINE,
                    partial(_cancel_floor_once, remote, hang, n, floor),
                )
                if outcome is not None:
                    figures.floors[n][floor].append(outcome)
            cancel = await timed(
                f"cancel cascade, {n:,} delegations",
                CASCADE_DEADLINE,
                partial(_engine_cancel_once, remote, n),
            )
            if cancel is not None:
                figures.cancels[n].append(cancel)
        print(f"  cancel cascade at {n:,} delegations measured", file=out, flush=True)
    return figures


# -- report --------------------------------------------------------------------------------------


def _us_per_chunk(seconds: float, chunks: int) -> float:
    return seconds / chunks * 1e6 if chunks else math.nan


def _growth(figures: _Figures, chunks: int) -> tuple[float, float, int, int]:
    """(per-chunk time at the largest step / at the step nearest 10, the exponent k of a
    least-squares fit seconds = a * chunks^k over the steps from 10 delegations on, and the two
    steps compared)."""
    measured = [s for s in figures.steps if s.engine]
    if len(measured) < 2:
        return math.nan, math.nan, 0, 0
    base = min(measured[:-1], key=lambda s: abs(math.log(s.delegations / 10)))
    last = measured[-1]
    ratio = _us_per_chunk(last.engine_seconds, last.delegations * chunks) / _us_per_chunk(
        base.engine_seconds, base.delegations * chunks
    )
    fitted = [s for s in measured if s.delegations >= base.delegations]
    xs = [math.log(s.delegations * chunks) for s in fitted]
    ys = [math.log(s.engine_seconds) for s in fitted]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = (
        sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        if spread
        else math.nan
    )
    return ratio, slope, base.delegations, last.delegations


def _print_path(
    figures: _Figures, chunks: int, repeat: int, short_step_runs: int, out: TextIO
) -> None:
    print(
        f"whole path: d delegations to the remote, each streaming {chunks:,} text chunks at "
        "once (a saturating load) -> engine -> journal -> one SSE viewer; the limits: d "
        "concurrent raw httpx readers of the same streams (the wire), and the bare a2a-sdk "
        "client (the SDK the engine's A2A target is built on); clock from the go to the last "
        f"byte or item read; median of {max(repeat, short_step_runs)} run(s) for steps under "
        f"{SHORT_STEP:g} s, of {repeat} for the others",
        file=out,
    )
    header = (
        f"{'delegations':>11} {'runs':>4} {'chunks':>8} {'raw ch/s':>10} {'sdk ch/s':>9} "
        f"{'engine s':>9} {'ch/s':>8} {'us/ch':>6} {'vs sdk':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} {'entries':>8} {'texts':>11}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for step in figures.steps:
        d = step.delegations
        total = d * chunks
        engine_us = _us_per_chunk(step.engine_seconds, total)
        ms = [x * 1000 for run in step.engine for x in run.latencies]
        last = step.engine[-1] if step.engine else None
        print(
            f"{d:>11,} {len(step.engine):>4} {total:>8,} {total / step.raw_seconds:>10,.0f} "
            f"{total / step.bare_seconds:>9,.0f} {step.engine_seconds:>9.3f} "
            f"{total / step.engine_seconds:>8,.0f} {engine_us:>6.1f} "
            f"{step.bare_seconds / step.engine_seconds:>6.2f}x {percentile(ms, 0.5):>7.2f} "
            f"{percentile(ms, 0.99):>7.2f} {max(ms, default=math.nan):>7.2f} "
            f"{last.entries if last else 0:>8,} "
            f"{f'{last.texts_complete if last else 0:,}/{d:,}':>11}",
            file=out,
        )
        for n, run in enumerate(step.engine, 1):
            if run.completed != d or run.texts_complete != d or not run.complete:
                figures.problems.append(
                    f"LOST whole path at {d:,}, run {n}: {run.completed:,}/{d:,} completed, "
                    f"{run.texts_complete:,}/{d:,} texts whole at the viewer, last cursor "
                    f"{'read' if run.complete else 'NOT read'}"
                )
        for label, runs in (("raw readers", step.raw), ("bare a2a-sdk client", step.bare)):
            for n, (_, items) in enumerate(runs, 1):
                if items != d * (chunks + 2):
                    figures.problems.append(
                        f"LOST {label} at {d:,}, run {n}: {items:,} items of {d * (chunks + 2):,}"
                    )
    catch_ups = sum(run.catch_ups for step in figures.steps for run in step.engine)
    print(
        "ch/s: remote chunks delivered per second (engine: to the SSE viewer); us/ch: the "
        "engine's wall time per chunk; vs sdk: engine ch/s over the bare client's; p50/p99/max: "
        "journal append -> the viewer's read of it, every entry appended after the go, all "
        "runs (under saturation: queueing behind the burst); entries: journal entries "
        "(lifecycle included, adjacent deltas merged under back-pressure); texts: delegations "
        f"whose text at the viewer is the remote's, whole; viewer catch-ups from the replay "
        f"window: {catch_ups:,}",
        file=out,
    )
    ratio, slope, base, largest = _growth(figures, chunks)
    if math.isnan(ratio):
        print("goal: cost grows linearly or better: not measured (needs two steps)", file=out)
        return
    verdict = "MET" if ratio <= GOAL_GROWTH else "NOT MET"
    shape = "better than linear" if ratio < 1 else "linear" if ratio <= GOAL_GROWTH else "worse"
    print(
        f"goal: cost grows linearly or better (per-chunk time at {largest:,} delegations <= "
        f"{GOAL_GROWTH:g}x the one at {base:,}): {verdict} (ratio {ratio:.2f}: {shape}; fit "
        f"time ~ chunks^{slope:.2f} from {base:,} delegations on, 1.00 = linear)",
        file=out,
        flush=True,
    )


def _print_cascade(figures: _Figures, repeat: int, out: TextIO) -> None:
    print(
        "cancel cascade: n delegations WORKING on the remote's `hang` agent, then run.cancel(); "
        "the time to each CancelTask's arrival at the remote (stamped there, same monotonic "
        "clock); the floors: n concurrent CancelTask requests sent on raw sockets, with one "
        "httpx client, with the bare a2a-sdk client, first send to last arrival",
        file=out,
    )
    header = (
        f"{'delegations':>11} {'sockets ms':>10} {'httpx ms':>9} {'a2a-sdk ms':>10} "
        f"{'last ms':>8} {'last max':>8} {'each p99':>8} {'closed ms':>9} {'ms/100':>7} "
        f"{'confirmed':>11}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for n, runs in figures.cancels.items():
        floors = [
            percentile([s for s, _ in figures.floors[n][floor]], 0.5) * 1000 for floor in _FLOORS
        ]
        last = [r.to_last_cancel for r in runs]
        each = [a for r in runs for a in r.arrivals]
        closed = [r.to_closed for r in runs]
        confirmed = sum(r.confirmed for r in runs)
        p50 = percentile(last, 0.5) * 1000
        print(
            f"{n:>11,} {floors[0]:>10.1f} {floors[1]:>9.1f} {floors[2]:>10.1f} {p50:>8.1f} "
            f"{max(last, default=math.nan) * 1000:>8.1f} {percentile(each, 0.99) * 1000:>8.1f} "
            f"{percentile(closed, 0.5) * 1000:>9.1f} {p50 / n * 100:>7.1f} "
            f"{f'{confirmed:,}/{n * len(runs):,}':>11}",
            file=out,
        )
        for k, run in enumerate(runs, 1):
            if run.working < n or run.confirmed < n or run.cancels_received < n:
                figures.problems.append(
                    f"FAILED cancel cascade at {n:,}, run {k}: {run.working:,} WORKING, "
                    f"{run.confirmed:,} confirmed, {run.cancels_received:,} CancelTask received"
                )
        for floor in _FLOORS:
            for k, (_, received) in enumerate(figures.floors[n][floor], 1):
                if received < n:
                    figures.problems.append(
                        f"FAILED {floor} floor at {n:,}, run {k}: {received:,}/{n:,} received"
                    )
    print(
        "floors and last: p50 over the runs; last: run.cancel() -> the last CancelTask; each: "
        "-> every CancelTask; closed: -> the run's block exited; ms/100: last per 100 "
        f"delegations; confirmed: cancelled with remote_cancel=confirmed, over {repeat} run(s)",
        file=out,
    )
    if figures.cancels:
        n = max(figures.cancels)
        p99 = percentile([r.to_last_cancel for r in figures.cancels[n]], 0.99)
        verdict = "MET" if p99 < GOAL_CANCEL_P99_MS / 1000 else "NOT MET"
        print(
            f"goal (bench a2a's, at {n:,} delegations): run.cancel() -> last CancelTask p99 < "
            f"{GOAL_CANCEL_P99_MS:g} ms: {verdict} (p99 {p99 * 1000:.1f} ms)",
            file=out,
            flush=True,
        )


def _plot(figures: _Figures, chunks: int, path: str) -> str:
    """Per-chunk time and latency against delegations, as a PNG at `path`; what happened."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot: skipped, matplotlib is not installed (pip install 'subagent-engine[plot]')"
    steps = [s for s in figures.steps if s.engine]
    if not steps:
        return "plot: skipped, no step was measured"
    x = [s.delegations for s in steps]
    engine = [_us_per_chunk(s.engine_seconds, s.delegations * chunks) for s in steps]
    raw = [_us_per_chunk(s.raw_seconds, s.delegations * chunks) for s in steps]
    bare = [_us_per_chunk(s.bare_seconds, s.delegations * chunks) for s in steps]
    ms = [[v * 1000 for r in s.engine for v in r.latencies] for s in steps]
    fig, (cost, latency) = plt.subplots(1, 2, figsize=(11, 4.2))
    cost.plot(x, engine, "o-", label="engine: remote -> journal -> SSE viewer")
    cost.plot(x, bare, "^--", label="limit: bare a2a-sdk client")
    cost.plot(x, raw, "s--", label="limit: raw httpx readers (the wire)")
    for axes in (cost, latency):
        axes.set_xscale("log")
        axes.set_xticks(x, [f"{v:,}" for v in x])
        axes.minorticks_off()
    cost.set_ylim(bottom=0)
    cost.set_xlabel("concurrent delegations")
    cost.set_ylabel("wall time per chunk (us)")
    cost.set_title("cost per chunk (flat = linear growth)")
    cost.legend(fontsize=8)
    latency.plot(x, [percentile(m, 0.5) for m in ms], "o-", label="p50")
    latency.plot(x, [percentile(m, 0.99) for m in ms], "o-", label="p99")
    latency.set_yscale("log")
    latency.set_xlabel("concurrent delegations")
    latency.set_ylabel("journal append -> viewer (ms)")
    latency.set_title("latency at the viewer")
    latency.legend(fontsize=8)
    fig.suptitle(
        f"subagent-engine bench scale: {chunks:,} chunks per delegation, "
        f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path}"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def bench_scale(
    *,
    sizes: Sequence[int] = SIZES,
    steps: Sequence[int] = STEPS,
    cascade: Sequence[int] = CASCADE,
    chunks: int = CHUNKS,
    repeat: int = 3,
    short_step_runs: int = SHORT_STEP_RUNS,
    plot: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Measure and print memory per delegation and per viewer, the whole path's throughput and
    latency as delegations grow (with a plot at `plot`, if given), and the cancel cascade.

    A whole-path step shorter than `SHORT_STEP` is run `short_step_runs` times (median kept).
    Returns 0; 1 if a measurement did not complete (a child or a step failed or passed its
    deadline, a chunk or a CancelTask lost); 2 for arguments out of range. A missed goal is
    printed as NOT MET and does not change the exit code.
    """
    out = out or sys.stdout
    if (
        not (sizes or steps or cascade)
        or min(sizes, default=1) < 1
        or min(steps, default=1) < 1
        or min(cascade, default=1) < 1
        or chunks < 1
        or repeat < 1
        or short_step_runs < 1
    ):
        print(
            "--sizes, --steps and --cascade need at least one count between them (an empty one "
            "skips its section); every count, --chunks and --repeat must be at least 1",
            file=out,
        )
        return 2
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"subagent-engine bench scale: Python {platform.python_version()}, trio "
        f"{trio.__version__}, a2a-sdk {_version('a2a-sdk')}, hypercorn {_version('hypercorn')}, "
        f"httpx {httpx.__version__}, matplotlib {_version('matplotlib')}, "
        f"os.cpu_count()={os.cpu_count()}, load average {load}",
        file=out,
        flush=True,
    )
    started = time.perf_counter()
    _raise_file_limit()
    _quiet_hypercorn()
    problems: list[str] = []
    if sizes:
        memory, memory_problems = _measure_memory(sorted(sizes), out)
        problems += memory_problems
        print(file=out)
        _print_memory(memory, out)
        print(file=out, flush=True)
    try:
        with _remote_process(chunks) as remote:
            print(
                f"remote: bench a2a's raw JSON-RPC A2A server in its own process (pid "
                f"{remote.pid}, 127.0.0.1:{remote.port}), {chunks:,} chunks per stream, "
                "pre-encoded, one send_all per stream",
                file=out,
                flush=True,
            )
            figures = trio.run(
                _measure_remote,
                remote,
                sorted(steps),
                chunks,
                sorted(cascade),
                repeat,
                short_step_runs,
                out,
            )
    except _RemoteFailed as failure:
        print(f"!! FAILED remote: {failure}", file=out, flush=True)
        return 1
    print(file=out)
    if steps:
        _print_path(figures, chunks, repeat, short_step_runs, out)
        if plot is not None:
            print(_plot(figures, chunks, plot), file=out, flush=True)
        print(file=out)
    if cascade:
        _print_cascade(figures, repeat, out)
        print(file=out)
    for problem in problems + figures.problems:
        print(f"!! {problem}", file=out)
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"max RSS of this process: {max_rss_kib / 1024:.1f} MiB (the memory children's and the "
        f"remote's not included); wall time {time.perf_counter() - started:.1f} s",
        file=out,
        flush=True,
    )
    return 1 if problems or figures.problems else 0


if __name__ == "__main__":
    sys.exit(_memory_child_main(sys.argv[1:]))
