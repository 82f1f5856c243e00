"""The Redis run archive while its Redis is slow or down, against a real redis-server (one per
test, on loopback): an outage shorter than the outage budget loses nothing and writes nothing
twice, a longer one ends the run with a typed `store_unavailable` terminal its live viewers
get, the bytes waiting for Redis stay bounded, and reads fail at once instead of hanging."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import coredis
import coredis.exceptions
import pytest
import trio
from coredis.tokens import PureToken

from adapters.redis_archive import (
    ArchiveUnavailableError,
    RedisRunArchive,
    open_redis_archive,
)
from engine import (
    DelegationEvent,
    Engine,
    ErrorCode,
    JournalEntry,
    Kind,
    RetentionPolicy,
    RunRecord,
    StoreUnavailableError,
)
from tests.helpers.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, used by name below

#: coredis 6.9 creates a connection's in-memory buffers (anyio memory object streams) before it
#: connects and closes them only once connected: each refused connection leaves them to the
#: garbage collector, which warns. Nothing but memory is held, so these tests accept that.
_REFUSED_CONNECTIONS_LEAVE_BUFFERS = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
)

pytestmark = _REFUSED_CONNECTIONS_LEAVE_BUFFERS


@asynccontextmanager
async def _redis(url: str) -> AsyncIterator[coredis.Redis[str]]:
    """A plain client, to look at keys behind the archive's back."""
    async with coredis.Redis.from_url(url, decode_responses=True) as client:
        yield client


async def _stream_ids(server: RedisServer, archive: RedisRunArchive, run_id: str) -> list[str]:
    async with _redis(server.url) as client:
        entries = await client.xrange(archive.keys.journal(run_id), "-", "+")
    return [str(entry.identifier) for entry in entries]


async def _shut_down_saving(server: RedisServer) -> None:
    """Stop the server the way an operator restarts a persistent Redis (SHUTDOWN SAVE: it writes
    its data set, then closes every connection); returns once it refuses connections."""
    async with _redis(server.url) as client:
        # The server closes the connection instead of answering.
        with suppress(coredis.exceptions.ConnectionError):
            await client.shutdown(PureToken.SAVE)
    with trio.fail_after(5):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            except OSError:
                return
            await stream.aclose()
            await trio.sleep(0.02)  # polling a process that is exiting, bounded above


async def _until(condition: Any, within: float = 5.0) -> None:
    """Wait until `condition()` holds (the archive's statistics change as its writes retry)."""
    with trio.fail_after(within):
        while not condition():  # noqa: ASYNC110 (counters, no event to wait on)
            await trio.sleep(0.01)


def _batch(run_id: str, head: int, events: Sequence[DelegationEvent]) -> list[JournalEntry]:
    return [JournalEntry(event, head + 1 + index) for index, event in enumerate(events)]


def _texts(run_id: str, count: int, size: int = 10) -> list[DelegationEvent]:
    return [
        DelegationEvent(
            kind=Kind.PARENT_TEXT_DELTA,
            run_id=run_id,
            sequence=index,
            message_id="m",
            delta=f"{index:0{size}d}",
        )
        for index in range(count)
    ]


# -- an outage shorter than the budget -----------------------------------------------------------


