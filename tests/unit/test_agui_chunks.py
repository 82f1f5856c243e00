"""Chunk expansion (`adapters.agui._chunks`) against @ag-ui/client 1.0.0's own `transformChunks`,
and the checker judging chunk streams as the client's pipeline does.

The expander is compared event for event, error message for error message and warning for
warning with the real operator (tests/agui_verify/transform_chunks.mjs, on Node): first a table of
hand-written cases whose expected output is also spelled out here, then a hypothesis property
over random sequences of chunks, explicit events and odd values, many sequences per Node call.
The checker's verdict on chunk streams is compared with the client's whole pipeline
(tests/agui_verify/verify.mjs: enforce, transformChunks, verifyEvents).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.agui import ChunkError, ChunkExpander, Rule, StreamChecker, check_events
from tests.helpers.node_packages import ensure_npm_packages, run_node_json_lines

VERIFY_DIR = Path(__file__).resolve().parents[1] / "agui_verify"
NODE_TIMEOUT = 120.0

RS = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
RF = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def text(mid: str | None = None, delta: str | None = None, **extra: Any) -> dict[str, Any]:
    return _chunk("TEXT_MESSAGE_CHUNK", "messageId", mid, delta, extra)


def tool(cid: str | None = None, delta: str | None = None, **extra: Any) -> dict[str, Any]:
    return _chunk("TOOL_CALL_CHUNK", "toolCallId", cid, delta, extra)


def thought(mid: str | None = None, delta: str | None = None, **extra: Any) -> dict[str, Any]:
    return _chunk("REASONING_MESSAGE_CHUNK", "messageId", mid, delta, extra)


def _chunk(
    kind: str, id_key: str, entity_id: str | None, delta: str | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """A chunk; the id and delta are left out when None, `extra` is kept as given."""
    chunk: dict[str, Any] = {"type": kind}
    if entity_id is not None:
        chunk[id_key] = entity_id
    if delta is not None:
        chunk["delta"] = delta
    return {**chunk, **extra}


def sub_start(sid: str) -> dict[str, Any]:
    return {"type": "SUBAGENT_STARTED", "subagentRunId": sid, "name": sid}


def sub_end(sid: str) -> dict[str, Any]:
    return {"type": "SUBAGENT_FINISHED", "subagentRunId": sid}


def expand(events: list[Any]) -> dict[str, Any]:
    """What the expander makes of a sequence, in the Node script's report shape."""
    expander = ChunkExpander()
    out: list[Any] = []
    error = None
    for event in events:
        try:
            out.extend(expander.feed(event))
        except ChunkError as exc:
            error = exc.message
            break
    expander.close()
    return {"events": json.loads(json.dumps(out)), "error": error, "warnings": expander.warnings}


@pytest.fixture(scope="module")
def node() -> str:
    return ensure_npm_packages(VERIFY_DIR)


def client_transform(node: str, sequences: list[list[Any]]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="agui-chunks-") as tmp:
        path = Path(tmp) / "sequences.json"
        path.write_text(json.dumps(sequences))
        reports, _ = run_node_json_lines(
            node, VERIFY_DIR / "transform_chunks.mjs", ["--batch", str(path)], timeout=NODE_TIMEOUT
        )
    assert len(reports) == len(sequences)
    return reports


# --- the expander, case by case ----------------------------------------------------------------

START_M = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
END_M = {"type": "TEXT_MESSAGE_END", "messageId": "m"}


def content(mid: str, delta: str, **extra: Any) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": delta, **extra}


