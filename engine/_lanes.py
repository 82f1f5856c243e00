"""Laned mailboxes: a byte-bounded buffer between a producer and a slower consumer.

This module owns the QoS policy of every buffer in the engine (DESIGN.md "QoS lanes"):

- critical events (starts, terminals, input requests, run lifecycle, gap markers) are never
  dropped, merged or reordered;
- important events are never dropped; a status identical to the same stream's status that is
  still waiting in the buffer is folded into it, and the fold is announced by a
  `stream.dropped` marker (reason `status_folded`) placed where the folded status would have been;
- volatile deltas (text, reasoning, tool-call arguments) are merged with the previous pending
  delta of the same (stream, message, kind) when nothing of the same stream stands between
  them. The merged entry takes the later position and the later cursor, so order and text are
  preserved and a reader resuming after that cursor misses nothing.

Merging happens only while an earlier delta is still pending, i.e. exactly when the consumer is
slower than the producer. The buffer is bounded in bytes (approximate payload size), not only in
count. What happens at the bound is the caller's choice: `send()` waits (backpressure; used by
actor mailboxes, so critical events are never dropped), `offer()` returns False and leaves the
buffer unchanged (used by the journal, which then lets that one reader catch up from the replay
window instead of slowing the run).

Theory of operation: the queue holds one-element lists ("cells") so an entry merged or folded
away can be tombstoned in O(1) without touching entries shared with other buffers. Nothing here
does I/O; waiting uses Trio parking lots.
"""

from __future__ import annotations

