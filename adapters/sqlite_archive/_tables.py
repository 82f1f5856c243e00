"""The archive's tables and the blocking reads and writes on them, run in a worker thread.

`ArchiveTables` owns the connection and what it caches of each live run: its journal state
(head, window bounds, how many entries are retained, the `LifecycleRetention` that decides what
is kept) and its `DelegationAudits`. It is used by one thread at a time (the archive serializes
every call through a capacity limiter of one) and never by the Trio thread.

Writes are `Write`s, committed in groups: `commit(writes)` runs many writes (of many runs) in
one transaction. Each write first `prepare`s (checks its input and encodes it, writing
nothing: an error there fails that write alone), then `apply`s (writes rows and updates the
caches). If anything fails while applying or committing, the whole transaction is rolled back,
every write of the group fails with `ArchiveStorageError`, and the caches of the runs the group
touched are dropped, to be read again from what was committed.

The journal follows the store contract of `engine._store` with the contract's own pieces:
`RetentionPolicy.evictions` decides what leaves the window after each batch,
`LifecycleRetention.retains` (fed every leaving entry in cursor order) what is kept beyond it,
`retained_overflow` what retained entries are dropped, and `replay_before_window` what a reader
behind the window gets. Entry rows are `retained = 0` while in the window and `1` once kept
beyond it; rows that leave the window without being kept are deleted. What the retention has
open is saved with each eviction (`journals.open_things`), so decisions after reopening the file
are the ones the process would have made.

Reads are index searches, never scans of a run: entries by the primary key (run, cursor), a
run's window bounds and retained count by the `entries_window` index, which `ArchiveTables`
adds to files that predate it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from adapters.sqlite_archive._file import ArchiveOpenError, ArchiveStorageError, close_quietly
from engine import (
    ARCHIVE_FORMAT_VERSION,
    DelegationAudit,
    DelegationAudits,
    DelegationResult,
    JournalEntry,
    LifecycleRetention,
    RetentionPolicy,
    RunRecord,
    WireError,
    event_from_json,
    replay_before_window,
    result_from_json,
    to_json,
)

__all__ = ["AppendEntries", "ArchiveTables", "CloseRun", "OpenRun", "RecordResults", "Write"]

_FORMAT: Final = ARCHIVE_FORMAT_VERSION

T = TypeVar("T")


class _JournalState:
    """What the tables say of one run's journal, kept between batches."""

    __slots__ = ("first_cursor", "head", "retained", "retention", "window_bytes", "window_events")

    def __init__(
        self,
        head: int,
        first_cursor: int,
        window_events: int,
        window_bytes: int,
        retained: int,
        retention: LifecycleRetention,
    ) -> None:
        self.head = head
        self.first_cursor = first_cursor  # the window's oldest cursor (head + 1 when empty)
        self.window_events = window_events
        self.window_bytes = window_bytes
        self.retained = retained
        self.retention = retention


