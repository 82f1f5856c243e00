"""Reading a stream of events for assertions: their kinds, and one delegation's share of them.

Anything with a `kind` will do: journal events, a target's `TargetUpdate`s, a parent's
`ParentEvent`s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from engine import JournalEntry, Kind

#: A delegation's kinds whose adjacent events the journal's volatile lane may merge
#: (`engine.lane_of`): how many arrive is not how many the remote sent.
MERGEABLE = frozenset({Kind.TEXT_DELTA, Kind.REASONING_DELTA, Kind.TOOL_CALL_ARGS})


class _Kinded(Protocol):
    @property
    def kind(self) -> str: ...


def kinds(events: Iterable[_Kinded], *, merged: frozenset[str] = frozenset()) -> list[str]:
    """The kinds in order; a run of adjacent events of one kind in `merged` (say `MERGEABLE`)
    counts once."""
    out: list[str] = []
    for event in events:
        if not (out and out[-1] == event.kind and event.kind in merged):
            out.append(event.kind)
    return out


def events_of(entries: Sequence[JournalEntry], delegation_id: str) -> list[Any]:
    """One delegation's journaled events, in order."""
    return [entry.event for entry in entries if entry.event.delegation_id == delegation_id]
