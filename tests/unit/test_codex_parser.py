"""`CodexJsonlParser` (codex exec --json -> parent events), `CallIds` (pairing Codex's item ids
with the model's call ids its MCP calls carry) and the `codex exec` command line.

Lines are shaped as codex-cli 0.171.0 writes them (checked against a real transcript: items are
numbered `item_N` by `codex exec`, `agent_message` and `reasoning` come only as `item.completed`).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.parents import CodexConfig, CodexJsonlParser, ParentEvent, codex_command
from adapters.parents._codex import toml_value
from engine import Kind
from fuzz.fuzz_claude_stream import check_parent_events
from tests.helpers.events import kinds

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli"


def line(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def item(phase: str, item_id: str, kind: str, **fields: Any) -> str:
    return line(f"item.{phase}", item={"id": item_id, "type": kind, **fields})


def mcp_call(phase: str, item_id: str, arguments: Any, **fields: Any) -> str:
    body = {
        "server": "subagents",
        "tool": "delegate_to_agent",
        "arguments": arguments,
        "result": None,
        "error": None,
        "status": "in_progress",
    }
    return item(phase, item_id, "mcp_tool_call", **{**body, **fields})


STRUCTURED = {"delegation_id": "del-1", "status": "completed", "parent_tool_call_id": "call_a"}


def turn() -> list[str]:
    return [
        line("thread.started", thread_id="thread-1"),
        item("completed", "item_0", "error", message="Model metadata not found."),
        line("turn.started"),
        item("completed", "item_1", "reasoning", text="let me think"),
        item("completed", "item_2", "agent_message", text="Delegating to research."),
        mcp_call("started", "item_3", {"agent": "research", "objective": "find it"}),
        mcp_call(
            "completed",
            "item_3",
            {"agent": "research", "objective": "find it"},
            result={
                "content": [{"type": "text", "text": "Summary: x"}],
                "structured_content": STRUCTURED,
            },
            status="completed",
        ),
        item("completed", "item_4", "agent_message", text="Done: x"),
        line("turn.completed", usage={"input_tokens": 10, "output_tokens": 3}),
    ]


def feed(parser: CodexJsonlParser, *lines: str) -> list[ParentEvent]:
    out: list[ParentEvent] = []
    for text in lines:
        out += parser.feed(text)
    return out


def test_a_turn_gives_text_reasoning_and_the_tool_call() -> None:
    parser = CodexJsonlParser()
    events = feed(parser, *turn())
    assert kinds(events) == [
        Kind.PARENT_CUSTOM,  # codex.thread
        Kind.PARENT_CUSTOM,  # codex.warning
        Kind.PARENT_CUSTOM,  # codex.turn started
        Kind.PARENT_REASONING_START,
        Kind.PARENT_REASONING_DELTA,
        Kind.PARENT_REASONING_END,
        Kind.PARENT_TEXT_START,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_END,
        Kind.PARENT_TOOL_CALL_START,
        Kind.PARENT_TOOL_CALL_ARGS,
        Kind.PARENT_TOOL_CALL_END,
        Kind.PARENT_TOOL_CALL_RESULT,
        Kind.PARENT_TEXT_START,
        Kind.PARENT_TEXT_DELTA,
        Kind.PARENT_TEXT_END,
        Kind.PARENT_CUSTOM,  # codex.turn completed
    ]
    names = [e.fields["name"] for e in events if e.kind == Kind.PARENT_CUSTOM]
    assert names == ["codex.thread", "codex.warning", "codex.turn", "codex.turn"]
    assert events[9].fields == {
        "tool_call_id": "item_3",
        "tool_name": "mcp__subagents__delegate_to_agent",
    }
    assert events[10].fields["args"] == {"agent": "research", "objective": "find it"}
    assert events[12].fields == {"tool_call_id": "item_3", "result": STRUCTURED}
    assert events[6].fields == {"message_id": "item_2", "role": "assistant"}
    verdict = parser.verdict()
    assert verdict.ok
    assert verdict.text == "Done: x"
    assert verdict.usage == {"input_tokens": 10, "output_tokens": 3}
    assert verdict.session_id == "thread-1"
    check_parent_events(events + parser.close())


def test_growing_text_items_give_what_they_grew_by() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        item("started", "item_1", "agent_message", text=""),
        item("updated", "item_1", "agent_message", text="Hel"),
        item("updated", "item_1", "agent_message", text="Hello"),
        item("completed", "item_1", "agent_message", text="Hello!"),
        item("completed", "item_1", "agent_message", text="Hello!"),  # repeated: nothing
    )
    deltas = [e.fields["delta"] for e in events if e.kind == Kind.PARENT_TEXT_DELTA]
    assert deltas == ["Hel", "lo", "!"]
    assert kinds(events).count(Kind.PARENT_TEXT_END) == 1


def test_a_failed_mcp_call_and_a_text_only_result() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        # completed without started: the call is started, ended and answered at once
        mcp_call(
            "completed", "item_5", {"agent": "x"}, error={"message": "timed out"}, status="failed"
        ),
        mcp_call(
            "completed",
            "item_6",
            {"agent": "y"},
            result={
                "content": [{"type": "text", "text": "plain "}, {"type": "text", "text": "text"}]
            },
            status="completed",
        ),
    )
    results = [e.fields for e in events if e.kind == Kind.PARENT_TOOL_CALL_RESULT]
    assert results == [
        {"tool_call_id": "item_5", "result": {"error": "timed out"}, "extra": {"is_error": True}},
        {"tool_call_id": "item_6", "result": "plain text"},
    ]
    assert kinds(events).count(Kind.PARENT_TOOL_CALL_START) == 2


def test_parallel_calls_keep_their_items_apart() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        mcp_call("started", "item_1", {"agent": "a"}),
        mcp_call("started", "item_2", {"agent": "b"}),
        mcp_call(
            "completed",
            "item_2",
            {"agent": "b"},
            result={"content": [], "structured_content": {"r": 2}},
        ),
        mcp_call(
            "completed",
            "item_1",
            {"agent": "a"},
            result={"content": [], "structured_content": {"r": 1}},
        ),
    )
    results = [
        (e.fields["tool_call_id"], e.fields["result"])
        for e in events
        if e.kind == Kind.PARENT_TOOL_CALL_RESULT
    ]
    assert results == [("item_2", {"r": 2}), ("item_1", {"r": 1})]
    check_parent_events(events)


def test_commands_are_tool_calls_and_other_items_custom_events() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        item(
            "started",
            "item_1",
            "command_execution",
            command="ls",
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        ),
        item(
            "completed",
            "item_1",
            "command_execution",
            command="ls",
            aggregated_output="a\nb\n",
            exit_code=0,
            status="completed",
        ),
        item("completed", "item_2", "todo_list", items=[{"text": "x", "completed": False}]),
        item("completed", "item_3", "web_search", query="trio"),
        line("item.plan.delta", item_id="item_4", delta="step"),
    )
    assert events[0].fields == {"tool_call_id": "item_1", "tool_name": "command_execution"}
    assert events[1].fields["args"] == {"command": "ls"}
    assert events[3].fields["result"] == {"exit_code": 0, "status": "completed", "output": "a\nb\n"}
    names = [e.fields["name"] for e in events if e.kind == Kind.PARENT_CUSTOM]
    assert names == ["codex.todo_list", "codex.web_search", "codex.plan.delta"]


def test_a_failed_turn_fails_the_verdict_with_codexs_message() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        line("turn.started"),
        item("started", "item_1", "agent_message", text="partial"),
        line("error", message="stream disconnected; retrying 1/5"),
        line("turn.failed", error={"message": "unexpected status 401 Unauthorized"}),
    )
    assert Kind.PARENT_TEXT_END in kinds(events)  # what was open is closed
    verdict = parser.verdict()
    assert not verdict.ok
    assert verdict.error == "Codex reported a failed turn: unexpected status 401 Unauthorized"


def test_no_completed_turn_fails_the_verdict() -> None:
    parser = CodexJsonlParser()
    feed(parser, line("thread.started", thread_id="t"), line("error", message="boom"))
    verdict = parser.verdict()
    assert not verdict.ok
    assert verdict.error == "Codex ended without completing its turn (last error: boom)"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Reading additional input from stdin...", "bad_json"),
        ('{"type":"item.completed","item":{"id":"item_1","type":"agent_mess', "bad_json"),
        ("[]", "not_an_object"),
        (line("thread.resumed"), "unknown_type"),
        (line("item.completed", item="x"), "bad_item"),
        (line("item.completed", item={"type": "agent_message"}), "bad_item"),
        (item("completed", "item_1", "hologram"), "unknown_item_type"),
    ],
)
def test_what_it_cannot_map_becomes_a_raw_event(text: str, reason: str) -> None:
    parser = CodexJsonlParser()
    [event] = parser.feed(text)
    assert event.fields["name"] == "codex.raw"
    assert event.fields["raw"]["reason"] == reason


_POOL = [
    *turn(),
    item("started", "item_2", "agent_message", text="Del"),
    item("updated", "item_2", "reasoning", text="x"),
    mcp_call("started", "item_9", None),
    mcp_call("completed", "item_9", [], result="odd", error="odd"),
    item("completed", "item_7", "command_execution"),
    line("turn.failed", error=None),
    line("error"),
    "garbage",
    "{}",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_POOL) | st.text(max_size=40), max_size=30))
def test_any_line_sequence_gives_balanced_events(lines: list[str]) -> None:
    parser = CodexJsonlParser()
    events = feed(parser, *lines) + parser.close()
    check_parent_events(events)
    parser.verdict()


# -- the command line ---------------------------------------------------------------------------


def test_codex_command_overrides_are_valid_toml_and_hold_no_secret() -> None:
    config = CodexConfig(
        binary="/opt/codex",
        base_url="http://127.0.0.1:9/v1",
        model="gpt-x",
        api_key_env="MY_KEY",
        tool_timeout=90,
        extra_args=("--sandbox", "read-only"),
    )
    argv = codex_command(
        config,
        "-starts with a dash",
        url="http://127.0.0.1:8/runs/r/mcp",
        server_name="subagents",
        workdir="/w",
    )
    assert argv[:7] == [
        "/opt/codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "-C",
        "/w",
    ]
    assert argv[-2:] == ["--", "-starts with a dash"]
    assert argv[argv.index("-m") + 1] == "gpt-x"
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    parsed: dict[str, Any] = {}
    for override in overrides:
        parsed.update(tomllib.loads(override))
    assert parsed["model_provider"] == "subagent_engine"
    assert parsed["model_providers"]["subagent_engine"] == {
        "name": "subagent_engine",
        "base_url": "http://127.0.0.1:9/v1",
        "wire_api": "responses",
        "env_key": "MY_KEY",
        # Codex's own bounds on model requests, from CliConfig.max_retries / request_timeout
        "request_max_retries": 2,
        "stream_max_retries": 2,
        "stream_idle_timeout_ms": 120000,
    }
    assert parsed["mcp_servers"]["subagents"] == {
        "url": "http://127.0.0.1:8/runs/r/mcp",
        "bearer_token_env_var": "SUBAGENT_ENGINE_MCP_TOKEN",
        "default_tools_approval_mode": "approve",
        "required": True,
        "tool_timeout_sec": 90.0,
    }


@given(st.text())
def test_toml_strings_round_trip(text: str) -> None:
    assert tomllib.loads(f"v = {toml_value(text)}")["v"] == text


# -- recorded transcripts ---------------------------------------------------------------------


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*codex*.jsonl")) if FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_every_line_of_a_recorded_transcript_is_understood(path: Path) -> None:
    parser = CodexJsonlParser()
    events: list[ParentEvent] = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        got = parser.feed(text)
        raw = [e for e in got if e.fields.get("name") == "codex.raw"]
        assert not raw, f"{path.name}:{number}: not understood: {raw[0].fields['raw']}"
        events += got
    events += parser.close()
    check_parent_events(events)
    verdict = parser.verdict()
    assert verdict.ok == ("error" not in path.name and "sigint" not in path.name), verdict
    for kind, fields in events:
        structured = fields.get("result")
        if kind == Kind.PARENT_TOOL_CALL_RESULT and isinstance(structured, dict):
            # Codex prints its own item ids, never the call id the endpoint got: `CallIds`.
            assert fields["tool_call_id"].startswith("item_")
            assert structured["parent_tool_call_id"].startswith("call_")


def test_an_item_id_reused_for_another_type_gets_its_own_ids() -> None:
    parser = CodexJsonlParser()
    events = feed(
        parser,
        item("updated", "item_2", "reasoning", text="x"),
        item("completed", "item_2", "agent_message", text="y"),
        item("completed", "item_2", "reasoning", text="z"),
    )
    starts = [(e.kind, e.fields["message_id"]) for e in events if "start" in e.kind]
    assert starts == [
        (Kind.PARENT_REASONING_START, "item_2"),
        (Kind.PARENT_TEXT_START, "item_2~2"),
        (Kind.PARENT_REASONING_START, "item_2~3"),
    ]
    check_parent_events(events + parser.close())
