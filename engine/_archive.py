"""Runs that outlive the process: the run archive seam, its records and the audit fold.

A `RunArchive` keeps what a run leaves behind, beyond the process that ran it: its journal (one
`JournalStore` per run, following the store contract of `engine._store`), a `RunRecord` (ids,
owner, times, outcome, what the host keeps with it), each delegation's latest
`DelegationResult`, and one `DelegationAudit` per delegation (every protocol id, status, error
code, remote cancel outcome, times). The engine writes it (`Engine(archive=...)`); the bundled
server reads it to serve runs it no longer holds in memory; at start-up the engine ends the runs
a dead process left live (`engine._recovery`).

The audit trail is derived from the journal itself, so it can never disagree with what viewers
saw: `DelegationAudits` folds journal entries into audit records, one event at a time, and
`with_result` folds in the result the parent received. A store calls both in the same write as
the entries or result, so a crash leaves an audit trail exactly as current as the journal.

Archives implement the async methods below; the `MemoryRunArchive` here is the reference (and
what tests and embedders use when nothing must survive the process).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import attrs
import trio

from engine._events import DelegationEvent, Kind
from engine._journal import MemoryJournalStore
from engine._lanes import JournalEntry
from engine._results import DelegationResult, Status
from engine._store import JournalStore, RetentionPolicy

__all__ = [
    "ARCHIVE_FORMAT_VERSION",
    "DelegationAudit",
    "DelegationAudits",
    "MemoryRunArchive",
    "RunArchive",
    "RunRecord",
    "SharedRunArchive",
]

#: The version of what archives write (records, results, entries). A store writes it with what
#: it keeps and refuses to open data of a version it does not know.
ARCHIVE_FORMAT_VERSION: Final = 1

#: What a delegation terminal kind means as a result status.
_TERMINAL_STATUS: Final = {
    Kind.FINISHED: Status.COMPLETED,
    Kind.FAILED: Status.FAILED,
    Kind.CANCELLED: Status.CANCELLED,
}


@attrs.frozen(kw_only=True)
class RunRecord:
    """What an archive keeps of a run besides its journal.

    `node`: the process (server node) that owns the run while it is live. `outcome`: the run
    terminal kind once the run ended (None while live). `attributes`: what the host keeps with
    the run (the bundled server: its viewer-token digest, visibility mode, AG-UI run id); plain
    strings, never a secret in clear.
    """

    run_id: str
    started_at: float
    thread_id: str | None = None
    node: str = ""
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    attributes: Mapping[str, str] = attrs.field(factory=dict)
    ended_at: float | None = None
    outcome: str | None = None

    @property
    def live(self) -> bool:
        return self.outcome is None


@attrs.frozen(kw_only=True)
class DelegationAudit:
    """One delegation's audit record: who asked whom for what, under which protocol ids, and
    how it ended. `status` is `running` until a terminal; `remote_cancel` is what became of
    cancelling the remote task (`RemoteCancel`), if it was cancelled."""

    run_id: str
    delegation_id: str
    thread_id: str | None = None
    parent_tool_call_id: str | None = None
    agent_key: str | None = None
    protocol: str | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None
    card_fingerprint: str | None = None
    status: str = Status.RUNNING
    error_code: str | None = None
    remote_cancel: str | None = None
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def ended(self) -> bool:
        return self.status != Status.RUNNING


class DelegationAudits:
    """The audit records of one run, kept current by folding in its journal entries (`fold`)
    and the results its parent received (`with_result`). Sans-IO: a store feeds it what it
    writes and saves the records `fold` and `with_result` say changed."""

    __slots__ = ("records", "run_id", "thread_id")

    def __init__(
        self,
        run_id: str,
        thread_id: str | None = None,
        records: Iterable[DelegationAudit] = (),
    ) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.records: dict[str, DelegationAudit] = {r.delegation_id: r for r in records}

    def fold(self, entries: Sequence[JournalEntry]) -> list[DelegationAudit]:
        """Fold a batch of journal entries in; returns the records it changed (each once)."""
        changed: dict[str, DelegationAudit] = {}
        for entry in entries:
            record = self._fold_event(entry.event)
            if record is not None:
                changed[record.delegation_id] = record
        return list(changed.values())

    def _fold_event(self, event: DelegationEvent) -> DelegationAudit | None:
        delegation_id = event.delegation_id
        if not delegation_id or event.nested_id is not None:
            return None
        old = self.records.get(delegation_id)
        record = old or DelegationAudit(
            run_id=self.run_id,
            delegation_id=delegation_id,
            thread_id=self.thread_id,
            started_at=event.time or None,
        )
        updates: dict[str, Any] = {}
        for name in (
            "parent_tool_call_id",
            "agent_key",
            "protocol",
            "remote_task_id",
            "remote_context_id",
            "card_fingerprint",
        ):
            value = getattr(event, name)
            if isinstance(value, str) and value and getattr(record, name) is None:
                updates[name] = value
        if record.started_at is None and event.time:
            updates["started_at"] = event.time
        status = _TERMINAL_STATUS.get(event.kind)
        if status is not None:
            # The result (saved before its terminal) may have set the status already.
            if record.ended_at is None and event.time:
                updates["ended_at"] = event.time
            if not record.ended:
                updates["status"] = status
                if event.error is not None:
                    updates["error_code"] = event.error.code
        if updates:
            record = attrs.evolve(record, **updates)
        elif old is not None:
            return None
        self.records[delegation_id] = record
        return record

    def with_result(self, result: DelegationResult) -> DelegationAudit:
        """Fold in the result the parent received (the authority on status, error code and
        remote cancel); returns the record."""
        record = self.records.get(result.delegation_id) or DelegationAudit(
            run_id=self.run_id, delegation_id=result.delegation_id, thread_id=self.thread_id
        )
        updates: dict[str, Any] = {}
        for name in (
            "parent_tool_call_id",
            "remote_task_id",
            "remote_context_id",
            "card_fingerprint",
        ):
            value = getattr(result, name)
            if value and getattr(record, name) is None:
                updates[name] = value
        if record.agent_key is None:
            updates["agent_key"] = result.agent
        if record.protocol is None:
            updates["protocol"] = result.remote_protocol
        if result.status != Status.RUNNING:
            updates["status"] = result.status
            updates["error_code"] = result.error.code if result.error is not None else None
        if result.remote_cancel is not None:
            updates["remote_cancel"] = result.remote_cancel
        record = attrs.evolve(record, **updates)
        self.records[result.delegation_id] = record
        return record

    def open(self) -> list[DelegationAudit]:
        """The delegations that have not ended, in start order."""
        return [record for record in self.records.values() if not record.ended]


class RunArchive(Protocol):
    """Where runs are kept beyond the process. See the module docstring.

    Writes come from the engine: `open_run` once before the run's first entry, then the journal
    through `journal_store(run_id, policy)` (whose `append` also folds the audit trail in),
    `record_results` as delegations report, `close_run` once the run's terminal is journaled.
    Reads serve viewers and recovery. Every method may raise `OSError` (or a subclass) when the
    storage fails; the engine treats a failing archive like a failing journal store.
    """

    node: str
    """This process's name among the nodes sharing the archive ("" for a single node)."""

    def journal_store(self, run_id: str, policy: RetentionPolicy) -> JournalStore:
        """The journal store of `run_id` (new or archived), following `policy`."""
        ...

    async def open_run(self, record: RunRecord) -> None:
        """Record a new live run (before its first journal entry)."""
        ...

    async def record_results(self, run_id: str, results: Sequence[DelegationResult]) -> None:
        """Keep each delegation's latest result (and fold it into the audit trail)."""
        ...

    async def close_run(self, run_id: str, outcome: str, ended_at: float) -> None:
        """Mark the run ended with `outcome` (its run terminal kind)."""
        ...

    async def run(self, run_id: str) -> RunRecord | None:
        """The record of `run_id`, or None if the archive holds no such run."""
        ...

    async def head(self, run_id: str) -> int:
        """The newest cursor of the run's journal (0: nothing journaled)."""
        ...

    async def results(self, run_id: str) -> list[DelegationResult]:
        """Each delegation's latest result, in start order."""
        ...

    async def audits(self, run_id: str) -> list[DelegationAudit]:
        """Each delegation's audit record, in start order."""
        ...

    async def live_runs(self, node: str | None = None) -> list[RunRecord]:
        """The runs not ended (of `node` only, unless None), oldest first."""
        ...

    async def wait_entries(self, run_id: str, after: int, within: float) -> bool:
        """Wait at most `within` seconds for the run's journal to hold an entry after `after`
        (a viewer of a run another process writes); True if it may. A single-node archive
        may just sleep and look."""
        ...


