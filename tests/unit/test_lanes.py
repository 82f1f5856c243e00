"""LaneBuffer: FIFO order, the byte bound, backpressure, the QoS lanes, close and flush."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from engine import (
    DelegationEvent,
    DropReport,
    JournalEntry,
    Kind,
    LaneBuffer,
    event_weight,
)
from engine._lanes import EVENT_OVERHEAD

RUN = "run-1"


def event(kind: str, delegation: str | None = "d1", **fields: object) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id=RUN, delegation_id=delegation, **fields)


def entry(kind: str, cursor: int, delegation: str | None = "d1", **fields: object) -> JournalEntry:
    return JournalEntry(event(kind, delegation, **fields), cursor)


def delta(
    cursor: int,
    text: str,
    delegation: str | None = "d1",
    message: str = "m1",
    kind: str = Kind.TEXT_DELTA,
) -> JournalEntry:
    return entry(kind, cursor, delegation, message_id=message, delta=text)


def status(cursor: int, value: str = "working", delegation: str = "d1", text: str | None = None):
    return entry(Kind.STATUS, cursor, delegation, status=value, text=text)


def started(cursor: int, delegation: str = "d1") -> JournalEntry:
    return entry(Kind.STARTED, cursor, delegation)


def drain(buffer: LaneBuffer) -> list[JournalEntry]:
    """Everything pending, in order (a closed buffer's EndOfChannel ends the drain)."""
    out: list[JournalEntry] = []
    try:
        while batch := buffer.receive_nowait_batch():
            out.extend(batch)
    except trio.EndOfChannel:
        pass
    return out


def summary(entries: list[JournalEntry]) -> list[tuple[int, str, str | None]]:
    return [(e.cursor, e.event.kind, e.event.delta) for e in entries]


# -- order and the byte bound ----------------------------------------------------------------


def test_entries_come_out_in_fifo_order() -> None:
    buffer = LaneBuffer()
    sent = [
        started(1),
        status(2),
        delta(3, "a", delegation="d2"),
        entry(Kind.ARTIFACT, 4),
        delta(5, "b", delegation="d1"),
        entry(Kind.FINISHED, 6),
    ]
    for item in sent:
        assert buffer.offer(item) is True
    assert buffer.statistics().pending_entries == 6
    assert len(buffer) == 6

    received = buffer.receive_nowait_batch()

    assert received == sent
    assert [e.cursor for e in received] == [1, 2, 3, 4, 5, 6]
    assert buffer.receive_nowait_batch() == []
    assert buffer.statistics().pending_entries == 0
    assert buffer.statistics().pending_bytes == 0


def test_receive_batch_respects_max_entries() -> None:
    buffer = LaneBuffer()
    for cursor in range(1, 6):
        buffer.offer(entry(Kind.ARTIFACT, cursor))

    assert [e.cursor for e in buffer.receive_nowait_batch(2)] == [1, 2]
    assert [e.cursor for e in buffer.receive_nowait_batch(2)] == [3, 4]
    assert [e.cursor for e in buffer.receive_nowait_batch(2)] == [5]
    assert buffer.receive_nowait_batch(2) == []


def test_pending_bytes_is_the_sum_of_event_weights() -> None:
    buffer = LaneBuffer()
    first = delta(1, "hello", delegation="d1")
    second = entry(Kind.STATUS, 2, status="working", text="reading the docs")
    buffer.offer(first)
    buffer.offer(second)

    assert event_weight(first.event) == EVENT_OVERHEAD + 5
    assert event_weight(second.event) == EVENT_OVERHEAD + len("reading the docs")
    assert buffer.statistics().pending_bytes == 2 * EVENT_OVERHEAD + 5 + 16

    buffer.receive_nowait_batch(1)
    assert buffer.statistics().pending_bytes == EVENT_OVERHEAD + 16


def test_max_bytes_below_one_event_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        LaneBuffer(max_bytes=EVENT_OVERHEAD - 1)


def test_refused_offer_returns_false_and_leaves_buffer_unchanged() -> None:
    buffer = LaneBuffer(max_bytes=2 * EVENT_OVERHEAD + 10)
    assert buffer.offer(started(1))
    assert buffer.offer(entry(Kind.ARTIFACT, 2))
    before = buffer.statistics()
    assert before.pending_bytes == 2 * EVENT_OVERHEAD

    assert buffer.offer(entry(Kind.ARTIFACT, 3, text="x" * 11)) is False
    assert buffer.offer(started(3, delegation="d2")) is False

    after = buffer.statistics()
    assert after.pending_entries == 2
    assert after.pending_bytes == before.pending_bytes
    assert after.refused_offers == 2
    assert [e.cursor for e in drain(buffer)] == [1, 2]


def test_offer_up_to_exactly_the_bound_is_accepted() -> None:
    buffer = LaneBuffer(max_bytes=2 * EVENT_OVERHEAD + 10)
    assert buffer.offer(started(1))
    assert buffer.offer(entry(Kind.ARTIFACT, 2, text="x" * 10))
    assert buffer.statistics().pending_bytes == buffer.statistics().max_bytes


def test_forced_offer_passes_the_bound() -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD)
    assert buffer.offer(started(1))
    assert buffer.offer(entry(Kind.FINISHED, 2), force=True)
    assert buffer.statistics().pending_bytes == 2 * EVENT_OVERHEAD
    assert [e.cursor for e in drain(buffer)] == [1, 2]


