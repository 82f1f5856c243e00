"""The CLI parents driving a fake CLI process (`tests/helpers/fakes_cli.py`) through a real run.

What is checked here is the process side (`adapters.parents._process`) with both adapters'
command lines: what the CLI is started with (no credential on the command line), its output
published as the run's parent events, how the run ends with it (finished with the final text;
failed with the stderr tail on a non-zero exit, a missing binary, garbage, an MCP server the CLI
could not reach), stopping (SIGINT, then SIGTERM, then SIGKILL, timed by a `MockClock` so the
graces can be long), delegations cancelled, nothing left running. Two tests let the fake make
a real MCP `tools/call` to a real endpoint, as the CLIs do, to check the parent tool-call ids.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import DelegationEndpoint
from adapters.parents import (
    TOKEN_ENV,
    ClaudeCodeConfig,
    ClaudeCodeParent,
    ClaudeStreamParser,
    CodexConfig,
    CodexParent,
    ParentEvent,
    ParentProcessError,
)
from adapters.parents._process import LineSplitter
from demo import demo_agents
from engine import (
    AgentSpec,
    DelegationRequest,
    Engine,
    Kind,
    Run,
    RunEndpoint,
    Status,
)
from tests.helpers.fakes_cli import CLAUDE_SIGINT, CODEX_SIGINT, read_log, write_fake_cli

TOOL = "mcp__subagents__delegate_to_agent"


# -- the run's side ---------------------------------------------------------------------------


class StaticEndpoints:
    """An endpoint provider with nothing behind it (the fake CLI does not connect)."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}

    async def open_endpoint(self, run: Run) -> RunEndpoint:
        token = secrets.token_urlsafe(32)
        self.tokens[run.run_id] = token
        return RunEndpoint(url=f"http://127.0.0.1:9/runs/{run.run_id}/mcp", token=token)

    async def close_endpoint(self, run_id: str) -> None:
        pass


async def slow_agent(task: LocalTask) -> str:
    await trio.sleep_forever()
    return "never"


def engine(**kwargs: Any) -> Engine:
    agents = [AgentSpec(key="slow", target=InProcessTarget(slow_agent))]
    return Engine(agents, endpoints=StaticEndpoints(), **kwargs)


async def events_of(eng: Engine, run: Run) -> list[Any]:
    journal = eng.journal(run.run_id)
    assert journal is not None
    return [entry.event for entry in await journal.store.read_after(0, journal.head)]


async def wait_for(run: Run, predicate: Callable[[Any], bool]) -> None:
    async for entry in run.events():
        if predicate(entry.event):
            return


def named(name: str) -> Callable[[Any], bool]:
    return lambda event: event.kind == Kind.PARENT_CUSTOM and event.name == name


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


async def assert_gone(pid: int) -> None:
    """The process `pid` ends within 5 s (it is polled: no event says a stranger exited)."""
    with trio.fail_after(5):
        while True:
            if not alive(pid):
                return
            await trio.sleep(0.02)


def exists(path: str) -> bool:
    return Path(path).exists()


def started(wrapper: Path) -> dict[str, Any]:
    return next(record for record in read_log(wrapper) if record["event"] == "start")


def signals(wrapper: Path) -> list[str]:
    return [r["signal"] for r in read_log(wrapper) if r["event"] == "signal"]


# -- Claude Code lines ------------------------------------------------------------------------


def init(status: str = "connected") -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "init",
        "session_id": "sess-1",
        "tools": [TOOL],
        "mcp_servers": [{"name": "subagents", "status": status}],
    }


def se(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event, "parent_tool_use_id": None}


def tool_use_lines(tool_use_id: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    block = {"type": "tool_use", "id": tool_use_id, "name": TOOL, "input": {}}
    partial = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
    return [
        se({"type": "message_start", "message": {"id": f"msg-{tool_use_id}"}}),
        se({"type": "content_block_start", "index": 0, "content_block": block}),
        se({"type": "content_block_delta", "index": 0, "delta": partial}),
        se({"type": "content_block_stop", "index": 0}),
        se({"type": "message_stop"}),
    ]


def text_lines(message_id: str, *chunks: str) -> list[dict[str, Any]]:
    return [
        se({"type": "message_start", "message": {"id": message_id}}),
        se({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        *(
            se(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": c},
                }
            )
            for c in chunks
        ),
        {
            "type": "assistant",
            "message": {"id": message_id, "content": [{"type": "text", "text": "".join(chunks)}]},
        },
        se({"type": "content_block_stop", "index": 0}),
        se({"type": "message_stop"}),
    ]


def result_line(text: str = "All done.") -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "session_id": "sess-1",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }


def out(*lines: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"out_json": line} for line in lines]


