"""The SSE benchmark (`python -m tools.bench sse`): one viewer's stream, latency, a slow viewer.

This module owns three measurements of the bundled server's viewer stream (`web.server`:
`create_app` over a `RunHost`, served by `serve_app` on Hypercorn's Trio worker, 127.0.0.1:0,
in the default wire format of `default_encoder_factory()`, whatever that is), each printed
beside what this machine does without the engine:

- Throughput: a bench parent appends `events` prebuilt events (`journal.build_event_mix`) in
  batches of `journal.BATCH` straight into `run.journal` once the viewer has its response
  headers, so this measures journal -> subscription -> encoder -> Quart -> Hypercorn -> socket
  -> httpx, the producer (model, remote, run actor) excluded. The producer stays at most
  `AHEAD` entries ahead of what the encoder has taken, as a live run does, so the viewer reads
  live (catch-ups are reported). One httpx streaming reader counts SSE messages and the last
  `id:` cursor. The body writes the server made are recorded (an ASGI tap around the app: one
  `http.response.body` per write) and then served, same bytes in the same writes, by a raw ASGI
  app (no Quart, no engine) on the same Hypercorn config, read by the same reader code: that
  row is this machine's limit. events/s counts journal events covered (cursors), since a reader
  behind the journal gets deltas merged and one SSE message may cover several entries. A third
  row, for scale only, is an ASGI app without the engine that encodes each event of the same mix
  itself (`json.dumps` of three fields, one SSE block per event, `BATCH` per write): what a
  per-event Python encoder delivers when nothing merges deltas.
- Latency: `delegations` concurrent delegations to an in-process agent, each streaming text
  deltas at `rate / delegations` per second for `seconds` (the k-th delegation's ticks offset by
  `k / delegations` of a period, as independent streams are: lockstep timers would append one
  delta per delegation in the same scheduler pass every period); a stamping `JournalStore` records
  `time.perf_counter()` per cursor as it is appended; the reader records the arrival time of
  every `id:`; an entry's latency is the arrival of the first message whose id is >= its cursor
  minus its append time. The reader runs in this process, on this Trio loop (one thread, the
  server and the producers sharing it), so its own work is inside the figure.
- Slow viewer: the same production, with a second viewer on a raw socket (h11 parsing, a small
  receive buffer) reading `SLOW_READ` bytes at a time at a tenth of the byte rate the fast viewer
  measured in the latency run, while the run produces; once the run's terminal is journaled it
  drains at full speed (so the default run stays short). Checked at the end: its subscription's
  pending bytes (sampled every `SAMPLE_EVERY` s from the journal's subscriptions) stayed within
  `EngineLimits.subscriber_buffer_bytes`, the text it reassembled per message equals the fast
  viewer's (and the text the agents sent), and its non-delta events (lifecycle, message starts
  and ends) equal the fast viewer's. The fast viewer's p99 is printed with and without it.

Tracing: the engine's throughput and the fast viewer's latency alone are measured with tracing
off (the default engine), on (the server's OTLP/HTTP provider exporting to a receiver in its own
process) and off again (the noise two identical sides show), in a rotation, and printed side by
side with what tracing on costs (`tools.bench.tracing`); the other rows are tracing off.

Nothing here may change engine or server behaviour to look faster: they are driven through
their public surface (`RunHost`, `create_app`, `Run.journal`, `Engine(store_factory=...)`); the
subscription statistics are read from the journal's private lists, as `bench journal` reads
buffer statistics. Every phase has a deadline, so a broken stream shows as a failed check, never
a hang.
"""

from __future__ import annotations

import bisect
import gc
import json
import math
import os
import platform
import re
import resource
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any, Final, TextIO, cast

import attrs
import h11
import httpx
import trio
from opentelemetry import trace

from adapters.agui import Frame, sse_bytes
from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AgentSpec,
    DelegationRequest,
    Engine,
    EngineLimits,
    JournalEntry,
    JournalStore,
    MemoryJournalStore,
    Run,
)
from tools.bench.journal import BATCH, answer_lifespan, build_event_mix
from tools.bench.tracing import (
    OFF,
    OFF_MEANS,
    ON_MEANS,
    SIDES,
    OtlpSink,
    SideRow,
    SinkFailed,
    goal_line,
    otlp_sink,
    print_sides,
    rotation,
    side_tracing,
    sink_line,
    warm,
)
from web.config import HostConfig
from web.server import (
    EncoderFactory,
    RunHost,
    StreamEncoder,
    create_app,
    default_encoder_factory,
    serve_app,
)

__all__ = ["bench_sse"]

#: Goals this benchmark checks.
GOAL_RATIO: Final = 0.5
GOAL_EVENTS_PER_S: Final = 150_000
GOAL_P99_MS: Final = 5.0
#: Viewers of one run in the encoding fan-out figure.
FANOUT_VIEWERS: Final = 10
#: How far (in entries) the throughput producer may run ahead of the encoder.
AHEAD: Final = 4 * BATCH
#: Deadlines per phase (a default phase takes a few seconds).
DEADLINE: Final = 120.0
#: The slow viewer's read size, receive buffer, and the sampling period of subscription stats.
SLOW_READ: Final = 4096
SLOW_RCVBUF: Final = 64 * 1024
SAMPLE_EVERY: Final = 0.01
SLOW_FRACTION: Final = 0.1

