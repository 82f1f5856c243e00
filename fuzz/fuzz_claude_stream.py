"""Fuzz harness: Claude Code's stream-json output, `adapters.parents.ClaudeStreamParser`.

Any bytes go in, split into lines as the CLI driver splits stdout. Nothing may raise: not
`feed()`, `close()` nor `verdict()`. What comes out must be the run's parent events and well
formed (`check_parent_events`): one start per message and tool call, deltas and arguments only
while open, one end, at most one result per call and never while its arguments are still open,
nothing open after `close()`, custom events named, every field JSON-encodable (the journal and
the wire encode them), raw lines clipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from adapters.parents._claude_code import ClaudeStreamParser
    from adapters.parents._process import RAW_CLIP_CHARS, ParentEvent
    from engine._events import Kind

__all__ = ["DICTIONARY", "SEEDS", "check_parent_events", "fuzz_one_input", "lines_of"]

_TOOL: Final = "mcp__subagents__delegate_to_agent"
_STARTS: Final = {
    Kind.PARENT_TEXT_START: Kind.PARENT_TEXT_END,
    Kind.PARENT_REASONING_START: Kind.PARENT_REASONING_END,
}
_ENDS: Final = {end: start for start, end in _STARTS.items()}
_DELTAS: Final = {
    Kind.PARENT_TEXT_DELTA: Kind.PARENT_TEXT_START,
    Kind.PARENT_REASONING_DELTA: Kind.PARENT_REASONING_START,
}


def check_parent_events(events: Sequence[ParentEvent]) -> None:
    """Raise AssertionError unless `events` (a whole output, closed) are well formed."""
    state: dict[tuple[str, str], str] = {}
    for kind, fields in events:
        json.dumps(fields)  # the journal and the wire encode every field
        if kind in _STARTS:
            key = (kind, fields["message_id"])
            assert key not in state, f"{key} started twice"
            state[key] = "open"
        elif kind in _ENDS:
            key = (_ENDS[kind], fields["message_id"])
            assert state.get(key) == "open", f"{key} ended while not open"
            state[key] = "closed"
        elif kind in _DELTAS:
            key = (_DELTAS[kind], fields["message_id"])
            assert state.get(key) == "open", f"delta for {key} while not open"
            assert isinstance(fields["delta"], str) and fields["delta"], "empty delta"
        elif kind == Kind.PARENT_TOOL_CALL_START:
            key = ("tool", fields["tool_call_id"])
            assert key not in state, f"tool call {key} started twice"
            assert isinstance(fields["tool_name"], str) and fields["tool_name"]
            state[key] = "open"
        elif kind == Kind.PARENT_TOOL_CALL_ARGS:
            key = ("tool", fields["tool_call_id"])
            assert state.get(key) == "open", f"arguments for {key} while not open"
        elif kind == Kind.PARENT_TOOL_CALL_END:
            key = ("tool", fields["tool_call_id"])
            assert state.get(key) == "open", f"{key} ended while not open"
            state[key] = "closed"
        elif kind == Kind.PARENT_TOOL_CALL_RESULT:
            key = ("result", fields["tool_call_id"])
            assert key not in state, f"two results for {key}"
            assert state.get(("tool", fields["tool_call_id"])) != "open", "result before end"
            state[key] = "done"
        else:
            assert kind == Kind.PARENT_CUSTOM, f"not a parent event kind: {kind!r}"
            assert isinstance(fields["name"], str) and fields["name"]
            if fields["name"].endswith(".raw"):
                assert len(fields["raw"]["line"]) <= RAW_CLIP_CHARS, "raw line not clipped"
            elif fields["name"] == "tool_call.progress":
                call = fields["raw"]["tool_call_id"]
                assert ("tool", call) in state, f"progress of {call!r}, a call never started"
                assert ("result", call) not in state, f"progress of {call!r} after its result"
    open_things = [key for key, value in state.items() if value == "open"]
    assert not open_things, f"left open after close(): {open_things}"


def lines_of(data: bytes) -> list[str]:
    """Stdout bytes as the driver gives them to a parser (lines, without newlines)."""
    return [line.decode("utf-8", errors="replace") for line in data.split(b"\n")]


def _line(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def _se(event: dict[str, Any]) -> str:
    return _line("stream_event", event=event, parent_tool_use_id=None)


_TURN: Final = [
    _line(
        "system",
        subtype="init",
        session_id="s",
        tools=[_TOOL],
        mcp_servers=[{"name": "subagents", "status": "connected"}],
    ),
    _se({"type": "message_start", "message": {"id": "msg_1", "content": []}}),
    _se({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}}),
    _se(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        }
    ),
    _se({"type": "content_block_stop", "index": 0}),
    _se({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    _se({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
    _line("assistant", message={"id": "msg_1", "content": [{"type": "text", "text": "Hi"}]}),
    _se({"type": "content_block_stop", "index": 1}),
    _se(
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": _TOOL, "input": {}},
        }
    ),
    _se(
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"agent":"a"}'},
        }
    ),
    _se({"type": "content_block_stop", "index": 2}),
    _se({"type": "message_stop"}),
    _line(
        "tool_progress",
        tool_use_id="toolu_1-heartbeat-0",
        tool_name=_TOOL,
        parent_tool_use_id="toolu_1",
        elapsed_time_seconds=30,
        heartbeat=True,
    ),
    _line(
        "user",
        message={"content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        tool_use_result={"structuredContent": {"status": "completed"}},
    ),
    _line("result", subtype="success", is_error=False, result="done", usage={"x": 1}),
]

SEEDS: list[bytes] = [
    "\n".join(_TURN).encode(),
    "\n".join(line for line in _TURN if "stream_event" not in line).encode(),
    "\n".join(_TURN[:8]).encode(),  # cut mid-message
    "\n".join(line[: len(line) // 2] for line in _TURN).encode(),  # every line truncated
    _line(
        "system",
        subtype="init",
        mcp_servers=[{"name": "subagents", "status": "failed"}],
    ).encode(),
    b'{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"x",'
    b'"input":{}},{"type":"tool_use","id":"t","name":"x"}]}}\n'
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t"},'
    b'{"type":"tool_result","tool_use_id":"t"}]}}',
    b'{"type":"stream_event","event":{"type":"content_block_delta","index":5,'
    b'"delta":{"type":"thinking_delta","thinking":"x"}}}\n{"type":"stream_event","event":'
    b'{"type":"content_block_start","index":5,"content_block":{"type":"text"}}}',
    b"\xff\xfe not utf-8\n[1]\n{}\nnull\n",
    # A heartbeat of a call after its result, and of a call never started.
    "\n".join(
        [
            *_TURN[:-1],
            _TURN[-3].replace("heartbeat-0", "heartbeat-1"),
            _TURN[-3].replace("_1", "_2"),
        ]
    ).encode(),
    # Found by fuzzing: a block whose type is "tool" was taken for a tool call.
    b'{"type":"stream_event","event":{"type":"content_block_start","index":1,'
    b'"content_block":{"type":"tool"}}}',
]

DICTIONARY: list[bytes] = [
    b'"type"',
    b'"stream_event"',
    b'"event"',
    b'"message_start"',
    b'"content_block_start"',
    b'"content_block_delta"',
    b'"content_block_stop"',
    b'"message_stop"',
    b'"index"',
    b'"content_block"',
    b'"delta"',
    b'"text_delta"',
    b'"thinking_delta"',
    b'"input_json_delta"',
    b'"partial_json"',
    b'"assistant"',
    b'"user"',
    b'"tool_result"',
    b'"tool_use_id"',
    b'"tool_use"',
    b'"id"',
    b'"name"',
    b'"input"',
    b'"text"',
    b'"thinking"',
    b'"result"',
    b'"system"',
    b'"init"',
    b'"mcp_servers"',
    b'"parent_tool_use_id"',
    b'"is_error"',
    b'"structuredContent"',
    b'"tool_use_result"',
    b'"tool_progress"',
    b'"heartbeat"',
    b'"elapsed_time_seconds"',
    b"-heartbeat-",
]


def fuzz_one_input(data: bytes) -> None:
    parser = ClaudeStreamParser("subagents")
    events: list[ParentEvent] = []
    for line in lines_of(data):
        events += parser.feed(line)
    events += parser.close()
    check_parent_events(events)
    verdict = parser.verdict()
    assert verdict.ok == (verdict.error is None), f"verdict says ok and error: {verdict!r}"
    if parser.fatal is not None:
        assert any(e.fields.get("name") == "claude.warning" for e in events), "silent fatal"