# -- backpressure ------------------------------------------------------------------------------


async def test_send_waits_when_full_and_resumes_when_consumer_drains() -> None:
    buffer = LaneBuffer(max_bytes=2 * EVENT_OVERHEAD)
    await buffer.send(started(1))
    await buffer.send(entry(Kind.ARTIFACT, 2))
    sent_third = False

    async def third() -> None:
        nonlocal sent_third
        await buffer.send(entry(Kind.FINISHED, 3))
        sent_third = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        stats = buffer.statistics()
        assert stats.waiting_senders == 1
        assert stats.pending_entries == 2
        assert sent_third is False

        assert [e.cursor for e in buffer.receive_nowait_batch(1)] == [1]
        await trio.testing.wait_all_tasks_blocked()
        assert sent_third is True
        assert buffer.statistics().waiting_senders == 0

    assert [e.cursor for e in drain(buffer)] == [2, 3]


async def test_cancelled_send_leaves_buffer_unchanged(autojump_clock: trio.abc.Clock) -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD)
    await buffer.send(started(1))
    with trio.move_on_after(10) as scope:
        await buffer.send(entry(Kind.FINISHED, 2))
    assert scope.cancelled_caught
    stats = buffer.statistics()
    assert stats.pending_entries == 1
    assert stats.waiting_senders == 0
    assert [e.cursor for e in drain(buffer)] == [1]


async def test_receive_batch_waits_for_an_entry() -> None:
    buffer = LaneBuffer()
    received: list[JournalEntry] = []

    async def consumer() -> None:
        received.extend(await buffer.receive_batch())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        assert buffer.statistics().waiting_receivers == 1
        buffer.offer(started(1))

    assert [e.cursor for e in received] == [1]
    assert buffer.statistics().waiting_receivers == 0


async def test_entry_bigger_than_the_bound_is_accepted_by_send_when_empty(
    autojump_clock: trio.abc.Clock,
) -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD + 10)
    big = entry(Kind.ARTIFACT, 1, text="x" * 1000)
    assert big.weight > buffer.max_bytes

    with trio.fail_after(5):
        await buffer.send(big)

    assert buffer.statistics().pending_bytes == big.weight
    assert buffer.receive_nowait_batch() == [big]


