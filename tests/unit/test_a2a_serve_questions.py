"""The served task's side of a question to its requester: `ParentTaskMapper.interrupt` and
`resume` (sans-IO), as `adapters.a2a.serving` calls them around an `ask_requester` call."""

from __future__ import annotations

from typing import Any

from a2a.types import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from google.protobuf import json_format

from adapters.a2a._serve_mapping import METADATA_KEY, ParentTaskMapper
from engine import DelegationEvent, Kind


def ev(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-1", **fields)


def mapper() -> ParentTaskMapper:
    return ParentTaskMapper("task-1", "ctx-1", clock=lambda: 1_700_000_000.5)


def test_a_question_writes_open_text_and_reasoning_first_then_input_required() -> None:
    m = mapper()
    m.feed([ev(Kind.RUN_STARTED)])
    pending = m.feed(
        [
            ev(Kind.PARENT_REASONING_START, message_id="r"),
            ev(Kind.PARENT_REASONING_DELTA, message_id="r", delta="Unsure which format."),
            ev(Kind.PARENT_TEXT_START, message_id="m"),
            ev(Kind.PARENT_TEXT_DELTA, message_id="m", delta="Let me ask."),
        ]
    )
    out = m.interrupt("Which format?")
    assert isinstance(pending[0], TaskArtifactUpdateEvent)  # the text, at the batch's end
    thought, question = out
    assert isinstance(thought, TaskStatusUpdateEvent)
    assert thought.status.message.parts[0].text == "Unsure which format."
    assert isinstance(question, TaskStatusUpdateEvent)
    assert question.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert question.status.message.parts[0].text == "Which format?"
    metadata = json_format.MessageToDict(question.status.message.metadata)
    assert metadata == {METADATA_KEY: {"kind": "question"}}
    assert (question.task_id, question.context_id) == ("task-1", "ctx-1")
    assert not m.done


def test_resume_is_working_again_with_an_optional_note_and_nothing_after_the_end() -> None:
    m = mapper()
    [plain] = m.resume()
    assert plain.status.state == TaskState.TASK_STATE_WORKING  # type: ignore[union-attr]
    assert not plain.status.HasField("message")  # type: ignore[union-attr]
    [noted] = m.resume("No answer came within 5 s.")
    assert noted.status.message.parts[0].text == "No answer came within 5 s."  # type: ignore[union-attr]
    m.conclude("canceled")
    assert m.interrupt("late?") == [] and m.resume("late") == []


class _AskingThread:
    """What `_map_batch` reads of a task's run thread: the question it has open."""

    def __init__(self, open_question: str | None) -> None:
        self.open_question = open_question


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


def _served(question: str | None) -> Any:
    from adapters.a2a.serving import QUESTION_EVENT, _ServedTask

    served = _ServedTask(_AskingThread(question), mapper(), None)  # type: ignore[arg-type]
    return served, QUESTION_EVENT


def test_what_the_run_journals_while_its_question_is_open_waits_for_the_answer() -> None:
    """A CLI may report the tool call it is blocked in only after the call reached us: mapped
    at once, that would turn the waiting task `working` on no request's stream. It is held,
    and comes after the task works again (here, after the wait ended unanswered)."""
    from adapters.a2a.serving import NO_ANSWER_EVENT

    executor = _executor()
    served, question_event = _served("q-1")
    executor._map_batch(served, [ev(Kind.RUN_STARTED)])
    asked = executor._map_batch(
        served, [ev(Kind.PARENT_CUSTOM, name=question_event, message_id="q-1", text="Which?")]
    )
    assert [u.status.state for u in asked] == [TaskState.TASK_STATE_INPUT_REQUIRED]
    meanwhile = [
        ev(Kind.PARENT_TOOL_CALL_START, tool_call_id="c1", tool_name="ask_requester"),
        ev(Kind.PARENT_TOOL_CALL_END, tool_call_id="c1"),
    ]
    assert executor._map_batch(served, meanwhile) == []  # held: the task still waits
    assert served.waiting == "q-1" and served.held == meanwhile
    served.thread.open_question = None
    resumed = executor._map_batch(
        served, [ev(Kind.PARENT_CUSTOM, name=NO_ANSWER_EVENT, message_id="q-1", text="None.")]
    )
    assert resumed[0].status.state == TaskState.TASK_STATE_WORKING
    assert resumed[0].status.message.parts[0].text == "None."
    assert [u.status.message.parts[0].text for u in resumed[1:]] == ["Calling ask_requester (c1)"]
    assert served.waiting is None and served.held == []


def test_a_run_that_ends_while_its_question_is_open_releases_what_it_held_then_ends() -> None:
    executor = _executor()
    served, question_event = _served("q-1")
    executor._map_batch(served, [ev(Kind.RUN_STARTED)])
    executor._map_batch(
        served, [ev(Kind.PARENT_CUSTOM, name=question_event, message_id="q-1", text="Which?")]
    )
    ended = executor._map_batch(
        served,
        [
            ev(Kind.PARENT_TOOL_CALL_START, tool_call_id="c1", tool_name="ask_requester"),
            ev(Kind.PARENT_TOOL_CALL_END, tool_call_id="c1"),
            ev(Kind.RUN_CANCELLED, text="stopped"),
        ],
    )
    assert ended[-1].status.state == TaskState.TASK_STATE_CANCELED
    assert served.mapper.done and served.held == []