#: (name, input, expected events, expected error or None)
CASES: list[tuple[str, list[Any], list[Any], str | None]] = [
    ("text opens, continues, closes at the terminal",
     [RS, text("m", "a"), text(delta="b"), RF],
     [RS, START_M, content("m", "a"), content("m", "b"), END_M, RF], None),
    ("a new id closes the lane's stream",
     [text("m", "a"), text("n", "b")],
     [START_M, content("m", "a"), END_M,
      {**START_M, "messageId": "n"}, content("n", "b")], None),
    ("another kind in the same lane closes it too",
     [text("m"), tool("c", "{", toolCallName="f", parentMessageId="m")],
     [START_M, END_M,
      {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f", "parentMessageId": "m"},
      {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{"}], None),
    ("reasoning says role reasoning",
     [thought("r", "hm"), RF],
     [{"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
      {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "hm"},
      {"type": "REASONING_MESSAGE_END", "messageId": "r"}, RF], None),
    ("no END when the stream just stops",
     [text("m", "a")], [START_M, content("m", "a")], None),
    ("a first chunk needs an id",
     [text(delta="a")], [], "First TEXT_MESSAGE_CHUNK must have a messageId"),
    ("a first tool chunk needs a name",
     [tool("c")], [], "First TOOL_CALL_CHUNK must have a toolCallName"),
    ("a continuation must agree with its opener",
     [text("m", role="user"), text(delta="x", role="assistant")],
     [{**START_M, "role": "user"}],
     "Cannot continue text message 'm': chunk role 'assistant' does not match the open "
     "stream's role 'user'."),
    ("an absent opener field is spelled so",
     [tool("c", toolCallName="f"), tool(delta="x", parentMessageId="p")],
     [{"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"}],
     "Cannot continue tool call 'c': chunk parentMessageId 'p' does not match the open "
     "stream's parentMessageId (absent)."),
    ("lanes per subagent do not close each other",
     [text("m1", "a", subagentRunId="s1"), text("m2", "b", subagentRunId="s2"),
      text(delta="c", subagentRunId="s1"), sub_end("s1"), RF],
     [{**START_M, "messageId": "m1", "subagentRunId": "s1"}, content("m1", "a", subagentRunId="s1"),
      {**START_M, "messageId": "m2", "subagentRunId": "s2"}, content("m2", "b", subagentRunId="s2"),
      content("m1", "c", subagentRunId="s1"),
      {"type": "TEXT_MESSAGE_END", "messageId": "m1", "subagentRunId": "s1"}, sub_end("s1"),
      {"type": "TEXT_MESSAGE_END", "messageId": "m2", "subagentRunId": "s2"}, RF], None),
    ("an untagged continuation joins the only open stream of its kind",
     [text("m", "a", subagentRunId="s"), text(delta="b")],
     [{**START_M, "subagentRunId": "s"}, content("m", "a", subagentRunId="s"),
      content("m", "b", subagentRunId="s")], None),
    ("two candidates are ambiguous",
     [text("m1", subagentRunId="s1"), text("m2", subagentRunId="s2"), text(delta="x")],
     [{**START_M, "messageId": "m1", "subagentRunId": "s1"},
      {**START_M, "messageId": "m2", "subagentRunId": "s2"}],
     "Ambiguous TEXT_MESSAGE_CHUNK: it carries neither a messageId nor a subagentRunId, but 2 "
     "lanes have an open text message. Attribute the chunk to the subagent it belongs to."),
    ("an id continues in its lane, whatever the tag says",
     [text("m", subagentRunId="s1"), text("m", "x", subagentRunId="s2")],
     [{**START_M, "subagentRunId": "s1"}],
     "Cannot continue text message 'm': chunk subagentRunId 's2' does not match the open "
     "stream's subagent 's1'."),
    ("an explicit event closes its own lane only",
     [text("m", subagentRunId="s"), text("n"), {"type": "CUSTOM", "name": "x", "value": 1}],
     [{**START_M, "subagentRunId": "s"}, {**START_M, "messageId": "n"},
      {"type": "TEXT_MESSAGE_END", "messageId": "n"}, {"type": "CUSTOM", "name": "x", "value": 1}],
     None),
    ("RAW and SUBAGENT_STARTED close nothing",
     [text("m"), {"type": "RAW", "event": 1}, sub_start("s"), text(delta="x")],
     [START_M, {"type": "RAW", "event": 1}, sub_start("s"), content("m", "x")], None),
    ("metadata alone still reaches the reducer",
     [text("m", metadata={"k": 1}), text(metadata={"usage": 2})],
     [{**START_M, "metadata": {"k": 1}},
      {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "", "metadata": {"usage": 2}}],
     None),
    ("rawEvent rides the content event, not the opener",
     [text("m", rawEvent={"p": 1})],
     [START_M, {**content("m", ""), "rawEvent": {"p": 1}}], None),
    ("a null tag is kept for the verifier to reject",
     [text("m", subagentRunId=None), text(subagentRunId=None)],
     [{**START_M, "subagentRunId": None}, content("m", "", subagentRunId=None)], None),
    ("unknown properties ride the content event",
     [text("m", "a", extra=1)], [START_M, content("m", "a", extra=1)], None),
    ("or the opener, which keeps its own role",
     [thought("r", role="wizard", extra=1)],
     [{"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning", "extra": 1}],
     None),
    ("a null event", [RS, None], [RS], "Cannot read properties of null (reading 'type')"),
    ("values that are not events pass", [[1], "x", 3, {"type": 7}],
     [[1], "x", 3, {"type": 7}], None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "expected", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_expander_cases(events: list[Any], expected: list[Any], error: str | None) -> None:
    got = expand(events)
    assert got["events"] == expected
    assert got["error"] == error


@pytest.mark.slow  # starts Node.js
def test_the_cases_are_what_the_client_does(node: str) -> None:
    reports = client_transform(node, [case[1] for case in CASES])
    for (name, events, _, _), report in zip(CASES, reports, strict=True):
        assert expand(events) == report, name


def test_errors_are_typed_and_keep_what_was_closed() -> None:
    expander = ChunkExpander()
    expander.feed(text("m", "a"))
    with pytest.raises(ChunkError) as caught:
        expander.feed(tool("c", "x"))  # closes m, then finds no toolCallName
    assert caught.value.code == "missing_name"
    assert caught.value.partial == [END_M]
    assert expander.pending == []
    with pytest.raises(ChunkError) as caught:
        expander.feed(text(delta="x"))
    assert (caught.value.code, caught.value.partial) == ("missing_id", [])


def test_close_drops_pending_streams_and_emits_nothing() -> None:
    expander = ChunkExpander()
    expander.feed(text("m", "a", subagentRunId="s"))
    expander.feed(tool("c", toolCallName="f"))
    assert expander.pending == [("s", "text", "m"), (expander.pending[1][0], "tool", "c")]
    assert expander.close() is None
    assert expander.pending == []
    assert expander.feed(RF) == [RF]


def test_the_opener_warning_names_the_shadowed_field() -> None:
    expander = ChunkExpander()
    expander.feed(thought("r", role="wizard"))
    [warning] = expander.warnings
    assert "A REASONING_MESSAGE_CHUNK carried 'role'" in warning


# --- the expander against the client, on random sequences ---------------------------------------

_GONE = object()  # a key drawn as this is left out of the event


def _often(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`strategy` four times in five, else the key is absent."""
    return st.one_of(strategy, strategy, strategy, strategy, st.just(_GONE))


def _event(
    types: st.SearchStrategy[Any], **fields: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": types, **fields}).map(
        lambda event: {k: v for k, v in event.items() if v is not _GONE}
    )


_IDS = st.one_of(
    st.sampled_from(["m1", "m2", "m1", "m2", ""]),
    st.sampled_from([1, 1.5, True, None]),
    st.fixed_dictionaries({"o": st.just(1)}),  # a new object per draw: never `===` another
)
_TAGS = st.sampled_from(["s1", "s2", "", None, _GONE, _GONE, _GONE])
_RARE: dict[str, st.SearchStrategy[Any]] = {
    "metadata": st.sampled_from([{"k": 1}, None, 3, *[_GONE] * 5]),
    "rawEvent": st.sampled_from([{"r": 1}, None, "raw", *[_GONE] * 5]),
    "timestamp": st.sampled_from([5, *[_GONE] * 3]),
    "extra": st.sampled_from([0, *[_GONE] * 5]),
    "__proto__": st.sampled_from([{"x": 1}, 2, *[_GONE] * 10]),
}
_DELTAS = st.sampled_from(["a", "", None, _GONE, _GONE])

_TEXT_CHUNKS = _event(
    st.just("TEXT_MESSAGE_CHUNK"),
    messageId=st.one_of(_IDS, st.just(_GONE)),
    subagentRunId=_TAGS,
    delta=_DELTAS,
    role=st.sampled_from(["assistant", "user", None, *[_GONE] * 5]),
    name=st.sampled_from(["n1", "n2", *[_GONE] * 4]),
    **_RARE,
)
_TOOL_CHUNKS = _event(
    st.just("TOOL_CALL_CHUNK"),
    toolCallId=st.one_of(_IDS, st.just(_GONE)),
    subagentRunId=_TAGS,
    delta=_DELTAS,
    toolCallName=_often(st.sampled_from(["f", "g", None])),
    parentMessageId=st.sampled_from(["m1", "p", *[_GONE] * 4]),
    **_RARE,
)
_REASONING_CHUNKS = _event(
    st.just("REASONING_MESSAGE_CHUNK"),
    messageId=st.one_of(_IDS, st.just(_GONE)),
    subagentRunId=_TAGS,
    delta=_DELTAS,
    role=st.sampled_from(["reasoning", "wizard", *[_GONE] * 6]),
    **_RARE,
)
_OTHER_TYPES = [
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "TOOL_CALL_START",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "STATE_DELTA",
    "CUSTOM",
    "STEP_STARTED",
    "REASONING_START",
    "REASONING_MESSAGE_END",
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "MESSAGES_SNAPSHOT",
    "RAW",
    "ACTIVITY_DELTA",
    "REASONING_ENCRYPTED_VALUE",
    "SUBAGENT_STARTED",
    "THINKING_START",
    *["SUBAGENT_FINISHED", "SUBAGENT_ERROR"] * 4,  # they close one lane: worth more draws
]
_OTHERS = _event(
    st.one_of(st.sampled_from(_OTHER_TYPES), st.just(7)),
    subagentRunId=_TAGS,
    messageId=st.sampled_from(["m1", "m2", _GONE]),
)
_ODD = st.sampled_from([None, [1], "TEXT_MESSAGE_CHUNK", 0, False, {}])

_EVENTS = st.one_of(
    *[_TEXT_CHUNKS] * 3, *[_TOOL_CHUNKS] * 2, *[_REASONING_CHUNKS] * 2, *[_OTHERS] * 3, _ODD
)
_SEQUENCES = st.lists(st.lists(_EVENTS, max_size=20), min_size=30, max_size=80)


@pytest.mark.slow  # starts Node.js
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequences=_SEQUENCES)
def test_the_expander_is_the_clients_transform(node: str, sequences: list[list[Any]]) -> None:
    reports = client_transform(node, sequences)
    for sequence, report in zip(sequences, reports, strict=True):
        assert expand(sequence) == report, sequence


# --- the checker on chunk streams ---------------------------------------------------------------

SNAPSHOT = {
    "type": "MESSAGES_SNAPSHOT",
    "messages": [
        {"id": "m", "role": "assistant", "content": "hi", "subagentRunId": "s1",
         "toolCalls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]},
    ],
}  # fmt: skip
RUN_INPUT = {
    "threadId": "t",
    "runId": "r",
    "state": {},
    "messages": SNAPSHOT["messages"],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}
TWO = [sub_start("s1"), sub_start("s2")]
ENDS = [sub_end("s1"), sub_end("s2"), RF]

#: (name, events, (index, rule) the checker reports or None for a valid stream)
CHECKED: list[tuple[str, list[Any], tuple[int, str] | None]] = [
    ("chunks only", [RS, text("m", "Hel"), text(delta="lo"),
                     tool("c", '{"q":', toolCallName="search", parentMessageId="m"),
                     tool(delta="1}"), thought("r", "hm"), RF], None),
    ("chunks of two subagents", [RS, *TWO, text("a", "x", subagentRunId="s1"),
                                 text("b", "y", subagentRunId="s2"),
                                 text(delta="z", subagentRunId="s1"), *ENDS], None),
    ("opener-only tagging", [RS, sub_start("s"), text("m", "x", subagentRunId="s"),
                             text(delta="y"), sub_end("s"), RF], None),
    ("chunks beside explicit events", [RS, text("m", "x"),
                                       {"type": "TEXT_MESSAGE_START", "messageId": "n"},
                                       {"type": "TEXT_MESSAGE_END", "messageId": "n"},
                                       text("m2", "y"), RF], None),
    ("a snapshot, then its owner goes on", [RS, *TWO, SNAPSHOT,
                                            text("m", "more", subagentRunId="s1"), *ENDS], None),
    ("a snapshot replaces a recorded owner",
     [RS, *TWO, {"type": "TEXT_MESSAGE_START", "messageId": "m", "subagentRunId": "s2"},
      {"type": "TEXT_MESSAGE_END", "messageId": "m"}, SNAPSHOT,
      {"type": "TEXT_MESSAGE_START", "messageId": "m", "subagentRunId": "s1"},
      {"type": "TEXT_MESSAGE_END", "messageId": "m"}, *ENDS], None),
    ("a result for a call of the replayed history",
     [RS, SNAPSHOT, {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c",
                     "content": "ok"}, RF], None),
    ("a continuation without an id", [RS, text(delta="x"), RF], (1, Rule.NOT_STARTED)),
    ("a tool chunk without a name", [RS, tool("c", "{}"), RF], (1, Rule.CHUNK_REJECTED)),
    ("a role that changes", [RS, text("m", "x"), text(delta="y", role="user"), RF],
     (2, Rule.CHUNK_REJECTED)),
    ("an id claimed by another lane", [RS, *TWO, text("m", "x", subagentRunId="s1"),
                                       text("m", "y", subagentRunId="s2"), *ENDS],
     (4, Rule.OWNER_MISMATCH)),
    ("an ambiguous continuation", [RS, *TWO, text("a", subagentRunId="s1"),
                                   text("b", subagentRunId="s2"), text(delta="x"), *ENDS],
     (5, Rule.CHUNK_REJECTED)),
    # The explicit START closed the parent's lane (nothing pending), so the chunk opens a new
    # stream for an id that is open already.
    ("a chunk reopening an explicit message",
     [RS, {"type": "TEXT_MESSAGE_START", "messageId": "m"}, text("m", "x"), RF],
     (2, Rule.DUPLICATE_START)),
    ("a chunk after the terminal", [RS, RF, text("m", "x")], (2, Rule.AFTER_TERMINAL)),
    ("a chunk first", [text("m", "x"), RF], (0, Rule.FIRST_EVENT)),
    ("a snapshot's message reopened by another subagent",
     [RS, *TWO, SNAPSHOT, {"type": "TEXT_MESSAGE_START", "messageId": "m", "subagentRunId": "s2"},
      {"type": "TEXT_MESSAGE_END", "messageId": "m"}, *ENDS], (4, Rule.OWNER_MISMATCH)),
    ("a snapshot's message continued by another subagent's chunk",
     [RS, *TWO, SNAPSHOT, text("m", "x", subagentRunId="s2"), *ENDS], (4, Rule.OWNER_MISMATCH)),
    ("a snapshot's tool call reopened by another subagent",
     [RS, *TWO, SNAPSHOT, tool("c", "{}", toolCallName="f", subagentRunId="s2"), *ENDS],
     (4, Rule.OWNER_MISMATCH)),
    ("the run input's message reopened by another subagent",
     [{**RS, "input": RUN_INPUT}, *TWO, text("m", "x", subagentRunId="s2"), *ENDS],
     (3, Rule.OWNER_MISMATCH)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "expected"), [c[1:] for c in CHECKED], ids=[c[0] for c in CHECKED]
)
def test_the_checker_judges_chunk_streams(
    events: list[Any], expected: tuple[int, str] | None
) -> None:
    violations = check_events(events)
    if expected is None:
        assert violations == []
    else:
        assert expected in [(v.index, v.rule) for v in violations], violations
        assert all(v.index < len(events) for v in violations)


@pytest.mark.slow  # starts Node.js
def test_the_checker_agrees_with_the_clients_pipeline(node: str, tmp_path: Path) -> None:
    paths = []
    for i, (_, events, _) in enumerate(CHECKED):
        path = tmp_path / f"{i}.sse"
        path.write_text("".join(f"data: {json.dumps(e)}\n\n" for e in events))
        paths.append(str(path))
    reports, _ = run_node_json_lines(node, VERIFY_DIR / "verify.mjs", paths, timeout=NODE_TIMEOUT)
    for (name, events, expected), report in zip(CHECKED, reports, strict=True):
        assert report["ok"] == (expected is None), (name, report["error"])
        assert (check_events(events) == []) == report["ok"], name


def test_violations_name_the_original_event() -> None:
    checker = StreamChecker()
    assert checker.feed(RS) == []
    assert checker.feed(text("m", "x", subagentRunId="ghost")) != []
    [violation] = checker.feed(RF)  # its synthesized END is tagged too
    assert (violation.index, violation.event_type) == (2, "RUN_FINISHED")
    assert violation.rule == Rule.UNKNOWN_SUBAGENT
    assert "TEXT_MESSAGE_END chunk expansion inserts before this event" in violation.message
    [violation] = check_events([RS, text("m", "x", subagentRunId="ghost"), text(delta="y"), RF])[:1]
    assert (violation.index, violation.event_type) == (1, "TEXT_MESSAGE_CHUNK")
    assert str(violation) == (
        "event #1 (TEXT_MESSAGE_CHUNK): unknown_subagent: subagentRunId 'ghost' names no open "
        "subagent (in the TEXT_MESSAGE_START this chunk expands to)"
    )


def test_a_null_tag_in_a_snapshot_message_is_malformed() -> None:
    snapshot = {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [{"id": "m", "role": "user", "content": "x", "subagentRunId": None}],
    }
    assert [(v.index, v.rule) for v in check_events([RS, snapshot, RF])] == [
        (1, Rule.MALFORMED_EVENT)
    ]
