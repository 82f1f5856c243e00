"""The AG-UI checker and SSE reader: every rule catches its violation, at the right event.

Each case is a small stream that breaks exactly one rule; the checker must report that rule at
that index (and a clean variant must pass, so the case is not failing for another reason).
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.agui import Rule, SseError, StreamChecker, check_events, check_frames, parse_sse

RS = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
RF = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
RE = {"type": "RUN_ERROR", "message": "boom"}


def ts(mid: str = "m", **tag: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant", **tag}


def tc(mid: str = "m", **tag: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": "x", **tag}


def te(mid: str = "m", **tag: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_END", "messageId": mid, **tag}


def call_start(cid: str = "c", **extra: str) -> dict[str, Any]:
    return {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "f", **extra}


def call_end(cid: str = "c", **tag: str) -> dict[str, Any]:
    return {"type": "TOOL_CALL_END", "toolCallId": cid, **tag}


def result(cid: str = "c") -> dict[str, Any]:
    return {"type": "TOOL_CALL_RESULT", "messageId": f"{cid}-r", "toolCallId": cid, "content": "ok"}


def sub_start(sid: str = "s", **extra: str) -> dict[str, Any]:
    return {"type": "SUBAGENT_STARTED", "subagentRunId": sid, "name": "n", **extra}


def sub_end(sid: str = "s") -> dict[str, Any]:
    return {"type": "SUBAGENT_FINISHED", "subagentRunId": sid, "outcome": {"type": "success"}}


def custom(name: str, did: str = "d", **value: Any) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": name, "value": {"delegationId": did, **value}}


def step(kind: str, name: str = "plan", **tag: str) -> dict[str, Any]:
    return {"type": kind, "stepName": name, **tag}


S = {"subagentRunId": "s"}
OTHER = {"subagentRunId": "o"}

CASES: list[tuple[str, list[Any], str, int]] = [
    # Shape.
    ("not an object", [RS, [1], RF], Rule.MALFORMED_EVENT, 1),
    ("unknown type", [RS, {"type": "THINKING_START"}, RF], Rule.MALFORMED_EVENT, 1),
    ("missing field", [RS, {"type": "TEXT_MESSAGE_START"}, RF], Rule.MALFORMED_EVENT, 1),
    ("snake_case", [RS, {"type": "TEXT_MESSAGE_START", "message_id": "m"}, RF],
     Rule.MALFORMED_EVENT, 1),
    ("null field", [RS, {**ts(), "name": None}, te(), RF], Rule.MALFORMED_EVENT, 1),
    ("bad outcome", [RS, sub_start(), {**sub_end(), "outcome": {"type": "cancelled"}}, RF],
     Rule.MALFORMED_EVENT, 2),
    ("run event tagged", [RS, {**RF, **S}], Rule.NOT_ATTRIBUTABLE, 1),
    # Run lifecycle.
    ("first event", [ts(), te(), RF], Rule.FIRST_EVENT, 0),
    ("second run start", [RS, RS, RF], Rule.RUN_ALREADY_STARTED, 1),
    ("after finished", [RS, RF, ts()], Rule.AFTER_TERMINAL, 2),
    ("second terminal", [RS, RF, RE], Rule.AFTER_TERMINAL, 2),
    ("after error", [RS, RE, tc()], Rule.AFTER_TERMINAL, 2),
    ("no terminal", [RS, ts(), te()], Rule.MISSING_TERMINAL, 3),
    ("empty", [], Rule.MISSING_TERMINAL, 0),
    # Start/end discipline.
    ("text twice", [RS, ts(), ts(), te(), RF], Rule.DUPLICATE_START, 2),
    ("content unopened", [RS, tc(), RF], Rule.NOT_STARTED, 1),
    ("end unopened", [RS, ts(), te(), te(), RF], Rule.NOT_STARTED, 3),
    ("call twice", [RS, call_start(), call_start(), call_end(), RF], Rule.DUPLICATE_START, 2),
    ("args unopened", [RS, {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}"}, RF],
     Rule.NOT_STARTED, 1),
    ("step twice", [RS, step("STEP_STARTED"), step("STEP_STARTED"), RF], Rule.DUPLICATE_START, 2),
    ("step unopened", [RS, step("STEP_FINISHED"), RF], Rule.NOT_STARTED, 1),
    ("reasoning unopened", [RS, {"type": "REASONING_END", "messageId": "r"}, RF],
     Rule.NOT_STARTED, 1),
    ("reasoning message unopened",
     [RS, {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "x"}, RF],
     Rule.NOT_STARTED, 1),
    ("subagent twice", [RS, sub_start(), sub_start(), sub_end(), RF], Rule.DUPLICATE_START, 2),
    ("subagent end unopened", [RS, sub_end(), RF], Rule.NOT_STARTED, 1),
    ("subagent reused", [RS, sub_start(), sub_end(), sub_start(), sub_end(), RF],
     Rule.SUBAGENT_REUSED, 3),
    ("parent never started", [RS, sub_start(parentSubagentRunId="p"), sub_end(), RF],
     Rule.PARENT_NOT_OPEN, 1),
    # Nothing open at RUN_FINISHED.
    ("text open", [RS, ts(), RF], Rule.OPEN_AT_FINISH, 2),
    ("call open", [RS, call_start(), RF], Rule.OPEN_AT_FINISH, 2),
    ("step open", [RS, step("STEP_STARTED"), RF], Rule.OPEN_AT_FINISH, 2),
    ("reasoning open", [RS, {"type": "REASONING_START", "messageId": "r"}, RF],
     Rule.OPEN_AT_FINISH, 2),
    ("subagent open", [RS, sub_start(), RF], Rule.OPEN_AT_FINISH, 2),
    ("custom group open", [RS, custom("subagent.started"), RF], Rule.OPEN_AT_FINISH, 2),
    # Owners.
    ("continuation by another", [RS, sub_start(), sub_start("o"), ts(**S), tc(**OTHER), te(**S),
                                 sub_end(), sub_end("o"), RF], Rule.OWNER_MISMATCH, 4),
    ("subagent continues the parent's", [RS, sub_start(), ts(), tc(**S), te(), sub_end(), RF],
     Rule.OWNER_MISMATCH, 3),
    ("re-open by another", [RS, sub_start(), sub_start("o"), ts(**S), te(**S), ts(**OTHER),
                            te(), sub_end(), sub_end("o"), RF], Rule.OWNER_MISMATCH, 5),
    ("call under another's message", [RS, sub_start(), sub_start("o"), ts(**S),
                                      call_start(parentMessageId="m", **OTHER), call_end(),
                                      te(**S), sub_end(), sub_end("o"), RF],
     Rule.OWNER_MISMATCH, 4),
    ("step closed by another", [RS, sub_start(), step("STEP_STARTED", **S), step("STEP_FINISHED"),
                                sub_end(), RF], Rule.OWNER_MISMATCH, 3),
    ("tag names nobody", [RS, ts(**S), te(**S), RF], Rule.UNKNOWN_SUBAGENT, 1),
    ("tag names an ended subagent", [RS, sub_start(), sub_end(), ts(**S), te(), RF],
     Rule.UNKNOWN_SUBAGENT, 3),
    # Tool results.
    ("result unknown", [RS, result(), RF], Rule.RESULT_FOR_UNKNOWN_CALL, 1),
    ("result before end", [RS, call_start(), result(), call_end(), RF],
     Rule.RESULT_BEFORE_CALL_END, 2),
    ("result before subagent end", [RS, call_start(), call_end(), sub_start(parentToolCallId="c"),
                                    result(), sub_end(), RF], Rule.RESULT_BEFORE_SUBAGENT_END, 4),
    ("result before custom group end",
     [RS, call_start(), call_end(), custom("subagent.started", parentToolCallId="c"), result(),
      custom("subagent.finished"), RF], Rule.RESULT_BEFORE_SUBAGENT_END, 4),
    # CUSTOM subagent.* groups.
    ("custom event outside a group", [RS, custom("subagent.text.delta"), RF], Rule.NOT_STARTED, 1),
    ("custom second terminal", [RS, custom("subagent.started"), custom("subagent.finished"),
                                custom("subagent.failed"), RF], Rule.NOT_STARTED, 3),
    ("custom group twice", [RS, custom("subagent.started"), custom("subagent.started"),
                            custom("subagent.finished"), RF], Rule.DUPLICATE_START, 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "rule", "index"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_rule_catches_its_violation(events: list[Any], rule: str, index: int) -> None:
    violations = check_events(events)
    assert (index, rule) in [(v.index, v.rule) for v in violations], violations


VALID: list[tuple[str, list[Any]]] = [
    ("plain", [RS, ts(), tc(), te(), RF]),
    ("error first", [RE]),
    ("agents as tools", [RS, call_start(), call_end(), sub_start(parentToolCallId="c"), ts(**S),
                         tc(**S), te(**S), sub_end(), result(), RF]),
    # Interleaved: both subagents stream at once, each tags its own.
    ("interleaved", [RS, sub_start("a"), sub_start("b"), ts("m1", subagentRunId="a"),
                     ts("m2", subagentRunId="b"), tc("m1", subagentRunId="a"),
                     tc("m2", subagentRunId="b"), te("m1", subagentRunId="a"), sub_end("a"),
                     te("m2", subagentRunId="b"),
                     {"type": "SUBAGENT_ERROR", "subagentRunId": "b", "message": "rate limited"},
                     RF]),
    ("bare continuation", [RS, sub_start(), ts(**S), tc(), te(), sub_end(), RF]),
    ("nested", [RS, sub_start("p"), sub_start("c", parentSubagentRunId="p"), sub_end("c"),
                sub_end("p"), RF]),
    ("same step name, two owners", [RS, sub_start(), step("STEP_STARTED"),
                                    step("STEP_STARTED", **S), step("STEP_FINISHED", **S),
                                    step("STEP_FINISHED"), sub_end(), RF]),
    ("custom group", [RS, call_start(), call_end(),
                      custom("subagent.started", parentToolCallId="c"),
                      custom("subagent.text.delta", delta="x"), custom("subagent.cancelled"),
                      result(), RF]),
    ("a second run", [RS, RF, RS, ts(), te(), RF]),
    ("suspended", [RS, sub_start(), {"type": "SUBAGENT_FINISHED", "subagentRunId": "s",
                                     "outcome": {"type": "suspended", "interruptIds": ["i"]}},
                   RF]),
    ("custom value may be null", [RS, {"type": "CUSTOM", "name": "n", "value": None}, RF]),
]  # fmt: skip


@pytest.mark.parametrize("events", [v[1] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_streams_pass(events: list[Any]) -> None:
    assert check_events(events) == []


def test_ids_must_strictly_increase() -> None:
    frames = [(1, RS), (None, ts()), (3, te()), (3, RF)]
    violations = check_frames(frames)
    assert [(v.index, v.rule) for v in violations] == [(3, Rule.ID_NOT_INCREASING)]
    assert check_frames([(1, RS), (None, ts()), (3, te()), (4, RF)]) == []


def test_checker_is_incremental_and_violations_read_well() -> None:
    checker = StreamChecker()
    assert checker.feed(RS) == []
    [violation] = checker.feed(tc())
    assert str(violation) == (
        "event #1 (TEXT_MESSAGE_CONTENT): not_started: text message 'm' is not open"
    )
    assert [v.rule for v in checker.finish()] == [Rule.MISSING_TERMINAL]


# --- parse_sse ---------------------------------------------------------------------------------


def test_parse_sse_reads_ids_data_and_skips_comments() -> None:
    text = (
        ": keepalive\n\n"
        'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
        'id: 2\ndata: {"type":"CUSTOM",\ndata: "name":"n","value":1}\n\n'
        'event: ignored\ndata: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\nid: 7'
    )
    assert parse_sse(text) == [
        (None, RS),
        (2, {"type": "CUSTOM", "name": "n", "value": 1}),
        (7, RF),
    ]
    assert parse_sse(text.encode()) == parse_sse(text)
    assert parse_sse("") == []


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (b"data: {}\r\n\r\n", 1, "CR line ending"),
        ("data: {}\n\ndata: {}\r\n", 3, "CR line ending"),
        (b"data: \xff\n\n", 0, "not UTF-8"),
        ("id: 1\n\n", 1, "an id without data"),
        ("id: x\ndata: {}\n\n", 1, "is not a cursor"),
        ("id: -1\ndata: {}\n\n", 1, "is not a cursor"),
        ("id: 1\nid: 2\ndata: {}\n\n", 2, "two id lines"),
        ("data: {}\n\ndata: {oops\n\n", 3, "not JSON"),
        ('data: {"x": NaN}\n\n', 1, "not JSON"),
        ("data: [1]\n\n", 1, "not an object"),
        ("data: " + "[" * 100_000 + "\n\n", 1, "not JSON"),
    ],
)
def test_parse_sse_refuses_malformed_input_with_a_line(
    text: str | bytes, line: int, reason: str
) -> None:
    with pytest.raises(SseError) as refused:
        parse_sse(text)
    assert refused.value.line == line
    assert reason in refused.value.reason
