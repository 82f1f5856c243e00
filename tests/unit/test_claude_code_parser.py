"""`ClaudeStreamParser`: Claude Code stream-json lines -> parent events, line by line.

Lines are shaped as Claude Code 2.1.332 writes them (checked against a real transcript: one
`assistant` line per content block, written before that block's `content_block_stop`). Recorded
transcripts under `tests/fixtures/cli/` are parsed too when they are there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.parents import ClaudeStreamParser, ParentEvent
from engine import Kind
from fuzz.fuzz_claude_stream import check_parent_events
from tests.helpers.events import kinds

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
TOOL = "mcp__subagents__delegate_to_agent"


def se(event: dict[str, Any], parent: str | None = None) -> str:
    return json.dumps(
        {"type": "stream_event", "event": event, "session_id": "s", "parent_tool_use_id": parent}
    )


def start(message_id: str) -> str:
    message = {"id": message_id, "type": "message", "role": "assistant", "content": []}
    return se({"type": "message_start", "message": message})


def block_start(index: int, block: dict[str, Any]) -> str:
    return se({"type": "content_block_start", "index": index, "content_block": block})


def delta(index: int, kind: str, **fields: Any) -> str:
    return se({"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}})


def block_stop(index: int) -> str:
    return se({"type": "content_block_stop", "index": index})


def assistant(message_id: str, *blocks: dict[str, Any], parent: str | None = None) -> str:
    message = {"id": message_id, "type": "message", "role": "assistant", "content": list(blocks)}
    return json.dumps(
        {"type": "assistant", "message": message, "parent_tool_use_id": parent, "session_id": "s"}
    )


def tool_result(
    tool_use_id: str, content: Any, structured: Any = None, is_error: bool = False
) -> str:
    line: dict[str, Any] = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {
                    "tool_use_id": tool_use_id,
                    "type": "tool_result",
                    "content": content,
                    "is_error": is_error,
                }
            ],
        },
        "parent_tool_use_id": None,
    }
    if structured is not None:
        line["tool_use_result"] = {"content": content, "structuredContent": structured}
    return json.dumps(line)


def init(status: str = "connected", name: str = "subagents") -> str:
    return json.dumps(
        {
            "type": "system",
            "subtype": "init",
            "session_id": "sess-1",
            "model": "claude-x",
            "tools": ["Bash", TOOL],
            "mcp_servers": [{"name": name, "status": status}],
        }
    )


def result(text: str = "All done.", **more: Any) -> str:
    line = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "num_turns": 2,
        "session_id": "sess-1",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return json.dumps({**line, **more})


def feed(parser: ClaudeStreamParser, *lines: str) -> list[ParentEvent]:
    out: list[ParentEvent] = []
    for line in lines:
        out += parser.feed(line)
    return out


def customs(events: list[ParentEvent]) -> list[str]:
    return [e.fields["name"] for e in events if e.kind == Kind.PARENT_CUSTOM]


# -- streamed messages ---------------------------------------------------------------------------


def streamed_turn() -> list[str]:
    """Thinking, text and a delegate tool call streamed, each block's full line repeated."""
    return [
        start("msg_1"),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, "thinking_delta", thinking="let me "),
        delta(0, "thinking_delta", thinking="think"),
        delta(0, "signature_delta", signature="sig"),
        assistant("msg_1", {"type": "thinking", "thinking": "let me think", "signature": "sig"}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, "text_delta", text="Delegating t"),
        delta(1, "text_delta", text="o research."),
        assistant("msg_1", {"type": "text", "text": "Delegating to research."}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": {}}),
        delta(2, "input_json_delta", partial_json='{"agent": "research", "o'),
        delta(2, "input_json_delta", partial_json='bjective": "find it"}'),
        assistant(
            "msg_1",
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": TOOL,
                "input": {"agent": "research", "objective": "find it"},
            },
        ),
        block_stop(2),
        se({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
        se({"type": "message_stop"}),
    ]


def test_a_streamed_turn_gives_each_block_once_with_the_tool_use_id() -> None:
    parser = ClaudeStreamParser("subagents")
    events = feed(parser, init(), *streamed_turn())
    assert kinds(events) == [
        Kind.PARENT_CUSTOM,
        Kind.PARENT_REASONING_START,
        Kind.PARENT_REASONING_DELTA,
        Kind.PARENT_REASONING_DELTA,
        Kind.PARENT_REASONING_END,
        Kind.PARENT_TEXT_START,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_END,
        Kind.PARENT_TOOL_CALL_START,
        Kind.PARENT_TOOL_CALL_ARGS,
        Kind.PARENT_TOOL_CALL_ARGS,
        Kind.PARENT_TOOL_CALL_END,
    ]
    assert parser.fatal is None
    reasoning, text = events[1].fields["message_id"], events[5].fields["message_id"]
    assert reasoning != text
    assert events[5].fields == {"message_id": text, "role": "assistant"}
    assert "".join(e.fields.get("delta", "") for e in events[6:8]) == "Delegating to research."
    assert events[9].fields == {"tool_call_id": "toolu_1", "tool_name": TOOL}
    args = "".join(e.fields["delta"] for e in events[10:12])
    assert json.loads(args) == {"agent": "research", "objective": "find it"}
    assert all(e.fields.get("tool_call_id") == "toolu_1" for e in events[9:])


def test_tool_result_prefers_the_mcp_structured_content() -> None:
    parser = ClaudeStreamParser()
    feed(parser, *streamed_turn())
    structured = {"delegation_id": "del-1", "status": "completed", "summary": "Found it."}
    events = parser.feed(tool_result("toolu_1", json.dumps(structured), structured))
    assert events == [
        ParentEvent(Kind.PARENT_TOOL_CALL_RESULT, {"tool_call_id": "toolu_1", "result": structured})
    ]
    # A repeated line adds nothing.
    assert parser.feed(tool_result("toolu_1", "again")) == []


def test_tool_result_text_blocks_are_joined_and_errors_marked() -> None:
    parser = ClaudeStreamParser()
    content = [{"type": "text", "text": "Delegation "}, {"type": "text", "text": "refused."}]
    [event] = parser.feed(tool_result("toolu_9", content, is_error=True))
    assert event.fields == {
        "tool_call_id": "toolu_9",
        "result": "Delegation refused.",
        "extra": {"is_error": True},
    }


def test_the_full_line_completes_a_stream_that_missed_a_delta() -> None:
    parser = ClaudeStreamParser()
    events = feed(
        parser,
        start("msg_1"),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, "text_delta", text="Hello"),
        assistant("msg_1", {"type": "text", "text": "Hello world"}),
        block_stop(0),
    )
    deltas = [e.fields["delta"] for e in events if e.kind == Kind.PARENT_TEXT_DELTA]
    assert deltas == ["Hello", " world"]
    assert kinds(events)[-1] == Kind.PARENT_TEXT_END