async def test_a_run_rides_out_a_redis_restart_within_the_budget_and_loses_nothing(
    redis_server: RedisServer,
) -> None:
    seen: list[tuple[int, DelegationEvent]] = []
    async with (
        open_redis_archive(redis_server.url, call_timeout=1.0, outage_budget=10.0) as archive,
        Engine([], archive=archive) as eng,
        trio.open_nursery() as nursery,
    ):
        watched = trio.Event()
        async with eng.open_run() as run:
            live = run.events()

            async def watch() -> None:
                async with live:
                    async for entry in live:
                        seen.append((entry.cursor, entry.event))
                watched.set()

            nursery.start_soon(watch)
            for index in range(50):
                await run.emit(Kind.PARENT_TEXT_DELTA, delta=f"before {index}", message_id="m")
            await run.flush()
            await _until(lambda: len(seen) >= 51)  # run.started and the 50 deltas, live
            await _shut_down_saving(redis_server)
            for index in range(200):
                await run.emit(Kind.PARENT_TEXT_DELTA, delta=f"during {index}", message_id="m")
            await _until(lambda: archive.statistics().retries >= 3)  # the writer waits
            assert archive.statistics().waiting_bytes > 0
            assert len(seen) < 251  # nothing published past what the store holds
            redis_server.restart()  # loads what SHUTDOWN SAVE wrote
            for index in range(50):
                await run.emit(Kind.PARENT_TEXT_DELTA, delta=f"after {index}", message_id="m")
            await run.finish("done")
        with trio.fail_after(5):
            await watched.wait()
        statistics = archive.statistics()
        assert (statistics.given_up, statistics.waiting_bytes) == (0, 0)
        store = archive.journal_store(run.run_id, RetentionPolicy())
        stored = [(entry.cursor, entry.event) for entry in await store.read_after(0, 10_000)]
        record = await archive.run(run.run_id)
    assert seen[-1][1].kind == Kind.RUN_FINISHED
    assert [cursor for cursor, _ in seen] == list(range(1, len(seen) + 1))
    assert [event.delta for _, event in seen if event.delta].count("during 199") == 1
    assert stored == seen  # every cursor once, as the live viewer saw it
    assert await _stream_ids(redis_server, archive, run.run_id) == [
        f"{cursor}-0" for cursor in range(1, len(seen) + 1)
    ]
    assert record is not None and record.outcome == Kind.RUN_FINISHED
    assert not any(
        event.error is not None and event.error.code == ErrorCode.STORE_UNAVAILABLE
        for _, event in seen
    )


# -- an outage longer than the budget ------------------------------------------------------------


async def test_an_outage_longer_than_the_budget_fails_the_run_typed_for_its_live_viewers(
    redis_server: RedisServer,
) -> None:
    budget = 1.0
    seen: list[DelegationEvent] = []
    async with (
        open_redis_archive(redis_server.url, call_timeout=1.0, outage_budget=budget) as archive,
        Engine([], archive=archive) as eng,
        trio.open_nursery() as nursery,
    ):
        ended = trio.Event()
        with trio.fail_after(budget + 5):  # the run must end, not wait on
            async with eng.open_run() as run:
                live = run.events()

                async def watch() -> None:
                    async with live:
                        async for entry in live:
                            seen.append(entry.event)
                    ended.set()

                nursery.start_soon(watch)
                await run.emit(Kind.PARENT_TEXT_DELTA, delta="kept", message_id="m")
                await run.flush()
                await _until(lambda: len(seen) == 2)
                redis_server.kill()
                killed_at = trio.current_time()
                await run.emit(Kind.PARENT_TEXT_DELTA, delta="not kept", message_id="m")
                await trio.sleep_forever()  # the run's failure stops its body
        with trio.fail_after(5):
            await ended.wait()
        failed_after = trio.current_time() - killed_at
        assert archive.statistics().given_up >= 1
        assert [event.kind for event in seen][-1] == Kind.RUN_FAILED
        error = seen[-1].error
        assert error is not None and error.code == ErrorCode.STORE_UNAVAILABLE
        assert any(event.delta == "not kept" for event in seen)  # live viewers got it
        assert budget <= failed_after < budget + 3
        # Reads fail at once while Redis is down: a viewer gets an error, not a hang.
        store = archive.journal_store(run.run_id, RetentionPolicy())
        with trio.fail_after(2), pytest.raises(ArchiveUnavailableError):
            await store.read_after(0, 10)
        with trio.fail_after(3), pytest.raises(ArchiveUnavailableError):
            await archive.wait_entries(run.run_id, 0, within=0.5)
        redis_server.restart()  # back, empty: nothing was persisted
        async with eng.open_run() as again:
            await again.emit(Kind.PARENT_TEXT_DELTA, delta="new", message_id="m")
            await again.finish("done")
        store = archive.journal_store(again.run_id, RetentionPolicy())
        replay = await store.read_after(0, 100)
        assert [e.event.kind for e in replay] == [
            Kind.RUN_STARTED,
            Kind.PARENT_TEXT_DELTA,
            Kind.RUN_FINISHED,
        ]
        record = await archive.run(again.run_id)
        assert record is not None and record.outcome == Kind.RUN_FINISHED


