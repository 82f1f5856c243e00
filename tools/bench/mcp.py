"""The MCP benchmark (`python -m tools.bench mcp`): `delegate_to_agent` round trips and many runs.

This module owns two measurements of the MCP endpoint (`adapters.mcp.DelegationEndpoint`), made
with the official `mcp` client under Trio, each printed beside what this machine does without
the engine:

- Round trip: `calls` sequential `tools/call delegate_to_agent` on one session, to an in-process
  agent whose function returns at once, through the engine's endpoint; beside it the floor (the
  same client against a bare low-level `mcp` Server that answers a constant result, served the
  same way: a stateful `StreamableHTTPSessionManager` on Hypercorn's Trio worker, 127.0.0.1:0)
  and the engine alone (`run.delegate` to the same agent, no MCP), so the endpoint's own cost is
  the difference.
- Many runs: `runs` runs open at once on one Engine and one DelegationEndpoint, each with its
  own client session, then one call per run, all concurrently: wall time, calls/s, per-call
  latency, errors (must be 0), the endpoint's open runs, and resident memory per open run;
  beside it the same number of sessions on the floor, each making one call.

The clients run in the measuring process (one process, one Trio loop, the server and every
client sharing its cores), so the many-runs figures are a floor for a server whose parents are
separate processes, and the memory per run counts the client's session as well as the
endpoint's. The floor's tool list and result are made by the endpoint's own sans-IO renderers
(`adapters.mcp.list_tools`, `render_result`), so both sides carry the same bytes. Nothing here
may change engine or endpoint behaviour to look faster; they are driven only through their
public surface, and the floor's listener is configured as the endpoint's (so it shares its
limits: see `OPEN_CONCURRENCY`).

The official client opens a new TCP connection for every `tools/call`: it closes each POST's
SSE response as soon as the result has arrived, before the end of its body, so httpx2 cannot
keep the connection. A burst of concurrent calls is therefore a burst of connects.

Method: every session lists the tools when it opens, as a parent CLI does; in the round trip
it then makes `WARMUP_CALLS` unclocked calls. Every latency is `time.perf_counter()` around
one `call_tool`; figures are percentiles over all samples of `repeat` runs, with the garbage
collector emptied (and freed heap handed back) before each many-runs measurement, whose first
time costs an unmeasured small pass has paid; every wait has a deadline, so a broken endpoint
shows as a failed check, never a hang.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import os
import platform
import resource
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from typing import Any, Final, TextIO, cast

import attrs
import httpx2
import mcp_types as types
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import (
    GENERIC_TOOL,
    AgentSummary,
    DelegationEndpoint,
    EndpointSettings,
    list_tools,
    render_result,
)
from engine import (
    AgentSpec,
    DelegationRequest,
    DelegationResult,
    Engine,
    EngineLimits,
    Run,
    Status,
)
from tools.bench.journal import answer_lifespan, percentile, release_free_memory, rss_kib

__all__ = ["bench_mcp"]

#: Deadlines: a measurement phase that takes longer than this failed (the default run's take
#: at most ~5 s each).
ROUND_TRIP_DEADLINE: Final = 60.0
OPEN_DEADLINE: Final = 60.0
#: Callers opening their session at the same time: parent CLIs start at different moments, and
#: the figure is about holding runs, not about the listener's accept queue.
OPEN_CONCURRENCY: Final = 25
CALLS_DEADLINE: Final = 60.0
CLOSE_DEADLINE: Final = 30.0
#: How long a client waits for one response (the agent answers at once; deadlines bound it all).
READ_TIMEOUT: Final = 60.0
#: Unclocked calls each session makes before its clock starts.
WARMUP_CALLS: Final = 10
#: Callers of the unmeasured many-runs pass on each side.
WARMUP_CALLERS: Final = 10

_AGENT: Final = "instant"
_OBJECTIVE: Final = "Answer at once."


async def _instant(task: LocalTask) -> str:
    return "done"


def _agent() -> AgentSpec:
    return AgentSpec(
        key=_AGENT,
        target=InProcessTarget(_instant),
        description="An in-process agent whose function returns at once.",
    )


def _arguments() -> dict[str, Any]:
    return {"agent": _AGENT, "objective": _OBJECTIVE}


def _meta(tool_use_id: str) -> types.RequestParamsMeta:
    # Claude Code's own key for its tool-call id. RequestParamsMeta allows extra items (PEP 728),
    # which mypy does not know yet.
    return cast(types.RequestParamsMeta, {"claudecode/toolUseId": tool_use_id})


# -- the floor: a bare mcp server served the endpoint's way ------------------------------------


def _floor_server() -> Server[Any]:
    """A low-level `mcp` Server that lists the endpoint's tool and answers a constant result."""
    tools = types.ListToolsResult(
        tools=list_tools([AgentSummary(key=_AGENT, name=_AGENT, protocol="inprocess")])
    )
    result = render_result(
        DelegationResult(
            delegation_id="del-floor",
            agent=_AGENT,
            remote_protocol="inprocess",
            status=Status.COMPLETED,
            run_id="run-floor",
            parent_tool_call_id="toolu_floor",
            summary="done",
        )
    )

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return tools

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return result

    return Server("bench-floor", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


@asynccontextmanager
async def _serve_floor() -> AsyncIterator[str]:
    """Serve the floor until the block ends; yields its MCP URL. The session manager and
    Hypercorn are configured as `DelegationEndpoint.serve` configures them (no bearer check:
    that is the endpoint's, and part of what is measured)."""
    settings = EndpointSettings()
    manager = StreamableHTTPSessionManager(
        _floor_server(),
        session_idle_timeout=settings.session_idle_timeout,
        max_sessions=settings.max_sessions,
        max_request_body_size=settings.max_body_bytes,
    )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
        elif scope["type"] == "http":
            await manager.handle_request(scope, receive, send)

    config = HypercornConfig()
    config.bind = [f"{settings.host}:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 1.0
    config.backlog = settings.backlog  # the same listener settings as the endpoint's
    async with manager.run(), trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn_serve, app, config)
        try:
            yield f"{str(binds[0]).rstrip('/')}/mcp"
        finally:
            nursery.cancel_scope.cancel()


# -- the client ------------------------------------------------------------------------------


@functools.cache
def _tls() -> ssl.SSLContext:
    # Every new httpx2 client otherwise loads the CA bundle (~23 ms of CPU and ~0.8 MiB here):
    # a parent CLI pays that once in its own process, while here it would count hundreds of
    # times in the open and memory figures. The clients share one context (the endpoint is
    # plain http); this is also why `adapters.mcp.connect`, which builds its own client, is
    # not used here.
    return ssl.create_default_context()


@asynccontextmanager
async def _session(url: str, headers: Mapping[str, str]) -> AsyncIterator[ClientSession]:
    """An initialized official-client session that has listed the tools, as a parent CLI does
    at startup (the client also needs the list to validate results); one httpx2 client (and so
    connection pool) of its own, as a parent CLI process would have. Closing it ends the
    session (DELETE)."""
    timeout = httpx2.Timeout(30.0, read=READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(headers=dict(headers), timeout=timeout, verify=_tls()) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        await session.list_tools()
        yield session


class _CallFailed(Exception):
    """A call's result was not the completed delegation it should be."""


async def _call(session: ClientSession, tool_use_id: str, run_id: str | None) -> float:
    """One timed `delegate_to_agent`; seconds, or `_CallFailed` saying what came back."""
    start = time.perf_counter()
    result = await session.call_tool(GENERIC_TOOL, _arguments(), meta=_meta(tool_use_id))
    seconds = time.perf_counter() - start
    structured = result.structured_content or {}
    if result.is_error or structured.get("status") != Status.COMPLETED:
        raise _CallFailed(f"result {structured.get('status')!r}, is_error={result.is_error}")
    if run_id is not None and (
        structured.get("run_id") != run_id or structured.get("parent_tool_call_id") != tool_use_id
    ):
        raise _CallFailed("the result names another run or tool call")
    return seconds


async def _sequential(session: ClientSession, calls: int, run_id: str | None) -> list[float]:
    for n in range(WARMUP_CALLS):
        await _call(session, f"toolu_warmup_{n}", run_id)
    return [await _call(session, f"toolu_{n:06d}", run_id) for n in range(calls)]


# -- round trip ------------------------------------------------------------------------------


async def _floor_once(url: str, calls: int) -> list[float]:
    async with _session(url, {}) as session:
        return await _sequential(session, calls, None)


async def _endpoint_once(eng: Engine, calls: int) -> list[float]:
    async with eng.open_run() as run:
        endpoint = run.endpoint
        assert endpoint is not None
        async with _session(endpoint.url, endpoint.headers) as session:
            return await _sequential(session, calls, run.run_id)


async def _engine_alone_once(eng: Engine, calls: int) -> list[float]:
    async def once(run: Run, tool_use_id: str) -> float:
        request = DelegationRequest(
            agent=_AGENT, objective=_OBJECTIVE, parent_tool_call_id=tool_use_id
        )
        start = time.perf_counter()
        result = await run.delegate(request)
        seconds = time.perf_counter() - start
        if result.status != Status.COMPLETED:
            raise _CallFailed(f"run.delegate result {result.status!r}")
        return seconds

    async with eng.open_run() as run:
        for n in range(WARMUP_CALLS):
            await once(run, f"toolu_warmup_{n}")
        return [await once(run, f"toolu_{n:06d}") for n in range(calls)]


# -- many runs -------------------------------------------------------------------------------


@attrs.define
class _ManyRuns:
    runs: int
    open_runs_seen: int = 0  # `endpoint.open_runs` with every run open (the floor: sessions)
    open_seconds: float = math.nan  # from the first open to the last session initialized
    calls_seconds: float = math.nan  # from the go signal to the last result
    close_seconds: float = math.nan  # from the release to the last session and run closed
    open_runs_after: int = -1  # `endpoint.open_runs` after every run closed (the floor: 0)
    rss_before_kib: float = 0.0
    rss_open_kib: float = 0.0
    latencies: list[float] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    timed_out: str = ""  # the phase whose deadline passed, if one did


#: Opens what one caller needs (a run and its session, or a bare session) for caller `n`;
#: yields the session and the run id its results must name (None: the floor names none).
_OpenCaller = Callable[[int], AbstractAsyncContextManager[tuple[ClientSession, str | None]]]


async def _many_once(
    open_caller: _OpenCaller, open_runs: Callable[[], int], runs: int
) -> _ManyRuns:
    """`runs` callers open at once, each with its own session; then one call each, concurrently.

    A caller that fails to open, or whose call fails, is an error and never holds up the
    others; each phase (open, calls, close) has its own deadline, and a passed deadline cancels
    every caller."""
    figures = _ManyRuns(runs=runs)
    all_open, go, all_answered, release = trio.Event(), trio.Event(), trio.Event(), trio.Event()
    settled = 0  # callers that opened their session or failed to
    answered = 0  # callers whose call ended, one way or the other

    def settle() -> None:
        nonlocal settled
        settled += 1
        if settled == runs:
            all_open.set()

    def answer() -> None:
        nonlocal answered
        answered += 1
        if answered == runs:
            all_answered.set()

    opening = trio.Semaphore(OPEN_CONCURRENCY)

    async def one(n: int) -> None:
        stage = "opening"
        try:
            async with AsyncExitStack() as stack:
                async with opening:
                    session, run_id = await stack.enter_async_context(open_caller(n))
                stage = "calling"
                settle()
                await go.wait()
                try:
                    figures.latencies.append(await _call(session, f"toolu_{n}", run_id))
                except Exception as exc:
                    figures.errors.append(f"caller {n}, calling: {_describe(exc)}")
                stage = "closing"
                answer()
                await release.wait()
        except Exception as exc:
            # The client's transport failing (a reset connection, say) ends its session with
            # the error, whichever stage the caller was in.
            figures.errors.append(f"caller {n}, {stage}: {_describe(exc)}")
            if stage == "opening":
                settle()
            if stage != "closing":
                answer()

    async def reached(event: trio.Event, deadline: float, phase: str) -> bool:
        with trio.move_on_after(deadline):
            await event.wait()
        if not event.is_set():
            figures.timed_out = f"{phase} ({deadline:g} s)"
        return event.is_set()

    release_free_memory()
    figures.rss_before_kib = rss_kib()
    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        for n in range(runs):
            nursery.start_soon(one, n)
        if await reached(all_open, OPEN_DEADLINE, f"opening {runs} callers"):
            figures.open_seconds = time.perf_counter() - start
            figures.open_runs_seen = open_runs()
            figures.rss_open_kib = rss_kib()
            gc.collect()
            start = time.perf_counter()
            go.set()
            if await reached(all_answered, CALLS_DEADLINE, f"{runs} concurrent calls"):
                figures.calls_seconds = time.perf_counter() - start
        if figures.timed_out:
            nursery.cancel_scope.cancel()
        start = time.perf_counter()
        release.set()
        nursery.cancel_scope.deadline = trio.current_time() + CLOSE_DEADLINE
    if not figures.timed_out:
        figures.close_seconds = time.perf_counter() - start
        if nursery.cancel_scope.cancelled_caught:
            figures.timed_out = f"closing {runs} callers ({CLOSE_DEADLINE:g} s)"
    figures.open_runs_after = open_runs()
    return figures


def _floor_callers(url: str) -> tuple[_OpenCaller, Callable[[], int]]:
    opened = 0

    @asynccontextmanager
    async def open_caller(n: int) -> AsyncIterator[tuple[ClientSession, str | None]]:
        nonlocal opened
        async with _session(url, {}) as session:
            opened += 1
            try:
                yield session, None
            finally:
                opened -= 1

    return open_caller, lambda: opened


def _endpoint_callers(
    endpoint: DelegationEndpoint, eng: Engine
) -> tuple[_OpenCaller, Callable[[], int]]:
    @asynccontextmanager
    async def open_caller(n: int) -> AsyncIterator[tuple[ClientSession, str | None]]:
        async with eng.open_run() as run:
            assert run.endpoint is not None
            async with _session(run.endpoint.url, run.endpoint.headers) as session:
                yield session, run.run_id

    return open_caller, lambda: endpoint.open_runs


# -- the run ---------------------------------------------------------------------------------


@attrs.define
class _Figures:
    floor: list[float] = attrs.field(factory=list)
    endpoint: list[float] = attrs.field(factory=list)
    engine_alone: list[float] = attrs.field(factory=list)
    many_floor: list[_ManyRuns] = attrs.field(factory=list)
    many: list[_ManyRuns] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)


async def _measure(calls: int, runs: int, repeat: int) -> _Figures:
    figures = _Figures()

    async def timed(label: str, into: list[float], measure: Callable[[], Awaitable[Any]]) -> None:
        gc.collect()
        try:
            with trio.move_on_after(ROUND_TRIP_DEADLINE):
                into.extend(await measure())
                return
        except Exception as exc:
            figures.problems.append(f"FAILED {label}: {_describe(exc)}")
            return
        figures.problems.append(f"FAILED {label}: no answer within {ROUND_TRIP_DEADLINE:g} s")

    limits = EngineLimits(max_concurrent_global=max(256, runs))
    async with (
        _serve_floor() as floor_url,
        DelegationEndpoint().serve() as endpoint,
        Engine([_agent()], limits=limits, endpoints=endpoint) as eng,
    ):
        for _ in range(repeat):
            await timed("floor round trip", figures.floor, lambda: _floor_once(floor_url, calls))
            await timed("endpoint round trip", figures.endpoint, lambda: _endpoint_once(eng, calls))
            await timed(
                "engine alone", figures.engine_alone, lambda: _engine_alone_once(eng, calls)
            )
        # Unmeasured: first-time costs (imports, caches) must not count as memory per run.
        await _many_once(*_endpoint_callers(endpoint, eng), WARMUP_CALLERS)
        await _many_once(*_floor_callers(floor_url), WARMUP_CALLERS)
        for _ in range(repeat):
            # The endpoint first: its RSS growth is measured on a heap that no earlier
            # measurement of this repeat has left free memory in.
            figures.many.append(await _many_once(*_endpoint_callers(endpoint, eng), runs))
            figures.many_floor.append(await _many_once(*_floor_callers(floor_url), runs))
        figures.problems += _endpoint_problems(endpoint)
    return figures


def _endpoint_problems(endpoint: DelegationEndpoint) -> list[str]:
    """What the endpoint's own counters say went wrong (nothing, in a clean run)."""
    problems = []
    if endpoint.calls_in_flight:
        problems.append(f"FAILED endpoint: {endpoint.calls_in_flight} calls still in flight")
    if endpoint.refused_requests:
        problems.append(f"FAILED endpoint: {endpoint.refused_requests} requests refused (401)")
    if endpoint.calls_cancelled_by_disconnect:
        problems.append(
            f"FAILED endpoint: {endpoint.calls_cancelled_by_disconnect} calls cancelled by a "
            "dropped connection"
        )
    return problems


# -- report ----------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if math.isfinite(seconds) else "-"


def _latency_row(label: str, values: Sequence[float]) -> str:
    return (
        f"{label:<52} {len(values):>8,} {_ms(percentile(values, 0.5)):>8} "
        f"{_ms(percentile(values, 0.99)):>8} {_ms(max(values, default=math.nan)):>8}"
    )


def _latency_header() -> str:
    return f"{'measurement':<52} {'samples':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"


def _print_round_trip(figures: _Figures, calls: int, repeat: int, out: TextIO) -> None:
    print(
        f"round trip: {calls} sequential tools/call {GENERIC_TOOL} on one session per run, "
        f"{repeat} run(s), after {WARMUP_CALLS} unclocked calls each; the official client opens "
        "a new connection for every call",
        file=out,
    )
    header = _latency_header()
    print(header, file=out)
    print("-" * len(header), file=out)
    rows = [
        ("floor: bare mcp Server, constant result", figures.floor),
        ("endpoint: DelegationEndpoint -> in-process agent", figures.endpoint),
        ("engine alone: run.delegate -> in-process agent", figures.engine_alone),
    ]
    for label, values in rows:
        print(_latency_row(label, values), file=out)
    floor_p50 = percentile(figures.floor, 0.5)
    endpoint_p50 = percentile(figures.endpoint, 0.5)
    print(
        f"endpoint over the floor at p50: {_ms(endpoint_p50 - floor_p50)} ms "
        f"({endpoint_p50 / floor_p50:.2f}x); mcp 2.3.0 alone, measured on 2 cores: loopback "
        "tools/call p50 ~8-10 ms, p99 ~13-16 ms",
        file=out,
    )
    for label, values in rows:
        if len(values) != calls * repeat:
            figures.problems.append(
                f"LOST {label.split(':')[0]}: {len(values)} of {calls * repeat} calls measured"
            )


def _print_many_runs(figures: _Figures, runs: int, out: TextIO) -> None:
    print(
        f"many runs: {runs} callers open at once, each with its own client session (its own "
        f"httpx2 client, initialize, tools/list; at most {OPEN_CONCURRENCY} opening at a time), "
        "then one call each, all concurrently; endpoint: "
        f"{runs} runs on one Engine and one DelegationEndpoint; floor: {runs} sessions on the bare "
        "mcp Server. The clients run in this process and share its cores with the server",
        file=out,
    )
    header = (
        f"{'measurement':<14} {'open s':>7} {'calls s':>8} {'calls/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} {'errors':>6} {'open':>5} {'after':>5} {'close s':>7} "
        f"{'KiB/run':>8}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    sides = (("endpoint", figures.many), ("floor", figures.many_floor))
    for side, measured in sides:
        for n, many in enumerate(measured, 1):
            done = len(many.latencies)
            rate = done / many.calls_seconds if many.calls_seconds > 0 else math.nan
            grown = many.rss_open_kib - many.rss_before_kib
            per_run = grown / runs if many.rss_open_kib else math.nan
            print(
                f"{f'{side} run {n}':<14} {many.open_seconds:>7.2f} {many.calls_seconds:>8.3f} "
                f"{rate:>8,.0f} {_ms(percentile(many.latencies, 0.5)):>8} "
                f"{_ms(percentile(many.latencies, 0.99)):>8} "
                f"{_ms(max(many.latencies, default=math.nan)):>8} {len(many.errors):>6} "
                f"{many.open_runs_seen:>5} {many.open_runs_after:>5} {many.close_seconds:>7.2f} "
                f"{per_run:>8.0f}",
                file=out,
            )
    print(_latency_header(), file=out)
    for side, measured in sides:
        every = [latency for many in measured for latency in many.latencies]
        print(_latency_row(f"{side}: per-call latency, {runs} calls at once", every), file=out)
    print(
        "open s: opening every caller (run and session); calls s: from the go signal to the last "
        "result; open: endpoint.open_runs with every run open (floor: sessions open), after: "
        "once every caller closed; KiB/run: VmRSS growth from before opening to every caller "
        "open, divided by the callers, server and client side together (a measurement reuses "
        "heap that an earlier one freed and the allocator kept, so the first row is the figure "
        "and later rows read low)",
        file=out,
    )
    resets = sum(
        "Connection reset" in error for _, measured in sides for m in measured for error in m.errors
    )
    if resets:
        figures.problems.append(
            f"{resets} connections reset by the server: a burst of new connections beyond the "
            f"listen backlog (EndpointSettings.backlog) "
            "overflows it, and the official mcp client opens a new connection for every "
            "tools/call (it closes each POST's SSE response before the end of its body)"
        )
    for side, measured in sides:
        for n, many in enumerate(measured, 1):
            where = f"FAILED many runs, {side} run {n}"
            if many.timed_out:
                figures.problems.append(f"{where}: deadline passed {many.timed_out}")
            for error in many.errors[:5]:
                figures.problems.append(f"{where}: {error}")
            if len(many.errors) > 5:
                figures.problems.append(f"{where}: ... and {len(many.errors) - 5} more errors")
            if not many.timed_out and many.open_runs_seen != runs:
                figures.problems.append(
                    f"{where}: {many.open_runs_seen} open with {runs} callers open"
                )
            if many.open_runs_after != 0:
                figures.problems.append(
                    f"{where}: {many.open_runs_after} still open after every caller closed"
                )


def _describe(exc: BaseException) -> str:
    """The innermost cause of a failure, unwrapped from exception groups, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def bench_mcp(*, calls: int, runs: int, repeat: int, out: TextIO | None = None) -> int:
    """Measure and print `delegate_to_agent` round trips through the MCP endpoint beside a bare
    mcp server, and many runs calling at once on one endpoint.

    Returns 0; 1 if a measurement did not complete (a call failed or was lost, a deadline
    passed, the endpoint's counters are off); 2 for arguments out of range.
    """
    out = out or sys.stdout
    if calls < 1 or runs < 1 or repeat < 1:
        print("--calls, --runs and --repeat must be at least 1", file=out)
        return 2
    print(
        f"subagent-engine bench mcp: Python {platform.python_version()}, trio {trio.__version__}, "
        f"mcp {version('mcp')}, hypercorn {version('hypercorn')}, httpx2 {version('httpx2')}, "
        f"os.cpu_count()={os.cpu_count()}, {repeat} run(s) per figure",
        file=out,
    )
    print(
        "server and clients: one process, one Trio loop; Hypercorn's Trio worker on 127.0.0.1:0, "
        "the official mcp client (streamable HTTP, one httpx2 client per session); the agent "
        "is an in-process function that returns at once",
        file=out,
    )
    print(file=out, flush=True)
    started = time.perf_counter()
    try:
        figures = trio.run(_measure, calls, runs, repeat)
    except Exception as exc:
        # Measurements record their own failures; this is the servers or the engine failing to
        # start or stop, which leaves nothing to print.
        print(f"!! FAILED: the benchmark stopped: {_describe(exc)}", file=out, flush=True)
        return 1
    _print_round_trip(figures, calls, repeat, out)
    print(file=out)
    _print_many_runs(figures, runs, out)
    print(file=out)
    for problem in figures.problems:
        print(f"!! {problem}", file=out)
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"max RSS of this process: {max_rss_kib / 1024:.1f} MiB (server and clients); "
        f"wall time {time.perf_counter() - started:.1f} s",
        file=out,
        flush=True,
    )
    return 1 if figures.problems else 0
