"""Unit tests of `A2AEventMapper`, the sans-IO A2A -> `TargetUpdate` translation.

Every test builds real `a2a.types` protobuf objects, feeds them and asserts on the exact updates.
The last tests run the mapper's output through the engine's own `DelegationState`, so the rules
it leaves to the engine (synthesized start, one terminal, message lifecycle) are checked whole.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.a2a._mapping import MAX_ERROR_CHARS, A2AEventMapper, status_of
from engine import (
    ArtifactRef,
    DelegationError,
    DelegationIdentity,
    DelegationPolicy,
    DelegationState,
    ErrorCode,
    Kind,
    Status,
    TargetUpdate,
)
from tests.helpers.a2a_builders import (
    agent_message,
    data_part,
    on_artifact,
    on_status,
    on_task,
    task,
)
from tests.helpers.events import kinds

S = TaskState


def started_mapper() -> A2AEventMapper:
    mapper = A2AEventMapper()
    mapper.feed(on_task(task()))
    return mapper


IDENTITY = DelegationIdentity(
    run_id="run-1", delegation_id="del-1", agent_key="research", agent_name="R", protocol="a2a"
)


def engine_run(*items: StreamResponse, policy: DelegationPolicy | None = None) -> DelegationState:
    """Feed items through the mapper and then the engine's own state machine."""
    mapper = A2AEventMapper()
    state = DelegationState(IDENTITY, policy or DelegationPolicy(), clock=lambda: 0.0)
    for item in items:
        for update in mapper.feed(item):
            state.feed(update)
    return state


# --- started and ids -----------------------------------------------------------------------------


def test_first_task_starts_the_delegation_with_ids_and_status() -> None:
    mapper = A2AEventMapper(card_fingerprint="sha256:ab")
    updates = mapper.feed(on_task(task(S.TASK_STATE_SUBMITTED)))
    assert updates == [
        TargetUpdate(
            kind=Kind.STARTED,
            status="submitted",
            remote_task_id="task-1",
            remote_context_id="ctx-1",
            card_fingerprint="sha256:ab",
        )
    ]
    assert (mapper.task_id, mapper.context_id, mapper.status) == ("task-1", "ctx-1", "submitted")


def test_started_is_not_repeated_and_a_same_status_is_not_echoed() -> None:
    mapper = started_mapper()
    assert mapper.feed(on_status(S.TASK_STATE_SUBMITTED, seconds=5)) == []
    assert kinds(mapper.feed(on_status(S.TASK_STATE_WORKING))) == [Kind.STATUS]


def test_first_task_with_status_text_starts_then_reports_the_text() -> None:
    updates = A2AEventMapper().feed(on_task(task(S.TASK_STATE_WORKING, "Accepted")))
    assert kinds(updates) == [Kind.STARTED, Kind.STATUS]
    assert (updates[1].status, updates[1].text) == ("working", "Accepted")


def test_a_terminal_before_any_task_is_a_claim_not_the_end() -> None:
    mapper = A2AEventMapper()
    assert mapper.feed(on_status(S.TASK_STATE_COMPLETED, "done")) == []
    assert (mapper.ignored_unannounced, mapper.unconfirmed_task_id) == (1, "task-1")
    assert mapper.task_id is None and mapper.terminal_state is None
    # The task is then announced; its real end is the end.
    assert kinds(mapper.feed(on_task(task()))) == [Kind.STARTED]
    updates = mapper.feed(on_status(S.TASK_STATE_COMPLETED, "done"))
    assert kinds(updates) == [Kind.FINISHED] and updates[0].text == "done"


def test_an_artifact_first_starts_with_no_status() -> None:
    updates = A2AEventMapper().feed(on_artifact("a", Part(raw=b"x")))
    assert kinds(updates) == [Kind.STARTED, Kind.ARTIFACT]
    assert updates[0].status is None


def test_items_without_a_task_id_need_no_start_from_the_mapper() -> None:
    # The engine synthesizes the start; the mapper does not invent a task id.
    updates = A2AEventMapper().feed(on_status(S.TASK_STATE_WORKING, "hi", task_id=""))
    assert kinds(updates) == [Kind.STATUS]
    assert updates[0].remote_task_id is None


# --- states --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "name"),
    [
        (S.TASK_STATE_SUBMITTED, "submitted"),
        (S.TASK_STATE_WORKING, "working"),
        (S.TASK_STATE_INPUT_REQUIRED, "input_required"),
        (S.TASK_STATE_AUTH_REQUIRED, "auth_required"),
        (S.TASK_STATE_COMPLETED, "completed"),
        (S.TASK_STATE_FAILED, "failed"),
        (S.TASK_STATE_CANCELED, "cancelled"),
        (S.TASK_STATE_REJECTED, "rejected"),
        (S.TASK_STATE_UNSPECIFIED, "unknown"),
        (42, "unknown"),
    ],
)
def test_status_names(state: int, name: str) -> None:
    assert status_of(state) == name


def test_working_status_carries_the_message_text_not_a_delta() -> None:
    mapper = started_mapper()
    [update] = mapper.feed(on_status(S.TASK_STATE_WORKING, "Searching", message_id="s-1"))
    assert update == TargetUpdate(
        kind=Kind.STATUS,
        status="working",
        text="Searching",
        remote_message_id="s-1",
        remote_task_id="task-1",
        remote_context_id="ctx-1",
    )


def test_status_message_parts_are_joined_by_newlines() -> None:
    mapper = started_mapper()
    item = on_status(S.TASK_STATE_WORKING)
    item.status_update.status.message.parts.extend([Part(text="a"), Part(raw=b"x"), Part(text="b")])
    [update] = mapper.feed(item)
    assert update.text == "a\nb"


