"""The journal store contract: the rules every `JournalStore` follows, as sans-IO pieces.

A `JournalStore` keeps one run's journal entries for replay (`RunJournal` writes it, readers
catching up read it). The engine ships `MemoryJournalStore`; a durable store (SQLite, Redis
Streams, ...) plugs in through `Engine(store_factory=...)`. Every store follows the same rules,
and makes the same decisions by calling the same pieces, which do no I/O:

1. Cursor continuity. The journal appends entries in batches (`append`), never an empty one.
   The first batch's cursors start at 1 and each batch continues the last without holes or
   repeats. A store gives back each entry with its cursor, an equal event and its `weight`.
2. Read after write. Once `append` returned, `read_after` answers with what it appended.
3. The replay window. A store holds the newest entries in full: the longest run of newest
   entries with at most `RetentionPolicy.max_events` entries and at most `max_bytes` bytes (the
   sum of their `JournalEntry.weight`), and never less than the newest entry. What falls out
   leaves after each batch, oldest first (`RetentionPolicy.exceeded`, `.evictions`); the window
   is the same whatever the batch boundaries were.
4. Retention beyond the window. Of the entries that leave the window a store keeps, in cursor
   order, those `LifecycleRetention.retains` keeps when fed every leaving entry in cursor order
   (starts, terminals, input requests, run lifecycle, and what opens and closes each message,
   reasoning message, tool call and nested subagent; see its docstring), at most
   `RetentionPolicy.max_retained` of them, oldest dropped first (`.retained_overflow`).
5. Reading. `read_after(after, max_entries)` (`after` >= 0, `max_entries` >= 1) returns the
   first `max_entries` entries of the replay after `after`, which is: for the cursors above
   `after` that precede the window, each retained entry as itself and, in place of each
   maximal stretch of cursors the store no longer holds, one gap marker, `gap_entry(run_id,
   first, last)`, naming exactly the cursors missing (its own cursor is `last`, so a reader
   resumes after it); then every entry of the window with a cursor above `after`
   (`replay_before_window` builds the first part). The result is strictly increasing in
   cursor, and empty for `after` at or past the newest cursor.

`engine.testing.check_journal_store` checks a store against these rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

import attrs

from engine._events import CRITICAL, DelegationEvent, DropReport, Kind, lane_of
from engine._lanes import EVENT_OVERHEAD, JournalEntry

__all__ = [
    "JournalStore",
    "StoreUnavailableError",
    "LifecycleRetention",
    "RetentionPolicy",
    "gap_entry",
    "replay_before_window",
]


class StoreUnavailableError(OSError):
    """A durable store could not be written for longer than it buffers and retries (its
    storage unreachable or full). The engine then ends the run with a `run.failed` terminal,
    error `store_unavailable`, which its live viewers get even if the store cannot keep it:
    nothing is lost silently. A store raises it (or a subclass) from `append`."""


class JournalStore(Protocol):
    """Where a run's entries are kept for replay: the two async methods `RunJournal` calls.

    The rules a store follows are the store contract (`engine._store`'s module docstring, and
    `RetentionPolicy`, `LifecycleRetention`, `replay_before_window` and `gap_entry`, the pieces
    that decide what it evicts, keeps and reports). `engine.testing.check_journal_store`
    checks an implementation against them.
    """

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        """Persist entries whose cursors continue the store's sequence without holes, then
        evict what falls out of the replay window (keeping what the retention rules keep)."""

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        """Entries with cursors above `cursor`, in order, at most `max_entries` of them.

        Where the store no longer holds some cursors, it returns `stream.gap` entries in their
        place (cursor = the last missing cursor of that stretch) and keeps every entry it still
        retains, so the result is strictly increasing in cursor.
        """


def _at_least(minimum: int, what: str) -> Callable[[Any, attrs.Attribute[int], int], None]:
    def check(_: Any, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{attribute.name} must be an integer >= {minimum} ({what})")

    return check


@attrs.frozen
class RetentionPolicy:
    """The bounds of a store's replay window and of what it retains beyond it.

    `max_events` and `max_bytes` bound the window (bytes are `JournalEntry.weight`s); the window
    always keeps the newest entry, however heavy. `max_retained` bounds the entries kept after
    they left the window (`LifecycleRetention`); past it the oldest are dropped first.
    """

    max_events: int = attrs.field(
        default=10_000, validator=_at_least(1, "replay window must hold at least one event")
    )
    max_bytes: int = attrs.field(
        default=8 << 20,
        validator=_at_least(EVENT_OVERHEAD, "replay window must hold at least one event"),
    )
    max_retained: int = attrs.field(default=10_000, validator=_at_least(0, "a count"))

    def exceeded(self, events: int, size_bytes: int) -> bool:
        """Whether a window of `events` entries weighing `size_bytes` must let some go."""
        return events > self.max_events or size_bytes > self.max_bytes

    def evictions(
        self, events: int, size_bytes: int, oldest_weights: Iterable[int]
    ) -> tuple[int, int]:
        """How many of a window's oldest entries leave it, and their total weight.

        `events` and `size_bytes` describe the window after a batch was appended;
        `oldest_weights` yields its entries' weights oldest first (only as many as leave are
        taken, so it may be lazy). The newest entry never leaves.
        """
        max_events, max_bytes = self.max_events, self.max_bytes
        remaining, size = events, size_bytes
        if remaining <= 1 or (remaining <= max_events and size <= max_bytes):
            return 0, 0
        for weight in oldest_weights:
            remaining -= 1
            size -= weight
            if remaining <= 1 or (remaining <= max_events and size <= max_bytes):
                break
        return events - remaining, size_bytes - size

    def retained_overflow(self, retained: int) -> int:
        """How many of the oldest retained entries to drop when a store retains `retained`."""
        return max(0, retained - self.max_retained)


#: Kinds kept beyond the window whatever is open (gap markers are built per reader instead).
_RETAINED_KINDS: Final = frozenset(
    kind
    for kind in (
        Kind.STARTED,
        Kind.INPUT_REQUIRED,
        Kind.INPUT_CLOSED,
        Kind.RUN_STARTED,
        *Kind.DELEGATION_TERMINALS,
        *Kind.RUN_TERMINALS,
    )
    if lane_of(kind) == CRITICAL
)

#: Kinds that open, carry or close a thing a viewer holds open: (family, role). The first event
#: of each thing (an explicit start, or content that opens it implicitly) and its closes are
#: kept beyond the window.
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


#: One thing a viewer may hold open: (family, delegation id or None, nested id or None, id).
#: Families: "text", "reasoning", "tool" (id: message or tool call id, "" if none) and "nested"
#: (id: the nested id).
OpenThing = tuple[str, str | None, str | None, str]


class LifecycleRetention:
    """Which entries leaving the replay window a store keeps, decided one entry at a time.

    Feed `retains` every entry that leaves the window, in cursor order (and nothing else); it
    answers whether the store keeps that entry beyond the window. So that replaying what a
    store holds rebuilds what a viewer had open at any cursor, it keeps:

    - every `subagent.started`, `subagent.input_required`, `subagent.input_closed`,
      `run.started`, delegation terminal
      and run terminal;
    - the first event of each text message, reasoning message and tool call (its start, or the
      content that opened it implicitly: a text or reasoning delta with characters, any tool
      call argument event; a content event without characters of an unopened message is kept
      too, and does not open it), each tool call end, and each close (text end, reasoning end,
      tool call result), which forgets the thing;
    - the first event with a `nested_id` of each nested subagent (except a fold marker or a
      nested terminal), and every nested terminal, which forgets everything of that nested id.

    A delegation terminal forgets what its delegation held open, and a run terminal (without a
    delegation id) everything, so content of a forgotten thing that follows opens it anew.
    Things are told apart by (family, delegation id, nested id, message or tool call id), an
    empty delegation id counting as none. An event whose ids cannot be compared (unhashable)
    is kept.

    It remembers only what is open at the window's start: `open_things`, which a durable
    store may persist and hand back (`LifecycleRetention(open_things)`) to carry on after a
    restart with exactly the same decisions.
    """

    __slots__ = ("_open",)

    def __init__(self, open_things: Iterable[OpenThing] = ()) -> None:
        self._open: set[tuple[object, ...]] = set(open_things)

    @property
    def open_things(self) -> frozenset[OpenThing]:
        """What is open as of the window's start (only hashable ids are ever remembered)."""
        return frozenset(self._open)  # type: ignore[arg-type]

    def retains(self, event: DelegationEvent) -> bool:
        """Whether the entry of `event`, leaving the window now, is kept beyond it."""
        kind = event.kind
        did = event.delegation_id or None
        nested = event.nested_id
        # Every entry is followed, kept kinds too: what the window's start has open changes.
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
        except TypeError:  # an unhashable id: keep the entry rather than guess
            return True
        return keep or kind in _RETAINED_KINDS


