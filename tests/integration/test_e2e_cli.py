"""End to end with the real CLIs on both sides: one as the parent, the other served over A2A.

The bundled server (`open_host` + `create_app`, configured from host TOML as a host would) runs
a pinned CLI (tests/cli_agents) as every run's parent; the remote subagent is the *other* pinned
CLI behind `subagent-engine a2a-serve --parent ...` in its own process, registered in the host
TOML by its card URL. Both CLIs talk to the one scripted model (tools/peers/scripted_model.py),
which tells their requests apart by API (Anthropic Messages for Claude Code, OpenAI Responses for
Codex) and replies from each request's own prompt:

- the parent's prompt has a `DELEGATE:` line naming the served agent; its objective is the served
  CLI's whole prompt. The served CLI has a delegate tool of its own (a2a-serve gives every CLI
  parent an MCP endpoint), so the scripted model makes it say `Delegating to research.` (its
  default `SAY`), call `research` (the fault-injecting server's `stream` agent, or `hang`), then
  answer `<FINAL line>` + `Delegation result: done: ...`. That answer is the served task's
  summary; `Delegating to research.` is streamed by the served CLI but is in neither that summary
  nor the parent's own prompt: the context-boundary token. (It does reach the parent model inside
  the lean result's `output`, which carries the served task's assistant-output text said once;
  the test pins that it is nowhere else.)

Cancellation and leaks are checked on processes, not just on events: the parent CLI's
`ParentProcess` (captured through the parent factory), the served CLI found under the a2a-serve
process in /proc, and, at the end, every process on the machine whose environment has this
test's throwaway HOME (the CLIs inherit HOME, a2a-serve inherits everything), which also catches
a CLI that was re-parented to init.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, TaskState

from adapters.agui import check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from engine import AgentSpec
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel, ServedAgent, served_agent
from web.config import HostConfig, parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

KINDS = {"claude": "claude-code", "codex": "codex"}
OTHER = {"claude": "codex", "codex": "claude"}
#: What the served CLI streams before its own tool call (the scripted model's default SAY for
#: an agent named `research`): in neither the served task's summary nor the parent's prompt.
STREAMED_ONLY = "Delegating to research."
#: The `stream` agent's summary, quoted in the served CLI's final answer.
STREAM_SUMMARY = "done: streamed 3 chunks and report.md"


# --- processes ---------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:  # gone, or not ours
        return b""


def _ppid(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # comm may hold spaces and parentheses: the fields after the last ')' are fixed.
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def _state(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rindex(b")") + 2 :].split()[0].decode() if stat else None


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")


def alive(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state != "Z"


def descendants(root: int) -> list[int]:
    """Live processes below `root` (by parent id)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if alive(child):
                found.append(child)
                todo.append(child)
    return found


def with_home(home: Path) -> list[int]:
    """Every live process on the machine whose environment has HOME=`home` (ours only: the
    environ of another user's process is unreadable)."""
    marker = b"HOME=" + str(home).encode()
    me = os.getpid()
    return [
        pid
        for pid in _pids()
        if pid != me and alive(pid) and marker in _read(f"/proc/{pid}/environ").split(b"\0")
    ]


def cli_pids(pids: list[int], cli: str) -> list[int]:
    """The `cli` processes (the npm wrapper and the program it runs) among `pids`."""
    return [p for p in pids if cli in cmdline(p) and "a2a-serve" not in cmdline(p)]


# --- the served CLI: `subagent-engine a2a-serve` -------------------------------------------------


def remote_toml(cli: str, bin_dir: Path, model_url: str, research_card_url: str) -> str:
    """The served CLI's config: its model and the `research` agent it delegates to."""
    return (
        "[parent]\n"
        f'kind = "{KINDS[cli]}"\n' + model_settings(cli, bin_dir, model_url) + "[[agents]]\n"
        'key = "research"\n'
        f'card_url = "{research_card_url}"\n'
    )


def model_settings(cli: str, bin_dir: Path, model_url: str) -> str:
    endpoint = model_url if cli == "claude" else f"{model_url}/v1"
    name = CODEX_MODEL if cli == "codex" else "claude-scripted"
    return (
        f'binary = "{bin_dir / cli}"\n'
        f'model_endpoint = "{endpoint}"\n'
        f'model = "{name}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
    )