async def test_entry_bigger_than_the_bound_waits_until_the_buffer_is_empty() -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD + 10)
    await buffer.send(started(1))
    big = entry(Kind.ARTIFACT, 2, text="x" * 1000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(buffer.send, big)
        await trio.testing.wait_all_tasks_blocked()
        assert buffer.statistics().waiting_senders == 1
        assert [e.cursor for e in buffer.receive_nowait_batch()] == [1]

    assert buffer.receive_nowait_batch() == [big]


async def test_critical_entries_never_dropped_or_reordered_under_pressure(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A producer far faster than its consumer, through a buffer that holds about four events.
    buffer = LaneBuffer(max_bytes=4 * EVENT_OVERHEAD + 40)
    script: list[JournalEntry] = []
    cursor = 0
    for delegation in ("d1", "d2", "d3"):
        cursor += 1
        script.append(started(cursor, delegation))
    for step in range(30):
        for delegation in ("d1", "d2", "d3"):
            for half in ("a", "b"):  # two in a row: mergeable under any merge policy
                cursor += 1
                script.append(delta(cursor, f"{delegation}:{step}{half};", delegation=delegation))
        if step % 7 == 3:
            cursor += 1
            script.append(entry(Kind.INPUT_REQUIRED, cursor, "d2"))
    for delegation in ("d1", "d2", "d3"):
        cursor += 1
        script.append(entry(Kind.FINISHED, cursor, delegation))

    received: list[JournalEntry] = []
    senders_seen_waiting = 0

    async def producer() -> None:
        for item in script:
            await buffer.send(item)
        buffer.close()

    async def consumer() -> None:
        nonlocal senders_seen_waiting
        while True:
            await trio.sleep(1)  # slower than the producer; MockClock makes this instant
            await trio.testing.wait_all_tasks_blocked()
            senders_seen_waiting += buffer.statistics().waiting_senders
            try:
                batch = await buffer.receive_batch(max_entries=2)
            except trio.EndOfChannel:
                return
            assert buffer.statistics().pending_bytes <= buffer.max_bytes
            received.extend(batch)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        nursery.start_soon(consumer)

    critical_sent = [e for e in script if e.event.lane == 0]
    critical_received = [e for e in received if e.event.lane == 0]
    assert critical_received == critical_sent
    cursors = [e.cursor for e in received]
    assert cursors == sorted(set(cursors))
    assert senders_seen_waiting > 0
    assert buffer.statistics().merged_deltas > 0
    for delegation in ("d1", "d2", "d3"):
        produced = "".join(f"{delegation}:{step}{half};" for step in range(30) for half in "ab")
        seen = "".join(
            e.event.delta or ""
            for e in received
            if e.event.kind == Kind.TEXT_DELTA and e.event.delegation_id == delegation
        )
        assert seen == produced


# -- volatile deltas -------------------------------------------------------------------------
# The merge and fold tests below put the buffer under pressure from the first entry
# (`pressure_bytes=0`); the next tests show nothing merges below the pressure mark.


def test_below_pressure_nothing_is_merged_or_folded() -> None:
    buffer = LaneBuffer(max_bytes=100 * EVENT_OVERHEAD)  # pressure at half: 50 events
    buffer.offer(started(1))
    buffer.offer(delta(2, "Hel"))
    buffer.offer(delta(3, "lo"))
    buffer.offer(entry(Kind.STATUS, 4, status="working"))
    buffer.offer(entry(Kind.STATUS, 5, status="working"))
    stats = buffer.statistics()
    assert (stats.merged_deltas, stats.folded_statuses, stats.pressured) == (0, 0, False)
    assert [e.cursor for e in drain(buffer)] == [1, 2, 3, 4, 5]


def test_merging_starts_once_pending_bytes_pass_the_pressure_mark() -> None:
    buffer = LaneBuffer(max_bytes=10 * EVENT_OVERHEAD, pressure_bytes=2 * EVENT_OVERHEAD + 10)
    buffer.offer(delta(1, "a"))
    buffer.offer(delta(2, "b"))  # still below the mark: queued as is
    assert buffer.statistics().merged_deltas == 0
    buffer.offer(delta(3, "c"))  # past the mark: merges into the pending tail
    stats = buffer.statistics()
    assert stats.pressured and stats.merged_deltas == 1
    out = drain(buffer)
    assert summary(out) == [(1, Kind.TEXT_DELTA, "a"), (3, Kind.TEXT_DELTA, "bc")]
    assert not buffer.statistics().pressured  # drained: back to the fast path


def test_reader_buffers_merge_only_into_the_tail() -> None:
    # Entries with cursors: text moved past another stream's entry would be lost to a reader
    # that resumes after that entry, so a reader's buffer only merges contiguous deltas.
    buffer = LaneBuffer(pressure_bytes=0, reorder_streams=False)
    buffer.offer(delta(1, "a", delegation="d1"))
    buffer.offer(delta(2, "x", delegation="d2"))
    buffer.offer(delta(3, "b", delegation="d1"))
    buffer.offer(delta(4, "y", delegation="d2"))
    buffer.offer(delta(5, "z", delegation="d2"))
    assert buffer.statistics().merged_deltas == 1
    assert summary(drain(buffer)) == [
        (1, Kind.TEXT_DELTA, "a"),
        (2, Kind.TEXT_DELTA, "x"),
        (3, Kind.TEXT_DELTA, "b"),
        (5, Kind.TEXT_DELTA, "yz"),
    ]


def test_backfill_merges_what_a_lagging_reader_catches_up_on() -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD, reorder_streams=False)
    buffer.backfill([delta(cursor, str(cursor)) for cursor in range(1, 6)])
    assert summary(drain(buffer)) == [(5, Kind.TEXT_DELTA, "12345")]


def test_pending_delta_of_same_key_is_merged() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(started(1))
    buffer.offer(delta(2, "Hel"))
    buffer.offer(delta(3, "lo, "))
    buffer.offer(delta(4, "world"))

    stats = buffer.statistics()
    assert stats.merged_deltas == 2
    assert stats.pending_entries == 2
    assert stats.pending_bytes == 2 * EVENT_OVERHEAD + len("Hello, world")

    out = drain(buffer)
    assert summary(out) == [(1, Kind.STARTED, None), (4, Kind.TEXT_DELTA, "Hello, world")]
    merged = out[1].event
    assert merged.delegation_id == "d1"
    assert merged.message_id == "m1"
    assert out[1].weight == EVENT_OVERHEAD + len("Hello, world")


@pytest.mark.parametrize(
    "kind", [Kind.TEXT_DELTA, Kind.REASONING_DELTA, Kind.PARENT_TEXT_DELTA, Kind.TOOL_CALL_ARGS]
)
def test_every_volatile_kind_merges(kind: str) -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    delegation = None if kind == Kind.PARENT_TEXT_DELTA else "d1"
    buffer.offer(delta(1, "ab", delegation=delegation, kind=kind))
    buffer.offer(delta(2, "cd", delegation=delegation, kind=kind))
    assert summary(drain(buffer)) == [(2, kind, "abcd")]


def test_tool_call_args_merge_per_tool_call() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    for cursor, call, text in [(1, "c1", '{"a"'), (2, "c1", ": 1}"), (3, "c2", "{}")]:
        buffer.offer(entry(Kind.TOOL_CALL_ARGS, cursor, tool_call_id=call, delta=text))
    # c2's arguments stand between c1's and any later c1 arguments: no merge across them.
    buffer.offer(entry(Kind.TOOL_CALL_ARGS, 4, tool_call_id="c1", delta=" "))
    out = drain(buffer)
    assert [(e.cursor, e.event.tool_call_id, e.event.delta) for e in out] == [
        (2, "c1", '{"a": 1}'),
        (3, "c2", "{}"),
        (4, "c1", " "),
    ]


def test_deltas_of_other_delegations_in_between_do_not_prevent_merging() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(delta(1, "one ", delegation="d1"))
    buffer.offer(delta(2, "x", delegation="d2"))
    buffer.offer(started(3, delegation="d3"))
    buffer.offer(delta(4, "two", delegation="d1"))

    out = drain(buffer)
    assert [(e.cursor, e.event.delegation_id, e.event.delta) for e in out] == [
        (2, "d2", "x"),
        (3, "d3", None),
        (4, "d1", "one two"),
    ]
    assert buffer.statistics().merged_deltas == 1


@pytest.mark.parametrize(
    "between",
    [
        pytest.param(lambda: status(2), id="status"),
        pytest.param(lambda: entry(Kind.ARTIFACT, 2), id="artifact"),
        pytest.param(lambda: entry(Kind.INPUT_REQUIRED, 2), id="critical"),
        pytest.param(lambda: delta(2, "other message", message="m2"), id="other-message"),
        pytest.param(lambda: delta(2, "thinking", kind=Kind.REASONING_DELTA), id="other-kind"),
    ],
)
def test_an_event_of_the_same_delegation_in_between_prevents_merging(between) -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    middle = between()
    buffer.offer(delta(1, "a"))
    buffer.offer(middle)
    buffer.offer(delta(3, "b"))

    out = drain(buffer)
    assert [e.cursor for e in out] == [1, 2, 3]
    assert out[0].event.delta == "a"
    assert out[1] is middle
    assert out[2].event.delta == "b"
    assert buffer.statistics().merged_deltas == 0


def test_deltas_of_different_messages_do_not_merge() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(delta(1, "a", message="m1"))
    buffer.offer(delta(2, "b", message="m2"))
    assert summary(drain(buffer)) == [(1, Kind.TEXT_DELTA, "a"), (2, Kind.TEXT_DELTA, "b")]


def test_no_merge_once_the_earlier_delta_was_consumed() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(delta(1, "a"))
    assert summary(buffer.receive_nowait_batch()) == [(1, Kind.TEXT_DELTA, "a")]

    buffer.offer(delta(2, "b"))
    assert summary(buffer.receive_nowait_batch()) == [(2, Kind.TEXT_DELTA, "b")]
    assert buffer.statistics().merged_deltas == 0


def test_no_merge_into_a_delta_consumed_by_a_partial_batch() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(delta(1, "a"))
    buffer.offer(delta(2, "x", delegation="d2"))
    assert summary(buffer.receive_nowait_batch(1)) == [(1, Kind.TEXT_DELTA, "a")]

    buffer.offer(delta(3, "b"))
    out = drain(buffer)
    assert [(e.cursor, e.event.delta) for e in out] == [(2, "x"), (3, "b")]
    assert buffer.statistics().merged_deltas == 0


def test_merge_past_the_bound_is_refused_and_leaves_buffer_unchanged() -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD + 5, pressure_bytes=0)
    assert buffer.offer(delta(1, "abc"))
    assert buffer.offer(delta(2, "de"))  # merged: exactly at the bound
    assert buffer.statistics().pending_bytes == buffer.max_bytes

    assert buffer.offer(delta(3, "f")) is False
    stats = buffer.statistics()
    assert stats.pending_bytes == buffer.max_bytes
    assert stats.refused_offers == 1
    assert summary(drain(buffer)) == [(2, Kind.TEXT_DELTA, "abcde")]