@pytest.mark.parametrize(
    ("state", "name"),
    [
        (S.TASK_STATE_INPUT_REQUIRED, "input_required"),
        (S.TASK_STATE_AUTH_REQUIRED, "auth_required"),
    ],
)
def test_interrupted_states_require_input(state: int, name: str) -> None:
    mapper = started_mapper()
    [update] = mapper.feed(on_status(state, "Which year?"))
    assert (update.kind, update.status, update.text) == (Kind.INPUT_REQUIRED, name, "Which year?")
    assert mapper.terminal_state is None


def test_input_required_as_first_state_is_not_swallowed_by_the_start() -> None:
    updates = A2AEventMapper().feed(on_task(task(S.TASK_STATE_INPUT_REQUIRED)))
    assert kinds(updates) == [Kind.STARTED, Kind.INPUT_REQUIRED]


def test_completed_finishes_with_the_status_text_or_none() -> None:
    [done] = started_mapper().feed(on_status(S.TASK_STATE_COMPLETED, "All done"))
    assert (done.kind, done.status, done.text) == (Kind.FINISHED, "completed", "All done")
    [bare] = started_mapper().feed(on_status(S.TASK_STATE_COMPLETED))
    assert (bare.kind, bare.text) == (Kind.FINISHED, None)


def test_failed_carries_a_typed_remote_failed_error() -> None:
    mapper = started_mapper()
    [update] = mapper.feed(on_status(S.TASK_STATE_FAILED, "Upstream API down"))
    assert update.kind == Kind.FAILED
    assert update.status == "failed"
    assert update.error == DelegationError(
        code=ErrorCode.REMOTE_FAILED, message="Upstream API down", remote_status="failed"
    )
    assert mapper.terminal_state == "failed"


def test_failed_without_text_gets_a_default_message_and_long_text_is_cut() -> None:
    [bare] = started_mapper().feed(on_status(S.TASK_STATE_FAILED))
    assert bare.error is not None
    assert bare.error.message == "The remote agent reported that the task failed."
    [long] = started_mapper().feed(on_status(S.TASK_STATE_FAILED, "x" * 5000))
    assert long.error is not None
    assert len(long.error.message) == MAX_ERROR_CHARS
    assert long.error.message.endswith("…")


def test_rejected_is_a_failure_with_remote_rejected() -> None:
    [update] = started_mapper().feed(on_status(S.TASK_STATE_REJECTED, "Not my job"))
    assert update.kind == Kind.FAILED
    assert update.error is not None
    assert (update.error.code, update.error.retryable) == (ErrorCode.REMOTE_REJECTED, False)
    assert (update.error.message, update.error.remote_status) == ("Not my job", "rejected")
    [bare] = started_mapper().feed(on_status(S.TASK_STATE_REJECTED))
    assert bare.error is not None
    assert bare.error.message == "The remote agent rejected the task."


def test_canceled_is_cancelled() -> None:
    [update] = started_mapper().feed(on_status(S.TASK_STATE_CANCELED, "stopped"))
    assert (update.kind, update.status, update.text) == (Kind.CANCELLED, "cancelled", "stopped")


def test_unknown_state_is_an_unknown_status_with_the_raw_state() -> None:
    mapper = started_mapper()
    [update] = mapper.feed(on_status(42))
    assert (update.kind, update.status, update.raw) == (Kind.STATUS, "unknown", {"state": 42})
    [unspecified] = started_mapper().feed(on_status(S.TASK_STATE_UNSPECIFIED))
    assert (unspecified.status, unspecified.raw) == ("unknown", None)


def test_status_data_parts_travel_in_raw_when_small() -> None:
    mapper = started_mapper()
    item = on_status(S.TASK_STATE_WORKING, "step")
    item.status_update.status.message.parts.append(data_part({"progress": 0.5}))
    [update] = mapper.feed(item)
    assert update.raw == {"status_data": [{"progress": 0.5}]}
    big = on_status(S.TASK_STATE_WORKING, "step 2")
    big.status_update.status.message.parts.append(data_part({"blob": "x" * 10_000}))
    [update] = mapper.feed(big)
    assert update.raw == {"status_data_omitted": 1}


# --- text: agent messages and assistant-output artifacts -----------------------------------------


def test_agent_message_becomes_one_text_message() -> None:
    mapper = started_mapper()
    updates = mapper.feed(StreamResponse(message=agent_message("Hello", message_id="m-9")))
    assert kinds(updates) == [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END]
    assert {u.message_id for u in updates} == {"m-9"}
    assert updates[0].role == "assistant"
    assert updates[1].delta == "Hello"


def test_user_messages_are_ignored() -> None:
    mapper = started_mapper()
    message = agent_message("my own prompt")
    message.role = Role.ROLE_USER
    assert mapper.feed(StreamResponse(message=message)) == []


def test_a_repeated_message_id_is_a_duplicate() -> None:
    mapper = started_mapper()
    mapper.feed(StreamResponse(message=agent_message("Hello", message_id="m-1")))
    mapper.feed(on_status(S.TASK_STATE_WORKING))  # a state change clears the hash window
    assert mapper.feed(StreamResponse(message=agent_message("Hello", message_id="m-1"))) == []
    assert mapper.ignored_duplicates == 1


def test_a_task_less_message_is_a_direct_reply_that_finishes() -> None:
    mapper = A2AEventMapper()
    updates = mapper.feed(StreamResponse(message=agent_message("Hi!", task_id="")))
    assert kinds(updates) == [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END, Kind.FINISHED]
    assert mapper.terminal_state == "completed"


def test_messages_without_an_id_get_distinct_ids() -> None:
    mapper = started_mapper()
    first = mapper.feed(StreamResponse(message=agent_message("a", message_id="")))
    second = mapper.feed(StreamResponse(message=agent_message("b", message_id="")))
    assert first[0].message_id != second[0].message_id
    assert first[0].message_id