async def remote_task_state(served: ServedAgent, task_id: str) -> tuple[str, str]:
    """(state name, status message text) of a task, by GetTask with the a2a-sdk client."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        card = await A2ACardResolver(http, served.base_url).get_agent_card()
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=["JSONRPC"])
        client = ClientFactory(config).create(card)
        try:
            task = await client.get_task(GetTaskRequest(id=task_id))
        finally:
            await client.close()
    message = "".join(part.text for part in task.status.message.parts)
    return TaskState.Name(task.status.state), message


@contextmanager
def served_cli(
    cli: str, tmp_path: Path, bin_dir: Path, model_url: str, research_card_url: str
) -> Iterator[ServedAgent]:
    """`a2a-serve --parent <cli>` whose CLI may delegate to `research`."""
    config = tmp_path / f"remote-{cli}.toml"
    config.write_text(remote_toml(cli, bin_dir, model_url, research_card_url))
    with served_agent(
        *("--parent", KINDS[cli], "--config", str(config), "--binary", str(bin_dir / cli)),
        *("--name", f"{cli} over A2A", "--cancel-grace", "8"),
        name=f"a2a_serve_{cli}",
    ) as served:
        yield served


# --- the parent CLI: the bundled server --------------------------------------------------------


def host_toml(cli: str, bin_dir: Path, model_url: str, *, tool_timeout: float, agents: str) -> str:
    return (
        "[parent]\n"
        f'kind = "{KINDS[cli]}"\n'
        + model_settings(cli, bin_dir, model_url)
        + f"tool_timeout = {tool_timeout}\n"
        + agents
    )


def a2a_agent(key: str, card_url: str) -> str:
    return f'[[agents]]\nkey = "{key}"\ncard_url = "{card_url}"\n'


@dataclass
class Host:
    base: str
    config: HostConfig
    parents: list[Any]  # every parent adapter the server made, in order


@asynccontextmanager
async def parent_server(
    cli: str,
    bin_dir: Path,
    model_url: str,
    *,
    tool_timeout: float = 120,
    agents_toml: str = "",
    agents: list[AgentSpec] | None = None,
) -> AsyncIterator[Host]:
    """The bundled server with `cli` as every run's parent; the agents of the TOML (A2A, by card
    URL) or `agents` (in-process)."""
    text = host_toml(cli, bin_dir, model_url, tool_timeout=tool_timeout, agents=agents_toml)
    config = parse_config(text, "host.toml")
    specs = config.agent_specs() if agents is None else agents
    make = config.parent_factory()
    parents: list[Any] = []

    def factory() -> Any:
        parents.append(make())
        return parents[-1]

    try:
        async with (
            open_host(config, specs, factory) as (host, _),
            serve_app(create_app(host, config, default_encoder_factory())) as base,
        ):
            yield Host(base, config, parents)
    finally:
        with trio.CancelScope(shield=True):
            for spec in specs:
                close = getattr(spec.target, "aclose", None)
                if close is not None:
                    await close()


def run_input(agent: str, objective: str) -> dict[str, Any]:
    text = f"Please ask {agent}.\nDELEGATE: " + json.dumps({"agent": agent, "objective": objective})
    return {"threadId": "t-e2e", "messages": [{"id": "u1", "role": "user", "content": text}]}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A throwaway HOME for the CLIs (and a2a-serve), and the model key the configs name.
    Returns that HOME: every process of this test carries it in its environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")
    return home


def events_of(body: bytes) -> tuple[list[dict[str, Any]], list[Any]]:
    frames = parse_sse(body)
    return [event for _, event in frames], [str(v) for v in check_frames(frames)]


def subagent_spoke(body: bytearray) -> bool:
    """Whether the complete frames of `body` hold a subagent's text."""
    complete = bytes(body[: body.rfind(b"\n\n") + 2])
    return any(
        event["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" in event
        for _, event in parse_sse(complete)
    )


def said_at(events: list[dict[str, Any]], sub: str, words: str) -> int:
    """The index of the text event of subagent `sub` with which its text first holds `words`."""
    text = ""
    for index, event in enumerate(events):
        if event["type"] == "TEXT_MESSAGE_CONTENT" and event.get("subagentRunId") == sub:
            text += event["delta"]
            if words in text:
                return index
    raise AssertionError(f"{words!r} never streamed")


def index_of(events: list[dict[str, Any]], match: Callable[[dict[str, Any]], bool]) -> int:
    return next(i for i, e in enumerate(events) if match(e))


def parent_delegate_call(events: list[dict[str, Any]]) -> dict[str, Any]:
    [call] = [
        e
        for e in events
        if e["type"] == "TOOL_CALL_START"
        and "subagentRunId" not in e
        and e["toolCallName"].endswith("delegate_to_agent")
    ]
    return call


def requests_after_the_call(model: ScriptedModel, cli: str) -> list[dict[str, Any]]:
    """The parent CLI's model requests that carry a result of its delegate call."""
    api = "anthropic" if cli == "claude" else "openai"
    found = []
    for record in model.model_requests():
        if record["api"] != api or not isinstance(record["body"], dict):
            continue
        body = record["body"]
        items = body.get("messages") or body.get("input") or []
        if isinstance(items, list) and any(delegate_results(items)):
            found.append(body)
    return found


def result_document(result: str) -> dict[str, Any]:
    """The DelegationResult JSON inside one tool result as the model saw it (Claude Code: the
    text is the JSON; Codex: "Wall time: ...\nOutput:\n" then the JSON), JSON-escaped once more
    by `delegate_results`."""
    text = json.loads(result)
    if isinstance(text, dict):  # a tool_result block: its content, a string or text parts
        content = text.get("content")
        text = (
            content
            if isinstance(content, str)
            else "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))
        )
    if not isinstance(text, str):
        text = json.dumps(text)
    document, _ = json.JSONDecoder().raw_decode(text, text.index("{"))
    assert isinstance(document, dict)
    return document


def delegate_results(items: list[Any]) -> list[str]:
    """The text of every tool result in a request's conversation (both APIs)."""
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            out.append(json.dumps(item.get("output")))
        content = item.get("content")
        if isinstance(content, list):
            out += [
                json.dumps(b)
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
    return out


# --- 1 and 2: the parent CLI delegates to the other CLI, served over A2A ------------------------


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_a_cli_parent_streams_the_other_cli_served_over_a2a_under_its_call(
    cli: str,
    cli_bin: Path,
    model: ScriptedModel,
    cli_env: Path,
    tmp_path: Path,
    a2a_server: Any,
) -> None:
    remote = OTHER[cli]
    final = f"FINAL-{remote}-answered"
    objective = f"FINAL: {final}\nHow do Trio nurseries cancel children?"
    with served_cli(
        remote, tmp_path, cli_bin, model.base_url, a2a_server.card_url("stream")
    ) as served:
        async with (
            parent_server(
                cli, cli_bin, model.base_url, agents_toml=a2a_agent(remote, served.card_url)
            ) as host,
            httpx.AsyncClient(timeout=120) as http,
        ):
            with trio.fail_after(90):
                response = await http.post(f"{host.base}/agui", json=run_input(remote, objective))
        health = await served.idle()
        served_log = served.stderr()
    assert response.status_code == 200, response.text
    events, violations = events_of(response.content)
    assert violations == []
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", (kinds, served_log)
    assert kinds.count("RUN_FINISHED") == 1 and "outcome" not in events[-1], events[-1]
    assert "RUN_ERROR" not in kinds and "SUBAGENT_ERROR" not in kinds, served_log

    # The served CLI is a subagent under the parent CLI's own delegate call.
    call = parent_delegate_call(events)
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    # The host registered the agent by key only, so the subagent takes the card's name.
    assert started["name"] == f"{remote} over A2A"
    assert started["parentToolCallId"] == call["toolCallId"]
    assert started["metadata"]["agentKey"] == remote and started["metadata"]["protocol"] == "a2a"
    if cli == "claude":
        assert call["toolCallId"].startswith("toolu_")  # the model's id, as MCP _meta sent it
    sub = started["subagentRunId"]
    sub_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == sub
    )
    # Its text streamed live: what it said before its own tool call, then its answer.
    assert STREAMED_ONLY in sub_text and final in sub_text and STREAM_SUMMARY in sub_text, sub_text
    first_text = index_of(
        events, lambda e: e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == sub
    )
    said = said_at(events, sub, STREAMED_ONLY)
    position = {
        "end": index_of(
            events, lambda e: e["type"] == "TOOL_CALL_END" and e["toolCallId"] == call["toolCallId"]
        ),
        "started": kinds.index("SUBAGENT_STARTED"),
        "finished": kinds.index("SUBAGENT_FINISHED"),
        "result": index_of(
            events,
            lambda e: e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call["toolCallId"],
        ),
    }
    assert position["end"] < position["started"] < first_text <= said
    assert said < position["finished"] < position["result"]
    [finished] = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert finished["outcome"] == {"type": "success"}
    summary = finished["result"]
    assert summary.startswith(final) and STREAM_SUMMARY in summary, summary
    assert STREAMED_ONLY not in summary

    # The parent CLI finished its turn quoting the structured result.
    parent_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e
    )
    assert f"Delegation result: {final}" in parent_text, parent_text

    # The context boundary: the parent's model got the result (its summary, which only the
    # served CLI's own delegation could produce). What the served CLI streamed is nowhere in
    # the request but inside that structured result's `output` (the lean result: the served
    # task's assistant-output text said once): not anywhere else in it, not as progress.
    [after] = requests_after_the_call(model, cli)
    conversation = after.get("messages") or after.get("input") or []
    [result_text] = delegate_results(conversation)
    document = result_document(result_text)
    assert document["status"] == "completed" and summary in document["output"]["text"], document
    assert document["parent_tool_call_id"] == call["toolCallId"]
    assert json.dumps(after).count(STREAMED_ONLY) == result_text.count(STREAMED_ONLY)
    assert STREAMED_ONLY in document["output"]["text"]
    beside_the_output = {k: v for k, v in document.items() if k != "output"}
    assert STREAMED_ONLY not in json.dumps(beside_the_output)
    # The served CLI's own requests: it was told the objective, and it quoted its result.
    other_api = "openai" if remote == "codex" else "anthropic"
    served_requests = [r for r in model.model_requests() if r["api"] == other_api]
    assert any(r["reply"] and r["reply"].get("kind") == "tool_call" for r in served_requests)

    assert health == {**health, "tasks_running": 0, "parent_threads": 0}
    assert [p.process.returncode for p in host.parents] == [0]
    assert with_home(cli_env) == [], [cmdline(p) for p in with_home(cli_env)]


