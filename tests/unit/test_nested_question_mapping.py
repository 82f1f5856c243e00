"""Nested questions across the sans-IO mappers and a2a-serve's task bookkeeping (no sockets).

- `ParentTaskMapper.ask` (a2a-serve): a question of one of the run's delegations becomes an
  `input-required` (or `auth-required`) status with its text and its data part.
- `A2AEventMapper` (the engine's A2A client) reads that status back: the update keeps the
  remote's lineage, schema and auth URL; a hostile data part is read for what it is worth.
- `AguiRemoteMapper`: an interrupt of one nested subagent names it (`subagent_id`) and carries
  its `responseSchema`.
- `ParentAgentExecutor._map_batch` / `check_follow_up`: one question at a time, in order; a
  question closed meanwhile is skipped; a follow-up naming another question is refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import Message, Part, Role, StreamResponse, TaskState, TaskStatusUpdateEvent
from a2a.utils.errors import InvalidParamsError
from google.protobuf import json_format, struct_pb2

from adapters.a2a._mapping import A2AEventMapper, answer_metadata
from adapters.a2a._serve_mapping import (
    MAX_QUESTION_DATA_BYTES,
    METADATA_KEY,
    ParentTaskMapper,
    question_data,
)
from adapters.agui import AguiRemoteMapper
from engine import DelegationEvent, Kind, Question, QuestionOutcome, QuestionReason

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}}


def question(qid: str = "d-inner-input-3", **fields: Any) -> Question:
    values: dict[str, Any] = {
        "id": qid,
        "run_id": "run-inner",
        "delegation_id": "d-inner",
        "agent_key": "research",
        "agent_name": "Research",
        "text": "What is your name?",
        "lineage": ("d-inner", "d-inner/planner", "d-inner/deleter"),
        "asker": "d-inner/deleter",
        "response_schema": SCHEMA,
        "asked_at": 1_700_000_000.0,
        "expires_at": 1_700_000_300.0,
    }
    values.update(fields)
    return Question(**values)


def mapper() -> ParentTaskMapper:
    return ParentTaskMapper("task-1", "ctx-1", clock=lambda: 1_700_000_000.5)


def ev(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-inner", **fields)


def data_of(update: Any) -> dict[str, Any]:
    [part] = [p for p in update.status.message.parts if p.WhichOneof("content") == "data"]
    found: dict[str, Any] = json_format.MessageToDict(part.data)
    return found


# -- a2a-serve writes the question ------------------------------------------------------------


def test_a_delegation_question_is_input_required_with_its_text_lineage_and_schema() -> None:
    m = mapper()
    m.feed([ev(Kind.RUN_STARTED)])
    [asked] = m.ask(question())
    assert isinstance(asked, TaskStatusUpdateEvent)
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.parts[0].text == "What is your name?"
    metadata = json_format.MessageToDict(asked.status.message.metadata)
    assert metadata == {METADATA_KEY: {"kind": "question"}}
    assert data_of(asked) == {
        "kind": "question",
        "questionId": "d-inner-input-3",
        "delegationId": "d-inner",
        "agentKey": "research",
        "agentName": "Research",
        "lineage": ["d-inner", "d-inner/planner", "d-inner/deleter"],
        "asker": "d-inner/deleter",
        "reason": "input_required",
        "askedAt": 1_700_000_000.0,
        "expiresAt": 1_700_000_300.0,
        "responseSchema": SCHEMA,
    }


def test_credentials_are_auth_required_a_refusal_says_why_and_nothing_comes_after_the_end() -> None:
    m = mapper()
    auth = question(reason=QuestionReason.AUTH, auth_url="https://id.example/login")
    [asked] = m.ask(auth)
    assert asked.status.state == TaskState.TASK_STATE_AUTH_REQUIRED  # type: ignore[union-attr]
    assert data_of(asked)["authUrl"] == "https://id.example/login"
    [again] = m.ask(question(), refused="The answer does not match: 'yes' is not an object")
    text = again.status.message.parts[0].text  # type: ignore[union-attr]
    assert text.startswith("The answer was not accepted: The answer does not match")
    assert text.endswith("\n\nWhat is your name?")
    m.conclude("canceled")
    assert m.ask(question()) == []


def test_a_schema_too_large_for_the_data_part_is_left_out_and_says_how_large() -> None:
    big = {"type": "object", "description": "x" * MAX_QUESTION_DATA_BYTES}
    data = question_data(question(response_schema=big))
    assert "responseSchema" not in data
    assert data["responseSchemaOmitted"]["bytes"] > MAX_QUESTION_DATA_BYTES
    long_lineage = tuple(f"n{i}" for i in range(100))
    assert question_data(question(lineage=long_lineage))["lineage"] == list(long_lineage[-64:])


# -- the engine's A2A client reads it back ------------------------------------------------------


def _as_remote(update: Any) -> StreamResponse:
    return StreamResponse(status_update=update)


def _client_mapper() -> A2AEventMapper:
    client = A2AEventMapper()
    from a2a.types import Task, TaskStatus

    client.feed(
        StreamResponse(
            task=Task(
                id="task-1",
                context_id="ctx-1",
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
            )
        )
    )
    return client


def test_the_client_keeps_the_remote_lineage_schema_and_question_id() -> None:
    client = _client_mapper()
    [asked] = mapper().ask(question())
    [update] = client.feed(_as_remote(asked))
    assert update.kind == Kind.INPUT_REQUIRED and update.text == "What is your name?"
    assert update.remote_lineage == ("d-inner", "d-inner/planner", "d-inner/deleter")
    assert update.response_schema == SCHEMA and update.auth_url is None
    assert update.raw is not None
    assert update.raw["question"] == {
        "questionId": "d-inner-input-3",
        "delegationId": "d-inner",
        "agentKey": "research",
        "agentName": "Research",
        "asker": "d-inner/deleter",
        "reason": "input_required",
    }
    assert client.remote_question_id == "d-inner-input-3"
    assert answer_metadata(client.remote_question_id) == {
        METADATA_KEY: {"questionId": "d-inner-input-3"}
    }
    assert answer_metadata(None) == {}


def _status_with(data: Any, *, metadata: dict[str, Any] | None = None) -> StreamResponse:
    from a2a.types import TaskStatus

    message = Message(role=Role.ROLE_AGENT, message_id="m-1", task_id="task-1", context_id="ctx-1")
    message.parts.append(Part(text="Which one?"))
    message.parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    message.metadata.update(
        metadata if metadata is not None else {METADATA_KEY: {"kind": "question"}}
    )
    status = TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=message)
    return StreamResponse(
        status_update=TaskStatusUpdateEvent(task_id="task-1", context_id="ctx-1", status=status)
    )


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "question", "lineage": "d-1", "responseSchema": [], "authUrl": "javascript:x"},
        {"kind": "question", "lineage": [1, None, "x" * 300, "ok"], "questionId": 7},
        {"kind": "question", "responseSchema": {"description": "y" * (70 * 1024)}},
    ],
)
def test_a_hostile_question_part_is_read_for_what_it_is_worth(data: dict[str, Any]) -> None:
    [update] = _client_mapper().feed(_status_with(data))
    assert update.kind == Kind.INPUT_REQUIRED and update.text == "Which one?"
    assert update.response_schema is None and update.auth_url is None
    assert update.remote_lineage in ((), ("ok",))


@pytest.mark.parametrize(
    "metadata",
    [{}, {METADATA_KEY: {"kind": "tool_call"}}, {METADATA_KEY: "question"}],
)
def test_a_data_part_without_the_question_kind_in_metadata_is_no_nested_question(
    metadata: dict[str, Any],
) -> None:
    data = {"kind": "question", "lineage": ["d-1"], "responseSchema": SCHEMA}
    [update] = _client_mapper().feed(_status_with(data, metadata=metadata))
    assert update.kind == Kind.INPUT_REQUIRED
    assert update.remote_lineage == () and update.response_schema is None
    assert "question" not in (update.raw or {})


# -- AG-UI: a nested subagent's interrupt -------------------------------------------------------

STARTED = {"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1"}


def _interrupted(*interrupts: dict[str, Any]) -> Any:
    mapper = AguiRemoteMapper()
    out = mapper.feed_event(STARTED)
    finished = {
        "type": "RUN_FINISHED",
        "threadId": "t-1",
        "runId": "r-1",
        "outcome": {"type": "interrupt", "interrupts": list(interrupts)},
    }
    out += mapper.feed_event(finished)
    return out[-1]


def test_an_interrupt_of_one_nested_subagent_names_it_and_carries_its_schema() -> None:
    asked = _interrupted(
        {"id": "i1", "reason": "input", "subagentRunId": "deleter-1", "responseSchema": SCHEMA}
    )
    assert asked.kind == Kind.INPUT_REQUIRED
    assert asked.subagent_id == "deleter-1" and asked.response_schema == SCHEMA


def test_interrupts_of_several_askers_name_none_and_several_interrupts_carry_no_schema() -> None:
    several = _interrupted(
        {"id": "i1", "subagentRunId": "a", "responseSchema": SCHEMA},
        {"id": "i2", "subagentRunId": "b", "responseSchema": SCHEMA},
    )
    assert several.subagent_id is None and several.response_schema is None
    same = _interrupted({"id": "i1", "subagentRunId": "a"}, {"id": "i2", "subagentRunId": "a"})
    assert same.subagent_id == "a"
    mixed = _interrupted({"id": "i1", "subagentRunId": "a"}, {"id": "i2"})
    assert mixed.subagent_id is None
    own = _interrupted({"id": "i1", "responseSchema": "not a schema"})
    assert own.subagent_id is None and own.response_schema is None
    huge = _interrupted({"id": "i1", "responseSchema": {"description": "z" * (65 * 1024)}})
    assert huge.response_schema is None


# -- a2a-serve: one question at a time ----------------------------------------------------------


class _Thread:
    """What `_map_batch` and `check_follow_up` read of a task's run thread."""

    def __init__(self, waits: set[str]) -> None:
        self.open_question: str | None = None
        self.waits = waits

    def waits_for(self, question_id: str) -> bool:
        return question_id in self.waits