def test_assistant_output_artifact_streams_text_deltas_and_ends_on_last_chunk() -> None:
    mapper = started_mapper()
    first = mapper.feed(on_artifact("out-1", Part(text="Hel"), name="assistant-output"))
    second = mapper.feed(on_artifact("out-1", Part(text="lo"), Part(text="!"), append=True))
    last = mapper.feed(on_artifact("out-1", append=True, last=True))
    assert kinds(first) == [Kind.TEXT_DELTA]
    assert kinds(second) == [Kind.TEXT_DELTA, Kind.TEXT_DELTA]
    assert kinds(last) == [Kind.TEXT_END]
    assert [u.delta for u in first + second] == ["Hel", "lo", "!"]
    for update in first + second + last:
        assert (update.message_id, update.remote_artifact_id) == ("out-1", "out-1")
        assert update.artifact is None
        assert update.text is None


@pytest.mark.parametrize("name", ["assistant-output", "assistant_output", "response"])
def test_default_text_artifact_names(name: str) -> None:
    [update] = started_mapper().feed(on_artifact("a", Part(text="t"), name=name))
    assert update.kind == Kind.TEXT_DELTA


def test_text_artifact_names_are_configurable() -> None:
    mapper = A2AEventMapper(text_artifact_names=frozenset({"answer"}))
    mapper.feed(on_task(task()))
    assert kinds(mapper.feed(on_artifact("a", Part(text="t"), name="answer"))) == [Kind.TEXT_DELTA]
    assert kinds(mapper.feed(on_artifact("b", Part(text="t"), name="response"))) == [Kind.ARTIFACT]


def test_a_whole_text_artifact_in_one_chunk() -> None:
    updates = started_mapper().feed(
        on_artifact("a", Part(text="complete"), name="response", last=True)
    )
    assert kinds(updates) == [Kind.TEXT_DELTA, Kind.TEXT_END]


def test_same_text_chunk_twice_apart_is_content_but_adjacent_repeat_is_a_duplicate() -> None:
    mapper = started_mapper()
    mapper.feed(on_artifact("a", Part(text="x"), name="response"))
    newline = on_artifact("a", Part(text="\n"), append=True)
    assert kinds(mapper.feed(newline)) == [Kind.TEXT_DELTA]
    assert mapper.feed(newline) == []  # replayed right away: a duplicate
    mapper.feed(on_artifact("a", Part(text="y"), append=True))
    assert kinds(mapper.feed(newline)) == [Kind.TEXT_DELTA]  # later: ordinary content
    assert mapper.ignored_duplicates == 1


def test_a_text_artifact_resent_whole_only_adds_its_new_end() -> None:
    mapper = started_mapper()
    mapper.feed(on_artifact("a", Part(text="Hel"), name="response"))
    [update] = mapper.feed(on_artifact("a", Part(text="Hello"), name="response"))
    assert update.delta == "lo"
    assert mapper.feed(on_artifact("a", Part(text="Hello"), name="response", last=True)) == [
        attrs.evolve(update, kind=Kind.TEXT_END, delta=None)
    ]


def test_a_text_artifact_replaced_by_other_text_closes_and_restarts() -> None:
    mapper = started_mapper()
    mapper.feed(on_artifact("a", Part(text="Draft"), name="response"))
    updates = mapper.feed(on_artifact("a", Part(text="Final"), name="response"))
    assert kinds(updates) == [Kind.TEXT_END, Kind.TEXT_DELTA]
    assert updates[1].delta == "Final"


def test_text_artifact_ignores_non_text_parts() -> None:
    updates = started_mapper().feed(
        on_artifact("a", Part(text="t"), Part(raw=b"\x00" * 10), name="response")
    )
    assert [(u.kind, u.delta) for u in updates] == [(Kind.TEXT_DELTA, "t")]


# --- other artifacts -----------------------------------------------------------------------------


def test_file_artifact_is_a_reference_with_chunk_bytes() -> None:
    mapper = started_mapper()
    [update] = mapper.feed(
        on_artifact(
            "rep-1",
            Part(raw=b"abcdef", media_type="text/markdown", filename="r.md"),
            name="report.md",
            description="The report",
            metadata={"pages": 2},
        )
    )
    assert update == TargetUpdate(
        kind=Kind.ARTIFACT,
        name="report.md",
        artifact=ArtifactRef(
            id="rep-1",
            name="report.md",
            description="The report",
            mime_type="text/markdown",
            uri="a2a://task-1/artifacts/rep-1",
            metadata={"pages": 2},
        ),
        artifact_bytes=6,
        artifact_append=False,
        artifact_data=b"abcdef",
        remote_artifact_id="rep-1",
        remote_task_id="task-1",
        remote_context_id="ctx-1",
    )


def test_artifact_bytes_count_text_utf8_raw_and_data_json() -> None:
    [update] = started_mapper().feed(
        on_artifact("a", Part(text="é"), Part(raw=b"123"), data_part({"k": [True, "v"]}))
    )
    assert update.artifact_bytes == 2 + 3 + len('{"k":[true,"v"]}')
    assert update.artifact is not None
    assert update.artifact.mime_type == "application/json"  # first file/data part
    assert update.text is None and update.delta is None


def test_url_part_is_the_uri_and_ids_are_quoted_otherwise() -> None:
    [linked] = started_mapper().feed(
        on_artifact("a", Part(url="https://files.example/x.pdf", media_type="application/pdf"))
    )
    assert linked.artifact is not None
    assert (linked.artifact.uri, linked.artifact.mime_type, linked.artifact_bytes) == (
        "https://files.example/x.pdf",
        "application/pdf",
        0,
    )
    [odd] = started_mapper().feed(on_artifact("a/b c", Part(raw=b"x")))
    assert odd.artifact is not None
    assert odd.artifact.uri == "a2a://task-1/artifacts/a%2Fb%20c"


