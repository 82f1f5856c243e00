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
