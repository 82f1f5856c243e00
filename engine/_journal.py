"""The run journal: one ordered, replayable log of everything a run shows its viewers.

`RunJournal` owns, for one run: the strictly increasing cursor of every event (parent payloads and
every delegation's events alike), the lifecycle rules a viewer can rely on, and the fan-out to
subscribers. The rules, enforced here so no producer can break them:

- the first event is `run.started` (synthesized if a producer's first event is something else);
- every delegation's first visible event is `subagent.started` (synthesized if missing);
- exactly one terminal per delegation and per run: a second terminal is rejected and counted, and
  so is anything a delegation sends after its terminal;
- a run terminal first closes every delegation still open with a synthesized `subagent.cancelled`
  (error `run_closed`), then nothing more is accepted.

Storage is a seam (`JournalStore`), and what a store keeps is the store contract
(`engine._store`): a bounded replay window (events and bytes) plus, beyond it, every start and
terminal, so a reader whose cursor fell out of the window gets explicit `stream.gap` markers
interleaved with the starts and terminals it would otherwise miss, and what opens and closes
the things a viewer holds open (each text message, reasoning message, tool call and nested
subagent: its first event, its end, a tool call's result), so a viewer resuming at any cursor
can be brought back to exactly what it had open, and is given every close it missed. The
in-memory `MemoryJournalStore` here follows it through the contract's public sans-IO pieces,
as a durable store (SQLite, Redis Streams) does behind the same two async methods.

Subscribers each read through their own `LaneBuffer`. Fan-out never waits: when a reader's
buffer refuses an entry, that reader alone drops back to reading the store from its own cursor
and rejoins the live fan-out once it has caught up. A slow reader therefore costs the run nothing
and other readers nothing; what it may lose is bounded by the window and always announced.
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Final, Self

import attrs
import trio
import trio.lowlevel

from engine._events import DelegationEvent, Kind
from engine._lanes import JournalEntry, LaneBuffer
from engine._results import DelegationError, ErrorCode
from engine._store import JournalStore, LifecycleRetention, RetentionPolicy, replay_before_window

__all__ = [
    "CursorError",
    "JournalStatistics",
    "JournalStore",
    "MemoryJournalStore",
    "JournalTail",
    "RunJournal",
    "Subscription",
]

#: Kinds `_admit` treats specially even inside an open delegation (the rest are just issued).
_LIFECYCLE: Final = frozenset({Kind.RUN_STARTED, Kind.STARTED, *Kind.DELEGATION_TERMINALS})

#: How many entries a catching-up reader pulls from the store at a time.
CATCH_UP_CHUNK: Final = 512


class CursorError(ValueError):
    """A reader asked for a cursor this journal never issued (ahead of its head, or negative)."""


class MemoryJournalStore:
    """A bounded in-memory replay window plus the entries retained beyond it.

    It follows the store contract (`engine._store`) by its public pieces: `RetentionPolicy`
    decides what leaves the window, `LifecycleRetention` what is kept beyond it, and
    `replay_before_window` what a reader behind the window gets.
    """

    def __init__(
        self,
        run_id: str,
        *,
        max_events: int = 10_000,
        max_bytes: int = 8 << 20,
        max_retained_critical: int = 10_000,
    ) -> None:
        self.policy = RetentionPolicy(
            max_events=max_events, max_bytes=max_bytes, max_retained=max_retained_critical
        )
        self.run_id = run_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_retained_critical = max_retained_critical
        self._window: list[JournalEntry] = []
        self._start = 0  # index of the first live entry of `_window`
        self._bytes = 0
        self._first_cursor = 1  # cursor of the oldest entry still in the window
        self._critical: list[JournalEntry] = []  # entries retained beyond the window, by cursor
        self._critical_cursors: list[int] = []
        self._retention = LifecycleRetention()
        self.evicted = 0

    @classmethod
    def from_policy(cls, run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
        """A store whose window and retention follow `policy`."""
        return cls(
            run_id,
            max_events=policy.max_events,
            max_bytes=policy.max_bytes,
            max_retained_critical=policy.max_retained,
        )

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        self.append_nowait(entries)

    def append_nowait(self, entries: Sequence[JournalEntry]) -> None:
        window = self._window
        for entry in entries:
            window.append(entry)
            self._bytes += entry.weight
        if self.policy.exceeded(len(window) - self._start, self._bytes):
            self._evict()

    def _evict(self) -> None:
        # One pass per batch: find how many entries fall out, then move them in bulk.
        window = self._window
        start = self._start
        count, evicted_bytes = self.policy.evictions(
            len(window) - start,
            self._bytes,
            (window[index].weight for index in range(start, len(window))),
        )
        if count == 0:
            return
        stop = start + count
        retains = self._retention.retains
        for entry in window[start:stop]:
            if retains(entry.event):
                self._critical.append(entry)
                self._critical_cursors.append(entry.cursor)
        overflow = self.policy.retained_overflow(len(self._critical))
        if overflow > 0:
            del self._critical[:overflow], self._critical_cursors[:overflow]
        self.evicted += count
        self._bytes -= evicted_bytes
        self._first_cursor = window[stop - 1].cursor + 1
        self._start = stop
        if stop > 1024 and stop * 2 > len(window):
            del window[:stop]
            self._start = 0

    @property
    def first_cursor(self) -> int:
        return self._first_cursor

    @property
    def window_bytes(self) -> int:
        return self._bytes

    @property
    def retention(self) -> LifecycleRetention:
        """What decides which entries leaving the window are kept (and what it has open)."""
        return self._retention

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return self.read_after_nowait(cursor, max_entries)

    def read_after_nowait(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        first = self._first_cursor
        if cursor + 1 < first:
            # The stretch the window lost: gap markers around each retained entry.
            critical = self._critical
            lo = bisect.bisect_right(self._critical_cursors, cursor)
            retained = (critical[index] for index in range(lo, len(critical)))
            out = replay_before_window(self.run_id, cursor, first, retained, max_entries)
            cursor = first - 1
        index = self._start + (cursor + 1 - first)
        out.extend(self._window[index : index + max(0, max_entries - len(out))])
        return out


@attrs.frozen
class JournalStatistics:
    head: int
    appended: int
    rejected_duplicate_terminals: int
    rejected_after_terminal: int
    rejected_duplicate_starts: int
    synthesized_starts: int
    synthesized_terminals: int
    live_subscribers: int
    catching_up_subscribers: int
    ended: bool


class RunJournal:
    """One run's ordered journal. See the module docstring for its rules.

    Appends come from one writer (the run actor) and never wait on readers. `close()` ends every
    subscription once it has delivered what was appended; appends after `close()` are refused.
    """

    def __init__(
        self,
        run_id: str,
        *,
        store: JournalStore | None = None,
        subscriber_buffer_bytes: int = 1 << 20,
        clock: trio.abc.Clock | None = None,
    ) -> None:
        self.run_id = run_id
        self.store: JournalStore = store if store is not None else MemoryJournalStore(run_id)
        self.subscriber_buffer_bytes = subscriber_buffer_bytes
        self._head = 0  # last cursor issued
        self._published = 0  # last cursor fanned out to live subscribers
        self._live: list[Subscription] = []
        self._catching_up: set[Subscription] = set()
        self._run_started = False
        self._run_terminal: JournalEntry | None = None
        self._open_delegations: dict[str, DelegationEvent] = {}  # started, no terminal yet
        self._ended_delegations: set[str] = set()
        self._closed = False
        self._ended = trio.Event()
        self._appended = 0
        self._dup_terminals = 0
        self._after_terminal = 0
        self._dup_starts = 0
        self._synth_starts = 0
        self._synth_terminals = 0
        #: For metrics (`engine._stats`): `stream.gap` markers its viewers were given, and the
        #: statuses folded in the buffers of viewers that left (live ones are read at a scrape).
        self.viewer_gaps = 0
        self.viewer_folds = 0

    @classmethod
    def reopened(
        cls, run_id: str, store: JournalStore, head: int, *, subscriber_buffer_bytes: int = 1 << 20
    ) -> RunJournal:
        """A read-only journal over what `store` kept of a run that ended (or whose process
        did): `head` is its newest cursor. Subscribers replay from the store and end there;
        appends are refused."""
        journal = cls(run_id, store=store, subscriber_buffer_bytes=subscriber_buffer_bytes)
        journal._head = journal._published = head
        journal._run_started = head > 0
        journal._closed = True
        journal._ended.set()
        return journal

    # -- writing -------------------------------------------------------------------------

    @property
    def head(self) -> int:
        """The last cursor issued (0 before the first event)."""
        return self._head

    @property
    def ended(self) -> bool:
        """True once the run's terminal event is in the journal."""
        return self._run_terminal is not None

    async def append(self, event: DelegationEvent) -> JournalEntry | None:
        """Append one event; returns its entry, or None if the rules rejected it."""
        accepted = await self.append_entries([JournalEntry(event)])
        for entry in accepted:
            if entry.event is event:
                return entry
        return None

    async def append_entries(self, entries: Sequence[JournalEntry]) -> list[JournalEntry]:
        """Append a batch in order (one store write); returns the entries accepted, with
        synthesized starts and terminals in their places."""
        if self._closed:
            raise trio.ClosedResourceError("run journal is closed")
        admitted: list[JournalEntry] = []
        open_delegations = self._open_delegations
        for entry in entries:
            # The bulk of a run: an event of an open delegation that neither starts nor ends
            # anything, in a started run; `_admit`'s checks come to issuing it as it is.
            event = entry.event
            if (
                event.delegation_id in open_delegations
                and event.kind not in _LIFECYCLE
                and self._run_terminal is None
            ):
                self._head += 1
                entry.cursor = self._head
                self._appended += 1
                admitted.append(entry)
            else:
                self._admit(entry, admitted)
        if not admitted:
            return admitted
        try:
            await self.store.append(admitted)
        finally:
            # Live readers get the entries even if the store failed (replay will lack them).
            self._publish(admitted)
        return admitted

    def _admit(self, entry: JournalEntry, out: list[JournalEntry]) -> None:
        event = entry.event
        kind = event.kind
        if self._run_terminal is not None:
            self._after_terminal += 1
            return
        if not self._run_started:
            self._run_started = True
            if kind != Kind.RUN_STARTED:
                self._issue(JournalEntry(self._synthesize(event, Kind.RUN_STARTED)), out)
                self._synth_starts += 1
        elif kind == Kind.RUN_STARTED:
            self._dup_starts += 1
            return
        delegation = event.delegation_id
        if delegation is not None:
            if delegation in self._ended_delegations:
                if kind in Kind.DELEGATION_TERMINALS:
                    self._dup_terminals += 1
                else:
                    self._after_terminal += 1
                return
            if delegation not in self._open_delegations:
                if kind != Kind.STARTED:
                    start = self._synthesize(event, Kind.STARTED)
                    self._issue(JournalEntry(start), out)
                    self._synth_starts += 1
                    self._open_delegations[delegation] = start
                else:
                    self._open_delegations[delegation] = event
            elif kind == Kind.STARTED:
                self._dup_starts += 1
                return
            if kind in Kind.DELEGATION_TERMINALS:
                del self._open_delegations[delegation]
                self._ended_delegations.add(delegation)
        elif kind in Kind.RUN_TERMINALS:
            for open_start in list(self._open_delegations.values()):
                closing = attrs.evolve(
                    self._synthesize(open_start, Kind.CANCELLED),
                    error=DelegationError(
                        code=ErrorCode.RUN_CLOSED,
                        message="The run ended before this delegation reported an outcome.",
                    ),
                    time=event.time,
                )
                self._issue(JournalEntry(closing), out)
                self._synth_terminals += 1
                self._ended_delegations.add(open_start.delegation_id or "")
            self._open_delegations.clear()
            self._issue(entry, out)
            self._run_terminal = entry
            return
        self._issue(entry, out)

    def _issue(self, entry: JournalEntry, out: list[JournalEntry]) -> None:
        self._head += 1
        entry.cursor = self._head
        self._appended += 1
        out.append(entry)

    def _synthesize(self, like: DelegationEvent, kind: str) -> DelegationEvent:
        if kind == Kind.RUN_STARTED:
            return DelegationEvent(kind=kind, run_id=self.run_id, time=like.time, synthesized=True)
        return like.derived(kind, run_id=self.run_id, synthesized=True)

    def _publish(self, entries: list[JournalEntry]) -> None:
        self._published = entries[-1].cursor
        live = self._live
        if live:
            weight = 0
            for entry in entries:
                weight += entry.weight
            lagging: list[Subscription] = []
            for sub in live:
                taken = sub._buffer.offer_many(entries, weight)
                if taken < len(entries):
                    # This reader is behind by a whole buffer: it reads the store from here on.
                    sub._begin_catch_up(entries[taken].cursor - 1)
                    lagging.append(sub)
            for sub in lagging:
                live.remove(sub)
                self._catching_up.add(sub)
        if self._run_terminal is not None:
            self._ended.set()

    def close(self) -> None:
        """Refuse further appends; subscriptions end after delivering what is journaled."""
        if self._closed:
            return
        self._closed = True
        self._ended.set()
        for sub in self._live:
            sub._buffer.close()

    # -- reading -------------------------------------------------------------------------

    def subscribe(
        self, after: int | None = None, *, max_buffer_bytes: int | None = None
    ) -> Subscription:
        """A reader that replays every entry after `after` (None: from the start), then follows
        live appends, and ends after the run's terminal event.

        Raises `CursorError` for a cursor this journal never issued. Use it as an async context
        manager (or call `close()`) so the journal stops feeding it.
        """
        if after is None:
            after = 0
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise CursorError(f"cursor must be a non-negative integer, got {after!r}")
        if after > self._head:
            raise CursorError(f"cursor {after} is ahead of this run's journal (head {self._head})")
        sub = Subscription(self, after, max_buffer_bytes or self.subscriber_buffer_bytes)
        self._catching_up.add(sub)
        return sub

    async def wait_ended(self) -> None:
        """Wait until the run terminal is journaled (or the journal is closed)."""
        await self._ended.wait()

    def _detach(self, sub: Subscription) -> None:
        if sub in self._live:
            self._live.remove(sub)
        self._catching_up.discard(sub)

    def _attach_if_caught_up(self, sub: Subscription) -> bool:
        if sub._resume_after < self._published:
            return False
        self._catching_up.discard(sub)
        terminal = self._run_terminal
        if self._closed or (terminal is not None and self._published >= terminal.cursor):
            # Nothing more will ever be published: end once the buffer is drained. (A terminal
            # admitted but still being written to a slow store is not published yet: such a
            # reader goes live and gets it with its batch.)
            sub._buffer.close()
        else:
            self._live.append(sub)
        return True

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(
            head=self._head,
            appended=self._appended,
            rejected_duplicate_terminals=self._dup_terminals,
            rejected_after_terminal=self._after_terminal,
            rejected_duplicate_starts=self._dup_starts,
            synthesized_starts=self._synth_starts,
            synthesized_terminals=self._synth_terminals,
            live_subscribers=len(self._live),
            catching_up_subscribers=len(self._catching_up),
            ended=self.ended,
        )