def test_appended_chunks_keep_what_the_first_chunk_said() -> None:
    mapper = started_mapper()
    mapper.feed(on_artifact("a", Part(raw=b"12", media_type="text/csv"), name="data.csv"))
    [more] = mapper.feed(on_artifact("a", Part(raw=b"345"), append=True, last=True))
    assert more.artifact_append is True
    assert more.artifact_bytes == 3
    assert more.artifact is not None
    assert (more.artifact.name, more.artifact.mime_type) == ("data.csv", "text/csv")


def test_large_or_non_json_metadata_is_not_carried() -> None:
    [big] = started_mapper().feed(on_artifact("a", Part(raw=b"x"), metadata={"b": "x" * 9000}))
    assert big.artifact is not None
    assert big.artifact.metadata is not None
    assert big.artifact.metadata["omitted"] == "too_large"
    item = on_artifact("b", Part(raw=b"x"))
    item.artifact_update.artifact.metadata["n"] = float("nan")
    [nan] = started_mapper().feed(item)
    assert nan.artifact is not None
    assert nan.artifact.metadata == {"omitted": "not_json"}


def test_artifact_content_never_reaches_text_fields() -> None:
    secret_content = "CONTENT-" * 10
    mapper = started_mapper()
    updates = mapper.feed(on_artifact("a", Part(text=secret_content), name="notes.txt"))
    updates += mapper.snapshot(
        task(artifacts=[Artifact(artifact_id="b", parts=[Part(text=secret_content)])])
    )
    for update in updates:
        # Only artifact_data holds content: the engine keeps it aside, never in an event.
        assert secret_content not in repr(attrs.evolve(update, artifact=None, artifact_data=None))
    assert [u.artifact_data for u in updates if u.kind == Kind.ARTIFACT] == [
        secret_content.encode()
    ] * 2


def test_inline_content_is_the_parts_in_order_and_a_url_part_has_none() -> None:
    [update] = started_mapper().feed(
        on_artifact("a", Part(text="é"), Part(raw=b"123"), data_part({"k": [True, "v"]}))
    )
    assert update.artifact_data == "é".encode() + b"123" + b'{"k":[true,"v"]}'
    [linked] = started_mapper().feed(on_artifact("u", Part(url="https://files.example/x.pdf")))
    assert linked.artifact_data is None


# --- guards: foreign task ids, duplicates, stale snapshots ---------------------------------------


def test_items_about_another_task_are_ignored_and_counted() -> None:
    mapper = started_mapper()
    assert mapper.feed(on_status(S.TASK_STATE_COMPLETED, task_id="task-2")) == []
    assert mapper.feed(on_artifact("a", Part(raw=b"x"), task_id="task-2")) == []
    assert mapper.feed(StreamResponse(message=agent_message("x", task_id="task-2"))) == []
    assert mapper.feed(on_task(task(task_id="task-2"))) == []
    assert mapper.snapshot(task(S.TASK_STATE_FAILED, task_id="task-2")) == []
    assert mapper.from_send_response(agent_message("x", task_id="task-2")) == []
    assert mapper.ignored_foreign == 6
    assert mapper.terminal_state is None


def test_exact_duplicates_are_ignored_and_counted() -> None:
    mapper = started_mapper()
    working = on_status(S.TASK_STATE_WORKING, "step", seconds=10)
    chunk = on_artifact("a", Part(raw=b"x"), name="f")
    assert len(mapper.feed(working)) == 1
    assert len(mapper.feed(chunk)) == 1
    assert mapper.feed(working) == []
    assert mapper.feed(chunk) == []
    done = on_status(S.TASK_STATE_COMPLETED, seconds=20)
    assert kinds(mapper.feed(done)) == [Kind.FINISHED]
    assert mapper.feed(done) == []
    assert mapper.ignored_duplicates == 3


def test_a_repeat_after_a_state_change_is_a_new_transition() -> None:
    mapper = started_mapper()
    working = on_status(S.TASK_STATE_WORKING)
    assert kinds(mapper.feed(working)) == [Kind.STATUS]
    assert kinds(mapper.feed(on_status(S.TASK_STATE_INPUT_REQUIRED, "?"))) == [Kind.INPUT_REQUIRED]
    assert kinds(mapper.feed(working)) == [Kind.STATUS]  # same bytes, but back to working
    assert mapper.ignored_duplicates == 0


def test_resume_hears_the_same_question_again() -> None:
    mapper = started_mapper()
    question = on_status(S.TASK_STATE_INPUT_REQUIRED, "Which year?")
    assert kinds(mapper.feed(question)) == [Kind.INPUT_REQUIRED]
    assert mapper.feed(question) == []
    mapper.resume()
    assert kinds(mapper.feed(question)) == [Kind.INPUT_REQUIRED]


def test_a_stale_status_never_overrides_a_newer_one() -> None:
    mapper = started_mapper()
    mapper.feed(on_status(S.TASK_STATE_INPUT_REQUIRED, "?", seconds=200))
    assert mapper.snapshot(task(S.TASK_STATE_WORKING, seconds=100)) == []
    assert mapper.ignored_stale == 1
    assert mapper.status == "input_required"
    # A terminal state is never stale: nothing supersedes it.
    assert kinds(mapper.snapshot(task(S.TASK_STATE_COMPLETED, seconds=50))) == [Kind.FINISHED]


def test_the_dedupe_window_is_bounded() -> None:
    mapper = started_mapper()
    first = on_artifact("a-0", Part(raw=b"x"))
    mapper.feed(first)
    for n in range(1, 1100):
        mapper.feed(on_artifact(f"a-{n}", Part(raw=b"x")))
    assert len(mapper.feed(first)) == 1  # forgotten: fed again (the engine counts it again)
    assert mapper.ignored_duplicates == 0


# --- snapshots -----------------------------------------------------------------------------------


