"""The store contract's public sans-IO pieces, as a store other than the memory one calls them:
`RetentionPolicy` (what leaves the window, how many retained entries stay),
`LifecycleRetention` (which leaving entries are kept), `replay_before_window` and `gap_entry`
(what a reader behind the window is given)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import (
    DelegationEvent,
    JournalEntry,
    Kind,
    LifecycleRetention,
    MemoryJournalStore,
    RetentionPolicy,
    gap_entry,
    replay_before_window,
)
from engine._lanes import EVENT_OVERHEAD

RUN = "run-r"


def entry(cursor: int, kind: str = Kind.STARTED, **fields: object) -> JournalEntry:
    return JournalEntry(DelegationEvent(kind=kind, run_id=RUN, **fields), cursor)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fields",
    [
        {"max_events": 0},
        {"max_bytes": EVENT_OVERHEAD - 1},
        {"max_retained": -1},
        {"max_events": True},
        {"max_events": 2.5},
    ],
)
def test_a_policy_refuses_bounds_no_window_could_keep(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        RetentionPolicy(**fields)  # type: ignore[arg-type]


def test_the_memory_store_refuses_them_as_before() -> None:
    with pytest.raises(ValueError, match="replay window must hold at least one event"):
        MemoryJournalStore(RUN, max_events=0)


def test_evictions_take_the_oldest_until_both_bounds_hold() -> None:
    policy = RetentionPolicy(max_events=3, max_bytes=1_000)
    assert not policy.exceeded(3, 1_000)
    assert policy.exceeded(4, 10) and policy.exceeded(1, 1_001)
    assert policy.evictions(3, 900, iter([300, 300, 300])) == (0, 0)
    assert policy.evictions(5, 500, iter([100] * 5)) == (2, 200)  # by events
    assert policy.evictions(3, 1_500, iter([600, 100, 800])) == (1, 600)  # by bytes
    # The newest entry stays, however heavy.
    assert policy.evictions(3, 3_000, iter([1_000, 1_000, 1_000])) == (2, 2_000)


def test_evictions_read_only_the_weights_of_what_leaves() -> None:
    taken: list[int] = []

    def weights() -> Iterator[int]:
        for weight in [100] * 10:
            taken.append(weight)
            yield weight

    assert RetentionPolicy(max_events=7).evictions(10, 1_000, weights()) == (3, 300)
    assert len(taken) == 3


def test_retained_overflow_drops_the_oldest_past_the_cap() -> None:
    assert RetentionPolicy(max_retained=3).retained_overflow(5) == 2
    assert RetentionPolicy(max_retained=3).retained_overflow(2) == 0
    assert RetentionPolicy(max_retained=0).retained_overflow(4) == 4


def test_a_gap_entry_names_exactly_the_missing_cursors() -> None:
    gap = gap_entry(RUN, 4, 9)
    assert gap.cursor == 9
    assert gap.weight == EVENT_OVERHEAD
    assert gap.event.kind == Kind.GAP and gap.event.run_id == RUN
    report = gap.event.dropped
    assert report is not None
    assert (report.reason, report.first_cursor, report.last_cursor, report.count) == (
        "replay_gap",
        4,
        9,
        6,
    )


def shape(entries: list[JournalEntry]) -> list[object]:
    out: list[object] = []
    for item in entries:
        report = item.event.dropped
        if item.event.kind == Kind.GAP and report is not None:
            out.append((report.first_cursor, report.last_cursor))
        else:
            out.append(item.cursor)
    return out


def test_replay_before_window_puts_gaps_around_retained_entries() -> None:
    retained = [entry(c) for c in (1, 2, 5, 7)]
    assert shape(replay_before_window(RUN, 0, 10, retained, 100)) == [
        1,
        2,
        (3, 4),
        5,
        (6, 6),
        7,
        (8, 9),
    ]
    assert shape(replay_before_window(RUN, 5, 10, retained, 100)) == [(6, 6), 7, (8, 9)]
    assert shape(replay_before_window(RUN, 3, 10, retained, 100)) == [(4, 4), 5, (6, 6), 7, (8, 9)]
    assert replay_before_window(RUN, 9, 10, retained, 100) == []  # the window comes next
    assert shape(replay_before_window(RUN, 0, 1, [], 100)) == []  # nothing appended yet


def test_replay_before_window_never_answers_more_than_asked() -> None:
    retained = [entry(c) for c in (1, 2, 5, 7)]
    for limit in range(1, 9):
        full = replay_before_window(RUN, 0, 10, retained, 100)
        assert shape(replay_before_window(RUN, 0, 10, retained, limit)) == shape(full[:limit])
    assert replay_before_window(RUN, 0, 10, retained, 0) == []


def test_replay_before_window_takes_no_more_retained_entries_than_it_needs() -> None:
    taken: list[int] = []

    def retained() -> Iterator[JournalEntry]:
        for cursor in range(1, 100):
            taken.append(cursor)
            yield entry(cursor)

    assert len(replay_before_window(RUN, 0, 200, retained(), 3)) == 3
    assert taken == [1, 2, 3]


def test_lifecycle_retention_carries_on_from_its_open_things() -> None:
    # A durable store persists `open_things` and makes the same decisions after a restart.
    def text(delta: str, message: str = "m1") -> DelegationEvent:
        return DelegationEvent(
            kind=Kind.TEXT_DELTA, run_id=RUN, delegation_id="d1", message_id=message, delta=delta
        )

    before = [text("a"), text("b", "m2")]
    after = [
        text("c"),
        text("d", "m3"),
        DelegationEvent(kind=Kind.FINISHED, run_id=RUN, delegation_id="d1"),
        text("e"),
    ]
    running = LifecycleRetention()
    assert [running.retains(e) for e in before] == [True, True]
    restarted = LifecycleRetention(running.open_things)
    assert (
        restarted.open_things
        == running.open_things
        == {
            ("text", "d1", None, "m1"),
            ("text", "d1", None, "m2"),
        }
    )
    decisions = [running.retains(e) for e in after]
    assert decisions == [restarted.retains(e) for e in after] == [False, True, True, True]
    assert restarted.open_things == {("text", "d1", None, "m1")}


def test_the_memory_store_can_be_made_from_a_policy() -> None:
    policy = RetentionPolicy(max_events=3, max_bytes=5_000, max_retained=7)
    store = MemoryJournalStore.from_policy(RUN, policy)
    assert store.policy == policy
    assert (store.max_events, store.max_bytes, store.max_retained_critical) == (3, 5_000, 7)
