"""A conformance kit for `JournalStore`s: does a store follow the store contract?

The store contract (`engine._store`) says what a store keeps of a run's journal: cursor
continuity, batch appends, read after write, the replay window, the gap markers a reader behind
the window gets, and the lifecycle entries retained beyond the window. The engine's own
`MemoryJournalStore` follows it; a durable store (SQLite, Redis Streams, ...) must follow it
exactly, and this kit checks that it does:

- explicit examples, each a few batches and reads whose answers are written out here;
- hypothesis scenarios: random retention policies, random batches of lifecycle events mixed
  with text deltas (empty, short and heavy), reads from random cursors with random limits
  between the batches, walks through the whole replay in small reads, and in the end a read
  after every cursor. Every answer is compared, entry by entry (cursor, event, weight), with a
  reference model written from the contract's text (it shares no code with the engine's
  stores, nor with the contract's own sans-IO pieces).

A store is made by a factory `factory(run_id, policy)`, called once per scenario, which returns
the store, an awaitable of it, or an async context manager that yields it (for a store that
needs async setup and teardown: a connection, a temporary database). Each scenario gets a run id
of its own, so a factory may share one database between scenarios.

`check_journal_store` runs inside Trio (pytest-trio, `trio.run`, ...): the stores are opened and
used in the caller's event loop, while hypothesis drives the scenarios from a worker thread.
`check_journal_store_sync` runs it in a Trio loop of its own, for any other test framework. A
broken rule raises `JournalStoreContractError` (an `AssertionError`) naming the read, what the
contract expects and what the store answered; hypothesis adds the smallest scenario it found.
"""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, TypeAlias, cast

import attrs
import hypothesis
import trio
from hypothesis import strategies as st

from engine._events import DelegationEvent, DropReport, Kind
from engine._lanes import EVENT_OVERHEAD, JournalEntry, event_weight
from engine._store import JournalStore, RetentionPolicy

__all__ = [
    "JournalStoreContractError",
    "StoreFactory",
    "check_journal_store",
    "check_journal_store_sync",
]

#: Makes the store under test for one run: `factory(run_id, policy)` returns the store, an
#: awaitable of it, or an async context manager yielding it (entered once, left at the end).
StoreFactory: TypeAlias = Callable[
    [str, RetentionPolicy],
    JournalStore | Awaitable[JournalStore] | AbstractAsyncContextManager[JournalStore],
]


class JournalStoreContractError(AssertionError):
    """A store answered a read otherwise than the store contract says it must."""


# -- the reference model ---------------------------------------------------------------------
#
# Written from the contract's text, one rule at a time, and as plainly as possible: the window
# is computed from all entries appended so far, whether a thing was open is found by looking
# back through what left the window, and a read is a slice of the whole replay.

#: Kinds retained beyond the window whatever is open.
_ALWAYS_RETAINED: Final = frozenset(
    {
        Kind.STARTED,
        Kind.INPUT_REQUIRED,
        Kind.INPUT_CLOSED,
        Kind.RUN_STARTED,
        Kind.FINISHED,
        Kind.FAILED,
        Kind.CANCELLED,
        Kind.RUN_FINISHED,
        Kind.RUN_FAILED,
        Kind.RUN_CANCELLED,
        Kind.NESTED_FINISHED,
        Kind.NESTED_FAILED,
        Kind.NESTED_CANCELLED,
    }
)

_OPEN, _CONTENT, _END, _CLOSE = "open", "content", "end", "close"

#: Kinds of the things a viewer holds open: kind -> (family, what the kind does to its thing).
_THINGS: Final[dict[str, tuple[str, str]]] = {
    Kind.TEXT_START: ("text", _OPEN),
    Kind.PARENT_TEXT_START: ("text", _OPEN),
    Kind.TEXT_DELTA: ("text", _CONTENT),
    Kind.PARENT_TEXT_DELTA: ("text", _CONTENT),
    Kind.TEXT_END: ("text", _CLOSE),
    Kind.PARENT_TEXT_END: ("text", _CLOSE),
    Kind.REASONING_START: ("reasoning", _OPEN),
    Kind.PARENT_REASONING_START: ("reasoning", _OPEN),
    Kind.REASONING_DELTA: ("reasoning", _CONTENT),
    Kind.PARENT_REASONING_DELTA: ("reasoning", _CONTENT),
    Kind.REASONING_END: ("reasoning", _CLOSE),
    Kind.PARENT_REASONING_END: ("reasoning", _CLOSE),
    Kind.TOOL_CALL_START: ("tool", _OPEN),
    Kind.PARENT_TOOL_CALL_START: ("tool", _OPEN),
    Kind.TOOL_CALL_ARGS: ("tool", _CONTENT),
    Kind.PARENT_TOOL_CALL_ARGS: ("tool", _CONTENT),
    Kind.TOOL_CALL_END: ("tool", _END),
    Kind.PARENT_TOOL_CALL_END: ("tool", _END),
    Kind.TOOL_CALL_RESULT: ("tool", _CLOSE),
    Kind.PARENT_TOOL_CALL_RESULT: ("tool", _CLOSE),
}