def test_snapshot_emits_only_what_changed() -> None:
    mapper = A2AEventMapper()
    report = Artifact(artifact_id="r", name="r.md", parts=[Part(raw=b"abc")])
    first = mapper.snapshot(task(S.TASK_STATE_WORKING, "busy", artifacts=[report]))
    assert kinds(first) == [Kind.STARTED, Kind.ARTIFACT, Kind.STATUS]
    assert mapper.snapshot(task(S.TASK_STATE_WORKING, "busy", artifacts=[report])) == []
    grown = Artifact(artifact_id="r", name="r.md", parts=[Part(raw=b"abc"), Part(raw=b"de")])
    [more] = mapper.snapshot(task(S.TASK_STATE_WORKING, "busy", artifacts=[grown]))
    assert (more.kind, more.artifact_append, more.artifact_bytes) == (Kind.ARTIFACT, True, 2)
    replaced = Artifact(artifact_id="r", name="r.md", parts=[Part(raw=b"xyz")])
    [again] = mapper.snapshot(task(S.TASK_STATE_WORKING, "busy", artifacts=[replaced]))
    assert (again.artifact_append, again.artifact_bytes) == (False, 3)


def test_snapshot_after_a_dropped_stream_adds_only_the_missed_part() -> None:
    mapper = started_mapper()
    mapper.feed(on_artifact("out", Part(text="Hel"), name="assistant-output"))
    mapper.feed(on_artifact("f", Part(raw=b"12"), name="data.bin"))
    mapper.feed(on_artifact("f", Part(raw=b"34"), append=True))
    # The SDK's task store appends chunk parts to the artifact: the snapshot holds all of them.
    snapshot = task(
        S.TASK_STATE_COMPLETED,
        artifacts=[
            Artifact(
                artifact_id="out",
                name="assistant-output",
                parts=[Part(text="Hel"), Part(text="lo")],
            ),
            Artifact(artifact_id="f", name="data.bin", parts=[Part(raw=b"12"), Part(raw=b"34")]),
        ],
    )
    updates = mapper.snapshot(snapshot)
    assert [(u.kind, u.delta) for u in updates] == [(Kind.TEXT_DELTA, "lo"), (Kind.FINISHED, None)]


def test_snapshot_does_not_replay_history() -> None:
    snap = task(S.TASK_STATE_WORKING)
    snap.history.extend([agent_message("old status text"), agent_message("prompt")])
    assert kinds(A2AEventMapper().snapshot(snap)) == [Kind.STARTED]


def test_snapshot_puts_artifacts_before_the_terminal() -> None:
    snap = task(
        S.TASK_STATE_COMPLETED,
        "done",
        artifacts=[Artifact(artifact_id="a", name="response", parts=[Part(text="Answer")])],
    )
    updates = A2AEventMapper().from_send_response(SendMessageResponse(task=snap))
    assert kinds(updates) == [Kind.STARTED, Kind.TEXT_DELTA, Kind.FINISHED]


def test_from_send_response_accepts_every_reply_shape() -> None:
    assert kinds(A2AEventMapper().from_send_response(task(S.TASK_STATE_WORKING))) == [Kind.STARTED]
    assert kinds(A2AEventMapper().from_send_response(on_task(task()))) == [Kind.STARTED]
    reply = A2AEventMapper().from_send_response(
        SendMessageResponse(message=agent_message("Hi", task_id=""))
    )
    assert kinds(reply) == [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END, Kind.FINISHED]
    direct = A2AEventMapper().from_send_response(agent_message("Hi", task_id=""))
    assert kinds(direct) == kinds(reply)


# --- malformed payloads --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        StreamResponse(),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id="task-1")),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(task_id="task-1")),
        on_artifact(""),
        StreamResponse(task=Task(context_id="c")),
        StreamResponse(task=Task(id="t", artifacts=[Artifact(name="no id")])),
        "not a proto",
        None,
        {"statusUpdate": {}},
        Task(id="t"),
    ],
)
def test_malformed_stream_items_raise_typed_errors(bad: Any) -> None:
    with pytest.raises(DelegationError) as caught:
        A2AEventMapper().feed(bad)
    assert caught.value.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert caught.value.retryable is False


@pytest.mark.parametrize("bad", [StreamResponse(), Message(), "x", None])
def test_malformed_snapshots_raise_typed_errors(bad: Any) -> None:
    with pytest.raises(DelegationError) as caught:
        A2AEventMapper().snapshot(bad)
    assert caught.value.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD


@pytest.mark.parametrize("bad", [SendMessageResponse(), TaskStatus(), 3, Task()])
def test_malformed_send_responses_raise_typed_errors(bad: Any) -> None:
    with pytest.raises(DelegationError) as caught:
        A2AEventMapper().from_send_response(bad)
    assert caught.value.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD


# --- through the engine --------------------------------------------------------------------------


def test_happy_path_through_the_engine() -> None:
    state = engine_run(
        on_task(task()),
        on_status(S.TASK_STATE_WORKING, "Searching"),
        on_artifact("out", Part(text="Official "), name="assistant-output"),
        on_artifact("out", Part(text="SDKs exist."), append=True, last=True),
        on_artifact("notes", Part(raw=b"# notes"), name="notes.md"),
        on_status(S.TASK_STATE_COMPLETED),
    )
    result = state.result
    assert result is not None
    assert result.status == Status.COMPLETED
    assert result.summary == "Official SDKs exist."
    assert (result.remote_task_id, result.remote_context_id) == ("task-1", "ctx-1")
    assert [a.uri for a in result.artifacts] == ["a2a://task-1/artifacts/notes"]
    assert result.artifacts[0].size_bytes == 7


def test_duplicated_stream_through_the_engine_has_one_terminal_and_no_doubled_text() -> None:
    items = [
        on_task(task()),
        on_status(S.TASK_STATE_WORKING, seconds=1),
        on_artifact("out", Part(text="Hello"), name="response"),
        on_artifact("out", Part(text=" world"), append=True, last=True),
        on_status(S.TASK_STATE_COMPLETED, seconds=2),
    ]
    doubled = [item for item in items for _ in range(2)]
    state = engine_run(*doubled)
    assert state.result is not None
    assert state.result.summary == "Hello world"
    assert state.result.status == Status.COMPLETED