def test_a_whole_message_line_after_streaming_repeats_nothing() -> None:
    """Older versions wrote one `assistant` line with every block after the stream."""
    parser = ClaudeStreamParser()
    lines = [line for line in streamed_turn() if '"type": "assistant"' not in line]
    whole = assistant(
        "msg_1",
        {"type": "thinking", "thinking": "let me think"},
        {"type": "text", "text": "Delegating to research."},
        {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": {"agent": "research"}},
    )
    events = feed(parser, *lines)
    assert parser.feed(whole) == []
    assert kinds(events).count(Kind.PARENT_TOOL_CALL_START) == 1


def test_parallel_tool_calls_keep_their_own_ids_args_and_results() -> None:
    parser = ClaudeStreamParser()
    events = feed(
        parser,
        start("msg_2"),
        block_start(0, {"type": "tool_use", "id": "toolu_a", "name": TOOL, "input": {}}),
        block_start(1, {"type": "tool_use", "id": "toolu_b", "name": TOOL, "input": {}}),
        delta(0, "input_json_delta", partial_json='{"agent": "research", '),
        delta(1, "input_json_delta", partial_json='{"agent": "review", '),
        delta(1, "input_json_delta", partial_json='"objective": "b"}'),
        delta(0, "input_json_delta", partial_json='"objective": "a"}'),
        block_stop(1),
        block_stop(0),
        se({"type": "message_stop"}),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B done"},
                        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A done"},
                    ],
                },
                # Describes one result only: with two on the line it is not attributed.
                "tool_use_result": {"structuredContent": {"summary": "?"}},
            }
        ),
    )
    args: dict[str, str] = {}
    for event in events:
        if event.kind == Kind.PARENT_TOOL_CALL_ARGS:
            call = event.fields["tool_call_id"]
            args[call] = args.get(call, "") + event.fields["delta"]
    assert json.loads(args["toolu_a"]) == {"agent": "research", "objective": "a"}
    assert json.loads(args["toolu_b"]) == {"agent": "review", "objective": "b"}
    ends = [e.fields["tool_call_id"] for e in events if e.kind == Kind.PARENT_TOOL_CALL_END]
    assert ends == ["toolu_b", "toolu_a"]
    results = [
        (e.fields["tool_call_id"], e.fields["result"])
        for e in events
        if e.kind == Kind.PARENT_TOOL_CALL_RESULT
    ]
    assert results == [("toolu_b", "B done"), ("toolu_a", "A done")]