def test_merging_keeps_the_bound_when_new_entries_would_not_fit() -> None:
    # A full buffer of deltas can still take more text of the same message by merging.
    buffer = LaneBuffer(max_bytes=2 * EVENT_OVERHEAD + 20, pressure_bytes=0)
    assert buffer.offer(started(1))
    assert buffer.offer(delta(2, "0123456789"))
    assert buffer.offer(delta(3, "abcdefghij"))
    assert buffer.offer(entry(Kind.ARTIFACT, 4)) is False
    assert summary(drain(buffer)) == [
        (1, Kind.STARTED, None),
        (3, Kind.TEXT_DELTA, "0123456789abcdefghij"),
    ]


# -- important statuses ----------------------------------------------------------------------


def test_identical_repeated_status_is_folded_with_a_drop_marker() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    first = status(1, "working", text="step 1")
    buffer.offer(first)
    buffer.offer(status(2, "working", text="step 1"))

    stats = buffer.statistics()
    assert stats.folded_statuses == 1
    assert stats.pending_entries == 2

    out = drain(buffer)
    assert out[0] is first
    marker = out[1]
    assert marker.cursor == 2
    assert marker.event.kind == Kind.STREAM_DROPPED
    assert marker.event.delegation_id == "d1"
    assert marker.event.run_id == RUN
    report = marker.event.dropped
    assert isinstance(report, DropReport)
    assert report.reason == "status_folded"
    assert report.count == 1
    assert report.kinds == {Kind.STATUS: 1}
    assert report.first_cursor == 2
    assert report.last_cursor == 2