_Thing: TypeAlias = tuple[str, str | None, str | None, str]


def _thing(event: DelegationEvent) -> _Thing | None:
    """The message, reasoning message or tool call an event is about, if any."""
    role = _THINGS.get(event.kind)
    if role is None:
        return None
    family = role[0]
    ident = event.tool_call_id if family == "tool" else event.message_id
    return (family, event.delegation_id or None, event.nested_id, ident or "")


def _nested_subagent(event: DelegationEvent) -> _Thing | None:
    """The nested subagent an event opens if it was not open (fold markers and nested
    terminals open none)."""
    if event.nested_id is None or event.kind == Kind.NESTED_FOLDED:
        return None
    if event.kind in Kind.NESTED_TERMINALS:
        return None
    return ("nested", event.delegation_id or None, event.nested_id, event.nested_id)


def _has_characters(event: DelegationEvent) -> bool:
    text = event.delta if event.delta is not None else event.text
    return isinstance(text, str) and text != ""


def _closes(event: DelegationEvent, thing: _Thing) -> bool:
    if event.kind in Kind.DELEGATION_TERMINALS:
        return (event.delegation_id or None) == thing[1]
    if event.kind in Kind.NESTED_TERMINALS:
        return event.nested_id == thing[2]
    if event.kind in Kind.RUN_TERMINALS:
        return not event.delegation_id
    role = _THINGS.get(event.kind)
    return role is not None and role[1] == _CLOSE and _thing(event) == thing


def _opens(event: DelegationEvent, thing: _Thing) -> bool:
    if thing[0] == "nested":
        return _nested_subagent(event) == thing
    role = _THINGS.get(event.kind)
    if role is None or _thing(event) != thing:
        return False
    if role[1] == _OPEN:
        return True
    return role[1] == _CONTENT and (role[0] == "tool" or _has_characters(event))


def _was_open(thing: _Thing, earlier: Sequence[DelegationEvent]) -> bool:
    for event in reversed(earlier):
        if _closes(event, thing):
            return False
        if _opens(event, thing):
            return True
    return False


def _retained(event: DelegationEvent, earlier: Sequence[DelegationEvent]) -> bool:
    """Whether an entry leaving the window is retained, `earlier` being everything that left
    the window before it."""
    if event.kind in _ALWAYS_RETAINED:
        return True
    subagent = _nested_subagent(event)
    if subagent is not None and not _was_open(subagent, earlier):
        return True
    role = _THINGS.get(event.kind)
    if role is None:
        return False
    if role[1] != _CONTENT:
        return True
    thing = _thing(event)
    assert thing is not None
    return not _was_open(thing, earlier)


def _expected_gap(run_id: str, first: int, last: int) -> JournalEntry:
    marker = DelegationEvent(
        kind=Kind.GAP,
        run_id=run_id,
        dropped=DropReport(
            reason="replay_gap", count=last - first + 1, first_cursor=first, last_cursor=last
        ),
    )
    return JournalEntry(marker, last, event_weight(marker))


