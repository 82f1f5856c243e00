"""The AG-UI encoder ends a stream at the engine's open questions and opens the one that resumes.

`AguiStreamEncoder.suspend(questions)` ends a stream the AG-UI 1.0 way (every open subagent
SUBAGENT_FINISHED `suspended`, the asker naming its interrupt, RUN_FINISHED with an `interrupt`
outcome) and `resume(run_id)` opens the continuation (RUN_STARTED, the same subagents announced
again); both streams, alone and one after the other, pass the AG-UI checker, and every event is
what `ag-ui-protocol`'s models accept. A fresh encoder fed the same entries and suspended with the
same questions resumes exactly like the one that suspended (what the server does for a resume).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from ag_ui.core import Event, RunFinishedEvent
from pydantic import TypeAdapter

from adapters.agui import AguiStreamEncoder, Rule, check_events
from adapters.agui._encoder import INTERRUPT_EVENT
from engine import JournalEntry, Kind, Question
from tests.helpers.agui_scenarios import RUN, THREAD, delegate_call, nested, parent, result, sub

EXPIRES = 1_796_000_000.0  # 2026-11-30T...Z
SCHEMA = {"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}


def question(qid: str = "del-1-input-5", **fields: Any) -> Question:
    values: dict[str, Any] = {
        "id": qid,
        "run_id": RUN,
        "delegation_id": "del-1",
        "agent_key": "research",
        "agent_name": "Research Agent",
        "text": "Which year?",
        "response_schema": SCHEMA,
        "asked_at": EXPIRES - 300,
        "expires_at": EXPIRES,
        "lineage": ("del-1",),
    }
    values.update(fields)
    return Question(**values)


def asking(q: Question, *, nested_id: str | None = None) -> list[Any]:
    """A delegation that streams, then asks `q` (with a message and a tool call left open)."""
    events = [
        parent(Kind.RUN_STARTED),
        parent(Kind.PARENT_TEXT_START, message_id="p1", role="assistant"),
        parent(Kind.PARENT_TEXT_DELTA, message_id="p1", delta="Delegating."),
        *delegate_call(),
        sub(Kind.STARTED, status="working"),
        sub(Kind.TEXT_START, message_id="m1"),
        sub(Kind.TEXT_DELTA, message_id="m1", delta="Looking..."),
        sub(Kind.TOOL_CALL_START, tool_call_id="t1", tool_name="search"),
    ]
    if nested_id is not None:
        events.append(nested(Kind.NESTED_STARTED, nested_id, name="checker", depth=1))
        events.append(nested(Kind.TEXT_DELTA, nested_id, message_id="n1", delta="Hm."))
    events.append(
        sub(Kind.INPUT_REQUIRED, status="input_required", text=q.text, question=q, sequence=5)
    )
    return events


def continuing(q: Question) -> list[Any]:
    closed = attrs.evolve(q, outcome="answered", surface="agui_resume", closed_at=EXPIRES - 100)
    return [
        sub(Kind.INPUT_CLOSED, status="answered", question=closed, sequence=6),
        sub(Kind.TEXT_DELTA, message_id="m1", delta="Found 1999."),
        sub(Kind.FINISHED, status="completed", text="Checked 1999."),
        result(),
        parent(Kind.RUN_FINISHED),
    ]


def entries(events: list[Any]) -> list[JournalEntry]:
    return [JournalEntry(event, cursor) for cursor, event in enumerate(events, start=1)]


def decoded(frames: list[tuple[int | None, bytes]]) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data in frames]


def feed(encoder: AguiStreamEncoder, journal: list[JournalEntry]) -> list[dict[str, Any]]:
    return decoded(encoder.frames_batch(journal))


def assert_protocol_events(events: list[dict[str, Any]]) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    for event in events:
        adapter.validate_python(event)


def test_an_attributed_stream_ends_at_the_question_and_the_resumed_one_continues_it() -> None:
    q = question()
    first = entries(asking(q))
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    head = feed(encoder, first)
    assert encoder.open_questions == [q]
    custom = [e for e in head if e["type"] == "CUSTOM" and e["name"] == "subagent.input_required"]
    assert custom[0]["value"]["interruptId"] == q.id
    assert custom[0]["value"]["question"]["responseSchema"] == SCHEMA

    tail = decoded(encoder.suspend([q]))
    assert encoder.ended and encoder.suspended
    assert [e["type"] for e in tail] == [
        "TEXT_MESSAGE_END",  # the subagent's message
        "TOOL_CALL_END",  # the subagent's own call
        "SUBAGENT_FINISHED",
        "TEXT_MESSAGE_END",  # the parent's message
        "RUN_FINISHED",
    ]
    assert tail[2] == {
        "type": "SUBAGENT_FINISHED",
        "subagentRunId": "del-1",
        "outcome": {"type": "suspended", "interruptIds": [q.id]},
    }
    finished = tail[-1]
    assert finished["runId"] == RUN and finished["threadId"] == THREAD
    [interrupt] = finished["outcome"]["interrupts"]
    assert interrupt["id"] == q.id
    assert interrupt["reason"] == "input_required"
    assert interrupt["message"] == "Which year?"
    assert interrupt["responseSchema"] == SCHEMA
    assert interrupt["subagentRunId"] == "del-1"
    assert interrupt["expiresAt"].endswith("Z")
    assert interrupt["metadata"]["delegationId"] == "del-1"
    model = RunFinishedEvent.model_validate(finished)
    assert model.outcome is not None and model.outcome.type == "interrupt"
    interrupted = head + tail
    assert check_events(interrupted) == []
    assert_protocol_events(interrupted)
    # Nothing after the suspension until a resume.
    assert feed(encoder, entries(continuing(q))[:1]) == []

    # The resumed stream: a fresh encoder fed the same entries, suspended alike (the server).
    replayed = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    for entry in first:
        replayed.frames(entry)
    assert decoded(replayed.suspend([q])) == tail
    again = decoded(replayed.resume("run-2"))
    assert again == decoded(encoder.resume("run-2"))
    assert again[0] == {"type": "RUN_STARTED", "threadId": THREAD, "runId": "run-2"}
    assert again[1]["type"] == "SUBAGENT_STARTED" and again[1]["subagentRunId"] == "del-1"
    assert again[1]["parentToolCallId"] == "call-1"
    rest = [
        JournalEntry(event, cursor)
        for cursor, event in enumerate(continuing(q), start=len(first) + 1)
    ]
    resumed = again + feed(replayed, rest)
    assert replayed.open_questions == []
    kinds = [e["type"] for e in resumed]
    assert kinds.index("SUBAGENT_FINISHED") < kinds.index("TOOL_CALL_RESULT")
    assert resumed[-1]["type"] == "RUN_FINISHED" and "outcome" not in resumed[-1]
    # A message the subagent kept writing opens again in the new run.
    assert {"type": "TEXT_MESSAGE_START", "messageId": "del-1:m1", "role": "assistant"} | {
        "subagentRunId": "del-1"
    } in resumed
    assert_protocol_events(resumed)
    # Alone, the result answers a call of the run it continues; after the interrupted run,
    # the checker knows that call.
    assert check_events(interrupted + resumed) == []
    alone = check_events(resumed)
    assert [v.rule for v in alone] == [Rule.RESULT_FOR_UNKNOWN_CALL]


def test_a_nested_asker_owns_the_interrupt_and_its_delegation_is_suspended_with_none() -> None:
    q = question(asker="del-1/checker-1", lineage=("del-1", "del-1/checker-1"))
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    head = feed(encoder, entries(asking(q, nested_id="del-1/checker-1")))
    tail = decoded(encoder.suspend([q]))
    finished = [e for e in tail if e["type"] == "SUBAGENT_FINISHED"]
    assert finished == [
        {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": "del-1/checker-1",
            "outcome": {"type": "suspended", "interruptIds": [q.id]},
        },
        {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": "del-1",
            "outcome": {"type": "suspended", "interruptIds": []},
        },
    ]
    assert tail[-1]["outcome"]["interrupts"][0]["subagentRunId"] == "del-1/checker-1"
    assert check_events(head + tail) == []
    again = decoded(encoder.resume("run-2"))
    assert [(e["type"], e.get("subagentRunId")) for e in again] == [
        ("RUN_STARTED", None),
        ("SUBAGENT_STARTED", "del-1"),
        ("SUBAGENT_STARTED", "del-1/checker-1"),
    ]
    assert again[2]["parentSubagentRunId"] == "del-1"


def test_other_open_subagents_end_suspended_without_interrupts() -> None:
    q = question()
    events = asking(q)
    events[4:4] = [
        *delegate_call("call-2", "review"),
        sub(Kind.STARTED, "del-2", "call-2", status="working"),
    ]
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    head = feed(encoder, entries(events))
    tail = decoded(encoder.suspend([q]))
    outcomes = {e["subagentRunId"]: e["outcome"] for e in tail if e["type"] == "SUBAGENT_FINISHED"}
    assert outcomes == {
        "del-1": {"type": "suspended", "interruptIds": [q.id]},
        "del-2": {"type": "suspended", "interruptIds": []},
    }
    assert check_events(head + tail) == []


@pytest.mark.parametrize("mode", ["inline", "hidden"])
def test_inline_and_hidden_streams_end_at_the_question_without_subagents(mode: str) -> None:
    q = question(response_schema={"type": "boolean"})
    encoder = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    head = feed(encoder, entries(asking(q)))
    tail = decoded(encoder.suspend([q]))
    assert not any(e["type"].startswith("SUBAGENT_") for e in head + tail)
    [interrupt] = tail[-1]["outcome"]["interrupts"]
    assert "subagentRunId" not in interrupt
    assert interrupt["reason"] == "confirmation"
    again = decoded(encoder.resume("run-2"))
    assert again == [{"type": "RUN_STARTED", "threadId": THREAD, "runId": "run-2"}]
    rest = entries(asking(q) + continuing(q))[len(asking(q)) :]
    resumed = again + feed(encoder, rest)
    assert check_events(head + tail + resumed) == []


def test_a_custom_stream_carries_the_interrupt_and_stays_open() -> None:
    q = question()
    encoder = AguiStreamEncoder(THREAD, RUN, "custom", strict=True)
    events = feed(encoder, entries(asking(q)))
    [carrier] = [e for e in events if e["type"] == "CUSTOM" and e["name"] == INTERRUPT_EVENT]
    assert carrier["value"]["delegationId"] == "del-1"
    [interrupt] = carrier["value"]["interrupts"]
    assert interrupt["id"] == q.id and interrupt["subagentRunId"] == "del-1"
    with pytest.raises(ValueError, match="stay open"):
        encoder.suspend([q])
    rest = entries(asking(q) + continuing(q))[len(asking(q)) :]
    assert check_events(events + feed(encoder, rest)) == []


def test_nothing_to_suspend_gives_nothing_and_resume_needs_a_suspension() -> None:
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    feed(encoder, entries(asking(question())))
    assert encoder.suspend([]) == []
    with pytest.raises(ValueError, match="suspended"):
        encoder.resume("run-2")


def test_a_closed_or_ended_question_is_no_longer_open() -> None:
    q = question()
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    feed(encoder, entries(asking(q) + continuing(q)[:1]))
    assert encoder.open_questions == []
    other = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    feed(other, entries([*asking(q), sub(Kind.FAILED, status="failed")]))
    assert other.open_questions == []


def test_an_interrupt_naming_a_subagent_that_did_not_suspend_is_a_violation() -> None:
    q = question()
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed", strict=True)
    events = feed(encoder, entries(asking(q))) + decoded(encoder.suspend([q]))
    events[-1]["outcome"]["interrupts"][0]["subagentRunId"] = "del-9"
    rules = {v.rule for v in check_events(events)}
    assert Rule.INTERRUPT_MISMATCH in rules
    events[-1]["outcome"]["interrupts"][0]["subagentRunId"] = "del-1"
    events[-1]["outcome"]["interrupts"][0]["id"] = "other"
    assert {v.rule for v in check_events(events)} == {Rule.INTERRUPT_MISMATCH}
    events[-1]["outcome"]["interrupts"] = [{"id": "i", "reason": "x"}, {"id": "i", "reason": "y"}]
    assert {v.rule for v in check_events(events)} == {Rule.INTERRUPT_MISMATCH}
    del events[-1]["outcome"]["interrupts"][1]
    assert check_events(events) == []