def test_repeated_folds_are_counted_on_one_marker() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(status(1, "working"))
    buffer.offer(status(2, "working"))
    buffer.offer(status(3, "working"))
    buffer.offer(status(4, "working"))

    assert buffer.statistics().folded_statuses == 3
    out = drain(buffer)
    assert [e.event.kind for e in out] == [Kind.STATUS, Kind.STREAM_DROPPED]
    assert out[0].cursor == 1
    marker = out[1]
    report = marker.event.dropped
    assert report is not None
    assert report.reason == "status_folded"
    assert report.count == 3
    assert report.first_cursor == 2
    assert report.last_cursor == 4
    assert report.first_cursor <= marker.cursor <= report.last_cursor
    # The report says what was dropped as well as how much: its per-kind counts add up.
    assert report.kinds == {Kind.STATUS: 3}


def test_parent_status_fold_uses_the_run_level_marker_kind() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(entry(Kind.STATUS, 1, None, status="busy"))
    buffer.offer(entry(Kind.STATUS, 2, None, status="busy"))
    out = drain(buffer)
    assert [e.event.kind for e in out] == [Kind.STATUS, Kind.DROPPED]


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(lambda: status(2, "input_required", text="step 1"), id="other-status"),
        pytest.param(lambda: status(2, "working", text="step 2"), id="other-text"),
        pytest.param(lambda: status(2, "working", delegation="d2", text="step 1"), id="other-d"),
        pytest.param(
            lambda: entry(Kind.STATUS, 2, "d1", status="working", text="step 1", nested_id="d1/a"),
            id="other-nested-subagent",
        ),
    ],
)
def test_a_different_status_is_not_folded(second) -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    first = status(1, "working", text="step 1")
    other = second()
    buffer.offer(first)
    buffer.offer(other)

    assert drain(buffer) == [first, other]
    assert buffer.statistics().folded_statuses == 0


