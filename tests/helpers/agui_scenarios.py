"""Engine journals for the AG-UI encoder tests: the happy path and its variants.

Each scenario is the list of journal entries a viewer would read, built from engine events
directly (cursors 1..n), so the golden tests pin the encoder and nothing else.
"""

from __future__ import annotations

from typing import Any

from engine import ArtifactRef, DelegationError, DelegationEvent, JournalEntry, Kind

RUN = "run-1"
THREAD = "thread-1"


def parent(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id=RUN, **fields)


def sub(
    kind: str, delegation: str = "del-1", call: str = "call-1", **fields: Any
) -> DelegationEvent:
    identity: dict[str, Any] = {
        "delegation_id": delegation,
        "parent_tool_call_id": call,
        "agent_key": "research" if delegation == "del-1" else "review",
        "agent_name": "Research Agent" if delegation == "del-1" else "Review Agent",
        "protocol": "a2a",
        "remote_task_id": f"task-{delegation}",
        "remote_context_id": f"ctx-{delegation}",
    }
    identity.update(fields)
    return DelegationEvent(kind=kind, run_id=RUN, **identity)


def journal(*events: DelegationEvent) -> list[JournalEntry]:
    return [JournalEntry(event, cursor) for cursor, event in enumerate(events, start=1)]


def delegate_call(call: str = "call-1", agent: str = "research") -> list[DelegationEvent]:
    return [
        parent(Kind.PARENT_TOOL_CALL_START, tool_call_id=call, tool_name="delegate_to_agent"),
        parent(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call, args={"agent": agent}),
        parent(Kind.PARENT_TOOL_CALL_END, tool_call_id=call),
    ]


def answer(text: str = "Done.", message: str = "parent-2") -> list[DelegationEvent]:
    return [
        parent(Kind.PARENT_TEXT_START, message_id=message, role="assistant"),
        parent(Kind.PARENT_TEXT_DELTA, message_id=message, delta=text),
        parent(Kind.PARENT_TEXT_END, message_id=message),
    ]


def result(call: str = "call-1", status: str = "completed") -> DelegationEvent:
    return parent(
        Kind.PARENT_TOOL_CALL_RESULT,
        tool_call_id=call,
        result={"delegation_id": "del-1", "status": status},
    )


def happy_path() -> list[JournalEntry]:
    """A delegation that streams text and an artifact, then the parent answers."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working"),
        sub(Kind.TEXT_START, message_id="m1", role="assistant"),
        sub(Kind.TEXT_DELTA, message_id="m1", delta="Searching official examples..."),
        sub(
            Kind.ARTIFACT,
            artifact=ArtifactRef(id="a-1", name="notes.md", uri="host://del-1/notes.md"),
        ),
        sub(Kind.TEXT_END, message_id="m1"),
        sub(Kind.FINISHED, status="completed", text="Found two examples."),
        result(),
        *answer(),
        parent(Kind.RUN_FINISHED),
    )


def delegation_failure() -> list[JournalEntry]:
    error = DelegationError(code="remote_failed", message="The remote agent reported failure.")
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working"),
        sub(Kind.STATUS, status="working", text="Reading"),
        sub(Kind.FAILED, status="failed", error=error),
        result(status="failed"),
        *answer("It failed."),
        parent(Kind.RUN_FINISHED),
    )


def cancelled_mid_delegation() -> list[JournalEntry]:
    """The run is cancelled while the subagent streams and the parent's call is open: the
    encoder closes everything itself (no synthesized terminal from a journal here)."""
    return journal(
        parent(Kind.RUN_STARTED),
        parent(Kind.PARENT_TOOL_CALL_START, tool_call_id="call-1", tool_name="delegate_to_agent"),
        sub(Kind.STARTED, status="working"),
        sub(Kind.TEXT_START, message_id="m1"),
        sub(Kind.TEXT_DELTA, message_id="m1", delta="Half a"),
        parent(Kind.RUN_CANCELLED, text="Stopped by a viewer."),
    )


def input_required() -> list[JournalEntry]:
    """Policy `return`: the subagent asks, the delegation ends `input_required`."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working"),
        sub(Kind.TEXT_START, message_id="m1"),
        sub(Kind.TEXT_DELTA, message_id="m1", delta="May I delete it?"),
        sub(Kind.INPUT_REQUIRED, status="input_required", text="Approve?", sequence=4),
        sub(Kind.FINISHED, status="input_required", sequence=5),
        result(status="input_required"),
        *answer("It needs your approval."),
        parent(Kind.RUN_FINISHED),
    )


def input_answered() -> list[JournalEntry]:
    """Policy `surface`: the subagent asks, is answered and continues under the same id."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working"),
        sub(Kind.INPUT_REQUIRED, status="input_required", text="Approve?", sequence=2),
        sub(Kind.STATUS, status="working", sequence=3),
        sub(Kind.TEXT_START, message_id="m2", sequence=4),
        sub(Kind.TEXT_DELTA, message_id="m2", delta="Deleted.", sequence=5),
        sub(Kind.TEXT_END, message_id="m2", sequence=6),
        sub(Kind.FINISHED, status="completed", text="Deleted.", sequence=7),
        result(),
        parent(Kind.RUN_FINISHED),
    )


def two_concurrent_delegations() -> list[JournalEntry]:
    """Two delegations streaming at once, with the same remote message id."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call("call-1", "research"),
        *delegate_call("call-2", "review"),
        sub(Kind.STARTED, "del-1", "call-1"),
        sub(Kind.STARTED, "del-2", "call-2"),
        sub(Kind.TEXT_START, "del-1", "call-1", message_id="m1"),
        sub(Kind.TEXT_START, "del-2", "call-2", message_id="m1"),
        sub(Kind.TEXT_DELTA, "del-1", "call-1", message_id="m1", delta="GDP is "),
        sub(Kind.TEXT_DELTA, "del-2", "call-2", message_id="m1", delta="Population is "),
        sub(Kind.TEXT_END, "del-1", "call-1", message_id="m1"),
        sub(Kind.FINISHED, "del-1", "call-1", status="completed", text="GDP"),
        sub(Kind.TEXT_END, "del-2", "call-2", message_id="m1"),
        sub(
            Kind.FAILED,
            "del-2",
            "call-2",
            status="failed",
            error=DelegationError(code="remote_timeout", message="rate limited"),
        ),
        result("call-1"),
        result("call-2", "failed"),
        parent(Kind.RUN_FINISHED),
    )


