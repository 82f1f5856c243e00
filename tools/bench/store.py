"""The store benchmark (`python -m tools.bench store`): the journal's stores beside their clients.

This module owns four measurements of the run archives' journal stores (memory:
`engine.MemoryRunArchive`; SQLite: `open_sqlite_archive`; Redis: `open_redis_archive`), each
printed beside the raw client doing the same work in the same invocation:

1. Appends with fan-out: a `RunJournal` on the store appends `events` events of `bench journal`'s
   mix in batches of `BATCH` (the default `RetentionPolicy`, so the window evicts as in a real
   run), while `subscribers` live subscribers drain it; the clock runs from the first append
   until every subscriber holds the last cursor. Raw: the client alone writes the same rows
   (SQLite: `executemany` in one transaction per batch, on the Trio thread) or payloads (Redis:
   one pipeline of XADDs per batch), encoded before the clock; memory: `deque.extend`.
2. A viewer's latency on a non-owner node (Redis only: one SQLite file or memory has one node):
   archive A writes a run through a `RunJournal` at a paced `rate` events/s for `seconds`, each
   event stamped with `time.perf_counter()` in its `time` field as its batch is appended; archive
   B (another client, as another node has) follows it with a `JournalTail` (`read_after`, then
   `wait_entries` once caught up), as the server does for a run another node owns. Latency: the
   time a batch reaches the tail's reader minus each event's stamp. Raw: XADD pipelines at the
   same pace read by another client's XREAD BLOCK loop.
3. Resume: a run of `resume_events` events, a window that holds them all, read by a new reader
   from cursor 0 in chunks of `RESUME_CHUNK` (SQLite: a reopened archive, as after a restart;
   Redis: archive B; memory: the same archive). Raw: the client reading what it wrote itself
   (SELECT ... LIMIT, XRANGE ... COUNT), undecoded; beside them `event_from_json` alone over the
   same events, the floor of any store that keeps JSON.
4. Idle viewers: `viewers` tasks blocked in `wait_entries` on a node that does not write the run;
   the resident set's growth (after `gc.collect()` and `malloc_trim`) per viewer. Floors: bare Trio
   tasks parked, and (Redis) raw XREAD BLOCKs with a connection each; Redis rows also say how many
   of the viewers Redis itself holds blocked.

Redis is Debian's `redis-server`, started here on a free loopback port with nothing persisted
in a temporary directory and stopped by its process group; without it (or without coredis, the
`redis` extra) the Redis rows say they were skipped and why. Everything runs in this process,
each measurement in its own `trio.run`; the two "nodes" of the Redis measurements are two
archives with their own connection pools sharing one Trio loop. Stores are driven only through
their public surface; figures are never asserted anywhere.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import itertools
import math
import os
import platform
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import trio
import trio.lowlevel
import trio.testing

from engine import (
    DelegationEvent,
    JournalEntry,
    JournalTail,
    Kind,
    MemoryRunArchive,
    RetentionPolicy,
    RunArchive,
    RunJournal,
    RunRecord,
    event_from_json,
    to_json,
)
from tools.bench.journal import build_event_mix, percentile, release_free_memory, rss_kib
from tools.peers.children import stop_process_group

__all__ = ["FULL", "QUICK", "STORES", "StoreBenchSizes", "bench_store"]

STORES: Final = ("memory", "sqlite", "redis")
#: Events per append: what a run actor has ready in a busy run.
BATCH: Final = 100
#: Entries per read when resuming, as a viewer reconnecting reads them.
RESUME_CHUNK: Final = 512
#: Goals this benchmark checks.
GOAL_APPEND_RATIO: Final = 0.5
GOAL_P99_MS: Final = 20.0
GOAL_RESUME_SECONDS: Final = 1.0

_TICK: Final = 0.005  # the paced writer appends what is due every 5 ms
_FILL_BATCH: Final = 1_000  # events per append when filling a run to resume
_TAIL_WAIT: Final = 1.0  # JournalTail's wait_entries timeout (the server passes its keepalive)
_IDLE_WITHIN: Final = 600.0  # idle viewers wait this long: longer than the measurement
_SETTLE: Final = 0.2  # idle viewers count as parked once every task was blocked this long
_DEADLINE: Final = 120.0  # any one measurement; a broken store fails, never hangs
_REDIS_SERVER: Final = "redis-server"
_PR_SET_PDEATHSIG: Final = 1


@attrs.frozen(kw_only=True)
class StoreBenchSizes:
    """What one invocation measures (see the module docstring for each figure)."""

    events: int = attrs.field(validator=attrs.validators.ge(BATCH))
    subscribers: int = attrs.field(validator=attrs.validators.ge(1))
    repeat: int = attrs.field(validator=attrs.validators.ge(1))
    rate: float = attrs.field(validator=attrs.validators.gt(0))
    seconds: float = attrs.field(validator=attrs.validators.gt(0))
    resume_events: int = attrs.field(validator=attrs.validators.ge(RESUME_CHUNK))
    viewers: int = attrs.field(validator=attrs.validators.ge(1))


#: The default run (under about a minute on two cores).
FULL: Final = StoreBenchSizes(
    events=20_000,
    subscribers=4,
    repeat=3,
    rate=5_000,
    seconds=3.0,
    resume_events=100_000,
    viewers=1_000,
)
#: `--quick`: every row, small (what the smoke test runs).
QUICK: Final = StoreBenchSizes(
    events=2_000, subscribers=4, repeat=1, rate=5_000, seconds=0.5, resume_events=5_000, viewers=100
)


# -- a redis-server of our own ---------------------------------------------------------------


class _RedisUnavailable(RuntimeError):
    """redis-server or coredis is missing, or the server did not start (the reason)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL it when the starting thread dies.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def _redis_server(directory: Path) -> Iterator[tuple[str, int, str]]:
    """(url, pid, version) of a redis-server on a free loopback port, nothing persisted, its
    files in `directory`; stopped (its process group) on exit."""
    try:
        import coredis  # noqa: F401  (the `redis` extra)
    except ImportError:
        raise _RedisUnavailable("coredis is not installed (the `redis` extra)") from None
    binary = shutil.which(_REDIS_SERVER)
    if binary is None:
        raise _RedisUnavailable("redis-server is not installed (apt-get install redis-server)")
    words = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    shown = next((w[2:] for w in words if w.startswith("v=")), "?")
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    argv = [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(directory),
        "--logfile", str(directory / "redis.log"),
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
    try:
        deadline = time.monotonic() + 10.0
        while not _answers_ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise _RedisUnavailable(f"redis-server on port {port} did not start")
            time.sleep(0.02)  # polling a starting child: bounded by the deadline above
        yield f"redis://127.0.0.1:{port}/0", proc.pid, shown
    finally:
        stop_process_group(proc, 5.0)


# -- the stores --------------------------------------------------------------------------------


@attrs.define
class _Stores:
    """Opens each store's archive for one measurement: a fresh SQLite file or Redis namespace
    per `label`, so no measurement reads another's data."""

    directory: Path
    redis_url: str | None
    _counter: Iterator[int] = attrs.field(factory=itertools.count)

    def label(self, what: str) -> str:
        return f"{what}-{next(self._counter)}"

    @contextlib.asynccontextmanager
    async def archive(self, store: str, label: str, node: str = "a") -> AsyncIterator[RunArchive]:
        if store == "memory":
            yield MemoryRunArchive(node)
        elif store == "sqlite":
            from adapters.sqlite_archive import open_sqlite_archive

            async with open_sqlite_archive(self.directory / f"{label}.db", node=node) as archive:
                yield archive
        else:
            from adapters.redis_archive import open_redis_archive

            assert self.redis_url is not None
            async with open_redis_archive(
                self.redis_url, node=node, namespace=f"bench-{label}"
            ) as archive:
                yield archive

    @contextlib.asynccontextmanager
    async def redis(self, max_connections: int = 64) -> AsyncIterator[Any]:
        """A raw coredis client (what the archive uses underneath)."""
        import coredis

        assert self.redis_url is not None
        client: Any = coredis.Redis.from_url(
            self.redis_url, decode_responses=True, max_connections=max_connections
        )
        async with client:
            await client.ping()
            yield client

    def flush_redis(self) -> None:
        """Empty the server between measurements, so its memory stays small."""
        if self.redis_url is None:
            return

        async def flush() -> None:
            async with self.redis() as client:
                await client.flushall()

        trio.run(flush)


async def _open_run(archive: RunArchive, run_id: str) -> None:
    await archive.open_run(RunRecord(run_id=run_id, started_at=time.time(), node=archive.node))


def _rows(entries: Sequence[JournalEntry], run_id: str) -> list[tuple[Any, ...]]:
    """SQLite rows of the shape the archive writes (run, cursor, kind, weight, kept, event,
    format)."""
    return [(run_id, e.cursor, e.event.kind, e.weight, 0, to_json(e.event), 1) for e in entries]


def _payloads(entries: Sequence[JournalEntry]) -> list[tuple[str, dict[str, str]]]:
    """Redis stream (id, fields) of the shape the archive writes."""
    return [
        (f"{e.cursor}-0", {"v": "1", "w": str(e.weight), "k": "0", "e": to_json(e.event)})
        for e in entries
    ]


def _numbered(events: Sequence[DelegationEvent]) -> list[JournalEntry]:
    return [JournalEntry(event, cursor) for cursor, event in enumerate(events, start=1)]


def _raw_sqlite(path: Path) -> sqlite3.Connection:
    """A bare connection set up as the archive sets up its own, with its entries table."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS entries (run_id TEXT NOT NULL, cursor INTEGER NOT NULL, "
        "kind TEXT NOT NULL, weight INTEGER NOT NULL, retained INTEGER NOT NULL, "
        "event TEXT NOT NULL, format INTEGER NOT NULL, PRIMARY KEY (run_id, cursor))"
    )
    return conn


def _sqlite_insert(conn: sqlite3.Connection, batch: Sequence[tuple[Any, ...]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)", batch)
    conn.execute("COMMIT")


async def _xadd(client: Any, key: str, batch: Sequence[tuple[str, dict[str, str]]]) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for identifier, fields in batch:
            pipe.xadd(key, fields, identifier=identifier)


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# -- 1. appends with fan-out -------------------------------------------------------------------


@attrs.frozen
class _AppendRun:
    seconds: float
    complete: bool  # every subscriber received the last cursor


async def _journal_appends(stores: _Stores, store: str, count: int, subscribers: int) -> _AppendRun:
    label = stores.label(f"append-{store}")
    async with stores.archive(store, label) as archive:
        run_id = label
        await _open_run(archive, run_id)
        journal = RunJournal(run_id, store=archive.journal_store(run_id, RetentionPolicy()))
        events = build_event_mix(count, run_id)
        batches = [[JournalEntry(e) for e in chunk] for chunk in _chunks(events, BATCH)]
        subs = [journal.subscribe() for _ in range(subscribers)]
        finished_at = [math.inf] * subscribers

        async def drain(index: int) -> None:
            with contextlib.suppress(trio.EndOfChannel):
                while True:
                    batch = await subs[index].receive_batch()
                    if batch[-1].cursor >= count:
                        finished_at[index] = time.perf_counter()

        with trio.fail_after(_DEADLINE):
            async with trio.open_nursery() as nursery:
                for index in range(subscribers):
                    nursery.start_soon(drain, index)
                await trio.testing.wait_all_tasks_blocked()
                start = time.perf_counter()
                for batch in batches:
                    await journal.append_entries(batch)
                    await trio.lowlevel.checkpoint()  # the run actor yields between batches
                journal.close()
    return _AppendRun(max(finished_at) - start, all(t < math.inf for t in finished_at))


def _raw_appends(stores: _Stores, store: str, count: int) -> float:
    """Seconds for the client alone to write the same batches (payloads encoded before)."""
    run_id = stores.label(f"raw-append-{store}")
    entries = _numbered(build_event_mix(count, run_id))
    if store == "memory":
        kept: collections.deque[JournalEntry] = collections.deque()
        batches = _chunks(entries, BATCH)
        start = time.perf_counter()
        for batch in batches:
            kept.extend(batch)
        return time.perf_counter() - start
    if store == "sqlite":
        conn = _raw_sqlite(stores.directory / f"{run_id}.db")
        try:
            rows = _chunks(_rows(entries, run_id), BATCH)
            start = time.perf_counter()
            for batch in rows:
                _sqlite_insert(conn, batch)
            return time.perf_counter() - start
        finally:
            conn.close()

    async def redis() -> float:
        payloads = _chunks(_payloads(entries), BATCH)
        async with stores.redis() as client:
            start = time.perf_counter()
            for batch in payloads:
                await _xadd(client, f"bench-raw:{run_id}", batch)
            return time.perf_counter() - start

    return trio.run(redis)


# -- 2. a viewer's latency on a non-owner node -------------------------------------------------


@attrs.frozen
class _Latency:
    latencies: list[float]  # seconds, one per event delivered
    gaps: int
    write_seconds: float
    expected: int


async def _paced_writes(count: int, rate: float, write: Callable[[int, int, float], Any]) -> float:
    """Call `write(first, end, now)` every `_TICK` with the events due by then, until `count`;
    returns the seconds from the first write to the last."""
    start = time.perf_counter()
    trio_start = trio.current_time()
    written, tick = 0, 0
    while written < count:
        tick += 1
        due = min(count, math.ceil(rate * tick * _TICK))
        if due > written:
            await write(written, due, time.perf_counter())
            written = due
        await trio.sleep_until(trio_start + tick * _TICK)
    return time.perf_counter() - start


async def _tail_latency(stores: _Stores, count: int, rate: float) -> _Latency:
    label = stores.label("latency")
    run_id = label
    policy = RetentionPolicy()
    async with (
        stores.archive("redis", label, node="a") as owner,
        stores.archive("redis", label, node="b") as viewer,
    ):
        await _open_run(owner, run_id)
        journal = RunJournal(run_id, store=owner.journal_store(run_id, policy))
        events = build_event_mix(count, run_id)
        tail = JournalTail(
            viewer.journal_store(run_id, policy),
            0,
            functools.partial(viewer.wait_entries, run_id),
            wait_timeout=_TAIL_WAIT,
        )
        latencies: list[float] = []
        gaps = 0
        write_seconds = 0.0

        async def write(first: int, end: int, now: float) -> None:
            batch = [JournalEntry(attrs.evolve(e, time=now)) for e in events[first:end]]
            await journal.append_entries(batch)

        async def follow() -> None:
            nonlocal gaps
            async with tail:
                while True:
                    try:
                        batch = await tail.receive_batch(RESUME_CHUNK)
                    except trio.EndOfChannel:
                        return
                    now = time.perf_counter()
                    for entry in batch:
                        if entry.event.kind == Kind.GAP:
                            gaps += 1
                        else:
                            latencies.append(now - entry.event.time)

        async def produce() -> None:
            nonlocal write_seconds
            await trio.testing.wait_all_tasks_blocked(0.05)  # the tail is waiting
            write_seconds = await _paced_writes(count, rate, write)

        with trio.fail_after(_DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                nursery.start_soon(produce)
    return _Latency(latencies, gaps, write_seconds, count)


async def _raw_latency(stores: _Stores, count: int, rate: float) -> _Latency:
    key = f"bench-raw:{stores.label('latency')}"
    entries = _payloads(_numbered(build_event_mix(count, "raw")))
    latencies: list[float] = []
    write_seconds = 0.0
    async with stores.redis() as writer, stores.redis() as reader:

        async def write(first: int, end: int, now: float) -> None:
            stamp = repr(now)
            await _xadd(writer, key, [(i, {**f, "t": stamp}) for i, f in entries[first:end]])

        async def follow() -> None:
            last = "0-0"
            while len(latencies) < count:
                found = await reader.xread({key: last}, count=RESUME_CHUNK, block=1000)
                now = time.perf_counter()
                for stream_entries in (found or {}).values():
                    for entry in stream_entries:
                        latencies.append(now - float(entry.field_values["t"]))
                        last = entry.identifier

        async def produce() -> None:
            nonlocal write_seconds
            await trio.testing.wait_all_tasks_blocked(0.05)
            write_seconds = await _paced_writes(count, rate, write)

        with trio.fail_after(_DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                nursery.start_soon(produce)
    return _Latency(latencies, 0, write_seconds, count)


# -- 3. resume ---------------------------------------------------------------------------------


@attrs.frozen
class _Resume:
    write_seconds: float
    read_seconds: float
    read: int
    gaps: int


async def _read_all(read_after: Callable[[int, int], Any]) -> tuple[float, int, int]:
    """(seconds, entries, gap markers) reading from cursor 0 in chunks until nothing is left."""
    cursor = read = gaps = 0
    start = time.perf_counter()
    while True:
        chunk = await read_after(cursor, RESUME_CHUNK)
        if not chunk:
            break
        read += len(chunk)
        gaps += sum(1 for entry in chunk if entry.event.kind == Kind.GAP)
        cursor = chunk[-1].cursor
    return time.perf_counter() - start, read, gaps


async def _store_resume(stores: _Stores, store: str, count: int) -> _Resume:
    label = stores.label(f"resume-{store}")
    run_id = label
    policy = RetentionPolicy(max_events=count, max_bytes=1 << 40)
    events = build_event_mix(count, run_id)
    with trio.fail_after(_DEADLINE):
        async with stores.archive(store, label, node="a") as owner:
            await _open_run(owner, run_id)
            journal = RunJournal(run_id, store=owner.journal_store(run_id, policy))
            start = time.perf_counter()
            for chunk in _chunks(events, _FILL_BATCH):
                await journal.append_entries([JournalEntry(e) for e in chunk])
            write_seconds = time.perf_counter() - start
            if store == "memory":  # nothing outlives the archive object: read it there
                seconds, read, gaps = await _read_all(
                    owner.journal_store(run_id, policy).read_after
                )
                return _Resume(write_seconds, seconds, read, gaps)
            if store == "redis":  # another node resumes it while the owner lives
                async with stores.archive(store, label, node="b") as viewer:
                    seconds, read, gaps = await _read_all(
                        viewer.journal_store(run_id, policy).read_after
                    )
                return _Resume(write_seconds, seconds, read, gaps)
        # SQLite: the file reopened, as after a restart.
        async with stores.archive(store, label, node="a") as reopened:
            seconds, read, gaps = await _read_all(reopened.journal_store(run_id, policy).read_after)
    return _Resume(write_seconds, seconds, read, gaps)


def _raw_resume(stores: _Stores, store: str, count: int) -> _Resume:
    """The client writing the same run (batches of `_FILL_BATCH`) and reading it back in
    chunks, undecoded; memory: slicing a list of the entries."""
    run_id = stores.label(f"raw-resume-{store}")
    entries = _numbered(build_event_mix(count, run_id))
    if store == "memory":
        start = time.perf_counter()
        read, cursor = 0, 0
        while cursor < count:
            chunk = entries[cursor : cursor + RESUME_CHUNK]
            read += len(chunk)
            cursor = chunk[-1].cursor
        return _Resume(0.0, time.perf_counter() - start, read, 0)
    if store == "sqlite":
        conn = _raw_sqlite(stores.directory / f"{run_id}.db")
        try:
            start = time.perf_counter()
            for batch in _chunks(_rows(entries, run_id), _FILL_BATCH):
                _sqlite_insert(conn, batch)
            write_seconds = time.perf_counter() - start
            start = time.perf_counter()
            read, cursor = 0, 0
            while True:
                rows = conn.execute(
                    "SELECT cursor, event FROM entries WHERE run_id = ? AND cursor > ? "
                    "ORDER BY cursor LIMIT ?",
                    (run_id, cursor, RESUME_CHUNK),
                ).fetchall()
                if not rows:
                    break
                read += len(rows)
                cursor = rows[-1][0]
            return _Resume(write_seconds, time.perf_counter() - start, read, 0)
        finally:
            conn.close()

    async def redis() -> _Resume:
        key = f"bench-raw:{run_id}"
        async with stores.redis() as client:
            start = time.perf_counter()
            for batch in _chunks(_payloads(entries), _FILL_BATCH):
                await _xadd(client, key, batch)
            write_seconds = time.perf_counter() - start
            start = time.perf_counter()
            read, cursor = 0, 0
            while True:
                found = await client.xrange(key, f"{cursor + 1}-0", "+", count=RESUME_CHUNK)
                if not found:
                    break
                read += len(found)
                cursor = int(str(found[-1].identifier).partition("-")[0])
            return _Resume(write_seconds, time.perf_counter() - start, read, 0)

    return trio.run(redis)


def _decode_seconds(count: int) -> float:
    """`event_from_json` alone over the run's events: what any store keeping JSON pays."""
    texts = [to_json(event) for event in build_event_mix(count)]
    start = time.perf_counter()
    for text in texts:
        event_from_json(text)
    return time.perf_counter() - start


# -- 4. idle viewers ---------------------------------------------------------------------------


@attrs.frozen
class _Idle:
    kib_per_viewer: float
    in_redis: str  # blocked clients / connected clients the server reports ("" if not Redis)


async def _redis_clients(stores: _Stores) -> tuple[int, int]:
    async with stores.redis() as client:
        info = await client.info("clients")
    # The probe's own connection is counted as connected, not blocked.
    return int(info["blocked_clients"]), int(info["connected_clients"]) - 1


async def _parked_growth(
    stores: _Stores, viewers: int, park: Callable[[], Any], redis: bool
) -> _Idle:
    """Resident set growth per task while `viewers` tasks run `park()` and are blocked."""
    release_free_memory()
    before = rss_kib()
    in_redis = ""
    with trio.fail_after(_DEADLINE):
        async with trio.open_nursery() as nursery:
            for _ in range(viewers):
                nursery.start_soon(park)
            await trio.testing.wait_all_tasks_blocked(_SETTLE)
            release_free_memory()
            after = rss_kib()
            if redis:
                blocked, connected = await _redis_clients(stores)
                in_redis = f"{blocked:,} blocked / {connected:,} conns"
            nursery.cancel_scope.cancel()
    return _Idle((after - before) / viewers, in_redis)


async def _idle_viewers(stores: _Stores, store: str, viewers: int) -> _Idle:
    label = stores.label(f"idle-{store}")
    run_id = label
    policy = RetentionPolicy()
    head_events = build_event_mix(20, run_id)[:5]  # run.started and 4 starts: a live run
    async with stores.archive(store, label, node="a") as owner:
        await _open_run(owner, run_id)
        journal = RunJournal(run_id, store=owner.journal_store(run_id, policy))
        await journal.append_entries([JournalEntry(e) for e in head_events])
        head = journal.head
        async with contextlib.AsyncExitStack() as stack:
            viewer = owner
            if store == "redis":  # the viewers' node is another client of the same Redis
                viewer = await stack.enter_async_context(stores.archive(store, label, node="b"))
                await viewer.head(run_id)  # its pool's first connection, before the baseline

            async def park() -> None:
                await viewer.wait_entries(run_id, head, _IDLE_WITHIN)

            return await _parked_growth(stores, viewers, park, store == "redis")


async def _idle_raw_redis(stores: _Stores, viewers: int) -> _Idle:
    key = f"bench-raw:{stores.label('idle')}"
    async with stores.redis(max_connections=viewers + 8) as client:
        await _xadd(client, key, [("1-0", {"e": "{}"})])

        async def park() -> None:
            await client.xread({key: "1-0"}, count=1, block=int(_IDLE_WITHIN * 1000))

        return await _parked_growth(stores, viewers, park, True)


async def _idle_bare(stores: _Stores, viewers: int) -> _Idle:
    return await _parked_growth(stores, viewers, trio.sleep_forever, False)


# -- report ------------------------------------------------------------------------------------


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def bench_store(
    sizes: StoreBenchSizes = FULL,
    *,
    stores: Sequence[str] = STORES,
    out: TextIO | None = None,
) -> int:
    """Measure and print the four figures for each of `stores` beside the raw clients.

    Returns 0; 1 if a reader missed entries (a LOST line says which); 2 for an unknown store.
    """
    out = out or sys.stdout
    unknown = [s for s in stores if s not in STORES]
    if unknown or not stores:
        print(f"--stores takes a comma-separated subset of {','.join(STORES)}", file=out)
        return 2
    with tempfile.TemporaryDirectory(prefix="subagent-engine-bench-store-") as tmp:
        directory = Path(tmp)
        with contextlib.ExitStack() as stack:
            redis_url: str | None = None
            skipped: str | None = None
            server = "not measured"
            if "redis" in stores:
                try:
                    redis_url, pid, shown = stack.enter_context(_redis_server(directory / "redis"))
                    server = f"redis-server {shown} (pid {pid}, {redis_url})"
                except _RedisUnavailable as exc:
                    skipped = str(exc)
                    server = f"skipped: {skipped}"
            runner = _Runner(_Stores(directory, redis_url), sizes, out, skipped)
            runner.header(server, stores)
            code = runner.run([s for s in stores if s != "redis" or redis_url is not None])
    return code


@attrs.define
class _Runner:
    stores: _Stores
    sizes: StoreBenchSizes
    out: TextIO
    redis_skipped: str | None
    problems: list[str] = attrs.field(factory=list)

    def print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def skipped_row(self) -> None:
        if self.redis_skipped is not None:
            self.print(f"{'redis':<7} skipped: {self.redis_skipped}")

    def header(self, server: str, stores: Sequence[str]) -> None:
        try:
            coredis_version = version("coredis")
        except PackageNotFoundError:  # the `redis` extra is not installed
            coredis_version = "not installed"
        self.print(
            f"subagent-engine bench store: Python {platform.python_version()}, "
            f"trio {trio.__version__}, SQLite {sqlite3.sqlite_version}, coredis {coredis_version}, "
            f"os.cpu_count()={os.cpu_count()}"
        )
        self.print(f"stores: {', '.join(stores)}; redis: {server}")
        self.print(
            f"events: bench journal's mix (lifecycle first and last, ~20-character text deltas "
            f"of 4 delegations, a status every 50); appends of {BATCH}; "
            f"median of {self.sizes.repeat} run(s) where repeated"
        )
        self.print()

    def run(self, stores: Sequence[str]) -> int:
        self.appends(stores)
        self.latency(stores)
        self.resume(stores)
        self.idle(stores)
        for problem in self.problems:
            self.print(f"!! {problem}")
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.print(f"max RSS of this process: {max_rss / 1024:.1f} MiB")
        return 1 if self.problems else 0

    # 1.
    def appends(self, stores: Sequence[str]) -> None:
        sizes = self.sizes
        self.print(
            f"appends with fan-out: a RunJournal on the store appending {sizes.events:,} events "
            f"in batches of {BATCH} with {sizes.subscribers} live subscribers reading (the default "
            f"window of {RetentionPolicy().max_events:,} events, evicting as a run does), clock "
            f"until every subscriber holds the last cursor; raw: the client alone writing the "
            f"same rows/payloads (encoded before the clock)"
        )
        header = f"{'store':<7} {'path':<44} {'events':>8} {'events/s':>12} {'vs raw':>7}"
        self.print(header)
        self.print("-" * len(header))
        ratios: dict[str, float] = {}
        for store in stores:
            runs = []
            for _ in range(sizes.repeat):
                run = trio.run(
                    _journal_appends, self.stores, store, sizes.events, sizes.subscribers
                )
                runs.append(run)
                if not run.complete:
                    self.problems.append(
                        f"LOST appends on {store}: a subscriber never received the last cursor"
                    )
            raw = [_raw_appends(self.stores, store, sizes.events) for _ in range(sizes.repeat)]
            rate = sizes.events / _median([r.seconds for r in runs])
            raw_rate = sizes.events / _median(raw)
            ratios[store] = rate / raw_rate
            raw_path = {
                "memory": "raw: deque.extend per batch",
                "sqlite": "raw: executemany, 1 transaction per batch",
                "redis": "raw: pipelined XADD per batch",
            }[store]
            path = f"RunJournal + {sizes.subscribers} subscribers"
            ratio = "-" if store == "memory" else f"{ratios[store]:.2f}x"
            self.print(f"{store:<7} {path:<44} {sizes.events:>8,} {_fmt(rate):>12} {ratio:>7}")
            self.print(f"{store:<7} {raw_path:<44} {sizes.events:>8,} {_fmt(raw_rate):>12}")
            if store == "redis":
                self.stores.flush_redis()
        self.skipped_row()
        durable = {s: r for s, r in ratios.items() if s != "memory"}
        verdicts = ", ".join(
            f"{s} {_verdict(r >= GOAL_APPEND_RATIO)} ({r:.2f}x)" for s, r in durable.items()
        )
        self.print(
            f"goal: a durable store's journal >= {GOAL_APPEND_RATIO}x its raw client: "
            f"{verdicts or 'no durable store measured'} (memory: no client; its raw row is "
            "the container alone, see bench journal for the fan-out's floor)"
        )
        self.print()

    # 2.
    def latency(self, stores: Sequence[str]) -> None:
        sizes = self.sizes
        count = max(BATCH, round(sizes.rate * sizes.seconds))
        self.print(
            f"viewer latency on a non-owner node: node A writes {count:,} events at "
            f"{_fmt(sizes.rate)} events/s (every {_TICK * 1000:g} ms what is due), node B "
            f"follows with a JournalTail (read_after + wait_entries); per event, stamp at "
            f"append -> batch at B's reader"
        )
        header = (
            f"{'store':<7} {'path':<44} {'events':>8} {'events/s':>10} {'p50 ms':>7} "
            f"{'p99 ms':>7} {'max ms':>7}"
        )
        self.print(header)
        self.print("-" * len(header))
        for store in stores:
            if store == "memory":
                self.print(f"{'memory':<7} n/a: one process, viewers read the journal's fan-out")
            elif store == "sqlite":
                self.print(f"{'sqlite':<7} n/a: one node owns the file (its viewers are local)")
        p99: float | None = None
        if "redis" in stores:
            ours = trio.run(_tail_latency, self.stores, count, sizes.rate)
            raw = trio.run(_raw_latency, self.stores, count, sizes.rate)
            self.stores.flush_redis()
            for path, result in (
                ("archive B: JournalTail", ours),
                ("raw: XADD pipeline -> XREAD BLOCK (client B)", raw),
            ):
                lat = result.latencies
                self.print(
                    f"{'redis':<7} {path:<44} {len(lat):>8,} "
                    f"{_fmt(result.expected / result.write_seconds):>10} "
                    f"{_ms(percentile(lat, 0.5)):>7} {_ms(percentile(lat, 0.99)):>7} "
                    f"{_ms(max(lat, default=math.nan)):>7}"
                )
                if len(lat) + result.gaps < result.expected and result.gaps == 0:
                    self.problems.append(
                        f"LOST latency on redis ({path}): {len(lat):,} of "
                        f"{result.expected:,} events delivered"
                    )
            if ours.gaps:
                self.print(
                    f"   (the tail met {ours.gaps} gap marker(s): it fell behind the window)"
                )
            p99 = percentile(ours.latencies, 0.99) * 1000
        self.skipped_row()
        goal = (
            f"{_verdict(p99 < GOAL_P99_MS)} (p99 {p99:.1f} ms)"
            if p99 is not None
            else "not measured"
        )
        self.print(f"goal: p99 < {GOAL_P99_MS:g} ms on loopback: {goal}")
        self.print()

    # 3.
    def resume(self, stores: Sequence[str]) -> None:
        count = self.sizes.resume_events
        self.print(
            f"resume: a run of {count:,} events (a window holding all of them) read from "
            f"cursor 0 in chunks of {RESUME_CHUNK} by a new reader (sqlite: the file reopened; "
            f"redis: node B; memory: the same archive); raw: the client reading what it wrote, "
            f"undecoded"
        )
        header = (
            f"{'store':<7} {'path':<44} {'events':>8} {'read s':>7} {'events/s':>12} {'write s':>8}"
        )
        self.print(header)
        self.print("-" * len(header))
        verdicts = []
        for store in stores:
            ours = trio.run(_store_resume, self.stores, store, count)
            raw = _raw_resume(self.stores, store, count)
            raw_path = {
                "memory": "raw: slices of a list",
                "sqlite": "raw: SELECT ... LIMIT, rows undecoded",
                "redis": "raw: XRANGE ... COUNT, fields undecoded",
            }[store]
            for path, result in (("store.read_after", ours), (raw_path, raw)):
                write = f"{result.write_seconds:>8.2f}" if result.write_seconds else f"{'':>8}"
                self.print(
                    f"{store:<7} {path:<44} {result.read:>8,} {result.read_seconds:>7.2f} "
                    f"{_fmt(result.read / result.read_seconds):>12} {write}"
                )
            if ours.read != count or ours.gaps:
                self.problems.append(
                    f"LOST resume on {store}: read {ours.read:,} entries ({ours.gaps} gap "
                    f"markers) of {count:,}"
                )
            verdicts.append(
                f"{store} {_verdict(ours.read_seconds < GOAL_RESUME_SECONDS)} "
                f"({ours.read_seconds:.2f} s)"
            )
            if store == "redis":
                self.stores.flush_redis()
        decode = _decode_seconds(count)
        self.print(
            f"{'any':<7} {'event_from_json alone (the JSON codec)':<44} {count:>8,} "
            f"{decode:>7.2f} {_fmt(count / decode):>12}"
        )
        self.skipped_row()
        self.print(f"goal: the whole replay in < {GOAL_RESUME_SECONDS:g} s: {', '.join(verdicts)}")
        self.print("write s: filling the run in appends of 1,000 (not the goal's figure)")
        self.print()

    # 4.
    def idle(self, stores: Sequence[str]) -> None:
        viewers = self.sizes.viewers
        self.print(
            f"idle viewers: {viewers:,} tasks blocked in wait_entries on a node that does not "
            f"write the run (redis: node B; sqlite, memory: the one node); resident set growth "
            f"per viewer"
        )
        header = f"{'store':<7} {'path':<44} {'viewers':>8} {'KiB/viewer':>11}  in Redis"
        self.print(header)
        self.print("-" * len(header))
        rows: list[tuple[str, str, _Idle]] = []
        for store in stores:
            rows.append(
                (
                    store,
                    "archive.wait_entries",
                    trio.run(_idle_viewers, self.stores, store, viewers),
                )
            )
        if "redis" in stores:
            rows.append(
                (
                    "redis",
                    "raw: XREAD BLOCK, a connection each",
                    trio.run(_idle_raw_redis, self.stores, viewers),
                )
            )
            self.stores.flush_redis()
        rows.append(("any", "bare Trio tasks parked", trio.run(_idle_bare, self.stores, viewers)))
        for store, path, idle in rows:
            self.print(
                f"{store:<7} {path:<44} {viewers:>8,} {idle.kib_per_viewer:>11.2f}  "
                f"{idle.in_redis}".rstrip()
            )
        self.skipped_row()
        if "redis" in stores:
            self.print(
                "in Redis: the viewers the server holds blocked and the connections it holds "
                "for them; the archive's pool is bounded (open_redis_archive's max_connections): "
                "the other viewers wait for a connection, and one that waits past within + "
                "call_timeout fails with ArchiveUnavailableError although Redis answers"
            )
        self.print()