def claude(wrapper: Path, **overrides: Any) -> ClaudeCodeParent:
    settings: dict[str, Any] = {
        "binary": str(wrapper),
        "base_url": "http://127.0.0.1:9",
        "api_key_env": "FAKE_ANTHROPIC_KEY",
        "interrupt_grace": 2.0,
        "terminate_grace": 2.0,
        "kill_grace": 2.0,
    }
    return ClaudeCodeParent(ClaudeCodeConfig(**{**settings, **overrides}))


# -- a whole run ---------------------------------------------------------------------------------


async def test_claudes_output_becomes_the_runs_events_and_its_result_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-fake-key-0123456789")
    monkeypatch.setenv("HOST_ONLY_SECRET", "do-not-pass-me")
    steps = out(
        init(),
        *text_lines("msg_1", "Delegating ", "now."),
        *tool_use_lines("toolu_1", {"agent": "slow", "objective": "x"}),
        {
            "type": "user",
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]
            },
        },
        result_line("The answer."),
    )
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    parent = claude(wrapper, model="claude-test", extra_args=("--max-turns", "3"))
    async with engine() as eng, eng.open_run() as run:
        assert run.endpoint is not None
        token, url = run.endpoint.token, run.endpoint.url
        outcome = await parent.run(run, "-a prompt that starts with a dash")
    assert outcome.text == "The answer."
    assert outcome.session_id == "sess-1"
    assert outcome.exit_code == 0

    events = await events_of(eng, run)
    kinds = [e.kind for e in events]
    assert kinds[0] == Kind.RUN_STARTED
    assert kinds[-1] == Kind.RUN_FINISHED
    assert events[-1].text == "The answer."
    assert [e.name for e in events if e.kind == Kind.PARENT_CUSTOM] == [
        "claude.init",
        "claude.result",
    ]
    text = "".join(e.delta for e in events if e.kind == Kind.PARENT_TEXT_DELTA)
    assert text == "Delegating now."
    calls = [e for e in events if e.kind.startswith("tool_call.")]
    assert [(e.kind, e.tool_call_id) for e in calls] == [
        (Kind.PARENT_TOOL_CALL_START, "toolu_1"),
        (Kind.PARENT_TOOL_CALL_ARGS, "toolu_1"),
        (Kind.PARENT_TOOL_CALL_END, "toolu_1"),
        (Kind.PARENT_TOOL_CALL_RESULT, "toolu_1"),
    ]
    assert calls[0].tool_name == TOOL

    record = started(wrapper)
    argv, env = record["argv"], record["env"]
    assert not any(token in arg for arg in argv), "the MCP token is on the command line"
    assert not any("sk-fake-key" in arg for arg in argv), "the API key is on the command line"
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert "--include-partial-messages" in argv
    assert argv[argv.index("--model") + 1] == "claude-test"
    assert argv[argv.index("--allowedTools") + 1] == "mcp__subagents"
    assert "--strict-mcp-config" in argv
    assert argv[-4:] == ["--max-turns", "3", "--", "-a prompt that starts with a dash"]
    mcp = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]["subagents"]
    assert mcp["url"] == url
    assert mcp["headers"] == {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
    assert env[TOKEN_ENV] == token
    assert env["ANTHROPIC_API_KEY"] == "sk-fake-key-0123456789"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["ENABLE_TOOL_SEARCH"] == "false"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["MCP_TOOL_TIMEOUT"] == str(mcp["timeout"])
    assert "HOST_ONLY_SECRET" not in env
    assert env["PATH"] == os.environ["PATH"]
    assert not exists(record["cwd"]), "the per-run working folder was not removed"
    await assert_gone(record["pid"])


async def test_a_non_zero_exit_fails_the_run_with_the_stderr_tail(tmp_path: Path) -> None:
    steps = [
        *out(init()),
        {"err": "fatal: the model endpoint refused the request"},
        {"err_env": TOKEN_ENV},  # a CLI that prints a credential: it is blanked
        {"exit": 3},
    ]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        token = run.endpoint.token if run.endpoint else "?"
        with pytest.raises(ParentProcessError) as caught:
            await claude(wrapper).run(run, "x")
    error = caught.value
    assert error.exit_code == 3
    assert "Claude Code exited with exit code 3" in error.message
    assert "fatal: the model endpoint refused the request" in error.message
    assert f"{TOKEN_ENV}=[REDACTED]" in error.stderr_tail
    assert token not in error.message
    events = await events_of(eng, run)
    assert events[-1].kind == Kind.RUN_FAILED
    assert events[-1].text == error.message
    assert token not in json.dumps([e.text for e in events])


async def test_a_missing_binary_fails_the_run(tmp_path: Path) -> None:
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="could not be started"):
            await claude(tmp_path / "no-such-claude").run(run, "x")
    events = await events_of(eng, run)
    assert events[-1].kind == Kind.RUN_FAILED
    assert "no-such-claude" in (events[-1].text or "")


