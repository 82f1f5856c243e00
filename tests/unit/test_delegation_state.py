"""Unit tests of `DelegationState`, the sans-IO delegation state machine.

Every test feeds `TargetUpdate`s (or calls the actor-side outcomes `fail()`, `cancelled()`,
`stop_for_input()`) and asserts on the exact events that come out and on the result. No Trio.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest

import engine
from engine import (
    REDACTED,
    ArtifactRef,
    DelegationError,
    DelegationEvent,
    DelegationIdentity,
    DelegationPolicy,
    DelegationState,
    DropReport,
    ErrorCode,
    Kind,
    Redactor,
    RemoteCancel,
    ResultMessage,
    Status,
    TargetUpdate,
)
from tests.helpers.events import kinds

IDENTITY = DelegationIdentity(
    run_id="run-1",
    delegation_id="del-1",
    agent_key="research",
    agent_name="Research Agent",
    protocol="inprocess",
    parent_tool_call_id="call-7",
)
NOW = 1234.5

SECRET = "sk-LIVE-4f9a1c"  # what a host configured as a credential


def make_state(
    policy: DelegationPolicy | None = None,
    *,
    max_artifacts: int | None = None,
    secrets: Iterable[str] = (),
) -> DelegationState:
    return DelegationState(
        IDENTITY,
        policy or DelegationPolicy(),
        clock=lambda: NOW,
        max_artifacts=max_artifacts,
        redactor=Redactor(secrets),
    )


def feed(state: DelegationState, *updates: TargetUpdate) -> list[DelegationEvent]:
    out: list[DelegationEvent] = []
    for update in updates:
        out.extend(state.feed(update))
    return out


def started(**fields: object) -> TargetUpdate:
    return TargetUpdate(kind=Kind.STARTED, **fields)  # type: ignore[arg-type]


def status(value: str, text: str | None = None) -> TargetUpdate:
    return TargetUpdate(kind=Kind.STATUS, status=value, text=text)


def say(message_id: str, *chunks: str) -> list[TargetUpdate]:
    return [
        TargetUpdate(kind=Kind.TEXT_START, message_id=message_id, role="assistant"),
        *(TargetUpdate(kind=Kind.TEXT_DELTA, message_id=message_id, delta=c) for c in chunks),
        TargetUpdate(kind=Kind.TEXT_END, message_id=message_id),
    ]


def artifact(
    artifact_id: str, size: int, *, append: bool = False, name: str = "notes.md"
) -> TargetUpdate:
    return TargetUpdate(
        kind=Kind.ARTIFACT,
        artifact=ArtifactRef(id=artifact_id, name=name, uri=f"local://x/{artifact_id}"),
        artifact_bytes=size,
        artifact_append=append,
        remote_artifact_id=artifact_id,
    )


FINISHED = TargetUpdate(kind=Kind.FINISHED, text="all done")
FAILED = TargetUpdate(
    kind=Kind.FAILED, error=DelegationError(code=ErrorCode.REMOTE_FAILED, message="boom")
)
CANCELLED = TargetUpdate(kind=Kind.CANCELLED)
TERMINAL_UPDATES = {
    Kind.FINISHED: FINISHED,
    Kind.FAILED: FAILED,
    Kind.CANCELLED: CANCELLED,
}
RESULT_STATUS = {
    Kind.FINISHED: Status.COMPLETED,
    Kind.FAILED: Status.FAILED,
    Kind.CANCELLED: Status.CANCELLED,
}


# -- started comes first ------------------------------------------------------------------


def test_remote_started_is_first_and_not_synthesized() -> None:
    state = make_state()
    events = state.feed(started(status="working", remote_task_id="t-1", remote_context_id="c-1"))
    assert kinds(events) == [Kind.STARTED]
    assert events[0].synthesized is False
    assert events[0].remote_task_id == "t-1"
    assert events[0].remote_context_id == "c-1"
    assert state.started is True
    assert state.status == "working"


def test_first_text_delta_synthesizes_started_and_text_start() -> None:
    state = make_state()
    events = state.feed(TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="Hel"))
    assert kinds(events) == [Kind.STARTED, Kind.TEXT_START, Kind.TEXT_DELTA]
    assert events[0].synthesized is True
    assert events[1].message_id == "m1"
    assert events[1].role == "assistant"
    assert events[1].delta is None
    assert events[2].message_id == "m1"
    assert events[2].delta == "Hel"


@pytest.mark.parametrize("terminal", list(TERMINAL_UPDATES))
def test_first_update_terminal_synthesizes_started(terminal: str) -> None:
    state = make_state()
    events = state.feed(TERMINAL_UPDATES[terminal])
    assert kinds(events) == [Kind.STARTED, terminal]
    assert events[0].synthesized is True
    assert events[1].synthesized is False
    assert state.terminal_kind == terminal
    assert state.result is not None
    assert state.result.status == RESULT_STATUS[terminal]


def test_status_first_synthesizes_started() -> None:
    state = make_state()
    events = state.feed(status("working", "Looking"))
    assert kinds(events) == [Kind.STARTED, Kind.STATUS]
    assert events[0].synthesized is True
    assert events[1].status == "working"
    assert events[1].text == "Looking"


def test_duplicate_started_is_ignored_and_counted() -> None:
    state = make_state()
    assert kinds(state.feed(started(status="working"))) == [Kind.STARTED]
    assert state.feed(started(status="working")) == []
    assert state.feed(started()) == []
    assert state.ignored_duplicate_starts == 2


def test_started_after_synthesized_start_is_ignored() -> None:
    state = make_state()
    assert kinds(state.feed(status("working"))) == [Kind.STARTED, Kind.STATUS]
    assert state.feed(started(status="working")) == []
    assert state.ignored_duplicate_starts == 1


# -- exactly one terminal -----------------------------------------------------------------


@pytest.mark.parametrize("first", list(TERMINAL_UPDATES))
@pytest.mark.parametrize("second", list(TERMINAL_UPDATES))
def test_second_terminal_yields_nothing(first: str, second: str) -> None:
    state = make_state()
    feed(state, started(status="working"))
    assert kinds(state.feed(TERMINAL_UPDATES[first])) == [first]
    result = state.result
    assert state.feed(TERMINAL_UPDATES[second]) == []
    assert state.ignored_after_terminal == 1
    assert state.terminal_kind == first
    assert state.result is result


def test_everything_after_terminal_is_ignored_and_counted() -> None:
    state = make_state()
    feed(state, started(), FINISHED)
    late = [
        status("working", "still going"),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m9", delta="late"),
        *say("m10", "late"),
        artifact("a-late", 10),
        TargetUpdate(kind=Kind.INPUT_REQUIRED, text="more?"),
        TargetUpdate(kind=Kind.CUSTOM, name="x"),
        started(),
        FAILED,
    ]
    assert feed(state, *late) == []
    assert state.ignored_after_terminal == len(late)
    assert state.awaiting_input is None
    assert state.result is not None
    assert state.result.status == Status.COMPLETED
    assert state.result.artifacts == ()
    assert state.result.messages == ()
    # Outcomes the actor decides after the end are no-ops too.
    assert state.fail(DelegationError(code=ErrorCode.INTERNAL_ERROR, message="x")) == []
    assert state.cancelled(remote_cancel=RemoteCancel.CONFIRMED) == []
    assert state.stop_for_input() == []
    assert state.note_status("reconnecting") == []
    assert state.result.status == Status.COMPLETED


# -- statuses ------------------------------------------------------------------------------


def test_status_emitted_only_when_status_or_text_changes() -> None:
    state = make_state()
    feed(state, started())
    first = state.feed(status("working", "Looking"))
    assert [(e.status, e.text) for e in first] == [("working", "Looking")]
    assert state.feed(status("working", "Looking")) == []
    changed_text = state.feed(status("working", "Reading"))
    assert [(e.status, e.text) for e in changed_text] == [("working", "Reading")]
    changed_status = state.feed(status("submitted", "Reading"))
    assert [(e.status, e.text) for e in changed_status] == [("submitted", "Reading")]
    assert state.feed(status("submitted", "Reading")) == []
    assert state.status == "submitted"


def test_status_from_started_counts_as_current() -> None:
    state = make_state()
    feed(state, started(status="working"))
    assert state.feed(status("working")) == []
    assert kinds(state.feed(status("working", "now with text"))) == [Kind.STATUS]


def test_status_update_without_status_emits_nothing() -> None:
    state = make_state()
    feed(state, started())
    assert state.feed(TargetUpdate(kind=Kind.STATUS, text="no status value")) == []


def test_note_status_emits_only_on_change() -> None:
    state = make_state()
    feed(state, started(status="working"))
    assert [e.status for e in state.note_status("reconnecting")] == ["reconnecting"]
    assert state.note_status("reconnecting") == []


# -- text and reasoning ---------------------------------------------------------------------


def test_explicit_start_is_not_repeated_and_deltas_follow() -> None:
    state = make_state()
    feed(state, started())
    events = feed(
        state,
        TargetUpdate(kind=Kind.TEXT_START, message_id="m1", role="assistant"),
        TargetUpdate(kind=Kind.TEXT_START, message_id="m1", role="assistant"),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="a"),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="b"),
        TargetUpdate(kind=Kind.TEXT_END, message_id="m1"),
    )
    assert kinds(events) == [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_DELTA, Kind.TEXT_END]
    assert [e.message_id for e in events] == ["m1"] * 4
    assert [e.delta for e in events] == [None, "a", "b", None]


def test_reasoning_delta_for_unopened_message_synthesizes_reasoning_start() -> None:
    state = make_state()
    feed(state, started())
    events = state.feed(TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta="hmm"))
    assert kinds(events) == [Kind.REASONING_START, Kind.REASONING_DELTA]
    assert [e.message_id for e in events] == ["r1", "r1"]


def test_deltas_without_message_id_share_one_message_per_family() -> None:
    state = make_state()
    feed(state, started())
    events = feed(
        state,
        TargetUpdate(kind=Kind.TEXT_DELTA, delta="one "),
        TargetUpdate(kind=Kind.TEXT_DELTA, delta="two"),
        TargetUpdate(kind=Kind.TEXT_END),
    )
    assert kinds(events) == [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_DELTA, Kind.TEXT_END]
    assert len({e.message_id for e in events}) == 1
    assert events[0].message_id is not None
    feed(state, FINISHED)
    assert state.result is not None
    assert state.result.messages == (ResultMessage(role="assistant", text="one two"),)


@pytest.mark.parametrize(
    ("finish", "terminal"),
    [
        (lambda s: s.feed(FINISHED), Kind.FINISHED),
        (lambda s: s.feed(FAILED), Kind.FAILED),
        (lambda s: s.feed(CANCELLED), Kind.CANCELLED),
        (
            lambda s: s.fail(DelegationError(code=ErrorCode.REMOTE_TIMEOUT, message="slow")),
            Kind.FAILED,
        ),
        (lambda s: s.cancelled(remote_cancel=RemoteCancel.CONFIRMED), Kind.CANCELLED),
        (lambda s: s.stop_for_input(), Kind.FINISHED),
    ],
    ids=["finished", "failed", "cancelled", "fail()", "cancelled()", "stop_for_input()"],
)
def test_open_messages_are_closed_before_the_terminal(finish, terminal: str) -> None:  # type: ignore[no-untyped-def]
    state = make_state()
    feed(
        state,
        started(),
        TargetUpdate(kind=Kind.TEXT_START, message_id="m1"),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="partial"),
        TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta="thinking"),
    )
    events = finish(state)
    assert kinds(events) == [Kind.TEXT_END, Kind.REASONING_END, terminal]
    assert [e.message_id for e in events[:2]] == ["m1", "r1"]
    # The unterminated message still counts as said.
    assert state.result is not None
    assert state.result.messages == (ResultMessage(role="assistant", text="partial"),)


# -- the result -----------------------------------------------------------------------------


def test_summary_is_the_finished_text() -> None:
    state = make_state()
    events = feed(state, started(), *say("m1", "Hello ", "world"), FINISHED)
    assert state.result is not None
    assert state.result.summary == "all done"
    assert events[-1].kind == Kind.FINISHED
    assert events[-1].text == "all done"
    assert events[-1].status == Status.COMPLETED


def test_summary_falls_back_to_last_assistant_message() -> None:
    state = make_state()
    feed(
        state,
        started(),
        *say("m1", "first"),
        TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta="not a message"),
        TargetUpdate(kind=Kind.REASONING_END, message_id="r1"),
        *say("m2", "second ", "answer"),
    )
    events = state.feed(TargetUpdate(kind=Kind.FINISHED))
    assert state.result is not None
    assert state.result.summary == "second answer"
    assert events[-1].text == "second answer"
    assert state.result.messages == (
        ResultMessage(role="assistant", text="first"),
        ResultMessage(role="assistant", text="second answer"),
    )


def test_summary_is_none_without_text_or_messages() -> None:
    state = make_state()
    feed(state, started(), TargetUpdate(kind=Kind.FINISHED))
    assert state.result is not None
    assert state.result.summary is None
    assert state.result.messages == ()


def test_summary_is_truncated_to_policy() -> None:
    state = make_state(DelegationPolicy(max_summary_chars=10))
    feed(state, started(), TargetUpdate(kind=Kind.FINISHED, text="abcdefghijklmnop"))
    assert state.result is not None
    assert state.result.summary == "abcdefghi…"


def test_result_carries_identity_and_snapshot_runs_until_end() -> None:
    state = make_state()
    feed(state, started(remote_task_id="t-1"), *say("m1", "hi"))
    snapshot = state.snapshot()
    assert snapshot.status == Status.RUNNING
    assert snapshot.summary == "hi"
    assert state.result is None
    feed(state, FINISHED)
    result = state.result
    assert result is not None
    assert state.snapshot() is result
    assert (result.delegation_id, result.agent, result.remote_protocol) == (
        "del-1",
        "research",
        "inprocess",
    )
    assert (result.run_id, result.parent_tool_call_id) == ("run-1", "call-7")
    assert result.status == Status.COMPLETED
    assert result.error is None
    assert result.ok is True


# -- artifacts ----------------------------------------------------------------------------


def test_max_artifacts_drops_excess_with_drop_report() -> None:
    state = make_state(DelegationPolicy(max_artifacts=2))
    feed(state, started())
    assert kinds(feed(state, artifact("a1", 10), artifact("a2", 20))) == [Kind.ARTIFACT] * 2
    dropped = state.feed(artifact("a3", 30))
    assert kinds(dropped) == [Kind.STREAM_DROPPED]
    assert dropped[0].dropped == DropReport(
        reason="max_artifacts", count=1, bytes=30, kinds={Kind.ARTIFACT: 1}
    )
    assert dropped[0].remote_artifact_id == "a3"
    assert dropped[0].artifact is None
    # A chunk of an artifact already kept is not a new artifact.
    assert kinds(state.feed(artifact("a2", 5, append=True))) == [Kind.ARTIFACT]
    assert kinds(state.feed(artifact("a4", 1))) == [Kind.STREAM_DROPPED]
    feed(state, FINISHED)
    result = state.result
    assert result is not None
    assert [a.id for a in result.artifacts] == ["a1", "a2"]
    assert result.metadata == {"artifacts_dropped": 2}
    assert result.status == Status.COMPLETED


def test_request_max_artifacts_is_clamped_by_policy() -> None:
    state = make_state(DelegationPolicy(max_artifacts=5), max_artifacts=1)
    assert state.max_artifacts == 1
    events = feed(state, started(), artifact("a1", 1), artifact("a2", 1))
    assert kinds(events) == [Kind.STARTED, Kind.ARTIFACT, Kind.STREAM_DROPPED]
    loose = make_state(DelegationPolicy(max_artifacts=2), max_artifacts=50)
    assert loose.max_artifacts == 2


def test_no_artifacts_dropped_means_no_metadata() -> None:
    state = make_state()
    feed(state, started(), artifact("a1", 1), FINISHED)
    assert state.result is not None
    assert state.result.metadata is None


def test_artifact_bytes_over_limit_fails_and_keeps_partial_result() -> None:
    state = make_state(DelegationPolicy(max_artifact_bytes=100))
    feed(state, started(status="working"), *say("m1", "partial ", "findings"))
    assert kinds(state.feed(artifact("a1", 60))) == [Kind.ARTIFACT]
    assert kinds(state.feed(artifact("a2", 40))) == [Kind.ARTIFACT]  # exactly at the limit
    events = state.feed(artifact("a3", 1))
    assert kinds(events) == [Kind.ARTIFACT, Kind.FAILED]
    assert events[0].error is not None
    assert events[0].error.code == ErrorCode.ARTIFACT_TOO_LARGE
    terminal = events[-1]
    assert terminal.error is not None
    assert terminal.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert terminal.error.metadata == {"artifact_id": "a3", "limit_bytes": 100}
    assert state.terminal_kind == Kind.FAILED
    result = state.result
    assert result is not None
    assert result.status == Status.FAILED
    assert result.error is not None
    assert result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert [a.id for a in result.artifacts] == ["a1", "a2"]
    assert result.messages == (ResultMessage(role="assistant", text="partial findings"),)
    assert result.summary == "partial findings"
    # Nothing more once over the limit.
    assert state.feed(artifact("a4", 1)) == []
    assert state.feed(FINISHED) == []
    assert state.ignored_after_terminal == 2


def test_artifact_bytes_count_across_appended_chunks() -> None:
    state = make_state(DelegationPolicy(max_artifact_bytes=25))
    feed(state, started(), artifact("a1", 10), artifact("a1", 10, append=True))
    events = state.feed(artifact("a1", 10, append=True))
    assert kinds(events) == [Kind.ARTIFACT, Kind.FAILED]
    assert state.result is not None
    assert state.result.error is not None
    assert state.result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert [(a.id, a.size_bytes) for a in state.result.artifacts] == [("a1", 20)]


def test_appended_chunks_accumulate_size_bytes() -> None:
    state = make_state()
    feed(state, started())
    sizes = []
    for update in (
        artifact("a1", 10),
        artifact("a1", 15, append=True),
        artifact("a1", 5, append=True),
    ):
        (event,) = state.feed(update)
        assert event.kind == Kind.ARTIFACT
        assert event.artifact is not None
        sizes.append(event.artifact.size_bytes)
    assert sizes == [10, 25, 30]
    feed(state, FINISHED)
    assert state.result is not None
    assert [(a.id, a.size_bytes) for a in state.result.artifacts] == [("a1", 30)]


# -- outcomes the actor decides ------------------------------------------------------------


def test_fail_before_anything_synthesizes_start() -> None:
    state = make_state()
    error = DelegationError(code=ErrorCode.REMOTE_TIMEOUT, message="did not finish in 5 s")
    events = state.fail(error, remote_cancel=RemoteCancel.CONFIRMED)
    assert kinds(events) == [Kind.STARTED, Kind.FAILED]
    assert events[0].synthesized is True
    assert events[1].error is not None
    assert events[1].error.code == ErrorCode.REMOTE_TIMEOUT
    assert events[1].status == Status.FAILED
    result = state.result
    assert result is not None
    assert result.status == Status.FAILED
    assert result.error is not None
    assert (result.error.code, result.error.message) == (
        ErrorCode.REMOTE_TIMEOUT,
        "did not finish in 5 s",
    )
    assert result.error.retryable is True
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert state.fail(error) == []


def test_fail_records_last_remote_status() -> None:
    state = make_state()
    feed(state, started(status="working"))
    state.fail(DelegationError(code=ErrorCode.STREAM_INTERRUPTED, message="gone"))
    assert state.result is not None
    assert state.result.error is not None
    assert state.result.error.remote_status == "working"


def test_cancelled_confirmed() -> None:
    state = make_state()
    feed(state, started(status="working"))
    events = state.cancelled(remote_cancel=RemoteCancel.CONFIRMED, reason="user stopped it")
    assert kinds(events) == [Kind.CANCELLED]
    assert events[0].status == Status.CANCELLED
    result = state.result
    assert result is not None
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == "confirmed"
    assert result.error is not None
    assert (result.error.code, result.error.message) == (ErrorCode.CANCELLED, "user stopped it")


def test_cancelled_with_remote_cancel_pending_announces_it_first() -> None:
    state = make_state()
    feed(state, started(status="working"))
    events = state.cancelled(remote_cancel=RemoteCancel.PENDING)
    assert kinds(events) == [Kind.STATUS, Kind.CANCELLED]
    assert events[0].status == "cancel_pending"
    result = state.result
    assert result is not None
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == "pending"
    assert result.error is not None
    assert result.error.message == "The delegation was cancelled."


def test_cancelled_before_started_synthesizes_start() -> None:
    state = make_state()
    events = state.cancelled(remote_cancel=RemoteCancel.NOT_NEEDED)
    assert kinds(events) == [Kind.STARTED, Kind.CANCELLED]
    assert events[0].synthesized is True
    assert state.result is not None
    assert state.result.remote_cancel == RemoteCancel.NOT_NEEDED


def test_input_required_then_stop_for_input() -> None:
    state = make_state()
    feed(state, started(status="working"))
    events = state.feed(
        TargetUpdate(kind=Kind.INPUT_REQUIRED, status="input_required", text="Which year?")
    )
    assert kinds(events) == [Kind.INPUT_REQUIRED]
    assert events[0].text == "Which year?"
    assert events[0].status == "input_required"
    assert state.awaiting_input == "Which year?"
    assert state.status == "input_required"
    assert not state.terminal
    question = events[0].question
    assert question is not None and question.open and question.text == "Which year?"
    stop = state.stop_for_input()
    # The open question is withdrawn (the parent model decides now), then the terminal.
    assert kinds(stop) == [Kind.INPUT_CLOSED, Kind.FINISHED]
    closed = stop[0].question
    assert closed is not None and closed.id == question.id and closed.outcome == "withdrawn"
    assert stop[1].status == Status.INPUT_REQUIRED
    assert state.awaiting_input is None
    result = state.result
    assert result is not None
    assert result.status == Status.INPUT_REQUIRED
    assert result.error is not None
    assert result.error.code == ErrorCode.INPUT_REQUIRED
    assert "Which year?" in result.error.message
    assert result.error.remote_status == "input_required"


def test_input_required_without_status_defaults() -> None:
    state = make_state()
    feed(state, started(), TargetUpdate(kind=Kind.INPUT_REQUIRED))
    assert state.awaiting_input == ""
    assert state.status == "input_required"


def test_resume_clears_awaiting_input() -> None:
    state = make_state()
    feed(state, started(), TargetUpdate(kind=Kind.INPUT_REQUIRED, text="Which year?"))
    assert state.awaiting_input == "Which year?"
    state.resume()
    assert state.awaiting_input is None
    events = feed(state, *say("m1", "2024 it is"), FINISHED)
    assert kinds(events)[-1] == Kind.FINISHED
    assert state.result is not None
    assert state.result.status == Status.COMPLETED


# -- identity, remote ids and order ---------------------------------------------------------


def test_remote_ids_learned_later_appear_on_later_events_and_result() -> None:
    state = make_state()
    first = feed(state, started(status="working"), status("working", "a"))
    assert [e.remote_task_id for e in first] == [None, None]
    learned = state.feed(
        TargetUpdate(
            kind=Kind.STATUS,
            status="working",
            text="b",
            remote_task_id="t-1",
            remote_context_id="c-1",
            card_fingerprint="fp-1",
        )
    )
    later = feed(
        state,
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="x", remote_task_id="t-OTHER"),
        FINISHED,
    )
    for event in learned + later:
        assert (event.remote_task_id, event.remote_context_id) == ("t-1", "c-1")
        assert event.card_fingerprint == "fp-1"
    result = state.result
    assert result is not None
    assert (result.remote_task_id, result.remote_context_id) == ("t-1", "c-1")
    assert result.card_fingerprint == "fp-1"


def test_synthesized_start_carries_ids_of_its_update() -> None:
    state = make_state()
    events = state.feed(
        TargetUpdate(kind=Kind.TEXT_DELTA, delta="x", remote_task_id="t-9", remote_context_id="c-9")
    )
    assert events[0].kind == Kind.STARTED
    assert events[0].synthesized is True
    assert all(e.remote_task_id == "t-9" for e in events)
    assert all(e.remote_context_id == "c-9" for e in events)


def _long_script(state: DelegationState) -> list[DelegationEvent]:
    events = feed(
        state,
        status("submitted"),
        started(status="working"),
        status("working", "reading"),
        *say("m1", "a", "b"),
        TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta="hmm"),
        TargetUpdate(kind=Kind.TOOL_CALL_START, tool_call_id="tc1", tool_name="search"),
        TargetUpdate(kind=Kind.TOOL_CALL_ARGS, tool_call_id="tc1", args={"q": 1}),
        TargetUpdate(kind=Kind.TOOL_CALL_END, tool_call_id="tc1"),
        artifact("a1", 3),
        TargetUpdate(kind=Kind.CUSTOM, name="progress", raw={"value": 0.5}),
        TargetUpdate(kind=Kind.INPUT_REQUIRED, text="ok?"),
    )
    state.resume()
    events += state.note_status("working")
    events += feed(state, TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m2", delta="c"))
    events += state.cancelled(remote_cancel=RemoteCancel.PENDING)
    events += feed(state, FINISHED, FAILED)
    return events


def test_sequence_numbers_strictly_increase_from_one() -> None:
    state = make_state()
    events = _long_script(state)
    assert len(events) > 15
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert state.sequence == len(events)
    assert kinds(events)[0] == Kind.STARTED
    assert [e.is_terminal for e in events].count(True) == 1
    assert events[-1].kind == Kind.CANCELLED


def test_identity_fields_on_every_event() -> None:
    state = make_state()
    events = _long_script(state)
    for event in events:
        assert event.run_id == "run-1"
        assert event.delegation_id == "del-1"
        assert event.agent_key == "research"
        assert event.agent_name == "Research Agent"
        assert event.protocol == "inprocess"
        assert event.parent_tool_call_id == "call-7"
        assert event.time == NOW
    # Pass-through kinds keep their payload.
    (custom,) = [e for e in events if e.kind == Kind.CUSTOM]
    assert (custom.name, custom.raw) == ("progress", {"value": 0.5})
    (args,) = [e for e in events if e.kind == Kind.TOOL_CALL_ARGS]
    assert (args.tool_call_id, args.args) == ("tc1", {"q": 1})


# -- secrets ------------------------------------------------------------------------------


def _fail_with(message: str) -> TargetUpdate:
    return TargetUpdate(
        kind=Kind.FAILED, error=DelegationError(code=ErrorCode.REMOTE_FAILED, message=message)
    )


SECRET_SCRIPTS: dict[str, list[TargetUpdate]] = {
    "finished text": [started(), TargetUpdate(kind=Kind.FINISHED, text=f"key is {SECRET}.")],
    "text delta": [
        started(),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta=f"token={SECRET}"),
        TargetUpdate(kind=Kind.FINISHED),
    ],
    "text delta, open at failure": [
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta=SECRET),
        _fail_with("crashed"),
    ],
    "reasoning delta": [
        TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta=f"use {SECRET}"),
        FINISHED,
    ],
    "status text": [started(), status("working", f"auth with {SECRET}"), FINISHED],
    "started text": [started(status="working", text=SECRET), FINISHED],
    "raw payload value": [
        started(raw={"headers": {"authorization": f"Bearer {SECRET}"}}),
        TargetUpdate(kind=Kind.CUSTOM, name="x", raw={"list": ["a", SECRET]}),
        FINISHED,
    ],
    "raw payload key": [
        TargetUpdate(kind=Kind.CUSTOM, name="x", raw={SECRET: 1}),
        FINISHED,
    ],
    "tool args and result": [
        TargetUpdate(kind=Kind.TOOL_CALL_ARGS, tool_call_id="t", args={"key": SECRET}),
        TargetUpdate(kind=Kind.TOOL_CALL_RESULT, tool_call_id="t", result=[SECRET]),
        FINISHED,
    ],
    "artifact name": [artifact("a1", 3, name=f"{SECRET}.txt"), FINISHED],
    "artifact uri": [
        TargetUpdate(
            kind=Kind.ARTIFACT,
            artifact=ArtifactRef(id="a1", name="n", uri=f"https://x/?token={SECRET}"),
            artifact_bytes=3,
        ),
        FINISHED,
    ],
    "artifact description": [
        TargetUpdate(
            kind=Kind.ARTIFACT,
            artifact=ArtifactRef(id="a1", name="n", description=f"made with {SECRET}"),
        ),
        FINISHED,
    ],
    "artifact name, too large": [
        TargetUpdate(
            kind=Kind.ARTIFACT,
            artifact=ArtifactRef(id="a1", name=SECRET, uri=f"s3://{SECRET}"),
            artifact_bytes=1 << 40,
        ),
    ],
    "failed error message": [started(), _fail_with(f"401 for key {SECRET}")],
    "status value, then failure": [started(), status(f"blocked:{SECRET}"), _fail_with("x")],
    "failed error metadata": [
        TargetUpdate(
            kind=Kind.FAILED,
            error=DelegationError(
                code=ErrorCode.REMOTE_FAILED, message="x", metadata={"detail": SECRET}
            ),
        )
    ],
    "input required text": [
        started(),
        TargetUpdate(kind=Kind.INPUT_REQUIRED, text=f"confirm {SECRET}?"),
    ],
}


@pytest.mark.parametrize("name", list(SECRET_SCRIPTS))
def test_secrets_never_appear_in_events_or_result(name: str) -> None:
    state = make_state(secrets=[SECRET])
    events = feed(state, *SECRET_SCRIPTS[name])
    snapshot = engine.to_json(state.snapshot())
    if not state.terminal:
        events += state.stop_for_input()
    assert state.terminal
    assert events
    for event in events:
        text = engine.to_json(event)
        assert SECRET not in text, (name, event.kind, text)
        # The JSON is what viewers see; the model values must agree with it.
        assert SECRET not in repr(json.loads(text))
    assert state.result is not None
    assert SECRET not in engine.to_json(state.result), name
    assert SECRET not in snapshot, name
    # Redaction replaced the secret instead of dropping the field.
    serialized = "".join(engine.to_json(e) for e in events) + engine.to_json(state.result)
    assert REDACTED in serialized


@pytest.mark.parametrize(
    "outcome",
    [
        lambda s: s.fail(
            DelegationError(code=ErrorCode.AUTH_REQUIRED, message=f"rejected {SECRET}")
        ),
        lambda s: s.cancelled(remote_cancel=RemoteCancel.PENDING, reason=f"stop {SECRET}"),
        lambda s: (
            s.note_status("reconnecting", f"retry with {SECRET}")
            + s.cancelled(remote_cancel=RemoteCancel.CONFIRMED)
        ),
    ],
    ids=["fail()", "cancelled()", "note_status()"],
)
def test_secrets_in_actor_outcomes_are_redacted(outcome) -> None:  # type: ignore[no-untyped-def]
    state = make_state(secrets=[SECRET])
    feed(state, started(status="working"))
    events = outcome(state)
    assert events
    serialized = [engine.to_json(e) for e in events]
    assert state.result is not None
    serialized.append(engine.to_json(state.result))
    for text in serialized:
        assert SECRET not in text
    assert REDACTED in "".join(serialized)


def test_redacted_text_keeps_the_rest() -> None:
    state = make_state(secrets=[SECRET])
    events = feed(state, *say("m1", f"a {SECRET} b"), TargetUpdate(kind=Kind.FINISHED))
    (delta,) = [e for e in events if e.kind == Kind.TEXT_DELTA]
    assert delta.delta == f"a {REDACTED} b"
    assert state.result is not None
    assert state.result.summary == f"a {REDACTED} b"
    assert state.result.messages == (ResultMessage(role="assistant", text=f"a {REDACTED} b"),)


def test_short_secrets_are_redacted_where_they_stand_alone() -> None:
    """A credential too short to be safe is still a credential: redacted as a token of its
    own (split across deltas too), while the words it is part of are left alone."""
    state = make_state(secrets=["abc", "x-1"])
    text = "abc token=abc abcdef xabc (x-1) ax-1 x-12: abc"
    events = feed(state, *say("m1", *text.partition("=ab")), TargetUpdate(kind=Kind.FINISHED))
    shown = "".join(e.delta or "" for e in events if e.kind == Kind.TEXT_DELTA)
    assert shown == (f"{REDACTED} token={REDACTED} abcdef xabc ({REDACTED}) ax-1 x-12: {REDACTED}")


def test_a_short_secret_that_is_a_word_of_a_kind_leaves_the_kinds_alone() -> None:
    state = make_state(secrets=["text", "delta"])
    events = feed(state, *say("m1", "some text"), FINISHED)
    assert [k for k in kinds(events) if k != Kind.TEXT_DELTA] == [
        Kind.STARTED,
        Kind.TEXT_START,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    deltas = [e for e in events if e.kind == Kind.TEXT_DELTA]
    assert "".join(e.delta or "" for e in deltas) == f"some {REDACTED}"


# -- a secret split across deltas ---------------------------------------------------------------


def shown(events: Iterable[DelegationEvent], kind: str) -> list[str]:
    return [e.delta for e in events if e.kind == kind and e.delta is not None]


def assert_nowhere(pieces: list[str], secret: str = SECRET) -> None:
    """Not in any piece, nor in any run of adjacent pieces (what a merge makes of them)."""
    for start in range(len(pieces)):
        for end in range(start + 1, len(pieces) + 1):
            assert secret not in "".join(pieces[start:end]), pieces[start:end]


@pytest.mark.parametrize(
    ("kind", "family_end"), [(Kind.TEXT_DELTA, Kind.TEXT_END), (Kind.REASONING_DELTA, None)]
)
def test_a_secret_split_across_deltas_is_redacted_before_anything_is_emitted(
    kind: str, family_end: str | None
) -> None:
    state = make_state(secrets=[SECRET])
    pieces = ["key: sk-", "LIVE", "-4f9", "a1c, done"]
    updates = [TargetUpdate(kind=kind, message_id="m1", delta=piece) for piece in pieces]
    if family_end is not None:
        updates.append(TargetUpdate(kind=family_end, message_id="m1"))
    events = feed(state, *updates, FINISHED)
    deltas = shown(events, kind)
    assert "".join(deltas) == f"key: {REDACTED}, done"
    assert_nowhere(deltas)
    assert SECRET not in engine.to_json(state.result)
    if kind == Kind.TEXT_DELTA:
        assert state.result is not None
        assert state.result.messages == (
            ResultMessage(role="assistant", text=f"key: {REDACTED}, done"),
        )


def test_a_held_tail_is_released_before_the_message_ends_and_no_text_is_lost() -> None:
    state = make_state(secrets=[SECRET])
    events = feed(state, *say("m1", "almost sk-LIV"), FINISHED)
    assert kinds(events)[-4:] == [
        Kind.TEXT_DELTA,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    assert shown(events, Kind.TEXT_DELTA) == ["almost ", "sk-LIV"]


@pytest.mark.parametrize(
    "ending",
    [
        FINISHED,
        _fail_with("crashed"),
        lambda state: state.cancelled(remote_cancel=RemoteCancel.CONFIRMED),
        lambda state: state.fail(DelegationError(code=ErrorCode.REMOTE_TIMEOUT, message="t")),
    ],
    ids=["finished", "failed", "cancelled()", "fail()"],
)
def test_held_tails_of_open_messages_and_tool_calls_are_released_before_the_terminal(
    ending: object,
) -> None:
    state = make_state(secrets=[SECRET])
    events = feed(
        state,
        started(),
        TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m1", delta="text sk-LIVE"),
        TargetUpdate(kind=Kind.TOOL_CALL_START, tool_call_id="t1", tool_name="search"),
        TargetUpdate(kind=Kind.TOOL_CALL_ARGS, tool_call_id="t1", delta='{"q": "sk-LI'),
    )
    if isinstance(ending, TargetUpdate):
        events += feed(state, ending)
    else:
        events += ending(state)  # type: ignore[operator]
    assert state.terminal
    assert shown(events, Kind.TEXT_DELTA) == ["text ", "sk-LIVE"]
    assert shown(events, Kind.TOOL_CALL_ARGS) == ['{"q": "', "sk-LI"]
    order = kinds(events)
    assert order.index(Kind.TEXT_END) < order.index(state.terminal_kind or "")
    assert max(i for i, k in enumerate(order) if k == Kind.TOOL_CALL_ARGS) < len(order) - 1


def test_tool_call_arguments_are_redacted_as_one_text_per_call() -> None:
    state = make_state(secrets=[SECRET])
    call = {"tool_call_id": "t1", "tool_name": "http"}
    events = feed(
        state,
        started(),
        TargetUpdate(kind=Kind.TOOL_CALL_START, **call),  # type: ignore[arg-type]
        *(
            TargetUpdate(kind=Kind.TOOL_CALL_ARGS, delta=piece, **call)  # type: ignore[arg-type]
            for piece in ('{"auth": "sk-', "LIVE-4f", '9a1c"}')
        ),
        TargetUpdate(kind=Kind.TOOL_CALL_END, **call),  # type: ignore[arg-type]
        FINISHED,
    )
    deltas = shown(events, Kind.TOOL_CALL_ARGS)
    assert "".join(deltas) == f'{{"auth": "{REDACTED}"}}'
    assert_nowhere(deltas)
    args = [e for e in events if e.kind == Kind.TOOL_CALL_ARGS]
    assert {(e.tool_call_id, e.tool_name) for e in args} == {("t1", "http")}
    order = kinds(events)
    assert order.index(Kind.TOOL_CALL_END) > max(
        i for i, k in enumerate(order) if k == Kind.TOOL_CALL_ARGS
    )


def test_a_nested_subagents_held_text_is_released_before_its_end() -> None:
    state = make_state(secrets=[SECRET])
    events = feed(
        state,
        started(),
        TargetUpdate(kind=Kind.NESTED_STARTED, subagent_id="s1", name="helper"),
        TargetUpdate(kind=Kind.TEXT_DELTA, subagent_id="s1", message_id="n1", delta="x sk-LI"),
        TargetUpdate(
            kind=Kind.TOOL_CALL_ARGS, subagent_id="s1", tool_call_id="c1", delta="sk-LIVE-4"
        ),
        TargetUpdate(kind=Kind.NESTED_FINISHED, subagent_id="s1", status="completed"),
    )
    order = kinds(events)
    end = order.index(Kind.NESTED_FINISHED)
    released = [e for e in events[:end] if e.delta in ("sk-LI", "sk-LIVE-4")]
    assert [(e.kind, e.nested_id) for e in released] == [
        (Kind.TEXT_DELTA, "del-1/s1"),
        (Kind.TOOL_CALL_ARGS, "del-1/s1"),
    ]


def test_without_secrets_deltas_pass_as_they_came() -> None:
    state = make_state()
    events = feed(state, *say("m1", "sk-", "LIVE")[:-1])
    assert state._open["m1"].stream is None  # nothing is held, nothing is kept per message
    events += feed(state, TargetUpdate(kind=Kind.TEXT_END, message_id="m1"), FINISHED)
    assert shown(events, Kind.TEXT_DELTA) == ["sk-", "LIVE"]


# -- text that is not valid Unicode -----------------------------------------------------------


def test_lone_surrogates_from_a_target_become_replacement_characters() -> None:
    state = make_state()
    events = feed(
        state,
        started(status="working", text="\ud800"),
        *say("m\udc00", "a\ud800", "b"),
        TargetUpdate(kind=Kind.TOOL_CALL_ARGS, tool_call_id="t", args={"k\ud800": ["\udfff"]}),
        TargetUpdate(
            kind=Kind.FAILED,
            error=DelegationError(code=ErrorCode.REMOTE_FAILED, message="bad \ud800"),
        ),
    )
    for event in events:
        engine.to_json(event).encode("utf-8")
    assert state.result is not None
    engine.to_json(state.result).encode("utf-8")
    assert shown(events, Kind.TEXT_DELTA) == ["a\ufffd", "b"]
    assert {e.message_id for e in events if e.kind == Kind.TEXT_DELTA} == {"m\ufffd"}
    assert state.result.error is not None
    assert state.result.error.message == "bad \ufffd"


def test_lone_surrogates_in_actor_outcomes_and_identity_are_replaced() -> None:
    identity = DelegationIdentity(
        run_id="run-1", delegation_id="del-1", agent_key="\ud800", agent_name="n", protocol="p"
    )
    state = DelegationState(identity, DelegationPolicy(), clock=lambda: NOW)
    events = state.note_status("reconnecting", "retry \ud800") + state.cancelled(
        remote_cancel=RemoteCancel.PENDING, reason="stop \udc00"
    )
    for event in events:
        engine.to_json(event).encode("utf-8")
    assert state.result is not None
    engine.to_json(state.result).encode("utf-8")
    assert {e.agent_key for e in events} == {"\ufffd"}
