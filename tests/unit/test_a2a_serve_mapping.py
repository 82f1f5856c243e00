"""The served side's mapping: a parent run's events -> the A2A task's updates (sans-IO)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from a2a.types import StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus
from google.protobuf import json_format

from adapters.a2a import A2AEventMapper
from adapters.a2a._serve_mapping import (
    ASSISTANT_OUTPUT,
    MAX_DATA_BYTES,
    MAX_STATUS_TEXT_CHARS,
    METADATA_KEY,
    A2AUpdate,
    ParentTaskMapper,
)
from engine import DelegationError, DelegationEvent, DropReport, ErrorCode, Kind


def ev(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-1", **fields)


def mapper() -> ParentTaskMapper:
    return ParentTaskMapper("task-1", "ctx-1", clock=lambda: 1_700_000_000.5)


def say(message_id: str, *chunks: str) -> list[DelegationEvent]:
    return [
        ev(Kind.PARENT_TEXT_START, message_id=message_id, role="assistant"),
        *(ev(Kind.PARENT_TEXT_DELTA, message_id=message_id, delta=c) for c in chunks),
        ev(Kind.PARENT_TEXT_END, message_id=message_id),
    ]


def think(message_id: str, *chunks: str) -> list[DelegationEvent]:
    return [
        ev(Kind.PARENT_REASONING_START, message_id=message_id),
        *(ev(Kind.PARENT_REASONING_DELTA, message_id=message_id, delta=c) for c in chunks),
        ev(Kind.PARENT_REASONING_END, message_id=message_id),
    ]


def tool_call(call_id: str, name: str, args: Any, result: Any, **extra: Any) -> list[Any]:
    return [
        ev(Kind.PARENT_TOOL_CALL_START, tool_call_id=call_id, tool_name=name),
        ev(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call_id, args=args),
        ev(Kind.PARENT_TOOL_CALL_END, tool_call_id=call_id),
        ev(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id=call_id, result=result, **extra),
    ]


def whole_run() -> list[DelegationEvent]:
    return [
        ev(Kind.RUN_STARTED),
        *think("th-1", "Plan: ", "look, then answer."),
        *say("msg-1", "Hel", "lo."),
        *tool_call("call-1", "search", {"q": "trio"}, {"hits": 2}),
        *say("msg-2", "Found ", "two."),
        ev(Kind.RUN_FINISHED),
    ]


def described(update: A2AUpdate) -> tuple[Any, ...]:
    """(kind, state or append/last, text, data, metadata kind) of one update."""
    if isinstance(update, TaskArtifactUpdateEvent):
        text = "".join(p.text for p in update.artifact.parts)
        return ("chunk", update.append, update.last_chunk, text)
    status = update.status
    message = status.message if status.HasField("message") else None
    texts = [p.text for p in message.parts if p.HasField("text")] if message else []
    data = (
        [json_format.MessageToDict(p.data) for p in message.parts if p.HasField("data")]
        if (message)
        else []
    )
    meta = json_format.MessageToDict(message.metadata) if message and message.metadata else {}
    return (
        TaskState.Name(status.state),
        "".join(texts) or None,
        data[0] if data else None,
        meta.get(METADATA_KEY, {}).get("kind"),
    )


def artifact_text(updates: list[A2AUpdate]) -> str:
    return "".join(
        p.text for u in updates if isinstance(u, TaskArtifactUpdateEvent) for p in u.artifact.parts
    )


def test_a_whole_run_becomes_statuses_one_text_artifact_and_completed() -> None:
    updates = mapper().feed(whole_run())
    assert [described(u) for u in updates] == [
        ("TASK_STATE_WORKING", None, None, None),
        ("TASK_STATE_WORKING", "Plan: look, then answer.", None, "reasoning"),
        ("chunk", False, False, "Hello."),
        (
            "TASK_STATE_WORKING",
            "Calling search (call-1)",
            {
                "kind": "tool_call",
                "toolCallId": "call-1",
                "toolName": "search",
                "args": {"q": "trio"},
            },
            "tool_call",
        ),
        (
            "TASK_STATE_WORKING",
            "search returned (call-1)",
            {
                "kind": "tool_result",
                "toolCallId": "call-1",
                "toolName": "search",
                "result": {"hits": 2.0},
                "isError": False,
            },
            "tool_result",
        ),
        ("chunk", True, False, "\n\nFound two."),
        ("chunk", True, True, ""),
        ("TASK_STATE_COMPLETED", "Found two.", None, None),
    ]
    for update in updates:
        assert update.task_id == "task-1" and update.context_id == "ctx-1"
        if isinstance(update, TaskArtifactUpdateEvent):
            assert update.artifact.name == ASSISTANT_OUTPUT
            assert update.artifact.artifact_id == "task-1-assistant-output"
        else:
            assert update.status.timestamp.ToNanoseconds() == 1_700_000_000_500_000_000
    ids = [
        u.status.message.message_id for u in updates if not isinstance(u, TaskArtifactUpdateEvent)
    ]
    named = [i for i in ids if i]
    assert len(named) == len(set(named)) == 4


def test_each_delta_fed_alone_is_its_own_chunk_and_the_text_is_the_same() -> None:
    whole = mapper().feed(whole_run())
    one_by_one_mapper = mapper()
    one_by_one: list[A2AUpdate] = []
    for event in whole_run():
        one_by_one.extend(one_by_one_mapper.feed([event]))
    assert artifact_text(one_by_one) == artifact_text(whole) == "Hello.\n\nFound two."
    chunks = [u for u in one_by_one if isinstance(u, TaskArtifactUpdateEvent)]
    assert [c.artifact.parts[0].text for c in chunks] == ["Hel", "lo.", "\n\nFound ", "two.", ""]
    assert [c.append for c in chunks] == [False, True, True, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, False, False, True]
    assert one_by_one_mapper.done and one_by_one_mapper.terminal_state == "completed"


def test_the_run_s_own_final_text_wins_over_the_last_message() -> None:
    updates = mapper().feed([*say("m", "draft"), ev(Kind.RUN_FINISHED, text="Final answer.")])
    assert described(updates[-1]) == ("TASK_STATE_COMPLETED", "Final answer.", None, None)


def test_a_run_with_no_text_completes_without_a_message_or_artifact() -> None:
    updates = mapper().feed([ev(Kind.RUN_STARTED), ev(Kind.RUN_FINISHED)])
    assert [described(u) for u in updates] == [
        ("TASK_STATE_WORKING", None, None, None),
        ("TASK_STATE_COMPLETED", None, None, None),
    ]


def test_a_failed_run_fails_the_task_with_its_reason_after_closing_the_text() -> None:
    error = DelegationError(code=ErrorCode.INTERNAL_ERROR, message="Codex exited with code 1.")
    updates = mapper().feed([*say("m", "partial"), ev(Kind.RUN_FAILED, error=error)])
    assert [described(u) for u in updates] == [
        ("chunk", False, False, "partial"),
        ("chunk", True, True, ""),
        ("TASK_STATE_FAILED", "Codex exited with code 1.", None, None),
    ]


def test_a_cancelled_run_cancels_the_task() -> None:
    m = mapper()
    updates = m.feed([ev(Kind.RUN_STARTED), ev(Kind.RUN_CANCELLED, text="Stopped by CancelTask.")])
    assert described(updates[-1]) == ("TASK_STATE_CANCELED", "Stopped by CancelTask.", None, None)
    assert m.terminal_state == "canceled"


def test_exactly_one_terminal_and_nothing_after_it() -> None:
    m = mapper()
    first = m.feed([ev(Kind.RUN_FINISHED), *say("m", "late"), ev(Kind.RUN_FAILED, text="x")])
    assert [described(u)[0] for u in first] == ["TASK_STATE_COMPLETED"]
    assert m.feed(say("m", "later")) == []
    assert m.conclude("canceled", "too late") == []


def test_conclude_ends_a_task_whose_run_could_not_and_flushes_open_work() -> None:
    m = mapper()
    assert [described(u) for u in m.feed([*say("m", "half")[:2]])] == [
        ("chunk", False, False, "half")
    ]
    m.feed([ev(Kind.PARENT_REASONING_DELTA, message_id="r", delta="still thinking")])
    updates = m.conclude("canceled", "The parent agent is still stopping.")
    assert [described(u) for u in updates] == [
        ("TASK_STATE_WORKING", "still thinking", None, "reasoning"),
        ("chunk", True, True, ""),
        ("TASK_STATE_CANCELED", "The parent agent is still stopping.", None, None),
    ]
    with pytest.raises(ValueError, match="not a terminal state"):
        mapper().conclude("working")


def test_default_reasons_and_the_open_message_as_final_text() -> None:
    assert described(mapper().conclude("failed")[-1])[1] == "The parent agent failed."
    assert described(mapper().conclude("canceled")[-1])[1] == "The task was cancelled."
    m = mapper()
    m.feed(say("m", "kept", " open")[:3])
    assert described(m.conclude("completed")[-1])[1] == "kept open"


def test_streamed_tool_arguments_are_parsed_and_a_result_without_end_publishes_the_call() -> None:
    events = [
        ev(Kind.PARENT_TOOL_CALL_START, tool_call_id="t1", tool_name="mcp__x__delegate"),
        ev(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id="t1", delta='{"agent": '),
        ev(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id="t1", delta='"research"}'),
        ev(
            Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="t1", result="boom", extra={"is_error": True}
        ),
        ev(Kind.PARENT_TOOL_CALL_END, tool_call_id="t1"),  # late: already published
    ]
    updates = mapper().feed(events)
    assert [described(u)[1] for u in updates] == [
        "Calling mcp__x__delegate (t1)",
        "mcp__x__delegate failed (t1)",
    ]
    assert described(updates[0])[2]["args"] == {"agent": "research"}
    assert described(updates[1])[2]["isError"] is True
    unparsable = mapper().feed(
        [
            ev(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id="t2", delta="{not json"),
            ev(Kind.PARENT_TOOL_CALL_END, tool_call_id="t2"),
        ]
    )
    assert described(unparsable[0])[1:3] == (
        "Calling tool (t2)",
        {"kind": "tool_call", "toolCallId": "t2", "toolName": "tool", "args": "{not json"},
    )


def test_large_or_non_json_tool_payloads_are_replaced_by_a_marker() -> None:
    big = {"text": "x" * (MAX_DATA_BYTES * 2)}
    updates = mapper().feed(
        [
            *tool_call("a", "big", big, {"fine": True}),
            *tool_call("b", "odd", object(), float("nan")),
            *tool_call("c" * 1000, "n" * 1000, 10**400, [1, 2]),
        ]
    )
    data = [described(u)[2] for u in updates]
    assert data[0]["args"] == {
        "omitted": "too_large",
        "bytes": len(json.dumps(big, separators=(",", ":"))),
    }
    assert data[1]["result"] == {"fine": True}
    assert data[2]["args"] == {"omitted": "not_json"}
    assert data[3]["result"] == {"omitted": "not_json"}
    assert data[4]["args"] == {"omitted": "not_representable"}
    assert len(data[4]["toolCallId"]) == 256 and len(data[4]["toolName"]) == 256
    for value in data:
        size = len(json.dumps(value, separators=(",", ":")).encode())
        assert size <= MAX_DATA_BYTES


def test_long_reasoning_is_published_in_pieces_of_at_most_the_limit() -> None:
    chunk = "y" * 1000
    count = MAX_STATUS_TEXT_CHARS * 2 // 1000 + 3
    updates = mapper().feed(think("r", *([chunk] * count)))
    texts = [described(u)[1] for u in updates]
    assert all(0 < len(t) <= MAX_STATUS_TEXT_CHARS for t in texts)
    assert "".join(texts) == chunk * count
    assert len(texts) == 3


def test_long_final_text_is_cut_in_the_status_and_whole_in_the_artifact() -> None:
    long = "z" * (MAX_STATUS_TEXT_CHARS + 10)
    updates = mapper().feed([*say("m", long), ev(Kind.RUN_FINISHED)])
    final = described(updates[-1])[1]
    assert len(final) == MAX_STATUS_TEXT_CHARS and final.endswith("…")
    assert artifact_text(updates) == long


def test_lone_surrogates_are_replaced_so_every_update_serializes() -> None:
    updates = mapper().feed(
        [
            *say("m", "a\ud800b"),
            *think("r", "\udfff"),
            *tool_call("t", "x\ud800", {"k\ud800": "v\udc00"}, None),
            ev(Kind.RUN_FAILED, text="bad \ud800"),
        ]
    )
    for update in updates:
        update.SerializeToString()
    assert artifact_text(updates) == "a\ufffdb"
    assert described(updates[-1])[1] == "bad \ufffd"


def test_a_gap_is_announced_and_other_kinds_are_ignored() -> None:
    gap = ev(
        Kind.GAP, dropped=DropReport(reason="replay_gap", count=3, first_cursor=4, last_cursor=6)
    )
    updates = mapper().feed(
        [
            ev(Kind.PARENT_CUSTOM, name="codex.thread.started", raw={"x": 1}),
            ev(Kind.STARTED, delegation_id="d"),
            ev(Kind.TEXT_DELTA, delegation_id="d", message_id="m", delta="nested"),
            ev(Kind.DROPPED),
            ev("future.kind"),
            gap,
        ]
    )
    assert [described(u) for u in updates] == [
        (
            "TASK_STATE_WORKING",
            "Some of the parent agent's events could not be read.",
            {"kind": "stream.gap", "count": 3.0, "firstCursor": 4.0, "lastCursor": 6.0},
            "stream.gap",
        )
    ]


@pytest.mark.parametrize("reading", [float("nan"), -5.0, float("inf"), 1e30])
def test_bad_clock_readings_still_give_valid_timestamps(reading: float) -> None:
    (update,) = ParentTaskMapper("t", "c", clock=lambda: reading).feed([ev(Kind.RUN_STARTED)])
    update.SerializeToString()
    json_format.MessageToDict(update)


def test_what_is_served_is_read_back_by_the_engine_s_own_a2a_client_mapping() -> None:
    """The interoperability check: the updates, as the SDK streams them after the first Task,
    become the subagent events a delegating engine shows, with the same text and outcome."""
    updates = mapper().feed(whole_run())
    client = A2AEventMapper(hold_text=False)
    first = Task(
        id="task-1", context_id="ctx-1", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
    )
    seen = client.feed(StreamResponse(task=first))
    for update in updates:
        if isinstance(update, TaskArtifactUpdateEvent):
            seen += client.feed(StreamResponse(artifact_update=update))
        else:
            seen += client.feed(StreamResponse(status_update=update))
    kinds = [u.kind for u in seen]
    assert kinds[0] == Kind.STARTED and kinds[-1] == Kind.FINISHED
    text = "".join(u.delta or "" for u in seen if u.kind == Kind.TEXT_DELTA)
    assert text == "Hello.\n\nFound two."
    assert seen[-1].text == "Found two."
    statuses = [u for u in seen if u.kind == Kind.STATUS and u.text]
    assert [s.text for s in statuses] == [
        "Plan: look, then answer.",
        "Calling search (call-1)",
        "search returned (call-1)",
    ]
    assert statuses[1].raw == {
        "status_data": [
            {
                "kind": "tool_call",
                "toolCallId": "call-1",
                "toolName": "search",
                "args": {"q": "trio"},
            }
        ]
    }


def test_the_same_text_twice_in_a_row_is_not_mistaken_for_a_duplicate() -> None:
    m = mapper()
    updates = m.feed([ev(Kind.PARENT_TEXT_DELTA, message_id="m", delta="\n")])
    updates += m.feed([ev(Kind.PARENT_TEXT_DELTA, message_id="m", delta="\n")])
    updates += m.feed([ev(Kind.RUN_FINISHED)])
    chunks = [u for u in updates if isinstance(u, TaskArtifactUpdateEvent)]
    numbers = [
        json_format.MessageToDict(c.artifact.metadata)[METADATA_KEY]["chunk"] for c in chunks
    ]
    assert numbers == [1, 2, 3]
    client = A2AEventMapper(hold_text=False)
    first = Task(
        id="task-1", context_id="ctx-1", status=TaskStatus(state=TaskState.TASK_STATE_WORKING)
    )
    seen = client.feed(StreamResponse(task=first))
    for chunk in chunks:
        seen += client.feed(StreamResponse(artifact_update=chunk))
    assert "".join(u.delta or "" for u in seen if u.kind == Kind.TEXT_DELTA) == "\n\n"


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def test_every_key_the_mapper_writes_is_camel_case_as_a2a_json_is() -> None:
    """The A2A TCK (DM-SERIAL-001) flags any key of the form `a_b` in a response: the mapper's
    own metadata key and data-part fields must not be one (the run's tool arguments are the
    parent's, and these have none)."""
    keys = set().union(
        *(_keys(json_format.MessageToDict(update)) for update in mapper().feed(whole_run()))
    )
    assert METADATA_KEY in keys
    assert not {key for key in keys if re.fullmatch(r"[a-z]+(_[a-z]+)+", key)}


def test_the_parent_s_status_line_becomes_a_working_status() -> None:
    retrying = "Reconnecting... waiting for network (Connection failed)"
    updates = mapper().feed(
        [
            *say("m", "Let me look.")[:2],
            ev(Kind.PARENT_CUSTOM, name=Kind.PARENT_STATUS_NAME, raw={"text": retrying}),
            ev(Kind.PARENT_CUSTOM, name=Kind.PARENT_STATUS_NAME, raw={"attempt": 1}),  # no text
            ev(Kind.PARENT_CUSTOM, name=Kind.PARENT_STATUS_NAME, raw=None),
        ]
    )
    assert [described(u) for u in updates] == [
        ("chunk", False, False, "Let me look."),  # the text so far goes first
        ("TASK_STATE_WORKING", retrying, None, "status"),
    ]
