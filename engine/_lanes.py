"""Laned mailboxes: a byte-bounded buffer between a producer and a slower consumer.

This module owns the QoS policy of every buffer in the engine:

- critical events (starts, terminals, input requests, run lifecycle, gap markers) are never
  dropped, merged or reordered;
- important events are never dropped; a status identical to the same stream's status that is
  still waiting in the buffer is folded into it, and the fold is announced by a
  `stream.dropped` marker (reason `status_folded`) placed where the folded status would have been;
- volatile deltas (text, reasoning, tool-call arguments) are merged with the previous pending
  delta of the same (stream, message, kind); order and text are preserved.

Merging and folding happen only under pressure: once the pending bytes pass `pressure_bytes`
(half the bound by default), i.e. when the consumer is behind. Below it every entry is queued as
it is, in O(1), and a batch from the journal is queued in one step.

Where a merged entry may go depends on whether entries already carry journal cursors:

- `reorder_streams=True` (actor mailboxes, before cursors exist): a delta merges into the last
  pending delta of its key when nothing *of the same stream* stands between them; the merged
  entry takes the later position, so entries of other streams may be overtaken. Per stream the
  order is unchanged.
- `reorder_streams=False` (journal readers, whose entries carry cursors and who resume "after
  cursor N"): only the queue's tail may absorb an entry. Moving text past an entry with a smaller
  cursor would make a reader that resumes after that entry lose the text, so it never happens.

The buffer is bounded in bytes (approximate payload size), not only in count. What happens at the
bound is the caller's choice: `send()` waits (backpressure; used by actor mailboxes, so critical
events are never dropped), `offer()` returns False and leaves the buffer unchanged (used by the
journal, which then lets that one reader catch up from the replay window instead of slowing the
run). `flush()` waits until the consumer acknowledged everything queued before the call; a delta
merged into a later entry counts as handled once that later entry is.

Theory of operation: below pressure the queue holds plain entries. Entering pressure converts
the pending ones into `_Cell`s (mutable, so a merged or folded entry is tombstoned in O(1) without
touching entries shared with other buffers) and indexes them per stream and key; merges are lazy
(a cell collects the delta pieces and the merged event is built once, when received). When the
queue drains, the buffer leaves pressure and drops its indexes. Nothing here does I/O; waiting
uses Trio parking lots.
"""

from __future__ import annotations

import operator
from collections import deque
from typing import Final, cast

import attrs
import trio

from engine._events import VOLATILE, DelegationEvent, DropReport, Kind, lane_of

__all__ = ["JournalEntry", "LaneBuffer", "LaneStatistics", "event_weight"]

#: Approximate fixed cost of one event in bytes (the envelope fields), used for byte bounds.
EVENT_OVERHEAD: Final = 160


def event_weight(event: DelegationEvent) -> int:
    """Approximate payload size of an event in bytes; cheap enough for the hot path."""
    weight = EVENT_OVERHEAD
    if event.delta is not None:
        weight += len(event.delta)
    if event.text is not None:
        weight += len(event.text)
    if event.raw is not None or event.args is not None or event.result is not None:
        weight += 256  # structured payloads are bounded upstream; count them coarsely
    return weight


class JournalEntry:
    """An event with its place in a run: `cursor` (0 until the journal assigns it).

    Entries are shared between the journal and every reader's buffer: nothing may change one
    after the journal published it. `weight` is `event_weight(event)`, computed once.
    """

    __slots__ = ("cursor", "event", "weight")

    def __init__(self, event: DelegationEvent, cursor: int = 0, weight: int | None = None) -> None:
        self.event = event
        self.cursor = cursor
        self.weight = event_weight(event) if weight is None else weight

    def __repr__(self) -> str:
        return f"JournalEntry(cursor={self.cursor}, kind={self.event.kind!r})"


@attrs.frozen
class LaneStatistics:
    """A snapshot of one buffer, for tests and metrics (like `trio.MemoryChannelStatistics`)."""

    pending_entries: int
    pending_bytes: int
    max_bytes: int
    pressured: bool
    merged_deltas: int
    folded_statuses: int
    refused_offers: int
    waiting_senders: int
    waiting_receivers: int
    closed: bool


class _Cell:
    """A queued entry under pressure. `entry` is None once merged away, folded or consumed;
    `pieces` holds the deltas of a lazily merged entry (`entry` is the last one merged)."""

    __slots__ = ("entry", "pieces", "weight")

    def __init__(self, entry: JournalEntry) -> None:
        self.entry: JournalEntry | None = entry
        self.pieces: list[str] | None = None
        self.weight = entry.weight

    def take(self) -> JournalEntry:
        entry = self.entry
        assert entry is not None
        self.entry = None
        if self.pieces is None:
            return entry
        merged = attrs.evolve(entry.event, delta="".join(self.pieces))
        return JournalEntry(merged, entry.cursor, self.weight)


