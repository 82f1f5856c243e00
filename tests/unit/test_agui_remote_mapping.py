"""The remote AG-UI -> update mapping (`adapters.agui._remote`): framing, lifecycle, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.agui import AguiRemoteMapper, RemoteSseDecoder
from adapters.agui._remote import MAX_CARRIED_JSON_BYTES
from engine import (
    DelegationError,
    DelegationIdentity,
    DelegationPolicy,
    DelegationState,
    ErrorCode,
    Kind,
    TargetUpdate,
)
from tests.helpers.events import kinds

STARTED = {"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1"}
FINISHED = {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"}


def sse(*events: Any, end: str = "\n") -> bytes:
    return "".join(f"data: {json.dumps(e)}{end}{end}" for e in events).encode()


def mapped(*events: Any) -> tuple[AguiRemoteMapper, list[TargetUpdate]]:
    mapper = AguiRemoteMapper()
    out: list[TargetUpdate] = []
    for event in events:
        out += mapper.feed_event(event)
    return mapper, out


def text(*deltas: str, message_id: str = "m1", **tag: Any) -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant", **tag},
        *(
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": d, **tag}
            for d in deltas
        ),
        {"type": "TEXT_MESSAGE_END", "messageId": message_id, **tag},
    ]


# -- SSE framing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_sse_line_ending_frames_events_even_split_byte_by_byte(end: str) -> None:
    body = ("\ufeff: keep-alive" + end + "id: abc" + end + "event: x" + end).encode() + sse(
        STARTED, {"type": "CUSTOM", "name": "n", "value": 1}, end=end
    )
    decoder = RemoteSseDecoder()
    events = [e for i in range(len(body)) for e in decoder.feed(body[i : i + 1])]
    events += list(decoder.close())
    assert [e["type"] for e in events] == ["RUN_STARTED", "CUSTOM"]


def test_multiline_data_is_joined_and_the_last_frame_needs_no_blank_line() -> None:
    decoder = RemoteSseDecoder()
    events = list(decoder.feed(b'data: {"type":\ndata: "CUSTOM", "name": "a", "value": 1}'))
    assert events == []
    assert list(decoder.close()) == [{"type": "CUSTOM", "name": "a", "value": 1}]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"data: {nope\n\n", "not JSON"),
        (b"data: [1]\n\n", "JSON list"),
        (b'data: {"x": NaN}\n\n', "not JSON"),
        (b'data: {"x": 1e999}\n\n', "not JSON"),
        (b"data: \xff\n\n", "not UTF-8"),
        (b"data: " + b"x" * 200 + b"\n\n", "longer than"),
        (b"x" * 200, "longer than"),
    ],
)
def test_unreadable_frames_are_malformed_payloads(body: bytes, words: str) -> None:
    def read(decoder: RemoteSseDecoder) -> None:
        list(decoder.feed(body))
        list(decoder.close())

    with pytest.raises(DelegationError) as caught:
        read(RemoteSseDecoder(max_frame_bytes=100))
    assert caught.value.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert words in caught.value.message


def test_lone_surrogates_become_replacement_characters() -> None:
    mapper = AguiRemoteMapper()
    updates = mapper.feed(sse(STARTED, *text("a\ud800b")))  # json.dumps escapes it: \\ud800
    assert mapper.error is None
    (delta,) = [u.delta for u in updates if u.kind == Kind.TEXT_DELTA]
    assert delta == "a\ufffdb"
    delta.encode("utf-8")


# -- the mapping ----------------------------------------------------------------------------------


def test_a_run_maps_to_the_subagent_family() -> None:
    mapper, updates = mapped(
        STARTED,
        {"type": "STEP_STARTED", "stepName": "search"},
        *text("Hel", "lo"),
        {"type": "REASONING_START", "messageId": "r"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "hmm"},
        {"type": "REASONING_MESSAGE_END", "messageId": "r"},
        {"type": "REASONING_END", "messageId": "r"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "search"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "res", "content": "ok"},
        {"type": "CUSTOM", "name": "progress", "value": {"p": 1}},
        {"type": "RAW", "event": {"x": 1}, "source": "llm"},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": 1}]},
        {**FINISHED, "result": "all done"},
    )
    assert mapper.error is None and mapper.terminal == "finished"
    assert kinds(updates) == [
        Kind.STARTED,
        Kind.STATUS,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.REASONING_START,
        Kind.REASONING_DELTA,
        Kind.REASONING_END,
        Kind.TOOL_CALL_START,
        Kind.TOOL_CALL_ARGS,
        Kind.TOOL_CALL_END,
        Kind.TOOL_CALL_RESULT,
        Kind.CUSTOM,
        Kind.CUSTOM,
        Kind.CUSTOM,
        Kind.FINISHED,
    ]
    assert {(u.remote_task_id, u.remote_context_id) for u in updates} == {("r-1", "t-1")}
    assert updates[0].status == "working"
    assert updates[-1].text == "all done"
    assert updates[9].tool_name == "search" and updates[12].result == "ok"
    assert [(u.name, (u.raw or {}).get("value")) for u in updates if u.kind == Kind.CUSTOM] == [
        ("progress", {"p": 1}),
        ("agui.raw", {"event": {"x": 1}, "source": "llm"}),
        ("agui.state_delta", {"delta": [{"op": "add", "path": "/a", "value": 1}]}),
    ]


def test_chunks_are_expanded_before_mapping() -> None:
    mapper, updates = mapped(
        STARTED,
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "a"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "b"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "t", "delta": "{}"},
        FINISHED,
    )
    assert mapper.error is None
    assert kinds(updates) == [
        Kind.STARTED,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.TOOL_CALL_START,
        Kind.TOOL_CALL_ARGS,
        Kind.TOOL_CALL_END,
        Kind.FINISHED,
    ]


@pytest.mark.parametrize(
    ("result", "summary"),
    [(None, None), ("", None), ("s", "s"), ({"a": [1]}, '{"a":[1]}'), (3, "3")],
)
def test_the_run_result_is_the_summary(result: Any, summary: str | None) -> None:
    _, updates = mapped(STARTED, {**FINISHED, "result": result})
    assert updates[-1].kind == Kind.FINISHED and updates[-1].text == summary


def test_run_error_is_a_typed_failure_even_before_run_started() -> None:
    _, updates = mapped(STARTED, {"type": "RUN_ERROR", "message": "boom", "code": "E1"})
    error = updates[-1].error
    assert updates[-1].kind == Kind.FAILED and error is not None
    assert (error.code, error.message, error.metadata) == (
        ErrorCode.REMOTE_FAILED,
        "boom",
        {"remote_code": "E1"},
    )
    mapper, updates = mapped({"type": "RUN_ERROR", "message": "bad input"})
    assert mapper.error is None and kinds(updates) == [Kind.FAILED]
    assert updates[0].error is not None and updates[0].error.metadata == {
        "before_run_started": True
    }


def test_a_cancelled_outcome_is_cancelled_and_an_unknown_one_is_success() -> None:
    _, updates = mapped(STARTED, {**FINISHED, "outcome": {"type": "cancelled"}})
    assert kinds(updates)[-1] == Kind.CANCELLED
    _, updates = mapped(STARTED, {**FINISHED, "outcome": {"type": "later"}})
    assert kinds(updates)[-1] == Kind.FINISHED and updates[-1].raw == {
        "runId": "r-1",
        "outcome": "later",
    }


def test_what_is_left_open_is_closed_before_the_terminal() -> None:
    _, updates = mapped(
        STARTED,
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "t"},
        FINISHED,
    )
    assert kinds(updates)[-3:] == [Kind.TOOL_CALL_END, Kind.TEXT_END, Kind.FINISHED]


def test_interrupts_suspend_and_the_resume_run_continues() -> None:
    interrupts = [
        {"id": "a", "reason": "approval", "message": "May I?"},
        {"id": "b", "reason": "input", "subagentRunId": "s"},
    ]
    mapper, updates = mapped(
        STARTED,
        *text("asking"),
        {**FINISHED, "outcome": {"type": "interrupt", "interrupts": interrupts}},
        {"type": "CUSTOM", "name": "late", "value": 1},
    )
    assert mapper.suspended and mapper.error is None and mapper.terminal is None
    asked = updates[-1]
    assert asked.kind == Kind.INPUT_REQUIRED and asked.status == "input_required"
    assert asked.text == "May I?\ninput"
    assert asked.raw is not None and asked.raw["interruptIds"] == ["a", "b"]
    assert mapper.interrupts == interrupts
    assert mapper.ignored["after_end"] == 1
    assert mapper.end() == [] and mapper.error is None  # suspended is not interrupted
    mapper.resume()
    updates = mapper.feed(
        sse({**STARTED, "runId": "r-2"}, *text("ok"), {**FINISHED, "runId": "r-2"})
    )
    assert kinds(updates) == [
        Kind.STATUS,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    assert updates[0].raw == {"runId": "r-2", "threadId": "t-1", "resumedFrom": "r-1"}
    assert {u.remote_task_id for u in updates} == {"r-1"}  # the delegation's task is the first run
    assert mapper.run_ids == ["r-1", "r-2"] and mapper.run_id == "r-2"


def test_remote_subagents_become_the_nested_lifecycle_with_their_attribution() -> None:
    mapper, updates = mapped(
        STARTED,
        {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": "s1",
            "name": "researcher",
            "description": "Finds sources",
            "parentSubagentRunId": "s0",
            "parentToolCallId": "c0",
            "parentMessageId": "pm",
        },
        {"type": "TEXT_MESSAGE_START", "messageId": "x", "subagentRunId": "s1"},
        # A bare continuation: the first writer stays the owner.
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "x", "delta": "hi"},
        {"type": "TEXT_MESSAGE_END", "messageId": "x", "subagentRunId": "s1"},
        {"type": "STEP_STARTED", "stepName": "look", "subagentRunId": "s1"},
        {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": "s1",
            "result": {"n": 1},
            "outcome": {"type": "suspended", "interruptIds": ["i1"]},
        },
        {"type": "SUBAGENT_ERROR", "subagentRunId": "s2", "message": "no", "code": "E"},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s3"},
    )
    assert mapper.error is None
    assert [u.kind for u in updates[1:]] == [
        Kind.NESTED_STARTED,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.STATUS,
        Kind.NESTED_FINISHED,
        Kind.NESTED_FAILED,
        Kind.NESTED_FINISHED,
    ]
    started = updates[1]
    assert (started.subagent_id, started.parent_subagent_id) == ("s1", "s0")
    assert (started.name, started.text) == ("researcher", "Finds sources")
    assert (started.tool_call_id, started.message_id) == ("c0", "pm")
    assert {u.subagent_id for u in updates[2:6]} == {"s1"}
    assert all(u.raw is None or "subagentRunId" not in u.raw for u in updates)
    suspended = updates[6]
    assert (suspended.status, suspended.text) == ("suspended", '{"n":1}')
    assert suspended.raw == {"interruptIds": ["i1"], "result": {"n": 1}}
    failed = updates[7]
    assert failed.subagent_id == "s2" and failed.error is not None
    assert failed.error.message == "no" and failed.error.metadata == {"remote_code": "E"}
    assert (updates[8].subagent_id, updates[8].status) == ("s3", "completed")
    assert mapper.remote_subagents["s1"]["name"] == "researcher"


def test_messages_closed_by_the_run_end_keep_their_owner() -> None:
    _, updates = mapped(
        STARTED,
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "x", "subagentRunId": "s1"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "t", "subagentRunId": "s1"},
        {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"},
    )
    closes = [u for u in updates if u.kind in (Kind.TEXT_END, Kind.TOOL_CALL_END)]
    assert [(u.kind, u.subagent_id) for u in closes] == [
        (Kind.TOOL_CALL_END, "s1"),
        (Kind.TEXT_END, "s1"),
    ]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "SUBAGENT_STARTED", "name": "r"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s", "name": "r", "parentSubagentRunId": 3},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s", "outcome": "done"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "subagentRunId": ""},
    ],
)
def test_malformed_subagent_fields_are_malformed(event: dict[str, Any]) -> None:
    mapper, _ = mapped(STARTED, event)
    assert mapper.error is not None
    assert mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD


def test_large_payloads_are_replaced_by_a_marker() -> None:
    big = "x" * (MAX_CARRIED_JSON_BYTES + 1)
    _, updates = mapped(STARTED, {"type": "CUSTOM", "name": "n", "value": big})
    assert updates[-1].raw == {"value": {"omitted": "too_large", "bytes": len(big) + 2}}


def test_unknown_types_and_silent_ones_are_counted_not_shown() -> None:
    mapper, updates = mapped(
        STARTED,
        {"type": "FUTURE_EVENT"},
        {
            "type": "REASONING_ENCRYPTED_VALUE",
            "subtype": "message",
            "entityId": "m",
            "encryptedValue": "zzz",
        },
    )
    assert kinds(updates) == [Kind.STARTED] and mapper.error is None
    assert mapper.ignored["unknown_type"] == 1
    assert mapper.ignored["reasoning_encrypted_value"] == 1


# -- malformed streams ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "words"),
    [
        ([{"type": "TEXT_MESSAGE_START", "messageId": "m"}], "before RUN_STARTED"),
        ([{"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "x"}], "before RUN_STARTED"),
        (
            [STARTED, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}],
            "never started",
        ),
        ([STARTED, {"type": "TEXT_MESSAGE_END", "messageId": "m"}], "never started"),
        ([STARTED, {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "x"}], "never started"),
        ([STARTED, *text("x")[:2], *text("y")[:1]], "already open"),
        (
            [
                STARTED,
                {"type": "REASONING_MESSAGE_START", "messageId": "m"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"},
            ],
            "never started",
        ),
        ([STARTED, {**STARTED, "runId": "r-2"}], "second RUN_STARTED"),
        ([{"type": "RUN_STARTED", "threadId": "t"}], "without a string runId"),
        ([STARTED, {"type": "TEXT_MESSAGE_START", "messageId": 7}], "without a string messageId"),
        ([STARTED, {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "tool"}], "role"),
        ([STARTED, {"type": "TEXT_MESSAGE_CHUNK", "delta": "x"}], "must have a messageId"),
        ([STARTED, {"type": "CUSTOM", "name": "n"}], "without a value"),
        (
            [STARTED, {"type": "CUSTOM", "value": 1, "name": "n", "subagentRunId": 3}],
            "subagentRunId",
        ),
        (
            [STARTED, {**FINISHED, "outcome": {"type": "interrupt", "interrupts": []}}],
            "without interrupts",
        ),
        (
            [
                STARTED,
                {
                    **FINISHED,
                    "outcome": {"type": "interrupt", "interrupts": [{"id": "a"}, {"id": "a"}]},
                },
            ],
            "named twice",
        ),
        ([STARTED, {**FINISHED, "outcome": "interrupt"}], "outcome"),
        ([STARTED, {"type": 5}], "no string `type`"),
        ([STARTED, [1]], "not an object"),
    ],
)
def test_malformed_streams_set_a_typed_error_and_stop(events: list[Any], words: str) -> None:
    mapper, updates = mapped(*events, FINISHED)
    assert mapper.error is not None, updates
    assert mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert words in mapper.error.message
    assert Kind.FINISHED not in kinds(updates)  # nothing after the error
    assert mapper.feed(sse(FINISHED)) == [] and mapper.end() == []


def test_updates_before_a_bad_frame_are_returned_with_the_error() -> None:
    mapper = AguiRemoteMapper()
    updates = mapper.feed(sse(STARTED, *text("kept")) + b"data: {bad\n\n" + sse(FINISHED))
    assert kinds(updates) == [Kind.STARTED, Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END]
    assert mapper.error is not None and mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD


@pytest.mark.parametrize(
    ("events", "words"),
    [([], "before RUN_STARTED"), ([STARTED, *text("x")], "before the run ended")],
)
def test_a_stream_that_ends_without_a_terminal_is_interrupted(
    events: list[Any], words: str
) -> None:
    mapper = AguiRemoteMapper()
    mapper.feed(sse(*events))
    assert mapper.end() == []
    assert mapper.error is not None and mapper.error.code == ErrorCode.STREAM_INTERRUPTED
    assert words in mapper.error.message


def test_nothing_after_the_terminal() -> None:
    mapper, updates = mapped(
        STARTED, FINISHED, *text("late"), {"type": "RUN_ERROR", "message": "x"}
    )
    assert kinds(updates) == [Kind.STARTED, Kind.FINISHED]
    assert mapper.end() == [] and mapper.error is None


# -- the property ---------------------------------------------------------------------------------

IDS = st.sampled_from(["m1", "m2", "c1", "", None, 7])
TAGS = st.sampled_from([None, "s1", "s2", 3])
TYPES = st.sampled_from(
    [
        "RUN_STARTED",
        "RUN_FINISHED",
        "RUN_ERROR",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TEXT_MESSAGE_CHUNK",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_MESSAGE_CHUNK",
        "REASONING_START",
        "REASONING_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_CHUNK",
        "TOOL_CALL_RESULT",
        "STEP_STARTED",
        "STEP_FINISHED",
        "CUSTOM",
        "RAW",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "MESSAGES_SNAPSHOT",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
        "UNKNOWN",
    ]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
OUTCOMES = st.sampled_from(
    [
        None,
        {"type": "success"},
        {"type": "cancelled"},
        {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "r"}]},
        {"type": "interrupt", "interrupts": []},
        "x",
    ]
)


@st.composite
def events(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(JSON)
    event: dict[str, Any] = {"type": draw(TYPES)}
    for key in ("messageId", "toolCallId"):
        value = draw(IDS)
        if value is not None:
            event[key] = value
    tag = draw(TAGS)
    if tag is not None:
        event["subagentRunId"] = tag
    fields: list[tuple[str, st.SearchStrategy[Any]]] = [
        ("delta", st.sampled_from(["a", "", None, 1])),
        ("threadId", st.sampled_from(["t", None])),
        ("runId", st.sampled_from(["r1", "r2", None])),
        ("toolCallName", st.sampled_from(["f", None])),
        ("name", st.sampled_from(["n", None])),
        ("stepName", st.sampled_from(["s", None])),
        ("role", st.sampled_from(["assistant", "user", "tool", None])),
        ("content", st.sampled_from(["c", None, []])),
        ("message", st.sampled_from(["boom", None])),
    ]
    for key, strategy in fields:
        value = draw(strategy)
        if value is not None:
            event[key] = value
    if draw(st.booleans()):
        event["value"] = draw(JSON)
    outcome = draw(OUTCOMES)
    if outcome is not None and event["type"] == "RUN_FINISHED":
        event["outcome"] = outcome
    return event


IDENTITY = DelegationIdentity(
    run_id="run", delegation_id="del", agent_key="a", agent_name="A", protocol="agui"
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), max_size=25), st.booleans(), st.integers(1, 40))
def test_any_event_sequence_maps_without_raising_and_with_at_most_one_terminal(
    sequence: list[Any], resume: bool, split: int
) -> None:
    body = b"".join(sse(e) for e in sequence)
    whole = AguiRemoteMapper()
    pieces = AguiRemoteMapper()
    one_by_one = whole.feed(body) + whole.end()
    split_up: list[TargetUpdate] = []
    for i in range(0, len(body), split):
        split_up += pieces.feed(body[i : i + split])
    split_up += pieces.end()
    assert one_by_one == split_up  # framing does not depend on how the body was cut
    assert whole.error == pieces.error
    updates = one_by_one
    if resume and whole.suspended:
        whole.resume()
        updates += whole.feed(body) + whole.end()
    terminals = [u for u in updates if u.kind in Kind.DELEGATION_TERMINALS]
    assert len(terminals) <= 1
    if terminals:
        assert updates[-1] is terminals[0]  # nothing after the terminal
    assert all(isinstance(u, TargetUpdate) and u.kind.startswith("subagent.") for u in updates)
    if whole.error is not None:
        assert whole.error.code in (
            ErrorCode.MALFORMED_REMOTE_PAYLOAD,
            ErrorCode.STREAM_INTERRUPTED,
        )
        assert not terminals
    # The engine's own state machine takes every update.
    state = DelegationState(IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    for update in updates:
        state.feed(update)
        if update.kind == Kind.INPUT_REQUIRED:
            state.resume()
    if terminals:
        assert state.terminal
