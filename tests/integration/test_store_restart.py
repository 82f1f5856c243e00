"""A SQLite-backed `serve` killed mid-run (SIGKILL) and started again: what survives.

Real parts: the `serve` process on its default store (the SQLite file of `$XDG_STATE_HOME`,
private to the test), the fault-injecting a2a-sdk server (`hang`: tasks that work until
cancelled), httpx as the viewer. The run is killed while both of the scripted parent's
delegations are running on the remote; the second process must end the run with typed
`interrupted` terminals, cancel both remote tasks from the ids it journaled, and give a viewer
resuming with `Last-Event-ID` exactly what it missed, while a viewer starting over gets the
whole run, valid AG-UI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from adapters.agui import check_frames, parse_sse
from tests.helpers.peers import A2AFaultyServer
from tests.helpers.processes import serve_process

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def _serve(config: Path) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """`serve` on `config`, port 0; yields the process, its URL and its banner lines."""
    with serve_process("--config", str(config), "--port", "0") as (proc, url, first):
        assert proc.stdout is not None
        banner = [first]
        for _ in range(4):  # agents, then runs recovered (if any), then the store
            line = proc.stdout.readline()
            banner.append(line)
            if not line or line.startswith("  runs kept in:"):
                break
        yield proc, url, banner


def _engine_events(response: httpx.Response) -> Iterator[tuple[int, dict[str, object]]]:
    """(cursor, engine event) for each SSE event of a `?format=engine` stream, as it comes."""
    cursor: int | None = None
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("id:"):
            cursor = int(line[3:].strip())
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            assert cursor is not None
            yield cursor, json.loads("\n".join(data))
            data = []


def test_a_killed_server_ends_its_runs_on_restart_and_resumed_viewers_complete(
    tmp_path: Path, a2a_server: A2AFaultyServer
) -> None:
    card = a2a_server.card_url("hang")
    config = tmp_path / "host.toml"
    config.write_text(
        f'[[agents]]\nkey = "research"\ncard_url = "{card}"\n\n'
        f'[[agents]]\nkey = "review"\ncard_url = "{card}"\n'
    )
    store = Path(os.environ["XDG_STATE_HOME"]) / "subagent-engine" / "runs.sqlite3"
    seen: list[tuple[int, dict[str, object]]] = []
    with _serve(config) as (proc, url, banner):
        assert f"runs kept in: sqlite {store}" in "".join(banner)
        started = httpx.post(
            f"{url}/runs",
            json={"messages": [{"id": "1", "role": "user", "content": "restart me"}]},
            timeout=10,
        )
        assert started.status_code == 201
        run = started.json()
        task_ids: dict[str, str] = {}
        events_url = f"{url}{run['events_url']}?token={run['viewer_token']}&format=engine"
        with httpx.stream("GET", events_url, timeout=30) as response:
            for cursor, event in _engine_events(response):
                seen.append((cursor, event))
                delegation, task = event.get("delegation_id"), event.get("remote_task_id")
                if isinstance(delegation, str) and isinstance(task, str):
                    task_ids[delegation] = task
                if len(task_ids) == 2:
                    break
        os.killpg(proc.pid, signal.SIGKILL)  # no cleanup of any kind
        proc.wait()
    assert store.exists()
    assert not any(
        c.get("task_id") in task_ids.values() for c in a2a_server.entries("hang", "cancels")
    )  # the killed process cancelled nothing
    last = seen[-1][0]

    with _serve(config) as (_, url, banner):
        assert f"ended 1 run(s) a stopped process left live ({run['run_id']})" in "".join(banner)
        # Both remote tasks were cancelled from the journaled ids before anything listened.
        cancelled = {c["task_id"] for c in a2a_server.entries("hang", "cancels")}
        assert set(task_ids.values()) <= cancelled
        # A viewer resuming after the last event it saw gets exactly what it missed.
        resumed = httpx.get(
            f"{url}{run['events_url']}?format=engine",
            headers={
                "authorization": f"Bearer {run['viewer_token']}",
                "last-event-id": str(last),
            },
            timeout=30,
        )
        assert resumed.status_code == 200
        rest = list(_engine_events(resumed))
        assert rest[0][0] > last
        kinds = [event["kind"] for _, event in rest]
        assert kinds[-1] == "run.failed"
        failed = [event for _, event in rest if event["kind"] == "subagent.failed"]
        assert {event["delegation_id"] for event in failed} == set(task_ids)
        for event in failed:
            error = event["error"]
            assert isinstance(error, dict) and error["code"] == "interrupted"
            assert error["metadata"] == {"remote_cancel": "confirmed"}
        # A viewer starting over gets the whole run, first event to terminal, valid AG-UI.
        whole = httpx.get(f"{url}{run['events_url']}?token={run['viewer_token']}", timeout=30)
        frames = parse_sse(whole.content)
        assert check_frames(frames) == []
        assert [event["type"] for _, event in frames][-1] == "RUN_ERROR"
        # A resume at the terminal is over (204), and the wrong token finds nothing.
        over = httpx.get(
            f"{url}{run['events_url']}?token={run['viewer_token']}&after={rest[-1][0]}",
            timeout=10,
        )
        assert over.status_code == 204
        wrong = httpx.get(f"{url}{run['events_url']}?token=not-the-token", timeout=10)
        assert wrong.status_code == 404
        # The audit trail keeps every protocol id and what became of each remote task.
        audit_url = f"{url}/runs/{run['run_id']}/audit"
        trail = httpx.get(audit_url, headers={"authorization": f"Bearer {run['viewer_token']}"})
        assert trail.status_code == 200
        document = trail.json()
        assert (document["outcome"], document["thread_id"]) == ("run.failed", run["thread_id"])
        by_delegation = {d["delegation_id"]: d for d in document["delegations"]}
        assert set(by_delegation) == set(task_ids)
        for delegation_id, record in by_delegation.items():
            assert record["remote_task_id"] == task_ids[delegation_id]
            assert record["remote_context_id"] and record["card_fingerprint"]
            assert record["parent_tool_call_id"] and record["agent_key"] in ("research", "review")
            assert (record["status"], record["error_code"], record["remote_cancel"]) == (
                "failed",
                "interrupted",
                "confirmed",
            )
            assert record["started_at"] <= record["ended_at"]
        assert httpx.get(audit_url, headers={"authorization": "Bearer nope"}).status_code == 404