class _Reference:
    """What a store following the contract answers, computed from everything appended."""

    def __init__(self, run_id: str, policy: RetentionPolicy) -> None:
        self.run_id = run_id
        self.policy = policy
        self.entries: list[JournalEntry] = []
        self._window_start = 0  # index of the window's oldest entry
        self._retained: dict[int, JournalEntry] = {}

    @property
    def head(self) -> int:
        return len(self.entries)

    def append(self, batch: Sequence[JournalEntry]) -> None:
        self.entries.extend(batch)
        # The window: the longest run of newest entries within both bounds, never empty.
        count = size = 0
        start = len(self.entries)
        while start > 0:
            weight = self.entries[start - 1].weight
            if count + 1 > self.policy.max_events or size + weight > self.policy.max_bytes:
                break
            count += 1
            size += weight
            start -= 1
        self._window_start = min(start, len(self.entries) - 1)
        left = [entry.event for entry in self.entries[: self._window_start]]
        kept = [
            entry
            for index, entry in enumerate(self.entries[: self._window_start])
            if _retained(entry.event, left[:index])
        ]
        cap = self.policy.max_retained
        kept = kept[max(0, len(kept) - cap) :] if cap > 0 else []
        self._retained = {entry.cursor: entry for entry in kept}

    def replay(self, after: int) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        missing_from: int | None = None
        window_first = self._window_start + 1  # cursors are 1, 2, ...
        for cursor in range(after + 1, window_first):
            kept = self._retained.get(cursor)
            if kept is None:
                if missing_from is None:
                    missing_from = cursor
                continue
            if missing_from is not None:
                out.append(_expected_gap(self.run_id, missing_from, cursor - 1))
                missing_from = None
            out.append(kept)
        if missing_from is not None:
            out.append(_expected_gap(self.run_id, missing_from, window_first - 1))
        out += [entry for entry in self.entries[self._window_start :] if entry.cursor > after]
        return out

    def read_after(self, after: int, max_entries: int) -> list[JournalEntry]:
        return self.replay(after)[:max_entries]


# -- comparing answers -----------------------------------------------------------------------


def _describe(entry: JournalEntry) -> str:
    event = entry.event
    if event.kind == Kind.GAP and event.dropped is not None:
        report = event.dropped
        return f"{entry.cursor}:gap[{report.first_cursor}..{report.last_cursor}]"
    return f"{entry.cursor}:{event.kind}"


def _describe_event(event: DelegationEvent) -> str:
    fields = [event.kind]
    for name in ("delegation_id", "nested_id", "message_id", "tool_call_id"):
        value = getattr(event, name)
        if value is not None:
            fields.append(f"{name.split('_')[0]}={value!r}")
    for name in ("delta", "text"):
        value = getattr(event, name)
        if value is not None:
            shown = value if len(value) <= 8 else f"{value[:5]}...({len(value)})"
            fields.append(f"{name}={shown!r}")
    return " ".join(fields)


def _differences(entry: JournalEntry, other: JournalEntry) -> str:
    """The fields of `entry` that differ from `other`'s (its kind always)."""
    shown = [f"cursor={entry.cursor}"] if entry.cursor != other.cursor else []
    shown.append(f"kind={entry.event.kind!r}")
    for field in attrs.fields(DelegationEvent):
        mine, theirs = getattr(entry.event, field.name), getattr(other.event, field.name)
        if field.name != "kind" and mine != theirs:
            shown.append(f"{field.name}={mine!r}")
    if entry.weight != other.weight:
        shown.append(f"weight={entry.weight}")
    return " ".join(shown)


def _compare(
    got: object, expected: list[JournalEntry], after: int, max_entries: int, context: str
) -> None:
    call = f"read_after({after}, {max_entries})"
    if not isinstance(got, list) or not all(isinstance(e, JournalEntry) for e in got):
        raise JournalStoreContractError(
            f"{call} {context}: expected a list of JournalEntry, got {got!r}"
        )
    if [(e.cursor, e.event, e.weight) for e in got] == [
        (e.cursor, e.event, e.weight) for e in expected
    ]:
        return
    lines = [
        f"{call} {context} breaks the store contract",
        f"  expected: {[_describe(e) for e in expected]}",
        f"  got:      {[_describe(e) for e in got]}",
    ]
    if len(got) > max_entries:
        lines.append(f"  ({len(got)} entries, more than max_entries)")
    for mine, theirs in zip(expected, got, strict=False):
        if (mine.cursor, mine.event, mine.weight) != (theirs.cursor, theirs.event, theirs.weight):
            lines.append(f"  first difference, at cursor {mine.cursor}:")
            lines.append(f"    expected {_differences(mine, theirs)}")
            lines.append(f"    got      {_differences(theirs, mine)}")
            break
    raise JournalStoreContractError("\n".join(lines))


@asynccontextmanager
async def _open_store(
    factory: StoreFactory, run_id: str, policy: RetentionPolicy
) -> AsyncIterator[JournalStore]:
    made: object = factory(run_id, policy)
    if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
        async with cast(AbstractAsyncContextManager[JournalStore], made) as store:
            yield store
        return
    if inspect.isawaitable(made):
        made = await made
    yield cast(JournalStore, made)


