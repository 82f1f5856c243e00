"""The Redis run archive against a real redis-server (Debian's, one per test, on loopback):
the store contract, answers equal to the in-memory reference archive, a second node reading
and continuing a run, the format marker, outages and recovery from them."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
import trio.testing

from adapters.redis_archive import (
    FORMAT_NAME,
    ArchiveConflictError,
    ArchiveDataError,
    ArchiveOpenError,
    ArchiveUnavailableError,
    RedisRunArchive,
    open_redis_archive,
)
from engine import (
    ARCHIVE_FORMAT_VERSION,
    DelegationError,
    DelegationEvent,
    DelegationRequest,
    DelegationResult,
    Engine,
    EngineLimits,
    ErrorCode,
    JournalEntry,
    JournalStore,
    Kind,
    MemoryJournalStore,
    MemoryRunArchive,
    RemoteCancel,
    RetentionPolicy,
    RunArchive,
    RunRecord,
    SharedRunArchive,
    Status,
)
from engine.testing import check_journal_store
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, delta, finished, started
from tests.helpers.redis_server import RedisServer, RedisServerError, redis_server, start_redis

__all__ = ["redis_server"]  # the fixture, used by name below


@asynccontextmanager
async def _redis(url: str) -> AsyncIterator[coredis.Redis[str]]:
    """A plain client, to look at (or plant) keys behind the archive's back."""
    async with coredis.Redis.from_url(url, decode_responses=True) as client:
        yield client