def test_status_is_compared_with_the_latest_pending_status() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    statuses = [status(1, "working"), status(2, "input_required"), status(3, "working")]
    for item in statuses:
        buffer.offer(item)
    assert drain(buffer) == statuses
    assert buffer.statistics().folded_statuses == 0


def test_no_fold_once_the_earlier_status_was_consumed() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    buffer.offer(status(1, "working"))
    buffer.receive_nowait_batch()
    again = status(2, "working")
    buffer.offer(again)
    assert buffer.receive_nowait_batch() == [again]
    assert buffer.statistics().folded_statuses == 0


def test_folding_never_passes_the_byte_bound() -> None:
    buffer = LaneBuffer(max_bytes=2 * EVENT_OVERHEAD + 80, pressure_bytes=0)
    assert buffer.offer(status(1, "working"))
    assert buffer.offer(delta(2, "x" * 80))
    assert buffer.statistics().pending_bytes == buffer.max_bytes

    accepted = buffer.offer(status(3, "working"))

    stats = buffer.statistics()
    # Either refused (buffer unchanged) or folded within the bound, never past it.
    assert stats.pending_bytes <= stats.max_bytes
    if not accepted:
        assert stats.pending_entries == 2
        assert stats.refused_offers == 1


# -- close -----------------------------------------------------------------------------------


async def test_close_drains_pending_then_end_of_channel() -> None:
    buffer = LaneBuffer()
    buffer.offer(started(1))
    buffer.offer(entry(Kind.FINISHED, 2))
    buffer.close()
    buffer.close()  # idempotent
    assert buffer.closed
    assert buffer.statistics().closed

    assert [e.cursor for e in await buffer.receive_batch()] == [1, 2]
    with pytest.raises(trio.EndOfChannel):
        await buffer.receive_batch()
    with pytest.raises(trio.EndOfChannel):
        buffer.receive_nowait_batch()


async def test_send_and_offer_after_close_raise() -> None:
    buffer = LaneBuffer()
    buffer.close()
    with pytest.raises(trio.ClosedResourceError):
        await buffer.send(started(1))
    with pytest.raises(trio.ClosedResourceError):
        buffer.offer(started(1))
    assert buffer.statistics().pending_entries == 0


async def test_close_wakes_a_waiting_receiver_with_end_of_channel() -> None:
    buffer = LaneBuffer()
    outcome: list[str] = []

    async def consumer() -> None:
        try:
            await buffer.receive_batch()
        except trio.EndOfChannel:
            outcome.append("end")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        assert buffer.statistics().waiting_receivers == 1
        buffer.close()

    assert outcome == ["end"]