def _new_run_id() -> str:
    return f"store-kit-{uuid.uuid4().hex[:12]}"


# -- steps -----------------------------------------------------------------------------------


@attrs.frozen
class _Append:
    """Append the next batch (events get their run id and cursors when appended)."""

    events: tuple[DelegationEvent, ...]

    def __repr__(self) -> str:
        return f"append[{', '.join(_describe_event(e) for e in self.events)}]"


@attrs.frozen
class _Read:
    """Read after a cursor (`seed` modulo head + 1) at most `max_entries`; `walk`: keep reading
    after the last entry until the store has no more."""

    seed: int
    max_entries: int
    walk: bool = False

    def __repr__(self) -> str:
        verb = "walk" if self.walk else "read"
        return f"{verb}(after=seed {self.seed}, max_entries={self.max_entries})"


@attrs.frozen
class _Expect:
    """Read after `after` at most `max_entries`, and expect exactly `entries`: an int is the
    entry appended with that cursor, a pair (first, last) a gap marker."""

    after: int
    max_entries: int
    entries: tuple[int | tuple[int, int], ...]


def _entries_for(events: Sequence[DelegationEvent], run_id: str, head: int) -> list[JournalEntry]:
    return [
        JournalEntry(attrs.evolve(event, run_id=run_id), head + offset)
        for offset, event in enumerate(events, start=1)
    ]


async def _read_and_compare(
    store: JournalStore, model: _Reference, after: int, max_entries: int, context: str
) -> list[JournalEntry]:
    got = await store.read_after(after, max_entries)
    _compare(got, model.read_after(after, max_entries), after, max_entries, context)
    return got


@attrs.frozen
class _Scenario:
    policy: RetentionPolicy
    steps: tuple[_Append | _Read, ...]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis prints falsifying examples this way

    def __repr__(self) -> str:
        lines = [f"policy={self.policy!r}"]
        cursor = 0
        for step in self.steps:
            if isinstance(step, _Append):
                first, cursor = cursor + 1, cursor + len(step.events)
                lines.append(f"  cursors {first}..{cursor}: {step!r}")
            else:
                lines.append(f"  {step!r}")
        return "\n".join(lines)


async def _run_scenario(factory: StoreFactory, scenario: _Scenario) -> None:
    run_id = _new_run_id()
    model = _Reference(run_id, scenario.policy)
    async with _open_store(factory, run_id, scenario.policy) as store:
        for step in scenario.steps:
            context = f"after appending cursors 1..{model.head} ({scenario.policy!r})"
            if isinstance(step, _Append):
                batch = _entries_for(step.events, run_id, model.head)
                await store.append(batch)
                model.append(batch)
                continue
            after = step.seed % (model.head + 1)
            got = await _read_and_compare(store, model, after, step.max_entries, context)
            while step.walk and got:
                after = got[-1].cursor
                got = await _read_and_compare(store, model, after, step.max_entries, context)
        context = f"after appending cursors 1..{model.head} ({scenario.policy!r})"
        for after in range(model.head + 1):
            await _read_and_compare(store, model, after, model.head + 1, context)


# -- strategies ------------------------------------------------------------------------------

_KINDS: Final = (
    *sorted(
        value
        for name, value in vars(Kind).items()
        if name.isupper() and isinstance(value, str) and value not in (Kind.GAP, Kind.DROPPED)
    ),
    "x.vendor.unknown",
)
_CONTENT_KINDS: Final = tuple(sorted(k for k, (_, role) in _THINGS.items() if role == _CONTENT))
_LIFECYCLE_KINDS: Final = tuple(sorted(k for k, (_, role) in _THINGS.items() if role != _CONTENT))
_TERMINAL_KINDS: Final = tuple(
    sorted(Kind.DELEGATION_TERMINALS | Kind.NESTED_TERMINALS | Kind.RUN_TERMINALS)
)

_OTHER_KINDS: Final = tuple(
    k for k in _KINDS if k not in {*_CONTENT_KINDS, *_LIFECYCLE_KINDS, *_TERMINAL_KINDS}
)