_weight_of: Final = operator.attrgetter("weight")


def _stream_of(event: DelegationEvent) -> str:
    return event.delegation_id or ""


def _delta_key(event: DelegationEvent) -> tuple[str, str, str]:
    return (event.delegation_id or "", event.message_id or event.tool_call_id or "", event.kind)


def _same_status(a: DelegationEvent, b: DelegationEvent) -> bool:
    """A status that repeats the last one of the same subagent (a nested one is its own)."""
    return (
        a.status == b.status and a.text == b.text and a.raw == b.raw and a.nested_id == b.nested_id
    )


class LaneBuffer:
    """A laned, byte-bounded FIFO of `JournalEntry` between producers and one consumer.

    Cancellation: a cancelled `send()` or `receive_batch()` leaves the buffer unchanged.
    Closing: after `close()`, sends raise `trio.ClosedResourceError`; the consumer drains what is
    pending and then gets `trio.EndOfChannel`. `close()` is idempotent.
    """

    def __init__(
        self,
        max_bytes: int = 1 << 20,
        *,
        pressure_bytes: int | None = None,
        reorder_streams: bool = True,
    ) -> None:
        if max_bytes < EVENT_OVERHEAD:
            raise ValueError(f"max_bytes must be at least {EVENT_OVERHEAD}")
        self.max_bytes = max_bytes
        self.pressure_bytes = max_bytes // 2 if pressure_bytes is None else pressure_bytes
        self.reorder_streams = reorder_streams
        self._queue: deque[JournalEntry | _Cell] = deque()
        self._live = 0
        self._bytes = 0
        self._pressured = False
        # Indexes, valid only while pressured.
        self._tail: _Cell | None = None
        self._last_of_stream: dict[str, _Cell] = {}
        self._last_delta: dict[tuple[str, str, str], _Cell] = {}
        self._last_status: dict[str, _Cell] = {}
        self._fold_notice: dict[str, _Cell] = {}
        self._closed = False
        self._receivers = trio.lowlevel.ParkingLot()
        self._senders = trio.lowlevel.ParkingLot()
        self._flushers = trio.lowlevel.ParkingLot()
        # Flush accounting by queue position: len(queue) == _enqueued - _popped.
        self._enqueued = 0
        self._popped = 0
        self._received_mark = 0
        self._acked = 0
        self._merged = 0
        self._folded = 0
        self._refused = 0

    # -- producer side -------------------------------------------------------------------

    def offer(self, entry: JournalEntry, *, force: bool = False) -> bool:
        """Add an entry without waiting; False (buffer unchanged) if it would pass the bound.

        Under pressure, merging and folding are tried first, so a slow reader of deltas is
        refused only when what it has pending cannot be made smaller. `force` accepts it past
        the bound: for the rare critical event produced where nothing may wait.
        """
        if self._closed:
            raise trio.ClosedResourceError("lane buffer is closed")
        if not self._pressured:
            if self._bytes + entry.weight <= self.pressure_bytes:
                self._queue.append(entry)
                self._bytes += entry.weight
                self._live += 1
                self._enqueued += 1
                if self._receivers:
                    self._receivers.unpark()
                return True
            self._enter_pressure()
        accepted = self._put(entry, force)
        if accepted and self._receivers:
            self._receivers.unpark()
        return accepted

    def offer_many(self, entries: list[JournalEntry], weight: int) -> int:
        """Offer a batch whose weights sum to `weight`; returns how many (a prefix) it took."""
        if self._closed:
            raise trio.ClosedResourceError("lane buffer is closed")
        if not self._pressured and self._bytes + weight <= self.pressure_bytes:
            self._queue.extend(entries)
            self._bytes += weight
            self._live += len(entries)
            self._enqueued += len(entries)
            if self._receivers:
                self._receivers.unpark()
            return len(entries)
        taken = 0
        for entry in entries:
            if not self.offer(entry):
                break
            taken += 1
        return taken

    def backfill(self, entries: list[JournalEntry]) -> None:
        """Queue entries a reader is catching up on, past the bound.

        Such a reader is behind by definition, so they are merged and folded as under pressure:
        a reconnecting viewer gets a long text as a few merged deltas, not thousands.
        """
        if self._closed:
            raise trio.ClosedResourceError("lane buffer is closed")
        if not entries:
            return
        if not self._pressured:
            self._enter_pressure()
        for entry in entries:
            self._put(entry, True)
        if self._receivers:
            self._receivers.unpark()

    async def send(self, entry: JournalEntry) -> None:
        """Add an entry, waiting while the buffer is full. A cancel point; a schedule point only
        when it has to wait.

        An entry larger than the whole bound is accepted once the buffer is empty, so one big
        event cannot wedge a producer forever.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        # No schedule point when the entry fits: a producer reading from a socket yields there
        # anyway, and not yielding per event lets the consumer take whole batches (measured:
        # one scheduler round per event cost a remote stream half its throughput).
        while not self.offer(entry, force=self._live == 0):
            await self._senders.park()

    def _enter_pressure(self) -> None:
        pending = self._queue
        self._queue = deque()
        self._pressured = True
        for item in pending:
            cell = item if isinstance(item, _Cell) else _Cell(item)
            self._queue.append(cell)
            if cell.entry is not None:
                self._index(cell)

    def _leave_pressure(self) -> None:
        self._pressured = False
        self._tail = None
        self._last_of_stream.clear()
        self._last_delta.clear()
        self._last_status.clear()
        self._fold_notice.clear()

    def _index(self, cell: _Cell) -> None:
        assert cell.entry is not None
        event = cell.entry.event
        stream = _stream_of(event)
        self._tail = cell
        self._last_of_stream[stream] = cell
        if lane_of(event.kind) == VOLATILE:
            self._last_delta[_delta_key(event)] = cell
        elif event.kind == Kind.STATUS:
            self._last_status[stream] = cell

    def _may_absorb(self, cell: _Cell | None, stream: str) -> bool:
        """Whether a new entry of `stream` may be merged into (or folded onto) `cell`."""
        if cell is None or cell.entry is None:
            return False
        if self.reorder_streams:
            return cell is self._last_of_stream.get(stream)
        return cell is self._tail

    def _append_cell(self, cell: _Cell) -> None:
        self._queue.append(cell)
        self._enqueued += 1
        self._live += 1
        self._bytes += cell.weight
        self._index(cell)

    def _tombstone(self, cell: _Cell) -> None:
        cell.entry = None
        self._live -= 1
        self._bytes -= cell.weight

    def _put(self, entry: JournalEntry, force: bool) -> bool:
        event = entry.event
        kind = event.kind
        stream = _stream_of(event)
        if lane_of(kind) == VOLATILE:
            cell = self._last_delta.get(_delta_key(event))
            if cell is not None and self._may_absorb(cell, stream):
                growth = entry.weight - EVENT_OVERHEAD
                if not force and self._bytes + growth > self.max_bytes:
                    self._refused += 1
                    return False
                self._merge(cell, entry, growth)
                return True
        elif kind == Kind.STATUS:
            status_cell = self._last_status.get(stream)
            if (
                status_cell is not None
                and status_cell.entry is not None
                and _same_status(status_cell.entry.event, event)
            ):
                # A mailbox folds onto any pending identical status of the stream (a state
                # repeated adds nothing); a reader's buffer only at its tail (cursor order).
                notice = self._fold_notice.get(stream)
                if (
                    self.reorder_streams
                    or status_cell is self._tail
                    or (notice is not None and notice is self._tail)
                ):
                    return self._fold(entry, stream, force)
        if not force and self._bytes + entry.weight > self.max_bytes:
            self._refused += 1
            return False
        self._append_cell(_Cell(entry))
        return True

    def _merge(self, cell: _Cell, entry: JournalEntry, growth: int) -> None:
        earlier = cell.entry
        assert earlier is not None
        pieces = cell.pieces if cell.pieces is not None else [earlier.event.delta or ""]
        pieces.append(entry.event.delta or "")
        self._merged += 1
        if cell is self._tail:
            # In place: the tail takes the later entry's cursor; nothing is overtaken.
            cell.entry = entry
            cell.pieces = pieces
            cell.weight += growth
            self._bytes += growth
            return
        self._tombstone(cell)
        merged = _Cell(entry)
        merged.pieces = pieces
        merged.weight = cell.weight + growth
        self._append_cell(merged)

    def _fold(self, folded: JournalEntry, stream: str, force: bool) -> bool:
        """Fold a repeated status into the pending one; count it on a drop notice."""
        notice = self._fold_notice.get(stream)
        if (
            notice is not None
            and notice.entry is not None
            and (self.reorder_streams or notice is self._tail)
        ):
            report = notice.entry.event.dropped or DropReport(reason="status_folded")
            kinds = dict(report.kinds or {})
            kinds[Kind.STATUS] = kinds.get(Kind.STATUS, 0) + 1
            updated = attrs.evolve(
                notice.entry.event,
                dropped=attrs.evolve(
                    report,
                    count=report.count + 1,
                    bytes=report.bytes + folded.weight,
                    kinds=kinds,
                    last_cursor=folded.cursor or report.last_cursor,
                ),
            )
            # The notice stands where the last folded status would have been, with its cursor.
            replacement = JournalEntry(
                updated, folded.cursor or notice.entry.cursor, EVENT_OVERHEAD
            )
            self._folded += 1
            if notice is self._tail:
                notice.entry = replacement
            else:
                self._tombstone(notice)
                cell = _Cell(replacement)
                self._append_cell(cell)
                self._fold_notice[stream] = cell
            return True
        if not force and self._bytes + EVENT_OVERHEAD > self.max_bytes:
            self._refused += 1
            return False
        self._folded += 1
        source = folded.event
        marker = source.derived(
            Kind.STREAM_DROPPED if source.delegation_id else Kind.DROPPED,
            dropped=DropReport(
                reason="status_folded",
                count=1,
                bytes=folded.weight,
                kinds={Kind.STATUS: 1},
                first_cursor=folded.cursor or None,
                last_cursor=folded.cursor or None,
            ),
        )
        # The marker takes the folded status's cursor: a reader resuming after it has seen
        # everything up to there (the status it stands for equals one already pending).
        cell = _Cell(JournalEntry(marker, folded.cursor, EVENT_OVERHEAD))
        self._append_cell(cell)
        self._fold_notice[stream] = cell
        return True

    # -- consumer side -------------------------------------------------------------------

    def receive_nowait_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        """Take up to `max_entries` pending entries in order; [] if none.

        Raises `trio.EndOfChannel` once closed and drained.
        """
        queue = self._queue
        if not self._pressured and queue:
            # Out of pressure the queue holds plain entries only (cells exist under pressure).
            if len(queue) <= max_entries:
                plain = cast("list[JournalEntry]", list(queue))
                queue.clear()
            else:
                popleft = queue.popleft
                plain = cast("list[JournalEntry]", [popleft() for _ in range(max_entries)])
            self._bytes -= sum(map(_weight_of, plain))
            self._popped += len(plain)
            self._received_mark = self._popped
            self._live -= len(plain)
            if self._senders:
                self._senders.unpark_all()
            return plain
        batch: list[JournalEntry] = []
        popped = 0
        while queue and len(batch) < max_entries:
            item = queue.popleft()
            popped += 1
            if type(item) is JournalEntry:
                batch.append(item)
                self._bytes -= item.weight
            else:
                assert isinstance(item, _Cell)
                if item.entry is not None:
                    self._bytes -= item.weight
                    batch.append(item.take())
        self._popped += popped
        self._received_mark = self._popped
        if batch:
            self._live -= len(batch)
            if not queue and self._pressured:
                self._leave_pressure()
            if self._senders:
                self._senders.unpark_all()
        elif self._closed:
            raise trio.EndOfChannel
        return batch

    async def receive_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        """Wait for at least one entry, then take up to `max_entries` in order.

        Raises `trio.EndOfChannel` once the buffer is closed and drained.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            batch = self.receive_nowait_batch(max_entries)
            if batch:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return batch
            await self._receivers.park()

    async def wait_readable(self) -> None:
        """Wait until an entry is pending, the buffer is closed, or `wake_receivers()`."""
        if self._live or self._closed:
            await trio.lowlevel.checkpoint()
            return
        await self._receivers.park()

    def wake_receivers(self) -> None:
        """Wake consumers parked in `wait_readable()` so they re-check their own state."""
        self._receivers.unpark_all()

    def acknowledge(self) -> None:
        """The consumer has fully handled everything it received so far; wakes `flush()`."""
        self._acked = self._received_mark
        if self._flushers:
            self._flushers.unpark_all()

    async def flush(self) -> None:
        """Wait until everything queued before this call was received and acknowledged.

        Returns early (without error) if the buffer is closed and drained meanwhile.
        """
        target = self._enqueued
        while self._acked < target:
            if self._closed and not self._live:
                return
            await self._flushers.park()

    def close(self) -> None:
        self._closed = True
        self._receivers.unpark_all()
        self._senders.unpark_all()
        self._flushers.unpark_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return self._live

    def statistics(self) -> LaneStatistics:
        return LaneStatistics(
            pending_entries=self._live,
            pending_bytes=self._bytes,
            max_bytes=self.max_bytes,
            pressured=self._pressured,
            merged_deltas=self._merged,
            folded_statuses=self._folded,
            refused_offers=self._refused,
            waiting_senders=len(self._senders),
            waiting_receivers=len(self._receivers),
            closed=self._closed,
        )