# --- 3: stopping the run mid-delegation --------------------------------------------------------


async def test_stopping_a_claude_run_mid_delegation_cancels_the_served_codex_task(
    cli_bin: Path, model: ScriptedModel, cli_env: Path, tmp_path: Path, a2a_server: Any
) -> None:
    """Claude -> engine -> A2A -> a2a-serve -> Codex -> its engine -> A2A `hang`, then stop."""
    hangs_before = len(a2a_server.entries("hang", "messages"))
    body = bytearray()
    with served_cli(
        "codex", tmp_path, cli_bin, model.base_url, a2a_server.card_url("hang")
    ) as served:
        async with (
            parent_server(
                "claude", cli_bin, model.base_url, agents_toml=a2a_agent("codex", served.card_url)
            ) as host,
            httpx.AsyncClient(timeout=60) as http,
        ):
            started = (
                await http.post(f"{host.base}/runs", json=run_input("codex", "Look it up."))
            ).json()
            auth = {"authorization": f"Bearer {started['viewer_token']}"}
            codex_pids: list[int] = []
            stopped: dict[str, Any] = {}
            with trio.fail_after(60):
                async with http.stream(
                    "GET", f"{host.base}{started['events_url']}", headers=auth
                ) as stream:
                    text_seen = False
                    async for chunk in stream.aiter_bytes():
                        body.extend(chunk)
                        if text_seen or not subagent_spoke(body):
                            continue
                        # Codex streamed its first words: it is about to call `hang`. Its
                        # delegation reaches the hanging agent in another process: polled.
                        text_seen = True
                        while len(a2a_server.entries("hang", "messages")) == hangs_before:  # noqa: ASYNC110
                            await trio.sleep(0.05)
                        codex_pids = cli_pids(descendants(served.pid), "codex")
                        assert codex_pids, "no Codex process under a2a-serve"
                        assert served.health()["tasks_running"] == 1
                        [claude] = host.parents
                        assert claude.process is not None and alive(claude.process.pid)
                        stopped = (
                            await http.post(
                                f"{host.base}/runs/{started['run_id']}/stop", headers=auth
                            )
                        ).json()
            # The stream ended with the run: no Claude is left.
            claude_left = cli_pids(with_home(cli_env), "claude")
            [claude] = host.parents
            claude_pid = claude.process.pid
            claude_exit = claude.process.returncode
            health = await served.idle()
            events, violations = events_of(bytes(body))
            [announced] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
            remote_task = announced.get("metadata", {}).get("remoteTaskId")
            task_state = await remote_task_state(served, remote_task) if remote_task else None
        served_log = served.stderr()
    assert stopped.get("stopped") is True
    assert violations == []
    [error] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert error["code"] == "cancelled", error
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
    # The parent CLI exited (and was reaped).
    assert claude_exit is not None and not alive(claude_pid) and claude_left == []
    # At the remote: the served task is canceled, Codex stopped in time, nothing runs.
    assert remote_task is not None, announced
    assert task_state is not None and task_state[0] == "TASK_STATE_CANCELED", task_state
    assert "still stopping" not in task_state[1], served_log
    assert health == {**health, "tasks_running": 0, "parent_threads": 0}, served_log
    assert codex_pids and not any(alive(p) for p in codex_pids)
    # And the cascade went one level further: Codex's own delegation to `hang` was cancelled.
    hang_task = a2a_server.entries("hang", "messages")[hangs_before]["task_id"]
    [cancel] = a2a_server.entries("hang", "cancels", hang_task)
    assert cancel["outcome"] == "TASK_STATE_CANCELED"
    assert with_home(cli_env) == [], [cmdline(p) for p in with_home(cli_env)]


