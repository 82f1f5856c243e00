"""Properties of the run journal over random scripts, windows, buffers and readers.

Each example builds a script of events (several delegations, text deltas in a couple of messages,
statuses with repeats, artifacts, early, late and duplicate terminals, parent deltas, maybe a run
terminal), feeds it through `RunJournal.append_entries` in random batches, and lets readers with
random buffer sizes join, read and reconnect (`subscribe(after=last_cursor_seen)`) at random
points. What every reader saw is then checked against what the journal accepted:

- at most one terminal per delegation, and every terminal preceded by a visible start;
- cursors strictly increasing for every reader, across replay, catch-up and reconnects;
- per (delegation, message, kind) the concatenated text equals what was produced, except where a
  `stream.gap` marker announced a hole, and text never jumps across such a marker;
- critical events never missing, important events missing only when folded (and counted) or
  inside an announced gap;
- the journal's statistics agree with a model of its admission rules.

Trio runs inside the sync hypothesis test (`trio.run` with an autojump `MockClock`, so a reader
that hangs fails the example at once instead of wedging the suite).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import (
    CRITICAL,
    VOLATILE,
    DelegationEvent,
    JournalEntry,
    Kind,
    MemoryJournalStore,
    RunJournal,
    Subscription,
)

RUN = "run-p"
DELEGATIONS = ("d0", "d1", "d2")
PADDING = (0, 0, 12, 90, 400)

delegation_ids = st.sampled_from(DELEGATIONS)
text_op = st.tuples(
    st.just("text"),
    delegation_ids,
    st.sampled_from(("m0", "m1")),
    st.sampled_from((Kind.TEXT_DELTA, Kind.REASONING_DELTA)),
    st.sampled_from(PADDING),
)
operations = st.one_of(
    text_op,
    text_op,
    text_op,
    st.tuples(st.just("parent_text"), st.sampled_from(("p0", "p1")), st.sampled_from(PADDING)),
    st.tuples(st.just("tool_args"), delegation_ids, st.sampled_from(("c0", "c1"))),
    st.tuples(
        st.just("status"),
        delegation_ids,
        st.sampled_from(("working", "waiting")),
        st.sampled_from((None, "busy")),
    ),
    st.tuples(
        st.just("status"), delegation_ids, st.just("working"), st.just(None)
    ),  # plenty of identical repeats
    st.tuples(st.just("start"), delegation_ids),
    st.tuples(st.just("artifact"), delegation_ids),
    st.tuples(st.just("input"), delegation_ids),
    st.tuples(st.just("custom"), delegation_ids),
    st.tuples(
        st.just("terminal"), delegation_ids, st.sampled_from(sorted(Kind.DELEGATION_TERMINALS))
    ),
    st.tuples(st.just("run_started")),
)
run_terminals = st.sampled_from(sorted(Kind.RUN_TERMINALS))


def make_event(index: int, op: tuple[Any, ...]) -> DelegationEvent:
    name = op[0]
    if name == "text":
        _, delegation, message, kind, pad = op
        return DelegationEvent(
            kind=kind,
            run_id=RUN,
            delegation_id=delegation,
            message_id=message,
            delta=f"<{index}>" + "." * pad,
        )
    if name == "parent_text":
        _, message, pad = op
        return DelegationEvent(
            kind=Kind.PARENT_TEXT_DELTA,
            run_id=RUN,
            message_id=message,
            delta=f"<{index}>" + "-" * pad,
        )
    if name == "tool_args":
        _, delegation, call = op
        return DelegationEvent(
            kind=Kind.TOOL_CALL_ARGS,
            run_id=RUN,
            delegation_id=delegation,
            tool_call_id=call,
            delta=f"[{index}]",
        )
    if name == "status":
        _, delegation, value, text = op
        return DelegationEvent(
            kind=Kind.STATUS, run_id=RUN, delegation_id=delegation, status=value, text=text
        )
    if name == "run_started":
        return DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN)
    if name == "run_terminal":
        return DelegationEvent(kind=op[1], run_id=RUN)
    kind = {
        "start": Kind.STARTED,
        "artifact": Kind.ARTIFACT,
        "input": Kind.INPUT_REQUIRED,
        "custom": "x.vendor.unknown",
        "terminal": op[-1],
    }[name]
    return DelegationEvent(
        kind=kind, run_id=RUN, delegation_id=op[1], agent_key=f"agent-{op[1]}", name=f"e{index}"
    )


def volatile_key(event: DelegationEvent) -> tuple[str, str, str]:
    return (event.delegation_id or "", event.message_id or event.tool_call_id or "", event.kind)


# -- a model of the admission rules ----------------------------------------------------------


@attrs.define
class Admission:
    accepted: list[tuple[str, str | None, bool]] = attrs.Factory(list)  # kind, delegation, synth
    duplicate_terminals: int = 0
    after_terminal: int = 0
    duplicate_starts: int = 0


def model_admission(events: list[DelegationEvent]) -> Admission:
    model = Admission()
    run_started = run_ended = False
    open_delegations: dict[str, None] = {}  # insertion-ordered
    ended: set[str] = set()
    for event in events:
        kind, delegation = event.kind, event.delegation_id
        if run_ended:
            model.after_terminal += 1
            continue
        if not run_started:
            run_started = True
            if kind != Kind.RUN_STARTED:
                model.accepted.append((Kind.RUN_STARTED, None, True))
        elif kind == Kind.RUN_STARTED:
            model.duplicate_starts += 1
            continue
        if delegation is not None:
            if delegation in ended:
                if kind in Kind.DELEGATION_TERMINALS:
                    model.duplicate_terminals += 1
                else:
                    model.after_terminal += 1
                continue
            if delegation not in open_delegations:
                if kind != Kind.STARTED:
                    model.accepted.append((Kind.STARTED, delegation, True))
                open_delegations[delegation] = None
            elif kind == Kind.STARTED:
                model.duplicate_starts += 1
                continue
            if kind in Kind.DELEGATION_TERMINALS:
                del open_delegations[delegation]
                ended.add(delegation)
        elif kind in Kind.RUN_TERMINALS:
            for still_open in open_delegations:
                model.accepted.append((Kind.CANCELLED, still_open, True))
            open_delegations.clear()
            run_ended = True
        model.accepted.append((kind, delegation, False))
    return model


# -- readers ---------------------------------------------------------------------------------


@attrs.define(eq=False, repr=False)
class Reader:
    name: int
    first_after: int
    buffer_bytes: int
    max_entries: int
    sub: Subscription
    permits_in: trio.MemorySendChannel[None]
    permits_out: trio.MemoryReceiveChannel[None]
    seen: list[JournalEntry] = attrs.Factory(list)
    finished: bool = False
    receiving: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"Reader({self.name}, after={self.first_after}, buffer={self.buffer_bytes})"

    @property
    def last_seen(self) -> int:
        return self.seen[-1].cursor if self.seen else self.first_after


async def run_reader(reader: Reader) -> None:
    """Read one batch per permit; once permits end, read freely until the subscription ends."""
    free = False
    while True:
        if not free:
            try:
                await reader.permits_out.receive()
            except trio.EndOfChannel:
                free = True
        with trio.CancelScope() as scope:
            reader.receiving = scope
            try:
                batch = await reader.sub.receive_batch(reader.max_entries)
            except trio.EndOfChannel:
                reader.finished = True
                reader.sub.close()
                return
            finally:
                reader.receiving = None
            assert 1 <= len(batch) <= reader.max_entries
            reader.seen.extend(batch)
            assert reader.sub.last_cursor == batch[-1].cursor


# -- the scenario ----------------------------------------------------------------------------


async def scenario(data: st.DataObject, *, reconnects: bool) -> None:
    ops = data.draw(st.lists(operations, min_size=4, max_size=60), label="ops")
    events = [make_event(i, op) for i, op in enumerate(ops)]
    if data.draw(st.integers(0, 9), label="mid-run terminal?") == 0 and events:
        at = data.draw(st.integers(0, len(events)), label="mid-run terminal at")
        events.insert(at, make_event(-1, ("run_terminal", data.draw(run_terminals))))
    final_terminal = data.draw(st.none() | run_terminals, label="final run terminal")
    if final_terminal is not None:
        events.append(make_event(len(ops), ("run_terminal", final_terminal)))

    window = data.draw(st.sampled_from((1, 2, 3, 5, 8, 13, 30, 10_000)), label="window")
    window_bytes = data.draw(st.sampled_from((8 << 20, 8 << 20, 1500)), label="window bytes")
    store = MemoryJournalStore(RUN, max_events=window, max_bytes=window_bytes)
    journal = RunJournal(RUN, store=store)

    batches: list[list[DelegationEvent]] = []
    rest = list(events)
    while rest:
        size = data.draw(st.integers(1, 6), label="batch size")
        batches.append(rest[:size])
        rest = rest[size:]

    readers: list[Reader] = []
    accepted: list[JournalEntry] = []
    actions = ("append", "append", "read", "read", "read", "join")
    if reconnects:
        actions += ("reconnect", "reconnect")

    async with trio.open_nursery() as nursery:

        def join(after: int | None) -> None:
            buffer_bytes = data.draw(
                st.sampled_from((160, 200, 330, 600, 1500, 1 << 20)), label="buffer"
            )
            max_entries = data.draw(st.sampled_from((1, 2, 3, 512)), label="max entries")
            permits_in, permits_out = trio.open_memory_channel[None](math.inf)
            sub = journal.subscribe(after=after, max_buffer_bytes=buffer_bytes)
            first_after = 0 if after is None else after
            reader = Reader(
                name=len(readers),
                first_after=first_after,
                buffer_bytes=buffer_bytes,
                max_entries=max_entries,
                sub=sub,
                permits_in=permits_in,
                permits_out=permits_out,
            )
            readers.append(reader)
            nursery.start_soon(run_reader, reader)

        for _ in range(data.draw(st.integers(0, 2), label="readers at start")):
            join(data.draw(st.sampled_from((None, 0)), label="first after"))

        steps = 0
        while batches:
            steps += 1
            action = data.draw(st.sampled_from(actions), label="action")
            active = [r for r in readers if not r.finished]
            if action == "append" or steps > 300:
                accepted += await journal.append_entries([JournalEntry(e) for e in batches.pop(0)])
            elif action == "join" and len(readers) < 5:
                how = data.draw(st.sampled_from(("zero", "head", "somewhere")), label="join at")
                if how == "zero":
                    join(0)
                elif how == "head":
                    join(journal.head)
                else:
                    join(data.draw(st.integers(0, journal.head), label="join cursor"))
            elif action == "read" and active:
                reader = active[data.draw(st.integers(0, len(active) - 1), label="reader")]
                for _ in range(data.draw(st.integers(1, 3), label="reads")):
                    reader.permits_in.send_nowait(None)
            elif action == "reconnect" and active:
                reader = active[data.draw(st.integers(0, len(active) - 1), label="reconnecting")]
                await reconnect(journal, reader)
            await trio.testing.wait_all_tasks_blocked()

        if not journal.ended or data.draw(st.booleans(), label="close after end"):
            journal.close()
        for reader in readers:
            reader.permits_in.close()

    check_journal(journal, events, accepted)
    for reader in readers:
        assert reader.finished, f"reader {reader.name} did not end"
        check_reader(reader, accepted, store)
    stats = journal.statistics()
    assert stats.live_subscribers == 0
    assert stats.catching_up_subscribers == 0


async def reconnect(journal: RunJournal, reader: Reader) -> None:
    """Drop the connection and open a new one after the last cursor this reader saw."""
    while reader.receiving is not None:  # parked in receive_batch: nothing to read yet
        reader.receiving.cancel()
        await trio.testing.wait_all_tasks_blocked()
    if reader.finished:
        return
    assert reader.sub.last_cursor == reader.last_seen
    reader.sub.close()
    reader.sub = journal.subscribe(after=reader.last_seen, max_buffer_bytes=reader.buffer_bytes)


# -- checks ----------------------------------------------------------------------------------


def check_journal(
    journal: RunJournal, events: list[DelegationEvent], accepted: list[JournalEntry]
) -> None:
    stats = journal.statistics()
    assert [e.cursor for e in accepted] == list(range(1, len(accepted) + 1))
    assert stats.head == journal.head == stats.appended == len(accepted)

    model = model_admission(events)
    assert [(e.event.kind, e.event.delegation_id, e.event.synthesized) for e in accepted] == (
        model.accepted
    )
    assert stats.rejected_duplicate_terminals == model.duplicate_terminals
    assert stats.rejected_after_terminal == model.after_terminal
    assert stats.rejected_duplicate_starts == model.duplicate_starts
    synthesized = [e.event for e in accepted if e.event.synthesized]
    assert stats.synthesized_starts == sum(
        e.kind in (Kind.STARTED, Kind.RUN_STARTED) for e in synthesized
    )
    assert stats.synthesized_terminals == sum(e.kind == Kind.CANCELLED for e in synthesized)
    rejected = (
        stats.rejected_duplicate_terminals
        + stats.rejected_after_terminal
        + stats.rejected_duplicate_starts
    )
    assert len(events) == len(accepted) - len(synthesized) + rejected
    run_terminals = [e for e in accepted if e.event.kind in Kind.RUN_TERMINALS]
    assert stats.ended == journal.ended == bool(run_terminals)
    assert len(run_terminals) <= 1
    if run_terminals:
        assert accepted[-1] is run_terminals[0]
    for cancel in synthesized:
        if cancel.kind == Kind.CANCELLED:
            assert cancel.error is not None
            assert cancel.error.code == "run_closed"
    if accepted:
        assert accepted[0].event.kind == Kind.RUN_STARTED
    check_lifecycle(accepted)


def check_lifecycle(entries: list[JournalEntry], started: frozenset[str] = frozenset()) -> None:
    """At most one terminal per delegation; every delegation event after a visible start."""
    visible_starts = set(started)
    terminals: dict[str, int] = {}
    for entry in entries:
        event = entry.event
        delegation = event.delegation_id
        if delegation is None or event.kind == Kind.STREAM_DROPPED:
            continue
        if event.kind == Kind.STARTED:
            assert delegation not in visible_starts, f"second start of {delegation}"
            visible_starts.add(delegation)
            continue
        assert delegation in visible_starts, f"{entry} of {delegation} before its start"
        assert delegation not in terminals, f"{entry} after {delegation}'s terminal"
        if event.kind in Kind.DELEGATION_TERMINALS:
            terminals[delegation] = entry.cursor


def check_reader(reader: Reader, accepted: list[JournalEntry], store: MemoryJournalStore) -> None:
    seen = reader.seen
    after = reader.first_after
    by_cursor = {e.cursor: e for e in accepted}
    head = len(accepted)

    # Cursors strictly increasing across replay, catch-up and reconnects.
    cursors = [e.cursor for e in seen]
    assert all(a < b for a, b in itertools.pairwise(cursors)), cursors
    assert all(after < c <= head for c in cursors)
    final = cursors[-1] if cursors else after

    # Lifecycle as this reader sees it (starts at or before `after` count as seen).
    earlier_starts = frozenset(
        e.event.delegation_id
        for e in accepted[:after]
        if e.event.kind == Kind.STARTED and e.event.delegation_id is not None
    )
    check_lifecycle(seen, earlier_starts)
    run_terminals = [e for e in seen if e.event.kind in Kind.RUN_TERMINALS]
    assert len(run_terminals) <= 1
    if run_terminals:
        assert seen[-1] is run_terminals[0]
    # A reader ends only after everything journaled (up to the run terminal, if any).
    assert final == head, f"reader ended at {final}, journal head is {head}"

    # Gap markers: well formed, only where the window lost something, never over criticals.
    gaps = [e for e in seen if e.event.kind == Kind.GAP]
    covered: set[int] = set()
    for gap in gaps:
        report = gap.event.dropped
        assert report is not None
        assert report.reason == "replay_gap"
        assert report.first_cursor is not None
        assert report.last_cursor is not None
        assert report.last_cursor == gap.cursor
        assert report.count == report.last_cursor - report.first_cursor + 1 >= 1
        span = range(report.first_cursor, report.last_cursor + 1)
        assert all(by_cursor[c].event.lane != CRITICAL for c in span)
        covered.update(span)
    if store.evicted == 0:
        assert not gaps
    assert not covered & {e.cursor for e in seen if e.event.kind != Kind.GAP}

    # Text: per key, each delivered delta carries exactly the text produced since the previous
    # delivered delta of that key (or the last gap), and nothing is left behind.
    produced: dict[tuple[str, str, str], list[JournalEntry]] = defaultdict(list)
    for entry in accepted:
        if entry.event.lane == VOLATILE:
            produced[volatile_key(entry.event)].append(entry)

    def text_between(key: tuple[str, str, str], low: int, high: int) -> str:
        return "".join(e.event.delta or "" for e in produced[key] if low < e.cursor <= high)

    accounted: dict[tuple[str, str, str], int] = defaultdict(lambda: after)
    for entry in seen:
        event = entry.event
        if event.kind == Kind.GAP:
            report = event.dropped
            assert report is not None
            assert report.first_cursor is not None
            for key in produced:
                left = text_between(key, accounted[key], report.first_cursor - 1)
                assert left == "", f"text {left!r} of {key} moved across the gap at {entry}"
                accounted[key] = entry.cursor
        elif event.lane == VOLATILE:
            key = volatile_key(event)
            expected = text_between(key, accounted[key], entry.cursor)
            assert event.delta == expected, (key, entry, expected)
            assert by_cursor[entry.cursor].event.kind == event.kind
            accounted[key] = entry.cursor
    for key in produced:
        assert text_between(key, accounted[key], final) == "", f"text of {key} lost"

    # Critical entries are all there; important ones are there unless folded (and announced).
    seen_ids = {id(e) for e in seen}
    folded: dict[str, int] = defaultdict(int)
    for entry in accepted[after:final]:
        event = entry.event
        if entry.cursor in covered or event.lane == VOLATILE or id(entry) in seen_ids:
            continue
        assert event.lane != CRITICAL, f"critical {entry} missing"
        assert event.kind == Kind.STATUS, f"important {entry} missing"
        folded[event.stream_key] += 1
    announced: dict[str, int] = defaultdict(int)
    for entry in seen:
        if entry.event.kind in (Kind.STREAM_DROPPED, Kind.DROPPED):
            report = entry.event.dropped
            assert report is not None
            assert report.reason == "status_folded"
            assert report.first_cursor is not None
            assert report.last_cursor is not None
            assert report.first_cursor <= entry.cursor <= report.last_cursor
            assert by_cursor[entry.cursor].event.kind == Kind.STATUS
            announced[entry.event.stream_key] += report.count
    assert dict(folded) == dict(announced)


def run_scenario(data: st.DataObject, *, reconnects: bool) -> None:
    async def bounded() -> None:
        with trio.fail_after(3600):  # only a deadlock lets the autojump clock get this far
            await scenario(data, reconnects=reconnects)

    trio.run(bounded, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_journal_properties(data: st.DataObject) -> None:
    """Readers that join at random points (any cursor up to the head) and read at random paces."""
    run_scenario(data, reconnects=False)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_journal_properties_across_reconnects(data: st.DataObject) -> None:
    """The same, with readers that drop and resubscribe with the last cursor they saw."""
    run_scenario(data, reconnects=True)
