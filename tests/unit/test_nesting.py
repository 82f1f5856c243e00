"""Nested subagents: a remote's own subagents inside a delegation, from the
`DelegationState` rules through the AG-UI encoder in every visibility mode.

The state machine and the encoder are sans-IO, so every rule is checked in memory: one terminal
per nested id, closes when the delegation ends (deepest first), depth folding with its marker,
namespaced ids, the continuation of a suspended subagent; and per mode, what the wire shows
(attributed `parentSubagentRunId` chains, inline flattening, hidden dropping). The property test
runs random nested programs through both and asks the checker about every stream.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.agui import MODES, AguiStreamEncoder, check_events, frame_events
from engine import (
    DelegationError,
    DelegationEvent,
    DelegationPolicy,
    JournalEntry,
    Kind,
    RegistryError,
    TargetUpdate,
)
from engine._delegation import DelegationIdentity, DelegationState

RUN = "run-1"
DID = "del-1"


def state(**policy: Any) -> DelegationState:
    identity = DelegationIdentity(
        run_id=RUN,
        delegation_id=DID,
        agent_key="remote",
        agent_name="Remote",
        protocol="agui",
        parent_tool_call_id="call-1",
    )
    return DelegationState(identity, DelegationPolicy(**policy), clock=lambda: 0.0)


def U(kind: str, sub: str | None = None, **fields: Any) -> TargetUpdate:
    return TargetUpdate(kind=kind, subagent_id=sub, **fields)


def feed(machine: DelegationState, *updates: TargetUpdate) -> list[DelegationEvent]:
    return [event for update in updates for event in machine.feed(update)]


def started(sub: str, parent: str | None = None, **fields: Any) -> TargetUpdate:
    return U(Kind.NESTED_STARTED, sub, parent_subagent_id=parent, name=sub, **fields)


def text(sub: str | None, message: str, delta: str) -> list[TargetUpdate]:
    return [
        U(Kind.TEXT_START, sub, message_id=message),
        U(Kind.TEXT_DELTA, sub, message_id=message, delta=delta),
        U(Kind.TEXT_END, sub, message_id=message),
    ]


def lifecycle(events: list[DelegationEvent]) -> list[tuple[str, str | None]]:
    return [
        (e.kind, e.nested_id)
        for e in events
        if e.kind in (Kind.NESTED_STARTED, Kind.NESTED_FOLDED) or e.kind in Kind.NESTED_TERMINALS
    ]


# -- DelegationState ------------------------------------------------------------------------------


def test_nested_subagents_get_namespaced_ids_their_parent_and_depth() -> None:
    machine = state()
    events = feed(
        machine,
        U(Kind.STARTED),
        started("s1", tool_call_id="c1", text="Plans"),
        started("s2", parent="s1"),
        *text("s2", "m2", "deep"),
        U(Kind.NESTED_FINISHED, "s2", status="completed"),
        U(Kind.NESTED_FINISHED, "s1", status="completed", text="done"),
    )
    starts = [e for e in events if e.kind == Kind.NESTED_STARTED]
    assert [(e.nested_id, e.nested_parent_id, e.depth) for e in starts] == [
        ("del-1/s1", None, 1),
        ("del-1/s2", "del-1/s1", 2),
    ]
    assert (starts[0].tool_call_id, starts[0].text, starts[0].name) == ("c1", "Plans", "s1")
    assert starts[0].delegation_id == DID and not starts[0].synthesized
    assert {e.nested_id for e in events if e.kind.startswith("subagent.text.")} == {"del-1/s2"}
    ends = [e for e in events if e.kind in Kind.NESTED_TERMINALS]
    assert [(e.nested_id, e.status, e.text) for e in ends] == [
        ("del-1/s2", "completed", None),
        ("del-1/s1", "completed", "done"),
    ]


def test_exactly_one_terminal_per_nested_id_and_nothing_after_it() -> None:
    machine = state()
    events = feed(
        machine,
        started("s1"),
        U(Kind.NESTED_FAILED, "s1", error=DelegationError(code="remote_failed", message="x")),
        U(Kind.NESTED_FINISHED, "s1"),
        U(Kind.TEXT_DELTA, "s1", message_id="m", delta="late"),
        U(Kind.NESTED_FAILED, "s1"),
    )
    assert sum(e.kind in Kind.NESTED_TERMINALS for e in events) == 1
    assert not any(e.kind.startswith("subagent.text") for e in events)
    assert machine.ignored_nested == 3
    assert not machine.terminal  # a nested terminal never ends the delegation


def test_content_or_a_terminal_of_an_unannounced_subagent_synthesizes_its_start() -> None:
    events = feed(state(), U(Kind.TEXT_DELTA, "ghost", message_id="m", delta="boo"))
    assert [e.kind for e in events][:2] == [Kind.STARTED, Kind.NESTED_STARTED]
    assert events[1].synthesized and events[1].nested_id == "del-1/ghost"
    events = feed(state(), U(Kind.NESTED_FINISHED, "ghost"))
    assert lifecycle(events) == [
        (Kind.NESTED_STARTED, "del-1/ghost"),
        (Kind.NESTED_FINISHED, "del-1/ghost"),
    ]


def test_the_delegations_end_closes_open_nested_subagents_deepest_first() -> None:
    machine = state()
    events = feed(
        machine,
        started("s1"),
        started("s2", parent="s1"),
        U(Kind.TEXT_DELTA, "s2", message_id="m", delta="open"),
        started("s3"),
        U(Kind.FINISHED, text="Done."),
    )
    assert [(e.kind, e.nested_id) for e in events[-5:]] == [
        (Kind.NESTED_CANCELLED, "del-1/s3"),
        (Kind.TEXT_END, "del-1/s2"),  # a subagent's open message ends before it
        (Kind.NESTED_CANCELLED, "del-1/s2"),
        (Kind.NESTED_CANCELLED, "del-1/s1"),
        (Kind.FINISHED, None),
    ]
    ends = [e for e in events if e.kind in Kind.NESTED_TERMINALS]
    assert [e.nested_id for e in ends] == ["del-1/s3", "del-1/s2", "del-1/s1"]
    assert all(e.synthesized and e.error and e.error.code == "run_closed" for e in ends)
    assert events[-1].kind == Kind.FINISHED
    # A nested subagent's text is not the delegation's result.
    assert machine.result is not None and machine.result.messages == ()
    assert machine.result.metadata == {"nested_subagents": 3}


def test_a_parent_that_ends_first_ends_its_children_first() -> None:
    events = feed(state(), started("s1"), started("s2", parent="s1"), U(Kind.NESTED_FINISHED, "s1"))
    assert lifecycle(events)[-2:] == [
        (Kind.NESTED_CANCELLED, "del-1/s2"),
        (Kind.NESTED_FINISHED, "del-1/s1"),
    ]


def test_depth_beyond_the_policy_is_folded_into_the_deepest_shown_ancestor() -> None:
    machine = state(max_nesting_depth=1)
    events = feed(
        machine,
        started("s1"),
        started("s2", parent="s1"),
        started("s3", parent="s2"),
        *text("s3", "m3", "deepest"),
        U(Kind.NESTED_FINISHED, "s3"),
        U(Kind.NESTED_FINISHED, "s2"),
        U(Kind.NESTED_FINISHED, "s1"),
    )
    assert lifecycle(events) == [
        (Kind.NESTED_STARTED, "del-1/s1"),
        (Kind.NESTED_FOLDED, "del-1/s1"),
        (Kind.NESTED_FOLDED, "del-1/s1"),
        (Kind.NESTED_FINISHED, "del-1/s1"),
    ]
    folded = [e for e in events if e.kind == Kind.NESTED_FOLDED]
    assert [(e.remote_subagent_id, e.depth) for e in folded] == [("s2", 2), ("s3", 3)]
    assert "max_nesting_depth 1" in (folded[0].text or "")
    assert {e.nested_id for e in events if e.kind.startswith("subagent.text")} == {"del-1/s1"}
    assert machine.nested_folded == 2


def test_depth_zero_folds_everything_into_the_delegation() -> None:
    events = feed(state(max_nesting_depth=0), started("s1"), *text("s1", "m", "x"))
    assert lifecycle(events) == [(Kind.NESTED_FOLDED, None)]
    assert {e.nested_id for e in events} == {None}


@pytest.mark.parametrize("depth", [-1, 17, 1.5, True])
def test_max_nesting_depth_is_validated(depth: Any) -> None:
    with pytest.raises(RegistryError, match="max_nesting_depth"):
        DelegationPolicy(max_nesting_depth=depth)


def test_a_suspended_nested_subagent_stays_open_and_continues_under_its_id() -> None:
    machine = state()
    events = feed(
        machine,
        started("deleter"),
        U(Kind.NESTED_FINISHED, "deleter", status="suspended", raw={"interruptIds": ["i"]}),
        U(Kind.INPUT_REQUIRED, text="May I?"),
    )
    machine.resume()
    events += feed(
        machine,
        started("deleter"),  # the resume run announces the same id again
        *text("deleter", "m", "Deleted."),
        U(Kind.NESTED_FINISHED, "deleter"),
        U(Kind.FINISHED),
    )
    assert lifecycle(events) == [
        (Kind.NESTED_STARTED, "del-1/deleter"),
        (Kind.NESTED_FINISHED, "del-1/deleter"),
    ]
    statuses = [(e.status, e.nested_id) for e in events if e.kind == Kind.STATUS]
    assert statuses == [("suspended", "del-1/deleter"), ("working", "del-1/deleter")]
    assert machine.status == "input_required"  # nested statuses never are the delegation's


def test_a_delegation_that_ends_waiting_ends_its_suspended_subagent_suspended() -> None:
    machine = state()
    events = feed(machine, started("s1"), U(Kind.NESTED_FINISHED, "s1", status="suspended"))
    events += feed(machine, U(Kind.INPUT_REQUIRED, text="?"))
    events += machine.stop_for_input()
    end = [e for e in events if e.kind in Kind.NESTED_TERMINALS]
    assert [(e.kind, e.status) for e in end] == [(Kind.NESTED_FINISHED, "suspended")]


def test_an_id_reused_after_it_ended_is_a_new_invocation() -> None:
    events = feed(state(), started("s"), U(Kind.NESTED_FINISHED, "s"), started("s"))
    assert [e.nested_id for e in events if e.kind == Kind.NESTED_STARTED] == [
        "del-1/s",
        "del-1/s#2",
    ]


# -- the encoder, per mode ------------------------------------------------------------------------


def program() -> list[DelegationEvent]:
    """A parent's call, a delegation whose remote reports planner > estimator (under the
    remote's own tool call), the result, the run's end."""
    machine = state()
    events = [
        DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
        DelegationEvent(
            kind=Kind.PARENT_TOOL_CALL_START, run_id=RUN, tool_call_id="call-1", tool_name="d"
        ),
    ]
    events += feed(
        machine,
        U(Kind.TOOL_CALL_START, tool_call_id="c1", tool_name="task"),
        U(Kind.TOOL_CALL_END, tool_call_id="c1"),
        started("planner", tool_call_id="c1"),
        U(Kind.TEXT_DELTA, "planner", message_id="m1", delta="Two tasks."),
        started("estimator", parent="planner"),
        U(Kind.TEXT_DELTA, "estimator", message_id="m2", delta="A day."),
        U(Kind.NESTED_FINISHED, "estimator"),
        U(Kind.NESTED_FINISHED, "planner", text="2"),
        U(Kind.TOOL_CALL_RESULT, tool_call_id="c1", result="2"),
        *text(None, "m3", "Planned."),
        U(Kind.FINISHED),
    )
    events.append(
        DelegationEvent(kind=Kind.PARENT_TOOL_CALL_RESULT, run_id=RUN, tool_call_id="call-1")
    )
    events.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN))
    return events


def encode(events: list[DelegationEvent], mode: str) -> list[dict[str, Any]]:
    encoder = AguiStreamEncoder("thread", RUN, mode, strict=True)
    return [e for i, ev in enumerate(events, 1) for e in encoder.translate(JournalEntry(ev, i))]


def test_attributed_mode_chains_parent_subagent_run_ids() -> None:
    out = encode(program(), "attributed")
    assert check_events(out) == []
    announced = {e["subagentRunId"]: e for e in out if e["type"] == "SUBAGENT_STARTED"}
    assert announced["del-1/planner"]["parentSubagentRunId"] == DID
    assert announced["del-1/planner"]["parentToolCallId"] == "del-1:c1"
    assert announced["del-1/estimator"]["parentSubagentRunId"] == "del-1/planner"
    assert "parentSubagentRunId" not in announced[DID]
    texts = {e["delta"]: e["subagentRunId"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"}
    assert texts == {"Two tasks.": "del-1/planner", "A day.": "del-1/estimator", "Planned.": DID}
    order = [(e["type"], e.get("subagentRunId") or e.get("toolCallId")) for e in out]
    # The remote's call result waits for the subagent it spawned; nested end before parents.
    assert order.index(("SUBAGENT_FINISHED", "del-1/estimator")) < order.index(
        ("SUBAGENT_FINISHED", "del-1/planner")
    )
    assert order.index(("SUBAGENT_FINISHED", "del-1/planner")) < order.index(
        ("TOOL_CALL_RESULT", DID)
    )


def test_inline_mode_flattens_nested_content_into_the_parents() -> None:
    out = encode(program(), "inline")
    assert check_events(out) == []
    assert not any(e["type"].startswith("SUBAGENT_") or "subagentRunId" in e for e in out)
    deltas = [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == ["Two tasks.", "A day.", "Planned."]


def test_hidden_mode_drops_every_nested_event() -> None:
    out = encode(program(), "hidden")
    assert check_events(out) == []
    assert [e["type"] for e in out] == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "RUN_FINISHED",
    ]


def test_custom_mode_carries_the_nesting_fields() -> None:
    out = encode(program(), "custom")
    assert check_events(out) == []
    starts = [e["value"] for e in out if e.get("name") == "subagent.nested.started"]
    assert [(v["nestedId"], v.get("nestedParentId"), v["depth"]) for v in starts] == [
        ("del-1/planner", None, 1),
        ("del-1/estimator", "del-1/planner", 2),
    ]
    assert all(v["delegationId"] == DID for v in starts)


def test_a_run_terminal_closes_nested_subagents_before_their_delegation() -> None:
    events = program()
    cut = next(i for i, e in enumerate(events) if e.delta == "A day.") + 1
    events = [*events[:cut], DelegationEvent(kind=Kind.RUN_CANCELLED, run_id=RUN)]
    for mode in MODES:
        out = encode(events, mode)
        assert check_events(out) == [], mode
    out = encode(events, "attributed")
    closes = [e["subagentRunId"] for e in out if e["type"] == "SUBAGENT_ERROR"]
    assert closes == ["del-1/estimator", "del-1/planner", DID]


def test_the_fast_path_writes_the_same_bytes_for_nested_deltas() -> None:
    events = program()
    for mode in MODES:
        fast = AguiStreamEncoder("thread", RUN, mode)
        slow = AguiStreamEncoder("thread", RUN, mode)
        entries = [JournalEntry(e, i) for i, e in enumerate(events, 1)]
        expected = b"".join(frame_events(slow.translate(e), e.cursor) for e in entries)
        assert b"".join(fast.feed(e) for e in entries) == expected, mode


# -- the property: random nested programs ---------------------------------------------------------

_SUBS = ["a", "b", "c", "d"]
_step = st.one_of(
    st.tuples(st.just("start"), st.sampled_from(_SUBS), st.sampled_from([None, *_SUBS])),
    st.tuples(st.just("finish"), st.sampled_from(_SUBS), st.sampled_from(["done", "suspended"])),
    st.tuples(st.just("fail"), st.sampled_from(_SUBS), st.none()),
    st.tuples(st.just("text"), st.sampled_from([None, *_SUBS]), st.sampled_from(["m1", "m2"])),
    st.tuples(st.just("end"), st.sampled_from([None, *_SUBS]), st.sampled_from(["m1", "m2"])),
    st.tuples(st.just("tool"), st.sampled_from([None, *_SUBS]), st.sampled_from(["t1", "t2"])),
    st.tuples(st.just("status"), st.sampled_from(_SUBS), st.none()),
    st.tuples(st.just("input"), st.none(), st.none()),
)


def _update(step: tuple[str, Any, Any]) -> TargetUpdate | None:
    verb, sub, arg = step
    if verb == "start":
        return U(Kind.NESTED_STARTED, sub, parent_subagent_id=arg, name=sub, tool_call_id="t1")
    if verb == "finish":
        return U(Kind.NESTED_FINISHED, sub, status="suspended" if arg == "suspended" else None)
    if verb == "fail":
        return U(Kind.NESTED_FAILED, sub)
    if verb == "text":
        return U(Kind.TEXT_DELTA, sub, message_id=arg, delta="x")
    if verb == "end":
        return U(Kind.TEXT_END, sub, message_id=arg)
    if verb == "tool":
        return U(Kind.TOOL_CALL_ARGS, sub, tool_call_id=arg, tool_name="t", delta="{}")
    if verb == "status":
        return U(Kind.STATUS, sub, status="working", text="step")
    return U(Kind.INPUT_REQUIRED, text="?")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(_step, max_size=30),
    depth=st.integers(0, 3),
    ending=st.sampled_from(["finished", "failed", "cancelled", "input", "run_end"]),
)
def test_random_nested_programs_give_streams_the_checker_accepts(
    steps: list[tuple[str, Any, Any]], depth: int, ending: str
) -> None:
    machine = state(max_nesting_depth=depth)
    events = [
        DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
        DelegationEvent(
            kind=Kind.PARENT_TOOL_CALL_START, run_id=RUN, tool_call_id="call-1", tool_name="d"
        ),
    ]
    events += feed(machine, U(Kind.STARTED))
    for step in steps:
        update = _update(step)
        if update is not None:
            events += machine.feed(update)
    if ending == "finished":
        events += machine.feed(U(Kind.FINISHED))
    elif ending == "failed":
        events += machine.fail(DelegationError(code="remote_failed", message="x"))
    elif ending == "cancelled":
        events += machine.cancelled(remote_cancel="confirmed")
    elif ending == "input":
        events += machine.stop_for_input()
    # One terminal per nested id, and none after the delegation's.
    ends = [e.nested_id for e in events if e.kind in Kind.NESTED_TERMINALS]
    assert len(ends) == len(set(ends))
    if machine.terminal:
        last = max(i for i, e in enumerate(events) if e.kind in Kind.DELEGATION_TERMINALS)
        assert all(e.delegation_id is None for e in events[last + 1 :])
        starts = {e.nested_id for e in events if e.kind == Kind.NESTED_STARTED}
        assert starts == set(ends)  # every announced nested subagent ended
        events.append(
            DelegationEvent(kind=Kind.PARENT_TOOL_CALL_RESULT, run_id=RUN, tool_call_id="call-1")
        )
    events.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN))
    for mode in MODES:
        out = encode(events, mode)
        assert check_events(out) == [], (mode, out)
        if mode == "attributed":
            ids = [e["subagentRunId"] for e in out if e["type"] == "SUBAGENT_STARTED"]
            assert len(ids) == len(set(ids))  # never announced twice
