"""How the AG-UI encoder's cost grows with a run's history.

A viewer's encoder lives as long as the run, and a viewer that reconnects replays the whole
journal into a fresh one, so what it does per entry must not grow with the number of subagents
the run has already ended, and it must not keep the journal's events alive after their subagent
ended (the replay window is what decides how long those live). The fast path for text deltas
remembers what it checked; these tests pin that it forgets when the generic path changes state.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

from adapters.agui import AguiStreamEncoder, parse_sse
from engine import DelegationEvent, JournalEntry, Kind

RUN = "run-growth"


class _NoWalks(dict[Any, Any]):
    """A dict that refuses to be walked while `walks_allowed` is False."""

    walks_allowed = False

    def _refuse(self) -> None:
        if not self.walks_allowed:
            raise AssertionError("the encoder walked every subagent or call it has seen")

    def __iter__(self) -> Iterator[Any]:
        self._refuse()
        return super().__iter__()

    def values(self) -> Any:
        self._refuse()
        return super().values()

    def items(self) -> Any:
        self._refuse()
        return super().items()


def _delegation(n: int) -> list[DelegationEvent]:
    """A parent tool call, its delegation (start, text, finish) and the call's result."""
    envelope: dict[str, Any] = {
        "run_id": RUN,
        "delegation_id": f"deleg-{n}",
        "parent_tool_call_id": f"call-{n}",
        "agent_key": "research",
        "agent_name": "Research",
        "protocol": "a2a",
    }
    return [
        DelegationEvent(
            kind=Kind.PARENT_TOOL_CALL_START,
            run_id=RUN,
            tool_call_id=f"call-{n}",
            tool_name="delegate_to_agent",
        ),
        DelegationEvent(kind=Kind.STARTED, **envelope),
        DelegationEvent(kind=Kind.TEXT_DELTA, message_id="m", delta=f"text {n}", **envelope),
        DelegationEvent(kind=Kind.FINISHED, text=f"done {n}", **envelope),
        DelegationEvent(
            kind=Kind.PARENT_TOOL_CALL_RESULT, run_id=RUN, tool_call_id=f"call-{n}", result="ok"
        ),
    ]


def test_ending_a_subagent_never_walks_the_ones_already_ended() -> None:
    encoder = AguiStreamEncoder(RUN, RUN, "attributed", strict=True)
    delegations: _NoWalks = _NoWalks()
    calls: _NoWalks = _NoWalks()
    encoder._delegations = delegations
    encoder._calls = calls
    cursor = 0

    def feed(event: DelegationEvent) -> bytes:
        nonlocal cursor
        cursor += 1
        return encoder.feed(JournalEntry(event, cursor))

    feed(DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN))
    body = b"".join(feed(event) for n in range(50) for event in _delegation(n))
    # The run's end closes whatever is open: that one walk is allowed.
    delegations.walks_allowed = calls.walks_allowed = True
    body += feed(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN))
    types = [event["type"] for _, event in parse_sse(body)]
    assert types.count("SUBAGENT_FINISHED") == 50
    assert types.count("TOOL_CALL_RESULT") == 50
    assert types[-1] == "RUN_FINISHED"
    assert not encoder._open_subagents
    assert not any(key is not None for key in encoder._calls_of)  # ended producers' call lists


def test_an_ended_subagent_lets_go_of_its_first_event() -> None:
    encoder = AguiStreamEncoder(RUN, RUN, "attributed", strict=True)
    encoder.feed(JournalEntry(DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN), 1))
    events = _delegation(0)
    start = weakref.ref(events[1])
    for cursor, event in enumerate(events, 2):
        encoder.feed(JournalEntry(event, cursor))
    del events, event
    gc.collect()
    assert start() is None, "the encoder keeps an ended subagent's start event alive"


def _delta(text: str) -> DelegationEvent:
    return DelegationEvent(
        kind=Kind.TEXT_DELTA,
        run_id=RUN,
        delegation_id="deleg-0",
        message_id="m",
        delta=text,
        agent_key="research",
    )


def test_the_fast_path_forgets_a_message_the_generic_path_closed() -> None:
    encoder = AguiStreamEncoder(RUN, RUN, "attributed", strict=True)
    first = [DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN), *_delegation(0)[:2]]
    end = DelegationEvent(
        kind=Kind.TEXT_END, run_id=RUN, delegation_id="deleg-0", message_id="m", agent_key="r"
    )
    batches = [first, [_delta("a")], [_delta("b"), _delta("c")], [end, _delta("d"), _delta("e")]]
    cursor = 0
    body = b""
    for batch in batches:
        entries = []
        for event in batch:
            cursor += 1
            entries.append(JournalEntry(event, cursor))
        body += encoder.feed_batch(entries)
    got = [(e["type"], e.get("delta")) for _, e in parse_sse(body) if "messageId" in e]
    assert got == [
        ("TEXT_MESSAGE_START", None),
        ("TEXT_MESSAGE_CONTENT", "a"),
        ("TEXT_MESSAGE_CONTENT", "bc"),
        ("TEXT_MESSAGE_END", None),
        ("TEXT_MESSAGE_START", None),  # reopened: what the fast path knew was forgotten
        ("TEXT_MESSAGE_CONTENT", "d"),
        ("TEXT_MESSAGE_CONTENT", "e"),
    ]
