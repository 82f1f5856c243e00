"""Several `serve` processes sharing one Redis work as one service.

Real parts: `subagent-engine serve` processes (each its own node name, `[store] kind = "redis"`,
a 2 s lease), one real redis-server per test (`tests.helpers.redis_server`), the
fault-injecting a2a-sdk server (`hang`: tasks that work until cancelled, whose cancels it
records) or the in-process demo agents (runs that finish), httpx as viewers. Every viewer reads
with a deadline on what it observes (the stream's own events and keep-alive comments), never
sleeps and hopes.

What is proven: a run is viewable from any node with its viewer token (valid AG-UI, the same
events as on its owner), a viewer hopping between nodes with `Last-Event-ID` gets every cursor
once; a viewer on another node follows the run live, and its stop and answers reach the owner;
a node killed with SIGKILL has its runs ended (`node_lost`) by exactly one survivor, remote
tasks cancelled; a Redis restarted or frozen is survived (health stays up, viewers get clear
errors during the outage, no node takes a well one for lost, new runs work after it); a node
started after Redis restarted empty joins the others; a recovery slower than a lease is still
done by one survivor.

Deltas may reach two viewers merged differently (a reader behind the journal gets adjacent
deltas of one stream merged), so streams are compared with such runs merged (`_merged`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from adapters.agui import check_frames, parse_sse
from tests.helpers.peers import A2AFaultyServer
from tests.helpers.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, used by name below

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2
PROMPT = {"messages": [{"id": "1", "role": "user", "content": "nodes"}]}


@attrs.frozen
class Node:
    """One running `serve` process: its node name, URL, process and stderr log."""

    name: str
    url: str
    proc: subprocess.Popen[str]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL the node's process group: no cleanup of any kind (its lease lapses)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _config(
    tmp_path: Path, node: str, redis: RedisServer, card_url: str | None, policy: str = ""
) -> Path:
    text = (
        f'[server]\nkeepalive_seconds = 0.5\n\n[store]\nkind = "redis"\nurl = "{redis.url}"\n'
        f'node = "{node}"\nlease_seconds = {LEASE_SECONDS}\n'
    )
    if card_url is not None:  # else the in-process demo agents, whose runs finish
        for key in ("research", "review"):
            text += f'\n[[agents]]\nkey = "{key}"\ncard_url = "{card_url}"\n'
            if policy:
                text += f"[agents.policy]\n{policy}\n"
    path = tmp_path / f"{node}.toml"
    path.write_text(text)
    return path


@contextmanager
def _nodes(
    tmp_path: Path, redis: RedisServer, cards: Mapping[str, str | None], policy: str = ""
) -> Iterator[dict[str, Node]]:
    """One `serve` per entry of `cards` (node name -> agent card URL, None: demo agents), all
    started at once on the empty Redis; yields them by name once each printed its banner.
    Killed on exit."""
    with ExitStack() as stack:
        nodes: dict[str, Node] = {}
        started = [
            _serve(stack, tmp_path, name, redis, card, policy) for name, card in cards.items()
        ]
        for name, proc, log_path in started:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith("subagent-engine serving on http://127.0.0.1:"), (
                first + log_path.read_text()
            )
            while not (line := proc.stdout.readline()).startswith("  runs kept in:"):
                assert line, log_path.read_text()
            assert f"node {name})" in line
            nodes[name] = Node(name, first.split()[3], proc, log_path)
        yield nodes


def _serve(
    stack: ExitStack,
    tmp_path: Path,
    name: str,
    redis: RedisServer,
    card: str | None,
    policy: str,
) -> tuple[str, subprocess.Popen[str], Path]:
    """Start `serve` as node `name` (killed when `stack` closes): (name, process, stderr)."""
    log_path = tmp_path / f"{name}.stderr"
    config = _config(tmp_path, name, redis, card, policy)
    proc = stack.enter_context(
        subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", "0", "--config", str(config)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stack.enter_context(log_path.open("w")),
            text=True,
            start_new_session=True,
        )
    )
    stack.callback(_kill_group, proc)
    return name, proc, log_path


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _start(node: Node) -> dict[str, Any]:
    started = httpx.post(f"{node.url}/runs", json=PROMPT, timeout=10)
    assert started.status_code == 201, started.text
    document: dict[str, Any] = started.json()
    return document


def _events_url(node: Node, run: dict[str, Any], **params: str) -> str:
    query = "&".join(
        f"{key}={value}" for key, value in {"token": run["viewer_token"], **params}.items()
    )
    return f"{node.url}{run['events_url']}?{query}"


class EngineStream:
    """A `?format=engine` SSE stream read as (cursor, engine event) pairs, each read bounded
    by a deadline (keep-alive comments arrive every 0.5 s, so an idle stream is noticed)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.iter_lines()

    def events(self, within: float) -> Iterator[tuple[int, dict[str, Any]]]:
        deadline = time.monotonic() + within
        cursor: int | None = None
        data: list[str] = []
        for line in self._lines:
            assert time.monotonic() < deadline, f"no end of the stream within {within} s"
            if line.startswith("id:"):
                cursor = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                assert cursor is not None
                yield cursor, json.loads("\n".join(data))
                data = []