def test_rejected_through_the_engine() -> None:
    state = engine_run(on_task(task()), on_status(S.TASK_STATE_REJECTED, "nope"))
    assert state.result is not None
    assert state.result.status == Status.FAILED
    assert state.result.error is not None
    assert state.result.error.code == ErrorCode.REMOTE_REJECTED


# --- property: arbitrary JSON in, only updates or a typed error out ------------------------------

JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
FIELD_NAMES = st.sampled_from(
    [
        "task", "message", "statusUpdate", "artifactUpdate", "id", "taskId", "contextId",
        "status", "state", "artifact", "artifactId", "name", "parts", "text", "raw", "url",
        "data", "append", "lastChunk", "messageId", "role", "artifacts", "history", "metadata",
        "timestamp", "mediaType",
    ]
)  # fmt: skip
STATE_NAMES = st.sampled_from([name for name, _ in TaskState.items()] + ["ROLE_AGENT"])
A2A_JSON = st.recursive(
    JSON_LEAVES | STATE_NAMES,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(FIELD_NAMES, children, max_size=4)
    ),
    max_leaves=25,
)


IDS = st.sampled_from(["", "task-1", "task-2"])
STATE = STATE_NAMES | st.integers(min_value=-1, max_value=12)
PART = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=6),
        "raw": st.sampled_from(["", "AAEC", "!!"]),
        "url": st.text(max_size=6),
        "data": JSON,
        "mediaType": st.text(max_size=4),
        "metadata": JSON,
    },
)
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "messageId": st.sampled_from(["", "m-1", "m-2"]),
        "taskId": IDS,
        "role": st.sampled_from(["ROLE_AGENT", "ROLE_USER", "ROLE_UNSPECIFIED", 7]),
        "parts": st.lists(PART, max_size=3),
    },
)
STATUS_JSON = st.fixed_dictionaries(
    {},
    optional={
        "state": STATE,
        "message": MESSAGE,
        "timestamp": st.sampled_from(["2026-01-01T00:00:00Z", "1970-01-01T00:00:01Z", "x"]),
    },
)
ARTIFACT = st.fixed_dictionaries(
    {},
    optional={
        "artifactId": st.sampled_from(["", "a", "b"]),
        "name": st.sampled_from(["", "response", "notes"]),
        "description": st.text(max_size=4),
        "parts": st.lists(PART, max_size=3),
        "metadata": JSON,
    },
)
TASK = st.fixed_dictionaries(
    {},
    optional={
        "id": IDS,
        "contextId": st.sampled_from(["", "ctx-1"]),
        "status": STATUS_JSON,
        "artifacts": st.lists(ARTIFACT, max_size=3),
        "history": st.lists(MESSAGE, max_size=2),
    },
)
STREAM_ITEM = st.one_of(
    st.builds(lambda body: {"task": body}, TASK),
    st.builds(lambda body: {"message": body}, MESSAGE),
    st.builds(
        lambda task_id, body: {"statusUpdate": {"taskId": task_id, "status": body}},
        IDS,
        STATUS_JSON,
    ),
    st.builds(
        lambda task_id, body, append, last: {
            "artifactUpdate": {
                "taskId": task_id,
                "artifact": body,
                "append": append,
                "lastChunk": last,
            }
        },
        IDS,
        ARTIFACT,
        st.booleans(),
        st.booleans(),
    ),
)


def _parse(document: Any) -> StreamResponse | None:
    try:
        return json_format.ParseDict(document, StreamResponse(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError):
        return None
    except (SystemError, ArithmeticError):  # protobuf's parser: lone surrogate key, enum 1e999
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STREAM_ITEM | A2A_JSON | JSON, min_size=1, max_size=8))
def test_arbitrary_json_gives_only_updates_or_typed_errors(documents: list[Any]) -> None:
    mapper = A2AEventMapper()
    for document in documents:
        item = _parse(document)
        if item is None:
            continue
        calls: list[Any] = [(mapper.feed, item), (mapper.from_send_response, item)]
        if item.WhichOneof("payload") == "task":
            calls.append((mapper.snapshot, item.task))
        for call, argument in calls:
            outcome = _outcome(call, argument)
            if isinstance(outcome, DelegationError):
                assert outcome.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
                continue
            for update in outcome:
                _check_update(mapper, update)


def _outcome(call: Any, argument: Any) -> list[TargetUpdate] | DelegationError:
    try:
        updates: list[TargetUpdate] = call(argument)
    except DelegationError as error:
        return error
    return updates


def _check_update(mapper: A2AEventMapper, update: TargetUpdate) -> None:
    assert isinstance(update, TargetUpdate)
    assert update.kind.startswith("subagent.")
    assert update.remote_task_id in (None, mapper.task_id)  # never another task's id
    if update.kind == Kind.ARTIFACT:
        assert update.artifact is not None
        assert update.artifact.uri
        assert update.artifact_bytes >= 0
        assert update.text is None and update.delta is None
    if update.kind == Kind.TEXT_DELTA:
        assert update.delta
        assert update.message_id
    if update.kind == Kind.FAILED:
        assert update.error is not None
        assert len(update.error.message) <= MAX_ERROR_CHARS


# --- holding streamed text (hold_text=True) ------------------------------------------------------


def holding_mapper(**options: Any) -> A2AEventMapper:
    mapper = A2AEventMapper(hold_text=True, **options)
    mapper.feed(on_task(task(S.TASK_STATE_WORKING)))
    mapper.feed(on_artifact("a", Part(text="Hel"), name="response"))
    return mapper


def deltas(updates: list[TargetUpdate]) -> list[tuple[str, str | None]]:
    return [(u.kind, u.delta) for u in updates]


