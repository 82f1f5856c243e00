"""The SQLite run archive answers like the in-memory reference, keeps it all across a reopen,
commits writes in groups, refuses files that are not its own without touching them, and
reports storage failures as `OSError`s that leave it consistent."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest
import trio
from hypothesis import strategies as st

from adapters.sqlite_archive import (
    ArchiveInUseError,
    ArchiveOpenError,
    ArchiveStorageError,
    SqliteRunArchive,
    open_sqlite_archive,
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
    Kind,
    MemoryJournalStore,
    MemoryRunArchive,
    RemoteCancel,
    RetentionPolicy,
    RunArchive,
    RunRecord,
    Status,
)
from engine.testing._store_kit import _events
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, delta, finished, started

POLICY = RetentionPolicy()


def _event(kind: str, run_id: str, delegation: str | None = None, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id=run_id, delegation_id=delegation, **fields)


def _entries(events: Sequence[DelegationEvent], head: int = 0) -> list[JournalEntry]:
    return [JournalEntry(event, head + n) for n, event in enumerate(events, start=1)]


def _snapshot(entries: Sequence[JournalEntry]) -> list[tuple[int, DelegationEvent, int]]:
    return [(e.cursor, e.event, e.weight) for e in entries]


def _result(delegation: str, status: str = Status.COMPLETED, **fields: Any) -> DelegationResult:
    return DelegationResult(
        delegation_id=delegation, agent="remote", remote_protocol="a2a", status=status, **fields
    )


async def _write_the_same(archive: RunArchive) -> None:
    """Records, a journal, results and an end, as a run's life writes them."""
    await archive.open_run(
        RunRecord(
            run_id="run-1",
            started_at=1.0,
            thread_id="th-1",
            node="node-a",
            metadata={"user": {"n": 1, "tags": ["x"]}},
            attributes={"mode": "attributed"},
        )
    )
    await archive.open_run(RunRecord(run_id="run-2", started_at=2.0, node="node-b"))
    await archive.open_run(RunRecord(run_id="run-3", started_at=3.0, node="node-a"))
    store = archive.journal_store("run-1", POLICY)
    await store.append(
        _entries(
            [
                _event(Kind.RUN_STARTED, "run-1"),
                _event(Kind.STARTED, "run-1", "d1", agent_key="remote", protocol="a2a"),
                _event(Kind.STARTED, "run-1", "d2", agent_key="other"),
            ]
        )
    )
    await store.append(
        _entries(
            [
                _event(Kind.STATUS, "run-1", "d1", remote_task_id="t-1", remote_context_id="c-1"),
                _event(Kind.TEXT_DELTA, "run-1", "d1", message_id="m1", delta="hi"),
                _event(Kind.FINISHED, "run-1", "d1", time=5.0),
            ],
            head=3,
        )
    )
    await archive.record_results(
        "run-1",
        [
            _result("d2", Status.RUNNING),
            _result("d1", remote_task_id="t-1", summary="done"),
        ],
    )
    await archive.record_results(
        "run-1",
        [
            _result(
                "d2",
                Status.CANCELLED,
                error=DelegationError(code=ErrorCode.CANCELLED, message="stop"),
                remote_cancel=RemoteCancel.CONFIRMED,
            )
        ],
    )
    await archive.close_run("run-3", Kind.RUN_FINISHED, 9.0)
    await archive.close_run("run-unknown", Kind.RUN_FINISHED, 9.0)


async def _answers(archive: RunArchive) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for run_id in ("run-1", "run-2", "run-3", "run-unknown"):
        out[f"run {run_id}"] = await archive.run(run_id)
        out[f"head {run_id}"] = await archive.head(run_id)
        out[f"results {run_id}"] = await archive.results(run_id)
        out[f"audits {run_id}"] = await archive.audits(run_id)
        store = archive.journal_store(run_id, POLICY)
        out[f"journal {run_id}"] = _snapshot(await store.read_after(0, 100))
    for node in (None, "node-a", "node-b", "node-c"):
        out[f"live {node}"] = await archive.live_runs(node)
    return out