def test_without_partial_messages_each_block_comes_whole() -> None:
    parser = ClaudeStreamParser()
    events = feed(
        parser,
        assistant("msg_1", {"type": "text", "text": "Hi."}),
        assistant(
            "msg_1", {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": {"agent": "x"}}
        ),
        assistant("msg_1", {"type": "text", "text": "And more."}),
    )
    assert kinds(events) == [
        Kind.PARENT_TEXT_START,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_END,
        Kind.PARENT_TOOL_CALL_START,
        Kind.PARENT_TOOL_CALL_ARGS,
        Kind.PARENT_TOOL_CALL_END,
        Kind.PARENT_TEXT_START,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_END,
    ]
    assert events[4].fields == {"tool_call_id": "toolu_1", "args": {"agent": "x"}}
    assert events[0].fields["message_id"] != events[6].fields["message_id"]


def test_message_ids_stay_unique_across_messages_and_modes() -> None:
    parser = ClaudeStreamParser()
    events = feed(
        parser,
        start("m"),
        block_start(0, {"type": "text", "text": "a"}),
        block_stop(0),
        se({"type": "message_stop"}),
        start("m"),  # a message id seen again (a retried request)
        block_start(0, {"type": "text", "text": "b"}),
        block_stop(0),
        assistant("other", {"type": "text", "text": "c"}),
    )
    ids = [e.fields["message_id"] for e in events if e.kind == Kind.PARENT_TEXT_START]
    assert len(ids) == len(set(ids)) == 3


def test_a_delta_without_its_block_start_opens_the_block() -> None:
    parser = ClaudeStreamParser()
    events = feed(parser, delta(3, "text_delta", text="orphan"), block_stop(3))
    assert kinds(events) == [Kind.PARENT_TEXT_START, Kind.PARENT_TEXT_DELTA, Kind.PARENT_TEXT_END]


def test_unknown_block_types_are_not_mistaken_for_tool_calls() -> None:
    # Found by fuzzing: a block of type "tool" was taken for an (unstarted) tool call.
    parser = ClaudeStreamParser()
    events = feed(parser, start("m"), block_start(0, {"type": "tool"}), block_stop(0))
    events += feed(
        parser, block_start(1, {"type": "image"}), delta(1, "input_json_delta", partial_json="{")
    )
    assert events + parser.close() == []


def test_close_ends_what_a_cut_stream_left_open() -> None:
    parser = ClaudeStreamParser()
    feed(
        parser,
        start("m"),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, "text_delta", text="Hal"),
        block_start(1, {"type": "tool_use", "id": "toolu_x", "name": TOOL, "input": {}}),
    )
    assert parser.close() == [
        ParentEvent(Kind.PARENT_TEXT_END, {"message_id": "m:0"}),
        ParentEvent(Kind.PARENT_TOOL_CALL_END, {"tool_call_id": "toolu_x"}),
    ]
    assert parser.close() == []


