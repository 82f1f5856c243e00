"""A durable run archive in one SQLite file: runs that outlive the process.

`open_sqlite_archive(path, node=...)` opens (or creates) the file and yields a
`SqliteRunArchive`, an `engine.RunArchive` that answers like `engine.MemoryRunArchive`:
run records, each run's journal (a `JournalStore` per run following the store contract),
each delegation's latest result and the audit trail folded from the journal. Writes of many runs
are committed together (group commit); every SQLite call runs off the Trio thread.

The file is ours alone while open (a lock beside it); a file that is not a run archive, or of a
newer format, is refused with `ArchiveOpenError` and left untouched. Storage failures while in
use surface as `ArchiveStorageError`, an `OSError` and an `engine.StoreUnavailableError` (a run
whose journal cannot be written ends with a typed `store_unavailable` terminal). Only the
standard library's `sqlite3`.
"""

from adapters.sqlite_archive._archive import (
    ArchiveStatistics,
    SqliteJournalStore,
    SqliteRunArchive,
    open_sqlite_archive,
)
from adapters.sqlite_archive._file import (
    ArchiveInUseError,
    ArchiveOpenError,
    ArchiveStorageError,
)

__all__ = [
    "ArchiveInUseError",
    "ArchiveOpenError",
    "ArchiveStatistics",
    "ArchiveStorageError",
    "SqliteJournalStore",
    "SqliteRunArchive",
    "open_sqlite_archive",
]