#: Each scenario draws its events from a few kinds and ids of its own ("swarm testing"), so
#: that one thing is opened, filled, closed and forgotten by a terminal often in some scenario.
_kind_pools: Final = st.tuples(
    st.lists(st.sampled_from(_CONTENT_KINDS), min_size=1, max_size=3, unique=True),
    st.lists(st.sampled_from(_LIFECYCLE_KINDS), max_size=3, unique=True),
    st.lists(st.sampled_from(_TERMINAL_KINDS), max_size=3, unique=True),
    st.lists(st.sampled_from(_OTHER_KINDS), max_size=2, unique=True),
).map(lambda groups: tuple(kind for group in groups for kind in group))


def _pool(*values: str | None) -> st.SearchStrategy[tuple[str | None, ...]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True).map(
        tuple
    )


def _events(draw: st.DrawFn) -> st.SearchStrategy[DelegationEvent]:
    """Events of one scenario: its kinds and ids drawn first, then each event from them."""
    return st.builds(
        DelegationEvent,
        kind=st.sampled_from(draw(_kind_pools, label="kinds")),
        run_id=st.just(""),
        delegation_id=st.sampled_from(draw(_pool("d1", None, "d2", ""), label="delegations")),
        nested_id=st.sampled_from(draw(_pool(None, "d1/n1", "d2/n1"), label="nested ids")),
        message_id=st.sampled_from(draw(_pool("m1", None, "m2"), label="message ids")),
        tool_call_id=st.sampled_from(draw(_pool("c1", None, "c2"), label="tool call ids")),
        delta=st.sampled_from(draw(_pool("x", None, "", "xx" * 150), label="deltas")),
        text=st.sampled_from(draw(_pool(None, "", "note"), label="texts")),
    )


#: Retention policies the kit tries by default: tiny windows (by events and by bytes, down to
#: a single entry) and caps on what is retained, as well as windows nothing leaves.
_DEFAULT_POLICIES: Final = st.builds(
    RetentionPolicy,
    max_events=st.sampled_from((1, 2, 3, 5, 8, 10_000)),
    max_bytes=st.sampled_from((EVENT_OVERHEAD, 500, 1_200, 8 << 20)),
    max_retained=st.sampled_from((10_000, 0, 1, 3, 10_000, 10_000)),
)

_reads: Final = st.builds(
    _Read,
    seed=st.integers(0, 1_000),
    max_entries=st.sampled_from((1, 2, 3, 512)),
    walk=st.booleans(),
)


@st.composite
def _scenarios(draw: st.DrawFn, policies: st.SearchStrategy[RetentionPolicy]) -> _Scenario:
    policy = draw(policies, label="policy")
    steps: list[_Append | _Read] = []
    events = _events(draw)
    batches = draw(st.lists(st.lists(events, min_size=1, max_size=6), min_size=1, max_size=16))
    for index, batch in enumerate(batches):
        steps.append(_Append(tuple(attrs.evolve(e, sequence=index) for e in batch)))
        steps += draw(st.lists(_reads, max_size=2))
    return _Scenario(policy, tuple(steps))


# -- explicit examples -----------------------------------------------------------------------


def _event(kind: str, delegation: str | None = None, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="", delegation_id=delegation, **fields)


def _text(delegation: str | None, message: str, delta: str, **fields: Any) -> DelegationEvent:
    kind = Kind.TEXT_DELTA if delegation else Kind.PARENT_TEXT_DELTA
    return _event(kind, delegation, message_id=message, delta=delta, **fields)


@attrs.frozen
class _Example:
    name: str
    policy: RetentionPolicy
    steps: tuple[_Append | _Expect, ...]


