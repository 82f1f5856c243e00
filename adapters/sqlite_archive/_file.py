"""The archive file: claiming it for one process, telling ours from anything else, creating it.

Opening never modifies a file it refuses. The checks read the SQLite header (the first 100
bytes, https://www.sqlite.org/fileformat2.html#the_database_header) before any connection is
made: a file that is not SQLite, an SQLite database of another application (`PRAGMA
application_id`) or of a newer archive format (`PRAGMA user_version`) is refused with an
`ArchiveOpenError` naming the path, and left byte for byte as it was. Both header fields are
written once, when the file is created, in a rollback-journal transaction (before the file is
switched to WAL), so the main file always carries them.

One process uses an archive at a time: it holds an exclusive `flock` on `<path>.lock` (which
holds its pid) for the archive's lifetime; another opener, in this process or another, gets
`ArchiveInUseError`. The lock is released when the archive closes or the process dies.

Everything here blocks; the archive calls it from a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Final

from engine import ARCHIVE_FORMAT_VERSION, StoreUnavailableError

__all__ = [
    "APPLICATION_ID",
    "ArchiveInUseError",
    "ArchiveOpenError",
    "ArchiveStorageError",
    "ArchiveLock",
    "connect",
]

#: `PRAGMA application_id` of our files: "SERA" (subagent-engine run archive).
APPLICATION_ID: Final = 0x53455241

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_HEADER_BYTES: Final = 100

_SCHEMA: Final = f"""
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES
    ('application', 'subagent-engine run archive'),
    ('format', '{ARCHIVE_FORMAT_VERSION}');
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    thread_id TEXT,
    node TEXT NOT NULL,
    metadata TEXT NOT NULL,
    attributes TEXT NOT NULL,
    ended_at REAL,
    outcome TEXT,
    format INTEGER NOT NULL
);
CREATE INDEX runs_live ON runs (node) WHERE outcome IS NULL;
CREATE TABLE entries (
    run_id TEXT NOT NULL,
    cursor INTEGER NOT NULL,
    kind TEXT NOT NULL,
    weight INTEGER NOT NULL,
    retained INTEGER NOT NULL,
    event TEXT NOT NULL,
    format INTEGER NOT NULL,
    PRIMARY KEY (run_id, cursor)
);
CREATE TABLE journals (
    run_id TEXT PRIMARY KEY,
    open_things TEXT NOT NULL
);
CREATE TABLE results (
    run_id TEXT NOT NULL,
    delegation_id TEXT NOT NULL,
    result TEXT NOT NULL,
    format INTEGER NOT NULL,
    UNIQUE (run_id, delegation_id)
);
CREATE TABLE audits (
    run_id TEXT NOT NULL,
    delegation_id TEXT NOT NULL,
    record TEXT NOT NULL,
    format INTEGER NOT NULL,
    UNIQUE (run_id, delegation_id)
);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {ARCHIVE_FORMAT_VERSION};
"""


class ArchiveOpenError(OSError):
    """The archive file cannot be opened as ours: not a database, another application's
    database, a newer format, or in use. The file was not modified. `path` names it."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class ArchiveInUseError(ArchiveOpenError):
    """Another opener (this process or another, `pid`) holds the archive."""

    def __init__(self, message: str, path: Path, pid: int | None) -> None:
        super().__init__(message, path)
        self.pid = pid


class ArchiveStorageError(StoreUnavailableError):
    """Reading or writing the archive failed (I/O error, disk full, data of an unknown
    format). What a failed write was to write is not kept. An `OSError`; as an
    `engine.StoreUnavailableError`, raised from a journal append it makes the engine end the
    run with a typed `store_unavailable` terminal (the archive buffers nothing beyond the group
    commit it is in)."""


class ArchiveLock:
    """An exclusive `flock` on `<path>.lock`, holding the owner's pid, until `release()`.
    The directory of `db_path` is created (mode 0o700) if missing."""

    def __init__(self, db_path: Path) -> None:
        db_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = Path(f"{db_path}.lock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder is not None else "another opener"
            raise ArchiveInUseError(
                f"run archive {db_path} is in use by {who} (lock {self.path})", db_path, holder
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None


def _check_header(path: Path, header: bytes) -> None:
    """Refuse a file that is not one of our archives of a format this version reads."""
    if len(header) < _HEADER_BYTES or not header.startswith(_SQLITE_MAGIC):
        raise ArchiveOpenError(f"{path} is not a run archive: not an SQLite database", path)
    user_version = int.from_bytes(header[60:64], "big")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id != APPLICATION_ID:
        raise ArchiveOpenError(
            f"{path} is not a run archive: an SQLite database of another application "
            f"(application_id {application_id:#x})",
            path,
        )
    if user_version > ARCHIVE_FORMAT_VERSION:
        raise ArchiveOpenError(
            f"{path} is a run archive of format {user_version}, newer than this version "
            f"reads ({ARCHIVE_FORMAT_VERSION})",
            path,
        )
    if user_version != ARCHIVE_FORMAT_VERSION:
        raise ArchiveOpenError(
            f"{path} is a run archive of unknown format {user_version} "
            f"(this version reads {ARCHIVE_FORMAT_VERSION})",
            path,
        )


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the archive at `path` (created if missing or empty), in WAL mode.

    Raises `ArchiveOpenError` for a file that is not ours; the file is then untouched.
    The connection may be used from any thread, one at a time (the caller serializes).
    """
    fresh = False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        with open(path, "rb") as existing:
            header = existing.read(_HEADER_BYTES)
        if header:
            _check_header(path, header)
        else:
            fresh = True
    else:
        os.close(fd)
        fresh = True
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise ArchiveOpenError(f"{path} cannot be opened: {exc}", path) from exc
    try:
        if fresh:
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
        else:
            row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if row is None or row[0] != str(ARCHIVE_FORMAT_VERSION):
                raise ArchiveOpenError(f"{path} is not a run archive: no format in meta", path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        conn.close()
        raise ArchiveOpenError(f"{path} is not a usable run archive: {exc}", path) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def close_quietly(conn: sqlite3.Connection) -> None:
    """Close a connection whose file may already be failing."""
    with contextlib.suppress(sqlite3.Error):
        conn.close()