class _EntryReader:
    """What every reader of a run's entries shares: `receive_batch` and `close` are its own;
    one entry at a time (`receive`, `async for`) and `async with` (closing it) come from here."""

    _pending: list[JournalEntry]

    async def receive_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    async def receive(self) -> JournalEntry:
        if not self._pending:
            self._pending = await self.receive_batch()
            self._pending.reverse()
        return self._pending.pop()

    def __aiter__(self) -> AsyncIterator[JournalEntry]:
        return self

    async def __anext__(self) -> JournalEntry:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Subscription(_EntryReader):
    """One reader of a run journal, with its own laned buffer.

    Iterate it (`async for entry in sub`) or call `receive_batch()` to take what is ready at once
    (an SSE writer sends a batch as one body write). Cursors are strictly increasing across
    everything one subscription yields, replay and gap markers included. The iteration ends
    after the run's terminal entry. Cancellation leaves the subscription usable.
    """

    def __init__(self, journal: RunJournal, after: int, max_buffer_bytes: int) -> None:
        self._journal = journal
        # Entries carry cursors and readers resume after one: never reorder across streams.
        self._buffer = LaneBuffer(max_buffer_bytes, reorder_streams=False)
        self._resume_after = after
        self._catching_up = True
        self._last_delivered = after
        self._done = False
        self._closed = False
        self._pending: list[JournalEntry] = []
        self.catch_ups = 0

    @property
    def last_cursor(self) -> int:
        """The cursor of the last entry delivered (the `after` it was opened with before that)."""
        return self._last_delivered

    def _begin_catch_up(self, after: int) -> None:
        self._catching_up = True
        self._resume_after = after
        self.catch_ups += 1
        self._buffer.wake_receivers()  # a reader parked on an empty buffer must go read the store

    async def receive_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        """Wait for the next entries (at least one) and take up to `max_entries` of them.

        Raises `trio.EndOfChannel` after the run terminal was delivered or the journal closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("subscription is closed")
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._done:
                raise trio.EndOfChannel
            try:
                batch = self._buffer.receive_nowait_batch(max_entries)
            except trio.EndOfChannel:
                self._done = True
                raise
            if batch:
                return self._deliver(batch)
            if self._catching_up:
                await self._catch_up()
                continue
            # Woken by an offer, by close, or by the journal moving us to catch-up mode.
            await self._buffer.wait_readable()

    def _deliver(self, batch: list[JournalEntry]) -> list[JournalEntry]:
        self._last_delivered = batch[-1].cursor
        if self._journal._run_terminal is not None:
            terminal = self._journal._run_terminal.cursor
            if self._last_delivered >= terminal:
                self._done = True
        return batch

    async def _catch_up(self) -> None:
        journal = self._journal
        entries = await journal.store.read_after(self._resume_after, CATCH_UP_CHUNK)
        # Never read past what the journal has fanned out: those entries will be offered live.
        published = journal._published
        entries = [e for e in entries if self._resume_after < e.cursor <= published]
        # Only catch-up reads come from the store, so only they can hold gap markers.
        journal.viewer_gaps += sum(1 for e in entries if e.event.kind == Kind.GAP)
        self._buffer.backfill(entries)
        if entries:
            self._resume_after = entries[-1].cursor
        if journal._attach_if_caught_up(self):
            self._catching_up = False
        elif not entries:
            # The store has not caught up with issued cursors yet (a remote store mid-write).
            await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Stop following the journal. Idempotent."""
        if not self._closed:
            self._closed = True
            self._journal._detach(self)
            self._journal.viewer_folds += self._buffer.statistics().folded_statuses
            self._buffer.close()


