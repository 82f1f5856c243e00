"""The real Claude Code and Codex CLIs as parent agents, offline, against a scripted model.

Each test opens a run on an Engine with the MCP endpoint provider and an in-process `research`
agent, starts the pinned CLI binary (tests/cli_agents, `npm ci`) the way a host runs it (stdin
from /dev/null, a throwaway HOME / CODEX_HOME, the model base URL pointed
at `tools.peers.scripted_model`, the run's MCP endpoint and token in the CLI's MCP config)
and checks what the CLI and the engine saw: the CLI called `delegate_to_agent`, the delegation's
journal events carry the CLI's own tool-call id, the CLI exits 0 and its final text quotes the
result. SIGINT while the tool call is in flight must end the delegation as cancelled.

The CLIs' stdout of these runs is what the parent adapters parse: run with
`SUBAGENT_ENGINE_UPDATE_CLI_FIXTURES=1` to rewrite tests/fixtures/cli/*.jsonl from the real
binaries (ports, temporary paths and the token replaced by placeholders; see the README there).
Without Node.js and npm the tests fail, saying what to install (`./dev test` installs both).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import DelegationEndpoint
from engine import AgentSpec, Engine, Kind, Run, RunEndpoint, Status
from tests.helpers import REPO_ROOT
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "cli"
UPDATE_FIXTURES = os.environ.get("SUBAGENT_ENGINE_UPDATE_CLI_FIXTURES") == "1"
CLI_TIMEOUT = 60.0
TOKEN_ENV = "SUBAGENTS_MCP_TOKEN"
CLIS = ("claude", "codex")
#: Stalls the in-process agent until the test ends it (the SIGINT tests).
HANG = "[hang]"


# --- the scripted model endpoint (tools/peers/scripted_model.py) ------------------------------


# --- launching a CLI ------------------------------------------------------------------------------


@dataclass
class CliRun:
    cli: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    lines: list[dict[str, Any]]


def cli_command(
    cli: str, bin_dir: Path, prompt: str, endpoint: RunEndpoint, model_url: str, home: Path
) -> tuple[list[str], dict[str, str], Path]:
    """(argv, env, cwd) that run `cli` once, offline, against the scripted model and the run's
    MCP endpoint. The token is passed in the environment only (never in argv)."""
    workdir = home / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        TOKEN_ENV: endpoint.token,
        MODEL_KEY_ENV: "sk-scripted-not-a-key",
    }
    name = endpoint.server_name
    if cli == "claude":
        server = {
            "type": "http",
            "url": endpoint.url,
            # Claude Code expands ${VAR} in MCP config values: the token stays out of argv.
            "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
            "timeout": 600_000,
        }
        argv = [
            str(bin_dir / "claude"),
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--mcp-config",
            json.dumps({"mcpServers": {name: server}}),
            "--strict-mcp-config",
            "--allowedTools",
            f"mcp__{name}__delegate_to_agent",
        ]
        env.update(
            ANTHROPIC_BASE_URL=model_url,
            ANTHROPIC_API_KEY=env[MODEL_KEY_ENV],
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            ENABLE_TOOL_SEARCH="false",  # 2.1.332 hides MCP tools behind ToolSearch otherwise
        )
        return argv, env, workdir
    codex_home = home / "codex"
    codex_home.mkdir(exist_ok=True)
    provider = (
        f'{{name="scripted", base_url="{model_url}/v1", env_key="{MODEL_KEY_ENV}", '
        'wire_api="responses"}'
    )
    mcp_server = (
        f'{{url="{endpoint.url}", bearer_token_env_var="{TOKEN_ENV}", '
        'default_tools_approval_mode="approve", required=true, tool_timeout_sec=600}'
    )
    argv = [
        str(bin_dir / "codex"),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "-C",
        str(workdir),
        "-c",
        f"model_providers.scripted={provider}",
        "-c",
        'model_provider="scripted"',
        "-c",
        f'model="{CODEX_MODEL}"',
        "-c",
        f"mcp_servers.{name}={mcp_server}",
        prompt,
    ]
    env["CODEX_HOME"] = str(codex_home)
    return argv, env, workdir


async def run_cli(
    cli: str,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    interrupt_when: trio.Event | None = None,
) -> CliRun:
    """Run the CLI to its end (stdin /dev/null); with `interrupt_when`, send it SIGINT once that
    event is set. The CLI's process group is killed if it outlives `CLI_TIMEOUT`."""
    start = trio.current_time()
    out: list[bytes] = []
    err: list[bytes] = []
    process = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(cwd),
        start_new_session=True,
    )

    async def drain(stream: Any, into: list[bytes]) -> None:
        async for chunk in stream:
            into.append(chunk)

    async def interrupt(event: trio.Event) -> None:
        await event.wait()
        if process.returncode is None:
            process.send_signal(signal.SIGINT)

    try:
        with trio.fail_after(CLI_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, process.stdout, out)
                nursery.start_soon(drain, process.stderr, err)
                async with trio.open_nursery() as waiting:
                    if interrupt_when is not None:
                        waiting.start_soon(interrupt, interrupt_when)
                    await process.wait()
                    waiting.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()
    stdout = b"".join(out).decode()
    stderr = b"".join(err).decode(errors="replace")
    try:
        lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    except ValueError:
        pytest.fail(f"{cli} printed a line that is not JSON:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    seconds = trio.current_time() - start
    return CliRun(cli, process.returncode, stdout, stderr, seconds, lines)


def save_fixture(name: str, run: CliRun, endpoint: RunEndpoint, model_url: str, home: Path) -> None:
    """Write the CLI's stdout to tests/fixtures/cli/<name>.jsonl when asked to, with what
    differs between machines and runs replaced by placeholders."""
    if not UPDATE_FIXTURES:
        return
    text = run.stdout.replace(endpoint.token, "<MCP_TOKEN>")
    text = text.replace(endpoint.url, "<MCP_URL>").replace(model_url, "<MODEL_URL>")
    text = text.replace(str(home), "<HOME>")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<PORT>", text)
    text = re.sub(r"/tmp/cc-socks/\d+\.sock", "/tmp/cc-socks/<PID>.sock", text)
    text = re.sub(r"/\.claude/projects/[^/\"]+/", "/.claude/projects/<PROJECT>/", text)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{name}.jsonl").write_text(text)


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Harness:
    endpoint: DelegationEndpoint
    engine: Engine
    run: Run
    agent_started: trio.Event


async def research(task: LocalTask, started: trio.Event) -> str:
    await task.say("Looked at ", task.objective)
    started.set()
    if HANG in task.objective:
        await trio.sleep_forever()
    return f"Found: {task.objective}"


def journal_events(run: Run) -> Any:
    return run.journal.store.read_after(0, run.journal.head)


async def delegation_terminal(run: Run) -> Any:
    """The first delegation terminal event of the run's journal (waits for it)."""
    async with run.events() as subscription:
        async for entry in subscription:
            if entry.event.kind in Kind.DELEGATION_TERMINALS:
                return entry.event
    raise AssertionError("the run ended without a delegation terminal event")


def prompt_for(objective: str, *, think: str | None = None) -> str:
    lines = ["Please find out about Trio nurseries."]
    if think:
        lines.append(f"THINK: {think}")
    lines.append("DELEGATE: " + json.dumps({"agent": "research", "objective": objective}))
    return "\n".join(lines)


def delegate_call(cli: str, run: CliRun) -> tuple[str | None, dict[str, Any]]:
    """(tool-call id as the CLI's output shows it, the call as shown) of its one delegate call."""
    if cli == "claude":
        uses = [
            block
            for line in run.lines
            if line["type"] == "assistant"
            for block in line["message"]["content"]
            if block["type"] == "tool_use"
        ]
        assert [u["name"] for u in uses] == ["mcp__subagents__delegate_to_agent"]
        return uses[0]["id"], uses[0]
    calls = [
        line["item"]
        for line in run.lines
        if line["type"] == "item.completed" and line["item"]["type"] == "mcp_tool_call"
    ]
    assert [(c["server"], c["tool"]) for c in calls] == [("subagents", "delegate_to_agent")]
    # Codex's JSONL names items item_N and never shows the model's call_id: only the
    # structured result (written by our endpoint from the tools/call _meta) carries it.
    return None, calls[0]


def final_text(cli: str, run: CliRun) -> str:
    if cli == "claude":
        result = run.lines[-1]
        assert result["type"] == "result"
        assert result["subtype"] == "success" and result["is_error"] is False
        return str(result["result"])
    assert run.lines[-1]["type"] == "turn.completed"
    messages = [
        line["item"]["text"]
        for line in run.lines
        if line["type"] == "item.completed" and line["item"]["type"] == "agent_message"
    ]
    return str(messages[-1])


@pytest.fixture
async def harness() -> Any:
    started = trio.Event()

    async def agent(task: LocalTask) -> str:
        return await research(task, started)

    agents = [AgentSpec(key="research", target=InProcessTarget(agent))]
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(agents, endpoints=endpoint) as eng,
        eng.open_run() as run,
    ):
        yield Harness(endpoint, eng, run, started)