@contextmanager
def _engine_stream(url: str, last_event_id: int | None = None) -> Iterator[EngineStream]:
    headers = {} if last_event_id is None else {"last-event-id": str(last_event_id)}
    with httpx.stream("GET", f"{url}&format=engine", headers=headers, timeout=10) as response:
        assert response.status_code == 200, response.read()
        yield EngineStream(response)


def _whole_engine(url: str, last_event_id: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    with _engine_stream(url, last_event_id) as stream:
        return list(stream.events(30))


def _task_ids(seen: list[tuple[int, dict[str, Any]]]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for _, event in seen:
        delegation, task = event.get("delegation_id"), event.get("remote_task_id")
        if isinstance(delegation, str) and isinstance(task, str):
            ids[delegation] = task
    return ids


def _read_until_both_tasks(stream: EngineStream, seen: list[tuple[int, dict[str, Any]]]) -> None:
    for cursor, event in stream.events(20):
        seen.append((cursor, event))
        assert event["kind"] not in ("run.finished", "run.failed", "run.cancelled"), event
        if len(_task_ids(seen)) == 2:
            return
    raise AssertionError(f"the stream ended before both remote tasks started: {seen}")


def _wait_for(condition: Any, within: float, what: str) -> Any:
    """Poll `condition()` (observable state of another process) until truthy or the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.1)


def _merged(items: Sequence[tuple[int | None, dict[str, Any]]]) -> list[tuple[int | None, Any]]:
    """`items` with each run of adjacent deltas of one stream merged into one, as a reader
    behind the journal gets them (engine `text.delta`..., AG-UI `*_CONTENT`, `TOOL_CALL_ARGS`):
    what two viewers of one run must agree on, however their reads were batched."""
    out: list[tuple[int | None, Any]] = []
    for cursor, event in items:
        same = {k: v for k, v in event.items() if k not in ("delta", "sequence", "time")}
        if out and isinstance(event.get("delta"), str):
            last_cursor, (last_same, last_delta) = out[-1]
            if last_same == same and isinstance(last_delta, str):
                out[-1] = (
                    cursor if cursor is not None else last_cursor,
                    (same, last_delta + event["delta"]),
                )
                continue
        out.append((cursor, (same, event.get("delta"))))
    return out


def _cancelled_tasks(a2a_server: A2AFaultyServer) -> set[str]:
    return {entry["task_id"] for entry in a2a_server.entries("hang", "cancels")}


# --- 1. one run, any node ------------------------------------------------------------------------


def test_a_run_is_viewable_from_every_node_and_a_hopping_viewer_gets_each_cursor_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with _nodes(tmp_path, redis_server, {"node-a": None, "node-b": None}) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        run = _start(a)
        # A viewer hopping as a load balancer would send it: A, then B, then A again.
        hops: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(a, run)) as stream:
            for cursor, event in stream.events(20):
                hops.append((cursor, event))
                if len(hops) == 5:
                    break
        with _engine_stream(_events_url(b, run), hops[-1][0]) as stream:
            for cursor, event in stream.events(20):
                hops.append((cursor, event))
                if len(hops) == 15:
                    break
        hops += _whole_engine(_events_url(a, run), hops[-1][0])
        # B's live AG-UI stream of A's run, from the start.
        live_b = httpx.get(_events_url(b, run), timeout=30)
        assert live_b.status_code == 200
        frames_b = parse_sse(live_b.content)
        assert check_frames(frames_b) == []
        assert frames_b[-1][1]["type"] == "RUN_FINISHED"

        whole_a = _whole_engine(_events_url(a, run))
        whole_b = _whole_engine(_events_url(b, run))
        assert whole_a[-1][1]["kind"] == "run.finished"
        # Deltas may come merged (a reader behind the journal gets them so): compare merged.
        assert _merged(whole_b) == _merged(whole_a)
        assert _merged(frames_b) == _merged(parse_sse(httpx.get(_events_url(a, run)).content))
        cursors = [cursor for cursor, _ in hops]
        assert cursors == sorted(set(cursors))  # each once, in order
        assert _merged(hops) == _merged(whole_a)

        wrong = httpx.get(f"{b.url}{run['events_url']}?token=not-the-token", timeout=10)
        assert wrong.status_code == 404
        assert wrong.json()["error"] == "unknown_run"
        over = httpx.get(_events_url(b, run, after=str(whole_a[-1][0])), timeout=10)
        assert over.status_code == 204


# --- 2. following and stopping another node's run --------------------------------------------


def test_a_viewer_on_another_node_follows_live_and_its_stop_reaches_the_owner(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hang")
    with _nodes(tmp_path, redis_server, {"node-a": card, "node-b": card}) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        run = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(b, run)) as stream:
            # The tasks hang: these events can only have come while the run is live.
            _read_until_both_tasks(stream, seen)
            task_ids = _task_ids(seen)
            assert not set(task_ids.values()) & _cancelled_tasks(a2a_server)
            stopped = httpx.post(
                f"{b.url}/runs/{run['run_id']}/stop",
                headers={"authorization": f"Bearer {run['viewer_token']}"},
                timeout=40,
            )
            assert stopped.status_code == 200, stopped.text
            assert stopped.json() == {"run_id": run["run_id"], "stopped": True}
            seen += list(stream.events(20))
        assert seen[-1][1]["kind"] == "run.cancelled"
        assert [e["kind"] for _, e in seen].count("run.cancelled") == 1
        cursors = [cursor for cursor, _ in seen]
        assert cursors == sorted(set(cursors))
        ended = {e["delegation_id"] for _, e in seen if e["kind"] == "subagent.cancelled"}
        assert ended == set(task_ids)
        assert set(task_ids.values()) <= _cancelled_tasks(a2a_server)
        # The same end seen from the owner.
        assert _merged(_whole_engine(_events_url(a, run))) == _merged(seen)


def test_answers_given_on_another_node_reach_the_owner_s_waiting_subagents(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("input")  # asks a question, then answers with what it got
    surface = 'input_required = "surface"'
    with _nodes(tmp_path, redis_server, {"node-a": card, "node-b": card}, surface) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        run = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(b, run)) as stream:
            for cursor, event in stream.events(30):
                seen.append((cursor, event))
                if event["kind"] == "subagent.input_required":
                    answered = httpx.post(
                        f"{b.url}/runs/{run['run_id']}/answer",
                        json={"delegationId": event["delegation_id"], "text": "blue"},
                        headers={"authorization": f"Bearer {run['viewer_token']}"},
                        timeout=10,
                    )
                    assert answered.status_code == 202, answered.text
                    assert answered.json()["forwarded"] is True
        asked = {e["delegation_id"] for _, e in seen if e["kind"] == "subagent.input_required"}
        finished = {
            e["delegation_id"]: e.get("text") for _, e in seen if e["kind"] == "subagent.finished"
        }
        assert len(asked) == 2
        assert finished == dict.fromkeys(asked, "got: blue")
        assert seen[-1][1]["kind"] == "run.finished"


# --- 3. a node killed mid-run ------------------------------------------------------------------


def test_a_killed_node_s_run_is_ended_by_one_survivor_and_resumed_viewers_complete(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hang")
    cards = {"node-a": card, "node-b": card, "node-c": card}
    with _nodes(tmp_path, redis_server, cards) as nodes:
        a, b, c = nodes["node-a"], nodes["node-b"], nodes["node-c"]
        run = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(a, run)) as stream:
            _read_until_both_tasks(stream, seen)
        task_ids = _task_ids(seen)
        # A viewer on C follows A's run live across the kill.
        follower = ExitStack()
        on_c = follower.enter_context(_engine_stream(_events_url(c, run)))
        followed = [next(on_c.events(10))]
        a.kill()
        killed_at = time.monotonic()
        assert not set(task_ids.values()) & _cancelled_tasks(a2a_server)
        # A viewer resuming on a survivor gets exactly what it missed, to the terminal.
        rest = _whole_engine(_events_url(b, run), seen[-1][0])
        ended_within = time.monotonic() - killed_at
        assert ended_within < 5 * LEASE_SECONDS, ended_within
        assert rest[0][0] == seen[-1][0] + 1
        cursors = [cursor for cursor, _ in rest]
        assert cursors == list(range(rest[0][0], rest[-1][0] + 1))
        assert rest[-1][1]["kind"] == "run.failed"
        assert rest[-1][1]["error"]["code"] == "node_lost"
        failed = [e for _, e in rest if e["kind"] == "subagent.failed"]
        assert {e["delegation_id"] for e in failed} == set(task_ids)
        assert {e["error"]["code"] for e in failed} == {"node_lost"}
        # The remote tasks were cancelled from the ids the killed node journaled.
        _wait_for(
            lambda: set(task_ids.values()) <= _cancelled_tasks(a2a_server),
            10,
            "both remote tasks cancelled",
        )
        with follower:
            followed += list(on_c.events(10))
        assert _merged(followed) == _merged(seen + rest)
        # Exactly one survivor ended the run: one terminal, one recovery in the logs.
        whole = _whole_engine(_events_url(c, run))
        assert _merged(whole) == _merged(seen + rest)
        kinds = [e["kind"] for _, e in whole]
        assert kinds.count("run.failed") == 1
        assert sorted(kinds).count("subagent.failed") == 2
        recovered = [n.name for n in (b, c) if "node node-a lost its lease" in n.log()]
        assert len(recovered) == 1, {n.name: n.log()[-2000:] for n in (b, c)}


@pytest.mark.slow
def test_a_recovery_slower_than_a_lease_is_still_done_by_one_survivor(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hangcancel")  # CancelTask never answers: each takes 5 s
    cards = {"node-a": card, "node-b": card, "node-c": card}
    with _nodes(tmp_path, redis_server, cards) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        run = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(a, run)) as stream:
            _read_until_both_tasks(stream, seen)
        task_ids = set(_task_ids(seen).values())
        a.kill()
        rest = _whole_engine(_events_url(b, run), seen[-1][0])
        assert rest[-1][1]["kind"] == "run.failed"
        cancels = [e["task_id"] for e in a2a_server.entries("hangcancel", "cancels")]
        assert sorted(t for t in cancels if t in task_ids) == sorted(task_ids)


# --- 4. Redis restarted ------------------------------------------------------------------------


def test_nodes_survive_a_redis_restart_and_viewers_get_clear_errors_during_it(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hang")
    # node-a runs hanging remote tasks (a run live through the outage); node-b the demo agents.
    with _nodes(tmp_path, redis_server, {"node-a": card, "node-b": None}) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        finished = _start(b)
        assert _whole_engine(_events_url(b, finished))[-1][1]["kind"] == "run.finished"
        live = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(b, live)) as stream:
            _read_until_both_tasks(stream, seen)
            redis_server.kill()
            # The viewer on B of A's live run cannot follow: its stream ends, without the
            # run's terminal (the run goes on), so that it reconnects; no hang, no crash.
            more = list(stream.events(15))
        assert not any(e["kind"].startswith("run.") for _, e in more), more
        seen += more
        assert "Error in ASGI Framework" not in b.log()
        assert "the run store cannot be read" in b.log()
        for node in (a, b):
            assert httpx.get(f"{node.url}/healthz", timeout=5).status_code == 200
        # Its reconnect, and a viewer of another node's ended run, are told the store is down.
        resumed = httpx.get(
            _events_url(b, live), headers={"last-event-id": str(seen[-1][0])}, timeout=15
        )
        assert resumed.status_code == 503, resumed.text
        assert resumed.json()["error"] == "store_unavailable"
        other = httpx.get(_events_url(a, finished), timeout=15)
        assert other.status_code == 503, other.text
        assert other.json()["error"] == "store_unavailable"

        redis_server.restart()  # empty: nothing was persisted
        for node in (a, b):
            assert httpx.get(f"{node.url}/healthz", timeout=5).status_code == 200
        # A new run afterwards completes and is viewable from the other node.
        after = _wait_for(lambda: _try_start(b), 15, "a run started after the restart")
        whole = httpx.get(_events_url(a, after), timeout=30)
        assert whole.status_code == 200, whole.text
        frames = parse_sse(whole.content)
        assert check_frames(frames) == []
        assert frames[-1][1]["type"] == "RUN_FINISHED"
        # Redis came back without any lease: no node took the other, well, for lost.
        for node in (a, b):
            assert "lost its lease" not in node.log(), node.log()[-3000:]
        # The run live through the outage still stops on its own node; its tasks are cancelled.
        stopped = httpx.post(
            f"{a.url}/runs/{live['run_id']}/stop",
            headers={"authorization": f"Bearer {live['viewer_token']}"},
            timeout=40,
        )
        assert stopped.status_code == 200, stopped.text
        _wait_for(
            lambda: set(_task_ids(seen).values()) <= _cancelled_tasks(a2a_server),
            10,
            "both remote tasks cancelled",
        )


def _try_start(node: Node) -> dict[str, Any] | None:
    response = httpx.post(f"{node.url}/runs", json=PROMPT, timeout=10)
    if response.status_code == 201:
        document: dict[str, Any] = response.json()
        return document
    return None


def test_a_node_started_after_a_redis_restart_joins_the_others(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with _nodes(tmp_path, redis_server, {"node-a": None}) as nodes:
        a = nodes["node-a"]
        redis_server.restart()  # empty: nothing was persisted
        run = _wait_for(lambda: _try_start(a), 15, "a run started after the restart")
        assert _whole_engine(_events_url(a, run))[-1][1]["kind"] == "run.finished"
        with ExitStack() as stack:
            _, proc, log_path = _serve(stack, tmp_path, "node-c", redis_server, None, "")
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            assert banner.startswith("subagent-engine serving on"), log_path.read_text()


def test_a_frozen_redis_hangs_no_viewer_and_ends_no_run_that_outlived_it(
    tmp_path: Path, redis_server: RedisServer, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hang")
    with _nodes(tmp_path, redis_server, {"node-a": card, "node-b": card}) as nodes:
        a, b = nodes["node-a"], nodes["node-b"]
        run = _start(a)
        seen: list[tuple[int, dict[str, Any]]] = []
        with _engine_stream(_events_url(b, run)) as stream:
            _read_until_both_tasks(stream, seen)
        redis_server.pause()  # it keeps its connections and answers nothing: every lease lapses
        try:
            asked_at = time.monotonic()
            frozen = httpx.get(_events_url(b, run), timeout=30)
            assert frozen.status_code == 503, frozen.text
            assert frozen.json()["error"] == "store_unavailable"
            assert time.monotonic() - asked_at < 10  # the store's call timeout, not a hang
            for node in (a, b):
                assert httpx.get(f"{node.url}/healthz", timeout=5).status_code == 200
        finally:
            redis_server.resume()
        # Both nodes renew their leases once Redis answers: neither takes the other for lost,
        # and the run goes on until a viewer on B stops it.
        with _engine_stream(_events_url(b, run), seen[-1][0]) as stream:
            stopped = httpx.post(
                f"{b.url}/runs/{run['run_id']}/stop",
                headers={"authorization": f"Bearer {run['viewer_token']}"},
                timeout=40,
            )
            assert stopped.status_code == 200, stopped.text
            rest = list(stream.events(20))
        assert rest[-1][1]["kind"] == "run.cancelled", rest
        for node in (a, b):
            assert "lost its lease" not in node.log(), node.log()[-3000:]
