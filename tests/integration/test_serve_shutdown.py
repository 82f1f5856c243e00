"""Stopping `subagent-engine serve` and `demo` with a signal while runs stream to viewers.

Real processes, real signals: the server is a child process on 127.0.0.1 whose runs delegate to
the fault-injecting a2a-sdk server (tasks that never finish on their own). On SIGINT every
viewer's stream (SSE, WebSocket, a `POST /agui` stream) must end with the run's terminal and pass
the AG-UI checker, a run asked for while the server drains is refused with a typed 503, every
remote task is cancelled, the SQLite store records the runs as ended, and the process exits 0
within its grace period. A second SIGINT during a drain that would take long exits at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from adapters.agui import check_frames, parse_sse
from tests.helpers import REPO_ROOT
from tests.helpers.peers import A2AFaultyServer
from tests.helpers.websocket import open_websocket
from web.config import StoreEntry
from web.server import FORCED_EXIT_SECONDS, SHUTDOWN_REASON
from web.stores import open_store

pytestmark = pytest.mark.slow

#: How long a server may take to exit after SIGINT beyond its drain (store, listener, MCP).
EXIT_MARGIN = 5.0


@contextmanager
def serve_process(argv: list[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`python -m cli <argv>` in its own process group; (the process, its base URL). Its
    stdout is left for the test to read (the announcement lines, then the stopping lines)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", *argv],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if line.startswith(("subagent-engine serving on http", "subagent-engine demo on http")):
                url = next(word for word in line.split() if word.startswith("http://"))
                url = url.rstrip("/")
                break
        assert url, "the server did not announce its URL"
        yield proc, url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def write_config(tmp_path: Path, card_url: str, *, grace: float, cancel_timeout: float) -> Path:
    path = tmp_path / "host.toml"
    agents = "".join(
        f'[[agents]]\nkey = "{key}"\ncard_url = "{card_url}"\n'
        f"[agents.policy]\ncancel_timeout = {cancel_timeout}\n\n"
        for key in ("research", "review")
    )
    path.write_text(
        f"[server]\nport = 0\nshutdown_grace_seconds = {grace}\n\n"
        f'[store]\nkind = "sqlite"\npath = "{tmp_path / "runs.sqlite3"}"\n\n{agents}'
    )
    return path


def user_input(prompt: str) -> dict[str, Any]:
    return {"messages": [{"id": "m1", "role": "user", "content": prompt}]}


class Capture:
    """What one viewer received: `(cursor, event)` frames, and whether its stream ended."""

    def __init__(self) -> None:
        self.frames: list[tuple[int | None, dict[str, Any]]] = []
        self.first = trio.Event()
        self.closed = trio.Event()
        #: A WebSocket's close code.
        self.close_code: int | None = None

        self._added = trio.Event()

    def add(self, frames: list[tuple[int | None, dict[str, Any]]]) -> None:
        self.frames.extend(frames)
        if self.frames:
            self.first.set()
        self._added.set()
        self._added = trio.Event()

    async def seen(self, event_type: str) -> None:
        """Wait until an event of `event_type` arrived."""
        while not any(event["type"] == event_type for _, event in self.frames):
            await self._added.wait()

    def assert_ended_by_shutdown(self) -> None:
        assert self.closed.is_set()
        assert check_frames(self.frames) == []
        last = self.frames[-1][1]
        assert last["type"] == "RUN_FINISHED", last
        assert last["outcome"] == {"type": "cancelled"}
        assert last["metadata"] == {"reason": SHUTDOWN_REASON}


async def read_sse(response: httpx.Response, capture: Capture) -> None:
    buffer = b""
    try:
        async for chunk in response.aiter_bytes():
            buffer += chunk
            complete, _, buffer = buffer.rpartition(b"\n\n")
            if complete:
                capture.add(parse_sse(complete + b"\n\n"))
    finally:
        capture.closed.set()


async def sse_viewer(client: httpx.AsyncClient, url: str, capture: Capture) -> None:
    async with client.stream("GET", url) as response:
        assert response.status_code == 200
        await read_sse(response, capture)


async def agui_stream(client: httpx.AsyncClient, url: str, prompt: str, capture: Capture) -> None:
    async with client.stream("POST", f"{url}/agui", json=user_input(prompt)) as response:
        assert response.status_code == 200
        await read_sse(response, capture)


async def ws_viewer(url: str, capture: Capture) -> None:
    try:
        async with open_websocket(url) as ws:
            while True:
                try:
                    message = json.loads(await ws.get_message())
                except ConnectionClosed as exc:
                    capture.close_code = exc.reason.code if exc.reason is not None else None
                    return
                capture.add([(message["id"], message["data"])])
    finally:
        capture.closed.set()


async def wait_for(condition: Any, within: float, what: str) -> None:
    """Poll `condition()` (another process's state: nothing to wait on) until it holds."""
    with trio.move_on_after(within):
        while True:
            if condition():
                return
            await trio.sleep(0.05)
    pytest.fail(f"not within {within} s: {what}")


def remote_tasks(server: A2AFaultyServer, scenario: str, marker: str) -> set[str]:
    return {
        entry["task_id"]
        for entry in server.entries(scenario, "messages")
        if marker in (entry.get("text") or "")
    }


def cancelled_tasks(server: A2AFaultyServer, scenario: str) -> set[str]:
    return {entry["task_id"] for entry in server.entries(scenario, "cancels")}


async def read_until(proc: subprocess.Popen[str], prefix: str) -> str:
    """The first line of the process's stdout from here that starts with `prefix`."""
    assert proc.stdout is not None
    while True:
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line, f"the process ended its output before {prefix!r}"
        if line.startswith(prefix):
            return line


@asynccontextmanager
async def viewers_of_two_runs(
    url: str, prompt: str
) -> AsyncIterator[tuple[dict[str, Capture], list[str]]]:
    """Two runs, one started with `POST /runs` and watched over SSE and WebSocket, one a
    `POST /agui` stream; yields the captures (once each has its first event) and the run ids."""
    captures = {"sse": Capture(), "ws": Capture(), "agui": Capture()}
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client:
        started = await client.post(f"{url}/runs", json=user_input(prompt))
        assert started.status_code == 201
        run = started.json()
        token = run["viewer_token"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                sse_viewer, client, f"{url}{run['events_url']}?token={token}", captures["sse"]
            )
            ws_url = url.replace("http://", "ws://") + f"{run['websocket_url']}?token={token}"
            nursery.start_soon(ws_viewer, ws_url, captures["ws"])
            nursery.start_soon(agui_stream, client, url, prompt, captures["agui"])
            with trio.fail_after(20):
                for capture in captures.values():
                    await capture.first.wait()
            yield captures, [run["run_id"]]
            with trio.fail_after(30):
                for capture in captures.values():
                    await capture.closed.wait()


async def test_sigint_ends_every_stream_with_its_terminal_then_exits_0(
    tmp_path: Path, a2a_server: A2AFaultyServer
) -> None:
    marker = f"shutdown-{uuid.uuid4().hex[:8]}"
    grace = 15.0
    # research never finishes; review's cancel takes ~3 s, so the drain lasts long enough to
    # see a new run refused.
    config = tmp_path / "host.toml"
    config.write_text(
        f"[server]\nport = 0\nshutdown_grace_seconds = {grace}\n\n"
        f'[store]\nkind = "sqlite"\npath = "{tmp_path / "runs.sqlite3"}"\n\n'
        f'[[agents]]\nkey = "research"\ncard_url = "{a2a_server.card_url("hang")}"\n\n'
        f'[[agents]]\nkey = "review"\ncard_url = "{a2a_server.card_url("slowcancel")}"\n'
    )
    with serve_process(["serve", "--config", str(config)]) as (proc, url):
        async with viewers_of_two_runs(url, marker) as (captures, run_ids):
            # Both runs' delegations reached the remote (two runs, one task each per agent).
            await wait_for(
                lambda: (
                    len(remote_tasks(a2a_server, "hang", marker)) == 2
                    and len(remote_tasks(a2a_server, "slowcancel", marker)) == 2
                ),
                20,
                "every remote task started",
            )
            sent = trio.current_time()
            proc.send_signal(signal.SIGINT)
            await read_until(proc, "stopping: ending every run")
            async with httpx.AsyncClient(timeout=5.0) as client:
                refused = await client.post(f"{url}/runs", json=user_input("late"))
            assert refused.status_code == 503
            assert refused.json()["error"] == "shutting_down"
            assert refused.headers["retry-after"] == "5"
        status = await trio.to_thread.run_sync(proc.wait, grace + EXIT_MARGIN)
        elapsed = trio.current_time() - sent
    assert status == 0
    assert elapsed < grace + EXIT_MARGIN
    for capture in captures.values():
        capture.assert_ended_by_shutdown()
    assert captures["ws"].close_code == 1000
    # Every remote task was cancelled, before the runs' terminals went out.
    for scenario in ("hang", "slowcancel"):
        assert remote_tasks(a2a_server, scenario, marker) <= cancelled_tasks(a2a_server, scenario)
    # The store has the runs ended (a restart has nothing to recover).
    run_ids.append(captures["agui"].frames[0][1]["runId"])
    async with open_store(StoreEntry(kind="sqlite", path=str(tmp_path / "runs.sqlite3"))) as store:
        assert store.archive is not None
        for run_id in run_ids:
            record = await store.archive.run(run_id)
            assert record is not None and record.outcome == "run.cancelled", record


async def test_a_second_sigint_during_a_slow_drain_exits_at_once(
    tmp_path: Path, a2a_server: A2AFaultyServer
) -> None:
    marker = f"forced-{uuid.uuid4().hex[:8]}"
    # The remote never answers a cancel: each delegation's cancel waits its 20 s cancel_timeout,
    # so the drain (grace 30 s) would last about 20 s.
    config = write_config(tmp_path, a2a_server.card_url("hangcancel"), grace=30, cancel_timeout=20)
    with serve_process(["serve", "--config", str(config)]) as (proc, url):
        async with httpx.AsyncClient(timeout=5.0) as client:
            started = await client.post(f"{url}/runs", json=user_input(marker))
            assert started.status_code == 201
        await wait_for(
            lambda: len(remote_tasks(a2a_server, "hangcancel", marker)) == 2,
            20,
            "both remote tasks started",
        )
        proc.send_signal(signal.SIGINT)
        await read_until(proc, "stopping: ending every run")
        await wait_for(
            lambda: (
                remote_tasks(a2a_server, "hangcancel", marker)
                <= cancelled_tasks(a2a_server, "hangcancel")
            ),
            10,
            "the drain asked the remote to cancel (and is waiting for its answer)",
        )
        assert proc.poll() is None  # still draining
        sent = trio.current_time()
        proc.send_signal(signal.SIGINT)
        await read_until(proc, "stopping now")
        status = await trio.to_thread.run_sync(proc.wait, 10)
        elapsed = trio.current_time() - sent
    assert status == 128 + signal.SIGINT
    assert elapsed < FORCED_EXIT_SECONDS + 2.0


async def test_the_demo_drains_its_runs_to_their_viewers_on_sigint() -> None:
    with serve_process(["demo", "--port", "0"]) as (proc, url):
        async with viewers_of_two_runs(url, "How do remote subagents stream?") as (captures, _):
            with trio.fail_after(20):
                for capture in captures.values():
                    await capture.seen("SUBAGENT_STARTED")  # the remote A2A tasks run
            sent = trio.current_time()
            proc.send_signal(signal.SIGINT)
            await read_until(proc, "stopping: ending every run")
        status = await trio.to_thread.run_sync(proc.wait, 30)
        elapsed = trio.current_time() - sent
    assert status == 0
    # The default grace (5 s) bounds the drain; the remotes then get their own grace (~5 s).
    assert elapsed < 5.0 + 5.0 + EXIT_MARGIN
    for capture in captures.values():
        capture.assert_ended_by_shutdown()
    assert captures["ws"].close_code == 1000
    for _, event in captures["sse"].frames:
        if event["type"] == "SUBAGENT_FINISHED":
            assert event["outcome"]["type"] != "success", event