def test_a_new_message_closes_the_previous_ones_open_blocks() -> None:
    parser = ClaudeStreamParser()
    events = feed(parser, start("m1"), block_start(0, {"type": "text", "text": "x"}), start("m2"))
    assert kinds(events)[-1] == Kind.PARENT_TEXT_END


# -- system, result, sidechains ----------------------------------------------------------------


def test_init_is_a_custom_event_with_the_mcp_status() -> None:
    parser = ClaudeStreamParser("subagents")
    [event] = parser.feed(init())
    assert event.fields["name"] == "claude.init"
    assert event.fields["raw"]["mcp_servers"] == [{"name": "subagents", "status": "connected"}]
    assert event.fields["raw"]["mcp_tools"] == [TOOL]
    assert parser.session_id == "sess-1"
    assert parser.fatal is None


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (init("failed"), "status 'failed'"),
        (init("needs-auth"), "status 'needs-auth'"),
        (init(name="other"), "not listed"),
    ],
)
def test_the_runs_mcp_server_not_connected_is_fatal(line: str, why: str) -> None:
    parser = ClaudeStreamParser("subagents")
    events = parser.feed(line)
    assert customs(events) == ["claude.init", "claude.warning"]
    assert parser.fatal is not None
    assert why in parser.fatal
    assert "delegate_to_agent" in parser.fatal


def test_a_server_still_connecting_is_only_a_warning() -> None:
    parser = ClaudeStreamParser("subagents")
    assert customs(parser.feed(init("pending"))) == ["claude.init", "claude.warning"]
    assert parser.fatal is None


def test_other_system_lines_are_custom_and_token_estimates_dropped() -> None:
    parser = ClaudeStreamParser()
    status = json.dumps({"type": "system", "subtype": "status", "status": "requesting"})
    tokens = json.dumps({"type": "system", "subtype": "thinking_tokens", "estimated_tokens": 3})
    assert customs(parser.feed(status)) == ["claude.system"]
    assert parser.feed(tokens) == []


def test_the_result_line_gives_the_verdict() -> None:
    parser = ClaudeStreamParser()
    events = parser.feed(result(total_cost_usd=0.1))
    assert customs(events) == ["claude.result"]
    raw = events[0].fields["raw"]
    assert raw["subtype"] == "success"
    assert raw["usage"] == {"input_tokens": 10, "output_tokens": 5}
    verdict = parser.verdict()
    assert verdict.ok
    assert verdict.text == "All done."
    assert verdict.usage == {"input_tokens": 10, "output_tokens": 5}
    assert verdict.session_id == "sess-1"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (result("API Error: 401", is_error=True), "Claude Code ended on an error: API Error: 401"),
        (result("", subtype="error_max_turns"), "Claude Code reached its turn limit"),
        (
            result("", subtype="error_during_execution", is_error=True, errors=["boom"]),
            "Claude Code stopped during execution: boom",
        ),
        (
            result("", subtype="error_new_kind", is_error=True),
            "Claude Code failed (error_new_kind)",
        ),
    ],
)
def test_an_error_result_fails_the_verdict(line: str, expected: str) -> None:
    parser = ClaudeStreamParser()
    parser.feed(line)
    verdict = parser.verdict()
    assert not verdict.ok
    assert verdict.error == expected
    assert "(success)" not in expected


def test_no_result_line_fails_the_verdict() -> None:
    parser = ClaudeStreamParser()
    feed(parser, init(), *streamed_turn())
    verdict = parser.verdict()
    assert not verdict.ok
    assert verdict.error == "Claude Code ended without a result line"


