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

Storage is a seam (`JournalStore`): the in-memory `MemoryJournalStore` keeps a bounded replay
window (events and bytes) plus every critical event beyond it, so a reader whose cursor fell out
of the window gets explicit `stream.gap` markers interleaved with the starts and terminals it
would otherwise miss. Beyond the window it also keeps what opens and closes the things a viewer
holds open (each text message, reasoning message, tool call and nested subagent: its first
event, its end, a tool call's result), so a viewer resuming at any cursor can be brought back
to exactly what it had open, and is given every close it missed. A durable store (Redis
Streams) implements the same two async methods.

Subscribers each read through their own `LaneBuffer`. Fan-out never waits: when a reader's
buffer refuses an entry, that reader alone drops back to reading the store from its own cursor
and rejoins the live fan-out once it has caught up. A slow reader therefore costs the run nothing
and other readers nothing; what it may lose is bounded by the window and always announced.
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Final, Protocol

import attrs
import trio
import trio.lowlevel

from engine._events import CRITICAL, DelegationEvent, DropReport, Kind, lane_of
from engine._lanes import EVENT_OVERHEAD, JournalEntry, LaneBuffer
from engine._results import DelegationError, ErrorCode

__all__ = [
    "CursorError",
    "JournalStatistics",
    "JournalStore",
    "MemoryJournalStore",
    "RunJournal",
    "Subscription",
]

#: Kinds `_admit` treats specially even inside an open delegation (the rest are just issued).
_LIFECYCLE: Final = frozenset({Kind.RUN_STARTED, Kind.STARTED, *Kind.DELEGATION_TERMINALS})

#: Critical kinds a store keeps after they leave the replay window (gap markers are per reader).
_RETAINED_KINDS: Final = frozenset(
    kind
    for kind in (
        Kind.STARTED,
        Kind.INPUT_REQUIRED,
        Kind.RUN_STARTED,
        *Kind.DELEGATION_TERMINALS,
        *Kind.RUN_TERMINALS,
    )
    if lane_of(kind) == CRITICAL
)

#: Kinds that open, carry or close a thing a viewer holds open: (family, role). The first event
#: of each thing (an explicit start, or content that opens it implicitly) and its closes are
#: kept beyond the window (`_Lifecycles`).
_ENTITY_ROLES: Final[dict[str, tuple[str, str]]] = {
    Kind.TEXT_START: ("text", "open"),
    Kind.TEXT_DELTA: ("text", "content"),
    Kind.TEXT_END: ("text", "close"),
    Kind.PARENT_TEXT_START: ("text", "open"),
    Kind.PARENT_TEXT_DELTA: ("text", "content"),
    Kind.PARENT_TEXT_END: ("text", "close"),
    Kind.REASONING_START: ("reasoning", "open"),
    Kind.REASONING_DELTA: ("reasoning", "content"),
    Kind.REASONING_END: ("reasoning", "close"),
    Kind.PARENT_REASONING_START: ("reasoning", "open"),
    Kind.PARENT_REASONING_DELTA: ("reasoning", "content"),
    Kind.PARENT_REASONING_END: ("reasoning", "close"),
    Kind.TOOL_CALL_START: ("tool", "open"),
    Kind.TOOL_CALL_ARGS: ("tool", "content"),
    Kind.TOOL_CALL_END: ("tool", "end"),
    Kind.TOOL_CALL_RESULT: ("tool", "close"),
    Kind.PARENT_TOOL_CALL_START: ("tool", "open"),
    Kind.PARENT_TOOL_CALL_ARGS: ("tool", "content"),
    Kind.PARENT_TOOL_CALL_END: ("tool", "end"),
    Kind.PARENT_TOOL_CALL_RESULT: ("tool", "close"),
}


#: Events with a `nested_id` that do not open that nested subagent (a fold marker is shown as
#: its ancestor's).
_NOT_OPENING_NESTED: Final = frozenset({Kind.NESTED_FOLDED, *Kind.NESTED_TERMINALS})


def _has_text(event: DelegationEvent) -> bool:
    text = event.delta if event.delta is not None else event.text
    return isinstance(text, str) and text != ""


class _Lifecycles:
    """Which entries leaving the window must be kept so that replaying what a store still holds
    rebuilds what a viewer had open at any cursor: the first event of every text message,
    reasoning message, tool call and nested subagent (whatever kind opened it), the events that
    close or end them, and tool results. Fed the evicted entries in cursor order; remembers only
    the things still open at the window's start (an ended delegation, nested subagent or run
    closes everything it held)."""

    def __init__(self) -> None:
        self._open: set[tuple[object, ...]] = set()  # things open as of the window's start

    def keep(self, event: DelegationEvent) -> bool:
        kind = event.kind
        did = event.delegation_id or None
        nested = event.nested_id
        try:
            keep = False
            if nested is not None and kind not in _NOT_OPENING_NESTED:
                # A nested subagent's first event opens it (announced if it was no start).
                subagent = ("nested", did, nested)
                if subagent not in self._open:
                    self._open.add(subagent)
                    keep = True
            role = _ENTITY_ROLES.get(kind)
            if role is not None:
                family, action = role
                ident = event.tool_call_id if family == "tool" else event.message_id
                thing = (family, did, nested, ident or "")
                if action == "content":
                    if thing not in self._open:
                        keep = True
                        # Text without characters opens no message (viewers drop it); the first
                        # that has some does, so until then each is kept. Any tool-call
                        # argument event opens its call.
                        if family == "tool" or _has_text(event):
                            self._open.add(thing)
                elif action == "open":
                    self._open.add(thing)
                    keep = True
                elif action == "end":
                    keep = True  # the call stays known (its result may follow)
                else:
                    self._open.discard(thing)
                    keep = True
            elif kind in Kind.DELEGATION_TERMINALS:
                self._open = {t for t in self._open if t[1] != did}
            elif kind in Kind.NESTED_TERMINALS:
                self._open = {t for t in self._open if t[2] != nested}
                keep = True
            elif kind in Kind.RUN_TERMINALS and did is None:
                self._open.clear()
            return keep
        except TypeError:  # an unhashable id: keep the entry rather than guess
            return True


#: How many entries a catching-up reader pulls from the store at a time.
CATCH_UP_CHUNK: Final = 512


class CursorError(ValueError):
    """A reader asked for a cursor this journal never issued (ahead of its head, or negative)."""


class JournalStore(Protocol):
    """Where a run's entries are kept for replay. Implementations must keep cursor order."""

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        """Persist entries whose cursors continue the store's sequence without holes."""

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        """Entries with cursors above `cursor`, in order, at most `max_entries` of them.

        Where the store no longer holds some cursors, it returns `stream.gap` entries in their
        place (cursor = the last missing cursor of that stretch) and keeps every critical entry
        it still retains, so the result is strictly increasing in cursor.
        """


class MemoryJournalStore:
    """A bounded in-memory replay window plus the critical events that fell out of it."""

    def __init__(
        self,
        run_id: str,
        *,
        max_events: int = 10_000,
        max_bytes: int = 8 << 20,
        max_retained_critical: int = 10_000,
    ) -> None:
        if max_events < 1 or max_bytes < EVENT_OVERHEAD:
            raise ValueError("replay window must hold at least one event")
        self.run_id = run_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_retained_critical = max_retained_critical
        self._window: list[JournalEntry] = []
        self._start = 0  # index of the first live entry of `_window`
        self._bytes = 0
        self._first_cursor = 1  # cursor of the oldest entry still in the window
        self._critical: list[JournalEntry] = []  # criticals evicted from the window, by cursor
        self._critical_cursors: list[int] = []
        self._lifecycles = _Lifecycles()
        self.evicted = 0

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        self.append_nowait(entries)

    def append_nowait(self, entries: Sequence[JournalEntry]) -> None:
        window = self._window
        for entry in entries:
            window.append(entry)
            self._bytes += entry.weight
        if len(window) - self._start > self.max_events or self._bytes > self.max_bytes:
            self._evict()

    def _evict(self) -> None:
        # One pass per batch: find how many entries fall out, then move them in bulk.
        window = self._window
        keep_events = self.max_events
        keep_bytes = self.max_bytes
        start = self._start
        size = len(window) - start
        evicted_bytes = 0
        stop = start
        while size > 1 and (size > keep_events or self._bytes - evicted_bytes > keep_bytes):
            evicted_bytes += window[stop].weight
            stop += 1
            size -= 1
        if stop == start:
            return
        keep = self._lifecycles.keep
        for entry in window[start:stop]:
            event = entry.event
            # Both checks for every entry: `keep` also follows what the window's start has open.
            if keep(event) or event.kind in _RETAINED_KINDS:
                self._critical.append(entry)
                self._critical_cursors.append(entry.cursor)
        overflow = len(self._critical) - self.max_retained_critical
        if overflow > 0:
            del self._critical[:overflow], self._critical_cursors[:overflow]
        self.evicted += stop - start
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

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return self.read_after_nowait(cursor, max_entries)

    def read_after_nowait(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        if cursor + 1 < self._first_cursor:
            # Walk the stretch the window lost: gap markers around each retained critical.
            lo = bisect.bisect_right(self._critical_cursors, cursor)
            hi = bisect.bisect_left(self._critical_cursors, self._first_cursor)
            gap_from = cursor + 1
            for critical in self._critical[lo:hi]:
                if critical.cursor > gap_from:
                    out.append(self._gap(gap_from, critical.cursor - 1))
                out.append(critical)
                gap_from = critical.cursor + 1
                if len(out) >= max_entries:
                    return out
            if gap_from < self._first_cursor:
                out.append(self._gap(gap_from, self._first_cursor - 1))
            cursor = self._first_cursor - 1
        index = self._start + (cursor + 1 - self._first_cursor)
        out.extend(self._window[index : index + max(0, max_entries - len(out))])
        return out

    def _gap(self, first: int, last: int) -> JournalEntry:
        marker = DelegationEvent(
            kind=Kind.GAP,
            run_id=self.run_id,
            dropped=DropReport(
                reason="replay_gap",
                count=last - first + 1,
                first_cursor=first,
                last_cursor=last,
            ),
        )
        return JournalEntry(marker, last, EVENT_OVERHEAD)


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
        if self._closed or self._run_terminal is not None:
            # Nothing more will ever be published: end once the buffer is drained.
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


class Subscription:
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
        self._buffer.backfill(entries)
        if entries:
            self._resume_after = entries[-1].cursor
        if journal._attach_if_caught_up(self):
            self._catching_up = False
        elif not entries:
            # The store has not caught up with issued cursors yet (a remote store mid-write).
            await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

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

    def close(self) -> None:
        """Stop following the journal. Idempotent."""
        if not self._closed:
            self._closed = True
            self._journal._detach(self)
            self._buffer.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
