"""`subagent-engine watch` against the bundled server on 127.0.0.1, as a user runs it.

The server is the real one (the scripted parent delegating over the real MCP endpoint to
in-process agents); the command runs as its own process (`python -m cli watch URL`, stdout a
pipe, so plain lines) and is held to what a user sees: the subagents in the tree, the ending,
the exit status for a run that finishes, one whose subagent fails, one stopped through
`POST /runs/<id>/stop` while watched, and a wrong token, each failure one line on stderr. A
connection cut mid-run (a TCP proxy that drops everything at once) is watched in-process: the
watcher reopens the stream with Last-Event-ID and still ends with the run.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from cli._terminal import Screen
from cli._watch_wire import watch_target
from cli.watch import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_NOT_FOUND,
    TOKEN_ENV,
    watch_run,
)
from demo import demo_agents
from engine import AgentSpec
from tests.helpers.cutting_proxy import CuttingProxy
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

ROOT = Path(__file__).resolve().parents[2]
RUN_INPUT = {"messages": [{"id": "u1", "role": "user", "content": "How does Trio stream events?"}]}
WATCH_TIMEOUT = 60


@asynccontextmanager
async def server(
    agents: list[AgentSpec] | None = None, config_text: str = ""
) -> AsyncIterator[tuple[str, Any]]:
    config = parse_config(config_text, "test.toml")
    async with (
        open_host(config, agents or demo_agents(pause=0), ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base, host


async def start(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{base}/runs", json=RUN_INPUT)
        assert response.status_code == 201, response.text
        started: dict[str, Any] = response.json()
        return started


async def watch_command(*args: str, env_token: str | None = None) -> tuple[int, str, str]:
    """`subagent-engine watch ARGS` as a process (`env_token` in its environment): its exit
    status, stdout and stderr."""
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    if env_token is not None:
        env[TOKEN_ENV] = env_token
    with trio.fail_after(WATCH_TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "cli", "watch", *args],
            cwd=ROOT,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def blocking_agents(started: trio.Event, release: trio.Event | None) -> list[AgentSpec]:
    """research and review: both say a line, then wait for `release` (None: forever)."""
    count = 0

    async def wait(task: LocalTask) -> str:
        nonlocal count
        await task.say("looking at ", task.objective)
        count += 1
        if count == 2:
            started.set()
        if release is None:
            await trio.sleep_forever()
        else:
            await release.wait()
        return f"summary of {task.objective}"

    return [
        AgentSpec(key="research", target=InProcessTarget(wait)),
        AgentSpec(key="review", target=InProcessTarget(wait)),
    ]


async def test_a_finished_run_is_drawn_and_exits_0() -> None:
    async with server() as (base, _):
        started = await start(base)
        status, out, err = await watch_command(
            f"{base}{started['events_url']}", "--token", started["viewer_token"]
        )
    assert (status, err) == (EXIT_FINISHED, "")
    lines = out.splitlines()
    assert any(line.startswith("    research [done") for line in lines), out
    assert any(line.startswith("    review [done") for line in lines), out
    assert any("delegate_to_agent [done" in line for line in lines), out
    assert lines[-1].strip()  # the run's answer, after the tree
    assert "\x1b" not in out


async def test_the_pages_link_and_the_environment_token_are_enough() -> None:
    async with server() as (base, _):
        started = await start(base)
        env_status, env_out, _ = await watch_command(
            f"{base}/runs/{started['run_id']}", env_token=started["viewer_token"]
        )
        link = f"{base}/#run={started['run_id']}&token={started['viewer_token']}"
        link_status, link_out, _ = await watch_command(link)
    assert env_status == EXIT_FINISHED == link_status
    assert "research [done" in env_out and "research [done" in link_out


async def test_a_failed_subagent_exits_1() -> None:
    async def broken(task: LocalTask) -> str:
        raise RuntimeError("the index is gone")

    agents = [
        AgentSpec(key="research", target=InProcessTarget(broken)),
        AgentSpec(key="review", target=InProcessTarget(broken)),
    ]
    async with server(agents) as (base, _):
        started = await start(base)
        status, out, _ = await watch_command(
            f"{base}{started['events_url']}?token={started['viewer_token']}"
        )
    assert status == EXIT_FAILED
    assert "research [failed" in out and "review [failed" in out


async def test_a_run_stopped_while_watched_exits_3() -> None:
    working = trio.Event()
    async with server(blocking_agents(working, None)) as (base, host):
        started = await start(base)
        url = f"{base}{started['events_url']}"
        token = started["viewer_token"]
        result: list[tuple[int, str, str]] = []

        async def watching() -> None:
            result.append(await watch_command(url, "--token", token))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watching)
            with trio.fail_after(WATCH_TIMEOUT):
                await working.wait()
            async with httpx.AsyncClient(timeout=30) as http:
                stopped = await http.post(
                    f"{base}/runs/{started['run_id']}/stop",
                    headers={"authorization": f"Bearer {token}"},
                )
                assert stopped.status_code == 200
        assert host.active_runs == 0
    [(status, out, err)] = result
    assert (status, err) == (EXIT_CANCELLED, "")
    assert "research [cancelled" in out and "review [cancelled" in out
    assert "The run was cancelled" in out


async def test_a_wrong_token_is_one_line_and_exits_5() -> None:
    async with server() as (base, _):
        started = await start(base)
        status, out, err = await watch_command(
            f"{base}{started['events_url']}", "--token", "not-the-viewer-token"
        )
    # The server answers 404 whether the run or its token is wrong (it tells a stranger nothing).
    assert (status, out) == (EXIT_NOT_FOUND, "")
    assert err.startswith("subagent-engine watch: no such run, or the token is not its (404")
    assert err.count("\n") == 1 and "Traceback" not in err


class Terminal(io.StringIO):
    """A pipe the watcher writes its plain lines to; `research_seen` is set once a line names
    the research subagent."""

    def __init__(self) -> None:
        super().__init__()
        self.research_seen = trio.Event()

    def write(self, text: str) -> int:
        if "research [" in text:
            self.research_seen.set()
        return super().write(text)


async def test_a_cut_connection_is_reopened_from_the_last_event() -> None:
    working, release = trio.Event(), trio.Event()
    agents = blocking_agents(working, release)
    async with server(agents, "[server]\nreconnect_ms = 10\n") as (base, _):
        port = int(base.rsplit(":", 1)[1])
        with CuttingProxy(port) as proxy:
            started = await start(base)
            target = watch_target(f"{proxy.url}{started['events_url']}")
            out, err = Terminal(), io.StringIO()
            screen = Screen(out=out, live=False, colour=False)
            result: list[int] = []

            async def watching() -> None:
                result.append(await watch_run(target, started["viewer_token"], screen, err))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watching)
                with trio.fail_after(WATCH_TIMEOUT):
                    await working.wait()
                    await out.research_seen.wait()
                assert proxy.cut() == 1
                release.set()
            heads = list(proxy.request_heads)
    assert result == [EXIT_FINISHED]
    [said] = err.getvalue().splitlines()
    assert "the connection was lost" in said or "ended the stream" in said
    cursor = said.split("reconnecting from event ", 1)[1].split(" ", 1)[0]
    assert len(heads) == 2
    assert "last-event-id" not in heads[0].lower()
    assert f"last-event-id: {cursor}" in heads[1].lower()
    text = out.getvalue()
    assert "research [done" in text and "review [done" in text
