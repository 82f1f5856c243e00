"""Runs kept in Redis: `engine.RunArchive` on Redis Streams, for servers whose runs outlive the
process or are shared between nodes (the `redis` extra: coredis, which runs under Trio).

`open_redis_archive(url, node=..., namespace=...)` opens it. Each run's journal is a stream
whose entry ids are the journal's cursors (`<cursor>-0`), written a batch at a time by one Lua
script (the entries, the window's eviction, the journal's state and the audit records they
changed, atomically); records, results and audits are hashes beside it, and a sorted set per
node lists the live runs. Another process reading or continuing a run sees the same replay and
makes the same retention decisions. `RedisRunArchive.wait_entries` lets a viewer on another
node wait for new entries: all of an archive's waiters share one blocking XREAD on one
connection of its own.

The namespace carries a format marker: opening a namespace that holds other keys, or an archive
in a format this code does not know, raises `ArchiveOpenError` and writes nothing. Every write
also puts the marker back if it is missing (a Redis restarted empty under running nodes), and
nodes opening an empty namespace at once all take it. Every call
is bounded by a timeout; all failures are `OSError`s (`ArchiveError` and its subclasses), as
the `RunArchive` seam asks.

Redis slow or down: reads fail at once with `ArchiveUnavailableError`; journal appends (and
results, and a run's end) are sent again until Redis takes them, so an outage shorter than
`outage_budget` (and than what `max_buffer_bytes` lets wait) loses nothing and writes nothing
twice. A longer one raises `ArchiveUnavailableError`, an `engine.StoreUnavailableError`, and
the engine ends the run with a typed `store_unavailable` terminal. `statistics()` counts it.
"""

from adapters.redis_archive._archive import (
    OutageStatistics,
    RedisJournalStore,
    RedisRunArchive,
    open_redis_archive,
)
from adapters.redis_archive._errors import (
    ArchiveConflictError,
    ArchiveDataError,
    ArchiveError,
    ArchiveOpenError,
    ArchiveUnavailableError,
)
from adapters.redis_archive._layout import FORMAT_NAME

__all__ = [
    "FORMAT_NAME",
    "ArchiveConflictError",
    "ArchiveDataError",
    "ArchiveError",
    "ArchiveOpenError",
    "ArchiveUnavailableError",
    "OutageStatistics",
    "RedisJournalStore",
    "RedisRunArchive",
    "open_redis_archive",
]
