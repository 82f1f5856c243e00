"""RunJournal: cursors, lifecycle rules, replay, gaps, slow subscribers and fan-out."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from engine import (
    CursorError,
    DelegationEvent,
    ErrorCode,
    JournalEntry,
    Kind,
    MemoryJournalStore,
    RunJournal,
    Subscription,
)
from engine._lanes import EVENT_OVERHEAD

RUN = "run-1"


def event(kind: str, delegation: str | None = None, **fields: object) -> DelegationEvent:
    if delegation is not None:
        fields.setdefault("agent_key", f"agent-{delegation}")
        fields.setdefault("agent_name", f"Agent {delegation}")
        fields.setdefault("protocol", "a2a")
    return DelegationEvent(kind=kind, run_id=RUN, delegation_id=delegation, **fields)


def run_started() -> DelegationEvent:
    return event(Kind.RUN_STARTED)


def started(delegation: str) -> DelegationEvent:
    return event(Kind.STARTED, delegation)


def text(delegation: str | None, chunk: str, message: str = "m1") -> DelegationEvent:
    kind = Kind.TEXT_DELTA if delegation is not None else Kind.PARENT_TEXT_DELTA
    return event(kind, delegation, message_id=message, delta=chunk)


def status(delegation: str, value: str = "working") -> DelegationEvent:
    return event(Kind.STATUS, delegation, status=value)


def kinds(entries: list[JournalEntry]) -> list[tuple[int, str, str | None]]:
    return [(e.cursor, e.event.kind, e.event.delegation_id) for e in entries]


async def append_all(journal: RunJournal, events: list[DelegationEvent]) -> list[JournalEntry]:
    return await journal.append_entries([JournalEntry(e) for e in events])


async def receive_all(sub: Subscription) -> list[JournalEntry]:
    """Everything the subscription yields until it ends."""
    with trio.fail_after(60):  # under MockClock: a hang fails at once instead of wedging
        return [entry async for entry in sub]


async def receive_available(sub: Subscription) -> list[JournalEntry]:
    """Everything the subscription can deliver now, without waiting for new appends."""
    out: list[JournalEntry] = []
    while True:
        with trio.move_on_after(1):
            out.extend(await sub.receive_batch())
            continue
        return out


def delivered_text(entries: list[JournalEntry], delegation: str | None, message: str) -> str:
    return "".join(
        e.event.delta or ""
        for e in entries
        if e.event.delegation_id == delegation
        and e.event.message_id == message
        and e.event.kind in (Kind.TEXT_DELTA, Kind.PARENT_TEXT_DELTA)
    )


# -- cursors and lifecycle rules ---------------------------------------------------------------


async def test_cursors_strictly_increase_from_one() -> None:
    journal = RunJournal(RUN)
    assert journal.head == 0
    accepted = await append_all(
        journal, [run_started(), started("d1"), text("d1", "a"), text(None, "b")]
    )
    accepted += await append_all(journal, [status("d1")])
    single = await journal.append(text("d1", "c"))

    assert single is not None
    assert [e.cursor for e in accepted] == [1, 2, 3, 4, 5]
    assert single.cursor == 6
    assert journal.head == 6
    stats = journal.statistics()
    assert stats.head == 6
    assert stats.appended == 6
    assert stats.synthesized_starts == 0


async def test_append_returns_the_entry_of_the_given_event() -> None:
    journal = RunJournal(RUN)
    delta = text("d1", "hi")
    entry = await journal.append(delta)
    assert entry is not None
    assert entry.event is delta
    assert entry.cursor == 3  # after the synthesized run.started and subagent.started


async def test_first_event_synthesizes_run_started() -> None:
    journal = RunJournal(RUN)
    accepted = await append_all(journal, [text(None, "hello")])

    assert kinds(accepted) == [(1, Kind.RUN_STARTED, None), (2, Kind.PARENT_TEXT_DELTA, None)]
    synthesized = accepted[0].event
    assert synthesized.synthesized is True
    assert synthesized.run_id == RUN
    assert accepted[1].event.synthesized is False
    assert journal.statistics().synthesized_starts == 1


async def test_explicit_run_started_is_kept_and_a_second_one_rejected() -> None:
    journal = RunJournal(RUN)
    first = run_started()
    accepted = await append_all(journal, [first, text(None, "a"), run_started()])

    assert [e.event for e in accepted] == [first, accepted[1].event]
    assert kinds(accepted) == [(1, Kind.RUN_STARTED, None), (2, Kind.PARENT_TEXT_DELTA, None)]
    stats = journal.statistics()
    assert stats.synthesized_starts == 0
    assert stats.rejected_duplicate_starts == 1
    assert stats.head == 2


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(lambda: status("d1"), id="status"),
        pytest.param(lambda: text("d1", "x"), id="text-delta"),
        pytest.param(lambda: event(Kind.ARTIFACT, "d1"), id="artifact"),
        pytest.param(lambda: event(Kind.FINISHED, "d1"), id="finished"),
        pytest.param(lambda: event(Kind.FAILED, "d1"), id="failed"),
        pytest.param(lambda: event(Kind.CANCELLED, "d1"), id="cancelled"),
    ],
)
async def test_delegation_start_is_synthesized_when_missing(first) -> None:
    journal = RunJournal(RUN)
    await journal.append(run_started())
    original = first()
    accepted = await append_all(journal, [original])

    assert kinds(accepted) == [(2, Kind.STARTED, "d1"), (3, original.kind, "d1")]
    start = accepted[0].event
    assert start.synthesized is True
    assert start.agent_key == "agent-d1"
    assert start.agent_name == "Agent d1"
    assert start.protocol == "a2a"
    assert accepted[1].event is original
    assert journal.statistics().synthesized_starts == 1


async def test_explicit_start_is_not_duplicated() -> None:
    journal = RunJournal(RUN)
    accepted = await append_all(
        journal, [run_started(), started("d1"), status("d1"), started("d1")]
    )
    assert kinds(accepted) == [
        (1, Kind.RUN_STARTED, None),
        (2, Kind.STARTED, "d1"),
        (3, Kind.STATUS, "d1"),
    ]
    stats = journal.statistics()
    assert stats.synthesized_starts == 0
    assert stats.rejected_duplicate_starts == 1


async def test_duplicate_terminal_is_rejected_and_counted() -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    first = await journal.append(event(Kind.FINISHED, "d1"))
    second = await journal.append(event(Kind.FAILED, "d1"))
    third = await journal.append(event(Kind.FINISHED, "d1"))

    assert first is not None
    assert first.cursor == 3
    assert second is None
    assert third is None
    stats = journal.statistics()
    assert stats.head == 3
    assert stats.rejected_duplicate_terminals == 2
    assert stats.rejected_after_terminal == 0


async def test_duplicate_terminal_in_one_batch_is_rejected() -> None:
    journal = RunJournal(RUN)
    accepted = await append_all(journal, [event(Kind.CANCELLED, "d1"), event(Kind.FINISHED, "d1")])
    assert kinds(accepted) == [
        (1, Kind.RUN_STARTED, None),
        (2, Kind.STARTED, "d1"),
        (3, Kind.CANCELLED, "d1"),
    ]
    assert journal.statistics().rejected_duplicate_terminals == 1


async def test_events_after_a_delegation_terminal_are_rejected() -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1"), event(Kind.FINISHED, "d1")])

    late = await append_all(
        journal, [text("d1", "late"), status("d1"), started("d1"), event(Kind.ARTIFACT, "d1")]
    )
    other = await journal.append(text("d2", "still open"))

    assert late == []
    assert other is not None
    assert other.cursor == 5  # after d2's synthesized start at 4
    stats = journal.statistics()
    assert stats.rejected_after_terminal == 4
    assert stats.rejected_duplicate_terminals == 0
    assert stats.head == 5


async def test_run_terminal_cancels_open_delegations_then_accepts_nothing() -> None:
    journal = RunJournal(RUN)
    await append_all(
        journal,
        [
            run_started(),
            started("d1"),
            started("d2"),
            event(Kind.FINISHED, "d2"),
            text("d3", "x"),
        ],
    )
    assert journal.head == 6
    terminal = event(Kind.RUN_FINISHED, time=42.0)

    accepted = await append_all(journal, [terminal])

    assert kinds(accepted) == [
        (7, Kind.CANCELLED, "d1"),
        (8, Kind.CANCELLED, "d3"),
        (9, Kind.RUN_FINISHED, None),
    ]
    for closing in accepted[:2]:
        assert closing.event.synthesized is True
        assert closing.event.error is not None
        assert closing.event.error.code == ErrorCode.RUN_CLOSED
        assert closing.event.time == 42.0
        assert closing.event.agent_key == f"agent-{closing.event.delegation_id}"
    assert accepted[2].event is terminal
    assert journal.ended
    stats = journal.statistics()
    assert stats.synthesized_terminals == 2
    assert stats.ended is True

    after = await append_all(
        journal,
        [
            text("d1", "late"),
            event(Kind.FINISHED, "d1"),
            started("d9"),
            event(Kind.RUN_FAILED),
            text(None, "p"),
        ],
    )
    assert after == []
    assert await journal.append(run_started()) is None
    stats = journal.statistics()
    assert stats.head == 9
    assert stats.appended == 9
    assert stats.rejected_after_terminal == 6


async def test_run_terminal_as_first_event_still_opens_the_run() -> None:
    journal = RunJournal(RUN)
    accepted = await append_all(journal, [event(Kind.RUN_CANCELLED)])
    assert kinds(accepted) == [(1, Kind.RUN_STARTED, None), (2, Kind.RUN_CANCELLED, None)]
    assert journal.ended


async def test_append_after_close_raises() -> None:
    journal = RunJournal(RUN)
    await journal.append(run_started())
    journal.close()
    journal.close()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await journal.append(text(None, "x"))
    assert journal.head == 1


# -- subscribing and replay ------------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 1, 3, 5])
async def test_subscribe_after_replays_exactly_the_later_entries_then_goes_live(
    after: int, autojump_clock: trio.abc.Clock
) -> None:
    journal = RunJournal(RUN)
    await append_all(
        journal,
        [run_started(), started("d1"), status("d1"), event(Kind.ARTIFACT, "d1"), text(None, "x")],
    )
    sub = journal.subscribe(after=after)
    assert sub.last_cursor == after

    replayed = await receive_available(sub)
    assert [e.cursor for e in replayed] == list(range(after + 1, 6))
    assert journal.statistics().live_subscribers == 1
    assert journal.statistics().catching_up_subscribers == 0

    live = await append_all(journal, [event(Kind.FINISHED, "d1"), event(Kind.RUN_FINISHED)])
    rest = await receive_all(sub)
    assert rest == live
    assert sub.last_cursor == 7


async def test_subscribe_without_cursor_replays_from_the_start(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    produced = await append_all(journal, [started("d1"), event(Kind.RUN_FINISHED)])
    assert await receive_all(journal.subscribe()) == produced


async def test_subscribe_at_head_gets_only_live_entries(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    sub = journal.subscribe(after=journal.head)
    assert await receive_available(sub) == []

    live = await append_all(journal, [status("d1"), event(Kind.RUN_FINISHED)])
    assert [e.cursor for e in await receive_all(sub)] == [e.cursor for e in live] == [3, 4, 5]


@pytest.mark.parametrize("after", [3, -1, -10, True, False, 1.0, "1"])
async def test_subscribe_rejects_cursors_never_issued(after: object) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    assert journal.head == 2
    with pytest.raises(CursorError):
        journal.subscribe(after=after)  # type: ignore[arg-type]
    assert journal.statistics().catching_up_subscribers == 0


async def test_subscribe_on_an_empty_journal_accepts_only_zero() -> None:
    journal = RunJournal(RUN)
    with pytest.raises(CursorError):
        journal.subscribe(after=1)
    journal.subscribe(after=0).close()


async def test_reconnect_with_last_cursor_continues_without_duplicates(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1"), text("d1", "a")])
    first = journal.subscribe()
    seen = await receive_available(first)
    first.close()
    await append_all(journal, [text("d1", "b"), status("d1")])

    second = journal.subscribe(after=first.last_cursor)
    await append_all(journal, [event(Kind.RUN_FINISHED)])
    seen += await receive_all(second)

    assert [e.cursor for e in seen] == [1, 2, 3, 4, 5, 6, 7]
    assert delivered_text(seen, "d1", "m1") == "ab"


async def test_reconnect_after_the_run_terminal_ends_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A viewer that saw the run terminal and reconnects with its cursor (EventSource does that
    # on its own when the server ends the stream) must get an ended stream, not a hung one.
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1"), event(Kind.RUN_FINISHED)])
    first = journal.subscribe()
    assert [e.cursor for e in await receive_all(first)] == [1, 2, 3, 4]

    again = journal.subscribe(after=first.last_cursor)
    assert await receive_all(again) == []


async def test_reconnect_after_an_entry_a_merged_delta_moved_past_loses_no_text(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    first = journal.subscribe(after=journal.head)
    assert await receive_available(first) == []  # caught up: following live appends now
    # While the reader is busy, "b" merges into the pending "a" (no parent entry in between).
    await append_all(
        journal, [text(None, "a"), status("d1"), text(None, "b"), event(Kind.RUN_FINISHED)]
    )
    seen = await first.receive_batch(1)
    first.close()  # the connection drops after one entry

    second = journal.subscribe(after=first.last_cursor)
    seen += await receive_all(second)

    cursors = [e.cursor for e in seen]
    assert cursors == sorted(set(cursors))
    assert cursors[-1] == journal.head
    assert delivered_text(seen, None, "m1") == "ab"


async def test_reconnect_after_folded_statuses_replays_nothing_twice(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    # A reader whose buffer is under pressure from the second status on (pressure = half).
    first = journal.subscribe(after=journal.head, max_buffer_bytes=2 * EVENT_OVERHEAD)
    assert await receive_available(first) == []
    await append_all(journal, [status("d1"), status("d1"), status("d1")])
    assert journal.head == 5

    seen = await receive_available(first)
    assert seen[0].event.kind == Kind.STATUS
    reports = [e.event.dropped for e in seen if e.event.kind == Kind.STREAM_DROPPED]
    assert sum(r.count for r in reports if r is not None) == 2  # both repeats announced
    first.close()

    second = journal.subscribe(after=first.last_cursor)
    await journal.append(event(Kind.RUN_FINISHED))
    again = await receive_all(second)
    # The repeats were announced as folded: resuming must not deliver one of them again.
    assert [(e.cursor, e.event.kind) for e in again] == [
        (6, Kind.CANCELLED),
        (7, Kind.RUN_FINISHED),
    ]


async def test_subscription_ends_after_the_run_terminal(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN)
    sub = journal.subscribe()
    received: list[JournalEntry] = []

    async def reader() -> None:
        received.extend(await receive_all(sub))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await append_all(journal, [run_started(), started("d1")])
        await trio.testing.wait_all_tasks_blocked()
        await append_all(journal, [text("d1", "x"), event(Kind.RUN_FAILED)])

    assert kinds(received) == [
        (1, Kind.RUN_STARTED, None),
        (2, Kind.STARTED, "d1"),
        (3, Kind.TEXT_DELTA, "d1"),
        (4, Kind.CANCELLED, "d1"),
        (5, Kind.RUN_FAILED, None),
    ]
    with pytest.raises(trio.EndOfChannel):
        await sub.receive_batch()


async def test_close_ends_live_and_catching_up_subscriptions(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    live = journal.subscribe()
    assert [e.cursor for e in await receive_available(live)] == [1, 2]
    fresh = journal.subscribe()  # never read yet: still catching up
    stats = journal.statistics()
    assert (stats.live_subscribers, stats.catching_up_subscribers) == (1, 1)
    results: dict[str, list[int]] = {}

    async def reader(name: str, sub: Subscription) -> None:
        results[name] = [e.cursor for e in await receive_all(sub)]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, "live", live)
        await trio.testing.wait_all_tasks_blocked()
        await append_all(journal, [status("d1")])
        journal.close()
        nursery.start_soon(reader, "fresh", fresh)

    assert results == {"live": [3], "fresh": [1, 2, 3]}
    assert journal.ended is False


async def test_subscription_close_detaches_it(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN)
    await journal.append(run_started())
    async with journal.subscribe() as sub:
        await receive_available(sub)
        assert journal.statistics().live_subscribers == 1
    assert journal.statistics().live_subscribers == 0
    assert journal.statistics().catching_up_subscribers == 0
    with pytest.raises(trio.ClosedResourceError):
        await sub.receive_batch()
    await journal.append(started("d1"))  # nobody to feed; must not fail


# -- the replay window and gaps --------------------------------------------------------------


async def test_old_cursor_gets_gap_markers_around_retained_critical_events(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryJournalStore(RUN, max_events=5)
    journal = RunJournal(RUN, store=store)
    produced = await append_all(
        journal,
        [
            run_started(),  # 1 critical
            started("d1"),  # 2 critical
            text("d1", "a"),  # 3
            text("d1", "b"),  # 4
            started("d2"),  # 5 critical
            status("d2"),  # 6
            event(Kind.FINISHED, "d1"),  # 7 critical
            text("d2", "c"),  # 8
            text("d2", "d"),  # 9
            text("d2", "e"),  # 10
            text("d2", "f"),  # 11
            text("d2", "g"),  # 12
        ],
    )
    assert [e.cursor for e in produced] == list(range(1, 13))
    assert store.first_cursor == 8

    seen = await receive_available(journal.subscribe(after=1))

    cursors = [e.cursor for e in seen]
    assert cursors == sorted(set(cursors))
    assert [(e.cursor, e.event.kind) for e in seen[:6]] == [
        (2, Kind.STARTED),
        (3, Kind.TEXT_DELTA),  # the first event of d1's message m1 opened it: kept
        (4, Kind.GAP),
        (5, Kind.STARTED),
        (6, Kind.GAP),
        (7, Kind.FINISHED),
    ]
    gaps = [e.event.dropped for e in seen if e.event.kind == Kind.GAP]
    assert [(g.reason, g.first_cursor, g.last_cursor, g.count) for g in gaps] == [
        ("replay_gap", 4, 4, 1),
        ("replay_gap", 6, 6, 1),
    ]
    assert all(e.event.run_id == RUN for e in seen)
    # The retained entries are the very ones produced.
    assert seen[0] is produced[1]
    assert seen[1] is produced[2]
    assert seen[3] is produced[4]
    assert seen[5] is produced[6]
    # Everything still in the window follows, text intact.
    assert [e.cursor for e in seen[6:]][-1] == 12
    assert delivered_text(seen, "d1", "m1") == "a"
    assert delivered_text(seen, "d2", "m1") == "cdefg"


async def test_cursor_inside_the_window_gets_no_gap(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN, store=MemoryJournalStore(RUN, max_events=5))
    await append_all(journal, [run_started()] + [text(None, str(i)) for i in range(9)])
    assert journal.head == 10
    seen = await receive_available(journal.subscribe(after=5))
    assert [e.event.kind for e in seen] == [Kind.PARENT_TEXT_DELTA]  # merged while pending
    assert seen[0].cursor == 10
    assert seen[0].event.delta == "45678"


async def test_gap_after_the_last_retained_critical_event(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN, store=MemoryJournalStore(RUN, max_events=3))
    await append_all(journal, [run_started()] + [status("d1", f"s{i}") for i in range(8)])
    assert journal.head == 10
    seen = await receive_available(journal.subscribe(after=0))
    assert [(e.cursor, e.event.kind) for e in seen] == [
        (1, Kind.RUN_STARTED),
        (2, Kind.STARTED),
        (7, Kind.GAP),
        (8, Kind.STATUS),
        (9, Kind.STATUS),
        (10, Kind.STATUS),
    ]
    gap = seen[2].event.dropped
    assert gap is not None
    assert (gap.reason, gap.first_cursor, gap.last_cursor, gap.count) == ("replay_gap", 3, 7, 5)


async def test_window_bounded_in_bytes(autojump_clock: trio.abc.Clock) -> None:
    store = MemoryJournalStore(RUN, max_bytes=3 * (EVENT_OVERHEAD + 100))
    journal = RunJournal(RUN, store=store)
    await append_all(journal, [run_started()] + [text(None, "x" * 100) for _ in range(6)])
    assert store.first_cursor == 5
    assert store.window_bytes <= store.max_bytes
    seen = await receive_available(journal.subscribe(after=1))
    # The message's first delta (cursor 2) opened it and outlives the window.
    assert [e.event.kind for e in seen] == [
        Kind.PARENT_TEXT_DELTA,
        Kind.GAP,
        Kind.PARENT_TEXT_DELTA,
    ]
    assert seen[0].cursor == 2
    assert seen[1].event.dropped is not None
    assert seen[1].event.dropped.count == 2


# -- slow subscribers and fan-out ------------------------------------------------------------


async def test_slow_subscriber_never_blocks_appends_and_catches_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    sub = journal.subscribe(max_buffer_bytes=2 * EVENT_OVERHEAD + 20)
    await journal.append(run_started())
    assert [e.cursor for e in await receive_available(sub)] == [1]
    assert journal.statistics().live_subscribers == 1

    produced: list[JournalEntry] = []
    with trio.fail_after(1):  # appends must never wait for this reader
        for i in range(40):
            produced += await append_all(
                journal,
                [
                    text("d1", f"<{i}>", message="a"),
                    status("d1", f"step {i}"),
                    text("d2", f"[{i}]", message="b"),
                ],
            )
    assert journal.head == 1 + 2 + 120
    assert sub.catch_ups >= 1
    assert journal.statistics().catching_up_subscribers == 1

    produced += await append_all(journal, [event(Kind.RUN_FINISHED)])
    seen = await receive_all(sub)

    cursors = [e.cursor for e in seen]
    assert cursors == sorted(set(cursors))
    assert cursors[-1] == journal.head
    assert delivered_text(seen, "d1", "a") == "".join(f"<{i}>" for i in range(40))
    assert delivered_text(seen, "d2", "b") == "".join(f"[{i}]" for i in range(40))
    # Nothing but deltas may be merged away: every other produced entry arrives as itself.
    seen_ids = {id(e) for e in seen}
    for entry in produced:
        if entry.event.lane != 2:
            assert id(entry) in seen_ids, entry
    assert not any(e.event.kind in (Kind.GAP, Kind.STREAM_DROPPED) for e in seen)


async def test_slow_subscriber_does_not_slow_a_fast_one(autojump_clock: trio.abc.Clock) -> None:
    journal = RunJournal(RUN)
    slow = journal.subscribe(max_buffer_bytes=EVENT_OVERHEAD)
    fast = journal.subscribe()
    await journal.append(run_started())
    await receive_available(slow)
    await receive_available(fast)

    fast_seen: list[int] = []
    async with trio.open_nursery() as nursery:

        async def fast_reader() -> None:
            async for entry in fast:
                fast_seen.append(entry.cursor)

        nursery.start_soon(fast_reader)
        for i in range(20):
            await journal.append(status("d1", f"s{i}"))
            await trio.testing.wait_all_tasks_blocked()
            # The fast reader has everything appended so far, whatever the slow one does.
            assert fast_seen == list(range(2, journal.head + 1))
        await journal.append(event(Kind.RUN_FINISHED))

    assert slow.catch_ups >= 1
    assert [e.cursor for e in await receive_all(slow)] == list(range(2, journal.head + 1))


async def test_fifty_subscribers_receive_the_same_cursor_sequence(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = RunJournal(RUN)
    await append_all(journal, [run_started(), started("d1")])
    subs = [
        journal.subscribe(after=0, max_buffer_bytes=EVENT_OVERHEAD * (1 + i % 5)) for i in range(50)
    ]
    results: list[list[int]] = [[] for _ in subs]

    async def reader(index: int) -> None:
        results[index] = [e.cursor for e in await receive_all(subs[index])]

    async with trio.open_nursery() as nursery:
        for index in range(len(subs)):
            nursery.start_soon(reader, index)
        for i in range(30):
            await append_all(journal, [event(Kind.ARTIFACT, "d1", name=f"a{i}")])
            if i % 3 == 0:
                await trio.testing.wait_all_tasks_blocked()
        await journal.append(event(Kind.RUN_FINISHED))

    expected = list(range(1, journal.head + 1))
    assert journal.head == 34
    assert all(result == expected for result in results)


async def test_the_store_forgets_what_ended_delegations_held_open(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Beyond the window the store follows what is still open (to keep each thing's first
    # event); an ended delegation holds nothing any more, so only the live one's things remain.
    store = MemoryJournalStore(RUN, max_events=2)
    journal = RunJournal(RUN, store=store)
    events = [run_started()]
    for d in ("d1", "d2", "d3"):
        events += [started(d), text(d, "never closed", message=f"{d}-m")]
    events += [event(Kind.FINISHED, "d1"), event(Kind.FAILED, "d2")]
    events += [text(None, "filler") for _ in range(4)]
    await append_all(journal, events)
    assert store.first_cursor > 9  # both terminals left the window
    held = store.retention.open_things
    assert {thing[1] for thing in held} == {"d3", None}


class _SlowStore(MemoryJournalStore):
    """A store whose writes wait until `release` is set (a slow remote store)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.writing = trio.Event()
        self.release = trio.Event()

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        if any(entry.event.kind in Kind.RUN_TERMINALS for entry in entries):
            self.writing.set()
            await self.release.wait()
        self.append_nowait(entries)


async def test_a_reader_catching_up_while_the_run_terminal_is_being_written_still_gets_it() -> None:
    """Found by the soak on Redis: a reader that caught up while the run's terminal was admitted
    but its slow write not done was ended without it."""
    store = _SlowStore("r")
    journal = RunJournal("r", store=store)
    await journal.append(DelegationEvent(kind=Kind.RUN_STARTED, run_id="r"))
    got: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(journal.append, DelegationEvent(kind=Kind.RUN_FINISHED, run_id="r"))
        await store.writing.wait()
        sub = journal.subscribe(0)
        async with sub:
            batch = await sub.receive_batch()  # the replay, then it is caught up
            got += [entry.event.kind for entry in batch]
            store.release.set()
            got += [entry.event.kind async for entry in sub]
    assert got == [Kind.RUN_STARTED, Kind.RUN_FINISHED]
