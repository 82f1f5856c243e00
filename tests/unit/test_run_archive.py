"""The engine with a run archive: what a run leaves behind, and recovery of runs a dead process
left live (on the in-memory reference archive; the durable ones run the same paths)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from engine import (
    DelegationEvent,
    DelegationRequest,
    Engine,
    EngineLimits,
    ErrorCode,
    JournalEntry,
    JournalStore,
    Kind,
    MemoryRunArchive,
    RemoteCancel,
    RetentionPolicy,
    RunRecord,
    Status,
    StoreUnavailableError,
    Subscription,
)
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, delta, finished, started


async def _replay(engine: Engine, run_id: str) -> list[JournalEntry]:
    found = await engine.find_run(run_id)
    assert found is not None
    _, journal = found
    async with journal.subscribe() as sub:
        return [entry async for entry in sub]


async def test_a_run_leaves_its_record_results_and_audit_trail_in_the_archive() -> None:
    archive = MemoryRunArchive(node="node-a")
    target = ScriptedTarget(start=[[started("t-9", "c-9"), delta("hi"), finished("done")]])
    limits = EngineLimits(retained_closed_runs=0)  # the engine forgets: only the archive keeps
    async with Engine([spec(target)], archive=archive, limits=limits) as eng:
        async with eng.open_run(thread_id="th-1", attributes={"mode": "attributed"}) as run:
            result = await run.delegate(
                DelegationRequest(agent="remote", objective="x", parent_tool_call_id="call-1")
            )
        assert eng.journal(run.run_id) is None
        record = await archive.run(run.run_id)
        assert record is not None
        assert (record.outcome, record.thread_id, record.node) == (
            Kind.RUN_FINISHED,
            "th-1",
            "node-a",
        )
        assert dict(record.attributes) == {"mode": "attributed"}
        assert record.ended_at is not None
        assert await eng.find_results(run.run_id) == [result]
        [audit] = await archive.audits(run.run_id)
        assert (audit.remote_task_id, audit.remote_context_id) == ("t-9", "c-9")
        assert (audit.agent_key, audit.parent_tool_call_id, audit.thread_id) == (
            "remote",
            "call-1",
            "th-1",
        )
        assert audit.status == Status.COMPLETED and audit.ended_at is not None
        replayed = await _replay(eng, run.run_id)
        assert [e.cursor for e in replayed] == list(range(1, await archive.head(run.run_id) + 1))
        assert replayed[-1].event.kind == Kind.RUN_FINISHED
        assert await eng.find_run("run-unknown") is None


async def test_run_ids_already_archived_are_refused() -> None:
    archive = MemoryRunArchive()
    await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
    async with Engine([], archive=archive) as eng:
        with pytest.raises(ValueError, match="already in use"):
            async with eng.open_run(run_id="run-1"):
                pass


class _FailingArchive(MemoryRunArchive):
    async def open_run(self, record: RunRecord) -> None:
        raise OSError("disk full")


async def test_a_run_the_archive_cannot_record_does_not_start() -> None:
    async with Engine([], archive=_FailingArchive()) as eng:
        with pytest.raises(OSError, match="disk full"):
            async with eng.open_run():
                pass
        assert eng.open_runs == 0


async def _crashed_mid_delegation(cancel: str = "confirm") -> tuple[MemoryRunArchive, str]:
    """The archive as a process killed mid-delegation leaves it: a snapshot taken while a
    delegation is running (its task id journaled), before anything ended."""
    archive = MemoryRunArchive(node="node-a")
    target = ScriptedTarget(start=[[started("t-1", "c-1"), delta("half"), "hang"]], cancel=cancel)
    async with Engine([spec(target)], archive=archive) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        async with run.events() as sub:  # the store has an entry before any reader sees it
            async for entry in sub:
                if entry.event.remote_task_id:
                    break
        snapshot = copy.deepcopy(archive)
        handle.cancel()
    return snapshot, run.run_id


async def _entries(archive: MemoryRunArchive, run_id: str) -> list[DelegationEvent]:
    store = archive.journal_store(run_id, Engine().retention_policy)
    return [entry.event for entry in await store.read_after(0, 10_000)]


async def test_opening_the_engine_ends_runs_a_dead_process_left_live() -> None:
    archive, run_id = await _crashed_mid_delegation()
    before = await _entries(archive, run_id)
    assert not any(e.kind in Kind.RUN_TERMINALS for e in before)
    target = ScriptedTarget()
    async with Engine([spec(target)], archive=archive) as eng:
        [recovered] = eng.recovered
        assert recovered.run_id == run_id and recovered.code == ErrorCode.INTERRUPTED
        [ref] = target.remote_cancels
        assert (ref.remote_task_id, ref.remote_context_id, ref.agent_key) == (
            "t-1",
            "c-1",
            "remote",
        )
        replayed = await _replay(eng, run_id)
    # What was recorded is all still there, then one terminal per delegation and for the run.
    assert [e.event for e in replayed[: len(before)]] == before
    tail = [e.event for e in replayed[len(before) :]]
    assert [e.kind for e in tail] == [Kind.FAILED, Kind.RUN_FAILED]
    assert tail[0].error is not None and tail[0].error.code == ErrorCode.INTERRUPTED
    assert tail[0].error.metadata == {"remote_cancel": RemoteCancel.CONFIRMED}
    assert tail[1].error is not None and tail[1].error.code == ErrorCode.INTERRUPTED
    assert recovered.terminal_cursor == replayed[-1].cursor
    record = await archive.run(run_id)
    assert record is not None and record.outcome == Kind.RUN_FAILED
    [audit] = await archive.audits(run_id)
    assert (audit.status, audit.error_code, audit.remote_cancel) == (
        Status.FAILED,
        ErrorCode.INTERRUPTED,
        RemoteCancel.CONFIRMED,
    )
    [result] = await archive.results(run_id)
    assert result.status == Status.FAILED and result.remote_task_id == "t-1"
    assert await archive.live_runs() == []


async def test_a_remote_cancel_that_hangs_is_bounded_and_recorded_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    archive, run_id = await _crashed_mid_delegation()
    target = ScriptedTarget(cancel="hang")
    began = trio.current_time()
    async with Engine([spec(target, cancel_timeout=3.0)], archive=archive) as eng:
        assert trio.current_time() - began == pytest.approx(3.0)
    [recovered] = eng.recovered
    assert [d.remote_cancel for d in recovered.delegations] == [RemoteCancel.PENDING]
    [audit] = await archive.audits(run_id)
    assert audit.remote_cancel == RemoteCancel.PENDING


async def test_an_agent_the_host_no_longer_registers_is_recorded_unsupported() -> None:
    archive, run_id = await _crashed_mid_delegation()
    async with Engine([], archive=archive) as eng:
        pass
    [recovered] = eng.recovered
    assert [d.remote_cancel for d in recovered.delegations] == [RemoteCancel.UNSUPPORTED]
    replayed = [e.kind async for e in _kinds(archive, run_id)]
    assert replayed[-2:] == [Kind.FAILED, Kind.RUN_FAILED]


async def _kinds(archive: MemoryRunArchive, run_id: str):  # type: ignore[no-untyped-def]
    for event in await _entries(archive, run_id):
        yield event


async def test_a_run_whose_terminal_was_journaled_is_only_marked_ended() -> None:
    archive = MemoryRunArchive()
    await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
    store = archive.journal_store("run-1", Engine().retention_policy)
    await store.append(
        [
            JournalEntry(DelegationEvent(kind=Kind.RUN_STARTED, run_id="run-1"), 1),
            JournalEntry(DelegationEvent(kind=Kind.RUN_FINISHED, run_id="run-1"), 2),
        ]
    )
    async with Engine([], archive=archive) as eng:
        pass
    assert [r.terminal_cursor for r in eng.recovered] == [2]
    assert await archive.head("run-1") == 2
    record = await archive.run("run-1")
    assert record is not None and record.outcome == Kind.RUN_FINISHED


async def test_only_this_nodes_runs_are_recovered() -> None:
    archive, run_id = await _crashed_mid_delegation()  # owned by node-a
    archive.node = "node-b"
    async with Engine([spec(ScriptedTarget())], archive=archive) as eng:
        pass
    assert eng.recovered == []
    assert [r.run_id for r in await archive.live_runs("node-a")] == [run_id]


class _StoreGoesAway(MemoryRunArchive):
    """An archive whose journal store stops taking entries once `fail` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def journal_store(self, run_id: str, policy: RetentionPolicy) -> JournalStore:
        inner = super().journal_store(run_id, policy)
        archive = self

        class Store:
            async def append(self, entries: Sequence[JournalEntry]) -> None:
                if archive.fail:
                    raise StoreUnavailableError("redis: connection refused (for 30 s)")
                await inner.append(entries)

            async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
                return await inner.read_after(cursor, max_entries)

        return Store()


