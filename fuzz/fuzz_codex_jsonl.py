"""Fuzz harness: `codex exec --json` output, `adapters.parents.CodexJsonlParser`.

Any bytes go in, split into lines as the CLI driver splits stdout. Nothing may raise, and what
comes out must be well-formed parent events (`fuzz.fuzz_claude_stream.check_parent_events`).
The verdict is ok exactly when a turn completed and none failed.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports
from fuzz.fuzz_claude_stream import check_parent_events, lines_of

with instrumented_imports("adapters", "engine"):
    from adapters.parents._codex import CodexJsonlParser
    from adapters.parents._process import ParentEvent

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]


def _line(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def _item(phase: str, item_id: str, kind: str, **fields: Any) -> str:
    return _line(f"item.{phase}", item={"id": item_id, "type": kind, **fields})


_CALL: Final = {
    "server": "subagents",
    "tool": "delegate_to_agent",
    "arguments": {"agent": "research", "objective": "x"},
}
_TURN: Final = [
    _line("thread.started", thread_id="t-1"),
    _line("turn.started"),
    _item("completed", "item_0", "reasoning", text="hm"),
    _item("completed", "item_1", "agent_message", text="Delegating."),
    _item("started", "item_2", "mcp_tool_call", **_CALL, status="in_progress"),
    _item(
        "completed",
        "item_2",
        "mcp_tool_call",
        **_CALL,
        result={"content": [{"type": "text", "text": "ok"}], "structured_content": {"s": 1}},
        status="completed",
    ),
    _item("completed", "item_3", "agent_message", text="Done."),
    _line("turn.completed", usage={"input_tokens": 1, "output_tokens": 1}),
]

SEEDS: list[bytes] = [
    "\n".join(_TURN).encode(),
    "\n".join(_TURN[:5]).encode(),  # cut mid-call
    "\n".join(line[: len(line) // 2] for line in _TURN).encode(),
    "\n".join(
        [
            _item("started", "item_1", "agent_message", text="a"),
            _item("updated", "item_1", "reasoning", text="b"),
            _item("completed", "item_1", "agent_message", text="c"),
            _line("turn.failed", error={"message": "401"}),
        ]
    ).encode(),
    "\n".join(
        [
            _item("completed", "item_5", "mcp_tool_call", error={"message": "x"}, status="failed"),
            _item("started", "item_6", "command_execution", command="ls"),
            _item("completed", "item_7", "todo_list", items=[]),
            _line("error", message="retrying"),
            _line("item.plan.delta", item_id="item_8", delta="d"),
        ]
    ).encode(),
    b"Reading additional input from stdin...\n\xff\n[]\n{}\n",
]

DICTIONARY: list[bytes] = [
    b'"type"',
    b'"thread.started"',
    b'"turn.started"',
    b'"turn.completed"',
    b'"turn.failed"',
    b'"item.started"',
    b'"item.updated"',
    b'"item.completed"',
    b'"item"',
    b'"id"',
    b'"agent_message"',
    b'"reasoning"',
    b'"mcp_tool_call"',
    b'"command_execution"',
    b'"error"',
    b'"text"',
    b'"server"',
    b'"tool"',
    b'"arguments"',
    b'"result"',
    b'"structured_content"',
    b'"content"',
    b'"status"',
    b'"message"',
    b'"usage"',
    b'"item_1"',
]


def fuzz_one_input(data: bytes) -> None:
    parser = CodexJsonlParser()
    events: list[ParentEvent] = []
    for line in lines_of(data):
        events += parser.feed(line)
    events += parser.close()
    check_parent_events(events)
    verdict = parser.verdict()
    assert verdict.ok == (parser.turn_completed and parser.turn_failure is None)
    assert verdict.ok == (verdict.error is None), f"verdict says ok and error: {verdict!r}"