class SharedRunArchive(RunArchive, Protocol):
    """An archive several server nodes share (Redis): each node holds a lease while it lives,
    the survivors find the nodes whose lease lapsed, and nodes send each other commands (a
    viewer's stop or answer reaches the node that owns the run)."""

    lease_seconds: float
    """How long a node's lease lasts unless renewed (renewed every third of it)."""

    async def renew_lease(self) -> None:
        """Take or renew this node's lease (`lease_seconds` from now)."""
        ...

    async def drop_lease(self) -> None:
        """Give the lease up at once (a clean shutdown: survivors need not wait it out)."""
        ...

    async def lost_nodes(self) -> list[str]:
        """The nodes other than this one that own live runs and hold no lease."""
        ...

    async def claim_node(self, node: str, hold: float) -> bool:
        """Take the exclusive right to end a lost node's runs; False if another node has it.
        The claim lasts at least `hold` seconds (long enough for the whole recovery: no other
        node starts it again meanwhile), then expires (a claimer that died blocks no one)."""
        ...

    async def send_command(self, node: str, command: Mapping[str, Any]) -> None:
        """Queue a JSON-able command for `node` (bounded: old commands are dropped first)."""
        ...

    async def next_commands(self, within: float) -> list[dict[str, Any]]:
        """This node's queued commands, oldest first, waiting at most `within` seconds for
        one; each is delivered once."""
        ...