def _executor() -> Any:
    from adapters.a2a.serving import ParentAgentExecutor, ServedParent

    def no_engine(_: Any) -> Any:
        raise AssertionError("no engine in a mapping test")

    return ParentAgentExecutor(
        ServedParent(
            name="n",
            description="d",
            label="scripted",
            make_parent=lambda: None,  # type: ignore[arg-type, return-value]
            open_engine=no_engine,
        )
    )


def _served(waits: set[str]) -> Any:
    from adapters.a2a.serving import _ServedTask

    return _ServedTask(_Thread(waits), mapper(), None)  # type: ignore[arg-type]


def states(updates: list[Any]) -> list[str]:
    return [TaskState.Name(u.status.state) for u in updates if hasattr(u, "status")]


def test_two_questions_are_asked_in_order_and_one_closed_meanwhile_is_skipped() -> None:
    executor = _executor()
    first, second, third = question("q-1"), question("q-2"), question("q-3")
    served = _served({"q-1", "q-2", "q-3"})
    executor._map_batch(served, [ev(Kind.RUN_STARTED)])
    asked = executor._map_batch(
        served,
        [
            ev(Kind.INPUT_REQUIRED, question=first),
            ev(Kind.INPUT_REQUIRED, question=second),
            ev(Kind.INPUT_REQUIRED, question=third),
        ],
    )
    assert states(asked) == ["TASK_STATE_INPUT_REQUIRED"]
    assert served.waiting == "q-1" and data_of(asked[0])["questionId"] == "q-1"
    # The second closes elsewhere while the first is asked: it is never asked.
    closed_second = attrs_closed(second, "page", "bob")
    assert executor._map_batch(served, [ev(Kind.INPUT_CLOSED, question=closed_second)]) == []
    # The first closes elsewhere too: working again (saying how), then the third is asked.
    resumed = executor._map_batch(
        served, [ev(Kind.INPUT_CLOSED, question=attrs_closed(first, "http", "ada"))]
    )
    assert states(resumed) == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
    assert resumed[0].status.message.parts[0].text == "The question was answered via http by ada."
    assert data_of(resumed[1])["questionId"] == "q-3"
    assert served.waiting == "q-3" and served.question == third