from collections import deque
from typing import Final

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

    Entries are shared between the journal and every reader's buffer and must be treated as
    immutable once the journal published them. `ticket` orders sends into one mailbox (see
    `LaneBuffer.flush`); `weight` is `event_weight(event)`, computed once.
    """

    __slots__ = ("cursor", "event", "ticket", "weight")

    def __init__(self, event: DelegationEvent, cursor: int = 0, weight: int | None = None) -> None:
        self.event = event
        self.cursor = cursor
        self.weight = event_weight(event) if weight is None else weight
        self.ticket = 0

    def __repr__(self) -> str:
        return f"JournalEntry(cursor={self.cursor}, kind={self.event.kind!r})"


@attrs.frozen
class LaneStatistics:
    """A snapshot of one buffer, for tests and metrics (like `trio.MemoryChannelStatistics`)."""

    pending_entries: int
    pending_bytes: int
    max_bytes: int
    merged_deltas: int
    folded_statuses: int
    refused_offers: int
    waiting_senders: int
    waiting_receivers: int
    closed: bool


_Cell = list[JournalEntry | None]  # [entry], or [None] once merged, folded or consumed


def _merge_deltas(earlier: JournalEntry, later: JournalEntry) -> JournalEntry:
    merged_event = attrs.evolve(
        later.event, delta=(earlier.event.delta or "") + (later.event.delta or "")
    )
    merged = JournalEntry(
        merged_event, later.cursor, earlier.weight + later.weight - EVENT_OVERHEAD
    )
    merged.ticket = later.ticket
    return merged


class LaneBuffer:
    """A laned, byte-bounded FIFO of `JournalEntry` between one producer side and one consumer.

    Cancellation: a cancelled `send()` or `receive_batch()` leaves the buffer unchanged.
    Closing: after `close()`, sends raise `trio.ClosedResourceError`; the consumer drains what is
    pending and then gets `trio.EndOfChannel`. `close()` is idempotent.
    """

    def __init__(self, max_bytes: int = 1 << 20) -> None:
        if max_bytes < EVENT_OVERHEAD:
            raise ValueError(f"max_bytes must be at least {EVENT_OVERHEAD}")
        self.max_bytes = max_bytes
        self._queue: deque[_Cell] = deque()
        self._live = 0
        self._bytes = 0
        # Merge bookkeeping: the last pending cell per producer stream, and per volatile key.
        self._last_of_stream: dict[str, _Cell] = {}
        self._last_delta: dict[tuple[str, str, str], _Cell] = {}
        self._last_status: dict[str, _Cell] = {}
        self._fold_notice: dict[str, _Cell] = {}
        self._closed = False
        self._receivers = trio.lowlevel.ParkingLot()
        self._senders = trio.lowlevel.ParkingLot()
        self._flushers = trio.lowlevel.ParkingLot()
        self._sent_ticket = 0
        self._acked_ticket = 0
        self._merged = 0
        self._folded = 0
        self._refused = 0

    # -- producer side -------------------------------------------------------------------

    def offer(self, entry: JournalEntry, *, force: bool = False) -> bool:
        """Add an entry without waiting; False (buffer unchanged) if it would pass the bound.

        Merging and folding are tried first, so a slow reader of deltas is refused only when
        what it has pending cannot be made smaller. `force` accepts it past the bound: for the
        rare critical event produced where nothing may wait.
        """
        if self._closed:
            raise trio.ClosedResourceError("lane buffer is closed")
        return self._put(entry, force=force)

    async def send(self, entry: JournalEntry) -> int:
        """Add an entry, waiting while the buffer is full; returns the entry's ticket.

        An entry larger than the whole bound is accepted once the buffer is empty, so one big
        event cannot wedge a producer forever.
        """
        while True:
            if self._closed:
                raise trio.ClosedResourceError("lane buffer is closed")
            if self._put(entry, force=self._live == 0):
                await trio.lowlevel.checkpoint()
                return entry.ticket
            await self._senders.park()

    def _put(self, entry: JournalEntry, *, force: bool) -> bool:
        event = entry.event
        kind = event.kind
        stream = event.delegation_id or ""
        last_of_stream = self._last_of_stream.get(stream)
        if lane_of(kind) == VOLATILE:
            key = (stream, event.message_id or event.tool_call_id or "", kind)
            cell = self._last_delta.get(key)
            if cell is not None and cell is last_of_stream and cell[0] is not None:
                earlier = cell[0]
                growth = entry.weight - EVENT_OVERHEAD
                if not force and self._bytes + growth > self.max_bytes:
                    self._refused += 1
                    return False
                self._tombstone(cell)
                merged = _merge_deltas(earlier, self._stamp(entry))
                self._append(merged, stream)
                self._last_delta[key] = self._last_of_stream[stream]
                self._merged += 1
                return True
        elif kind == Kind.STATUS:
            cell = self._last_status.get(stream)
            if cell is not None and cell[0] is not None and _same_status(cell[0].event, event):
                self._stamp(entry)
                self._fold_status(cell, entry, stream)
                return True
        if not force and self._live and self._bytes + entry.weight > self.max_bytes:
            self._refused += 1
            return False
        self._stamp(entry)
        self._append(entry, stream)
        if lane_of(kind) == VOLATILE:
            self._last_delta[(stream, event.message_id or event.tool_call_id or "", kind)] = (
                self._last_of_stream[stream]
            )
        elif kind == Kind.STATUS:
            self._last_status[stream] = self._last_of_stream[stream]
        return True

    def _stamp(self, entry: JournalEntry) -> JournalEntry:
        self._sent_ticket += 1
        entry.ticket = self._sent_ticket
        return entry

    def _append(self, entry: JournalEntry, stream: str) -> None:
        cell: _Cell = [entry]
        self._queue.append(cell)
        self._live += 1
        self._bytes += entry.weight
        self._last_of_stream[stream] = cell
        if self._receivers:
            self._receivers.unpark()

    def _tombstone(self, cell: _Cell) -> None:
        entry = cell[0]
        assert entry is not None
        cell[0] = None
        self._live -= 1
        self._bytes -= entry.weight

    def _fold_status(self, cell: _Cell, folded: JournalEntry, stream: str) -> None:
        """Fold a repeated status into the pending one and count it on a drop notice."""
        self._folded += 1
        notice_cell = self._fold_notice.get(stream)
        if notice_cell is not None and notice_cell[0] is not None:
            notice: JournalEntry = notice_cell[0]
            report = notice.event.dropped or DropReport(reason="status_folded")
            updated = attrs.evolve(
                notice.event,
                dropped=attrs.evolve(
                    report,
                    count=report.count + 1,
                    bytes=report.bytes + folded.weight,
                    last_cursor=folded.cursor or report.last_cursor,
                ),
            )
            replacement = JournalEntry(updated, notice.cursor, notice.weight)
            replacement.ticket = folded.ticket
            notice_cell[0] = replacement
            return
        source = folded.event
        marker = DelegationEvent(
            kind=Kind.STREAM_DROPPED if source.delegation_id else Kind.DROPPED,
            run_id=source.run_id,
            time=source.time,
            delegation_id=source.delegation_id,
            parent_tool_call_id=source.parent_tool_call_id,
            agent_key=source.agent_key,
            agent_name=source.agent_name,
            protocol=source.protocol,
            dropped=DropReport(
                reason="status_folded",
                count=1,
                bytes=folded.weight,
                kinds={Kind.STATUS: 1},
                first_cursor=folded.cursor or None,
                last_cursor=folded.cursor or None,
            ),
        )
        # The marker takes the folded status's cursor: a reader resuming after it has
        # seen everything up to there (the status it stands for equals one already pending).
        entry = JournalEntry(marker, folded.cursor, EVENT_OVERHEAD)
        entry.ticket = folded.ticket
        self._append(entry, stream)
        self._fold_notice[stream] = self._last_of_stream[stream]

    # -- consumer side -------------------------------------------------------------------

    def receive_nowait_batch(self, max_entries: int = 512) -> list[JournalEntry]:
        """Take up to `max_entries` pending entries in order; [] if none (or EndOfChannel)."""
        batch: list[JournalEntry] = []
        queue = self._queue
        while queue and len(batch) < max_entries:
            cell = queue.popleft()
            entry = cell[0]
            if entry is not None:
                cell[0] = None  # consumed: later entries must not merge or fold into it
                batch.append(entry)
                self._bytes -= entry.weight
        if batch:
            self._live -= len(batch)
            if not queue:
                self._forget_pending()
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

    def _forget_pending(self) -> None:
        self._last_of_stream.clear()
        self._last_delta.clear()
        self._last_status.clear()
        self._fold_notice.clear()

    def acknowledge(self, batch: list[JournalEntry]) -> None:
        """The consumer has fully handled `batch`; wakes `flush()` callers it covers."""
        if batch:
            self._acked_ticket = max(self._acked_ticket, max(e.ticket for e in batch))
            if self._flushers:
                self._flushers.unpark_all()

    async def flush(self) -> None:
        """Wait until everything sent so far has been received and acknowledged."""
        target = self._sent_ticket
        while self._acked_ticket < target:
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
            merged_deltas=self._merged,
            folded_statuses=self._folded,
            refused_offers=self._refused,
            waiting_senders=len(self._senders),
            waiting_receivers=len(self._receivers),
            closed=self._closed,
        )


def _same_status(a: DelegationEvent, b: DelegationEvent) -> bool:
    return a.status == b.status and a.text == b.text and a.raw == b.raw