_AGENT: Final = "ticker"
_MIN_EVENTS: Final = 16  # the mix's lifecycle and a few deltas
_ID = re.compile(rb"\nid: (\d+)")


# -- the server side ---------------------------------------------------------------------------


class _TappedStream:
    def __init__(self, path: str, record: bool) -> None:
        self.path = path
        self.record = record
        self.start: dict[str, Any] | None = None
        self.chunks: list[bytes] = []
        self.bytes_sent = 0


class _Tap:
    """ASGI middleware recording each `/events` response's body writes (one per server write)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.record = False
        self.streams: list[_TappedStream] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).endswith("/events"):
            await self.app(scope, receive, send)
            return
        tapped = _TappedStream(scope["path"], self.record)
        self.streams.append(tapped)

        async def tapped_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                tapped.start = message
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                tapped.bytes_sent += len(body)
                if tapped.record and body:
                    tapped.chunks.append(body)
            await send(message)

        await self.app(scope, receive, tapped_send)


def _raw_app(start: dict[str, Any], chunks: Sequence[bytes], go: trio.Event) -> Any:
    """An ASGI app answering every request with `start`, then `chunks` (one write each) once
    `go` is set: the bytes the engine wrote, without the engine or Quart."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await send(start)
        await go.wait()
        _marks["producer_start"] = time.perf_counter()
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def _floor_app(events: Sequence[Any], go: trio.Event) -> Any:
    """An ASGI app that encodes each of `events` itself, one `json.dumps` of a three-field
    AG-UI-shaped dict and one SSE block with its `id:` per event, and writes each batch of
    `BATCH` as one body write once `go` is set: a Python server encoding each event, with no
    journal, no ordering rules and no merging, on the same worker."""
    dumps = json.dumps

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await go.wait()
        _marks["producer_start"] = time.perf_counter()
        cursor = 0
        for start in range(0, len(events), BATCH):
            parts = []
            for event in events[start : start + BATCH]:
                cursor += 1
                data = dumps(
                    {"type": event.kind, "messageId": event.message_id, "delta": event.delta}
                )
                parts.append(b"id: %d\ndata: %s\n\n" % (cursor, data.encode()))
            await send({"type": "http.response.body", "body": b"".join(parts), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_marks: dict[str, float] = {}


class _CountingEncoder:
    """The default encoder, noting the last cursor fed (so the producer can pace itself)."""

    def __init__(self, inner: StreamEncoder, progress: _Progress) -> None:
        self._inner = inner
        self._progress = progress

    def frames(self, entry: JournalEntry) -> list[Frame]:
        self._note(entry.cursor)
        return self._inner.frames(entry)

    def frames_batch(self, entries: Sequence[JournalEntry]) -> list[Frame]:
        if entries:
            self._note(entries[-1].cursor)
        return self._inner.frames_batch(entries)

    def _note(self, cursor: int) -> None:
        progress = self._progress
        progress.fed = cursor
        if progress.waiter is not None and cursor >= progress.waiter[0]:
            progress.waiter[1].set()
            progress.waiter = None


@attrs.define
class _Progress:
    fed: int = 0
    waiter: tuple[int, trio.Event] | None = None

    async def wait_fed(self, cursor: int) -> None:
        if self.fed >= cursor:
            return
        event = trio.Event()
        self.waiter = (cursor, event)
        await event.wait()


class _StampingStore:
    """A `MemoryJournalStore` that notes `time.perf_counter()` per cursor as it is appended."""

    def __init__(self, inner: MemoryJournalStore) -> None:
        self.inner = inner
        self.stamps: dict[int, float] = {}

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        now = time.perf_counter()
        for entry in entries:
            self.stamps[entry.cursor] = now
        self.inner.append_nowait(entries)

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return self.inner.read_after_nowait(cursor, max_entries)


def _limits(delegations: int) -> EngineLimits:
    # A replay window that holds a whole bench run, so a reader that falls behind catches up
    # without gaps; every other limit is the default.
    return EngineLimits(
        max_concurrent_per_run=max(8, delegations),
        max_concurrent_global=max(256, delegations),
        replay_window_events=2_000_000,
        replay_window_bytes=2 << 30,
    )


@asynccontextmanager
async def _serve(
    parent: Callable[[], Any],
    limits: EngineLimits,
    agents: Sequence[AgentSpec] = (),
    store_factory: Callable[[str, EngineLimits], JournalStore] | None = None,
    encoder_factory: EncoderFactory | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> AsyncIterator[tuple[RunHost, _Tap, str]]:
    config = HostConfig(source="<bench>", limits=limits)
    async with (
        Engine(
            list(agents),
            limits=limits,
            store_factory=store_factory,
            tracer_provider=tracer_provider,
        ) as engine,
        trio.open_nursery() as nursery,
    ):
        host = RunHost(engine, nursery, parent)
        app = _Tap(create_app(host, config, encoder_factory or default_encoder_factory()))
        async with serve_app(cast(Any, app)) as base:
            yield host, app, base
        nursery.cancel_scope.cancel()


async def _start_run(http: httpx.AsyncClient, base: str) -> tuple[str, str]:
    response = await http.post(f"{base}/runs", json={"messages": []})
    response.raise_for_status()
    document = response.json()
    return str(document["run_id"]), str(document["viewer_token"])


# -- the readers -------------------------------------------------------------------------------


@attrs.define
class _Read:
    messages: int = 0
    last_id: int = 0
    size: int = 0  # body bytes read
    ended_at: float = 0.0
    cursors: list[int] = attrs.field(factory=list)
    arrivals: list[float] = attrs.field(factory=list)
    body: list[bytes] = attrs.field(factory=list)


class _SseCounter:
    """Counts complete SSE blocks and ids in a byte stream; optionally stamps every id."""

    def __init__(self, read: _Read, *, stamp: bool, keep: bool) -> None:
        self.read = read
        self.stamp = stamp
        self.keep = keep
        self._rest = b"\n"  # every block start is preceded by a newline

    def feed(self, chunk: bytes) -> None:
        read = self.read
        read.size += len(chunk)
        if self.keep:
            read.body.append(chunk)
        data = self._rest + chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._rest = data
            return
        complete, self._rest = data[: cut + 2], data[cut + 1 :]
        read.messages += complete.count(b"\n\n")
        if self.stamp:
            now = time.perf_counter()
            for match in _ID.finditer(complete):
                read.cursors.append(int(match.group(1)))
                read.arrivals.append(now)
            if read.cursors:
                read.last_id = read.cursors[-1]
        else:
            at = complete.rfind(b"\nid: ")
            if at >= 0:
                end = complete.index(b"\n", at + 1)
                read.last_id = int(complete[at + 5 : end])


async def _httpx_reader(
    url: str, token: str, ready: trio.Event, *, stamp: bool = False, keep: bool = False
) -> _Read:
    """Read one SSE response to its end with httpx; `ready` is set once headers arrived."""
    read = _Read()
    counter = _SseCounter(read, stamp=stamp, keep=keep)
    headers = {"authorization": f"Bearer {token}", "accept": "text/event-stream"}
    timeout = httpx.Timeout(30.0, read=None)
    async with (
        httpx.AsyncClient(timeout=timeout) as http,
        http.stream("GET", url, headers=headers) as response,
    ):
        response.raise_for_status()
        ready.set()
        async for chunk in response.aiter_raw():
            counter.feed(chunk)
            read.ended_at = time.perf_counter()
    return read


async def _slow_reader(
    base: str,
    path: str,
    token: str,
    ready: trio.Event,
    rate: float,
    fast_again: trio.Event,
    received: list[int],
) -> _Read:
    """Read one SSE response on a raw socket, `SLOW_READ` bytes per `SLOW_READ / rate` s until
    `fast_again` is set, then at full speed; `received[0]` is the body bytes so far."""
    host, _, port = base.removeprefix("http://").partition(":")
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    read = _Read()
    counter = _SseCounter(read, stamp=False, keep=True)
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=path,
        headers=[
            ("host", f"{host}:{port}"),
            ("authorization", f"Bearer {token}"),
            ("accept", "text/event-stream"),
        ],
    )
    async with stream:
        await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(SLOW_READ)
                conn.receive_data(data)
                if not fast_again.is_set():
                    await trio.sleep(len(data) / rate)
                continue
            if isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise RuntimeError(f"slow viewer got HTTP {event.status_code}")
                ready.set()
            elif isinstance(event, h11.Data):
                counter.feed(bytes(event.data))
                received[0] = read.size
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
    read.ended_at = time.perf_counter()
    return read


# -- throughput --------------------------------------------------------------------------------


@attrs.frozen
class _Throughput:
    seconds: float
    events: int  # journal events covered (cursors)
    messages: int
    size: int  # body bytes read
    writes: int
    complete: bool
    catch_ups: int = 0


class _AppendingParent:
    """Appends prebuilt events straight into the journal once the viewer is attached."""

    def __init__(self, events: Sequence[Any], go: trio.Event, progress: _Progress) -> None:
        self.events = events
        self.go = go
        self.progress = progress
        self.first = 0
        self.last = 0

    async def run(self, run: Run, prompt: str) -> None:
        await run.flush()  # run.started is in the journal
        await self.go.wait()
        journal = run.journal
        self.first = journal.head
        batches = [
            [JournalEntry(event) for event in self.events[i : i + BATCH]]
            for i in range(0, len(self.events), BATCH)
        ]
        _marks["producer_start"] = time.perf_counter()
        for batch in batches:
            await self.progress.wait_fed(journal.head - AHEAD)
            await journal.append_entries(batch)
            await trio.lowlevel.checkpoint()
        self.last = journal.head


async def _engine_throughput_side(
    events: Sequence[Any], side: str, sink: OtlpSink
) -> tuple[_Throughput, dict[str, Any], list[bytes]]:
    """`_engine_throughput` with tracing as `side` has it (the provider flushed after the clock)."""
    async with side_tracing(side, sink) as provider:
        return await _engine_throughput(events, provider)


async def _engine_throughput(
    events: Sequence[Any], tracer_provider: trace.TracerProvider | None = None
) -> tuple[_Throughput, dict[str, Any], list[bytes]]:
    go = trio.Event()
    progress = _Progress()
    parent = _AppendingParent(events, go, progress)
    factory = default_encoder_factory()

    def encoders(thread_id: str, run_id: str, mode: str, shared: dict[str, Any]) -> StreamEncoder:
        return _CountingEncoder(factory(thread_id, run_id, mode, shared), progress)

    catch_ups = 0
    with trio.fail_after(DEADLINE):
        async with _serve(
            lambda: parent, _limits(1), encoder_factory=encoders, tracer_provider=tracer_provider
        ) as (host, tap, base):
            tap.record = True
            async with httpx.AsyncClient() as http:
                run_id, token = await _start_run(http, base)
            ready = trio.Event()
            result: list[_Read] = []

            async def read() -> None:
                result.append(await _httpx_reader(f"{base}/runs/{run_id}/events", token, ready))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await ready.wait()
                journal = host.engine.journal(run_id)
                assert journal is not None
                while journal.statistics().live_subscribers < 1:  # noqa: ASYNC110 (no event)
                    await trio.sleep(0.001)
                subs = list(journal._live)
                go.set()
            catch_ups = sum(sub.catch_ups for sub in subs)
            head = journal.head
    stream = tap.streams[-1]
    assert stream.start is not None
    got = result[0]
    run = _Throughput(
        seconds=got.ended_at - _marks["producer_start"],
        events=got.last_id - parent.first,
        messages=got.messages,
        size=got.size,
        writes=len(stream.chunks),
        complete=got.last_id == head,
        catch_ups=catch_ups,
    )
    return run, stream.start, stream.chunks


async def _bare_read(app: Any, go: trio.Event) -> _Read:
    """Serve a bare ASGI `app` and read its one SSE response with the benchmark's reader,
    setting `go` once the response headers arrived."""
    ready = trio.Event()
    result: list[_Read] = []
    with trio.fail_after(DEADLINE):
        async with serve_app(cast(Any, app)) as base:

            async def read() -> None:
                result.append(await _httpx_reader(f"{base}/runs/bare/events", "bare", ready))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await ready.wait()
                go.set()
    return result[0]


async def _raw_throughput(
    start: dict[str, Any], chunks: Sequence[bytes], first: int, last: int
) -> _Throughput:
    go = trio.Event()
    got = await _bare_read(_raw_app(start, chunks, go), go)
    return _Throughput(
        seconds=got.ended_at - _marks["producer_start"],
        events=got.last_id - first,
        messages=got.messages,
        size=got.size,
        writes=len(chunks),
        complete=got.last_id == last,
    )


async def _floor_throughput(events: Sequence[Any]) -> _Throughput:
    go = trio.Event()
    got = await _bare_read(_floor_app(events, go), go)
    return _Throughput(
        seconds=got.ended_at - _marks["producer_start"],
        events=got.last_id,
        messages=got.messages,
        size=got.size,
        writes=-(-len(events) // BATCH),
        complete=got.last_id == len(events),
    )


def _throughput(
    events: int, repeat: int, sink: OtlpSink
) -> tuple[dict[str, list[_Throughput]], list[_Throughput], list[_Throughput]]:
    """Per repetition: the engine on every side (in `rotation` order), then the raw app
    replaying the off side's writes, then the json.dumps app."""
    mix = build_event_mix(events, "bench-run")[1:-1]  # the run actor journals its own lifecycle
    engine_runs: dict[str, list[_Throughput]] = {side: [] for side in SIDES}
    raw_runs: list[_Throughput] = []
    floor_runs: list[_Throughput] = []
    for index in range(repeat):
        recorded: tuple[_Throughput, dict[str, Any], list[bytes]] | None = None
        for side in rotation(index):
            gc.collect()
            outcome = trio.run(_engine_throughput_side, mix, side, sink)
            engine_runs[side].append(outcome[0])
            if side == OFF:
                recorded = outcome
        assert recorded is not None
        engine_run, start, chunks = recorded
        last_id = 0
        for match in _ID.finditer(b"\n" + b"".join(chunks)):
            last_id = int(match.group(1))
        first = last_id - engine_run.events
        gc.collect()
        raw_runs.append(trio.run(_raw_throughput, start, chunks, first, last_id))
        gc.collect()
        floor_runs.append(trio.run(_floor_throughput, mix))
    return engine_runs, raw_runs, floor_runs


# -- latency and the slow viewer ---------------------------------------------------------------


def _delta(n: int) -> str:
    return f"token {n:06d}, "


def _ticker(
    per_second: float, seconds: float, delegations: int
) -> Callable[[LocalTask], Awaitable[str]]:
    """The in-process agent: `per_second * seconds` deltas, one every `1 / per_second` s.

    The k-th delegation started ticks `k / delegations` of a period after the first: agents
    that all read the clock at the same instant and sleep the same period would otherwise wake
    in lockstep forever, every delegation's delta appended in the same scheduler pass (100
    appends at once every period, then nothing), which no set of independent streams does."""
    count = max(1, round(per_second * seconds))
    period = 1 / per_second
    started = [0]

    async def tick(task: LocalTask) -> str:
        phase = (started[0] % delegations) / delegations * period
        started[0] += 1
        message_id = await task.text_start()
        start = trio.current_time() + phase
        await trio.sleep_until(start)
        for n in range(count):
            await task.text_delta(_delta(n), message_id=message_id)
            await trio.sleep_until(start + (n + 1) / per_second)
        await task.text_end(message_id)
        return "done"

    return tick


class _DelegatingParent:
    def __init__(self, delegations: int, go: trio.Event, produced: trio.Event) -> None:
        self.delegations = delegations
        self.go = go
        self.produced = produced

    async def run(self, run: Run, prompt: str) -> None:
        await self.go.wait()
        handles = [
            run.start_delegation(
                DelegationRequest(agent=_AGENT, objective="Tick.", parent_tool_call_id=f"call-{n}")
            )
            for n in range(self.delegations)
        ]
        for handle in handles:
            await handle.wait()
        await run.finish()
        self.produced.set()


@attrs.frozen
class _Latency:
    produced_seconds: float
    entries: int
    latencies: list[float]  # seconds, one per journal entry
    fast: _Read
    slow: _Read | None = None
    slow_rate: float = 0.0
    max_pending: list[int] = attrs.field(factory=list)  # per subscription, in subscribe order
    buffer_bound: int = 0
    catch_ups: list[int] = attrs.field(factory=list)
    max_in_flight: int = 0
    complete: bool = True


async def _latency_side(
    delegations: int, rate: float, seconds: float, side: str, sink: OtlpSink
) -> _Latency:
    """`_latency` with one fast viewer and tracing as `side` has it."""
    async with side_tracing(side, sink) as provider:
        return await _latency(delegations, rate, seconds, None, provider)


async def _latency(
    delegations: int,
    rate: float,
    seconds: float,
    slow_rate: float | None,
    tracer_provider: trace.TracerProvider | None = None,
) -> _Latency:
    per_delegation = rate / delegations
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

    ticker = _ticker(per_delegation, seconds, delegations)
    agent = AgentSpec(key=_AGENT, target=InProcessTarget(ticker))
    go, produced, fast_again = trio.Event(), trio.Event(), trio.Event()
    parent = _DelegatingParent(delegations, go, produced)
    fast_result: list[_Read] = []
    slow_result: list[_Read] = []
    received = [0]
    max_pending: dict[int, int] = {}
    catch_ups: dict[int, int] = {}
    max_in_flight = 0
    produce_start = produce_end = 0.0
    with trio.fail_after(DEADLINE + seconds):
        async with _serve(
            lambda: parent, limits, [agent], store_factory, tracer_provider=tracer_provider
        ) as (host, tap, base):
            async with httpx.AsyncClient() as http:
                run_id, token = await _start_run(http, base)
            path = f"/runs/{run_id}/events"
            journal = host.engine.journal(run_id)
            assert journal is not None
            async with trio.open_nursery() as nursery:
                fast_ready, slow_ready = trio.Event(), trio.Event()

                async def fast() -> None:
                    fast_result.append(
                        await _httpx_reader(base + path, token, fast_ready, stamp=True, keep=True)
                    )

                async def slow() -> None:
                    assert slow_rate is not None
                    slow_result.append(
                        await _slow_reader(
                            base, path, token, slow_ready, slow_rate, fast_again, received
                        )
                    )

                nursery.start_soon(fast)
                await fast_ready.wait()
                if slow_rate is not None:
                    nursery.start_soon(slow)
                    await slow_ready.wait()
                else:
                    slow_ready.set()
                produce_start = time.perf_counter()
                go.set()
                seen: dict[int, Any] = {}
                while not journal.ended or not fast_result:
                    for sub in [*journal._live, *journal._catching_up]:
                        key = id(sub)
                        seen.setdefault(key, sub)
                        pending = sub._buffer.statistics().pending_bytes
                        max_pending[key] = max(max_pending.get(key, 0), pending)
                        catch_ups[key] = sub.catch_ups
                    if slow_rate is not None and len(tap.streams) >= 2:
                        in_flight = tap.streams[1].bytes_sent - received[0]
                        max_in_flight = max(max_in_flight, in_flight)
                    if journal.ended and not fast_again.is_set():
                        produce_end = time.perf_counter()
                        fast_again.set()
                    await trio.sleep(SAMPLE_EVERY)
                fast_again.set()
            for key, sub in seen.items():
                catch_ups[key] = sub.catch_ups
    store = stores[0]
    fast_read = fast_result[0]
    latencies = []
    complete = True
    for cursor, stamped in store.stamps.items():
        index = bisect.bisect_left(fast_read.cursors, cursor)
        if index == len(fast_read.cursors):
            complete = False
            continue
        latencies.append(fast_read.arrivals[index] - stamped)
    order = list(max_pending)
    return _Latency(
        produced_seconds=(produce_end or time.perf_counter()) - produce_start,
        entries=len(store.stamps),
        latencies=latencies,
        fast=fast_read,
        slow=slow_result[0] if slow_result else None,
        slow_rate=slow_rate or 0.0,
        max_pending=[max_pending[k] for k in order],
        buffer_bound=limits.subscriber_buffer_bytes,
        catch_ups=[catch_ups[k] for k in order],
        max_in_flight=max_in_flight,
        complete=complete and fast_read.last_id == journal.head,
    )


@attrs.frozen
class _Content:
    texts: dict[str, str]
    others: list[str]  # every non-delta event, as its JSON text, in order


def _content(body: Sequence[bytes]) -> _Content:
    """Per message id, the text its deltas make; and every other event in order."""
    texts: dict[str, str] = {}
    others: list[str] = []
    for block in b"".join(body).split(b"\n\n"):
        data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
        if not data:
            continue
        raw = b"\n".join(data)
        document = json.loads(raw)
        message = document.get("messageId", document.get("message_id"))
        if isinstance(document.get("delta"), str) and message is not None:
            texts[message] = texts.get(message, "") + document["delta"]
        else:
            others.append(raw.decode())
    return _Content(texts, others)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# -- report ------------------------------------------------------------------------------------


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


def bench_sse(
    *,
    events: int = 100_000,
    delegations: int = 100,
    rate: float = 5_000,
    seconds: float = 3.0,
    repeat: int = 3,
    out: TextIO | None = None,
) -> int:
    """Measure and print the SSE stream's throughput beside a raw ASGI app, the latency under
    `delegations` concurrent delegations, and a slow viewer's stream.

    Each engine figure is measured with tracing off, on (exporting over OTLP/HTTP to a receiver
    this call starts) and off again, interleaved (`tools.bench.tracing`), and printed side by
    side with what tracing on costs.

    Returns 0; 1 if something was lost (a reader missed the last cursor, the slow viewer's text
    or events differ, its buffer passed its bound) or the receiver got no spans; 2 for
    arguments out of range. A missed goal is printed as NOT MET and does not change the exit
    code.
    """
    out = out or sys.stdout
    minimum = _MIN_EVENTS
    if events < minimum or delegations < 1 or rate <= 0 or seconds <= 0 or repeat < 1:
        print(
            f"--events must be at least {minimum}; --delegations, --rate, --seconds and "
            "--repeat must be positive",
            file=out,
        )
        return 2
    factory = default_encoder_factory()
    print(
        f"subagent-engine bench sse: Python {platform.python_version()}, trio {trio.__version__}, "
        f"hypercorn {version('hypercorn')}, "
        f"httpx {httpx.__version__}, os.cpu_count()={os.cpu_count()}, "
        f"median of {repeat} run(s) for throughput",
        file=out,
    )
    print(
        f"server: create_app over a RunHost, serve_app (Hypercorn Trio worker, 127.0.0.1:0), "
        f"default encoder {factory.__module__}.{getattr(factory, '__qualname__', factory)}; "
        "readers in this process and Trio loop",
        file=out,
    )
    print(
        f"throughput: {events:,} prebuilt events (bench journal mix) appended in batches of "
        f"{BATCH} straight into run.journal (producer excluded, at most {AHEAD} entries ahead of "
        "the encoder); limit: the recorded body writes replayed by a raw ASGI app, same worker",
        file=out,
    )
    print(file=out, flush=True)

    try:
        with otlp_sink() as sink:
            warm(sink)
            before = sink.stats()
            problems = _measure_and_print(events, delegations, rate, seconds, repeat, sink, out)
            exported = sink.stats() - before
    except SinkFailed as failure:
        print(f"!! FAILED {failure}", file=out, flush=True)
        return 1
    print(sink_line(sink, exported), file=out)
    if exported.spans < 1 or exported.refused:
        problems.append("FAILED tracing on: the OTLP receiver got no spans or refused an export")
    print(file=out)
    for problem in problems:
        print(f"!! {problem}", file=out)
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"max RSS of this process: {max_rss_kib / 1024:.1f} MiB", file=out, flush=True)
    return 1 if problems else 0


def _measure_and_print(
    events: int,
    delegations: int,
    rate: float,
    seconds: float,
    repeat: int,
    sink: OtlpSink,
    out: TextIO,
) -> list[str]:
    problems: list[str] = []
    engine_sides, raw_runs, floor_runs = _throughput(events, repeat, sink)
    engine_runs = engine_sides[OFF]
    engine_row = _throughput_row(engine_runs)
    raw_row = _throughput_row(raw_runs)
    floor_row = _throughput_row(floor_runs)
    header = (
        f"{'throughput':<36} {'events':>8} {'writes':>7} {'events/s':>10} {'messages/s':>11} "
        f"{'MB/s':>7} {'vs raw':>7} {'catch-ups':>9}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for label, row, catch in (
        ("raw ASGI app, same writes (limit)", raw_row, None),
        ("no engine, json.dumps per event", floor_row, None),
        ("engine: journal -> encoder -> SSE", engine_row, engine_runs[-1].catch_ups),
    ):
        print(
            f"{label:<36} {row[0].events:>8,} {row[0].writes:>7,} {_fmt(row[1]):>10} "
            f"{_fmt(row[2]):>11} {row[3]:>7.1f} {row[1] / raw_row[1]:>6.2f}x "
            f"{'' if catch is None else f'{catch:,}':>9}",
            file=out,
        )
    ratio = engine_row[1] / raw_row[1]
    met = ratio >= GOAL_RATIO and engine_row[1] >= GOAL_EVENTS_PER_S
    print(
        f"goal: >= {GOAL_RATIO}x the raw limit and >= {GOAL_EVENTS_PER_S:,} events/s: "
        f"{'MET' if met else 'NOT MET'} (ratio {ratio:.2f}, {_fmt(engine_row[1])} events/s)",
        file=out,
    )
    print(
        "events/s: journal events covered by the reader's last id: cursor / s, clock from the "
        "first append (raw: the first write) to the last body byte read; messages: SSE blocks; "
        "no engine: an ASGI app encoding each event of the same mix as its own SSE block "
        f"(json.dumps of three fields, its id:), {BATCH} per write: what a per-event Python "
        "encoder without the engine's merging delivers, for scale (the goal is against the "
        "raw limit); the engine row is tracing off (on: the tracing table below)",
        file=out,
    )
    for label, runs in (
        *((f"engine, tracing {side}", engine_sides[side]) for side in SIDES),
        ("raw", raw_runs),
        ("json.dumps", floor_runs),
    ):
        for run in runs:
            if not run.complete:
                problems.append(f"LOST throughput ({label}): the reader missed the last cursor")
    print(file=out, flush=True)

    _print_fanout(events, repeat, out)

    print(
        f"latency: {delegations} concurrent delegations to an in-process agent, each streaming "
        f"text deltas at {rate / delegations:g}/s ({rate:,.0f}/s in total) for {seconds:g} s; "
        f"{repeat} run(s) per tracing side, interleaved, latencies pooled",
        file=out,
        flush=True,
    )
    alone: dict[str, list[_Latency]] = {side: [] for side in SIDES}
    for index in range(repeat):
        for side in rotation(index):
            gc.collect()
            alone[side].append(trio.run(_latency_side, delegations, rate, seconds, side, sink))
    off_runs = alone[OFF]
    produced_seconds = sum(run.produced_seconds for run in off_runs)
    fast_rate = sum(run.fast.size for run in off_runs) / max(produced_seconds, 1e-9)
    slow_rate = fast_rate * SLOW_FRACTION
    gc.collect()
    shared = trio.run(_latency, delegations, rate, seconds, slow_rate)
    header = (
        f"{'latency, journal append -> bytes at the reader':<52} {'entries':>8} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'max ms':>7}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for label, pooled in (
        ("fast viewer alone", off_runs),
        ("fast viewer, with the slow viewer attached", [shared]),
    ):
        ms = _latency_ms(pooled)
        print(
            f"{label:<52} {sum(r.entries for r in pooled):>8,} {_percentile(ms, 0.5):>7.2f} "
            f"{_percentile(ms, 0.99):>7.2f} {max(ms, default=math.nan):>7.2f}",
            file=out,
        )
    for side, side_runs in alone.items():
        if not all(run.complete for run in side_runs):
            problems.append(f"LOST latency (fast viewer alone, tracing {side}): missed entries")
    if not shared.complete:
        problems.append("LOST latency (fast viewer, with the slow viewer): missed entries")
    p99 = _percentile(_latency_ms(off_runs), 0.99)
    entries = sum(run.entries for run in off_runs)
    print(
        f"goal: p99 < {GOAL_P99_MS:g} ms (fast viewer alone): "
        f"{'MET' if p99 < GOAL_P99_MS else 'NOT MET'} (p99 {p99:.2f} ms); produced "
        f"{entries / produced_seconds:,.0f} entries/s over {produced_seconds:.1f} s "
        f"({len(off_runs)} run(s)); tracing off (on: the tracing table below)",
        file=out,
    )
    print(file=out, flush=True)
    problems += _print_slow(shared, out)
    print(file=out)

    latency_ms = {side: _latency_ms(side_runs) for side, side_runs in alone.items()}
    throughput_row = SideRow(
        "throughput, events/s",
        {side: _throughput_row(runs)[1] for side, runs in engine_sides.items()},
        higher_is_better=True,
    )
    print_sides(
        f"tracing off vs on (medians of {repeat}, sides interleaved)",
        [
            throughput_row,
            *(
                SideRow(
                    f"latency {name} ms, fast viewer alone",
                    {side: _percentile(ms, q) for side, ms in latency_ms.items()},
                    higher_is_better=False,
                    digits=2,
                )
                for name, q in (("p50", 0.5), ("p99", 0.99))
            ),
        ],
        out,
    )
    print(goal_line(throughput_row, "throughput"), file=out)
    print(ON_MEANS, file=out)
    print(OFF_MEANS, file=out)
    return problems


def _latency_ms(runs: Sequence[_Latency]) -> list[float]:
    return [x * 1000 for run in runs for x in run.latencies]


def _encode_for_viewers(entries: Sequence[JournalEntry], viewers: int, share: bool) -> float:
    """Seconds the default encoder takes to write `entries` as SSE for `viewers` viewers of one
    run (its frames, then `sse_bytes`, as the server writes them), entry by entry in turn as live
    viewers take them; sharing the run's encoding or not."""
    factory = default_encoder_factory()
    encoders = []
    shared: dict[str, Any] = {}
    for _ in range(viewers):
        encoders.append(factory("thread-bench", "run-bench", "attributed", shared))
        if not share:
            shared = {}
    gc.collect()
    started = time.perf_counter()
    for entry in entries:
        for encoder in encoders:
            sse_bytes(encoder.frames(entry))
    return time.perf_counter() - started


def _print_fanout(events: int, repeat: int, out: TextIO) -> None:
    """The encoder's share of fanning one run out to many viewers: the same journal entries
    written for 1 and FANOUT_VIEWERS viewers, each viewer with its own encoding and with the
    run's `SharedEncoding` (what the server does)."""
    entries = [JournalEntry(e, i + 1) for i, e in enumerate(build_event_mix(events))]
    header = f"{'encoding for N viewers of one run':<44} {'viewers':>7} {'us/event/viewer':>16}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for viewers in (1, FANOUT_VIEWERS):
        for share in (False, True):
            seconds = statistics.median(
                _encode_for_viewers(entries, viewers, share) for _ in range(repeat)
            )
            label = "shared encoding (the server's)" if share else "an encoding per viewer"
            print(
                f"{label:<44} {viewers:>7} {seconds / len(entries) / viewers * 1e6:>16.2f}",
                file=out,
            )
    print(
        "the encoder alone (no journal, no socket), attributed mode, the throughput event mix",
        file=out,
    )
    print(file=out, flush=True)


def _throughput_row(runs: Sequence[_Throughput]) -> tuple[_Throughput, float, float, float]:
    """(a run, events/s, messages/s, MB/s), each the median over runs."""
    events = statistics.median(r.events / r.seconds for r in runs)
    messages = statistics.median(r.messages / r.seconds for r in runs)
    mb = statistics.median(r.size / r.seconds / 1e6 for r in runs)
    return runs[-1], events, messages, mb


def _print_slow(figures: _Latency, out: TextIO) -> list[str]:
    slow = figures.slow
    assert slow is not None
    problems = []
    fast_content = _content(figures.fast.body)
    slow_content = _content(slow.body)
    fast_texts = fast_content.texts
    text_ok = slow_content.texts == fast_texts
    agents_ok = bool(fast_texts) and all(
        text == "".join(_delta(n) for n in range(len(text) // len(_delta(0))))
        for text in fast_texts.values()
    )
    events_ok = slow_content.others == fast_content.others
    bound = figures.buffer_bound
    slow_pending = figures.max_pending[-1] if len(figures.max_pending) > 1 else 0
    within = all(p <= bound for p in figures.max_pending)
    print(
        f"slow viewer: raw socket (SO_RCVBUF {SLOW_RCVBUF // 1024} KiB), reads of {SLOW_READ} "
        f"bytes at {figures.slow_rate / 1e3:,.1f} kB/s (a tenth of the fast viewer's byte rate) "
        "while the run produces, then at full speed",
        file=out,
    )
    rows = [
        (
            "subscription pending bytes, max (slow viewer)",
            f"{slow_pending:,} of {bound:,}",
            within,
        ),
        (
            "subscription pending bytes, max (fast viewer)",
            f"{figures.max_pending[0] if figures.max_pending else 0:,} of {bound:,}",
            within,
        ),
        (
            "catch-ups from the store (fast, slow)",
            ", ".join(f"{c:,}" for c in figures.catch_ups),
            True,
        ),
        (
            "bytes written but not yet read by it, max",
            f"{figures.max_in_flight:,}",
            True,
        ),
        (
            "SSE messages (fast, slow)",
            f"{figures.fast.messages:,}, {slow.messages:,}",
            True,
        ),
        (
            "text per message equals the fast viewer's",
            f"{len(slow_content.texts)} messages, "
            f"{sum(map(len, slow_content.texts.values())):,} chars",
            text_ok and agents_ok,
        ),
        (
            "non-delta events equal the fast viewer's",
            f"{len(slow_content.others):,} of {len(fast_content.others):,}",
            events_ok,
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value, ok in rows:
        print(f"{label:<{width}}  {value:>28}  {'ok' if ok else 'FAILED'}", file=out)
    print(
        f"pending bytes sampled every {SAMPLE_EVERY * 1000:g} ms; a catch-up means the buffer "
        "refused an entry and the viewer read on from the replay window (which holds the run)",
        file=out,
    )
    if slow.messages < figures.fast.messages:
        print(
            "fewer SSE messages for the slow viewer: deltas merged in its buffer (text kept)",
            file=out,
        )
    if not within:
        problems.append(f"LOST slow viewer: a subscription buffer passed its bound ({bound:,})")
    if not (text_ok and agents_ok):
        problems.append("LOST slow viewer: its text differs from the fast viewer's or the agents'")
    if not events_ok:
        problems.append("LOST slow viewer: its non-delta events differ from the fast viewer's")
    return problems