def attrs_closed(q: Question, surface: str, who: str) -> Question:
    import attrs

    return attrs.evolve(
        q, outcome=QuestionOutcome.ANSWERED, surface=surface, answered_by=who, closed_at=1.0
    )


def test_a_question_the_run_does_not_wait_for_is_not_asked() -> None:
    """An agent whose policy fails or returns on input: its question closes by itself."""
    executor = _executor()
    served = _served(set())
    executor._map_batch(served, [ev(Kind.RUN_STARTED)])
    out = executor._map_batch(served, [ev(Kind.INPUT_REQUIRED, question=question("q-1"))])
    assert out == [] and served.waiting is None


def test_a_follow_up_naming_another_question_or_with_nothing_to_answer_is_refused() -> None:
    executor = _executor()
    served = _served({"q-1"})
    executor._tasks["task-1"] = served
    executor._map_batch(served, [ev(Kind.RUN_STARTED)])
    executor._map_batch(served, [ev(Kind.INPUT_REQUIRED, question=question("q-1"))])

    def message(*parts: Part, named: str | None = None) -> Message:
        msg = Message(role=Role.ROLE_USER, message_id="u-1", task_id="task-1", parts=list(parts))
        msg.metadata.update(answer_metadata(named))
        return msg

    with pytest.raises(InvalidParamsError, match="waits for 'q-1'"):
        executor.check_follow_up("task-1", None, message(Part(text="Ada"), named="q-0"))
    with pytest.raises(InvalidParamsError, match="no text and no data"):
        executor.check_follow_up("task-1", None, message(Part(text=" ")))
    listed = Part(data=json_format.ParseDict([1, 2], struct_pb2.Value()))
    with pytest.raises(InvalidParamsError):
        executor.check_follow_up("task-1", None, message(listed))
    data = Part(data=json_format.ParseDict({"approved": True}, struct_pb2.Value()))
    assert executor.check_follow_up("task-1", "ctx-1", message(data, named="q-1")) == "ctx-1"
    assert executor.check_follow_up("task-1", None, message(Part(text="Ada"))) == "ctx-1"