def test_held_chunks_are_released_as_one_delta_with_their_ids() -> None:
    mapper = holding_mapper()
    plain = A2AEventMapper()
    plain.feed(on_task(task(S.TASK_STATE_WORKING)))
    plain.feed(on_artifact("a", Part(text="Hel"), name="response"))
    assert mapper.feed(on_artifact("a", Part(text="lo"), Part(text=","), append=True)) == []
    assert mapper.feed(on_artifact("a", Part(text=" you"), append=True)) == []
    assert mapper.holding
    [released] = mapper.release()
    assert not mapper.holding
    assert mapper.release() == []
    [expected, *_] = plain.feed(on_artifact("a", Part(text="lo"), append=True))
    assert released == attrs.evolve(expected, delta="lo, you")


def test_the_first_chunk_of_an_artifact_and_its_last_chunk_are_not_held() -> None:
    mapper = A2AEventMapper(hold_text=True)
    mapper.feed(on_task(task(S.TASK_STATE_WORKING)))
    assert deltas(mapper.feed(on_artifact("a", Part(text="1"), name="response"))) == [
        (Kind.TEXT_DELTA, "1")
    ]
    assert mapper.feed(on_artifact("a", Part(text="2"), append=True)) == []
    assert deltas(mapper.feed(on_artifact("a", Part(text="3"), append=True, last=True))) == [
        (Kind.TEXT_DELTA, "2"),
        (Kind.TEXT_DELTA, "3"),
        (Kind.TEXT_END, None),
    ]
    assert not mapper.holding


@pytest.mark.parametrize(
    ("item", "after"),
    [
        (on_status(S.TASK_STATE_WORKING, "busy"), [Kind.STATUS]),
        (on_status(S.TASK_STATE_INPUT_REQUIRED, "?"), [Kind.INPUT_REQUIRED]),
        (on_status(S.TASK_STATE_COMPLETED), [Kind.FINISHED]),
        (on_status(S.TASK_STATE_FAILED, "no"), [Kind.FAILED]),
        (on_artifact("f", Part(raw=b"x"), name="f.bin"), [Kind.ARTIFACT]),
        (on_artifact("f", Part(raw=b"x"), append=True), [Kind.ARTIFACT]),
        (on_artifact("b", Part(text="b"), name="response"), [Kind.TEXT_DELTA]),
        (on_artifact("a", Part(text="Hello!"), name="response"), [Kind.TEXT_DELTA]),
        (StreamResponse(message=agent_message("hi")), [Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END]),  # noqa: E501
    ],
)  # fmt: skip
def test_a_non_held_item_after_held_text_comes_after_it(
    item: StreamResponse, after: list[str]
) -> None:
    mapper = holding_mapper()
    assert mapper.feed(on_artifact("a", Part(text="lo"), append=True)) == []
    updates = mapper.feed(item)
    assert [(updates[0].kind, updates[0].message_id, updates[0].delta)] == [
        (Kind.TEXT_DELTA, "a", "lo")
    ]
    assert kinds(updates[1:]) == after
    assert not mapper.holding


def test_text_of_another_artifact_is_not_held_while_one_is() -> None:
    mapper = holding_mapper()
    mapper.feed(on_artifact("b", Part(text="B"), name="response"))
    assert mapper.feed(on_artifact("a", Part(text="lo"), append=True)) == []
    updates = mapper.feed(on_artifact("b", Part(text="C"), append=True))
    assert [(u.message_id, u.delta) for u in updates] == [("a", "lo"), ("b", "C")]
    assert not mapper.holding  # an item that yields updates leaves nothing held


def test_a_snapshot_after_held_text_comes_after_it_and_adds_only_what_is_new() -> None:
    mapper = holding_mapper()
    mapper.feed(on_artifact("a", Part(text="lo"), append=True))
    snapshot = task(
        S.TASK_STATE_COMPLETED,
        artifacts=[Artifact(artifact_id="a", name="response", parts=[Part(text="Hello!")])],
    )
    assert deltas(mapper.snapshot(snapshot)) == [
        (Kind.TEXT_DELTA, "lo"),
        (Kind.TEXT_DELTA, "!"),
        (Kind.FINISHED, None),
    ]


def test_an_item_that_yields_nothing_keeps_the_text_held() -> None:
    mapper = holding_mapper()
    working = on_status(S.TASK_STATE_WORKING, "busy")
    mapper.feed(working)
    mapper.feed(on_artifact("a", Part(text="lo"), append=True))
    assert mapper.feed(working) == []  # a duplicate: nothing to put text in front of
    assert mapper.feed(on_artifact("a", Part(text="!"), append=True, task_id="task-2")) == []
    assert deltas(mapper.release()) == [(Kind.TEXT_DELTA, "lo")]
    assert (mapper.ignored_duplicates, mapper.ignored_foreign) == (1, 1)


def test_a_duplicate_appended_chunk_is_held_once() -> None:
    mapper = holding_mapper()
    newline = on_artifact("a", Part(text="\n"), append=True)
    assert mapper.feed(newline) == []
    assert mapper.feed(newline) == []  # replayed right away: a duplicate, not held again
    assert mapper.feed(on_artifact("a", Part(text="x"), append=True)) == []
    assert mapper.feed(newline) == []  # later: ordinary content
    assert deltas(mapper.release()) == [(Kind.TEXT_DELTA, "\nx\n")]
    assert mapper.ignored_duplicates == 1


def test_a_malformed_item_leaves_held_text_to_release() -> None:
    mapper = holding_mapper()
    mapper.feed(on_artifact("a", Part(text="lo"), append=True))
    with pytest.raises(DelegationError):
        mapper.feed(StreamResponse())
    assert deltas(mapper.release()) == [(Kind.TEXT_DELTA, "lo")]


def test_holding_never_invents_deltas_for_an_agent_that_does_not_stream() -> None:
    mapper = A2AEventMapper(hold_text=True, streaming=False)
    mapper.feed(on_task(task(S.TASK_STATE_WORKING)))
    first = mapper.feed(on_artifact("a", Part(text="Hel"), name="response"))
    more = mapper.feed(on_artifact("a", Part(text="lo"), append=True))
    assert kinds(first + more) == [Kind.ARTIFACT, Kind.ARTIFACT]
    assert not mapper.holding and mapper.release() == []


