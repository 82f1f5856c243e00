"""Engine journals for the AG-UI encoder tests: 000 §20.5's happy path and its variants.

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
    """000 §20.5: a delegation that streams text and an artifact, then the parent answers."""
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


SCENARIOS = {
    "happy_path": happy_path,
    "delegation_failure": delegation_failure,
    "cancelled": cancelled_mid_delegation,
    "input_required": input_required,
    "input_answered": input_answered,
    "two_concurrent": two_concurrent_delegations,
}