async def test_garbage_without_a_result_fails_the_run_and_is_kept(tmp_path: Path) -> None:
    steps = [{"out": "Segmentation fault (core dumped)"}, *out(init()), {"out": '{"type": "ass'}]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="ended without a result line"):
            await claude(wrapper).run(run, "x")
    events = await events_of(eng, run)
    raw = [e.raw for e in events if e.kind == Kind.PARENT_CUSTOM and e.name == "claude.raw"]
    assert [r["line"] for r in raw] == ["Segmentation fault (core dumped)", '{"type": "ass']
    assert events[-1].kind == Kind.RUN_FAILED


async def test_an_error_result_fails_the_run(tmp_path: Path) -> None:
    error = {**result_line("API Error: 401 invalid x-api-key"), "is_error": True}
    wrapper = write_fake_cli(tmp_path, {"steps": out(init(), error)})
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="401 invalid x-api-key"):
            await claude(wrapper).run(run, "x")
    assert (await events_of(eng, run))[-1].kind == Kind.RUN_FAILED


async def test_an_mcp_endpoint_claude_could_not_reach_stops_it_and_fails_the_run(
    tmp_path: Path,
) -> None:
    script = {"steps": [*out(init("failed")), {"pause": True}], "on_sigint": CLAUDE_SIGINT}
    wrapper = write_fake_cli(tmp_path, script)
    parent = claude(wrapper)
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="could not use the run's MCP endpoint"):
            await parent.run(run, "x")
    assert signals(wrapper) == ["SIGINT"]
    events = await events_of(eng, run)
    assert "claude.warning" in [e.name for e in events if e.kind == Kind.PARENT_CUSTOM]
    assert events[-1].kind == Kind.RUN_FAILED
    await assert_gone(started(wrapper)["pid"])


async def test_a_process_left_behind_in_the_group_is_killed(tmp_path: Path) -> None:
    steps = [*out(init()), {"spawn_sleeper": 60}, *out(result_line())]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        with trio.fail_after(10):  # the sleeper holds stdout: its end must not be awaited
            await claude(wrapper).run(run, "x")
    [sleeper] = [r["pid"] for r in read_log(wrapper) if r["event"] == "sleeper"]
    await assert_gone(sleeper)


# -- stopping ------------------------------------------------------------------------------------


async def stop_after_init(
    parent: ClaudeCodeParent | CodexParent, ready: str, *, via_run: bool = True
) -> tuple[Engine, Run, str | None]:
    """Start `parent`, wait for the custom event `ready`, stop it: with `run.cancel()` (as the
    server does), or by cancelling `parent.run()` alone while a delegation runs."""
    delegation = None
    async with engine() as eng, eng.open_run() as run:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(parent.run, run, "x")
                await wait_for(run, named(ready))
                request = DelegationRequest(
                    agent="slow", objective="x", parent_tool_call_id="toolu_1"
                )
                delegation = run.start_delegation(request).delegation_id
                if via_run:
                    run.cancel("Stopped by the test.")
                else:
                    scope.cancel()
                await trio.sleep_forever()
    return eng, run, delegation