def _event(kind: str, delegation: str | None = None, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-1", delegation_id=delegation, **fields)


def _text(delegation: str | None, message: str, text: str) -> DelegationEvent:
    kind = Kind.TEXT_DELTA if delegation else Kind.PARENT_TEXT_DELTA
    return _event(kind, delegation, message_id=message, delta=text)


def _batch(head: int, events: Sequence[DelegationEvent]) -> list[JournalEntry]:
    return [JournalEntry(event, head + 1 + index) for index, event in enumerate(events)]


def _shape(entries: Sequence[JournalEntry]) -> list[tuple[int, DelegationEvent, int]]:
    return [(entry.cursor, entry.event, entry.weight) for entry in entries]


async def _replays(store: JournalStore, head: int) -> list[list[tuple[int, Any, int]]]:
    """The replay after every cursor, whole and in reads of two."""
    whole = [_shape(await store.read_after(after, head + 1)) for after in range(head + 1)]
    walked: list[tuple[int, Any, int]] = []
    after = 0
    while page := await store.read_after(after, 2):
        walked += _shape(page)
        after = page[-1].cursor
    return [*whole, walked]


# -- the store contract ------------------------------------------------------------------------


async def test_the_journal_store_follows_the_store_contract(redis_server: RedisServer) -> None:
    async with open_redis_archive(redis_server.url) as archive:
        with trio.fail_after(90):
            await check_journal_store(archive.journal_store, examples=True, max_examples=100)


# -- equal to the reference archive --------------------------------------------------------------

_EVENTS: tuple[DelegationEvent, ...] = (
    _event(Kind.RUN_STARTED),
    _event(
        Kind.STARTED,
        "d1",
        agent_key="research",
        protocol="a2a",
        parent_tool_call_id="call-1",
        time=10.0,
    ),
    _event(Kind.STATUS, "d1", remote_task_id="t-1", remote_context_id="c-1", status="working"),
    _text("d1", "m1", "hello "),
    _event(Kind.STARTED, "d2", agent_key="writer", protocol="agui", time=11.0),
    _text("d1", "m1", "world"),
    _text("d2", "m2", "x" * 400),
    _event(Kind.FINISHED, "d1", time=12.0),
    _text(None, "p1", "the parent speaks"),
    _event(
        Kind.FAILED,
        "d2",
        time=13.0,
        error=DelegationError(code=ErrorCode.REMOTE_FAILED, message="boom"),
    ),
    _event(Kind.RUN_FINISHED),
)


async def _exercise(archive: RunArchive, policy: RetentionPolicy) -> dict[str, Any]:
    """The same calls on any archive; what it answered."""
    answers: dict[str, Any] = {}
    await archive.open_run(
        RunRecord(
            run_id="run-1",
            started_at=1.5,
            thread_id="th-1",
            node="node-a",
            metadata={"model": "m", "n": [1, 2.5, None]},
            attributes={"mode": "attributed"},
        )
    )
    await archive.open_run(RunRecord(run_id="run-2", started_at=2.5, node="node-b"))
    await archive.open_run(RunRecord(run_id="run-3", started_at=0.5, node="node-a"))
    with pytest.raises(ValueError, match="already archived"):
        await archive.open_run(RunRecord(run_id="run-2", started_at=9.0))
    answers["live before"] = [
        await archive.live_runs(),
        await archive.live_runs("node-a"),
        await archive.live_runs("node-c"),
    ]
    store = archive.journal_store("run-1", policy)
    head = 0
    for size in (1, 3, 2, 4, 1):
        batch = _batch(head, _EVENTS[head : head + size])
        await store.append(batch)
        head += size
        answers[f"head {head}"] = await archive.head("run-1")
        answers[f"audits at {head}"] = await archive.audits("run-1")
    await archive.record_results(
        "run-1",
        [
            DelegationResult(
                delegation_id="d2",
                agent="writer",
                remote_protocol="agui",
                status=Status.FAILED,
                run_id="run-1",
                error=DelegationError(code=ErrorCode.REMOTE_FAILED, message="boom"),
            ),
            DelegationResult(
                delegation_id="d1",
                agent="research",
                remote_protocol="a2a",
                status=Status.CANCELLED,
                run_id="run-1",
                remote_task_id="t-1",
                remote_cancel=RemoteCancel.CONFIRMED,
                summary="partial",
            ),
        ],
    )
    await archive.record_results(
        "run-1",
        [
            DelegationResult(
                delegation_id="d2",
                agent="writer",
                remote_protocol="agui",
                status=Status.COMPLETED,
                run_id="run-1",
                summary="second thoughts",
            )
        ],
    )
    await archive.close_run("run-1", Kind.RUN_FINISHED, 20.25)
    await archive.close_run("run-unknown", Kind.RUN_FINISHED, 20.25)  # nothing to close
    answers["records"] = [await archive.run(r) for r in ("run-1", "run-2", "run-3", "run-x")]
    answers["results"] = await archive.results("run-1")
    answers["no results"] = await archive.results("run-2")
    answers["audits"] = await archive.audits("run-1")
    answers["no audits"] = await archive.audits("run-2")
    answers["heads"] = [await archive.head(r) for r in ("run-1", "run-2")]
    answers["live after"] = [await archive.live_runs(), await archive.live_runs("node-a")]
    answers["replays"] = await _replays(archive.journal_store("run-1", policy), head)
    return answers


@pytest.mark.parametrize(
    "policy",
    [RetentionPolicy(), RetentionPolicy(max_events=3, max_retained=4), RetentionPolicy(1, 500)],
)
async def test_the_archive_answers_like_the_in_memory_reference(
    redis_server: RedisServer, policy: RetentionPolicy
) -> None:
    expected = await _exercise(MemoryRunArchive(node="node-a"), policy)
    async with open_redis_archive(redis_server.url, node="node-a") as archive:
        got = await _exercise(archive, policy)
    assert got.keys() == expected.keys()
    for name, answer in expected.items():
        assert got[name] == answer, name
    assert [r.run_id for r in expected["live after"][0]] == ["run-2", "run-3"]


# -- another node --------------------------------------------------------------------------------


async def test_another_node_reads_the_same_replay_and_continues_with_the_same_decisions(
    redis_server: RedisServer,
) -> None:
    policy = RetentionPolicy(max_events=3)
    reference = MemoryJournalStore.from_policy("run-1", policy)
    first = [
        _event(Kind.RUN_STARTED),
        _event(Kind.STARTED, "d1"),
        _text("d1", "m1", "a"),  # opens m1: kept beyond the window
        _text("d1", "m1", "b"),
        _text("d1", "m1", "c"),
        _event(Kind.STATUS, "d1", status="working"),
    ]
    then = [
        _text("d1", "m1", "d"),  # m1 is still open: not kept once it leaves
        _event(Kind.TEXT_END, "d1", message_id="m1"),
        _text("d1", "m1", "e"),  # opens m1 again: kept
        _event(Kind.STATUS, "d1", status="still"),
        _event(Kind.FINISHED, "d1"),
        _event(Kind.RUN_FINISHED),
    ]
    async with (
        open_redis_archive(redis_server.url, node="node-a") as node_a,
        open_redis_archive(redis_server.url, node="node-b") as node_b,
    ):
        await node_a.journal_store("run-1", policy).append(_batch(0, first))
        await reference.append(_batch(0, first))
        seen_by_a = await _replays(node_a.journal_store("run-1", policy), len(first))
        seen_by_b = await _replays(node_b.journal_store("run-1", policy), len(first))
        assert seen_by_b == seen_by_a == await _replays(reference, len(first))
        # Node b carries on (as recovery does): its retention starts from what a left open.
        await node_b.journal_store("run-1", policy).append(_batch(len(first), then))
        await reference.append(_batch(len(first), then))
        head = len(first) + len(then)
        assert await node_a.head("run-1") == head
        expected = await _replays(reference, head)
        assert await _replays(node_a.journal_store("run-1", policy), head) == expected
        assert await _replays(node_b.journal_store("run-1", policy), head) == expected
        # Node a's cached head is stale now: its next write is refused, not interleaved ...
        stale = _batch(len(first), [_event(Kind.CUSTOM, "d1")])
        with pytest.raises(ArchiveConflictError, match="head"):
            await node_a.journal_store("run-1", policy).append(stale)
        # ... and once it read the journal again it continues the real head.
        await node_a.journal_store("run-1", policy).append(_batch(head, [_event(Kind.CUSTOM)]))
        assert await node_b.head("run-1") == head + 1


async def test_a_batch_that_does_not_continue_the_head_is_refused(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(redis_server.url) as archive:
        store = archive.journal_store("run-1", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        for wrong in (_batch(0, [_event(Kind.CUSTOM)]), _batch(2, [_event(Kind.CUSTOM)])):
            with pytest.raises(ArchiveConflictError, match="expected 2"):
                await store.append(wrong)
        await store.append([])  # an empty batch writes nothing
        assert await archive.head("run-1") == 1
        with pytest.raises(ValueError, match="after"):
            await store.read_after(-1, 5)
        with pytest.raises(ValueError, match="max_entries"):
            await store.read_after(0, 0)


async def test_viewers_on_another_node_wait_for_new_entries(redis_server: RedisServer) -> None:
    policy = RetentionPolicy()
    async with (
        open_redis_archive(redis_server.url, node="node-a") as writer,
        open_redis_archive(redis_server.url, node="node-b") as viewer,
    ):
        store = writer.journal_store("run-1", policy)
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        assert await viewer.wait_entries("run-1", 0, within=5.0)  # already there
        assert not await viewer.wait_entries("run-1", 1, within=0.05)  # nothing came
        woke: list[bool] = []

        async def wait() -> None:
            woke.append(await viewer.wait_entries("run-1", 1, within=10.0))

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await store.append(_batch(1, [_event(Kind.CUSTOM)]))
        assert woke == [True]
        for bad in (0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="within"):
                await viewer.wait_entries("run-1", 0, within=bad)
        with pytest.raises(ValueError, match="after"):
            await viewer.wait_entries("run-1", -1, within=1.0)


async def test_many_idle_viewers_time_out_normally_on_a_small_pool(
    redis_server: RedisServer,
) -> None:
    # 200 viewers waiting on quiet runs (half on one, half on runs of their own) with a pool of
    # 4 connections: each returns False once its `within` passed, none fails for want of a
    # connection; a viewer of a run that gets an entry meanwhile is woken at once.
    within = 1.0
    async with (
        open_redis_archive(redis_server.url, node="node-a") as writer,
        open_redis_archive(
            redis_server.url, node="node-b", max_connections=4, call_timeout=0.5
        ) as viewer,
    ):
        for run_id in ("quiet", "busy"):
            await writer.journal_store(run_id, RetentionPolicy()).append(
                _batch(0, [_event(Kind.RUN_STARTED)])
            )
        answers: list[tuple[bool, float]] = []
        woken: list[float] = []

        async def idle(run_id: str) -> None:
            began = trio.current_time()
            found = await viewer.wait_entries(run_id, 1, within=within)
            answers.append((found, trio.current_time() - began))

        async def busy() -> None:
            assert await viewer.wait_entries("busy", 1, within=10.0)
            woken.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            for index in range(200):
                nursery.start_soon(idle, "quiet" if index % 2 else f"quiet-{index}")
            nursery.start_soon(busy)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # all 201 are waiting
            appended_at = trio.current_time()
            await writer.journal_store("busy", RetentionPolicy()).append(
                _batch(1, [_event(Kind.CUSTOM)])
            )
        assert len(answers) == 200
        assert {found for found, _ in answers} == {False}
        assert max(took for _, took in answers) < within + 0.3
        assert woken and woken[0] - appended_at < 0.3


async def test_a_run_that_ended_takes_no_more_entries(redis_server: RedisServer) -> None:
    # Another node may have ended it (its node lost the lease): the owner's late writes are
    # refused, whatever it had cached.
    async with (
        open_redis_archive(redis_server.url, node="node-a") as owner,
        open_redis_archive(redis_server.url, node="node-b") as survivor,
    ):
        await owner.open_run(RunRecord(run_id="run-1", started_at=0.0, node="node-a"))
        store = owner.journal_store("run-1", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        ended = survivor.journal_store("run-1", RetentionPolicy())
        await ended.append(_batch(1, [_event(Kind.RUN_FAILED)]))
        await survivor.close_run("run-1", Kind.RUN_FAILED, 5.0)
        for head in (1, 2):  # the cached head, then the real one
            with pytest.raises(ArchiveConflictError):
                await store.append(_batch(head, [_event(Kind.CUSTOM)]))
        assert await owner.head("run-1") == 2


# -- nodes sharing the archive ---------------------------------------------------------------


async def test_a_node_without_a_lease_is_lost_and_claimed_by_one_survivor(
    redis_server: RedisServer,
) -> None:
    url = redis_server.url
    async with (
        open_redis_archive(url, node="node-a", lease_seconds=0.2) as node_a,
        open_redis_archive(url, node="node-b") as node_b,
        open_redis_archive(url, node="node-c") as node_c,
    ):
        shared: SharedRunArchive = node_a  # the seam web/cluster.py drives
        await shared.renew_lease()
        await node_b.renew_lease()
        await node_a.open_run(RunRecord(run_id="run-1", started_at=0.0, node="node-a"))
        assert await node_b.lost_nodes() == []
        await node_a.drop_lease()
        assert await node_b.lost_nodes() == ["node-a"]
        assert await node_a.lost_nodes() == []  # never itself
        await node_a.renew_lease()
        assert await node_c.lost_nodes() == []
        # Redis expires the lease by its own clock: 0.2 s after the last renewal it is gone.
        await trio.sleep(0.3)
        assert await node_c.lost_nodes() == ["node-a"]
        assert await node_b.claim_node("node-a", hold=0.5)
        assert not await node_c.claim_node("node-a", hold=0.5)
        # The claim lasts the hold asked for (a recovery may outlast a lease), then expires.
        async with _redis(url) as client:
            assert 0 < await client.pttl("subagent-engine:claim:node-a") <= 500
        await trio.sleep(0.6)
        assert await node_c.claim_node("node-a", hold=0.5)
        for bad in (0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="hold"):
                await node_c.claim_node("node-b", hold=bad)
        # A node whose runs all ended is not lost, lease or not.
        await node_a.close_run("run-1", Kind.RUN_FINISHED, 1.0)
        assert await node_c.lost_nodes() == []


async def test_commands_reach_their_node_once_in_order(redis_server: RedisServer) -> None:
    url = redis_server.url
    async with (
        open_redis_archive(url, node="node-a", max_commands=3) as node_a,
        open_redis_archive(url, node="node-b", max_commands=3) as node_b,
    ):
        for index in range(4):  # the queue keeps the newest three
            await node_a.send_command("node-b", {"op": "stop", "run_id": f"run-{index}"})
        assert [c["run_id"] for c in await node_b.next_commands(1.0)] == [
            "run-1",
            "run-2",
            "run-3",
        ]
        assert await node_b.next_commands(0.05) == []  # each was delivered once
        assert await node_a.next_commands(0.05) == []  # and only to its node
        got: list[list[dict[str, Any]]] = []

        async def wait() -> None:
            got.append(await node_b.next_commands(10.0))

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await node_a.send_command("node-b", {"op": "answer", "text": "yes"})
        assert got == [[{"op": "answer", "text": "yes"}]]
        async with _redis(url) as client:
            await client.rpush(node_b.keys.commands("node-b"), ["not json", "[1]", '{"op": 1}'])
        assert await node_b.next_commands(1.0) == [{"op": 1}]
        with pytest.raises(ValueError, match="JSON"):
            await node_a.send_command("node-b", {"op": float("nan")})
        with pytest.raises(TypeError, match="mapping"):
            await node_a.send_command("node-b", ["stop"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="within"):
            await node_b.next_commands(0)


# -- the engine on the Redis archive ---------------------------------------------------------


async def test_an_engine_run_is_kept_and_read_back_by_another_node(
    redis_server: RedisServer,
) -> None:
    target = ScriptedTarget(start=[[started("t-9", "c-9"), delta("hi"), finished("done")]])
    limits = EngineLimits(retained_closed_runs=0)  # the engine forgets: only the archive keeps
    async with (
        open_redis_archive(redis_server.url, node="node-a") as archive,
        Engine([spec(target)], archive=archive, limits=limits) as eng,
        eng.open_run(thread_id="th-1") as run,
        run.events() as live,
    ):
        result = await run.delegate(
            DelegationRequest(agent="remote", objective="x", parent_tool_call_id="c")
        )
        seen = []
        async for entry in live:
            seen.append(_shape([entry])[0])
            if entry.event.kind == Kind.FINISHED:
                break
    async with open_redis_archive(redis_server.url, node="node-b") as other:
        record = await other.run(run.run_id)
        assert record is not None and record.outcome == Kind.RUN_FINISHED
        assert (record.node, record.thread_id) == ("node-a", "th-1")
        assert await other.live_runs() == []
        assert await other.results(run.run_id) == [result]
        [audit] = await other.audits(run.run_id)
        assert (audit.remote_task_id, audit.remote_context_id, audit.status) == (
            "t-9",
            "c-9",
            Status.COMPLETED,
        )
        async with Engine([], archive=other) as reader:
            found = await reader.find_run(run.run_id)
            assert found is not None
            async with found[1].subscribe() as sub:
                replayed = [_shape([entry])[0] async for entry in sub]
        assert replayed[: len(seen)] == seen
        assert replayed[-1][1].kind == Kind.RUN_FINISHED


async def test_an_engine_on_the_same_node_ends_the_runs_a_dead_process_left_live(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(redis_server.url, node="node-a") as dead:
        # What a process killed mid-delegation leaves: a live run, a delegation that started.
        await dead.open_run(RunRecord(run_id="run-1", started_at=1.0, node="node-a"))
        start = _event(Kind.STARTED, "d1", agent_key="remote", protocol="inprocess")
        task = _event(Kind.STATUS, "d1", remote_task_id="t-1", remote_context_id="c-1")
        await dead.journal_store("run-1", RetentionPolicy()).append(
            _batch(0, [_event(Kind.RUN_STARTED), start, task])
        )
    target = ScriptedTarget()
    async with (
        open_redis_archive(redis_server.url, node="node-a") as archive,
        Engine([spec(target)], archive=archive) as eng,
    ):
        [recovered] = eng.recovered
        assert (recovered.run_id, recovered.code) == ("run-1", ErrorCode.INTERRUPTED)
        assert [ref.remote_task_id for ref in target.remote_cancels] == ["t-1"]
        replay = await archive.journal_store("run-1", RetentionPolicy()).read_after(0, 100)
        assert [e.event.kind for e in replay[3:]] == [Kind.FAILED, Kind.RUN_FAILED]
        record = await archive.run("run-1")
        assert record is not None and record.outcome == Kind.RUN_FAILED
        assert await archive.live_runs() == []
        [audit] = await archive.audits("run-1")
        assert (audit.status, audit.remote_cancel) == (Status.FAILED, RemoteCancel.CONFIRMED)


# -- the namespace's format marker ----------------------------------------------------------------


async def test_a_new_namespace_gets_the_marker_and_reopens(redis_server: RedisServer) -> None:
    async with open_redis_archive(redis_server.url, namespace="team-a"):
        pass
    async with _redis(redis_server.url) as client:
        assert await client.hgetall("team-a:meta") == {
            "name": FORMAT_NAME,
            "version": str(ARCHIVE_FORMAT_VERSION),
        }
    async with open_redis_archive(redis_server.url, namespace="team-a") as archive:
        await archive.open_run(RunRecord(run_id="r", started_at=0.0))
    # Another namespace beside it is empty: its own marker, its own runs.
    async with open_redis_archive(redis_server.url, namespace="team-b") as archive:
        assert await archive.run("r") is None


#: Each kind of write, by a node whose archive is open (on the run "run-1", opened).
_WRITES: dict[str, Callable[[RedisRunArchive], Awaitable[object]]] = {
    "append": lambda archive: archive.journal_store("run-1", RetentionPolicy()).append(
        _batch(0, [_event(Kind.RUN_STARTED)])
    ),
    "open_run": lambda archive: archive.open_run(RunRecord(run_id="run-2", started_at=0.0)),
    "record_results": lambda archive: archive.record_results(
        "run-1", [DelegationResult(delegation_id="d", agent="a", remote_protocol="p", status="x")]
    ),
    "close_run": lambda archive: archive.close_run("run-1", Kind.RUN_FINISHED, 1.0),
    "renew_lease": lambda archive: archive.renew_lease(),
    "claim_node": lambda archive: archive.claim_node("node-x", hold=5.0),
    "send_command": lambda archive: archive.send_command("node-x", {"op": "stop"}),
}


@pytest.mark.parametrize("write", sorted(_WRITES))
async def test_every_write_puts_back_a_marker_a_redis_restarted_empty_lost(
    redis_server: RedisServer, write: str
) -> None:
    async with open_redis_archive(redis_server.url, node="node-a") as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0, node="node-a"))
        async with _redis(redis_server.url) as client:
            # What a Redis restarted empty holds for the running node: its run, no marker.
            await client.delete(["subagent-engine:meta"])
            await _WRITES[write](archive)
            assert await client.hgetall("subagent-engine:meta") == {
                "name": FORMAT_NAME,
                "version": str(ARCHIVE_FORMAT_VERSION),
            }
        # So a node started afterwards joins instead of refusing keys without a marker.
        async with open_redis_archive(redis_server.url, node="node-b") as later:
            assert await later.run("run-1") is not None


async def test_nodes_opening_an_empty_namespace_at_once_all_open_it(
    redis_server: RedisServer,
) -> None:
    opened: list[str] = []

    async def open_one(node: str) -> None:
        async with open_redis_archive(redis_server.url, node=node) as archive:
            await archive.renew_lease()  # a key beside the marker, as a starting node writes
            opened.append(node)

    async with trio.open_nursery() as nursery:
        for index in range(8):
            nursery.start_soon(open_one, f"node-{index}")
    assert len(opened) == 8


async def test_a_marker_written_while_a_node_opens_does_not_make_it_refuse(
    redis_server: RedisServer,
) -> None:
    # Another node's claim of the empty namespace may land between this node's read of the
    # marker and its scan for other keys. Claiming and clearing the marker in a loop puts a
    # claim in that window on most opens; an open must take the namespace every time.
    marker = {"name": FORMAT_NAME, "version": str(ARCHIVE_FORMAT_VERSION)}
    opens = 0
    async with _redis(redis_server.url) as client, trio.open_nursery() as nursery:

        async def claim_and_clear() -> None:
            while True:
                await client.hset("subagent-engine:meta", marker)
                await client.delete(["subagent-engine:meta"])

        nursery.start_soon(claim_and_clear)
        with trio.fail_after(20):
            for _ in range(100):
                async with open_redis_archive(redis_server.url):
                    opens += 1
        nursery.cancel_scope.cancel()
    assert opens == 100


@pytest.mark.parametrize(
    ("planted", "complaint"),
    [
        ({"subagent-engine:cache:1": "someone else's"}, "no run archive marker"),
        ({"subagent-engine:meta": {"name": "another-app", "version": "1"}}, "another-app"),
        (
            {"subagent-engine:meta": {"name": FORMAT_NAME, "version": "2"}},
            "newer than this code",
        ),
        ({"subagent-engine:meta": {"name": FORMAT_NAME, "version": "0"}}, "older"),
        ({"subagent-engine:meta": {"name": FORMAT_NAME, "version": "x"}}, "no valid version"),
    ],
)
async def test_a_namespace_not_ours_is_refused_and_left_untouched(
    redis_server: RedisServer, planted: dict[str, Any], complaint: str
) -> None:
    async with _redis(redis_server.url) as client:
        for key, value in planted.items():
            if isinstance(value, dict):
                await client.hset(key, value)
            else:
                await client.set(key, value)
        await client.set("elsewhere", "x")
        before = {key: await client.dump(key) for key in await client.keys("*")}
        with pytest.raises(ArchiveOpenError, match=complaint):
            async with open_redis_archive(redis_server.url):
                pytest.fail("opened")
        after = {key: await client.dump(key) for key in await client.keys("*")}
    assert after == before


async def test_malformed_data_under_the_namespace_is_a_typed_error(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(redis_server.url) as archive:
        store = archive.journal_store("run-1", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        async with _redis(redis_server.url) as client:
            journal = archive.keys.journal("run-1")
            await client.xadd(
                journal, {"v": "9", "w": "160", "k": "0", "e": "{}"}, identifier="2-0"
            )
            await client.xadd(journal, {"v": "1", "w": "1", "k": "0", "e": "[]"}, identifier="3-0")
            await client.hset(archive.keys.run("run-1"), {"head": "3"})
        with pytest.raises(ArchiveDataError, match="format '9'"):
            await store.read_after(1, 1)
        with pytest.raises(ArchiveDataError, match="entry 3-0"):
            await store.read_after(2, 1)
        async with _redis(redis_server.url) as client:
            await client.hset(archive.keys.run("run-1"), {"record": "{not json"})
            await client.hset(archive.keys.results("run-1")[0], {"d1": '{"status": 5}'})
            await client.zadd(archive.keys.results("run-1")[1], {"d1": 0})
        with pytest.raises(ArchiveDataError, match="not JSON"):
            await archive.run("run-1")
        with pytest.raises(ArchiveDataError, match="result"):
            await archive.results("run-1")


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"namespace": ""}, "non-empty"),
        ({"namespace": "a{b}"}, "braces"),
        ({"call_timeout": 0}, "call_timeout"),
        ({"call_timeout": float("inf")}, "call_timeout"),
        ({"lease_seconds": -1}, "lease_seconds"),
        ({"max_commands": 0}, "max_commands"),
        ({"outage_budget": 0}, "outage_budget"),
        ({"outage_budget": float("nan")}, "outage_budget"),
        ({"max_buffer_bytes": -1}, "max_buffer_bytes"),
        ({"max_buffer_bytes": 1.5}, "max_buffer_bytes"),
    ],
)
async def test_bad_arguments_are_refused_before_connecting(
    arguments: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        async with open_redis_archive("redis://127.0.0.1:1/0", **arguments):
            pytest.fail("opened")


async def test_a_url_that_is_not_redis_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Redis URL"):
        async with open_redis_archive("http://127.0.0.1:1/"):
            pytest.fail("opened")


# -- outages -------------------------------------------------------------------------------------

#: coredis 6.9 creates a connection's in-memory buffers (anyio memory object streams) before it
#: connects and closes them only once connected: each refused connection leaves them to the
#: garbage collector, which warns. Nothing but memory is held, so these tests accept that.
_REFUSED_CONNECTIONS_LEAVE_BUFFERS = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
)


async def _every_call_fails(archive: RedisRunArchive, bound: float) -> None:
    """Each call raises `ArchiveUnavailableError` within `bound` seconds (writes wait out the
    archive's outage budget first)."""
    store = archive.journal_store("run-1", RetentionPolicy())
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: archive.head("run-1"),
        lambda: archive.run("run-1"),
        lambda: archive.results("run-1"),
        lambda: archive.audits("run-1"),
        lambda: archive.live_runs(),
        lambda: archive.open_run(RunRecord(run_id="run-9", started_at=0.0)),
        lambda: archive.close_run("run-1", Kind.RUN_FINISHED, 1.0),
        lambda: store.append(_batch(1, [_event(Kind.CUSTOM)])),
        lambda: store.read_after(0, 10),
        lambda: archive.wait_entries("run-1", 5, within=0.1),
        lambda: archive.record_results(
            "run-1",
            [DelegationResult(delegation_id="d", agent="a", remote_protocol="p", status="x")],
        ),
    ]
    for call in calls:
        with trio.fail_after(bound), pytest.raises(ArchiveUnavailableError):
            await call()


@_REFUSED_CONNECTIONS_LEAVE_BUFFERS
async def test_a_killed_redis_fails_every_call_and_a_restarted_one_serves_again(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(redis_server.url, call_timeout=2.0, outage_budget=0.5) as archive:
        store = archive.journal_store("run-1", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        redis_server.kill()
        await _every_call_fails(archive, bound=2.5)
        redis_server.restart()  # empty again: nothing was persisted
        await archive.open_run(RunRecord(run_id="run-2", started_at=0.0))
        store = archive.journal_store("run-2", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED), _event(Kind.RUN_FINISHED)]))
        assert [e.cursor for e in await store.read_after(0, 10)] == [1, 2]
        assert [r.run_id for r in await archive.live_runs()] == ["run-2"]