# --- property: holding only merges adjacent deltas -----------------------------------------------

HOLD_TEXT = st.text(alphabet="xy\n", max_size=3)
HOLD_PART = st.one_of(
    st.builds(lambda t: Part(text=t), st.text(alphabet="xy\n", min_size=1, max_size=3)),
    st.just(Part(text="")),
    st.just(Part(raw=b"z")),
)
#: What the remote does next. Mostly a streamed chunk; the first choices are the simplest.
HOLD_STEPS = ["chunk"] * 6 + [
    "status", "message", "snapshot", "repeat", "release", "resume", "foreign", "malformed",
]  # fmt: skip


@st.composite
def hold_ops(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A remote's traffic as (operation, item) pairs: chunks of text artifacts "a" and "b" and
    of a file "f" (mostly appended, seldom last, mostly distinct), statuses, messages, task
    snapshots, exact repeats of the previous item, foreign and malformed items; and the points
    where the session's release task runs."""
    ops: list[tuple[str, Any]] = []
    for index in range(draw(st.integers(min_value=4, max_value=40))):
        step = draw(st.sampled_from(HOLD_STEPS))
        if step == "chunk":
            artifact_id = draw(st.sampled_from(["a", "b", "f"]))
            parts = draw(st.lists(HOLD_PART, min_size=1, max_size=3))
            if draw(st.booleans()):
                parts.append(Part(text=f"{index}."))  # most chunks differ from the one before
            append = draw(st.sampled_from([True, True, True, False]))
            last = draw(st.sampled_from([False, False, False, True]))
            # The first chunk names the artifact (text or not is decided then); later may not.
            named = not append or draw(st.booleans())
            name = ("f.bin" if artifact_id == "f" else "response") if named else ""
            context = draw(st.sampled_from(["ctx-1", "ctx-1", "ctx-1", ""]))
            event = TaskArtifactUpdateEvent(
                task_id="task-1",
                context_id=context,
                artifact=Artifact(artifact_id=artifact_id, name=name, parts=parts),
                append=append,
                last_chunk=last,
            )
            ops.append(("feed", StreamResponse(artifact_update=event)))
        elif step == "status":
            state = draw(
                st.sampled_from(
                    [S.TASK_STATE_WORKING, S.TASK_STATE_INPUT_REQUIRED, S.TASK_STATE_COMPLETED]
                )
            )
            text = draw(st.sampled_from([None, "busy"]))
            seconds = draw(st.sampled_from([None, 1, 2]))
            ops.append(("feed", on_status(state, text, seconds=seconds)))
        elif step == "message":
            text = draw(HOLD_TEXT)
            message_id = draw(st.sampled_from(["", "m-1", "m-2"]))
            ops.append(("feed", StreamResponse(message=agent_message(text, message_id=message_id))))
        elif step == "snapshot":
            state = draw(st.sampled_from([S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]))
            texts = draw(st.lists(HOLD_TEXT, max_size=3))
            parts = [Part(text=t) for t in texts]
            snap = task(state, artifacts=[Artifact(artifact_id="a", name="response", parts=parts)])
            ops.append(("snapshot", snap))
        elif step == "foreign":
            ops.append(("feed", on_artifact("a", Part(text="x"), append=True, task_id="task-2")))
        elif step == "malformed":
            ops.append(("feed", StreamResponse()))
        else:
            ops.append((step, None))
    return ops


def _merged(updates: list[TargetUpdate]) -> list[TargetUpdate]:
    """`updates` with adjacent text deltas of one message (same ids) joined into one."""
    out: list[TargetUpdate] = []
    for update in updates:
        previous = out[-1] if out else None
        if (
            previous is not None
            and update.kind == previous.kind == Kind.TEXT_DELTA
            and attrs.evolve(update, delta=None) == attrs.evolve(previous, delta=None)
        ):
            out[-1] = attrs.evolve(previous, delta=(previous.delta or "") + (update.delta or ""))
        else:
            out.append(update)
    return out


def _apply(mapper: A2AEventMapper, op: str, value: Any) -> list[TargetUpdate] | str:
    try:
        if op == "feed":
            return mapper.feed(value)
        if op == "snapshot":
            return mapper.snapshot(value)
    except DelegationError as error:
        return error.code
    if op == "resume":
        mapper.resume()
    return []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hold_ops(), st.booleans())
def test_holding_never_changes_the_text_or_the_order_of_other_updates(
    ops: list[tuple[str, Any]], started: bool
) -> None:
    plain = A2AEventMapper()
    held = A2AEventMapper(hold_text=True)
    out_plain: list[TargetUpdate] = []
    out_held: list[TargetUpdate] = []
    previous: Any = on_task(task(S.TASK_STATE_WORKING)) if started else None
    if previous is not None:
        out_plain += plain.feed(previous)
        out_held += held.feed(previous)
    for op, value in ops:
        if op == "release":
            out_held += held.release()  # the release task ran: the plain mapper has no such step
            continue
        if op == "repeat":
            if previous is None:
                continue
            op, value = "feed", previous
        elif op == "feed":
            previous = value
        got_plain = _apply(plain, op, value)
        got_held = _apply(held, op, value)
        if isinstance(got_plain, str) or isinstance(got_held, str):
            assert got_held == got_plain  # the same typed error, from both
            continue
        if got_held:
            assert not held.holding  # held text is never newer than updates still to emit
        out_plain += got_plain
        out_held += got_held
    out_held += held.release()  # the stream ended
    assert _merged(out_held) == _merged(out_plain)
    for name in ("ignored_duplicates", "ignored_foreign", "ignored_stale", "terminal_state"):
        assert getattr(held, name) == getattr(plain, name)