async def test_a_store_that_stays_unavailable_fails_the_run_typed_for_its_live_viewers() -> None:
    archive = _StoreGoesAway()
    target = ScriptedTarget(start=[[started("t-1", "c-1"), "hang"]])
    rest: list[DelegationEvent] = []

    async def read_on(sub: Subscription) -> None:
        async with sub:
            rest.extend([entry.event async for entry in sub])

    async with (
        Engine([spec(target)], archive=archive) as eng,
        trio.open_nursery() as viewers,
        eng.open_run() as run,
    ):
        sub = run.events()
        run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        while not (await sub.receive()).event.remote_task_id:
            pass
        viewers.start_soon(read_on, sub)  # a viewer outside the run's body
        archive.fail = True
        await run.emit(Kind.PARENT_TEXT_DELTA, delta="lost?", message_id="m")
        await trio.sleep_forever()  # the run's failure stops its body too
    assert [e.kind for e in rest][-2:] == [Kind.CANCELLED, Kind.RUN_FAILED]
    assert rest[-1].error is not None and rest[-1].error.code == ErrorCode.STORE_UNAVAILABLE
    assert any(e.delta == "lost?" for e in rest)  # live viewers got what the store did not
    assert target.calls[-1] == "cancel"  # the remote task is cancelled as in any run end