async def test_the_archive_answers_like_the_reference_and_again_after_reopening(
    tmp_path: Path,
) -> None:
    reference = MemoryRunArchive(node="node-a")
    await _write_the_same(reference)
    expected = await _answers(reference)
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path, node="node-a") as archive:
        assert archive.node == "node-a"
        await _write_the_same(archive)
        assert await _answers(archive) == expected
    async with open_sqlite_archive(path, node="node-a") as archive:
        assert await _answers(archive) == expected
    assert expected["live None"] == [expected["run run-1"], expected["run run-2"]]
    assert expected["head run-1"] == 6


async def test_a_started_a_status_and_a_terminal_fold_into_one_audit_record(
    tmp_path: Path,
) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0, thread_id="th-1"))
        store = archive.journal_store("run-1", POLICY)
        await store.append(
            _entries(
                [
                    _event(Kind.RUN_STARTED, "run-1"),
                    _event(
                        Kind.STARTED,
                        "run-1",
                        "d1",
                        agent_key="research",
                        protocol="a2a",
                        parent_tool_call_id="call-1",
                        time=10.0,
                    ),
                    _event(Kind.STATUS, "run-1", "d1", remote_task_id="t-7", status="working"),
                ]
            )
        )
        await store.append(
            _entries(
                [
                    _event(Kind.STATUS, "run-1", "d1", remote_context_id="c-7"),
                    _event(Kind.FINISHED, "run-1", "d1", time=12.0),
                ],
                head=3,
            )
        )
        [audit] = await archive.audits("run-1")
        assert (audit.run_id, audit.delegation_id, audit.thread_id) == ("run-1", "d1", "th-1")
        assert (audit.agent_key, audit.protocol, audit.parent_tool_call_id) == (
            "research",
            "a2a",
            "call-1",
        )
        assert (audit.remote_task_id, audit.remote_context_id) == ("t-7", "c-7")
        assert (audit.status, audit.started_at, audit.ended_at) == (Status.COMPLETED, 10.0, 12.0)


# -- reopening mid-journal -------------------------------------------------------------------


@st.composite
def _halves(draw: st.DrawFn) -> tuple[RetentionPolicy, list[list[DelegationEvent]], int]:
    policy = draw(
        st.builds(
            RetentionPolicy,
            max_events=st.sampled_from((1, 2, 3, 5)),
            max_bytes=st.sampled_from((500, 1_200, 8 << 20)),
            max_retained=st.sampled_from((0, 2, 10_000)),
        )
    )
    events = _events(draw)
    batches = draw(st.lists(st.lists(events, min_size=1, max_size=5), min_size=2, max_size=10))
    return policy, batches, draw(st.integers(1, len(batches) - 1))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(case=_halves())
def test_reopening_mid_journal_carries_on_with_the_same_decisions(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[RetentionPolicy, list[list[DelegationEvent]], int],
) -> None:
    policy, batches, reopen_at = case
    path = tmp_path_factory.mktemp("reopen") / "runs.db"
    reference = MemoryJournalStore.from_policy("run-1", policy)
    batches_of_entries: list[list[JournalEntry]] = []
    head = 0
    for batch in batches:
        entries = _entries([attrs.evolve(e, run_id="run-1") for e in batch], head)
        head += len(entries)
        reference.append_nowait(entries)
        batches_of_entries.append(entries)

    async def write(first: int, stop: int) -> list[list[tuple[int, DelegationEvent, int]]]:
        async with open_sqlite_archive(path) as archive:
            store = archive.journal_store("run-1", policy)
            for entries in batches_of_entries[first:stop]:
                await store.append(entries)
            return [_snapshot(await store.read_after(after, head + 1)) for after in range(head)]

    trio.run(write, 0, reopen_at)
    got = trio.run(write, reopen_at, len(batches))
    assert got == [_snapshot(reference.read_after_nowait(after, head + 1)) for after in range(head)]


# -- group commit ----------------------------------------------------------------------------