class Write:
    """One write of a group commit, for one run. `error` is set if it failed; `done` is for
    the async side (the archive sets it once the group's transaction ended)."""

    __slots__ = ("done", "error", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.error: BaseException | None = None
        self.done: Any = None

    def prepare(self, tables: ArchiveTables) -> None:
        """Check and encode, writing nothing (what raises here fails this write alone)."""

    def apply(self, tables: ArchiveTables) -> None:
        """Write the rows and update the caches (what raises here fails the group)."""
        raise NotImplementedError


class AppendEntries(Write):
    """A journal batch: its rows, the evictions it causes and the audit records it changes."""

    __slots__ = ("entries", "policy", "rows")

    def __init__(self, run_id: str, policy: RetentionPolicy, entries: Sequence[JournalEntry]):
        super().__init__(run_id)
        self.policy = policy
        self.entries = entries
        self.rows: list[tuple[Any, ...]] = []

    def prepare(self, tables: ArchiveTables) -> None:
        head = tables.journal(self.run_id).head
        for offset, entry in enumerate(self.entries, start=head + 1):
            if entry.cursor != offset:
                raise ValueError(
                    f"run {self.run_id!r}: entry cursor {entry.cursor} does not continue the "
                    f"journal (expected {offset})"
                )
        run_id = self.run_id
        self.rows = [
            (run_id, e.cursor, e.event.kind, e.weight, to_json(e.event), _FORMAT)
            for e in self.entries
        ]

    def apply(self, tables: ArchiveTables) -> None:
        tables.append(self.run_id, self.policy, self.entries, self.rows)


class RecordResults(Write):
    __slots__ = ("results", "rows")

    def __init__(self, run_id: str, results: Sequence[DelegationResult]) -> None:
        super().__init__(run_id)
        self.results = results
        self.rows: list[tuple[Any, ...]] = []

    def prepare(self, tables: ArchiveTables) -> None:
        self.rows = [(self.run_id, r.delegation_id, to_json(r), _FORMAT) for r in self.results]

    def apply(self, tables: ArchiveTables) -> None:
        tables.record_results(self.run_id, self.results, self.rows)


class OpenRun(Write):
    __slots__ = ("record", "row")

    def __init__(self, record: RunRecord) -> None:
        super().__init__(record.run_id)
        self.record = record
        self.row: tuple[Any, ...] = ()

    def prepare(self, tables: ArchiveTables) -> None:
        record = self.record
        if tables.has_run(record.run_id):
            raise ValueError(f"run {record.run_id!r} is already archived")
        self.row = (
            record.run_id,
            record.started_at,
            record.thread_id,
            record.node,
            _json_text(record.metadata, "metadata"),
            _json_text(record.attributes, "attributes"),
            record.ended_at,
            record.outcome,
            _FORMAT,
        )

    def apply(self, tables: ArchiveTables) -> None:
        tables.conn.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", self.row)


class CloseRun(Write):
    __slots__ = ("ended_at", "outcome")

    def __init__(self, run_id: str, outcome: str, ended_at: float) -> None:
        super().__init__(run_id)
        self.outcome = outcome
        self.ended_at = ended_at

    def apply(self, tables: ArchiveTables) -> None:
        tables.conn.execute(
            "UPDATE runs SET outcome = ?, ended_at = ? WHERE run_id = ?",
            (self.outcome, self.ended_at, self.run_id),
        )
        tables.forget(self.run_id)  # an ended run is read from the tables, not kept cached


def _json_text(value: Mapping[str, Any], what: str) -> str:
    try:
        return json.dumps(dict(value), separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"run {what} must be JSON values: {exc}") from exc


def _storage_error(exc: BaseException) -> ArchiveStorageError:
    failure = ArchiveStorageError(f"run archive: {type(exc).__name__}: {exc}")
    failure.__cause__ = exc
    return failure


class ArchiveTables:
    """The connection, the caches of live runs, and every blocking read and write."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        """Takes `conn` (an archive `_file.connect` opened) and adds the indexes the reads use
        to files made before they existed; blocking, so called in a worker thread. Raises
        `ArchiveOpenError` if it cannot (then `conn` is closed and the file is unchanged)."""
        try:
            conn.execute(_ENTRIES_WINDOW_INDEX)
        except sqlite3.Error as exc:
            close_quietly(conn)
            raise ArchiveOpenError(f"{path} is not a usable run archive: {exc}", path) from exc
        self.conn = conn
        self.path = path
        self._journals: dict[str, _JournalState] = {}
        self._audits: dict[str, DelegationAudits] = {}

    # -- caches ----------------------------------------------------------------------------

    def journal(self, run_id: str) -> _JournalState:
        """The run's journal state, read from the tables on first use."""
        state = self._journals.get(run_id)
        if state is None:
            state = self._journals[run_id] = self._load_journal(run_id)
        return state

    def _load_journal(self, run_id: str) -> _JournalState:
        conn = self.conn
        events, size, first, head = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(weight), 0), MIN(cursor), MAX(cursor)"
            " FROM entries WHERE run_id = ? AND retained = 0",
            (run_id,),
        ).fetchone()
        (retained,) = conn.execute(
            "SELECT COUNT(*) FROM entries WHERE run_id = ? AND retained = 1", (run_id,)
        ).fetchone()
        row = conn.execute(
            "SELECT open_things FROM journals WHERE run_id = ?", (run_id,)
        ).fetchone()
        open_things = [tuple(thing) for thing in json.loads(row[0])] if row else []
        head = head or 0
        return _JournalState(
            head=head,
            first_cursor=first if first is not None else head + 1,
            window_events=events,
            window_bytes=size,
            retained=retained,
            retention=LifecycleRetention(open_things),
        )

    def audit(self, run_id: str) -> DelegationAudits:
        """The run's audit records, read from the tables on first use."""
        audits = self._audits.get(run_id)
        if audits is None:
            row = self.conn.execute(
                "SELECT thread_id FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            audits = DelegationAudits(run_id, row[0] if row else None, self._read_audits(run_id))
            self._audits[run_id] = audits
        return audits

    def forget(self, run_id: str) -> None:
        self._journals.pop(run_id, None)
        self._audits.pop(run_id, None)

    # -- group commit ----------------------------------------------------------------------

    def commit(self, writes: Sequence[Write]) -> bool:
        """Run `writes` in one transaction; each failed one gets its `error`. Never raises."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for write in writes:
                try:
                    write.prepare(self)
                except sqlite3.Error:
                    raise
                except Exception as exc:  # bad input: this write alone fails
                    write.error = exc
                    continue
                write.apply(self)
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            for write in writes:
                self.forget(write.run_id)
                if write.error is None:
                    write.error = _storage_error(exc)
            return False
        return True

    # -- writes (inside a group's transaction) ---------------------------------------------

    def has_run(self, run_id: str) -> bool:
        row = self.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is not None

    def append(
        self,
        run_id: str,
        policy: RetentionPolicy,
        entries: Sequence[JournalEntry],
        rows: Sequence[tuple[Any, ...]],
    ) -> None:
        conn = self.conn
        state = self.journal(run_id)
        conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, 0, ?, ?)", rows)
        state.head = entries[-1].cursor
        state.window_events += len(entries)
        state.window_bytes += sum(entry.weight for entry in entries)
        if policy.exceeded(state.window_events, state.window_bytes):
            self._evict(run_id, policy, state, entries)
        changed = self.audit(run_id).fold(entries)
        if changed:
            self._save_audits(changed)

    def _evict(
        self,
        run_id: str,
        policy: RetentionPolicy,
        state: _JournalState,
        batch: Sequence[JournalEntry],
    ) -> None:
        conn = self.conn
        first = state.first_cursor
        rows = conn.execute(
            "SELECT weight FROM entries WHERE run_id = ? AND cursor >= ? ORDER BY cursor",
            (run_id, first),
        )
        try:
            count, evicted_bytes = policy.evictions(
                state.window_events, state.window_bytes, (row[0] for row in rows)
            )
        finally:
            rows.close()
        if count == 0:
            return
        last = first + count - 1
        retention = state.retention
        open_before = retention.open_things
        kept: list[tuple[str, int]] = []
        for cursor, event in self._leaving(run_id, first, last, batch):
            if retention.retains(event):
                kept.append((run_id, cursor))
        conn.executemany("UPDATE entries SET retained = 1 WHERE run_id = ? AND cursor = ?", kept)
        conn.execute(
            "DELETE FROM entries WHERE run_id = ? AND cursor BETWEEN ? AND ? AND retained = 0",
            (run_id, first, last),
        )
        state.retained += len(kept)
        overflow = policy.retained_overflow(state.retained)
        if overflow > 0:
            conn.execute(
                "DELETE FROM entries WHERE run_id = ? AND cursor IN (SELECT cursor FROM entries"
                " WHERE run_id = ? AND cursor <= ? ORDER BY cursor LIMIT ?)",
                (run_id, run_id, last, overflow),
            )
            state.retained -= overflow
        state.first_cursor = last + 1
        state.window_events -= count
        state.window_bytes -= evicted_bytes
        open_after = retention.open_things
        if open_after != open_before:
            conn.execute(
                "INSERT INTO journals (run_id, open_things) VALUES (?, ?) ON CONFLICT (run_id)"
                " DO UPDATE SET open_things = excluded.open_things",
                (run_id, json.dumps(sorted(open_after, key=repr), separators=(",", ":"))),
            )

    def _leaving(
        self, run_id: str, first: int, last: int, batch: Sequence[JournalEntry]
    ) -> Iterator[tuple[int, Any]]:
        """The events of cursors `first`..`last` in order: decoded from the rows written by
        earlier batches, taken as they are from this batch."""
        batch_first = batch[0].cursor
        if first < batch_first:
            rows = self.conn.execute(
                "SELECT cursor, event, format FROM entries"
                " WHERE run_id = ? AND cursor BETWEEN ? AND ? ORDER BY cursor",
                (run_id, first, min(last, batch_first - 1)),
            ).fetchall()
            for cursor, text, version in rows:
                yield cursor, self._event(text, version, run_id, cursor)
        if last >= batch_first:
            for entry in batch[max(0, first - batch_first) : last - batch_first + 1]:
                yield entry.cursor, entry.event

    def record_results(
        self, run_id: str, results: Sequence[DelegationResult], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        self.conn.executemany(
            "INSERT INTO results (run_id, delegation_id, result, format) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (run_id, delegation_id)"
            " DO UPDATE SET result = excluded.result, format = excluded.format",
            rows,
        )
        audits = self.audit(run_id)
        self._save_audits([audits.with_result(result) for result in results])

    def _save_audits(self, records: Sequence[DelegationAudit]) -> None:
        self.conn.executemany(
            "INSERT INTO audits (run_id, delegation_id, record, format) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (run_id, delegation_id)"
            " DO UPDATE SET record = excluded.record, format = excluded.format",
            [
                (
                    r.run_id,
                    r.delegation_id,
                    json.dumps(attrs.asdict(r), separators=(",", ":"), ensure_ascii=False),
                    _FORMAT,
                )
                for r in records
            ],
        )

    # -- reads (between transactions) ------------------------------------------------------

    def reading(self, read: Callable[..., T], *args: Any) -> T:
        """`read(*args)`, its storage failures as `ArchiveStorageError`."""
        try:
            return read(*args)
        except ArchiveStorageError:
            raise
        except (sqlite3.Error, WireError, OSError) as exc:
            raise _storage_error(exc) from exc

    def _event(self, text: str, version: int, run_id: str, cursor: int) -> Any:
        if version != _FORMAT:
            raise ArchiveStorageError(
                f"run archive {self.path}: entry {run_id!r}:{cursor} is of format {version}, "
                f"this version reads {_FORMAT}"
            )
        return event_from_json(text)

    def _entries(self, run_id: str, rows: sqlite3.Cursor) -> Iterator[JournalEntry]:
        for cursor, weight, text, version in rows:
            yield JournalEntry(self._event(text, version, run_id, cursor), cursor, weight)

    def read_after(self, run_id: str, after: int, max_entries: int) -> list[JournalEntry]:
        conn = self.conn
        state = self._journals.get(run_id)
        if state is not None:
            first = state.first_cursor
        else:  # an ended run (or one not written by this process): not worth caching
            # One aggregate alone, so SQLite answers it from `entries_window` without a scan.
            (first,) = conn.execute(
                "SELECT MIN(cursor) FROM entries WHERE run_id = ? AND retained = 0", (run_id,)
            ).fetchone()
            if first is None:  # no window: every row is a retained one, read as they are
                first = 1
        out: list[JournalEntry] = []
        if after + 1 < first:
            rows = conn.execute(
                "SELECT cursor, weight, event, format FROM entries"
                " WHERE run_id = ? AND cursor > ? AND cursor < ? ORDER BY cursor",
                (run_id, after, first),
            )
            try:
                out = replay_before_window(
                    run_id, after, first, self._entries(run_id, rows), max_entries
                )
            finally:
                rows.close()
            after = first - 1
        room = max_entries - len(out)
        if room > 0:
            rows = conn.execute(
                "SELECT cursor, weight, event, format FROM entries"
                " WHERE run_id = ? AND cursor > ? ORDER BY cursor LIMIT ?",
                (run_id, after, room),
            )
            out.extend(self._entries(run_id, rows))
        return out

    def head(self, run_id: str) -> int:
        (head,) = self.conn.execute(
            "SELECT MAX(cursor) FROM entries WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(head or 0)

    def run(self, run_id: str) -> RunRecord | None:
        row = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else self._run_record(row)

    def live_runs(self, node: str | None) -> list[RunRecord]:
        if node is None:
            rows = self.conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE outcome IS NULL ORDER BY rowid"
            )
        else:
            rows = self.conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE outcome IS NULL AND node = ?"
                " ORDER BY rowid",
                (node,),
            )
        return [self._run_record(row) for row in rows]

    def _run_record(self, row: tuple[Any, ...]) -> RunRecord:
        run_id, started_at, thread_id, node, metadata, attributes, ended_at, outcome, version = row
        self._check_format(version, f"run {run_id!r}")
        return RunRecord(
            run_id=run_id,
            started_at=started_at,
            thread_id=thread_id,
            node=node,
            metadata=json.loads(metadata),
            attributes=json.loads(attributes),
            ended_at=ended_at,
            outcome=outcome,
        )

    def results(self, run_id: str) -> list[DelegationResult]:
        out = []
        for text, version in self.conn.execute(
            "SELECT result, format FROM results WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            self._check_format(version, f"a result of run {run_id!r}")
            out.append(result_from_json(text))
        return out

    def audits(self, run_id: str) -> list[DelegationAudit]:
        cached = self._audits.get(run_id)
        if cached is not None:
            return list(cached.records.values())
        return self._read_audits(run_id)

    def _read_audits(self, run_id: str) -> list[DelegationAudit]:
        out = []
        for text, version in self.conn.execute(
            "SELECT record, format FROM audits WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            self._check_format(version, f"an audit record of run {run_id!r}")
            out.append(DelegationAudit(**json.loads(text)))
        return out

    def _check_format(self, version: int, what: str) -> None:
        if version != _FORMAT:
            raise ArchiveStorageError(
                f"run archive {self.path}: {what} is of format {version}, "
                f"this version reads {_FORMAT}"
            )


#: Finds a run's window (its `retained = 0` rows) and counts its retained rows without
#: scanning the run. Not part of the format: made by any version that opens the file.
_ENTRIES_WINDOW_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS entries_window ON entries (run_id, retained, cursor)"
)

_RUN_COLUMNS: Final = (
    "run_id, started_at, thread_id, node, metadata, attributes, ended_at, outcome, format"
)