class MemoryRunArchive:
    """The reference `RunArchive`, in memory: what tests and embedders use when nothing has to
    survive the process (and what a durable archive must answer like)."""

    def __init__(self, node: str = "") -> None:
        self.node = node
        self._records: dict[str, RunRecord] = {}
        self._stores: dict[str, MemoryJournalStore] = {}
        self._results: dict[str, dict[str, DelegationResult]] = {}
        self._audits: dict[str, DelegationAudits] = {}
        self._heads: dict[str, int] = {}

    def journal_store(self, run_id: str, policy: RetentionPolicy) -> JournalStore:
        store = self._stores.get(run_id)
        if store is None:
            store = self._stores[run_id] = _AuditedMemoryStore(self, run_id, policy)
        return store

    def _audit(self, run_id: str) -> DelegationAudits:
        audits = self._audits.get(run_id)
        if audits is None:
            record = self._records.get(run_id)
            audits = DelegationAudits(run_id, record.thread_id if record else None)
            self._audits[run_id] = audits
        return audits

    async def open_run(self, record: RunRecord) -> None:
        if record.run_id in self._records:
            raise ValueError(f"run {record.run_id!r} is already archived")
        self._records[record.run_id] = record

    async def record_results(self, run_id: str, results: Sequence[DelegationResult]) -> None:
        kept = self._results.setdefault(run_id, {})
        audits = self._audit(run_id)
        for result in results:
            kept[result.delegation_id] = result
            audits.with_result(result)

    async def close_run(self, run_id: str, outcome: str, ended_at: float) -> None:
        record = self._records.get(run_id)
        if record is not None:
            self._records[run_id] = attrs.evolve(record, outcome=outcome, ended_at=ended_at)

    async def run(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    async def head(self, run_id: str) -> int:
        return self._heads.get(run_id, 0)

    async def results(self, run_id: str) -> list[DelegationResult]:
        return list(self._results.get(run_id, {}).values())

    async def audits(self, run_id: str) -> list[DelegationAudit]:
        return list(self._audit(run_id).records.values())

    async def wait_entries(self, run_id: str, after: int, within: float) -> bool:
        if self._heads.get(run_id, 0) <= after:
            await trio.sleep(within)
        return self._heads.get(run_id, 0) > after

    async def live_runs(self, node: str | None = None) -> list[RunRecord]:
        return [
            record
            for record in self._records.values()
            if record.live and (node is None or record.node == node)
        ]


class _AuditedMemoryStore(MemoryJournalStore):
    def __init__(self, archive: MemoryRunArchive, run_id: str, policy: RetentionPolicy) -> None:
        super().__init__(
            run_id,
            max_events=policy.max_events,
            max_bytes=policy.max_bytes,
            max_retained_critical=policy.max_retained,
        )
        self._archive = archive

    def append_nowait(self, entries: Sequence[JournalEntry]) -> None:
        super().append_nowait(entries)
        if entries:
            self._archive._heads[self.run_id] = entries[-1].cursor
            self._archive._audit(self.run_id).fold(entries)