# --- 4: the parent CLI's tool timeout cancels the delegation ---------------------------------


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_the_cli_tool_timeout_cancels_the_delegation_and_the_run_still_finishes(
    cli: str, cli_bin: Path, model: ScriptedModel, cli_env: Path
) -> None:
    asked = trio.Event()
    seen: list[str] = []

    async def never_answers(task: LocalTask) -> str:
        asked.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append("cancelled")
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    agents = [AgentSpec(key="slowpoke", target=InProcessTarget(never_answers))]
    started_at = time.monotonic()
    async with (
        parent_server(cli, cli_bin, model.base_url, tool_timeout=3, agents=agents) as host,
        httpx.AsyncClient(timeout=60) as http,
    ):
        with trio.fail_after(60):
            response = await http.post(
                f"{host.base}/agui", json=run_input("slowpoke", "Take forever.")
            )
    elapsed = time.monotonic() - started_at
    assert response.status_code == 200
    events, violations = events_of(response.content)
    assert violations == []
    assert asked.is_set() and seen == ["cancelled"]  # the agent's task saw the cancellation
    [error] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert error["code"] in ("cancelled", "remote_timeout"), error
    call = parent_delegate_call(events)
    kinds = [e["type"] for e in events]
    result_at = index_of(
        events, lambda e: e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call["toolCallId"]
    )
    assert kinds.index("SUBAGENT_ERROR") < result_at
    # The CLI got a tool error and still finished its turn.
    assert kinds[-1] == "RUN_FINISHED" and "outcome" not in events[-1], events[-1]
    parent_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e
    )
    assert "Delegation result:" in parent_text, parent_text
    assert "timed out" in parent_text  # what the CLI told its model: its own timeout
    assert elapsed < 40
    assert [p.process.returncode for p in host.parents] == [0]
    assert with_home(cli_env) == []