def test_lines_of_claudes_own_subagents_are_sidechain_events() -> None:
    parser = ClaudeStreamParser()
    events = feed(
        parser,
        se({"type": "message_start", "message": {"id": "side"}}, parent="toolu_task"),
        assistant("side", {"type": "text", "text": "inner"}, parent="toolu_task"),
    )
    assert customs(events) == ["claude.sidechain"]
    assert events[0].fields["raw"]["parent_tool_use_id"] == "toolu_task"


# -- what is not stream-json ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json at all", "bad_json"),
        ('{"type": "assistant", "message": {"content": [{"type": "te', "bad_json"),  # truncated
        ("[1, 2, 3]", "not_an_object"),
        ('"just a string"', "not_an_object"),
        ('{"type": "rate_limit_event", "info": {}}', "unknown_type"),
        ('{"no_type": true}', "unknown_type"),
        ('{"type": "stream_event", "event": 7}', "bad_stream_event"),
        (se({"type": "brand_new_event"}), "unknown_stream_event"),
        ("[" * 100_000, "bad_json"),  # deeper than the JSON decoder recurses
    ],
)
def test_what_it_cannot_map_becomes_a_raw_event(line: str, reason: str) -> None:
    parser = ClaudeStreamParser()
    [event] = parser.feed(line)
    assert event.kind == Kind.PARENT_CUSTOM
    assert event.fields["name"] == "claude.raw"
    assert event.fields["raw"]["reason"] == reason
    assert len(event.fields["raw"]["line"]) <= 2000
    assert parser.raw_lines == 1


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        '{"type": "assistant"}',
        '{"type": "assistant", "message": {"content": "plain"}}',
        '{"type": "assistant", "message": {"content": [1, null, {"type": "image"}]}}',
        '{"type": "user", "message": {"content": "the prompt"}}',
        '{"type": "user", "message": {"content": [{"type": "tool_result"}]}}',
        '{"type": "system"}',
        '{"type": "system", "subtype": "init", "mcp_servers": "nope", "tools": 3}',
        '{"type": "result"}',
        se({"type": "content_block_start", "index": "0", "content_block": None}),
        se({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}),
        se({"type": "content_block_stop", "index": 99}),
        se({"type": "message_start", "message": []}),
    ],
)
def test_odd_but_valid_lines_never_raise(line: str) -> None:
    parser = ClaudeStreamParser("subagents")
    parser.feed(line)
    parser.close()
    parser.verdict()


# -- properties ---------------------------------------------------------------------------------

_POOL = [
    init(),
    init("failed"),
    *streamed_turn(),
    start("msg_1"),
    block_start(0, {"type": "text", "text": ""}),
    block_start(1, {"type": "tool_use", "id": "toolu_2", "name": TOOL, "input": {"a": 1}}),
    delta(0, "text_delta", text="x"),
    delta(1, "input_json_delta", partial_json="{"),
    block_stop(0),
    block_stop(1),
    assistant("msg_1", {"type": "text", "text": "zzz"}),
    assistant("msg_3", {"type": "tool_use", "id": "toolu_3", "name": TOOL, "input": {}}),
    tool_result("toolu_1", "ok"),
    tool_result("toolu_2", [{"type": "text", "text": "ok"}], {"s": 1}),
    result(),
    "garbage",
    '{"type": 1}',
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_POOL) | st.text(max_size=40), max_size=30))
def test_any_line_sequence_gives_balanced_events(lines: list[str]) -> None:
    parser = ClaudeStreamParser("subagents")
    events = feed(parser, *lines) + parser.close()
    check_parent_events(events)
    parser.verdict()


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=400), st.data())
def test_truncating_any_line_anywhere_never_raises(cut: int, data: st.DataObject) -> None:
    parser = ClaudeStreamParser("subagents")
    lines = [line[: cut if data.draw(st.booleans()) else None] for line in _POOL]
    check_parent_events(feed(parser, *lines) + parser.close())


# -- recorded transcripts ---------------------------------------------------------------------


def _fixtures(kind: str) -> list[Path]:
    return sorted(FIXTURES.glob(f"*{kind}*.jsonl")) if FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", _fixtures("claude"), ids=lambda p: p.name)
