"""The served demo's log lines on the real command: `python -m cli demo --port 0 --log-format json
--access-log`, with its two remote A2A agents, as a user starts it.

A viewer starts a run and reads its stream to the end; then SIGINT stops the demo. Everything
the demo and its remotes wrote on stderr is JSON Lines: the run's start and end and each
delegation's, with the run's id, one `http.request` line per request to the page (the viewer
token in `?token=` never in one), and nowhere the token the demo gave its remotes.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from demo import REMOTE_TOKEN_ENV
from tests.helpers import REPO_ROOT

LOG_FLAGS = ("--log-format", "json", "--access-log")
START_TIMEOUT = 90.0  # two a2a-serve processes and the server import on a busy 2-core machine


def _stdout_until(proc: subprocess.Popen[bytes], marker: bytes, timeout: float) -> str:
    """What the demo printed up to the line holding `marker` (bounded: it could hang)."""
    assert proc.stdout is not None
    buffer = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout.fileno(), selectors.EVENT_READ)
        while marker not in buffer or not buffer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {marker!r} within {timeout:g} s; got {buffer!r}"
            if selector.select(remaining):
                chunk = os.read(proc.stdout.fileno(), 4096)
                assert chunk, f"the demo exited ({proc.poll()}) after {buffer!r}"
                buffer += chunk
    return buffer.decode()


def _remote_tokens(banner: str) -> set[str]:
    """The token the demo gave its remotes, read from the environment of each remote the
    banner names (`(pid N)`)."""
    found: set[str] = set()
    for pid in re.findall(r"\(pid (\d+)\)", banner):
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = entry.partition(b"=")
            if name == REMOTE_TOKEN_ENV.encode():
                found.add(value.decode())
    return found


def test_the_served_demo_writes_json_lines_for_its_runs_and_requests() -> None:
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [*(sys.executable, "-m", "cli", "demo", "--port", "0"), *LOG_FLAGS],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            banner = _stdout_until(proc, b"Ctrl-C stops", START_TIMEOUT)
            url = banner.splitlines()[0].split()[-1]
            tokens = _remote_tokens(banner)
            assert tokens, "the remotes run as the demo's children with its token"
            started = httpx.post(
                f"{url}/runs",
                json={"messages": [{"id": "1", "role": "user", "content": "Stream?"}]},
                timeout=10,
            )
            assert started.status_code == 201, started.text
            run = started.json()
            viewer_token = run["viewer_token"]
            events = httpx.get(f"{url}{run['events_url']}?token={viewer_token}", timeout=120)
            assert b"RUN_FINISHED" in events.content
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        stderr.seek(0)
        written = stderr.read().decode()
    lines = [json.loads(line) for line in written.splitlines()]  # every line is JSON
    run_id = run["run_id"]
    mine = [line for line in lines if line.get("run_id") == run_id]
    kinds = [line["event"] for line in mine]
    assert kinds[0] == "run.start" and kinds[-1] == "run.end", kinds
    assert mine[-1]["status"] == "finished" and mine[-1]["delegations"] == 2
    ended = sorted(line["agent"] for line in mine if line["event"] == "delegation.end")
    assert ended == ["research", "review"]
    requests = [line for line in lines if line["event"] == "http.request"]
    assert {"method": "POST", "path": "/runs", "status": 201} in [
        {key: line[key] for key in ("method", "path", "status")} for line in requests
    ]
    [stream] = [line for line in requests if line["path"] == run["events_url"]]
    assert stream["status"] == 200 and stream["bytes"] == len(events.content)
    for secret in (*tokens, viewer_token):
        assert secret not in written
