"""The durable run archive on SQLite: `open_sqlite_archive` and `SqliteRunArchive`.

`SqliteRunArchive` is an `engine.RunArchive` that answers like `engine.MemoryRunArchive` and
keeps everything in one SQLite file (see `_file` for how the file is claimed and checked, and
`_tables` for the tables and the store contract). Every SQLite call runs in a worker thread,
one at a time (one connection, a capacity limiter of one); the Trio thread only queues and waits.

Writes are committed in groups. Each write (a journal batch, results, a run opened or closed)
joins a queue and waits; one task, the committer, takes everything queued, commits it in one
transaction, and takes what queued up meanwhile for the next. A write returns once its
transaction committed, so a read that follows it sees it; many runs writing at once share the
cost of a commit. A failed transaction fails each of its writes with `ArchiveStorageError` (an
`OSError`), which the engine counts as a failing archive.

Cancelling a write stops the wait, not the write: once queued it is committed with its group
(a journal's later batches, which continue its cursors, depend on it). Closing the archive
commits what is queued, then refuses further calls with `trio.ClosedResourceError`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from adapters.sqlite_archive._file import ArchiveLock, close_quietly, connect
from adapters.sqlite_archive._tables import (
    AppendEntries,
    ArchiveTables,
    CloseRun,
    OpenRun,
    RecordResults,
    Write,
)
from engine import (
    DelegationAudit,
    DelegationResult,
    JournalEntry,
    JournalStore,
    RetentionPolicy,
    RunRecord,
)

__all__ = ["ArchiveStatistics", "SqliteJournalStore", "SqliteRunArchive", "open_sqlite_archive"]

T = TypeVar("T")


@attrs.frozen
class ArchiveStatistics:
    """A snapshot of an archive's writing: `commits` transactions committed, carrying
    `committed_writes` writes; `failed_commits` transactions that failed; `pending_writes`
    writes queued for the next transaction."""

    commits: int
    committed_writes: int
    failed_commits: int
    pending_writes: int


class SqliteJournalStore:
    """One run's journal in the archive, following the store contract (`engine._store`).

    `append` returns once the batch is committed, together with the evictions it causes and
    the audit records it changes. Cheap to make: the run's state is read on first use.
    """

    __slots__ = ("_archive", "policy", "run_id")

    def __init__(self, archive: SqliteRunArchive, run_id: str, policy: RetentionPolicy) -> None:
        self._archive = archive
        self.run_id = run_id
        self.policy = policy

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        if not entries:
            return
        await self._archive._write(AppendEntries(self.run_id, self.policy, list(entries)))

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        for name, value, minimum in (("cursor", cursor, 0), ("max_entries", max_entries, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        tables = self._archive._tables
        return await self._archive._read(tables.read_after, self.run_id, cursor, max_entries)


class SqliteRunArchive:
    """An `engine.RunArchive` in one SQLite file; made by `open_sqlite_archive`.

    Every method may raise `ArchiveStorageError` (an `OSError`) when the file fails, and
    `trio.ClosedResourceError` once the archive is closed. See the module docstring for how
    writes are grouped and what cancellation does.
    """

    def __init__(self, tables: ArchiveTables, path: Path, node: str = "") -> None:
        self.node = node
        self.path = path
        self._tables = tables
        self._limiter = trio.CapacityLimiter(1)
        self._queue: list[Write] = []
        self._wakeup = trio.Event()
        self._committed = trio.Event()  # set (and replaced) after each commit
        self._closing = False
        self._commits = 0
        self._committed_writes = 0
        self._failed_commits = 0

    # -- the RunArchive methods ------------------------------------------------------------

    def journal_store(self, run_id: str, policy: RetentionPolicy) -> JournalStore:
        return SqliteJournalStore(self, run_id, policy)

    async def open_run(self, record: RunRecord) -> None:
        await self._write(OpenRun(record))

    async def record_results(self, run_id: str, results: Sequence[DelegationResult]) -> None:
        if results:
            await self._write(RecordResults(run_id, list(results)))

    async def close_run(self, run_id: str, outcome: str, ended_at: float) -> None:
        await self._write(CloseRun(run_id, outcome, ended_at))

    async def run(self, run_id: str) -> RunRecord | None:
        return await self._read(self._tables.run, run_id)

    async def head(self, run_id: str) -> int:
        return await self._read(self._tables.head, run_id)

    async def results(self, run_id: str) -> list[DelegationResult]:
        return await self._read(self._tables.results, run_id)

    async def audits(self, run_id: str) -> list[DelegationAudit]:
        return await self._read(self._tables.audits, run_id)

    async def live_runs(self, node: str | None = None) -> list[RunRecord]:
        return await self._read(self._tables.live_runs, node)

    async def wait_entries(self, run_id: str, after: int, within: float) -> bool:
        """Wait at most `within` seconds for the run's journal to hold an entry after `after`;
        True once it does. Only this process writes the file, so each commit wakes the wait."""
        with trio.move_on_after(within):
            while True:
                committed = self._committed  # taken before reading, so no commit is missed
                if await self.head(run_id) > after:
                    return True
                await committed.wait()
        return await self.head(run_id) > after

    def statistics(self) -> ArchiveStatistics:
        return ArchiveStatistics(
            commits=self._commits,
            committed_writes=self._committed_writes,
            failed_commits=self._failed_commits,
            pending_writes=len(self._queue),
        )

    # -- reading and the group commit -------------------------------------------------------

    async def _read(self, read: Callable[..., T], *args: Any) -> T:
        if self._closing:
            raise trio.ClosedResourceError("the run archive is closed")
        return await trio.to_thread.run_sync(
            self._tables.reading, read, *args, limiter=self._limiter
        )

    async def _write(self, write: Write) -> None:
        if self._closing:
            raise trio.ClosedResourceError("the run archive is closed")
        write.done = trio.Event()
        self._queue.append(write)
        self._wakeup.set()
        await write.done.wait()
        if write.error is not None:
            raise write.error

    async def _commit_queued(self) -> None:
        batch, self._queue = self._queue, []
        try:
            ok = await trio.to_thread.run_sync(self._tables.commit, batch, limiter=self._limiter)
        except BaseException:
            # Cancelled before the thread started (a thread once started is waited for): the
            # group goes back to the head of the queue, for the next commit or the close.
            self._queue[:0] = batch
            raise
        if ok:
            self._commits += 1
            self._committed_writes += sum(1 for write in batch if write.error is None)
        else:
            self._failed_commits += 1
        for write in batch:
            write.done.set()
        self._committed.set()
        self._committed = trio.Event()

    async def _committer(self) -> None:
        """Commit what is queued, group by group, until the archive closes."""
        while True:
            if self._queue:
                await self._commit_queued()
            elif self._closing:
                return
            else:
                self._wakeup = trio.Event()
                await self._wakeup.wait()

    async def _close(self) -> None:
        """Refuse new calls, commit what is queued, close the connection (shielded)."""
        self._closing = True
        self._wakeup.set()
        with trio.CancelScope(shield=True):
            while self._queue:
                await self._commit_queued()
            await trio.to_thread.run_sync(close_quietly, self._tables.conn, limiter=self._limiter)


@asynccontextmanager
async def open_sqlite_archive(
    path: str | os.PathLike[str], *, node: str = ""
) -> AsyncIterator[SqliteRunArchive]:
    """Open (or create) the run archive at `path` for this process, as `node`.

    The parent directory is created if missing (mode 0o700), the file with mode 0o600. Raises
    `ArchiveOpenError` (an `OSError`) naming the path if the file is not a run archive of a
    format this version reads, and `ArchiveInUseError` if another opener holds it; the file is
    then left unmodified. On exit, what is queued is committed and the file is released.
    """
    db_path = Path(path)
    lock = await trio.to_thread.run_sync(ArchiveLock, db_path)
    try:
        conn = await trio.to_thread.run_sync(connect, db_path)
        try:
            tables = await trio.to_thread.run_sync(ArchiveTables, conn, db_path)
        except BaseException:  # cancelled before the thread ran, or refused (closed already)
            close_quietly(conn)
            raise
        archive = SqliteRunArchive(tables, db_path, node)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(archive._committer)
                try:
                    yield archive
                finally:
                    archive._closing = True
                    archive._wakeup.set()
        finally:
            await archive._close()
    finally:
        lock.release()