_EXAMPLES: Final = (
    _Example(
        "a reader behind the window gets gaps around the starts, terminals and openings kept",
        RetentionPolicy(max_events=5),
        (
            _Expect(0, 5, ()),  # nothing appended yet
            _Append(
                (
                    _event(Kind.RUN_STARTED),  # 1
                    _event(Kind.STARTED, "d1"),  # 2
                    _text("d1", "m1", "a"),  # 3: opens d1's message m1
                    _text("d1", "m1", "b"),  # 4
                    _event(Kind.STARTED, "d2"),  # 5
                    _event(Kind.STATUS, "d2", status="working"),  # 6
                )
            ),
            _Expect(0, 100, (1, 2, 3, 4, 5, 6)),
            _Append(
                (
                    _event(Kind.FINISHED, "d1"),  # 7
                    *(_text("d2", "m1", c) for c in "cdefg"),  # 8..12
                )
            ),
            _Expect(1, 100, (2, 3, (4, 4), 5, (6, 6), 7, 8, 9, 10, 11, 12)),
            _Expect(0, 100, (1, 2, 3, (4, 4), 5, (6, 6), 7, 8, 9, 10, 11, 12)),
            _Expect(0, 3, (1, 2, 3)),
            _Expect(3, 1, ((4, 4),)),  # a gap marker counts as an entry
            _Expect(4, 2, (5, (6, 6))),
            _Expect(5, 3, ((6, 6), 7, 8)),
            _Expect(7, 2, (8, 9)),
            _Expect(9, 100, (10, 11, 12)),
            _Expect(12, 5, ()),
        ),
    ),
    _Example(
        "the window is bounded in bytes",
        RetentionPolicy(max_bytes=3 * (EVENT_OVERHEAD + 100)),
        (
            _Append((_event(Kind.RUN_STARTED),)),
            *(_Append((_text(None, "m", "x" * 100),)) for _ in range(6)),  # 2..7
            _Expect(0, 100, (1, 2, (3, 4), 5, 6, 7)),
            _Expect(2, 100, ((3, 4), 5, 6, 7)),
            _Expect(3, 100, ((4, 4), 5, 6, 7)),
        ),
    ),
    _Example(
        "the newest entry stays however heavy, and leaves with the next batch",
        RetentionPolicy(max_events=10, max_bytes=EVENT_OVERHEAD),
        (
            _Append(
                (
                    _event(Kind.RUN_STARTED),  # 1
                    _text(None, "m", "x" * 50),  # 2: opens the message
                    _event(Kind.CUSTOM, "d1"),  # 3
                )
            ),
            _Expect(0, 10, (1, 2, 3)),
            _Append((_text(None, "m", "y" * 500),)),  # 4, alone heavier than the window
            _Expect(0, 10, (1, 2, (3, 3), 4)),
            _Append((_event(Kind.CUSTOM, "d1"),)),  # 5
            _Expect(0, 10, (1, 2, (3, 4), 5)),
        ),
    ),
    _Example(
        "at most max_retained entries are kept beyond the window, the oldest dropped first",
        RetentionPolicy(max_events=1, max_retained=2),
        (
            _Append(
                (
                    _event(Kind.RUN_STARTED),  # 1
                    _event(Kind.STARTED, "d1"),  # 2
                    _event(Kind.STARTED, "d2"),  # 3
                    _event(Kind.STARTED, "d3"),  # 4
                    _event(Kind.STATUS, "d3", status="working"),  # 5
                )
            ),
            _Expect(0, 10, ((1, 2), 3, 4, 5)),
        ),
    ),
    _Example(
        "a tool call's start, end and result and a message's opening and close are kept",
        RetentionPolicy(max_events=1),
        (
            _Append(
                (
                    _event(Kind.RUN_STARTED),  # 1
                    _event(Kind.PARENT_TOOL_CALL_START, tool_call_id="c1"),  # 2
                    _event(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id="c1", delta="{}"),  # 3
                    _event(Kind.PARENT_TOOL_CALL_END, tool_call_id="c1"),  # 4
                    _event(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="c1"),  # 5
                    _text(None, "m1", ""),  # 6: no characters: kept, opens nothing
                    _text(None, "m1", "hi"),  # 7: opens m1
                    _text(None, "m1", "more"),  # 8
                    _event(Kind.PARENT_TEXT_END, message_id="m1"),  # 9
                    _text(None, "m1", "again"),  # 10: m1 was closed: opens it again
                    _text(None, "m1", "!"),  # 11
                    _event(Kind.RUN_FINISHED),  # 12: forgets everything
                    _text(None, "m1", "after"),  # 13: opens m1 again
                    _event(Kind.PARENT_CUSTOM),  # 14
                )
            ),
            _Expect(0, 20, (1, 2, (3, 3), 4, 5, 6, 7, (8, 8), 9, 10, (11, 11), 12, 13, 14)),
            _Expect(2, 2, ((3, 3), 4)),
        ),
    ),
    _Example(
        "nested subagents are kept; a terminal forgets what its delegation held open",
        RetentionPolicy(max_events=1),
        (
            _Append(
                (
                    _event(Kind.STARTED, "d1"),  # 1
                    _text("d1", "m1", "a"),  # 2: opens d1's m1
                    _event(Kind.NESTED_STARTED, "d1", nested_id="d1/n1"),  # 3: opens d1/n1
                    _text("d1", "m1", "b", nested_id="d1/n1"),  # 4: opens d1/n1's own m1
                    _text("d1", "m1", "c", nested_id="d1/n1"),  # 5
                    _event(Kind.NESTED_FINISHED, "d1", nested_id="d1/n1"),  # 6: forgets 3, 4
                    _text("d1", "m1", "d", nested_id="d1/n1"),  # 7: opens d1/n1 and its m1 again
                    _text("d1", "m1", "e"),  # 8: d1's m1 is still open
                    _event(Kind.FINISHED, "d1"),  # 9
                    _text("d1", "m1", "f"),  # 10: d1 ended, its m1 is forgotten
                    _event(Kind.STATUS, "d1", status="late"),  # 11
                )
            ),
            _Expect(0, 20, (1, 2, 3, 4, (5, 5), 6, 7, (8, 8), 9, 10, 11)),
        ),
    ),
)