def gap_entry(run_id: str, first_cursor: int, last_cursor: int) -> JournalEntry:
    """The `stream.gap` marker a store returns in place of cursors `first_cursor` through
    `last_cursor`, which it no longer holds: its cursor is `last_cursor`, its `dropped` report
    (reason `replay_gap`) names the stretch and counts it."""
    marker = DelegationEvent(
        kind=Kind.GAP,
        run_id=run_id,
        dropped=DropReport(
            reason="replay_gap",
            count=last_cursor - first_cursor + 1,
            first_cursor=first_cursor,
            last_cursor=last_cursor,
        ),
    )
    return JournalEntry(marker, last_cursor, EVENT_OVERHEAD)


def replay_before_window(
    run_id: str,
    after: int,
    window_first_cursor: int,
    retained: Iterable[JournalEntry],
    max_entries: int,
) -> list[JournalEntry]:
    """What a reader after `after` is given of the cursors before the window: the retained
    entries among them as themselves, a `gap_entry` in place of each stretch of missing
    cursors, at most `max_entries` entries in all (the rest of the read comes from the window).

    `window_first_cursor` is the cursor of the window's oldest entry (the newest cursor + 1 for
    a store that holds nothing yet: then there is nothing before it). `retained` yields retained
    entries in cursor order; those at or below `after` or from the window on are skipped, and
    no more are taken than the answer needs, so it may be a lazy cursor over a table.
    """
    out: list[JournalEntry] = []
    if max_entries < 1:
        return out
    gap_from = after + 1
    for entry in retained:
        cursor = entry.cursor
        if cursor <= after:
            continue
        if cursor >= window_first_cursor:
            break
        if cursor > gap_from:
            out.append(gap_entry(run_id, gap_from, cursor - 1))
            if len(out) >= max_entries:
                return out
        out.append(entry)
        if len(out) >= max_entries:
            return out
        gap_from = cursor + 1
    if gap_from < window_first_cursor:
        out.append(gap_entry(run_id, gap_from, window_first_cursor - 1))
    return out