@pytest.mark.parametrize("via_run", [True, False])
async def test_stopping_sends_sigint_and_cancels_the_delegations(
    tmp_path: Path, via_run: bool
) -> None:
    script = {"steps": [*out(init()), {"pause": True}], "on_sigint": CLAUDE_SIGINT}
    wrapper = write_fake_cli(tmp_path, script)
    parent = claude(wrapper)
    eng, run, delegation = await stop_after_init(parent, "claude.init", via_run=via_run)
    assert signals(wrapper) == ["SIGINT"]
    assert parent.process is not None
    assert parent.process.signals_sent == [signal.SIGINT, signal.SIGKILL]  # + the group sweep
    assert delegation is not None
    result = run.result(delegation)
    assert result is not None
    assert result.status == Status.CANCELLED  # the CLI never told the endpoint: the run did
    events = await events_of(eng, run)
    assert events[-1].kind == Kind.RUN_CANCELLED
    await assert_gone(started(wrapper)["pid"])


async def test_a_cli_that_ignores_sigint_gets_sigterm_after_the_grace(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    # Long graces on a clock that jumps whenever the test has been idle for 1 s of real time.
    mock_clock.autojump_threshold = 1.0
    script = {"steps": [*out(init()), {"pause": True}], "on_sigint": "ignore"}
    wrapper = write_fake_cli(tmp_path, script)
    parent = claude(wrapper, interrupt_grace=30.0, terminate_grace=30.0, kill_grace=30.0)
    before = trio.current_time()
    await stop_after_init(parent, "claude.init")
    assert 30.0 <= trio.current_time() - before < 60.0
    assert signals(wrapper) == ["SIGINT", "SIGTERM"]
    assert parent.process is not None
    assert parent.process.returncode == 143
    await assert_gone(started(wrapper)["pid"])


async def test_a_cli_that_ignores_sigint_and_sigterm_is_killed(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    script = {
        "steps": [*out(init()), {"pause": True}],
        "on_sigint": "ignore",
        "on_sigterm": "ignore",
    }
    wrapper = write_fake_cli(tmp_path, script)
    parent = claude(wrapper, interrupt_grace=30.0, terminate_grace=30.0, kill_grace=30.0)
    before = trio.current_time()
    await stop_after_init(parent, "claude.init")
    assert 60.0 <= trio.current_time() - before < 90.0
    assert signals(wrapper) == ["SIGINT", "SIGTERM"]
    assert parent.process is not None
    assert parent.process.signals_sent[:3] == [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    assert parent.process.returncode == -signal.SIGKILL
    await assert_gone(started(wrapper)["pid"])


async def test_a_failing_cli_has_its_delegations_cancelled(tmp_path: Path) -> None:
    steps = [*out(init()), {"sleep": 0.2}, {"err": "crashed"}, {"exit": 2}]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="slow", objective="x"))
        with pytest.raises(ParentProcessError, match="crashed"):
            await claude(wrapper).run(run, "x")
        assert handle.finished
    result = run.result(handle.delegation_id)
    assert result is not None
    assert result.status == Status.CANCELLED
    assert (await events_of(eng, run))[-1].kind == Kind.RUN_FAILED


# -- Codex ------------------------------------------------------------------------------------


def codex(wrapper: Path, **overrides: Any) -> CodexParent:
    settings: dict[str, Any] = {
        "binary": str(wrapper),
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "FAKE_OPENAI_KEY",
        "model": "gpt-test",
        "interrupt_grace": 2.0,
        "terminate_grace": 2.0,
        "kill_grace": 2.0,
    }
    return CodexParent(CodexConfig(**{**settings, **overrides}))


def cx(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


async def test_codex_runs_with_its_own_home_and_the_token_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-openai-fake-987654321")
    steps = out(
        cx("thread.started", thread_id="thread-9"),
        cx("turn.started"),
        cx("item.completed", item={"id": "item_0", "type": "agent_message", "text": "Hi."}),
        cx("turn.completed", usage={"input_tokens": 1, "output_tokens": 1}),
    )
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        token = run.endpoint.token if run.endpoint else "?"
        outcome = await codex(wrapper).run(run, "hello")
    assert outcome.text == "Hi."
    assert outcome.session_id == "thread-9"
    record = started(wrapper)
    argv, env = record["argv"], record["env"]
    assert argv[:6] == [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "-C",
        record["cwd"],
    ]
    assert argv[-2:] == ["--", "hello"]
    assert not any(token in arg or "sk-openai" in arg for arg in argv)
    assert env[TOKEN_ENV] == token
    assert env["FAKE_OPENAI_KEY"] == "sk-openai-fake-987654321"
    assert Path(env["CODEX_HOME"]).parent == Path(record["cwd"]).parent
    assert not exists(env["CODEX_HOME"]), "the per-run CODEX_HOME was not removed"
    events = await events_of(eng, run)
    assert events[-1].kind == Kind.RUN_FINISHED
    assert events[-1].text == "Hi."


async def test_codex_sigint_exit_1_is_a_stop_not_a_failure(tmp_path: Path) -> None:
    script = {
        "steps": [*out(cx("thread.started", thread_id="t"), cx("turn.started")), {"pause": True}],
        "on_sigint": CODEX_SIGINT,
    }
    wrapper = write_fake_cli(tmp_path, script)
    parent = codex(wrapper)
    eng, run, delegation = await stop_after_init(parent, "codex.thread", via_run=False)
    assert signals(wrapper) == ["SIGINT"]
    assert delegation is not None
    result = run.result(delegation)
    assert result is not None
    assert result.status == Status.CANCELLED
    assert (await events_of(eng, run))[-1].kind == Kind.RUN_CANCELLED


async def test_a_failed_codex_turn_fails_the_run(tmp_path: Path) -> None:
    steps = [
        *out(
            cx("thread.started", thread_id="t"),
            cx("turn.started"),
            cx("turn.failed", error={"message": "unexpected status 401 Unauthorized"}),
        ),
        {"exit": 1},
    ]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="401 Unauthorized"):
            await codex(wrapper).run(run, "x")
    assert (await events_of(eng, run))[-1].kind == Kind.RUN_FAILED


# -- a real MCP endpoint: the parent tool-call ids ------------------------------------------------


async def run_with_endpoint(parent: ClaudeCodeParent | CodexParent) -> tuple[Any, list[Any]]:
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(demo_agents(pause=0), endpoints=endpoint) as eng,
    ):
        async with eng.open_run() as run:
            with trio.fail_after(60):
                outcome = await parent.run(run, "x")
        return outcome, await events_of(eng, run)