async def test_a_hung_redis_fails_each_call_within_the_timeout(
    redis_server: RedisServer,
) -> None:
    async with open_redis_archive(redis_server.url, call_timeout=0.3, outage_budget=0.5) as archive:
        store = archive.journal_store("run-1", RetentionPolicy())
        await store.append(_batch(0, [_event(Kind.RUN_STARTED)]))
        redis_server.pause()
        try:
            for call in (
                lambda: archive.head("run-1"),
                lambda: store.append(_batch(1, [_event(Kind.CUSTOM)])),
                lambda: archive.wait_entries("run-1", 5, within=0.2),
            ):
                with trio.fail_after(2), pytest.raises(ArchiveUnavailableError, match="within"):
                    await call()
        finally:
            redis_server.resume()
        # The append that timed out may or may not have landed: the next one finds out.
        head = await archive.head("run-1")
        await store.append(_batch(head, [_event(Kind.RUN_FINISHED)]))
        assert await archive.head("run-1") == head + 1


@_REFUSED_CONNECTIONS_LEAVE_BUFFERS
async def test_opening_an_archive_on_a_redis_that_is_gone_is_unavailable(
    redis_server: RedisServer,
) -> None:
    redis_server.kill()
    with trio.fail_after(3), pytest.raises(ArchiveUnavailableError):
        async with open_redis_archive(redis_server.url, call_timeout=1.0):
            pytest.fail("opened")


# -- the test server itself ------------------------------------------------------------------


def test_a_redis_server_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "redis")
    try:
        server.kill()
        with socket.socket() as squatter:  # the port is taken while it is down
            squatter.bind(("127.0.0.1", server.port))
            squatter.listen()
            with pytest.raises(RedisServerError, match="Address already in use"):
                server.restart()
        assert server.pid is None
    finally:
        server.stop()


def test_a_missing_redis_server_names_the_command_that_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RedisServerError, match=r"run \./dev test"):
        start_redis(tmp_path / "redis")