async def test_concurrent_writes_of_many_runs_share_transactions(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        await archive.open_run(RunRecord(run_id="warm-up", started_at=0.0))
        before = archive.statistics()
        heads: dict[str, int] = {}

        async def append(run_id: str) -> None:
            store = archive.journal_store(run_id, POLICY)
            for batch in range(3):
                await store.append(
                    _entries(
                        [_event(Kind.PARENT_TEXT_DELTA, run_id, message_id="m", delta="x")] * 2,
                        head=batch * 2,
                    )
                )
                # read after write: what returned is committed and read back
                assert await archive.head(run_id) == (batch + 1) * 2
            heads[run_id] = await archive.head(run_id)

        async with trio.open_nursery() as nursery:
            for n in range(50):
                nursery.start_soon(append, f"run-{n}")
        after = archive.statistics()
        assert heads == {f"run-{n}": 6 for n in range(50)}
        assert after.committed_writes - before.committed_writes == 150
        assert after.commits - before.commits < 50
        assert after.failed_commits == 0 and after.pending_writes == 0


async def test_waiting_for_entries_ends_at_the_commit_that_brings_them(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        store = archive.journal_store("run-1", POLICY)
        await store.append(_entries([_event(Kind.RUN_STARTED, "run-1")]))
        assert await archive.wait_entries("run-1", 0, 60.0)  # already there: no wait
        assert not await archive.wait_entries("run-1", 1, 0.01)  # nothing comes: False
        woke: list[bool] = []

        async def waiter() -> None:
            woke.append(await archive.wait_entries("run-1", 1, 60.0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            await archive.journal_store("other", POLICY).append(
                _entries([_event(Kind.RUN_STARTED, "other")])
            )
            await trio.testing.wait_all_tasks_blocked()
            assert woke == []  # another run's commit: still waiting
            await store.append(_entries([_event(Kind.RUN_FINISHED, "run-1")], head=1))
        assert woke == [True]


async def test_a_bad_write_fails_alone_in_its_group(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        await archive.open_run(RunRecord(run_id="warm-up", started_at=0.0))  # committer waits
        failures: list[BaseException] = []

        async def write(run_id: str, first_cursor: int) -> None:
            store = archive.journal_store(run_id, POLICY)
            try:
                await store.append(_entries([_event(Kind.RUN_STARTED, run_id)], first_cursor - 1))
            except ValueError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, "run-a", 1)
            nursery.start_soon(write, "run-b", 2)  # a hole: cursor 1 never written
            nursery.start_soon(write, "run-c", 1)
        assert archive.statistics().commits == 2  # the warm-up's, then one for all three
        [failure] = failures
        assert "does not continue" in str(failure)
        assert [await archive.head(r) for r in ("run-a", "run-b", "run-c")] == [1, 0, 1]


async def test_bad_inputs_get_typed_errors(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        with pytest.raises(ValueError, match="already archived"):
            await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        with pytest.raises(ValueError, match="metadata must be JSON"):
            await archive.open_run(
                RunRecord(run_id="run-2", started_at=0.0, metadata={"x": object()})
            )
        store = archive.journal_store("run-1", POLICY)
        with pytest.raises(ValueError, match="cursor must be"):
            await store.read_after(-1, 10)
        with pytest.raises(ValueError, match="max_entries must be"):
            await store.read_after(0, 0)
        commits = archive.statistics().commits
        await store.append([])  # nothing to write: nothing written
        await archive.record_results("run-1", [])
        assert archive.statistics().commits == commits
        assert await archive.run("run-2") is None


async def test_a_closed_archive_refuses_calls(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        store = archive.journal_store("run-1", POLICY)
    with pytest.raises(trio.ClosedResourceError):
        await archive.run("run-1")
    with pytest.raises(trio.ClosedResourceError):
        await store.append(_entries([_event(Kind.RUN_STARTED, "run-1")]))


async def test_writes_queued_when_the_archive_closes_are_committed(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path) as archive, trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(archive.open_run, RunRecord(run_id=f"r{n}", started_at=n))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # the writers stop waiting; their writes stand
    async with open_sqlite_archive(path) as archive:
        assert sorted(r.run_id for r in await archive.live_runs()) == [f"r{n}" for n in range(5)]


# -- storage failures ------------------------------------------------------------------------


def _fill_the_disk(archive: SqliteRunArchive) -> None:
    """Make the file unable to grow (as a full disk does): SQLITE_FULL on the next new page."""
    conn = archive._tables.conn
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")


async def test_a_full_disk_fails_writes_with_oserror_and_leaves_the_archive_consistent(
    tmp_path: Path,
) -> None:
    policy = RetentionPolicy(max_events=3)
    reference = MemoryJournalStore.from_policy("run-1", policy)
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        store = archive.journal_store("run-1", policy)
        first = _entries(
            [
                _event(Kind.RUN_STARTED, "run-1"),
                _event(Kind.STARTED, "run-1", "d1", agent_key="a"),
                *[_event(Kind.TEXT_DELTA, "run-1", "d1", message_id="m", delta="y")] * 3,
            ]
        )
        await store.append(first)
        reference.append_nowait(first)
        heavy = _entries(
            [_event(Kind.TEXT_DELTA, "run-1", "d1", message_id="m", delta="z" * 20_000)] * 4
            + [_event(Kind.FINISHED, "run-1", "d1")],
            head=5,
        )
        _fill_the_disk(archive)
        with pytest.raises(OSError, match="full") as failure:
            await store.append(heavy)
        assert isinstance(failure.value, ArchiveStorageError)
        with pytest.raises(OSError, match="full"):
            await archive.record_results("run-1", [_result("d1", summary="s" * 20_000)])
        assert archive.statistics().failed_commits == 2
        # Nothing of the failed writes stands, in the tables or in what the archive caches.
        assert await archive.head("run-1") == 5
        assert [a.status for a in await archive.audits("run-1")] == [Status.RUNNING]
        assert await archive.results("run-1") == []
        archive._tables.conn.execute("PRAGMA max_page_count = 1073741823")
        await store.append(heavy)
        reference.append_nowait(heavy)
        for after in range(11):
            assert _snapshot(await store.read_after(after, 20)) == _snapshot(
                reference.read_after_nowait(after, 20)
            )
        assert [a.status for a in await archive.audits("run-1")] == [Status.COMPLETED]


async def test_a_write_failing_midway_leaves_nothing_behind_in_tables_or_caches(
    tmp_path: Path,
) -> None:
    policy = RetentionPolicy(max_events=2)
    reference = MemoryJournalStore.from_policy("run-1", policy)
    first = _entries(
        [
            _event(Kind.RUN_STARTED, "run-1"),
            _event(Kind.STARTED, "run-1", "d1", agent_key="a"),
            _event(Kind.TEXT_DELTA, "run-1", "d1", message_id="m", delta="y"),
        ]
    )
    second = _entries(
        [
            _event(Kind.TEXT_DELTA, "run-1", "d1", message_id="m", delta="z"),
            _event(Kind.TEXT_END, "run-1", "d1", message_id="m"),
            _event(Kind.FINISHED, "run-1", "d1", remote_task_id="t-1"),
        ],
        head=3,
    )
    async with open_sqlite_archive(tmp_path / "runs.db") as archive:
        store = archive.journal_store("run-1", policy)
        await store.append(first)
        reference.append_nowait(first)
        # The audit row is written last: the batch's entries, evictions and retention are
        # applied (and cached) by then.
        conn = archive._tables.conn
        conn.execute(
            "CREATE TRIGGER fail BEFORE UPDATE ON audits"
            " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )
        with pytest.raises(ArchiveStorageError, match="disk I/O error"):
            await store.append(second)
        conn.execute("DROP TRIGGER fail")
        await store.append(second)  # the cursors continue what was committed, not what failed
        reference.append_nowait(second)
        for after in range(7):
            assert _snapshot(await store.read_after(after, 20)) == _snapshot(
                reference.read_after_nowait(after, 20)
            )
        [audit] = await archive.audits("run-1")
        assert (audit.status, audit.remote_task_id) == (Status.COMPLETED, "t-1")


async def test_rows_of_an_unknown_format_are_refused_on_reading(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path) as archive:
        await _write_the_same(archive)
    with sqlite3.connect(path) as conn:
        for table in ("entries", "results", "audits", "runs"):
            conn.execute(f"UPDATE {table} SET format = {ARCHIVE_FORMAT_VERSION + 1}")
    conn.close()
    async with open_sqlite_archive(path) as archive:
        with pytest.raises(ArchiveStorageError, match="format 2"):
            await archive.journal_store("run-1", POLICY).read_after(0, 10)
        with pytest.raises(ArchiveStorageError, match="format 2"):
            await archive.results("run-1")
        with pytest.raises(ArchiveStorageError, match="format 2"):
            await archive.audits("run-1")
        with pytest.raises(ArchiveStorageError, match="format 2"):
            await archive.live_runs()


# -- reading a long run ----------------------------------------------------------------------


async def _write_long_run(path: Path, count: int) -> None:
    """A run of `count` text deltas in a window of a quarter of them (so the rows are window,
    retained and deleted ones), the delegation's start retained beyond the window."""
    policy = RetentionPolicy(max_events=count // 4, max_bytes=1 << 40)
    events = [_event(Kind.STARTED, "run-1", "d-1")]
    events += [_event(Kind.TEXT_DELTA, "run-1", "d-1", delta="x") for _ in range(count - 1)]
    async with open_sqlite_archive(path) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        store = archive.journal_store("run-1", policy)
        for start in range(0, count, 100):
            await store.append(_entries(events[start : start + 100], head=start))


async def _reading_reopened(path: Path, cursors: Sequence[int]) -> tuple[list[str], list[int]]:
    """The statements `read_after(cursor, 64)` runs on the reopened file, and the SQLite
    virtual-machine steps (in hundreds) each read takes."""
    statements: list[str] = []
    steps: list[int] = []
    async with open_sqlite_archive(path) as archive:
        conn = archive._tables.conn
        store = archive.journal_store("run-1", POLICY)
        for cursor in cursors:
            counted = [0]

            def count(counted: list[int] = counted) -> int:
                counted[0] += 1
                return 0

            conn.set_progress_handler(count, 100)
            conn.set_trace_callback(statements.append)
            try:
                assert await store.read_after(cursor, 64)
            finally:
                conn.set_progress_handler(None, 0)
                conn.set_trace_callback(None)
            steps.append(counted[0])
    return statements, steps


def _plans(path: Path, statements: Sequence[str]) -> dict[str, list[str]]:
    with sqlite3.connect(path) as conn:
        plans = {s: [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {s}")] for s in statements}
    conn.close()
    return plans


async def test_a_reopened_archive_reads_by_index_searches_whatever_the_run_length(
    tmp_path: Path,
) -> None:
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    await _write_long_run(short, 800)
    await _write_long_run(long, 3_200)
    # Behind the window (the retained start, then a gap), at its start, in its middle, its end.
    statements, steps_long = await _reading_reopened(long, [0, 2_400, 2_800, 3_150])
    assert any("retained = 0" in s for s in statements)
    for statement, plan in _plans(long, statements).items():
        assert plan and all(step.startswith("SEARCH") for step in plan), (statement, plan)
    # No read grows with the run: four times the rows, about the same work per chunk.
    _, steps_short = await _reading_reopened(short, [0, 600, 700, 750])
    assert max(steps_long) <= 2 * max(steps_short) + 10, (steps_short, steps_long)


async def test_a_file_made_before_the_window_index_is_given_it_on_opening(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_long_run(path, 400)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX entries_window")
    conn.close()
    statements, _ = await _reading_reopened(path, [0, 350])
    with sqlite3.connect(path) as conn:
        (found,) = conn.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'entries_window'"
        ).fetchone()
    conn.close()
    assert found == 1
    for statement, plan in _plans(path, statements).items():
        assert all(step.startswith("SEARCH") for step in plan), (statement, plan)


async def test_an_archive_whose_window_index_cannot_be_made_is_refused_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX entries_window")
        conn.execute("CREATE TABLE entries_window (note TEXT)")  # the name taken
    conn.close()
    error = await _refused(path)
    assert "entries_window" in str(error) and error.path == path


# -- opening ---------------------------------------------------------------------------------


def _contents(path: Path) -> tuple[bytes, list[str]]:
    """The file's bytes and the names beside it (a lock file aside)."""
    names = sorted(p.name for p in path.parent.iterdir() if not p.name.endswith(".lock"))
    return path.read_bytes(), names


async def _refused(path: Path) -> ArchiveOpenError:
    before = await trio.to_thread.run_sync(_contents, path)
    with pytest.raises(ArchiveOpenError) as failure:
        async with open_sqlite_archive(path):
            pass  # pragma: no cover
    assert await trio.to_thread.run_sync(_contents, path) == before
    assert str(path) in str(failure.value)
    return failure.value


async def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(b"\x00garbage\xff" * 500)
    error = await _refused(path)
    assert "not an SQLite database" in str(error) and error.path == path
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 10)  # a header cut short
    await _refused(path)


async def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    error = await _refused(path)
    assert "another application" in str(error)


async def test_an_archive_of_a_newer_format_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {ARCHIVE_FORMAT_VERSION + 1}")
    conn.close()
    error = await _refused(path)
    assert f"format {ARCHIVE_FORMAT_VERSION + 1}, newer" in str(error)


async def test_a_second_opener_in_this_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
        error = await _refused(path)
        assert isinstance(error, ArchiveInUseError)
        assert error.pid == os.getpid() and f"process {os.getpid()}" in str(error)
        assert await archive.run("run-1") is not None  # the holder carries on
    async with open_sqlite_archive(path) as archive:  # released on close
        assert await archive.run("run-1") is not None


_HOLDER = """
import sys, trio
from adapters.sqlite_archive import open_sqlite_archive

async def main():
    async with open_sqlite_archive(sys.argv[1]):
        print("open", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)

trio.run(main)
"""


async def test_an_archive_another_process_holds_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_sqlite_archive(path):
        pass
    root = Path(__file__).parents[2]
    holder = await trio.lowlevel.open_process(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=root,
    )
    try:
        assert holder.stdout is not None
        said = b""
        while not said.endswith(b"\n"):  # a pipe may hand one line over in pieces
            chunk = await holder.stdout.receive_some(16)
            assert chunk, f"the holder exited before it said it was open: {said!r}"
            said += chunk
        assert said == b"open\n"
        error = await _refused(path)
        assert isinstance(error, ArchiveInUseError) and error.pid == holder.pid
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        await holder.stdin.aclose()  # its end of input ends it
        await holder.wait()
        await holder.stdout.aclose()
    assert holder.returncode == 0


async def test_the_directory_and_file_are_created_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "deep" / "runs.db"
    async with open_sqlite_archive(path):
        pass
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lock = await trio.Path(f"{path}.lock").read_text()
    assert lock.strip() == str(os.getpid())


async def test_an_empty_file_is_made_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.touch()
    async with open_sqlite_archive(path) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=0.0))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (ARCHIVE_FORMAT_VERSION,)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    formats = {row[0] for row in conn.execute("SELECT format FROM runs")}
    conn.close()
    assert formats == {ARCHIVE_FORMAT_VERSION}


# -- with the engine -------------------------------------------------------------------------


async def test_the_engine_keeps_a_run_in_the_file_and_serves_it_after_a_reopen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    target = ScriptedTarget(start=[[started("t-9", "c-9"), delta("hi"), finished("done")]])
    limits = EngineLimits(retained_closed_runs=0)
    async with (
        open_sqlite_archive(path, node="node-a") as archive,
        Engine([spec(target)], archive=archive, limits=limits) as eng,
        eng.open_run(thread_id="th-1") as run,
    ):
        result = await run.delegate(
            DelegationRequest(agent="remote", objective="x", parent_tool_call_id="c1")
        )
    async with open_sqlite_archive(path, node="node-a") as archive:
        async with Engine([spec(ScriptedTarget())], archive=archive) as eng:
            assert eng.recovered == []
            assert await eng.find_results(run.run_id) == [result]
            found = await eng.find_run(run.run_id)
            assert found is not None
            record, journal = found
            async with journal.subscribe() as sub:
                replayed = [entry async for entry in sub]
        assert record is not None and record.outcome == Kind.RUN_FINISHED
        assert replayed[-1].event.kind == Kind.RUN_FINISHED
        assert [e.cursor for e in replayed] == list(range(1, await archive.head(run.run_id) + 1))
        [audit] = await archive.audits(run.run_id)
        assert (audit.remote_task_id, audit.status) == ("t-9", Status.COMPLETED)