async def launch(
    cli: str,
    harness: Harness,
    model: ScriptedModel,
    bin_dir: Path,
    tmp_path: Path,
    prompt: str,
    *,
    extra: tuple[str, ...] = (),
    interrupt_when: trio.Event | None = None,
) -> tuple[CliRun, RunEndpoint, Path]:
    endpoint = harness.run.endpoint
    assert endpoint is not None
    home = tmp_path / "home"
    argv, env, cwd = cli_command(cli, bin_dir, prompt, endpoint, model.base_url, home)
    argv += extra  # options that go after everything else (Claude Code's only)
    run = await run_cli(cli, argv, env, cwd, interrupt_when=interrupt_when)
    return run, endpoint, home


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cli", CLIS)
async def test_cli_delegates_over_mcp_with_its_own_tool_call_id(
    cli: str, cli_bin: Path, model: ScriptedModel, harness: Harness, tmp_path: Path
) -> None:
    objective = "How do Trio nurseries cancel children?"
    result, endpoint, home = await launch(
        cli, harness, model, cli_bin, tmp_path, prompt_for(objective)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    shown_id, call = delegate_call(cli, result)
    assert call.get("input", call.get("arguments")) == {"agent": "research", "objective": objective}

    # The model was offered the tool directly (not behind tool search) and called it once.
    requests = model.model_requests()
    calls = [r["reply"] for r in requests if r["reply"]["kind"] == "tool_call"]
    assert len(calls) == 1
    if cli == "claude":
        assert calls[0]["tool_name"] == "mcp__subagents__delegate_to_agent"
        assert calls[0]["tool_call_id"] == shown_id
        assert {(r["method"], r["path"], r["query"]) for r in model.requests()} == {
            ("POST", "/v1/messages", "beta=true")
        }
    else:
        assert (calls[0]["namespace"], calls[0]["tool_name"]) == (
            "mcp__subagents",
            "delegate_to_agent",
        )
        shown_id = call["result"]["structured_content"]["parent_tool_call_id"]
        assert calls[0]["tool_call_id"] == shown_id
        assert {(r["method"], r["path"]) for r in model.requests()} == {("POST", "/v1/responses")}
    assert len(requests) == 2  # the tool call, then the answer after the tool result

    # Strong correlation: every event of the delegation sits under the CLI's tool call.
    [delegation] = harness.run.delegations()
    assert delegation.status == Status.COMPLETED
    assert delegation.parent_tool_call_id == shown_id
    mine = [e.event for e in await journal_events(harness.run) if e.event.delegation_id]
    assert mine[0].kind == Kind.STARTED and mine[-1].kind == Kind.FINISHED
    assert {e.parent_tool_call_id for e in mine} == {shown_id}

    assert f"Delegation result: Found: {objective}" in final_text(cli, result)
    save_fixture(f"{cli}_delegate", result, endpoint, model.base_url, home)


@pytest.mark.parametrize("cli", CLIS)
async def test_thinking_text_and_tool_call_in_one_reply(
    cli: str, cli_bin: Path, model: ScriptedModel, harness: Harness, tmp_path: Path
) -> None:
    thought = "The research agent should look this up."
    prompt = prompt_for("Trio nurseries", think=thought)
    # Claude streams partial messages (text and thinking deltas) as stream_event lines.
    extra = ("--include-partial-messages",) if cli == "claude" else ()
    result, endpoint, home = await launch(
        cli, harness, model, cli_bin, tmp_path, prompt, extra=extra
    )
    assert result.returncode == 0, result.stderr[-3000:]
    delegate_call(cli, result)
    if cli == "claude":
        blocks = [
            block
            for line in result.lines
            if line["type"] == "assistant"
            for block in line["message"]["content"]
        ]
        assert [b["type"] for b in blocks[:3]] == ["thinking", "text", "tool_use"]
        assert blocks[0]["thinking"] == thought
        deltas = [
            line["event"]["delta"]
            for line in result.lines
            if line["type"] == "stream_event" and line["event"]["type"] == "content_block_delta"
        ]
        thinking = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
        assert thinking == thought
        assert any(d["type"] == "input_json_delta" for d in deltas)
    else:
        items = [line["item"] for line in result.lines if line["type"] == "item.completed"]
        kinds = [i["type"] for i in items if i["type"] != "error"]
        assert kinds == ["reasoning", "agent_message", "mcp_tool_call", "agent_message"]
        assert items[[i["type"] for i in items].index("reasoning")]["text"] == thought
    [delegation] = harness.run.delegations()
    assert delegation.status == Status.COMPLETED
    save_fixture(
        f"{cli}_thinking{'_partial' if extra else ''}", result, endpoint, model.base_url, home
    )


@pytest.mark.parametrize("cli", CLIS)
async def test_sigint_mid_tool_call_cancels_the_delegation(
    cli: str, cli_bin: Path, model: ScriptedModel, harness: Harness, tmp_path: Path
) -> None:
    interrupt = trio.Event()

    async def when_blocked() -> None:
        await harness.agent_started.wait()
        await trio.sleep(0.3)  # the CLI is now waiting for the tool result
        interrupt.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_blocked)
        result, endpoint, home = await launch(
            cli,
            harness,
            model,
            cli_bin,
            tmp_path,
            prompt_for(f"Wait forever {HANG}"),
            interrupt_when=interrupt,
        )
        nursery.cancel_scope.cancel()  # the agent may never have started
    # Claude Code ends the turn and exits 0; Codex exits 1 with the call still in_progress.
    assert result.returncode == (0 if cli == "claude" else 1), result.stderr[-3000:]
    if cli == "claude":
        uses = [
            b["id"]
            for line in result.lines
            if line["type"] == "assistant"
            for b in line["message"]["content"]
            if b["type"] == "tool_use"
        ]
        assert len(uses) == 1
        shown_id: str = uses[0]
    else:
        assert result.lines[-1]["type"] == "item.started"
        assert result.lines[-1]["item"]["status"] == "in_progress"
        [reply] = [r["reply"] for r in model.model_requests()]
        shown_id = reply["tool_call_id"]
    # The CLI's interrupted call reaches the endpoint (its request ends, or a cancel
    # notification / session DELETE arrives): the delegation ends cancelled.
    with trio.fail_after(10):
        terminal = await delegation_terminal(harness.run)
    assert terminal.kind == Kind.CANCELLED
    [delegation] = harness.run.delegations()
    assert delegation.status == Status.CANCELLED
    assert delegation.parent_tool_call_id == shown_id
    save_fixture(f"{cli}_sigint", result, endpoint, model.base_url, home)


@pytest.mark.parametrize("cli", CLIS)
async def test_model_error_fails_the_turn(
    cli: str, cli_bin: Path, model: ScriptedModel, harness: Harness, tmp_path: Path
) -> None:
    result, endpoint, home = await launch(
        cli, harness, model, cli_bin, tmp_path, "Say hello.\nMODEL_ERROR: 400"
    )
    assert result.returncode == 1
    last = result.lines[-1]
    if cli == "claude":
        assert last["type"] == "result" and last["is_error"] is True
        assert last["api_error_status"] == 400
    else:
        assert last["type"] == "turn.failed"
        assert "scripted model error" in last["error"]["message"]
    assert harness.run.delegations() == []
    save_fixture(f"{cli}_model_error", result, endpoint, model.base_url, home)
