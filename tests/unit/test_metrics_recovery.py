"""What the metrics count beyond the runs an engine runs itself: runs that recovery ended when the
engine opened on a SQLite archive a dead process left them live in (`Engine.recovered`), and the
gaps and folds of viewers replaying archived runs (ended, no longer held in memory) from the
store. Each shows in `Engine.statistics()` and in the `/metrics` exposition, label values closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from adapters.sqlite_archive import open_sqlite_archive
from engine import (
    DelegationEvent,
    Engine,
    EngineLimits,
    ErrorCode,
    JournalEntry,
    Kind,
    RecoveredDelegation,
    RecoveredRun,
    RemoteCancel,
    RetentionPolicy,
    RunArchive,
    RunRecord,
)
from engine._lanes import EVENT_OVERHEAD
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget
from web.metrics import Metrics

Samples = dict[tuple[tuple[str, str], ...], float]


def scrape(metrics: Metrics, name: str) -> Samples:
    """Sorted labels -> value of the samples called `name` in the text exposition."""
    found: Samples = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def recovered_sample(reason: str, outcome: str) -> tuple[tuple[str, str], ...]:
    return (("outcome", outcome), ("reason", reason))


async def _left_live(archive: RunArchive, run_id: str, events: Sequence[DelegationEvent]) -> None:
    """A run as a process that died mid-run leaves it: its record open, `events` journaled."""
    await archive.open_run(RunRecord(run_id=run_id, started_at=1.0, node=archive.node))
    store = archive.journal_store(run_id, Engine().retention_policy)
    await store.append([JournalEntry(event, n) for n, event in enumerate(events, 1)])


async def test_runs_a_dead_process_left_live_are_counted_once_by_reason_and_outcome(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    async with open_sqlite_archive(path, node="node-a") as archive:
        # Mid-delegation: recovery cancels the remote task and fails the run.
        await _left_live(
            archive,
            "run-mid",
            [
                DelegationEvent(kind=Kind.RUN_STARTED, run_id="run-mid"),
                DelegationEvent(
                    kind=Kind.STARTED,
                    run_id="run-mid",
                    delegation_id="d1",
                    agent_key="remote",
                    protocol="a2a",
                    remote_task_id="t-1",
                ),
            ],
        )
        # Its terminal journaled, the process died before recording the end: only marked ended.
        await _left_live(
            archive,
            "run-done",
            [
                DelegationEvent(kind=Kind.RUN_STARTED, run_id="run-done"),
                DelegationEvent(kind=Kind.RUN_FINISHED, run_id="run-done"),
            ],
        )
    async with open_sqlite_archive(path, node="node-a") as archive:
        target = ScriptedTarget()
        engine = Engine([spec(target)], archive=archive)
        metrics = Metrics(engine)
        async with engine:
            assert sorted(r.run_id for r in engine.recovered) == ["run-done", "run-mid"]
            stats = engine.statistics()
            exposed = scrape(metrics, "subagent_engine_runs_recovered_total")
            cancels = scrape(metrics, "subagent_engine_remote_cancels_total")
    assert [ref.remote_task_id for ref in target.remote_cancels] == ["t-1"]
    assert stats.runs_recovered == {
        (ErrorCode.INTERRUPTED, "failed"): 1,
        (ErrorCode.INTERRUPTED, "finished"): 1,
    }
    # Not runs this engine ran: started and ended still balance.
    assert (stats.runs_started, stats.runs_ended) == (0, {})
    assert stats.remote_cancels == {RemoteCancel.CONFIRMED: 1}
    assert exposed == {
        recovered_sample("interrupted", "failed"): 1,
        recovered_sample("interrupted", "finished"): 1,
        recovered_sample("interrupted", "cancelled"): 0,
        recovered_sample("node_lost", "finished"): 0,
        recovered_sample("node_lost", "failed"): 0,
        recovered_sample("node_lost", "cancelled"): 0,
    }
    assert cancels[(("outcome", "confirmed"),)] == 1
    # The next start finds nothing left live: nothing more is counted.
    async with open_sqlite_archive(path, node="node-a") as archive:
        engine = Engine([spec(ScriptedTarget())], archive=archive)
        async with engine:
            assert engine.recovered == []
            assert engine.statistics().runs_recovered == {}
            again = scrape(Metrics(engine), "subagent_engine_runs_recovered_total")
    assert set(again.values()) == {0}


async def test_a_reason_or_outcome_outside_the_closed_sets_is_other() -> None:
    engine = Engine([])
    metrics = Metrics(engine)
    lost = RecoveredRun(
        "run-1",
        ErrorCode.NODE_LOST,
        3,
        (RecoveredDelegation("d1", "remote", "t-1", RemoteCancel.UNSUPPORTED),),
    )
    forged = RecoveredRun("run-2", 'x"} 1\n', 2, terminal="run.exploded")
    async with engine:
        engine.stats.recovered([lost, forged])
        exposed = scrape(metrics, "subagent_engine_runs_recovered_total")
        cancels = scrape(metrics, "subagent_engine_remote_cancels_total")
    assert exposed[recovered_sample("node_lost", "failed")] == 1
    assert exposed[recovered_sample("other", "other")] == 1
    assert sum(exposed.values()) == 2
    assert cancels[(("outcome", "unsupported"),)] == 1
    assert 'x"}' not in metrics.exposition().decode()


async def _archived(archive: RunArchive, run_id: str) -> None:
    """A run that ended long ago: its window (5 events) lost six statuses, and keeps three
    identical ones, which a reader that is behind folds."""
    d1: dict[str, Any] = {"run_id": run_id, "delegation_id": "d1", "agent_key": "remote"}
    steps = [
        DelegationEvent(kind=Kind.STATUS, status="working", text=f"step {i}", **d1)
        for i in range(6)
    ]
    events = [
        DelegationEvent(kind=Kind.RUN_STARTED, run_id=run_id),
        DelegationEvent(kind=Kind.STARTED, protocol="a2a", **d1),
        *steps,
        *(
            DelegationEvent(kind=Kind.STATUS, status="working", text="reading", **d1)
            for _ in range(3)
        ),
        DelegationEvent(kind=Kind.FINISHED, status="completed", **d1),
        DelegationEvent(kind=Kind.RUN_FINISHED, run_id=run_id),
    ]
    await archive.open_run(RunRecord(run_id=run_id, started_at=1.0, node=archive.node))
    store = archive.journal_store(run_id, RetentionPolicy(max_events=5))
    await store.append([JournalEntry(event, n) for n, event in enumerate(events, 1)])
    await archive.close_run(run_id, Kind.RUN_FINISHED, 2.0)


async def test_viewers_replaying_archived_runs_count_their_gaps_and_folds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_sqlite_archive(tmp_path / "runs.sqlite3", node="node-a") as archive:
        for run_id in ("run-1", "run-2"):
            await _archived(archive, run_id)
        # At most one archived run's journal is held in memory.
        engine = Engine([], limits=EngineLimits(retained_closed_runs=0), archive=archive)
        metrics = Metrics(engine)
        async with engine:
            before = engine.statistics()
            assert (before.journal_gaps, before.journal_folds) == (0, 0)
            found = await engine.find_run("run-1")
            assert found is not None and found[0] is not None  # from the archive
            _, journal = found
            # A viewer whose buffer holds two events: it reads behind, so its statuses fold.
            async with journal.subscribe(0, max_buffer_bytes=2 * EVENT_OVERHEAD) as viewer:
                seen = [entry async for entry in viewer]
            gaps = sum(1 for entry in seen if entry.event.kind == Kind.GAP)
            folds = sum(
                entry.event.dropped.count
                for entry in seen
                if entry.event.dropped is not None and entry.event.dropped.reason == "status_folded"
            )
            assert (gaps, folds) == (1, 2), [entry.event.kind for entry in seen]
            assert seen[-1].event.kind == Kind.RUN_FINISHED
            during = engine.statistics()
            assert (during.journal_gaps, during.journal_folds) == (gaps, folds)
            assert scrape(metrics, "subagent_engine_journal_gaps_total") == {(): gaps}
            assert scrape(metrics, "subagent_engine_journal_folds_total") == {(): folds}
            # Reading the second archived run evicts the first's journal: its counts stay.
            assert await engine.find_run("run-2") is not None
            after = engine.statistics()
    assert (after.journal_gaps, after.journal_folds) == (gaps, folds)