async def test_appends_past_the_buffer_bound_fail_at_once_while_others_wait(
    redis_server: RedisServer,
) -> None:
    first = _batch("run-1", 0, _texts("run-1", 20))
    bound = sum(entry.weight for entry in first)
    async with open_redis_archive(
        redis_server.url, call_timeout=1.0, outage_budget=30.0, max_buffer_bytes=bound
    ) as archive:
        for run_id in ("run-1", "run-2"):
            await archive.open_run(RunRecord(run_id=run_id, started_at=0.0))
        waiting = archive.journal_store("run-1", RetentionPolicy())
        refused = archive.journal_store("run-2", RetentionPolicy())
        redis_server.kill()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting.append, first)
            await _until(lambda: archive.statistics().waiting_bytes == bound)
            # A second batch would pass the bound: it fails long before the 30 s budget.
            with trio.fail_after(2), pytest.raises(StoreUnavailableError, match="max_buffer"):
                await refused.append(_batch("run-2", 0, _texts("run-2", 1)))
            # Reads do not wait for Redis at all.
            with trio.fail_after(2), pytest.raises(ArchiveUnavailableError):
                await waiting.read_after(0, 10)
            redis_server.restart()  # empty: the waiting batch starts the run's journal anew
        statistics = archive.statistics()
        assert (statistics.given_up, statistics.waiting_bytes) == (1, 0)
        assert [entry.cursor for entry in await waiting.read_after(0, 100)] == list(range(1, 21))


async def test_a_buffer_smaller_than_a_batch_fails_a_long_outage_before_the_budget(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(
        redis_server.url, call_timeout=1.0, outage_budget=30.0, max_buffer_bytes=1
    ) as archive:
        store = archive.journal_store("run-1", RetentionPolicy())
        await store.append(_batch("run-1", 0, _texts("run-1", 1)))
        redis_server.kill()
        with trio.fail_after(2), pytest.raises(ArchiveUnavailableError) as failure:
            await store.append(_batch("run-1", 1, _texts("run-1", 5)))
    assert isinstance(failure.value, StoreUnavailableError)
    assert "max_buffer_bytes (1)" in str(failure.value)


# -- a batch that landed though its reply was lost ---------------------------------------------


async def test_a_batch_sent_again_after_its_reply_was_lost_is_stored_once(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(
        redis_server.url, call_timeout=0.2, outage_budget=10.0
    ) as archive:
        store = archive.journal_store("run-1", RetentionPolicy(max_events=50))
        await store.append(_batch("run-1", 0, _texts("run-1", 10)))
        big = _batch("run-1", 10, _texts("run-1", 400, size=100))
        # A hung server takes the batch into its socket but answers nothing: each try times
        # out and is sent again, and once it answers, it runs the batch first, then the copies.
        redis_server.pause()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.append, big)
                await _until(lambda: archive.statistics().retries >= 2)
                redis_server.resume()
        finally:
            redis_server.resume()
        statistics = archive.statistics()
        assert statistics.landed_before >= 1
        assert (statistics.given_up, statistics.waiting_bytes) == (0, 0)
        assert await archive.head("run-1") == 410
        # The window holds the newest 50, each once (and the message's opening delta is
        # retained before it); the next batch continues the head.
        assert await _stream_ids(redis_server, archive, "run-1") == [
            "1-0",
            *[f"{cursor}-0" for cursor in range(361, 411)],
        ]
        last = _batch("run-1", 410, _texts("run-1", 1))
        await store.append(last)
        replay = await store.read_after(361, 100)
    assert [entry.cursor for entry in replay] == list(range(362, 412))
    assert [entry.event for entry in replay] == [e.event for e in [*big[-49:], *last]]