async def _run_example(factory: StoreFactory, example: _Example) -> None:
    run_id = _new_run_id()
    model_context = f"in the example {example.name!r} ({example.policy!r})"
    appended: list[JournalEntry] = []
    async with _open_store(factory, run_id, example.policy) as store:
        for step in example.steps:
            if isinstance(step, _Append):
                batch = _entries_for(step.events, run_id, len(appended))
                await store.append(batch)
                appended += batch
                continue
            expected = [
                appended[item - 1] if isinstance(item, int) else _expected_gap(run_id, *item)
                for item in step.entries
            ]
            got = await store.read_after(step.after, step.max_entries)
            context = f"after appending cursors 1..{len(appended)} {model_context}"
            _compare(got, expected, step.after, step.max_entries, context)


# -- entry points ----------------------------------------------------------------------------


def _run_hypothesis(
    factory: StoreFactory,
    policies: st.SearchStrategy[RetentionPolicy],
    max_examples: int,
    base: hypothesis.settings | None,
) -> None:
    @hypothesis.settings(
        base,
        max_examples=max_examples,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=[hypothesis.HealthCheck.too_slow],
    )
    @hypothesis.given(scenario=_scenarios(policies))
    def journal_store_contract(scenario: _Scenario) -> None:
        trio.from_thread.run(_run_scenario, factory, scenario)

    journal_store_contract()


async def check_journal_store(
    factory: StoreFactory,
    *,
    examples: bool = True,
    max_examples: int = 100,
    policies: st.SearchStrategy[RetentionPolicy] | None = None,
    settings: hypothesis.settings | None = None,
) -> None:
    """Check that the stores `factory` makes follow the store contract; call it inside Trio.

    `factory(run_id, policy)` makes a fresh store for one run whose window and retention follow
    the `RetentionPolicy` (it returns the store, an awaitable of it, or an async context
    manager yielding it). `examples`: run the explicit examples first (they use policies of
    their own). `max_examples`: how many hypothesis scenarios (0: none). `policies`: the
    policies scenarios draw from (default: tiny windows by events and by bytes, small caps on
    retention, and windows nothing leaves); a store that follows only some policies passes a
    strategy of those, and `examples=False`. `settings`: hypothesis settings to start from
    (database, phases, derandomize, ...); the kit sets `max_examples`, no deadline and one
    failure reported.

    Stores are opened and used in the calling Trio loop, hypothesis runs in a worker thread.
    Raises `JournalStoreContractError` at the first answer that breaks the contract.
    """
    if examples:
        for example in _EXAMPLES:
            await _run_example(factory, example)
    if max_examples > 0:
        await trio.to_thread.run_sync(
            _run_hypothesis,
            factory,
            _DEFAULT_POLICIES if policies is None else policies,
            max_examples,
            settings,
        )


def check_journal_store_sync(
    factory: StoreFactory,
    *,
    examples: bool = True,
    max_examples: int = 100,
    policies: st.SearchStrategy[RetentionPolicy] | None = None,
    settings: hypothesis.settings | None = None,
) -> None:
    """`check_journal_store` in a Trio loop of its own, for code that is not running Trio
    (unittest, plain pytest, a script)."""
    trio.run(
        functools.partial(
            check_journal_store,
            factory,
            examples=examples,
            max_examples=max_examples,
            policies=policies,
            settings=settings,
        )
    )
