"""Stateful test of the real actor tree: random delegations, commands, cancels and late readers.

Hypothesis rules are synchronous, so each example runs one Trio loop in a background thread:
`TrioLoop.main` opens an `Engine` and a run, publishes its Trio token, and waits. Rules act on the
run through `trio.from_thread.run(...)` and then wait until every task is blocked
(`trio.testing.wait_all_tasks_blocked`), so each step's effects have settled before the
invariants look (under Hypothesis, Trio's scheduler is deterministic, so examples replay).

Every delegation runs `World.agent`, an in-process agent that does exactly what the rules tell it
through its own command channel (say, stream, status, finish, fail, raise, ask) and records what
it said. Timeouts are long (600 s on the real clock) so nothing ends on its own.

After each step: a delegation's handle is finished exactly when its recorded result is terminal
and its terminal is journaled (once, matching the result); the engine's active count equals the
unfinished handles. At teardown the run is closed and the thread joined, then: one terminal per
delegation after its start, strictly increasing cursors for every reader, reassembled text equal
to what the agent said, results that agree with how each agent ended, and no task left running
when `open_run` returned.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import pytest
import trio
import trio.testing
from hypothesis import event as note_event
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adapters.inprocess import InProcessTarget, LocalTask
from engine import VOLATILE as VOLATILE_LANE
from engine import (
    AgentSpec,
    BaseTarget,
    BaseTargetSession,
    DelegationError,
    DelegationHandle,
    DelegationPolicy,
    DelegationRequest,
    DelegationResult,
    DelegationTask,
    Emit,
    Engine,
    EngineLimits,
    ErrorCode,
    InputRequiredMode,
    JournalEntry,
    Kind,
    Run,
    Status,
    Subscription,
    TargetCapabilities,
    TargetUpdate,
    lane_of,
)
from tests.helpers.task_tracker import TaskTracker

T = TypeVar("T")

MAX_DELEGATIONS = 7
#: Small buffers, so a reader that falls behind catches up from the store and a busy mailbox
#: applies backpressure; a replay window large enough that nothing is evicted.
LIMITS = EngineLimits(
    max_concurrent_per_run=4, subscriber_buffer_bytes=1024, run_mailbox_bytes=1024
)
POLICY = DelegationPolicy(
    default_timeout=600,
    max_timeout=600,
    cancel_timeout=5,
    input_required=InputRequiredMode.SURFACE,
    input_wait_timeout=600,
)
#: Which recorded result statuses each journaled terminal kind may stand for.
TERMINAL_STATUSES = {
    Kind.FINISHED: {Status.COMPLETED, Status.INPUT_REQUIRED},
    Kind.FAILED: {Status.FAILED},
    Kind.CANCELLED: {Status.CANCELLED},
}
MARKERS = {Kind.GAP, Kind.DROPPED, Kind.STREAM_DROPPED}


# -- the agent ----------------------------------------------------------------------------


@attrs.frozen
class Command:
    op: str
    chunks: tuple[str, ...] = ()
    text: str = ""


chunks = st.text(alphabet="abz ", max_size=4)
commands = st.one_of(
    st.builds(Command, op=st.just("say"), chunks=st.lists(chunks, max_size=3).map(tuple)),
    st.builds(Command, op=st.just("stream"), chunks=st.tuples(chunks)),
    st.builds(Command, op=st.just("end_stream")),
    st.builds(Command, op=st.sampled_from(["status"]), text=st.sampled_from(["", "reading"])),
    st.builds(Command, op=st.just("finish"), text=st.sampled_from(["done", "ok", ""])),
    st.sampled_from([Command("fail"), Command("raise")]),
    st.just(Command("ask")),
)


class World:
    """The agents' side: their command inboxes and what they did. Touched only by Trio code."""

    def __init__(self) -> None:
        self.inboxes: dict[str, trio.MemoryReceiveChannel[Command]] = {}
        self.said: dict[tuple[str, str], list[str]] = {}
        self.asking: set[str] = set()
        self.answers: dict[str, list[str | None]] = defaultdict(list)
        self.ended: dict[str, Command] = {}  # how an agent chose to end

    async def agent(self, task: LocalTask) -> str | None:
        did = task.task.delegation_id
        inbox = self.inboxes.pop(task.objective)
        numbers = iter(range(1, 1000))
        stream_id: str | None = None
        async with inbox:
            async for command in inbox:
                op = command.op
                if op == "say":
                    message_id = f"{did}-say-{next(numbers)}"
                    await task._emit(
                        TargetUpdate(kind=Kind.TEXT_START, message_id=message_id, role="assistant")
                    )
                    said = self.said[(did, message_id)] = []
                    for chunk in command.chunks:
                        await task.text_delta(chunk, message_id=message_id)
                        said.append(chunk)
                    await task._emit(TargetUpdate(kind=Kind.TEXT_END, message_id=message_id))
                elif op == "stream":
                    # Deltas of a message the agent never opened: the engine opens it.
                    stream_id = stream_id or f"{did}-stream-{next(numbers)}"
                    await task.text_delta(command.chunks[0], message_id=stream_id)
                    self.said.setdefault((did, stream_id), []).append(command.chunks[0])
                elif op == "end_stream":
                    if stream_id is not None:
                        await task._emit(TargetUpdate(kind=Kind.TEXT_END, message_id=stream_id))
                        stream_id = None
                elif op == "status":
                    await task.status("working", command.text or None)
                elif op == "ask":
                    self.asking.add(did)
                    try:
                        answer = await task.ask("May I continue?")
                    finally:
                        self.asking.discard(did)
                    self.answers[did].append(answer.text)
                else:
                    self.ended[did] = command
                    if op == "finish":
                        return command.text  # an open stream is closed by the engine
                    if op == "fail":
                        raise DelegationError(code=ErrorCode.REMOTE_REJECTED, message="no")
                    raise RuntimeError("agent bug")
        return None


