"""Micro-benchmarks printed beside this machine's own limits (`python -m tools.bench journal`).

This module owns the journal benchmark: it measures a bare Trio memory channel (the ceiling for
any in-process fan-out here), then a `RunJournal` appending a realistic event mix in batches and
fanning it out to concurrent subscribers, and prints both side by side with the ratio the design
aims for. It drives the engine only through what a run actor and an SSE writer use
(`append_entries`, `subscribe`, `receive_batch`) and reads statistics afterwards; it holds no rules
of its own and must not change engine behaviour to look faster.

Method: every input is built before the clock starts (fresh `JournalEntry` objects per run, since
the journal stamps their cursors); the clock runs from the first append until every subscriber
has received the last cursor; each figure is the median of `repeat` runs; the garbage collector
stays enabled (a server runs with it) but is emptied before each run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import attrs
import trio
import trio.lowlevel
import trio.testing

from engine import DelegationEvent, JournalEntry, Kind, RunJournal

__all__ = [
    "answer_lifespan",
    "bench_journal",
    "build_event_mix",
    "percentile",
    "release_free_memory",
    "rss_kib",
]


async def answer_lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI lifespan scope (startup, then shutdown): for the benchmarks' bare apps."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def release_free_memory() -> None:
    """Collect garbage and hand freed heap back to the OS (glibc's `malloc_trim`, where there is
    one), so a resident-set sample counts what is alive, not what an allocator keeps."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name is not None:
        trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
        if trim is not None:
            trim(0)


def rss_kib() -> float:
    """The resident set now, from /proc/self/statm (ru_maxrss, the peak, where there is none)."""
    try:
        with open("/proc/self/statm") as statm:
            resident_pages = int(statm.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (inclusive): defined for one value too; NaN
    for none. The benches' one percentile (bench sse keeps its nearest-rank definition)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


#: Events per `append_entries` call and per bare-channel send burst: what a run actor has ready.
BATCH: Final = 256
#: events x subscribers per journal run above which the event count is cut, to keep a default
#: run (3 repeats of 1 and 100 subscribers on 2 cores) under a minute.
DELIVERY_BUDGET: Final = 1_000_000
#: Events for the awaited-channel row (~100k/s at best; context only, so keep it short).
AWAITED_EVENTS: Final = 50_000
#: The design goal this benchmark checks.
GOAL_RATIO: Final = 0.33

_RUN_ID: Final = "bench-run"
_DELEGATIONS: Final = 4  # parallel subagents interleaving their streams
_STATUS_EVERY: Final = 50  # one status per this many middle events
_MESSAGE_EVERY: Final = 400  # a delegation starts a new message after this many of its deltas
_DELTA: Final = "streaming a token, "  # ~20 characters, a typical model delta
_MIN_EVENTS: Final = 2 * _DELEGATIONS + 2  # the lifecycle alone
_MIN_CUT: Final = 1_000  # never cut a large subscriber count below this many events


@attrs.frozen
class _JournalRun:
    seconds: float
    delivered: int  # entries delivered, summed over subscribers
    merged: int
    folded: int
    refused: int
    catch_ups: int
    gaps: int
    complete: bool  # every subscriber received the last cursor


@attrs.frozen
class _Row:
    label: str
    events: int
    subscribers: int
    events_per_s: float
    last: _JournalRun | None = None  # counts from the last repeat (journal rows only)


def build_event_mix(count: int, run_id: str = _RUN_ID) -> list[DelegationEvent]:
    """`count` events as one run produces them: lifecycle first and last, deltas in between.

    `run.started` and one `subagent.started` per delegation open it; the middle interleaves the
    delegations round-robin, mostly text deltas (~20 characters, grouped into messages) with a
    distinct status every `_STATUS_EVERY` events; each delegation's `subagent.finished` and the
    `run.finished` close it, so no terminal sits in the middle. Nothing here is rejected or
    synthesized by the journal: cursor `count` is the last one issued.
    """
    ids = [f"deleg-{n}" for n in range(_DELEGATIONS)]
    envelope: dict[str, dict[str, Any]] = {
        d: {
            "delegation_id": d,
            "parent_tool_call_id": f"call-{d}",
            "agent_key": "research",
            "agent_name": "Research Agent",
            "protocol": "a2a",
        }
        for d in ids
    }
    head = [DelegationEvent(kind=Kind.RUN_STARTED, run_id=run_id)]
    head += [DelegationEvent(kind=Kind.STARTED, run_id=run_id, **envelope[d]) for d in ids]
    tail = [DelegationEvent(kind=Kind.FINISHED, run_id=run_id, **envelope[d]) for d in ids]
    tail.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=run_id))
    if count < len(head) + len(tail):
        raise ValueError(f"the mix needs at least {len(head) + len(tail)} events")
    middle: list[DelegationEvent] = []
    sequence = dict.fromkeys(ids, 0)
    for n in range(count - len(head) - len(tail)):
        d = ids[n % _DELEGATIONS]
        sequence[d] += 1
        seq = sequence[d]
        if n % _STATUS_EVERY == _STATUS_EVERY - 1:
            event = DelegationEvent(
                kind=Kind.STATUS,
                run_id=run_id,
                sequence=seq,
                status="working",
                text=f"step {seq}",  # distinct, so no status is folded
                **envelope[d],
            )
        else:
            event = DelegationEvent(
                kind=Kind.TEXT_DELTA,
                run_id=run_id,
                sequence=seq,
                message_id=f"{d}-msg-{seq // _MESSAGE_EVERY}",
                delta=_DELTA,
                **envelope[d],
            )
        middle.append(event)
    return head + middle + tail


