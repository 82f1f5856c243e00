"""Ending the runs a dead process left live: crash recovery and failover, from the archive.

A run whose process died (killed, crashed, a lost server node) stays live in its archive: no
terminal in its journal, delegations still open, remote tasks perhaps still running. Recovery
finds such runs (`RunArchive.live_runs`) and ends each one as the engine would have, from what
the archive kept alone:

1. it reads the run's whole replay to learn which delegations started and did not end (starts
   and terminals are kept for the run's whole retention, whatever fell out of the window);
2. it cancels each open delegation's remote task from the protocol ids the audit trail kept
   (`Target.cancel_remote`: A2A CancelTask, an AG-UI stop), bounded by the agent's
   `cancel_timeout`, and keeps the outcome (`RemoteCancel`) in the delegation's result;
3. it journals, after the run's newest cursor, one typed terminal per open delegation
   (`subagent.failed`, error `interrupted` or `node_lost`, the cancel outcome in its metadata),
   then the run's terminal (`run.failed` with the same code), and marks the run ended.

So every stream of the run ends with a terminal a resuming viewer reads, and no remote task
the run started is left running by us where its protocol can stop it. A run whose terminal was
journaled but not recorded as ended (the process died in between) is only marked ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio
from opentelemetry import context as otel_context
from opentelemetry import trace

from engine._archive import DelegationAudit, RunArchive, RunRecord
from engine._events import DelegationEvent, Kind
from engine._lanes import JournalEntry
from engine._registry import Registry
from engine._results import DelegationError, DelegationResult, RemoteCancel, Status
from engine._store import RetentionPolicy
from engine._targets import RemoteTaskRef
from engine._tracing import Tracing

__all__ = ["RecoveredDelegation", "RecoveredRun", "recover_run", "recover_runs"]

log = logging.getLogger(__name__)

#: Entries read from the archive at a time while looking for open delegations.
_READ_CHUNK = 1024
#: The longest a remote cancel may take when the agent is no longer registered.
_DEFAULT_CANCEL_TIMEOUT = 5.0


@attrs.frozen
class RecoveredDelegation:
    """A delegation recovery ended: its ids and what became of cancelling its remote task."""

    delegation_id: str
    agent_key: str | None
    remote_task_id: str | None
    remote_cancel: str


@attrs.frozen
class RecoveredRun:
    """A run recovery ended (`terminal_cursor`: where its run terminal is, `terminal`: its
    kind, `run.failed` unless the dead process had journaled another before it stopped)."""

    run_id: str
    code: str
    terminal_cursor: int
    delegations: tuple[RecoveredDelegation, ...] = ()
    terminal: str = Kind.RUN_FAILED


async def recover_runs(
    archive: RunArchive,
    registry: Registry,
    *,
    clock: Callable[[], float],
    reason: str,
    message: str,
    node: str | None = None,
    policy: RetentionPolicy | None = None,
    tracing: Tracing | None = None,
) -> list[RecoveredRun]:
    """End every live run of `node` in `archive` (None: this archive's own node), all at
    once. Returns what was ended; a run that cannot be read or written is logged and left
    live (a later start tries again)."""
    records = await archive.live_runs(archive.node if node is None else node)
    recovered: list[RecoveredRun] = []

    async def one(record: RunRecord) -> None:
        try:
            done = await recover_run(
                archive,
                registry,
                record,
                clock=clock,
                reason=reason,
                message=message,
                policy=policy,
                tracing=tracing,
            )
        except OSError as exc:
            log.error("run %s could not be recovered: %r", record.run_id, exc)
            return
        recovered.append(done)
        log.warning(
            "run %s was live when its process stopped: ended (%s) at cursor %d; remote cancels: %s",
            record.run_id,
            reason,
            done.terminal_cursor,
            ", ".join(f"{d.delegation_id}={d.remote_cancel}" for d in done.delegations)
            or "none needed",
        )

    async with trio.open_nursery() as nursery:
        for record in records:
            nursery.start_soon(one, record, name=f"recover {record.run_id}")
    recovered.sort(key=lambda done: done.run_id)
    return recovered


async def recover_run(
    archive: RunArchive,
    registry: Registry,
    record: RunRecord,
    *,
    clock: Callable[[], float],
    reason: str,
    message: str,
    policy: RetentionPolicy | None = None,
    tracing: Tracing | None = None,
) -> RecoveredRun:
    """End one live run of `archive` (see the module docstring). With `tracing`, a span
    `subagent.recovery` (a trace of its own) holds the remote cancels it sends."""
    tracing = tracing or Tracing()
    span = tracing.start(
        "subagent.recovery",
        parent=otel_context.Context(),  # not a child of whatever the caller traces
        attributes={"subagent.run_id": record.run_id, "subagent.recovery_reason": reason},
    )
    try:
        done = await _recover_run(
            archive,
            registry,
            record,
            clock=clock,
            reason=reason,
            message=message,
            policy=policy,
            tracing=tracing,
            span=span,
        )
    except BaseException as exc:
        if span.is_recording():
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        span.end()
    if span.is_recording():
        span.set_attribute("subagent.delegations", len(done.delegations))
    return done


async def _recover_run(
    archive: RunArchive,
    registry: Registry,
    record: RunRecord,
    *,
    clock: Callable[[], float],
    reason: str,
    message: str,
    policy: RetentionPolicy | None,
    tracing: Tracing,
    span: trace.Span,
) -> RecoveredRun:
    run_id = record.run_id
    store = archive.journal_store(run_id, policy or RetentionPolicy())
    head = await archive.head(run_id)
    opened: dict[str, DelegationEvent] = {}
    run_terminal: str | None = None
    after = 0
    while after < head:
        entries = await store.read_after(after, _READ_CHUNK)
        if not entries:
            break
        for entry in entries:
            event = entry.event
            delegation = event.delegation_id
            if event.nested_id is not None:
                continue
            if delegation and event.kind == Kind.STARTED:
                opened.setdefault(delegation, event)
            elif delegation and event.kind in Kind.DELEGATION_TERMINALS:
                opened.pop(delegation, None)
            elif not delegation and event.kind in Kind.RUN_TERMINALS:
                run_terminal = event.kind
        after = entries[-1].cursor
    if run_terminal is not None:
        await archive.close_run(run_id, run_terminal, clock())
        return RecoveredRun(run_id, reason, head, terminal=run_terminal)

    audits = {audit.delegation_id: audit for audit in await archive.audits(run_id)}
    outcomes: dict[str, str] = {}

    async def cancel(delegation_id: str, start: DelegationEvent) -> None:
        outcomes[delegation_id] = await _cancel_remote(
            registry, run_id, delegation_id, start, audits.get(delegation_id), tracing, span
        )

    async with trio.open_nursery() as nursery:
        for delegation_id, start in opened.items():
            nursery.start_soon(cancel, delegation_id, start)

    now = clock()
    events: list[DelegationEvent] = []
    results: list[DelegationResult] = []
    recovered: list[RecoveredDelegation] = []
    for delegation_id, start in opened.items():
        audit = audits.get(delegation_id)
        outcome = outcomes[delegation_id]
        error = DelegationError(
            code=reason,
            message=message,
            retryable=True,
            metadata={"remote_cancel": outcome},
        )
        task_id = start.remote_task_id or (audit.remote_task_id if audit else None)
        context_id = start.remote_context_id or (audit.remote_context_id if audit else None)
        events.append(
            start.derived(
                Kind.FAILED,
                time=now,
                remote_task_id=task_id,
                remote_context_id=context_id,
                status=Status.FAILED,
                error=error,
                synthesized=True,
            )
        )
        results.append(
            DelegationResult(
                delegation_id=delegation_id,
                agent=start.agent_key or "",
                remote_protocol=start.protocol or "",
                status=Status.FAILED,
                run_id=run_id,
                parent_tool_call_id=start.parent_tool_call_id,
                remote_task_id=task_id,
                remote_context_id=context_id,
                summary=message,
                error=error,
                remote_cancel=outcome,
                card_fingerprint=start.card_fingerprint
                or (audit.card_fingerprint if audit else None),
            )
        )
        recovered.append(RecoveredDelegation(delegation_id, start.agent_key, task_id, outcome))
    events.append(
        DelegationEvent(
            kind=Kind.RUN_FAILED,
            run_id=run_id,
            time=now,
            text=message,
            error=DelegationError(code=reason, message=message, retryable=True),
            synthesized=True,
        )
    )
    entries = [JournalEntry(event, head + index) for index, event in enumerate(events, 1)]
    # The terminals first: a store shared by several nodes refuses an append that does not
    # continue the journal, so of two nodes recovering the same run only one gets here.
    await store.append(entries)
    if results:
        await archive.record_results(run_id, results)
    await archive.close_run(run_id, Kind.RUN_FAILED, now)
    return RecoveredRun(run_id, reason, entries[-1].cursor, tuple(recovered))


async def _cancel_remote(
    registry: Registry,
    run_id: str,
    delegation_id: str,
    start: DelegationEvent,
    audit: DelegationAudit | None,
    tracing: Tracing,
    span: trace.Span,
) -> str:
    """Cancel the remote task of an open delegation from its journaled ids (bounded; never
    raises): the `RemoteCancel` outcome."""
    key = start.agent_key or (audit.agent_key if audit else None)
    task_id = (audit.remote_task_id if audit else None) or start.remote_task_id
    context_id = (audit.remote_context_id if audit else None) or start.remote_context_id
    if not key or key not in registry:
        # The host no longer registers the agent: nothing here knows where its remote is.
        return RemoteCancel.UNSUPPORTED if task_id else RemoteCancel.NOT_NEEDED
    spec = registry.lookup(key)
    ref = RemoteTaskRef(
        delegation_id=delegation_id,
        agent_key=key,
        run_id=run_id,
        remote_task_id=task_id,
        remote_context_id=context_id,
    )
    timeout = spec.policy.cancel_timeout or _DEFAULT_CANCEL_TIMEOUT
    outcome = RemoteCancel.PENDING
    attributes = {
        "subagent.delegation_id": delegation_id,
        "subagent.agent": key,
        "subagent.remote_task_id": task_id or "",
        "subagent.remote_context_id": context_id or "",
    }
    with tracing.remote_call(span, spec.protocol, "cancel", attributes) as call:
        with trio.move_on_after(timeout):
            try:
                outcome = await spec.target.cancel_remote(ref)
            except Exception as exc:
                log.warning(
                    "delegation %s: cancelling its remote task failed: %r", delegation_id, exc
                )
        call.set_attribute("subagent.remote_cancel", outcome)
    return outcome