@pytest.mark.parametrize(
    ("end", "outcome"), [("fail", Kind.RUN_FAILED), ("finish", Kind.RUN_FINISHED)]
)
async def test_a_run_ended_by_the_parent_is_archived_with_that_outcome(
    end: str, outcome: str
) -> None:
    """`Run.fail()` then leaving `open_run`: the archive records the failure the journal has,
    not the finish that leaving the block would otherwise ask for."""
    archive = MemoryRunArchive()
    async with Engine([], archive=archive) as eng:
        async with eng.open_run() as run:
            if end == "fail":
                await run.fail("the parent gave up", ErrorCode.MODEL_UNAVAILABLE)
            else:
                await run.finish("done")
        record = await archive.run(run.run_id)
    assert record is not None and record.outcome == outcome


async def test_a_second_end_changes_neither_the_journal_nor_the_archive() -> None:
    archive = MemoryRunArchive()
    async with Engine([], archive=archive) as eng:
        async with eng.open_run() as run:
            await run.finish("done")
            await run.fail("too late", ErrorCode.MODEL_UNAVAILABLE)
            entries = await run.journal.store.read_after(0, 100)
        record = await archive.run(run.run_id)
    terminals = [e.event.kind for e in entries if e.event.kind in Kind.RUN_TERMINALS]
    assert terminals == [Kind.RUN_FINISHED]
    assert record is not None and record.outcome == Kind.RUN_FINISHED