def check_correlated(events: list[Any], call_id: str, model_call_id: str | None = None) -> None:
    kinds = [(e.kind, e.tool_call_id) for e in events if e.kind.startswith("tool_call.")]
    assert kinds == [
        (Kind.PARENT_TOOL_CALL_START, call_id),
        (Kind.PARENT_TOOL_CALL_ARGS, call_id),
        (Kind.PARENT_TOOL_CALL_END, call_id),
        (Kind.PARENT_TOOL_CALL_RESULT, call_id),
    ]
    subagent = [e for e in events if e.delegation_id]
    assert subagent
    assert {e.parent_tool_call_id for e in subagent} == {call_id}
    order = [e.kind for e in events]
    assert order.index(Kind.FINISHED) < order.index(Kind.PARENT_TOOL_CALL_RESULT)
    [result] = [e.result for e in events if e.kind == Kind.PARENT_TOOL_CALL_RESULT]
    assert result["status"] == Status.COMPLETED
    assert result["parent_tool_call_id"] == call_id
    [started] = [e for e in events if e.kind == Kind.STARTED]
    if model_call_id is None:
        assert started.extra is None
    else:  # the model's own id, kept for the audit trail
        assert started.extra == {"model_tool_call_id": model_call_id}
        assert result["metadata"] == {"model_tool_call_id": model_call_id}


async def test_claude_tool_use_ids_and_the_delegations_agree(tmp_path: Path) -> None:
    arguments = {"agent": "research", "objective": "find it"}
    user = {
        "type": "user",
        "message": {
            "content": [{"type": "tool_result", "tool_use_id": "toolu_real1", "content": "ok"}]
        },
        "tool_use_result": {"structuredContent": "$RESULT"},
    }
    steps = [
        *out(init(), *tool_use_lines("toolu_real1", arguments)),
        {"call": {"arguments": arguments, "meta": {"claudecode/toolUseId": "toolu_real1"}}},
        {"out_result": json.dumps(user)},
        *out(result_line()),
    ]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    outcome, events = await run_with_endpoint(claude(wrapper))
    assert outcome.text == "All done."
    check_correlated(events, "toolu_real1")