class JournalTail(_EntryReader):
    """A reader of a run whose journal another process writes (a run of another server node):
    it reads the store after its cursor and, once it has everything, waits for more with
    `wait(after, timeout)` (e.g. a blocking read of a Redis stream; True when there may be
    entries after `after`), until it delivered the run's terminal. The same `receive_batch`
    and iteration as a `Subscription`; entries come as the store keeps them (gap markers
    included), so a tail is as exact as a replay."""

    def __init__(
        self,
        store: JournalStore,
        after: int,
        wait: Callable[[int, float], Awaitable[bool]],
        *,
        wait_timeout: float = 5.0,
    ) -> None:
        self._store = store
        self._after = after
        self._wait = wait
        self._wait_timeout = wait_timeout
        self._done = False
        self._closed = False
        self._pending: list[JournalEntry] = []

    @property
    def last_cursor(self) -> int:
        return self._after

    async def receive_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        """The next entries (at least one); `trio.EndOfChannel` after the run's terminal."""
        if self._closed:
            raise trio.ClosedResourceError("tail is closed")
        while True:
            if self._done:
                raise trio.EndOfChannel
            entries = await self._store.read_after(self._after, max_entries)
            if entries:
                for index, entry in enumerate(entries):
                    event = entry.event
                    if event.kind in Kind.RUN_TERMINALS and not event.delegation_id:
                        self._done = True
                        entries = entries[: index + 1]
                        break
                self._after = entries[-1].cursor
                return entries
            await self._wait(self._after, self._wait_timeout)
            await trio.lowlevel.checkpoint()

    def close(self) -> None:
        self._closed = True
