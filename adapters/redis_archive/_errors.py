"""The errors of the Redis run archive: all `OSError`s, as the `RunArchive` seam asks.

The engine treats an `OSError` from an archive like a failing journal store (logged, the run
goes on in memory), so every failure of the storage surfaces as one of these, never as a
coredis or socket exception. `ArchiveUnavailableError` is also an
`engine.StoreUnavailableError`: raised from a journal append, once the archive stopped riding
out the outage, it makes the engine end the run with a typed `store_unavailable` terminal.
"""

from __future__ import annotations

from engine import StoreUnavailableError

__all__ = [
    "ArchiveConflictError",
    "ArchiveDataError",
    "ArchiveError",
    "ArchiveOpenError",
    "ArchiveUnavailableError",
]


class ArchiveError(OSError):
    """The Redis run archive failed (see the subclasses for the failures told apart)."""


class ArchiveOpenError(ArchiveError):
    """The namespace holds data the archive must not touch: keys without our format marker, a
    foreign marker, or a format version this code does not know. Nothing was written."""


class ArchiveUnavailableError(ArchiveError, StoreUnavailableError):
    """Redis did not answer: connection refused or reset, or no answer within the timeout.
    From a write, it also means the write waited for Redis as long as the archive lets writes
    wait (`outage_budget`, `max_buffer_bytes` of `open_redis_archive`) and is not written."""


class ArchiveDataError(ArchiveError):
    """What Redis holds under the namespace is not what this archive writes (a malformed or
    foreign entry, record or result, or an entry of an unknown format version)."""


class ArchiveConflictError(ArchiveError):
    """A journal append does not continue the stored journal: another writer appended to the
    run, or the batch's cursors do not follow the stored head."""