def test_every_line_of_a_recorded_transcript_is_understood(path: Path) -> None:
    parser = ClaudeStreamParser()
    events: list[ParentEvent] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        got = parser.feed(line)
        raw = [e for e in got if e.fields.get("name") == "claude.raw"]
        assert not raw, f"{path.name}:{number}: not understood: {raw[0].fields['raw']}"
        events += got
    events += parser.close()
    check_parent_events(events)
    verdict = parser.verdict()
    assert verdict.ok == ("error" not in path.name and "sigint" not in path.name), verdict
    for kind, fields in events:
        structured = fields.get("result")
        if kind == Kind.PARENT_TOOL_CALL_RESULT and isinstance(structured, dict):
            # The id of the tool_use block is the one the endpoint got in `_meta`.
            assert structured["parent_tool_call_id"] == fields["tool_call_id"]


# -- tool_progress: a call still running ----------------------------------------------------------


def tool_progress(tool_use_id: str, parent: str | None, elapsed: Any = 30, **more: Any) -> str:
    """A `tool_progress` line as Claude Code 2.1.332 writes it (its heartbeat has these fields)."""
    line = {
        "type": "tool_progress",
        "tool_use_id": tool_use_id,
        "tool_name": TOOL,
        "parent_tool_use_id": parent,
        "elapsed_time_seconds": elapsed,
        "session_id": "sess-1",
        "uuid": "5b0e4b0c-0d1f-4f43-9a43-3f1f2b1f9a10",
        **more,
    }
    return json.dumps(line)


def test_a_heartbeat_is_progress_of_its_call_not_a_raw_line() -> None:
    parser = ClaudeStreamParser()
    feed(parser, init(), *streamed_turn())
    events = feed(
        parser,
        tool_progress("toolu_1-heartbeat-0", "toolu_1", 30, heartbeat=True),
        tool_progress("toolu_1-heartbeat-1", "toolu_1", 60, heartbeat=True),
    )
    assert [e.fields["name"] for e in events] == ["tool_call.progress"] * 2
    assert [e.fields["raw"] for e in events] == [
        {"tool_call_id": "toolu_1", "tool_name": TOOL, "elapsed_seconds": s, "heartbeat": True}
        for s in (30, 60)
    ]
    assert parser.raw_lines == 0


def test_a_tools_own_progress_names_the_call_itself() -> None:
    parser = ClaudeStreamParser()
    feed(parser, *streamed_turn())
    [event] = parser.feed(tool_progress("toolu_1", None, 4))
    assert event.fields["raw"] == {
        "tool_call_id": "toolu_1",
        "tool_name": TOOL,
        "elapsed_seconds": 4,
    }


@pytest.mark.parametrize(
    "line",
    [
        tool_progress("toolu_9-heartbeat-0", "toolu_9", heartbeat=True),  # a call never seen
        tool_progress("toolu_x", None),
        json.dumps({"type": "tool_progress"}),
        json.dumps({"type": "tool_progress", "tool_use_id": 7, "parent_tool_use_id": ["x"]}),
    ],
)
def test_progress_of_no_known_call_is_dropped(line: str) -> None:
    parser = ClaudeStreamParser()
    feed(parser, *streamed_turn())
    assert parser.feed(line) == []
    assert parser.raw_lines == 0


def test_progress_after_the_calls_result_is_dropped() -> None:
    parser = ClaudeStreamParser()
    feed(parser, *streamed_turn(), tool_result("toolu_1", "done"))
    assert parser.feed(tool_progress("toolu_1-heartbeat-3", "toolu_1", heartbeat=True)) == []


@pytest.mark.parametrize("elapsed", [-1, 1.5, True, "30", None, 10**12])
def test_an_odd_elapsed_time_is_left_out(elapsed: Any) -> None:
    parser = ClaudeStreamParser()
    feed(parser, *streamed_turn())
    [event] = parser.feed(tool_progress("toolu_1-heartbeat-0", "toolu_1", elapsed))
    assert "elapsed_seconds" not in event.fields["raw"]