async def test_close_makes_a_waiting_sender_raise() -> None:
    buffer = LaneBuffer(max_bytes=EVENT_OVERHEAD)
    await buffer.send(started(1))
    outcome: list[str] = []

    async def sender() -> None:
        try:
            await buffer.send(entry(Kind.FINISHED, 2))
        except trio.ClosedResourceError:
            outcome.append("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert buffer.statistics().waiting_senders == 1
        buffer.close()

    assert outcome == ["closed"]
    assert [e.cursor for e in drain(buffer)] == [1]


# -- flush -----------------------------------------------------------------------------------


class BackgroundFlush:
    """A `buffer.flush()` run in a nursery; `done` says whether it has returned."""

    def __init__(self, buffer: LaneBuffer) -> None:
        self.buffer = buffer
        self.done = False

    async def run(self) -> None:
        await self.buffer.flush()
        self.done = True


async def test_flush_waits_until_everything_sent_is_acknowledged() -> None:
    buffer = LaneBuffer()
    for cursor in (1, 2, 3):
        await buffer.send(entry(Kind.ARTIFACT, cursor))
    flush = BackgroundFlush(buffer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush.run)
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is False

        assert len(buffer.receive_nowait_batch(2)) == 2
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is False  # received but not acknowledged

        buffer.acknowledge()
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is False  # entry 3 still pending

        rest = buffer.receive_nowait_batch()
        assert [e.cursor for e in rest] == [3]
        buffer.acknowledge()
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is True


async def test_flush_returns_at_once_when_everything_is_acknowledged() -> None:
    buffer = LaneBuffer()
    await buffer.send(started(1))
    buffer.receive_nowait_batch()
    buffer.acknowledge()
    with trio.testing.assert_no_checkpoints():
        await buffer.flush()


async def test_flush_does_not_wait_for_entries_sent_after_it_started() -> None:
    buffer = LaneBuffer()
    await buffer.send(started(1))
    flush = BackgroundFlush(buffer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush.run)
        await trio.testing.wait_all_tasks_blocked()
        await buffer.send(entry(Kind.ARTIFACT, 2))
        buffer.receive_nowait_batch(1)
        buffer.acknowledge()
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is True
    assert len(buffer) == 1


async def test_flush_covers_merged_deltas() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    await buffer.send(delta(1, "a"))
    await buffer.send(delta(2, "b"))
    flush = BackgroundFlush(buffer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush.run)
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is False
        buffer.receive_nowait_batch()
        buffer.acknowledge()
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is True


async def test_flush_waits_for_entries_queued_behind_a_refolded_status() -> None:
    buffer = LaneBuffer(pressure_bytes=0)
    await buffer.send(status(1, "working"))
    await buffer.send(status(2, "working"))  # folded: a drop marker
    await buffer.send(delta(3, "text"))
    await buffer.send(status(4, "working"))  # folded again, after the delta
    assert buffer.statistics().folded_statuses == 2
    flush = BackgroundFlush(buffer)

    received: list[JournalEntry] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush.run)
        await trio.testing.wait_all_tasks_blocked()
        # Take and acknowledge one entry at a time: flush may return only with the last one.
        while len(buffer):
            assert flush.done is False
            batch = buffer.receive_nowait_batch(1)
            received += batch
            buffer.acknowledge()
            await trio.testing.wait_all_tasks_blocked()
            assert flush.done is (len(buffer) == 0), received
    assert flush.done is True
    assert [e.event.kind for e in received if e.event.kind != Kind.STREAM_DROPPED] == [
        Kind.STATUS,
        Kind.TEXT_DELTA,
    ]
    markers = [e.event.dropped for e in received if e.event.kind == Kind.STREAM_DROPPED]
    assert sum(m.count for m in markers if m is not None) == 2


async def test_close_releases_flush_once_nothing_is_pending() -> None:
    buffer = LaneBuffer()
    await buffer.send(started(1))
    assert len(buffer.receive_nowait_batch()) == 1  # taken, never acknowledged
    flush = BackgroundFlush(buffer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush.run)
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is False
        buffer.close()
        await trio.testing.wait_all_tasks_blocked()
        assert flush.done is True