# -- the loop thread ------------------------------------------------------------------------


class TrioLoop:
    """One Trio run in a thread, holding an Engine and one open run until told to close."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.alive_after_close: list[str] | None = None
        self.spawned: list[str] = []
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.thread = threading.Thread(target=self._thread_main, name="trio-loop", daemon=True)
        self.thread.start()
        if not self.ready.wait(timeout=30):
            raise RuntimeError("the Trio loop did not start")
        if self.error is not None:
            raise self.error

    def _thread_main(self) -> None:
        try:
            trio.run(self.main)
        except BaseException as exc:
            self.error = exc
        finally:
            self.ready.set()

    async def main(self) -> None:
        tracker = TaskTracker()
        trio.lowlevel.add_instrument(tracker)
        self.stop = trio.Event()
        self.closed = trio.Event()
        self.finish = trio.Event()
        spec = AgentSpec(key="agent", target=InProcessTarget(self.world.agent), policy=POLICY)
        try:
            async with Engine([spec], limits=LIMITS, tracer_provider=self.tracer_provider) as eng:
                self.engine = eng
                tracker.start()
                try:
                    async with eng.open_run() as run:
                        self.run: Run = run
                        self.first_reader = Reader(run.events(), 0)
                        self.token = trio.lowlevel.current_trio_token()
                        self.ready.set()
                        await self.stop.wait()  # or run.cancel() cancels this body
                finally:
                    self.alive_after_close = tracker.alive()
                    self.spawned = tracker.names()
                    tracker.stop()
                    self.closed.set()
                await self.finish.wait()
        finally:
            trio.lowlevel.remove_instrument(tracker)

    @property
    def running(self) -> bool:
        return self.thread.is_alive() and self.token is not None

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return trio.from_thread.run(afn, *args, trio_token=self.token)

    def settle(self, fn: Callable[[], T]) -> T:
        """Run `fn` in the loop, then wait until every task is blocked; return its value."""

        async def settled() -> T:
            value = fn()
            await trio.testing.wait_all_tasks_blocked()
            return value

        return self.call(settled)


@attrs.define
class Reader:
    """A subscriber and everything it has delivered so far."""

    sub: Subscription
    after: int
    entries: list[JournalEntry] = attrs.field(factory=list)
    ended: bool = False

    async def read_available(self, max_entries: int) -> None:
        """Take what the subscription can deliver now (at most one batch), without waiting."""
        if self.ended:
            return

        async def receive(cancel_scope: trio.CancelScope) -> None:
            try:
                self.entries.extend(await self.sub.receive_batch(max_entries))
            except trio.EndOfChannel:
                self.ended = True
            cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive, nursery.cancel_scope)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()  # nothing more is coming right now

    async def drain(self) -> None:
        if self.ended:
            return
        async for entry in self.sub:
            self.entries.append(entry)
        self.ended = True


def journal_by_delegation(entries: list[JournalEntry]) -> dict[str, list[JournalEntry]]:
    out: dict[str, list[JournalEntry]] = defaultdict(list)
    for entry in entries:
        if entry.event.delegation_id is not None:
            out[entry.event.delegation_id].append(entry)
    return out


def terminals(entries: list[JournalEntry]) -> list[JournalEntry]:
    return [e for e in entries if e.event.kind in Kind.DELEGATION_TERMINALS]


@attrs.frozen
class Snapshot:
    journal: list[JournalEntry]
    results: dict[str, DelegationResult]
    finished: dict[str, bool]
    active: int
    asking: frozenset[str]


# -- the machine ----------------------------------------------------------------------------


class ActorTreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.handles: dict[str, DelegationHandle] = {}
        self.refused_after_close: set[str] = set()
        self.cancel_touched: set[str] = set()  # cancelled, or maybe cancelled mid-step
        self.run_cancelled = False
        self.readers: list[Reader] = []
        self.started = 0
        self.inboxes_out: dict[str, trio.MemorySendChannel[Command]] = {}
        self.loop = TrioLoop(self.world)
        self.readers.append(self.loop.first_reader)

    # -- helpers --------------------------------------------------------------------------

    @property
    def run(self) -> Run:
        return self.loop.run

    def unfinished(self) -> list[str]:
        return [did for did, handle in self.handles.items() if not handle.finished]

    async def _snapshot(self) -> Snapshot:
        journal = self.run.journal
        entries = await journal.store.read_after(0, 1 << 20)
        return Snapshot(
            journal=entries,
            results={r.delegation_id: r for r in self.run.delegations()},
            finished={did: h.finished for did, h in self.handles.items()},
            active=self.loop.engine.active_delegations,
            asking=frozenset(self.world.asking),
        )

    # -- rules ----------------------------------------------------------------------------

    @precondition(lambda self: self.started < MAX_DELEGATIONS)
    @rule()
    def start_delegation(self) -> None:
        self.started += 1
        objective = f"objective-{self.started}"

        def start() -> DelegationHandle:
            send, receive = trio.open_memory_channel[Command](math.inf)
            self.world.inboxes[objective] = receive
            handle = self.run.start_delegation(
                DelegationRequest(agent="agent", objective=objective)
            )
            self.inboxes_out[handle.delegation_id] = send
            return handle

        handle = self.loop.settle(start)
        self.handles[handle.delegation_id] = handle
        if self.run_cancelled:
            self.refused_after_close.add(handle.delegation_id)

    def _send(self, did: str, command: Command) -> None:
        try:
            self.inboxes_out[did].send_nowait(command)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the agent has ended (or never ran: refused or cancelled before it started)

    @precondition(lambda self: any(not h.finished for h in self.handles.values()))
    @rule(index=st.integers(0, 99), script=st.lists(commands, min_size=1, max_size=3))
    def step(self, index: int, script: list[Command]) -> None:
        """Give one running delegation a few commands, letting each settle."""
        did = self.unfinished()[index % len(self.unfinished())]
        for command in script:
            self.loop.settle(lambda command=command: self._send(did, command))
            note_event(f"step: {command.op}")

    @precondition(lambda self: any(not h.finished for h in self.handles.values()))
    @rule(index=st.integers(0, 99), command=commands, checkpoints=st.integers(0, 4))
    def step_then_cancel(self, index: int, command: Command, checkpoints: int) -> None:
        """Cancel while the delegation is busy with the command, at a random scheduling point."""
        did = self.unfinished()[index % len(self.unfinished())]
        self.cancel_touched.add(did)

        async def act() -> None:
            self._send(did, command)
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            self.handles[did].cancel("stopped mid-step")
            await trio.testing.wait_all_tasks_blocked()

        self.loop.call(act)

    @precondition(lambda self: bool(self.handles))
    @rule(index=st.integers(0, 99))
    def cancel_delegation(self, index: int) -> None:
        did = list(self.handles)[index % len(self.handles)]
        self.cancel_touched.add(did)
        self.loop.settle(lambda: self.handles[did].cancel("user pressed stop"))

    @precondition(lambda self: bool(self.handles))
    @rule(index=st.integers(0, 99), any_delegation=st.integers(0, 3))
    def answer(self, index: int, any_delegation: int) -> None:
        """Answer a delegation (mostly one whose agent is asking, the only kind that accepts)."""

        def answer() -> tuple[str, bool, str | None]:
            asking = [did for did in self.handles if did in self.world.asking]
            candidates = asking if asking and any_delegation else list(self.handles)
            did = candidates[index % len(candidates)]
            waiting = did in self.world.asking
            try:
                self.run.answer(did, text=f"yes {did}")
            except DelegationError as error:
                return did, waiting, error.code
            return did, waiting, None

        did, waiting, error = self.loop.settle(answer)
        note_event("answer: waiting" if waiting else "answer: not waiting")

        async def asked_in_journal() -> bool:
            entries = await self.run.journal.store.read_after(0, 1 << 20)
            return any(
                e.event.kind == Kind.INPUT_REQUIRED and e.event.delegation_id == did
                for e in entries
            )

        if waiting:
            assert error is None
            assert self.loop.settle(lambda: self.world.answers[did][-1]) == f"yes {did}"
        elif self.loop.call(asked_in_journal):
            # Its question was answered, or withdrawn when the delegation ended: told so.
            assert error == ErrorCode.QUESTION_CLOSED
        else:
            assert error == ErrorCode.INVALID_INPUT

    @rule(from_start=st.booleans(), fraction=st.floats(0, 1))
    def subscribe(self, from_start: bool, fraction: float) -> None:
        def subscribe() -> Reader:
            after = 0 if from_start else int(fraction * self.run.journal.head)
            return Reader(self.run.events(after), after)

        self.readers.append(self.loop.settle(subscribe))

    @precondition(lambda self: bool(self.readers))
    @rule(index=st.integers(0, 99), max_entries=st.integers(1, 40))
    def read(self, index: int, max_entries: int) -> None:
        reader = self.readers[index % len(self.readers)]
        self.loop.call(reader.read_available, max_entries)

    @precondition(lambda self: not self.run_cancelled)
    @rule(dice=st.integers(0, 29))
    def cancel_run(self, dice: int) -> None:
        if dice:
            return  # rarely
        note_event("run cancelled")
        self.run_cancelled = True
        self.cancel_touched.update(self.handles)
        self.loop.settle(lambda: self.run.cancel("the user closed the tab"))
        self.loop.call(self.loop.closed.wait)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def handles_results_and_journal_agree(self) -> None:
        if not self.loop.running:
            return
        snap = self.loop.call(self._snapshot)
        by_delegation = journal_by_delegation(snap.journal)
        unfinished = [did for did, done in snap.finished.items() if not done]
        assert snap.active == len(unfinished)
        for did, done in snap.finished.items():
            result = snap.results[did]
            journaled = terminals(by_delegation.get(did, []))
            assert len(journaled) <= 1, (did, [e.event.kind for e in journaled])
            if not done:
                assert result.status == Status.RUNNING
                assert journaled == []
                continue
            assert result.status in Status.TERMINAL
            if did in self.refused_after_close:
                continue
            # Journaled before the handle finished, and saying the same thing as the result.
            assert len(journaled) == 1, (
                did,
                result.status,
                [e.event.kind for e in by_delegation[did]],
            )
            assert result.status in TERMINAL_STATUSES[journaled[0].event.kind]
        assert snap.asking <= set(unfinished)

    # -- teardown -------------------------------------------------------------------------

    async def _final(self) -> tuple[list[JournalEntry], list[DelegationResult]]:
        eng = self.loop.engine
        journal = eng.journal(self.run.run_id)
        assert journal is not None
        for reader in self.readers:
            await reader.drain()
        late = Reader(journal.subscribe(0), 0)
        await late.drain()
        self.readers.append(late)
        entries = await journal.store.read_after(0, 1 << 20)
        return entries, eng.results(self.run.run_id)

    def teardown(self) -> None:
        loop = self.loop
        final = None
        try:
            if loop.running:
                loop.call(self._close_run)
                final = loop.call(self._final)
        finally:
            if loop.running:
                trio.from_thread.run_sync(loop.finish.set, trio_token=loop.token)
            loop.thread.join(timeout=30)
        assert not loop.thread.is_alive(), "the Trio loop did not exit"
        if loop.error is not None:
            raise loop.error
        assert final is not None
        self._check_final(*final)

    async def _close_run(self) -> None:
        self.loop.stop.set()
        await self.loop.closed.wait()

    def _check_final(self, journal: list[JournalEntry], results: list[DelegationResult]) -> None:
        loop = self.loop
        # Nothing the run started outlives open_run.
        assert loop.alive_after_close == []
        assert any(name.startswith("delegation ") for name in loop.spawned) == any(
            h._actor is not None for h in self.handles.values()
        )

        kinds = [e.event.kind for e in journal]
        assert kinds[0] == Kind.RUN_STARTED
        assert kinds[-1] == (Kind.RUN_CANCELLED if self.run_cancelled else Kind.RUN_FINISHED)
        assert sum(k in Kind.RUN_TERMINALS for k in kinds) == 1
        cursors = [e.cursor for e in journal]
        assert cursors == list(range(1, len(journal) + 1))

        by_id = {r.delegation_id: r for r in results}
        assert set(by_id) == set(self.handles)
        by_delegation = journal_by_delegation(journal)
        assert set(by_delegation) == set(self.handles) - self.refused_after_close
        for did, result in by_id.items():
            handle_result = self.handles[did].result()
            assert handle_result == result
            if did in self.refused_after_close:
                assert result.status == Status.FAILED
                assert result.error is not None
                assert result.error.code == ErrorCode.RUN_CLOSED
                continue
            entries = by_delegation[did]
            assert entries[0].event.kind == Kind.STARTED
            ends = terminals(entries)
            assert len(ends) == 1, (did, [e.event.kind for e in entries])
            assert entries[-1] is ends[0]
            assert result.status in TERMINAL_STATUSES[ends[0].event.kind], (
                did,
                result.status,
                ends[0].event.kind,
            )
            self._check_outcome(did, result)
            code = f" ({result.error.code})" if result.error else ""
            note_event(f"delegation {result.status}{code}")

        for reader in self.readers:
            self._check_reader(reader, journal)
        self._check_spans(results)

    def _check_spans(self, results: list[DelegationResult]) -> None:
        """One trace: one run span; one delegation span per delegation (refused ones too)
        beneath it, saying how its result ended; every remote call beneath its delegation."""
        spans = self.loop.spans.get_finished_spans()
        assert len({s.context.trace_id for s in spans if s.context is not None}) == 1
        (run_span,) = [s for s in spans if s.name == "subagent.run"]
        assert run_span.context is not None
        outcome = "cancelled" if self.run_cancelled else "finished"
        assert dict(run_span.attributes or {})["subagent.outcome"] == outcome
        delegations = {
            str(dict(s.attributes or {})["subagent.delegation_id"]): s
            for s in spans
            if s.name.startswith("subagent.delegation ")
        }
        assert len(delegations) == len([s for s in spans if s.name.startswith("subagent.dele")])
        assert set(delegations) == {r.delegation_id for r in results}
        delegation_span_ids = set()
        for result in results:
            span = delegations[result.delegation_id]
            assert span.parent is not None and span.parent.span_id == run_span.context.span_id
            attributes = dict(span.attributes or {})
            assert attributes["subagent.status"] == result.status
            assert attributes.get("subagent.error_code") == (
                result.error.code if result.error is not None else None
            )
            assert span.context is not None
            delegation_span_ids.add(span.context.span_id)
        for span in spans:
            if span.name == "subagent.run" or span.name.startswith("subagent.delegation "):
                continue
            assert span.kind == SpanKind.CLIENT, span.name
            assert span.parent is not None and span.parent.span_id in delegation_span_ids

    def _check_outcome(self, did: str, result: DelegationResult) -> None:
        """A delegation nobody cancelled ends the way its agent chose (or is cancelled at close)."""
        if did in self.cancel_touched or self.handles[did]._actor is None:
            return
        ended = self.world.ended.get(did)
        if ended is None:
            assert result.status == Status.CANCELLED  # still running when the run closed
        elif ended.op == "finish":
            assert result.status == Status.COMPLETED
            assert result.error is None
            if ended.text:
                assert result.summary == ended.text
        else:
            assert result.status == Status.FAILED
            assert result.error is not None
            expected = ErrorCode.REMOTE_REJECTED if ended.op == "fail" else ErrorCode.REMOTE_FAILED
            assert result.error.code == expected

    def _check_reader(self, reader: Reader, journal: list[JournalEntry]) -> None:
        cursors = [e.cursor for e in reader.entries]
        assert cursors == sorted(set(cursors)), "cursors must strictly increase"
        assert all(c > reader.after for c in cursors)
        assert reader.ended
        if reader.after < journal[-1].cursor:
            assert reader.entries[-1].event.kind in Kind.RUN_TERMINALS
        else:
            assert reader.entries == []  # opened at the run terminal: nothing left to read
        if any(e.event.kind in MARKERS for e in reader.entries):
            note_event("reader saw a gap or drop marker")
            return
        note_event("late reader checked" if reader.after else "reader from the start checked")
        if reader.sub.catch_ups:
            note_event("a lagging reader caught up from the store")
        # Without markers nothing is missing: every non-delta entry, in order...
        expected = [
            e.cursor
            for e in journal
            if e.cursor > reader.after and lane_of(e.event.kind) != VOLATILE_LANE
        ]
        got = [e.cursor for e in reader.entries if lane_of(e.event.kind) != VOLATILE_LANE]
        assert got == expected
        # ...and the text of every message whose start it saw is what the agent said.
        texts: dict[tuple[str, str], list[str]] = {}
        for entry in reader.entries:
            event = entry.event
            if event.delegation_id is None or event.message_id is None:
                continue
            key = (event.delegation_id, event.message_id)
            if event.kind == Kind.TEXT_START:
                texts[key] = []
            elif event.kind == Kind.TEXT_DELTA and key in texts:
                texts[key].append(event.delta or "")
        for key, parts in texts.items():
            assert "".join(parts) == "".join(self.world.said.get(key, [])), key
        if reader.after == 0:
            assert set(texts) == set(self.world.said)


ActorTreeMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
TestActorTree = ActorTreeMachine.TestCase


# -- a deterministic regression for what the machine finds ----------------------------------


@attrs.define
class CancelledMidUpdateTarget(BaseTarget):
    """Emits `before`, then `last` (one update that makes several events) with a cancel of its
    own delegation already requested: the actor is cancelled at its first scheduling point while
    it publishes those events, as when `handle.cancel()` comes from another task at that moment."""

    before: tuple[TargetUpdate, ...]
    last: TargetUpdate
    handles: dict[str, DelegationHandle] = attrs.field(factory=dict)
    capabilities: TargetCapabilities = attrs.field(factory=TargetCapabilities)

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _MidUpdateSession:
        return _MidUpdateSession(self, task.delegation_id)


class _MidUpdateSession(BaseTargetSession):
    def __init__(self, target: CancelledMidUpdateTarget, delegation_id: str) -> None:
        self._target = target
        self._delegation_id = delegation_id

    async def start(self, emit: Emit) -> None:
        await emit(TargetUpdate(kind=Kind.STARTED, status="working"))
        for update in self._target.before:
            await emit(update)
        self._target.handles[self._delegation_id].cancel("stopped")
        await emit(self._target.last)
        await trio.sleep_forever()

    async def cancel(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


SAID = TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="said")


@pytest.mark.parametrize(
    ("before", "last"),
    [
        ((), SAID),  # a delta of an unopened message: [text.start, text.delta]
        ((SAID,), TargetUpdate(kind=Kind.FINISHED, text="done")),  # [text.end, finished]
    ],
    ids=["delta opens message", "finish closes message"],
)
async def test_cancel_while_publishing_one_update_loses_nothing(
    before: tuple[TargetUpdate, ...], last: TargetUpdate
) -> None:
    target = CancelledMidUpdateTarget(before, last)
    async with Engine([AgentSpec(key="agent", target=target)]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="agent", objective="x"))
            target.handles[handle.delegation_id] = handle
            result = await handle.wait()
            at_return = await run.journal.store.read_after(0, 1000)
        journal = await run.journal.store.read_after(0, 1000)
    assert eng.active_delegations == 0
    mine = [e for e in at_return if e.event.delegation_id == handle.delegation_id]
    kinds = [e.event.kind for e in mine]
    # Journaled before wait() returned, once, and saying what the result says.
    ends = terminals(mine)
    assert len(ends) == 1, kinds
    assert result.status in TERMINAL_STATUSES[ends[0].event.kind], (result.status, kinds)
    assert terminals([e for e in journal if e.event.delegation_id == handle.delegation_id]) == ends
    # Every event the state machine produced reached the journal.
    assert [e.event.delta for e in mine if e.event.kind == Kind.TEXT_DELTA] == ["said"]
    assert kinds.count(Kind.TEXT_START) == kinds.count(Kind.TEXT_END) == 1