async def test_codex_delegations_carry_its_item_ids_and_keep_the_models(tmp_path: Path) -> None:
    """Codex prints `item_N`, never the model's call id (only `_meta.callId` has it): the
    delegation is paired with the printed call and carries its item id."""
    arguments = {"agent": "research", "objective": "find it"}
    call = {"server": "subagents", "tool": "delegate_to_agent", "arguments": arguments}
    completed = cx(
        "item.completed",
        item={
            "id": "item_1",
            "type": "mcp_tool_call",
            **call,
            "result": {"content": [], "structured_content": "$RESULT"},
            "status": "completed",
        },
    )
    steps = [
        *out(
            cx("thread.started", thread_id="t"),
            cx("turn.started"),
            cx("item.started", item={"id": "item_1", "type": "mcp_tool_call", **call}),
        ),
        {"call": {"arguments": arguments, "meta": {"callId": "call_real1", "itemId": "x"}}},
        {"out_result": json.dumps(completed)},
        *out(
            cx("item.completed", item={"id": "item_2", "type": "agent_message", "text": "Done."}),
            cx("turn.completed", usage={}),
        ),
    ]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    outcome, events = await run_with_endpoint(codex(wrapper))
    assert outcome.text == "Done."
    check_correlated(events, "item_1", model_call_id="call_real1")


async def test_a_cli_that_closes_stdout_but_runs_on_is_stopped(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 1.0
    script = {
        "steps": [*out(init()), {"close_stdout": True}, {"pause": True}],
        "on_sigint": {"exit": 0},
    }
    wrapper = write_fake_cli(tmp_path, script)
    async with engine() as eng, eng.open_run() as run:
        with pytest.raises(ParentProcessError, match="ended without a result line"):
            await claude(wrapper).run(run, "x")
    assert signals(wrapper) == ["SIGINT"]
    assert (await events_of(eng, run))[-1].kind == Kind.RUN_FAILED


async def test_a_parser_bug_on_one_line_is_kept_as_a_raw_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_feed = ClaudeStreamParser.feed

    def feed(self: ClaudeStreamParser, line: str) -> list[ParentEvent]:
        if "boom" in line:
            raise KeyError("a parser bug")
        return real_feed(self, line)

    monkeypatch.setattr(ClaudeStreamParser, "feed", feed)
    steps = [*out(init()), {"out": "boom"}, *out(result_line())]
    wrapper = write_fake_cli(tmp_path, {"steps": steps})
    async with engine() as eng, eng.open_run() as run:
        await claude(wrapper).run(run, "x")
    events = await events_of(eng, run)
    [raw] = [e.raw for e in events if e.name == "claude.raw"]
    assert raw["reason"] == "parser_error"
    assert raw["line"] == "boom"
    assert events[-1].kind == Kind.RUN_FINISHED


# -- lines from a pipe ---------------------------------------------------------------------------


def split(chunks: list[bytes], max_line_bytes: int = 100) -> list[bytes]:
    splitter = LineSplitter(max_line_bytes)
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    return lines + splitter.close()


def test_lines_are_split_across_chunks_without_newlines_or_carriage_returns() -> None:
    assert split([b"ab", b"c\nde", b"f\r\n", b"\n", b"tail"]) == [b"abc", b"def", b"", b"tail"]
    assert split([b"only\n"]) == [b"only"]


def test_an_over_long_line_is_cut_and_the_rest_dropped() -> None:
    splitter = LineSplitter(4)
    assert splitter.feed(b"abcdefgh") == [b"abcd"]
    assert splitter.feed(b"ijk\nnext\n") == [b"next"]
    assert splitter.feed(b"123456\n") == [b"1234"]
    assert splitter.truncated_lines == 2
    assert splitter.close() == []


@example(chunks=[b"\x00\x00", b"\x00\x00\x00\x00", b"\r\x00", b"\n"], max_line_bytes=7)
@given(st.lists(st.binary(max_size=30), max_size=20), st.integers(min_value=1, max_value=50))
def test_any_chunking_gives_the_same_lines(chunks: list[bytes], max_line_bytes: int) -> None:
    data = b"".join(chunks)
    whole = split([data], max_line_bytes)
    assert split(chunks, max_line_bytes) == whole
    assert all(len(line) <= max_line_bytes for line in whole)
    lines = data.split(b"\n")
    if all(len(line) <= max_line_bytes for line in lines):
        expected = [line.removesuffix(b"\r") for line in lines]
        if not expected[-1].strip():
            expected.pop()  # an unterminated last line only counts when it holds something
        assert whole == expected