# -- measurements ----------------------------------------------------------------------------


async def _bare_channel_once(items: Sequence[object]) -> float:
    """send_nowait a burst of BATCH, drain it with receive_nowait, repeat; seconds."""
    send, receive = trio.open_memory_channel[object](math.inf)
    bursts = [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
    send_nowait, receive_nowait = send.send_nowait, receive.receive_nowait
    start = time.perf_counter()
    for burst in bursts:
        for item in burst:
            send_nowait(item)
        for _ in range(len(burst)):
            receive_nowait()
    elapsed = time.perf_counter() - start
    await send.aclose()
    await receive.aclose()
    return elapsed


async def _bare_channel_two_tasks_once(items: Sequence[object]) -> float:
    """The journal's shape on a bare channel: a producer task sends bursts of BATCH and yields,
    a consumer task wakes and drains with receive_nowait; seconds until the last is received."""
    send, receive = trio.open_memory_channel[object](math.inf)
    bursts = [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
    total = len(items)
    done = 0.0

    async def consume() -> None:
        nonlocal done
        receive_nowait = receive.receive_nowait
        received = 0
        while received < total:
            await receive.receive()
            received += 1
            while True:
                try:
                    receive_nowait()
                except trio.WouldBlock:
                    break
                received += 1
        done = time.perf_counter()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.lowlevel.checkpoint()
        send_nowait = send.send_nowait
        start = time.perf_counter()
        for burst in bursts:
            for item in burst:
                send_nowait(item)
            await trio.lowlevel.checkpoint()
    await send.aclose()
    await receive.aclose()
    return done - start


async def _awaited_channel_once(count: int) -> float:
    """One task awaits send of `count` items, another awaits receive (unbuffered); seconds."""
    send, receive = trio.open_memory_channel[int](0)
    done = 0.0

    async def consume() -> None:
        nonlocal done
        async with receive:
            async for _ in receive:
                pass
        done = time.perf_counter()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.lowlevel.checkpoint()
        start = time.perf_counter()
        async with send:
            for n in range(count):
                await send.send(n)
    return done - start


async def _journal_once(events: Sequence[DelegationEvent], subscribers: int) -> _JournalRun:
    """Append `events` in batches while `subscribers` tasks drain; seconds to the last cursor."""
    journal = RunJournal(_RUN_ID)
    batches = [
        [JournalEntry(event) for event in events[i : i + BATCH]]
        for i in range(0, len(events), BATCH)
    ]
    last_cursor = len(events)
    subs = [journal.subscribe() for _ in range(subscribers)]
    finished_at = [math.inf] * subscribers
    delivered = [0] * subscribers
    gaps = [0] * subscribers

    async def drain(index: int) -> None:
        sub = subs[index]
        count = 0
        try:
            while True:
                batch = await sub.receive_batch()
                count += len(batch)
                if sub.catch_ups:  # gap markers only appear after a catch-up
                    gaps[index] += sum(1 for e in batch if e.event.kind == Kind.GAP)
                if batch[-1].cursor >= last_cursor:
                    finished_at[index] = time.perf_counter()
        except trio.EndOfChannel:
            pass
        delivered[index] = count

    async with trio.open_nursery() as nursery:
        for index in range(subscribers):
            nursery.start_soon(drain, index)
        # Let every subscriber finish its (empty) replay and join the live fan-out.
        await trio.testing.wait_all_tasks_blocked()
        if journal.statistics().live_subscribers != subscribers:
            raise RuntimeError("subscribers did not join the live fan-out before the clock")
        start = time.perf_counter()
        for batch in batches:
            await journal.append_entries(batch)
            await trio.lowlevel.checkpoint()  # the run actor yields between batches
    stats = [sub._buffer.statistics() for sub in subs]
    return _JournalRun(
        seconds=max(finished_at) - start,
        delivered=sum(delivered),
        merged=sum(s.merged_deltas for s in stats),
        folded=sum(s.folded_statuses for s in stats),
        refused=sum(s.refused_offers for s in stats),
        catch_ups=sum(sub.catch_ups for sub in subs),
        gaps=sum(gaps),
        complete=all(t < math.inf for t in finished_at),
    )


def _median_rate(count: int, runs: Sequence[float]) -> float:
    return count / statistics.median(runs)


def _repeat(repeat: int, once: Callable[[], float]) -> list[float]:
    seconds = []
    for _ in range(repeat):
        gc.collect()
        seconds.append(once())
    return seconds


def _journal_row(events: Sequence[DelegationEvent], subscribers: int, repeat: int) -> _Row:
    runs: list[_JournalRun] = []
    for _ in range(repeat):
        gc.collect()
        runs.append(trio.run(_journal_once, events, subscribers))
    rate = _median_rate(len(events), [r.seconds for r in runs])
    noun = "subscriber" if subscribers == 1 else "subscribers"
    return _Row(f"journal, {subscribers} {noun}", len(events), subscribers, rate, runs[-1])


# -- report ----------------------------------------------------------------------------------


def _events_for(events: int, subscribers: int) -> int:
    return min(events, max(_MIN_CUT, DELIVERY_BUDGET // subscribers))


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


def _print_table(rows: Sequence[_Row], bare_rate: float, out: TextIO) -> None:
    header = (
        f"{'measurement':<34} {'events':>8} {'subs':>5} {'events/s':>11} {'deliveries/s':>13} "
        f"{'vs bare':>8} {'delivered':>10} {'merged':>9} {'folded':>7} {'catch-ups':>9}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for row in rows:
        line = (
            f"{row.label:<34} {row.events:>8,} {row.subscribers:>5} {_fmt(row.events_per_s):>11} "
            f"{_fmt(row.events_per_s * row.subscribers):>13} "
            f"{row.events_per_s / bare_rate:>7.2f}x"
        )
        if row.last is not None:
            line += (
                f" {row.last.delivered:>10,} {row.last.merged:>9,} {row.last.folded:>7,}"
                f" {row.last.catch_ups:>9,}"
            )
        print(line, file=out)


def bench_journal(
    *, events: int, subscriber_counts: list[int], repeat: int, out: TextIO | None = None
) -> int:
    """Measure and print the journal's append + fan-out rate beside a bare memory channel.

    One subscriber is always measured (the goal is stated for it). Returns 0; 1 if a subscriber
    missed the last cursor or entries went unaccounted for; 2 if `events` is too small.
    """
    out = out or sys.stdout
    repeat = max(1, repeat)
    counts = [c for c in dict.fromkeys([1, *subscriber_counts]) if c > 0]
    if events < _MIN_EVENTS:
        print(f"--events must be at least {_MIN_EVENTS}", file=out)
        return 2
    mix = build_event_mix(events)
    _print_setup(repeat, out)

    items: list[object] = list(range(events))
    bare_rate = _median_rate(events, _repeat(repeat, lambda: trio.run(_bare_channel_once, items)))
    two_tasks = _repeat(repeat, lambda: trio.run(_bare_channel_two_tasks_once, items))
    awaited = min(events, AWAITED_EVENTS)
    awaited_runs = _repeat(repeat, lambda: trio.run(_awaited_channel_once, awaited))
    rows = [
        _Row("bare channel nowait, 1 task", events, 1, bare_rate),
        _Row("bare channel nowait, 2 tasks", events, 1, _median_rate(events, two_tasks)),
        _Row("bare channel awaited, 2 tasks", awaited, 1, _median_rate(awaited, awaited_runs)),
    ]
    problems: list[str] = []
    for subscribers in counts:
        n = _events_for(events, subscribers)
        row = _journal_row(mix if n == events else build_event_mix(n), subscribers, repeat)
        rows.append(row)
        problems += _check(row)

    _print_table(rows, bare_rate, out)
    print(file=out)
    one_rate = next(r.events_per_s for r in rows if r.last is not None and r.subscribers == 1)
    ratio = one_rate / bare_rate
    print(
        f"goal: journal with 1 subscriber within 3x of the bare channel "
        f"(ratio >= {GOAL_RATIO}): {'MET' if ratio >= GOAL_RATIO else 'NOT MET'} "
        f"(ratio {ratio:.2f})",
        file=out,
    )
    print(
        "events/s: events appended per second, clock from the first append until every "
        "subscriber holds the last cursor; deliveries/s = events/s x subscribers",
        file=out,
    )
    print(
        "delivered/merged/folded/catch-ups: last run, summed over subscribers; "
        "delivered + merged = events x subscribers unless statuses were folded or a reader "
        "caught up from the store",
        file=out,
    )
    if any(_events_for(events, c) != events for c in counts):
        print(
            f"events cut to max({_MIN_CUT:,}, {DELIVERY_BUDGET:,} / subscribers) for large "
            "subscriber counts (see the events column)",
            file=out,
        )
    if any(r.last is not None and r.last.merged for r in rows):
        print(
            "merged > 0 with fast readers: a whole append batch is pending before a reader runs, "
            "so each reader's LaneBuffer merges a message's adjacent deltas within the batch",
            file=out,
        )
    for problem in problems:
        print(f"!! {problem}", file=out)
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"max RSS of this process: {max_rss_kib / 1024:.1f} MiB", file=out, flush=True)
    return 1 if any(p.startswith("LOST") for p in problems) else 0


def _print_setup(repeat: int, out: TextIO) -> None:
    print(
        f"subagent-engine bench journal: Python {platform.python_version()}, "
        f"trio {trio.__version__}, os.cpu_count()={os.cpu_count()}, "
        f"median of {repeat} run(s), appends and bursts of {BATCH}",
        file=out,
    )
    print(
        "store: MemoryJournalStore defaults (window of 10,000 events / 8 MiB, evicting during "
        "the run as a real run does); subscriber buffers: journal default (1 MiB)",
        file=out,
    )
    print(
        f"event mix: run.started, {_DELEGATIONS} x subagent.started, then round-robin over "
        f"{_DELEGATIONS} delegations: text deltas of {len(_DELTA)} chars (a new message every "
        f"{_MESSAGE_EVERY}) and 1 distinct status per {_STATUS_EVERY}; terminals at the end",
        file=out,
    )
    print(file=out, flush=True)


def _check(row: _Row) -> list[str]:
    """What a journal row's last run says about lost or degraded delivery."""
    run = row.last
    if run is None:
        return []
    problems = []
    if not run.complete:
        problems.append(f"LOST {row.label}: a subscriber never received the last cursor")
    accounted = run.delivered + run.merged
    expected = row.events * row.subscribers
    if run.catch_ups == 0 and run.folded == 0 and accounted != expected:
        problems.append(
            f"LOST {row.label}: delivered + merged = {accounted:,}, expected {expected:,}"
        )
    if run.refused or run.catch_ups or run.gaps:
        problems.append(
            f"{row.label}: {run.refused:,} refused offers, {run.catch_ups:,} catch-ups, "
            f"{run.gaps:,} gap markers delivered"
        )
    return problems
