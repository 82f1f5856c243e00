"""Which parent tool call a delegation belongs to: the run's ledger, sans-IO."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import AmbiguousCorrelation, Correlation, ParentToolCalls, is_delegation_tool


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("delegate_to_agent", True),
        ("mcp__subagents__delegate_to_agent", True),
        ("mcp__subagents__delegate_to_research", True),
        ("delegate_to_", True),
        ("Bash", False),
        ("mcp__delegate_to_agent__search", False),
        ("", False),
        (None, False),
    ],
)
def test_delegation_tools_are_recognised_by_their_last_segment(
    name: str | None, expected: bool
) -> None:
    assert is_delegation_tool(name) is expected


def start(ledger: ParentToolCalls, tool_call_id: str, now: float = 0.0) -> None:
    ledger.observe("tool_call.start", tool_call_id, "delegate_to_agent", now)


def test_medium_claims_in_call_order_and_skips_strongly_claimed_calls() -> None:
    ledger = ParentToolCalls()
    for tool_call_id in ("a", "b", "c"):
        start(ledger, tool_call_id)
    ledger.observe("tool_call.start", "x", "Read", 0.0)  # not a delegation tool
    ledger.claim("b")  # a delegation arrived with b's id
    assert ledger.claim_next(Correlation.MEDIUM, 0.0) == "a"
    assert ledger.claim_next(Correlation.MEDIUM, 0.0) == "c"
    assert ledger.claim_next(Correlation.MEDIUM, 0.0) is None
    assert ledger.unclaimed() == []


def test_weak_takes_the_only_open_recent_call_and_refuses_to_guess() -> None:
    ledger = ParentToolCalls(weak_window=5.0)
    start(ledger, "old", now=0.0)
    start(ledger, "done", now=9.0)
    ledger.observe("tool_call.result", "done", None, 9.5)
    start(ledger, "new", now=10.0)
    # "old" is outside the window, "done" has its result: only "new" is a candidate.
    assert ledger.claim_next(Correlation.WEAK, 11.0) == "new"
    start(ledger, "p", now=12.0)
    start(ledger, "q", now=12.5)
    with pytest.raises(AmbiguousCorrelation, match="2 parent delegation tool calls"):
        ledger.claim_next(Correlation.WEAK, 13.0)
    assert set(ledger.unclaimed()) == {"old", "done", "p", "q"}  # nothing was taken


def test_tool_call_end_only_ends_the_arguments() -> None:
    ledger = ParentToolCalls()
    start(ledger, "a")
    ledger.observe("tool_call.end", "a", None, 0.1)
    assert ledger.claim_next(Correlation.WEAK, 0.2) == "a"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="correlation mode"):
        ParentToolCalls().claim_next("strong", 0.0)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("start"), st.integers(0, 15)),
            st.tuples(st.just("claim"), st.integers(0, 15)),
            st.tuples(st.just("next"), st.just(0)),
        ),
        max_size=60,
    )
)
def test_medium_never_hands_out_a_call_twice_and_keeps_call_order(
    steps: list[tuple[str, int]],
) -> None:
    ledger = ParentToolCalls()
    started: list[str] = []
    handed: list[str] = []
    claimed: set[str] = set()
    for action, n in steps:
        tool_call_id = f"t{n}"
        if action == "start":
            start(ledger, tool_call_id)
            if tool_call_id not in started:
                started.append(tool_call_id)
        elif action == "claim":
            ledger.claim(tool_call_id)
            if tool_call_id in started:
                claimed.add(tool_call_id)
        else:
            got = ledger.claim_next(Correlation.MEDIUM, 0.0)
            expected = next((t for t in started if t not in claimed), None)
            assert got == expected
            if got is not None:
                claimed.add(got)
                handed.append(got)
    assert len(handed) == len(set(handed))
    assert ledger.unclaimed() == [t for t in started if t not in claimed]


def call(ledger: ParentToolCalls, tool_call_id: str, args: object, *, end: bool = True) -> bool:
    """The parent shows a delegation call with its arguments; True if `pair` may now find it."""
    start(ledger, tool_call_id)
    changed = ledger.observe("tool_call.args", tool_call_id, None, 0.0, args)
    if end:
        changed = ledger.observe("tool_call.end", tool_call_id, None, 0.0)
    return changed


def test_pairing_takes_the_call_with_the_same_arguments_else_the_oldest() -> None:
    ledger = ParentToolCalls()
    assert call(ledger, "item_1", {"agent": "a", "objective": "x"})
    assert call(ledger, "item_2", {"agent": "b", "objective": "y"})
    assert ledger.pair({"agent": "b", "objective": "y"}) == "item_2"  # not the oldest
    assert ledger.pair({"agent": "b", "objective": "y"}) is None  # taken; item_1 is a's
    assert ledger.pair({"agent": "b", "objective": "y"}, exact=False) == "item_1"  # last resort
    assert ledger.pair({"agent": "a", "objective": "x"}, exact=False) is None  # none left


def test_pairing_waits_for_complete_arguments() -> None:
    """A call whose arguments are still streaming (no tool_call.end) is not paired: its
    arguments may still make another call the right one."""
    ledger = ParentToolCalls()
    assert not call(ledger, "item_1", '{"agent": "a", ', end=False)
    assert ledger.pair({"agent": "a", "objective": "x"}) is None
    assert not ledger.observe("tool_call.args", "item_1", None, 0.0, '"objective": "x"}')
    assert ledger.observe("tool_call.end", "item_1", None, 0.0)
    assert ledger.pair({"agent": "a", "objective": "x"}) == "item_1"


def test_streamed_json_arguments_are_read_whole_at_the_end() -> None:
    ledger = ParentToolCalls()
    start(ledger, "item_1")
    start(ledger, "item_2")
    for piece in ('{"agent": "a",', ' "objective": "x"}'):
        ledger.observe("tool_call.args", "item_2", None, 0.0, piece)
    ledger.observe("tool_call.end", "item_2", None, 0.0)
    ledger.observe("tool_call.args", "item_1", None, 0.0, "{not json")
    ledger.observe("tool_call.end", "item_1", None, 0.0)
    assert ledger.pair({"agent": "a", "objective": "x"}) == "item_2"
    assert ledger.pair(None) is None  # unreadable arguments match nothing
    assert ledger.pair(None, exact=False) == "item_1"


def test_a_strongly_claimed_call_is_never_paired() -> None:
    ledger = ParentToolCalls()
    call(ledger, "item_1", {"agent": "a"})
    ledger.claim("item_1")
    assert ledger.pair({"agent": "a"}) is None
