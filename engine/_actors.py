"""The actor tree: `Engine` -> `RunActor` -> `DelegationActor`, supervised on Trio nurseries.

This module owns concurrency and lifetimes; the rules live elsewhere (`DelegationState` for a
delegation's lifecycle, `RunJournal` for the run's ordering, `LaneBuffer` for QoS).

- `Engine` owns the registry and its targets' lifetimes (each prepared when the engine opens,
  closed when it closes: see `engine._targets`), the limits, a nursery in which every run actor
  lives, and the recorded results of recent runs.
- `RunActor` (one per run) owns the run's journal, its mailbox (a `LaneBuffer` every producer
  sends into) and the single writer task that moves the mailbox into the journal, and a nursery
  of delegation actors. `Run` is the handle its opener uses.
- `DelegationActor` (one per delegation) drives one `TargetSession` through start, recovery,
  polling and input requests, feeding what it sees to its `DelegationState`. Its mailbox takes
  answers to input requests. It is supervised: whatever it raises becomes a `subagent.failed`
  event and a failed result; its run goes on.

Cancellation flows down the tree: cancelling a run cancels its delegations; a cancelled
delegation asks its remote to cancel in a shielded scope bounded by `policy.cancel_timeout` and
reports `cancel_pending` when the remote did not confirm in time. Every terminal event is
recorded as a result *before* it is journaled and journaled before `Run.delegate()` returns, so
a viewer that saw a terminal can read the result, and the parent's tool result never overtakes
its subagent's terminal. When a run's context exits, nothing it started is still running.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, Final

import attrs
import trio
from opentelemetry import context as otel_context
from opentelemetry import trace

from engine._archive import RunArchive, RunRecord
from engine._correlation import ParentToolCalls
from engine._delegation import DelegationIdentity, DelegationState
from engine._endpoint import RunEndpoint, RunEndpointError, RunEndpointProvider
from engine._events import DelegationEvent, Kind
from engine._journal import JournalStore, MemoryJournalStore, RunJournal, Subscription
from engine._lanes import JournalEntry, LaneBuffer
from engine._oplog import delegation_ended, delegation_started, run_ended, run_started
from engine._questions import AnswerSurface, Question, QuestionBook, QuestionOutcome
from engine._recovery import RecoveredRun, recover_runs
from engine._redact import Redactor, is_valid_unicode, valid_text, valid_value
from engine._registry import (
    AgentSpec,
    ContextPolicy,
    DelegationPolicy,
    DelegationRequest,
    EngineLimits,
    InputExpiry,
    InputRequiredMode,
    Registry,
)
from engine._results import (
    ArtifactRef,
    DelegationError,
    DelegationResult,
    ErrorCode,
    RemoteCancel,
    Status,
)
from engine._stats import EngineStatistics, EngineStats
from engine._store import RetentionPolicy, StoreUnavailableError
from engine._targets import (
    Answer,
    DelegationTask,
    Target,
    TargetPrepareError,
    TargetSession,
    TargetUpdate,
)
from engine._tracing import SPAN_KINDS, Tracing, parent_context

__all__ = ["DelegationActor", "DelegationHandle", "Engine", "Run", "RunActor", "open_run"]

_DEFAULT_POLICY: Final = DelegationPolicy()

log: Final = logging.getLogger("subagent_engine")

#: Upper bound on how long closing a run may take to journal its terminal events.
RUN_CLOSE_TIMEOUT: Final = 10.0


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


class Engine:
    """The process-level root of the actor tree. Use as an async context manager.

    Opening the engine prepares every registered target (`TargetPrepareError` if one cannot
    work as configured). Closing it cancels every run still open (and so every delegation, down
    to the remote tasks), then closes every target. Recorded results and journals of the last
    `limits.retained_closed_runs` closed runs stay readable through `Engine.journal()` and
    `Engine.results()`.
    """

    def __init__(
        self,
        registry: Registry | Iterable[AgentSpec] = (),
        *,
        limits: EngineLimits | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[str], str] = _new_id,
        store_factory: Callable[[str, EngineLimits], JournalStore] | None = None,
        endpoints: RunEndpointProvider | None = None,
        archive: RunArchive | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.registry = registry if isinstance(registry, Registry) else Registry(registry)
        #: Spans of runs, delegations and remote calls (`engine._tracing`), recorded through
        #: `tracer_provider` (an OpenTelemetry SDK's, or the global one); None: not traced.
        self.tracing = Tracing(tracer_provider)
        self.limits = limits or EngineLimits()
        self.clock = clock
        self.new_id = new_id
        self._store_factory = store_factory
        #: Where runs are kept beyond the process (`engine._archive`), if anywhere: each run's
        #: record, journal, results and audit trail. Opening the engine ends the runs a dead
        #: process left live in it (`engine._recovery`).
        self.archive = archive
        #: What opening the engine recovered from the archive (`engine._recovery`).
        self.recovered: list[RecoveredRun] = []
        self._reopened: OrderedDict[str, tuple[RunRecord, RunJournal]] = OrderedDict()
        #: Gives every run its tool endpoint (e.g. `adapters.mcp.DelegationEndpoint`), if set.
        self.endpoints = endpoints
        self._redactor = Redactor(self.registry.secrets())
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None
        self._runs: dict[str, RunActor] = {}
        self._closed_runs: OrderedDict[str, RunActor] = OrderedDict()
        self.active_delegations = 0
        #: Counters for a process's metrics (`engine._stats`; read them with `statistics()`).
        self.stats = EngineStats(spec.key for spec in self.registry)
        #: Delegation id -> what became of a remote cancel that was not confirmed in time:
        #: `retrying`, `confirmed_late` or `abandoned` (audit trail of the cleanup that still
        #: cancels a remote task after its run is gone).
        self.cancel_followups: dict[str, str] = {}
        self._follow_up_scopes: set[trio.CancelScope] = set()
        self._follow_up_done: dict[str, trio.Event] = {}
        #: (parent thread id, agent key) -> remote context id, for sticky_per_parent_thread_agent.
        self._thread_contexts: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def __aenter__(self) -> Engine:
        """Prepare every registered target (see `engine._targets`), then open the engine.
        Raises `TargetPrepareError`, with every target closed again, when one cannot work as
        configured; a target whose remote is only unreachable does not hold the engine back."""
        try:
            await self._prepare_targets()
            if self.archive is not None:
                self.recovered = await recover_runs(
                    self.archive,
                    self.registry,
                    clock=self.clock,
                    policy=self.retention_policy,
                    reason=ErrorCode.INTERRUPTED,
                    message="The process serving this run stopped before the run ended.",
                    tracing=self.tracing,
                )
                self.stats.recovered(self.recovered)
        except BaseException:
            await self._close_targets()
            raise
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._nursery is not None
        for actor in list(self._runs.values()):
            actor.request_close(Kind.RUN_CANCELLED, "The engine was closed.")
        # Follow-up cancels end with the engine (recorded as abandoned); they never hold it open.
        for scope in list(self._follow_up_scopes):
            scope.cancel()
        try:
            await self._nursery_cm.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The body's own exception, wrapped by the nursery: give it back unwrapped.
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                return False
            raise
        finally:
            self._nursery = None
            await self._close_targets()
        return False

    def _targets(self) -> dict[int, tuple[str, Target]]:
        """Each registered target once (one object may serve several keys), by identity:
        targets need not be hashable."""
        targets: dict[int, tuple[str, Target]] = {}
        for spec in self.registry:
            targets.setdefault(id(spec.target), (spec.key, spec.target))
        return targets

    async def _prepare_targets(self) -> None:
        """Prepare every target at once, bounded by `limits.prepare_timeout`; collect the ones
        that cannot work as configured. Retryable errors and the timeout only log: the
        delegation prepares again (its failure, if any, is then the delegation's result)."""
        refused: dict[str, DelegationError] = {}

        async def prepare(key: str, target: Target) -> None:
            try:
                await target.prepare()
            except DelegationError as error:
                if error.retryable:
                    log.warning(
                        "agent %s is not ready yet (%s); it is prepared again before each "
                        "delegation",
                        key,
                        error,
                    )
                else:
                    refused[key] = error
            except Exception as exc:
                refused[key] = DelegationError(
                    code=ErrorCode.INTERNAL_ERROR,
                    message=self._redactor.text(
                        f"Preparing the target raised {type(exc).__name__}: {exc}"[:2000]
                    ),
                    retryable=False,
                    metadata={"exception": type(exc).__name__},
                )

        with trio.move_on_after(self.limits.prepare_timeout) as deadline:
            async with trio.open_nursery() as nursery:
                for key, target in self._targets().values():
                    nursery.start_soon(prepare, key, target, name=f"prepare {key}")
        if deadline.cancelled_caught:
            log.warning(
                "some agents were not ready within %g s; they are prepared again before each "
                "delegation",
                self.limits.prepare_timeout,
            )
        if refused:
            raise TargetPrepareError({key: refused[key] for key in sorted(refused)})

    async def _close_targets(self) -> None:
        """Close every target, shielded (whatever ended the engine) and bounded together by
        `RUN_CLOSE_TIMEOUT`; a target that fails to close is logged, never raised."""

        async def close(key: str, target: Target) -> None:
            try:
                await target.aclose()
            except Exception as exc:
                log.warning("agent %s: closing its target failed: %r", key, exc)

        with trio.CancelScope(shield=True), trio.move_on_after(RUN_CLOSE_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for key, target in self._targets().values():
                    nursery.start_soon(close, key, target, name=f"close {key}")

    def _make_store(self, run_id: str) -> JournalStore:
        if self._store_factory is not None:
            return self._store_factory(run_id, self.limits)
        if self.archive is not None:
            return self.archive.journal_store(run_id, self.retention_policy)
        return MemoryJournalStore(
            run_id,
            max_events=self.limits.replay_window_events,
            max_bytes=self.limits.replay_window_bytes,
        )

    @property
    def retention_policy(self) -> RetentionPolicy:
        """The replay window of every run's journal (`EngineLimits.replay_window_*`)."""
        return RetentionPolicy(
            max_events=self.limits.replay_window_events,
            max_bytes=self.limits.replay_window_bytes,
        )

    @asynccontextmanager
    async def open_run(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        attributes: Mapping[str, str] | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> AsyncIterator[Run]:
        """Open a run; yields its `Run` handle.

        When the engine traces (`tracer_provider`), the run's span continues the trace a W3C
        `traceparent` (and `tracestate`) names, e.g. the headers of the request that asked for
        the run; without one (or one that does not parse), the caller's current OpenTelemetry
        span, if any, is its parent.

        Leaving the block ends the run: delegations still running are cancelled (their remote
        tasks too), the run's terminal event is journaled (`run.finished`, or `run.failed` if the
        block raised, or `run.cancelled` after `Run.cancel()` or outside cancellation), and
        every task the run started has exited before this returns.
        """
        if self._nursery is None:
            raise RuntimeError("open the Engine (async with Engine(...)) before opening runs")
        run_id = run_id or self.new_id("run")
        if run_id in self._runs or run_id in self._closed_runs:
            raise ValueError(f"run id {run_id!r} is already in use")
        if self.archive is not None:
            if await self.archive.run(run_id) is not None:
                raise ValueError(f"run id {run_id!r} is already in use")
            await self.archive.open_run(
                RunRecord(
                    run_id=run_id,
                    started_at=self.clock(),
                    thread_id=thread_id,
                    node=self.archive.node,
                    metadata=dict(metadata or {}),
                    attributes=dict(attributes or {}),
                )
            )
        actor = RunActor(self, run_id, metadata or {}, thread_id=thread_id)
        if self.tracing.enabled:
            remote = parent_context(traceparent, tracestate)
            actor.trace_parent = remote if remote is not None else otel_context.get_current()
            actor.trace_remote = remote is not None
        self._runs[run_id] = actor
        await self._nursery.start(actor.run)
        if self.endpoints is not None:
            await self._open_endpoint(actor, self.endpoints)
        outcome = Kind.RUN_FINISHED
        reason = ""
        try:
            with trio.CancelScope() as actor.body_scope:
                yield actor.handle
            if actor.body_scope.cancelled_caught:
                outcome, reason = Kind.RUN_CANCELLED, actor.cancel_reason
        except trio.Cancelled:
            outcome, reason = Kind.RUN_CANCELLED, "The run's caller was cancelled."
            raise
        except BaseException as exc:
            reason = self._redactor.text(f"{type(exc).__name__}: {exc}"[:2000])
            outcome = Kind.RUN_FAILED
            raise
        finally:
            with trio.CancelScope(shield=True):
                if actor.endpoint is not None and self.endpoints is not None:
                    await self._close_endpoint(actor, self.endpoints)
                actor.request_close(outcome, reason)
                await actor.closed.wait()

    async def _open_endpoint(self, actor: RunActor, endpoints: RunEndpointProvider) -> None:
        """Give the run its endpoint, or fail the run (already journaled as started) with the
        reason before anyone could hand a parent agent a configuration that does not work."""
        try:
            actor.endpoint = await endpoints.open_endpoint(actor.handle)
        except BaseException as exc:
            reason = self._redactor.text(
                f"The run could not get its tool endpoint: {type(exc).__name__}: {exc}"[:2000]
            )
            actor.request_close(Kind.RUN_FAILED, reason)
            with trio.CancelScope(shield=True):
                await actor.closed.wait()
            if isinstance(exc, Exception):
                raise RunEndpointError(reason) from exc
            raise

    async def _close_endpoint(self, actor: RunActor, endpoints: RunEndpointProvider) -> None:
        try:
            with trio.move_on_after(RUN_CLOSE_TIMEOUT):
                await endpoints.close_endpoint(actor.run_id)
        except Exception as exc:
            log.warning("run %s: closing its endpoint failed: %r", actor.run_id, exc)

    def _follow_up_cancel(
        self,
        delegation_id: str,
        session: TargetSession,
        policy: DelegationPolicy,
        span: trace.Span = trace.INVALID_SPAN,
        protocol: str = "",
    ) -> bool:
        """Keep cancelling a remote task whose cancel was not confirmed, after its delegation
        (and maybe its run) ended. Returns False if the engine cannot take it (closing, or the
        policy says not to); the caller then closes the session itself."""
        if self._nursery is None or policy.cancel_retry_window <= 0:
            return False
        self.cancel_followups[delegation_id] = "retrying"
        self._follow_up_done[delegation_id] = trio.Event()
        self._nursery.start_soon(
            self._retry_cancel,
            delegation_id,
            session,
            policy,
            span,
            protocol,
            name=f"cancel {delegation_id}",
        )
        return True

    async def _retry_cancel(
        self,
        delegation_id: str,
        session: TargetSession,
        policy: DelegationPolicy,
        span: trace.Span = trace.INVALID_SPAN,
        protocol: str = "",
    ) -> None:
        outcome = "abandoned"
        scope = trio.CancelScope()
        self._follow_up_scopes.add(scope)
        try:
            with scope, trio.move_on_after(policy.cancel_retry_window):
                while True:
                    await trio.sleep(policy.cancel_timeout)
                    with (
                        self.tracing.remote_call(
                            span, protocol, "cancel", {"subagent.delegation_id": delegation_id}
                        ) as call,
                        trio.move_on_after(policy.cancel_timeout),
                    ):
                        try:
                            if await session.cancel():
                                outcome = "confirmed_late"
                                call.set_attribute("subagent.cancel_confirmed", True)
                                break
                        except Exception as exc:
                            log.debug("cancel retry for %s failed: %r", delegation_id, exc)
        finally:
            self._follow_up_scopes.discard(scope)
            self.cancel_followups[delegation_id] = outcome
            self._follow_up_done.pop(delegation_id, trio.Event()).set()
            log.log(
                logging.INFO if outcome == "confirmed_late" else logging.WARNING,
                "remote cancel of delegation %s: %s",
                delegation_id,
                outcome,
            )
            with trio.CancelScope(shield=True), trio.move_on_after(policy.cancel_timeout):
                try:
                    await session.aclose()
                except Exception:
                    pass

    async def wait_cancel_followup(self, delegation_id: str) -> str:
        """Wait until the follow-up of an unconfirmed cancel ended; returns its outcome."""
        done = self._follow_up_done.get(delegation_id)
        if done is not None:
            await done.wait()
        return self.cancel_followups.get(delegation_id, "none")

    def _retire(self, actor: RunActor) -> None:
        self._runs.pop(actor.run_id, None)
        if self.limits.retained_closed_runs:
            self._closed_runs[actor.run_id] = actor
            while len(self._closed_runs) > self.limits.retained_closed_runs:
                _, evicted = self._closed_runs.popitem(last=False)
                self.stats.journal_evicted(evicted.journal)
        else:
            self.stats.journal_evicted(actor.journal)
        self.stats.run_retired(actor.journal)
        self.stats.store_errors += actor.store_errors

    def journal(self, run_id: str) -> RunJournal | None:
        """The journal of an open or recently closed run (for viewers that reconnect)."""
        actor = self._runs.get(run_id) or self._closed_runs.get(run_id)
        return actor.journal if actor is not None else None

    async def find_run(self, run_id: str) -> tuple[RunRecord | None, RunJournal] | None:
        """The journal of any run this engine can show: open or recently closed here (record
        None), else archived (its record and a read-only journal over what the archive kept).
        None: no such run. Raises `OSError` when the archive cannot be read."""
        journal = self.journal(run_id)
        if journal is not None:
            return None, journal
        cached = self._reopened.get(run_id)
        if cached is not None:
            self._reopened.move_to_end(run_id)
            return cached
        if self.archive is None:
            return None
        record = await self.archive.run(run_id)
        if record is None:
            return None
        head = await self.archive.head(run_id)
        reopened = RunJournal.reopened(
            run_id,
            self.archive.journal_store(run_id, self.retention_policy),
            head,
            subscriber_buffer_bytes=self.limits.subscriber_buffer_bytes,
        )
        if record.live:
            return record, reopened  # live on another node: read fresh each time
        self._reopened[run_id] = (record, reopened)
        while len(self._reopened) > max(self.limits.retained_closed_runs, 1):
            _, (_, evicted) = self._reopened.popitem(last=False)
            self.stats.journal_evicted(evicted)
        return record, reopened

    async def find_results(self, run_id: str) -> list[DelegationResult]:
        """Every delegation of a run this engine can show (see `find_run`), in start order."""
        actor = self._runs.get(run_id) or self._closed_runs.get(run_id)
        if actor is not None:
            return actor.delegations()
        if self.archive is None:
            return []
        return await self.archive.results(run_id)

    def results(self, run_id: str) -> list[DelegationResult]:
        """Every delegation of an open or recently closed run, in start order."""
        actor = self._runs.get(run_id) or self._closed_runs.get(run_id)
        return actor.delegations() if actor is not None else []

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    def statistics(self) -> EngineStatistics:
        """The engine's counters now, with what its runs' journals and viewers hold summed
        (`engine._stats`): for a metrics scrape, not the hot path."""
        reading = self.stats.snapshot(
            runs_active=len(self._runs),
            delegations_active=self.active_delegations,
            open_journals=[actor.journal for actor in self._runs.values()],
            closed_journals=[
                *(actor.journal for actor in self._closed_runs.values()),
                *(journal for _, journal in self._reopened.values()),
            ],
        )
        live_errors = sum(actor.store_errors for actor in self._runs.values())
        return attrs.evolve(reading, store_errors=reading.store_errors + live_errors)


@asynccontextmanager
async def open_run(
    agents: Registry | Iterable[AgentSpec] = (),
    *,
    limits: EngineLimits | None = None,
    run_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
    endpoints: RunEndpointProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    traceparent: str | None = None,
) -> AsyncIterator[Run]:
    """Open a private `Engine` for one run and yield the run's handle (the embedding shortcut).
    With `tracer_provider` the run is traced (`Engine`), continuing `traceparent` if given.

    Sticky remote contexts across runs (`sticky_per_parent_thread_agent`) need a long-lived
    `Engine`; with this shortcut each run has its own.

    ```
    async with engine.open_run(agents) as run:
        result = await run.delegate(DelegationRequest(agent="research", objective="..."))
    ```
    """
    async with (
        Engine(
            agents,
            limits=limits,
            clock=clock,
            endpoints=endpoints,
            tracer_provider=tracer_provider,
        ) as eng,
        eng.open_run(run_id=run_id, metadata=metadata, traceparent=traceparent) as run,
    ):
        yield run


class RunActor:
    """One run: its journal, its mailbox and writer, and its delegation actors."""

    def __init__(
        self,
        engine: Engine,
        run_id: str,
        metadata: Mapping[str, Any],
        *,
        thread_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.run_id = run_id
        self.thread_id = thread_id
        self._run_contexts: dict[str, str] = {}  # agent key -> remote context id
        self.metadata = dict(metadata)
        limits = engine.limits
        self.journal = RunJournal(
            run_id,
            store=engine._make_store(run_id),
            subscriber_buffer_bytes=limits.subscriber_buffer_bytes,
        )
        self.mailbox = LaneBuffer(limits.run_mailbox_bytes)
        self.handle = Run(self)
        self.endpoint: RunEndpoint | None = None
        self.parent_calls = ParentToolCalls()
        self.parent_calls_changed = trio.Event()
        self.parent_call_ids = "model"
        self.body_scope: trio.CancelScope | None = None
        self.cancel_reason = ""
        self.closed = trio.Event()
        self._close_requested = trio.Event()
        self._outcome = Kind.RUN_FINISHED
        self._outcome_reason = ""
        self._outcome_code = ErrorCode.INTERNAL_ERROR  # the error code of a run.failed
        self._ended = False  # a run terminal was published (by finish()/fail() or closing)
        self._work: trio.Nursery | None = None
        self._active: dict[str, DelegationActor] = {}
        #: Ended delegations that kept artifact contents (`Run.artifact`), for the run's life.
        self._ended_artifacts: dict[str, DelegationState] = {}
        #: The closed questions of each ended delegation that asked (a bounded number each):
        #: a late answer is told how the question it names closed and who answered.
        self._ended_questions: dict[str, QuestionBook] = {}
        self._results: OrderedDict[str, DelegationResult] = OrderedDict()
        self._sequence = itertools.count(1)
        self.store_errors = 0
        self._unsaved_results: dict[str, DelegationResult] = {}
        #: The run's span (`engine._tracing`; invalid when the engine does not trace), and the
        #: context it continues (a remote's `traceparent`, or the opener's current span).
        self.span: trace.Span = trace.INVALID_SPAN
        self.trace_parent: otel_context.Context | None = None
        self.trace_remote = False

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started: float | None = None  # when the run.start line went out
        try:
            async with trio.open_nursery() as infra:
                infra.start_soon(self._write_journal)
                try:
                    await self.publish(self._event(Kind.RUN_STARTED, raw=self.metadata or None))
                    started = trio.current_time()
                    self._start_span()
                    run_started(self.run_id, self.thread_id)
                    self.engine.stats.runs_started += 1
                    async with trio.open_nursery() as work:
                        self._work = work
                        task_status.started()
                        await self._close_requested.wait()
                        self._work = None
                        for actor in list(self._active.values()):
                            actor.cancel(self._outcome_reason or "The run was closed.")
                finally:
                    self._work = None
                    with trio.CancelScope(shield=True) as scope:
                        scope.deadline = trio.current_time() + RUN_CLOSE_TIMEOUT
                        await self._end(self._outcome, self._outcome_reason)
                    self.mailbox.close()
        finally:
            archive = self.engine.archive
            if archive is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(RUN_CLOSE_TIMEOUT):
                    await self._save_results()
                    try:
                        await archive.close_run(self.run_id, self._outcome, self.engine.clock())
                    except OSError as exc:
                        self.store_errors += 1
                        log.error(
                            "run %s: the archive could not record its end: %r", self.run_id, exc
                        )
            if started is not None:
                kind = self._outcome  # the end journaled (`_end`), which nothing changes after
                code = self._outcome_code if kind == Kind.RUN_FAILED else None
                duration = trio.current_time() - started
                run_ended(
                    self.run_id, kind.removeprefix("run."), duration, len(self._results), code
                )
                self.engine.stats.run_ended(kind.removeprefix("run."))
                self._end_span(kind, code)
            self.closed.set()
            self.engine._retire(self)

    def _start_span(self) -> None:
        tracing = self.engine.tracing
        if not tracing.enabled:
            return
        self.span = tracing.start(
            "subagent.run",
            parent=self.trace_parent,
            kind=trace.SpanKind.SERVER if self.trace_remote else trace.SpanKind.INTERNAL,
            attributes={"subagent.run_id": self.run_id, "subagent.thread_id": self.thread_id},
        )

    def _end_span(self, kind: str, code: str | None) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attribute("subagent.outcome", kind.removeprefix("run."))
        self.span.set_attribute("subagent.delegations", len(self._results))
        if code is not None:
            self.span.set_attribute("subagent.error_code", code)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, code))
        self.span.end()

    def request_close(
        self, outcome: str, reason: str = "", code: str = ErrorCode.INTERNAL_ERROR
    ) -> None:
        """Ask the run to end with `outcome` (a run terminal kind; `code`: the error code of a
        `run.failed`). Idempotent; first wins."""
        if not self._close_requested.is_set():
            if not self._ended:  # a run ended by `Run.finish` / `Run.fail` keeps that outcome
                self._outcome, self._outcome_reason = outcome, reason
                self._outcome_code = code
            self._close_requested.set()

    async def _end(self, kind: str, reason: str) -> None:
        if self._ended:
            await self.mailbox.flush()
            return
        self._ended = True
        error = None
        if kind == Kind.RUN_FAILED:
            error = DelegationError(code=self._outcome_code, message=reason or "run failed")
        await self.publish(self._event(kind, text=reason or None, error=error), flush=True)

    async def _write_journal(self) -> None:
        # Shielded: the writer must outlive cancellation so every actor's shielded cleanup can
        # still journal its terminal. It ends when the mailbox is closed and drained.
        with trio.CancelScope(shield=True):
            while True:
                try:
                    batch = await self.mailbox.receive_batch()
                except trio.EndOfChannel:
                    return
                try:
                    # Results first: a delegation's result is kept before its terminal is.
                    await self._save_results()
                    if await self.journal.append_entries(batch):
                        self.engine.stats.store_appends += 1  # one store write
                except StoreUnavailableError as exc:
                    # Kept from nobody but live viewers from here on: end the run, typed.
                    self.store_errors += 1
                    log.error("run %s: the journal store is unavailable: %r", self.run_id, exc)
                    self.request_close(
                        Kind.RUN_FAILED,
                        "The run's store could not be written; the run was stopped so that "
                        "nothing more is lost.",
                        ErrorCode.STORE_UNAVAILABLE,
                    )
                    if self.body_scope is not None:
                        self.body_scope.cancel()  # the parent stops too
                except Exception as exc:
                    # A failing store must not take the engine down with it; what its readers
                    # miss shows up as a replay gap.
                    self.store_errors += 1
                    log.error("run %s: journal store failed: %r", self.run_id, exc)
                self.mailbox.acknowledge()

    async def _save_results(self) -> None:
        """Keep the results recorded since the last save in the archive (if any)."""
        archive = self.engine.archive
        if archive is None or not self._unsaved_results:
            return
        results = list(self._unsaved_results.values())
        self._unsaved_results.clear()
        try:
            await archive.record_results(self.run_id, results)
        except OSError as exc:
            self.store_errors += 1
            log.error("run %s: the archive could not keep results: %r", self.run_id, exc)

    # -- publishing ----------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> DelegationEvent:
        """One of the run's own events: a parent's payload or the run's lifecycle. Its text
        comes from a parent agent or a host, so it enters made valid Unicode (`engine._redact`);
        an ASCII string costs a flag check."""
        for value in fields.values():
            if not (value.__class__ is str and value.isascii()) and not is_valid_unicode(value):
                fields = {name: valid_value(item) for name, item in fields.items()}
                break
        return DelegationEvent(
            kind=valid_text(kind),
            run_id=self.run_id,
            sequence=next(self._sequence),
            time=self.engine.clock(),
            **fields,
        )

    async def publish(self, event: DelegationEvent, *, flush: bool = False) -> None:
        """Send one event to the run's mailbox (waits while it is full); with `flush`, also
        wait until it is journaled."""
        await self.mailbox.send(JournalEntry(event))
        if flush:
            await self.mailbox.flush()

    # -- delegations ---------------------------------------------------------------------

    def start_delegation(self, request: DelegationRequest) -> DelegationHandle:
        delegation_id = self.engine.new_id("del")
        engine = self.engine
        if request.parent_tool_call_id:
            self.parent_calls.claim(request.parent_tool_call_id)
        try:
            if self._work is None or self._ended:
                raise DelegationError(
                    code=ErrorCode.RUN_CLOSED, message="The run has ended; no new delegations."
                )
            spec = engine.registry.lookup(request.agent)
            if len(self._active) >= engine.limits.max_concurrent_per_run:
                raise DelegationError(
                    code=ErrorCode.CONCURRENCY_LIMIT,
                    message=(
                        f"This run already has {len(self._active)} delegations running "
                        f"(limit {engine.limits.max_concurrent_per_run}); wait for one to finish."
                    ),
                )
            if engine.active_delegations >= engine.limits.max_concurrent_global:
                raise DelegationError(
                    code=ErrorCode.CONCURRENCY_LIMIT,
                    message="The host is at its delegation limit; retry shortly.",
                )
        except DelegationError as error:
            return self._refuse(delegation_id, request, error)
        actor = DelegationActor(self, spec, request, delegation_id)
        if engine.tracing.enabled:  # started here: the asking tool call's scope is this task's
            actor.span = self._delegation_span(actor.identity)
        self._active[delegation_id] = actor
        engine.active_delegations += 1
        self._work.start_soon(actor.run, name=f"delegation {delegation_id} ({spec.key})")
        return DelegationHandle(actor.delegation_id, actor.done, self, actor)

    def _refuse(
        self, delegation_id: str, request: DelegationRequest, error: DelegationError
    ) -> DelegationHandle:
        """Record a delegation refused before any remote call, and show it failed."""
        spec = (
            self.engine.registry.lookup(request.agent)
            if request.agent in self.engine.registry
            else None
        )
        identity = DelegationIdentity(
            run_id=self.run_id,
            delegation_id=delegation_id,
            agent_key=request.agent[:64],
            agent_name=spec.name if spec else request.agent[:64],
            protocol=spec.protocol if spec else "none",
            parent_tool_call_id=request.parent_tool_call_id,
            model_tool_call_id=_model_call_id(request),
        )
        state = DelegationState(
            identity, spec.policy if spec else _DEFAULT_POLICY, clock=self.engine.clock
        )
        events = state.fail(error)
        assert state.result is not None
        self.record(state.result)
        delegation_started(
            self.run_id, delegation_id, identity.agent_key, request.parent_tool_call_id
        )
        delegation_ended(state.result, 0.0)
        self.engine.stats.delegation_ended(state.result)
        tracing = self.engine.tracing
        if tracing.enabled:
            tracing.end_delegation(self._delegation_span(identity), state.result)
        done = trio.Event()
        if not self._ended:
            for event in events:
                try:
                    self.mailbox.offer(JournalEntry(event), force=True)
                except trio.ClosedResourceError:
                    break
        done.set()
        return DelegationHandle(delegation_id, done, self, None)

    def _delegation_span(self, identity: DelegationIdentity) -> trace.Span:
        """A delegation's span: a child of the traced scope it was asked for in (a tool call of
        the run's endpoint, `Run.traced`), else of the run's span."""
        tracing = self.engine.tracing
        scope = tracing.current_scope()
        return tracing.start(
            f"subagent.delegation {identity.agent_key}",
            parent=scope if scope is not None else self.span,
            attributes={
                "subagent.run_id": identity.run_id,
                "subagent.delegation_id": identity.delegation_id,
                "subagent.agent": identity.agent_key,
                "subagent.protocol": identity.protocol,
                "subagent.parent_tool_call_id": identity.parent_tool_call_id,
                "subagent.model_tool_call_id": identity.model_tool_call_id,
            },
        )

    def record(self, result: DelegationResult) -> None:
        self._results[result.delegation_id] = result
        if self.engine.archive is not None:
            self._unsaved_results[result.delegation_id] = result

    def context_for(self, spec: AgentSpec) -> str | None:
        """The remote context a new delegation to `spec` continues, per its context policy."""
        policy = spec.policy.context_policy
        if policy == ContextPolicy.STICKY_PER_RUN_AGENT:
            return self._run_contexts.get(spec.key)
        if policy == ContextPolicy.STICKY_PER_PARENT_THREAD_AGENT and self.thread_id:
            return self.engine._thread_contexts.get((self.thread_id, spec.key))
        return None

    def remember_context(self, spec: AgentSpec, context_id: str | None) -> None:
        if not context_id:
            return
        policy = spec.policy.context_policy
        if policy == ContextPolicy.STICKY_PER_RUN_AGENT:
            self._run_contexts[spec.key] = context_id
        elif policy == ContextPolicy.STICKY_PER_PARENT_THREAD_AGENT and self.thread_id:
            contexts = self.engine._thread_contexts
            contexts[(self.thread_id, spec.key)] = context_id
            contexts.move_to_end((self.thread_id, spec.key))
            while len(contexts) > 10_000:
                contexts.popitem(last=False)

    def delegations(self) -> list[DelegationResult]:
        out = []
        for delegation_id, result in self._results.items():
            actor = self._active.get(delegation_id)
            out.append(
                actor.state.snapshot()
                if actor is not None and result.status == Status.RUNNING
                else result
            )
        return out

    def _delegation_ended(self, actor: DelegationActor) -> None:
        if self._active.pop(actor.delegation_id, None) is not None:
            self.engine.active_delegations -= 1
        if actor.state.artifact_contents:
            self._ended_artifacts[actor.delegation_id] = actor.state
        if actor.state.questions.last_closed is not None:
            self._ended_questions[actor.delegation_id] = actor.state.questions


@attrs.frozen
class _Decline:
    """A person declined to answer; `then` (an `InputExpiry`) says how the delegation ends."""

    then: str


class DelegationActor:
    """One delegation on one target, from start to exactly one terminal event."""

    def __init__(
        self, run: RunActor, spec: AgentSpec, request: DelegationRequest, delegation_id: str
    ) -> None:
        self.run_actor = run
        self.spec = spec
        self.request = request
        self.delegation_id = delegation_id
        self.policy = spec.policy
        self.timeout = self.policy.effective_timeout(request.timeout_seconds)
        self.identity = DelegationIdentity(
            run_id=run.run_id,
            delegation_id=delegation_id,
            agent_key=spec.key,
            agent_name=spec.name,
            protocol=spec.protocol,
            parent_tool_call_id=request.parent_tool_call_id,
            model_tool_call_id=_model_call_id(request),
        )
        self.state = DelegationState(
            self.identity,
            self.policy,
            clock=run.engine.clock,
            max_artifacts=request.max_artifacts,
            # Every configured secret, not only this agent's: a remote may echo another's.
            redactor=run.engine._redactor,
        )
        self.done = trio.Event()
        self._limit_cancelled = False
        self.scope = trio.CancelScope()
        self.cancel_reason = ""
        send, receive = trio.open_memory_channel[Answer | _Decline](1)
        self._answers_in, self._answers = send, receive
        self.nursery: trio.Nursery | None = None
        self._session: TargetSession | None = None
        self._session_scope: trio.CancelScope | None = None
        self._sent_task = False
        self._handed_over = False  # the engine took over an unconfirmed cancel
        self._failure: DelegationError | None = None
        self._started = 0.0  # trio.current_time() when the actor began
        #: The delegation's span (`engine._tracing`; invalid when the engine does not trace).
        self.span: trace.Span = trace.INVALID_SPAN
        run.record(self.state.snapshot())

    # -- the mailbox ---------------------------------------------------------------------

    def cancel(self, reason: str = "") -> None:
        """Cancel this delegation (and its remote task). Idempotent."""
        if not self.cancel_reason:
            self.cancel_reason = reason or "The delegation was cancelled."
        self.scope.cancel()

    def takes_answers(self) -> bool:
        """Whether this delegation waits for answers to its questions (policy `surface`)."""
        return (
            self.policy.input_required == InputRequiredMode.SURFACE
            and self.spec.target.capabilities.input
        )

    def answer(
        self,
        answer: Answer | _Decline,
        *,
        question_id: str | None = None,
        surface: str | None = None,
        answered_by: str | None = None,
    ) -> Question:
        """Take the first answer to the open question (synchronously: exactly one wins), or
        refuse it with a typed error; the actor passes it on to the remote."""
        state = self.state
        if not self.takes_answers() and state.questions.current is not None:
            raise DelegationError(
                code=ErrorCode.INVALID_INPUT,
                message=f"Delegation {self.delegation_id} does not wait for answers (its "
                f"agent's policy is {self.policy.input_required!r}).",
            )
        if isinstance(answer, _Decline):
            closed = state.take_answer(
                None,
                None,
                question_id=question_id,
                outcome=QuestionOutcome.DECLINED,
                surface=surface,
                answered_by=answered_by,
            )
        else:
            closed = state.take_answer(
                answer.text,
                answer.data,
                question_id=question_id,
                surface=surface,
                answered_by=answered_by,
            )
        # One open question at a time and each closes once: the slot is always free here.
        self._answers_in.send_nowait(answer)
        return closed

    # -- the actor's life ----------------------------------------------------------------

    async def run(self) -> None:
        timed_out = False
        self._started = trio.current_time()
        delegation_started(
            self.run_actor.run_id,
            self.delegation_id,
            self.spec.key,
            self.request.parent_tool_call_id,
        )
        try:
            with self.scope:
                try:
                    # The delegation's own nursery: whatever its session runs in the background
                    # (watchers, pollers, an in-process agent) lives and dies here.
                    async with trio.open_nursery() as nursery:
                        self.nursery = nursery
                        with trio.move_on_after(self.timeout) as deadline:
                            await self._execute()
                        timed_out = deadline.cancelled_caught
                        nursery.cancel_scope.cancel()
                except BaseException as exc:
                    failure = _failure_of(exc)
                    if failure is None:
                        raise
                    if failure.code == ErrorCode.INTERNAL_ERROR:
                        log.warning(
                            "delegation %s (%s) crashed: %s",
                            self.delegation_id,
                            self.spec.key,
                            (failure.metadata or {}).get("exception"),
                            exc_info=log.isEnabledFor(logging.DEBUG),
                        )
                    self._failure = failure
        finally:
            with trio.CancelScope(shield=True):
                await self._conclude(timed_out)

    async def _execute(self) -> None:
        target = self.spec.target
        await target.prepare()  # e.g. fetch and validate a remote agent card (cached by the target)
        caps = target.capabilities
        stream = caps.streaming and self.request.stream is not False
        if self.policy.require_streaming and not caps.streaming:
            raise DelegationError(
                code=ErrorCode.CAPABILITY_UNSUPPORTED,
                message=f"Agent {self.spec.key!r} cannot stream and its policy requires streaming.",
            )
        task = DelegationTask(
            run_id=self.identity.run_id,
            delegation_id=self.delegation_id,
            agent_key=self.spec.key,
            request=self.request,
            policy=self.policy,
            timeout=self.timeout,
            stream=stream,
            remote_context_id=self.run_actor.context_for(self.spec),
            metadata=self.run_actor.metadata,  # e.g. user_id, for targets that forward identity
        )
        assert self.nursery is not None
        session = self._session = target.open_session(task, self.nursery)
        if session.card_fingerprint:  # on results that fail before any update
            self.state.card_fingerprint = session.card_fingerprint
        card_name = session.agent_name
        if not self.spec.display_name and card_name and card_name.strip():
            # The remote's own name (its card) when the host named the agent by key only.
            name = valid_text(card_name.strip()[:200])
            self.identity = attrs.evolve(self.identity, agent_name=name)
            self.state.identity = self.identity
        self._sent_task = True
        await self._call(session.start)
        # A session may have fallen back from streaming to polling (policy permitting).
        stream = stream and session.streaming
        polls = 0
        recoveries = 0
        state = self.state
        while not state.terminal:
            if state.awaiting_input is not None:
                await self._handle_input()
                continue
            if stream and caps.resubscribe and recoveries < self.policy.stream_recovery_attempts:
                recoveries += 1
                await self._publish(state.note_status("stream_interrupted"))
                try:
                    await self._call(self._session.resubscribe)
                    continue
                except DelegationError:
                    pass  # fall through to a poll before giving up
            if caps.poll and polls < self.policy.max_polls:
                if not stream:
                    await trio.sleep(self.policy.poll_interval)
                polls += 1
                await self._call(self._session.poll)
                if stream and not state.terminal and state.awaiting_input is None:
                    raise DelegationError(
                        code=ErrorCode.STREAM_INTERRUPTED,
                        message="The remote stream ended before the task finished and could not "
                        "be recovered.",
                        remote_status=state.remote_status,
                    )
                continue
            if caps.poll:
                raise DelegationError(
                    code=ErrorCode.REMOTE_TIMEOUT,
                    message=f"The remote task did not finish within {polls} polls.",
                    remote_status=state.remote_status,
                )
            raise DelegationError(
                code=ErrorCode.STREAM_INTERRUPTED,
                message="The remote stream ended before the task finished.",
                remote_status=state.remote_status,
            )

    async def _call(self, method: Callable[..., Any], *args: Any) -> None:
        # Each session call runs in its own scope, cancelled as soon as the state machine has
        # what it waits for (a terminal or an input request): a stream is left by cancellation,
        # never by abandoning an iterator (with a2a-sdk 1.3.0, leaving a stream with `break` leaves
        # the SDK's nested async generators unclosed; cancelling the scope closes them).
        tracing = self.run_actor.engine.tracing
        attributes = self._call_attributes() if tracing.enabled else {}
        operation = method.__name__  # start, poll, resubscribe, answer
        with tracing.remote_call(self.span, self.spec.protocol, operation, attributes) as span:
            with trio.CancelScope() as scope:
                self._session_scope = scope
                await method(*args, self._on_update)
            self._session_scope = None
            if span.is_recording():
                span.set_attributes(self._call_attributes(ended=True))

    def _call_attributes(self, *, ended: bool = False) -> dict[str, Any]:
        """A remote call's protocol ids: the delegation, the remote task and context so far."""
        state = self.state
        values = {
            "subagent.remote_task_id": state.remote_task_id,
            "subagent.remote_context_id": state.remote_context_id,
            "subagent.card_fingerprint": state.card_fingerprint,
        }
        if not ended:  # the agent's key is on the delegation's span, the call's parent
            values["subagent.delegation_id"] = self.delegation_id
        return {key: value for key, value in values.items() if value}

    async def _on_update(self, update: TargetUpdate) -> None:
        if not isinstance(update, TargetUpdate):
            raise DelegationError(
                code=ErrorCode.MALFORMED_REMOTE_PAYLOAD,
                message=f"The target emitted {type(update).__name__}, not a TargetUpdate.",
            )
        events = self.state.feed(update)
        if self.state.ended_by_limit and not self._limit_cancelled:
            # Our limit ended it, not the remote: its task still runs and must be cancelled,
            # and the result must say how that went, before the terminal is journaled.
            self._limit_cancelled = True
            self.state.note_remote_cancel(await self._cancel_remote())
        await self._publish(events)
        if (self.state.terminal or self.state.awaiting_input is not None) and self._session_scope:
            self._session_scope.cancel()

    async def _handle_input(self) -> None:
        mode = self.policy.input_required
        assert self._session is not None
        if mode == InputRequiredMode.RETURN:
            await self._publish(self.state.stop_for_input())
            return
        if mode == InputRequiredMode.FAIL or not self.spec.target.capabilities.input:
            raise DelegationError(
                code=ErrorCode.INPUT_REQUIRED_UNSUPPORTED,
                message="The remote agent asked for more input, which this agent's policy does "
                "not allow: " + (self.state.awaiting_input or "no details given"),
                remote_status=self.state.remote_status,
            )
        answer: Answer | _Decline | None = None
        with trio.move_on_after(self.policy.input_wait_timeout):
            answer = await self._answers.receive()
        if answer is None:
            try:  # an answer taken at the very moment the wait ran out still counts
                answer = self._answers.receive_nowait()
            except trio.WouldBlock:
                pass
        if answer is None:
            await self._publish(self.state.close_question(QuestionOutcome.EXPIRED))
            if self.policy.on_input_expiry == InputExpiry.RETURN:
                await self._publish(self.state.stop_for_input())
                return
            raise DelegationError(
                code=ErrorCode.INPUT_REQUIRED,
                message=f"No answer to the remote's input request within "
                f"{self.policy.input_wait_timeout:g} s.",
                remote_status=self.state.remote_status,
            )
        await self._publish(self.state.announce_closed())
        if isinstance(answer, _Decline):
            if answer.then == InputExpiry.RETURN:
                await self._publish(self.state.stop_for_input())
                return
            raise DelegationError(
                code=ErrorCode.INPUT_REQUIRED,
                message="The person asked declined to answer the remote's input request: "
                + (self.state.awaiting_input or "no details given"),
                remote_status=self.state.remote_status,
            )
        self.state.resume()
        await self._publish(self.state.note_status("working"))
        await self._call(self._session.answer, answer)

    async def _publish(self, events: list[DelegationEvent]) -> None:
        # Shielded: the state machine already moved past these events, so a cancel arriving
        # between two of them must not lose the rest (an opened message, a terminal). The wait
        # is bounded: the run's writer is itself shielded and always drains the mailbox.
        # Offers are synchronous and a shield's exit is no checkpoint, so no cancel can land
        # between two of these events; only a full mailbox makes one wait, shielded.
        run = self.run_actor
        for event in events:
            if event.is_terminal and self.state.result is not None:
                run.record(self.state.result)  # recorded before anyone sees the terminal
            entry = JournalEntry(event)
            if not run.mailbox.offer(entry):
                with trio.CancelScope(shield=True):
                    await run.mailbox.send(entry)
        # No checkpoint here on purpose: if this publish made the actor cancel the session's
        # scope, the Cancelled should surface at the session's next await (inside a remote
        # stream's `__anext__`, which unwinds and closes the SDK's nested generators) rather
        # than in the session's loop body, where those generators would be left to the GC.

    async def _conclude(self, timed_out: bool) -> None:
        """Shielded: make sure the delegation has exactly one terminal, journaled and recorded."""
        run = self.run_actor
        state = self.state
        try:
            if not state.terminal:
                remote_cancel = await self._cancel_remote()
                if self._failure is not None:
                    events = state.fail(self._failure, remote_cancel=remote_cancel)
                elif timed_out:
                    events = state.fail(
                        DelegationError(
                            code=ErrorCode.REMOTE_TIMEOUT,
                            message=f"The remote task did not finish within {self.timeout:g} s.",
                            remote_status=state.remote_status,
                        ),
                        remote_cancel=remote_cancel,
                    )
                else:
                    events = state.cancelled(
                        remote_cancel=remote_cancel,
                        reason=self.cancel_reason or "The delegation was cancelled.",
                    )
                with trio.move_on_after(RUN_CLOSE_TIMEOUT):
                    await self._publish(events)
            with trio.move_on_after(RUN_CLOSE_TIMEOUT):
                await run.mailbox.flush()
            if self._session is not None and not self._handed_over:
                with trio.move_on_after(self.policy.cancel_timeout):
                    try:
                        await self._session.aclose()
                    except Exception:
                        pass  # a session that cannot close cleanly must not crash its run
        finally:
            if state.result is not None:
                run.record(state.result)
                run.remember_context(self.spec, state.result.remote_context_id)
                delegation_ended(state.result, trio.current_time() - self._started)
                run.engine.stats.delegation_ended(state.result)
            run._delegation_ended(self)
            self._answers_in.close()
            run.engine.tracing.end_delegation(self.span, state.result)
            self.done.set()

    async def _cancel_remote(self) -> str:
        if self._session is None or not self._sent_task:
            return RemoteCancel.NOT_NEEDED
        if not self._session.remote_may_run:
            return RemoteCancel.NOT_NEEDED  # refused, or its stream already carried its end
        if not self.spec.target.capabilities.cancel:
            return RemoteCancel.UNSUPPORTED
        confirmed = False
        tracing = self.run_actor.engine.tracing
        attributes = self._call_attributes() if tracing.enabled else {}
        with tracing.remote_call(self.span, self.spec.protocol, "cancel", attributes) as span:
            with trio.move_on_after(self.policy.cancel_timeout):
                try:
                    confirmed = await self._session.cancel()
                except Exception:
                    confirmed = False
            if span.is_recording():
                span.set_attribute("subagent.cancel_confirmed", confirmed)
        if confirmed:
            return RemoteCancel.CONFIRMED
        await self._publish(self.state.note_status("cancel_pending"))
        # The engine keeps trying after this delegation (and its run) ended.
        engine = self.run_actor.engine
        self._handed_over = engine._follow_up_cancel(
            self.delegation_id, self._session, self.policy, self.span, self.spec.protocol
        )
        return RemoteCancel.PENDING


def _failure_of(exc: BaseException) -> DelegationError | None:
    """What a delegation's crash means for its result; None if it was only cancellation.

    Cancellation is level-triggered in Trio, so dropping a `Cancelled` that came bundled with a
    real failure is safe: the next checkpoint in a cancelled scope raises it again.
    """
    if isinstance(exc, trio.Cancelled):
        return None
    if isinstance(exc, BaseExceptionGroup):
        rest = exc.split(trio.Cancelled)[1]
        if rest is None:
            return None
        while isinstance(rest, BaseExceptionGroup) and len(rest.exceptions) == 1:
            rest = rest.exceptions[0]
        exc = rest
    if isinstance(exc, DelegationError):
        return exc
    if not isinstance(exc, Exception):
        return None  # KeyboardInterrupt and friends are not a delegation's to swallow
    return DelegationError(
        code=ErrorCode.INTERNAL_ERROR,
        message=f"The delegation's target raised {type(exc).__name__}.",
        metadata={"exception": type(exc).__name__},
    )


class DelegationHandle:
    """A running (or refused) delegation: its id, a way to wait for its result, and cancel."""

    def __init__(
        self, delegation_id: str, done: trio.Event, run: RunActor, actor: DelegationActor | None
    ) -> None:
        self.delegation_id = delegation_id
        self._done = done
        self._run = run
        self._actor = actor

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> DelegationResult:
        """The final result. If the waiting task is cancelled, the delegation is cancelled too
        (the parent gave up on it) and the cancellation propagates."""
        try:
            await self._done.wait()
            # Refused delegations end without an actor: make sure their events are journaled
            # too, so the terminal always precedes whatever the caller publishes next.
            await self._run.mailbox.flush()
        except trio.Cancelled:
            self.cancel("The caller waiting for this delegation was cancelled.")
            raise
        return self._run._results[self.delegation_id]

    def cancel(self, reason: str = "") -> None:
        if self._actor is not None:
            self._actor.cancel(reason)

    def result(self) -> DelegationResult:
        """The result so far (status `running` until the delegation ends)."""
        return self._run._results[self.delegation_id]


class Run:
    """The handle of an open run, given by `Engine.open_run()` / `engine.open_run()`."""

    def __init__(self, actor: RunActor) -> None:
        self._actor = actor

    @property
    def run_id(self) -> str:
        return self._actor.run_id

    @property
    def journal(self) -> RunJournal:
        return self._actor.journal

    @property
    def registry(self) -> Registry:
        return self._actor.engine.registry

    @property
    def endpoint(self) -> RunEndpoint | None:
        """The run's tool endpoint (URL and bearer token for its parent agent's MCP
        configuration), when the engine has an endpoint provider; None otherwise."""
        return self._actor.endpoint

    @property
    def parent_call_ids(self) -> str:
        """Whose ids the parent's tool-call events carry: `model` (the model's own tool-call
        ids, the ones MCP `_meta` names: Claude Code, the scripted parent) or `parent` (ids the
        parent makes up, e.g. Codex's `item_N`; delegations are then paired with the parent's
        calls, see `pair_parent_tool_call`). Set by the parent adapter before it starts."""
        return self._actor.parent_call_ids

    @parent_call_ids.setter
    def parent_call_ids(self, value: str) -> None:
        if value not in ("model", "parent"):
            raise ValueError(f"parent_call_ids must be 'model' or 'parent', not {value!r}")
        self._actor.parent_call_ids = value

    async def pair_parent_tool_call(self, arguments: Any, *, wait: float) -> str | None:
        """The parent's own id of the delegation tool call these `arguments` came with,
        claimed (see `engine._correlation`, `ParentToolCalls.pair`): waits up to `wait` s for
        the parent's stream to show a call with these arguments, then takes the oldest
        unclaimed one; None if the parent showed none."""
        actor = self._actor
        with trio.move_on_after(wait):
            while True:
                paired = actor.parent_calls.pair(arguments)
                if paired is not None:
                    return paired
                await actor.parent_calls_changed.wait()
        return actor.parent_calls.pair(arguments, exact=False)

    @contextmanager
    def traced(
        self,
        name: str,
        *,
        kind: str = "server",
        attributes: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Iterator[trace.Span]:
        """A span for something an edge does for this run (a tool call of its endpoint, a
        viewer's connection), ended on leaving the block and marked failed by an exception.
        Delegations started inside the block (in this task) are its children. The span is a
        child of the run's span, or, when the request named one (a W3C `traceparent`, e.g. in
        an MCP tool call's `_meta`), of that remote parent, with a link to the run's span.
        Yields an invalid span, and does nothing else, when the engine does not trace.
        `kind`: a key of `engine._tracing.SPAN_KINDS`."""
        actor = self._actor
        tracing = actor.engine.tracing
        if not tracing.enabled:
            yield trace.INVALID_SPAN
            return
        remote = parent_context(traceparent, tracestate)
        span = tracing.start(
            name,
            parent=remote if remote is not None else actor.span,
            kind=SPAN_KINDS.get(kind, trace.SpanKind.INTERNAL),
            attributes={"subagent.run_id": actor.run_id, **(attributes or {})},
            links=(actor.span,) if remote is not None else (),
        )
        with tracing.scope(span):
            yield span

    def count_tool_call(self, tool: str) -> None:
        """Count a call of the run's tool endpoint (`tool`: one of the names the endpoint lists;
        for the engine's metrics, `Engine.statistics().tool_calls`)."""
        self._actor.engine.stats.tool_called(tool)

    def claim_parent_tool_call(self, mode: str) -> str | None:
        """The parent tool call a delegation without a tool-call id belongs to (`medium`: the
        oldest unclaimed parent delegation call; `weak`: the only open one, else
        `AmbiguousCorrelation`), or None. See `engine._correlation`."""
        actor = self._actor
        return actor.parent_calls.claim_next(mode, actor.engine.clock())

    def start_delegation(self, request: DelegationRequest) -> DelegationHandle:
        """Start a delegation in the run's nursery and return at once.

        Requests the registry or limits refuse never reach a target: they end immediately as a
        failed result (`agent_not_found`, `concurrency_limit`, `run_closed`).
        """
        return self._actor.start_delegation(request)

    async def delegate(self, request: DelegationRequest) -> DelegationResult:
        """Run one delegation to its end and return its structured result (never raises for
        a delegation's failure: the result says it). Cancelling the caller cancels the
        delegation and its remote task."""
        return await self.start_delegation(request).wait()

    def events(self, after: int | None = None) -> Subscription:
        """The run's journal from just after cursor `after` (None: from the start), then live,
        ending after the run's terminal event."""
        return self._actor.journal.subscribe(after)

    def cancel(self, reason: str = "") -> None:
        """Cancel the run: its body, every delegation and their remote tasks."""
        actor = self._actor
        actor.cancel_reason = reason or "The run was cancelled."
        actor.request_close(Kind.RUN_CANCELLED, actor.cancel_reason)
        if actor.body_scope is not None:
            actor.body_scope.cancel()

    def answer(
        self,
        delegation_id: str,
        text: str | None = None,
        data: Mapping[str, Any] | None = None,
        *,
        question_id: str | None = None,
        surface: str = AnswerSurface.API,
        answered_by: str | None = None,
    ) -> Question:
        """Answer the question of a delegation waiting for input (`subagent.input_required`).

        The first valid answer from any surface wins, exactly once: it returns the closed
        question (with `surface` and `answered_by`), and the journal gets
        `subagent.input_closed`. Refusals are `DelegationError`s: `question_closed` (answered
        elsewhere, expired, withdrawn: the metadata says how and by whom), `answer_invalid`
        (not what the question's `response_schema` asks for; the question stays open),
        `invalid_input` (no open question, or the agent does not wait for answers) and
        `delegation_not_found`."""
        return self._delegation_for_answer(delegation_id, question_id).answer(
            Answer(text=text, data=data),
            question_id=question_id,
            surface=surface,
            answered_by=answered_by,
        )

    def decline(
        self,
        delegation_id: str,
        *,
        question_id: str | None = None,
        then: str = InputExpiry.FAIL,
        surface: str = AnswerSurface.API,
        answered_by: str | None = None,
    ) -> Question:
        """Close the open question without an answer (a person declined): the delegation
        then fails (`then="fail"`, error `input_required`) or ends with status
        `input_required` for the parent model to decide (`then="return"`). Same refusals as
        `answer` (a question already closed cannot be declined)."""
        if then not in InputExpiry.ALL:
            raise ValueError(f"then must be one of {sorted(InputExpiry.ALL)}, not {then!r}")
        return self._delegation_for_answer(delegation_id, question_id).answer(
            _Decline(then), question_id=question_id, surface=surface, answered_by=answered_by
        )

    def questions(self) -> list[Question]:
        """The run's open questions, oldest first."""
        open_questions = [
            actor.state.questions.current
            for actor in self._actor._active.values()
            if actor.state.questions.current is not None and not actor.state.terminal
        ]
        return sorted(
            (q for q in open_questions if q is not None), key=lambda q: (q.asked_at, q.id)
        )

    def _delegation_for_answer(
        self, delegation_id: str, question_id: str | None
    ) -> DelegationActor:
        actor = self._actor._active.get(delegation_id)
        if actor is not None:
            return actor
        ended = self._actor._ended_questions.get(delegation_id)
        if ended is not None:
            # Nothing is open any more: the question named (or the last one) says how it closed.
            ended.check_open(question_id, delegation_id=delegation_id)
            raise DelegationError(
                code=ErrorCode.INVALID_INPUT,
                message=f"Delegation {delegation_id[:64]} has ended; it has no open question.",
            )
        if delegation_id in self._actor._results:
            raise DelegationError(
                code=ErrorCode.INVALID_INPUT,
                message=f"Delegation {delegation_id[:64]} has ended; it has no open question.",
            )
        raise DelegationError(
            code=ErrorCode.DELEGATION_NOT_FOUND,
            message=f"No delegation {delegation_id[:64]!r} in this run.",
        )

    def delegations(self) -> list[DelegationResult]:
        """Every delegation of the run in start order; running ones with status `running`.
        Recorded results survive the run's end (see `Engine.results`)."""
        return self._actor.delegations()

    def result(self, delegation_id: str) -> DelegationResult | None:
        return self._actor._results.get(delegation_id)

    def artifact(self, delegation_id: str, artifact_id: str) -> tuple[ArtifactRef, bytes] | None:
        """An artifact of one of this run's delegations with the content its target gave,
        running or ended (None: unknown, or only referenced). Kept in memory while this handle
        lives; an archived run has references only."""
        actor = self._actor._active.get(delegation_id)
        state = (
            actor.state if actor is not None else self._actor._ended_artifacts.get(delegation_id)
        )
        return None if state is None else state.artifact(artifact_id)

    async def emit(self, kind: str, **fields: Any) -> None:
        """Publish one of the parent's own payloads (text, reasoning, tool calls, custom)."""
        if kind in Kind.RUN_TERMINALS or kind == Kind.RUN_STARTED or kind.startswith("subagent."):
            raise ValueError(f"{kind!r} is not a parent payload kind; use finish()/fail()")
        actor = self._actor
        event = actor._event(kind, **fields)
        changed = actor.parent_calls.observe(
            kind, event.tool_call_id, event.tool_name, event.time, event.args
        )
        await actor.publish(event)
        if changed:  # after the call's event is on its way: a paired subagent comes after it
            actor.parent_calls_changed.set()
            actor.parent_calls_changed = trio.Event()

    async def flush(self) -> None:
        """Wait until everything published so far is in the journal."""
        await self._actor.mailbox.flush()

    async def finish(self, text: str | None = None) -> None:
        """End the run successfully now (delegations still running are cancelled first)."""
        await self._close_now(Kind.RUN_FINISHED, text or "")

    async def fail(self, message: str, code: str = ErrorCode.INTERNAL_ERROR) -> None:
        """End the run as failed now; `code` (an `ErrorCode`) types the failure in its error."""
        await self._close_now(Kind.RUN_FAILED, message, code)

    async def _close_now(
        self, kind: str, reason: str, code: str = ErrorCode.INTERNAL_ERROR
    ) -> None:
        actor = self._actor
        for delegation in list(actor._active.values()):
            delegation.cancel("The run ended.")
        while actor._active:
            await next(iter(actor._active.values())).done.wait()
        if not actor._ended:  # the first end stands: it is the one journaled
            actor._outcome, actor._outcome_reason = kind, reason
            actor._outcome_code = code
        await actor._end(kind, reason)


def _model_call_id(request: DelegationRequest) -> str | None:
    """The model's tool-call id a parent adapter paired away (`metadata["model_tool_call_id"]`,
    see `Run.pair_parent_tool_call`), kept for the audit trail."""
    value = request.metadata.get("model_tool_call_id")
    return value[:200] if isinstance(value, str) and value else None