def nested(kind: str, nested_id: str | None, **fields: Any) -> DelegationEvent:
    """An event of the remote's own subagent `nested_id` inside delegation del-1."""
    return sub(kind, protocol="agui", nested_id=nested_id, **fields)


def nested_two_levels() -> list[JournalEntry]:
    """An AG-UI remote that reports a subagent with a subagent of its own, under the remote's
    own tool call, and one more level that the policy folds into the second."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working", protocol="agui"),
        sub(Kind.TOOL_CALL_START, tool_call_id="c1", tool_name="task", protocol="agui"),
        sub(Kind.TOOL_CALL_END, tool_call_id="c1", protocol="agui"),
        nested(
            Kind.NESTED_STARTED,
            "del-1/planner-1",
            name="planner",
            text="Plans the work",
            tool_call_id="c1",
            remote_subagent_id="planner-1",
            depth=1,
        ),
        nested(Kind.TEXT_START, "del-1/planner-1", message_id="m1", role="assistant"),
        nested(Kind.TEXT_DELTA, "del-1/planner-1", message_id="m1", delta="Two tasks."),
        nested(
            Kind.NESTED_STARTED,
            "del-1/estimator-1",
            name="estimator",
            nested_parent_id="del-1/planner-1",
            remote_subagent_id="estimator-1",
            depth=2,
        ),
        nested(Kind.TEXT_START, "del-1/estimator-1", message_id="m2", role="assistant"),
        nested(Kind.TEXT_DELTA, "del-1/estimator-1", message_id="m2", delta="A day each."),
        nested(
            Kind.NESTED_FOLDED,
            "del-1/estimator-1",
            name="clock",
            remote_subagent_id="clock-1",
            depth=3,
            status="folded",
            text="Nested subagent 'clock' is beyond max_nesting_depth 2.",
        ),
        nested(Kind.STATUS, "del-1/estimator-1", status="working", text="step tick started"),
        # The estimator's message is left open: its end closes it.
        nested(Kind.NESTED_FINISHED, "del-1/estimator-1", status="completed"),
        nested(Kind.TEXT_END, "del-1/planner-1", message_id="m1"),
        nested(Kind.NESTED_FINISHED, "del-1/planner-1", status="completed", text="2 tasks"),
        sub(Kind.TOOL_CALL_RESULT, tool_call_id="c1", result="2 tasks", protocol="agui"),
        sub(Kind.TEXT_START, message_id="m3", protocol="agui"),
        sub(Kind.TEXT_DELTA, message_id="m3", delta="Planned.", protocol="agui"),
        sub(Kind.TEXT_END, message_id="m3", protocol="agui"),
        sub(Kind.FINISHED, status="completed", text="Planned.", protocol="agui"),
        result(),
        parent(Kind.RUN_FINISHED),
    )


def nested_suspended() -> list[JournalEntry]:
    """Policy `return`: the remote's nested subagent pauses on an interrupt; the delegation ends
    waiting, the nested subagent (kept open across the pause) ends suspended before it. The
    run is then cancelled with a second nested subagent still open."""
    return journal(
        parent(Kind.RUN_STARTED),
        *delegate_call(),
        sub(Kind.STARTED, status="working", protocol="agui"),
        nested(Kind.NESTED_STARTED, "del-1/deleter-1", name="deleter", depth=1),
        nested(Kind.TEXT_START, "del-1/deleter-1", message_id="m1"),
        nested(Kind.TEXT_DELTA, "del-1/deleter-1", message_id="m1", delta="May I?"),
        nested(Kind.TEXT_END, "del-1/deleter-1", message_id="m1"),
        nested(Kind.STATUS, "del-1/deleter-1", status="suspended", text="waiting for input"),
        sub(Kind.INPUT_REQUIRED, status="input_required", text="May I?", sequence=7),
        nested(Kind.NESTED_FINISHED, "del-1/deleter-1", status="suspended", synthesized=True),
        sub(Kind.FINISHED, status="input_required", sequence=9, protocol="agui"),
        result(status="input_required"),
        *delegate_call("call-2", "research"),
        sub(Kind.STARTED, "del-2", "call-2", protocol="agui"),
        sub(
            Kind.NESTED_STARTED,
            "del-2",
            "call-2",
            protocol="agui",
            nested_id="del-2/s1",
            name="s1",
            depth=1,
        ),
        sub(
            Kind.TEXT_DELTA,
            "del-2",
            "call-2",
            protocol="agui",
            nested_id="del-2/s1",
            message_id="x",
            delta="…",
        ),
        parent(Kind.RUN_CANCELLED, text="Stopped."),
    )


SCENARIOS = {
    "happy_path": happy_path,
    "delegation_failure": delegation_failure,
    "cancelled": cancelled_mid_delegation,
    "input_required": input_required,
    "input_answered": input_answered,
    "two_concurrent": two_concurrent_delegations,
    "nested_two_levels": nested_two_levels,
    "nested_suspended": nested_suspended,
}