async def test_claude_tool_timeout_cancels_the_task_of_an_a2a_remote_at_the_remote(
    cli_bin: Path, model: ScriptedModel, cli_env: Path
) -> None:
    """The same over A2A: the remote is `a2a-serve --script slow` (streams for about 15 s)."""
    with served_agent("--parent", "scripted", "--script", "slow", name="a2a_serve_slow") as served:
        async with (
            parent_server(
                "claude",
                cli_bin,
                model.base_url,
                tool_timeout=3,
                agents_toml=a2a_agent("slow", served.card_url),
            ) as host,
            httpx.AsyncClient(timeout=60) as http,
        ):
            with trio.fail_after(60):
                response = await http.post(
                    f"{host.base}/agui", json=run_input("slow", "Go slowly.")
                )
            events, violations = events_of(response.content)
            [announced] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
            remote_task = announced.get("metadata", {}).get("remoteTaskId")
            health = await served.idle()
            task_state = await remote_task_state(served, remote_task) if remote_task else None
    assert violations == []
    [error] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert error["code"] in ("cancelled", "remote_timeout"), error
    sub_text = "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT"
        and e.get("subagentRunId") == announced["subagentRunId"]
    )
    assert sub_text.startswith("chunk 0 ") and "chunk 299" not in sub_text  # cut short, live
    assert events[-1]["type"] == "RUN_FINISHED" and "outcome" not in events[-1], events[-1]
    assert task_state is not None and task_state[0] == "TASK_STATE_CANCELED", task_state
    assert health == {**health, "tasks_running": 0, "parent_threads": 0}
    assert [p.process.returncode for p in host.parents] == [0]
    assert with_home(cli_env) == []
