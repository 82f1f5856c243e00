"""`subagent-engine demo` as a newcomer runs it: the page, a parent and remote A2A subagents.

The command runs as a child process (`python -m cli demo --port 0`, own process group), as a
user starts it. It prints the page's URL and, per remote agent, the pid of its a2a-serve process.
A viewer starts a run (`POST /runs`) and reads its AG-UI stream: each subagent is announced with
`protocol: a2a` in its metadata (it really went over A2A to another process), streams, finishes,
and the stream passes the AG-UI checker. SIGINT ends the command with exit 0 and leaves no remote
process behind (their process groups are gone). The Claude-parent, Codex-remote example runs the
pinned CLIs against the scripted model endpoint on loopback.
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.agui import check_frames, parse_sse
from demo import ASKING_EXAMPLE, REMOTE_TOKEN_ENV
from tests.helpers import REPO_ROOT
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel

START_TIMEOUT = 90.0  # two a2a-serve processes and the server import on a busy 2-core machine


@dataclass
class RunningDemo:
    proc: subprocess.Popen[bytes]
    url: str
    #: remote agent key -> the pid of its a2a-serve process.
    remotes: dict[str, int]
    stderr_path: str
    #: remote agent key -> the base URL of its a2a-serve process.
    remote_urls: dict[str, str]

    def stderr(self) -> str:
        return Path(self.stderr_path).read_text(errors="replace")

    def read_rest(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")


def _read_lines_until(proc: subprocess.Popen[bytes], marker: str, timeout: float) -> list[str]:
    """stdout lines up to the one containing `marker` (bounded: the command could hang)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while marker.encode() not in buffer or not buffer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {marker!r} within {timeout:g} s; got {buffer!r}")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the demo exited ({proc.poll()}) after {buffer!r}")
            buffer += chunk
    return buffer.decode().splitlines()


@contextmanager
def running_demo(*args: str, env: Mapping[str, str] | None = None) -> Iterator[RunningDemo]:
    """`demo --port 0 ARGS` until it announced everything; killed (group) if the test fails."""
    with tempfile.NamedTemporaryFile(prefix="demo-", suffix=".stderr") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "demo", "--port", "0", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
        remotes: dict[str, int] = {}
        urls: dict[str, str] = {}
        try:
            try:
                lines = _read_lines_until(proc, "Ctrl-C stops", START_TIMEOUT)
            except (TimeoutError, RuntimeError) as exc:
                stderr.seek(0)
                tail = stderr.read().decode(errors="replace")[-3000:]
                pytest.fail(f"the demo did not start: {exc}\n{tail}", pytrace=False)
            assert lines[0].startswith("subagent-engine demo on http://127.0.0.1:"), lines
            for line in lines[1:]:
                found = re.match(
                    r"  (\w+): a remote A2A agent, .*\(pid (\d+)\): (http://[^/]+)/", line
                )
                if found:
                    remotes[found.group(1)] = int(found.group(2))
                    urls[found.group(1)] = found.group(3)
            yield RunningDemo(proc, lines[0].split()[-1], remotes, stderr.name, urls)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for pid in remotes.values():  # never leave a remote behind, even on a failure
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if proc.stdout is not None:
                proc.stdout.close()


def remote_token(pid: int) -> str:
    """The bearer token the demo gave a remote, read from the remote's environment."""
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        name, _, value = entry.partition(b"=")
        if name == REMOTE_TOKEN_ENV.encode():
            return value.decode()
    raise AssertionError(f"no {REMOTE_TOKEN_ENV} in the environment of {pid}")


def get_task_status(base_url: str, headers: Mapping[str, str]) -> int:
    """The HTTP status of a JSON-RPC GetTask (an unknown task) at a remote."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "none"}}
    headers = {"A2A-Version": "1.0", **headers}
    return httpx.post(f"{base_url}/a2a/jsonrpc", json=body, headers=headers, timeout=10).status_code


def run_stream(url: str, prompt: str) -> list[tuple[Any, dict[str, Any]]]:
    """Start a run and read its whole AG-UI stream (the run's end closes it)."""
    started = httpx.post(
        f"{url}/runs",
        json={"messages": [{"id": "1", "role": "user", "content": prompt}]},
        timeout=10,
    )
    assert started.status_code == 201, started.text
    run = started.json()
    events = httpx.get(f"{url}{run['events_url']}?token={run['viewer_token']}", timeout=120)
    assert events.headers["content-type"].startswith("text/event-stream")
    return parse_sse(events.content)


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def stop_with_sigint(demo: RunningDemo) -> str:
    """SIGINT the demo; it exits 0, every remote's process group is gone. Its last output."""
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=60) == 0, demo.stderr()
    for key, pid in demo.remotes.items():
        assert not group_exists(pid), f"the {key} agent's process group is still there"
    return demo.read_rest()


def subagents(frames: list[tuple[Any, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """agent key -> its SUBAGENT_STARTED, SUBAGENT_FINISHED and streamed text."""
    found: dict[str, dict[str, Any]] = {}
    by_run: dict[str, str] = {}
    for _, event in frames:
        if event["type"] == "SUBAGENT_STARTED":
            key = event["metadata"]["agentKey"]
            by_run[event["subagentRunId"]] = key
            found[key] = {"started": event, "text": ""}
        elif event["type"] == "SUBAGENT_FINISHED":
            found[by_run[event["subagentRunId"]]]["finished"] = event
        elif event["type"] == "TEXT_MESSAGE_CONTENT" and event.get("subagentRunId") in by_run:
            found[by_run[event["subagentRunId"]]]["text"] += event["delta"]
    return found


def test_the_default_demo_delegates_to_two_a2a_remotes_and_stops_on_sigint() -> None:
    tokens: dict[str, str] = {}
    with running_demo() as demo:
        assert set(demo.remotes) == {"research", "review"}
        for key, pid in demo.remotes.items():
            # Each remote is the demo's own child, in a process group of its own.
            assert parent_pid(pid) == demo.proc.pid and os.getpgid(pid) == pid
            # Only the demo can drive it: a call without the demo's token is refused. The token
            # is in the remote's environment, never on its command line.
            base_url = demo.remote_urls[key]
            token = tokens[key] = remote_token(pid)
            assert len(token) >= 32 and token not in Path(f"/proc/{pid}/cmdline").read_text()
            assert get_task_status(base_url, {}) == 401
            assert get_task_status(base_url, {"Authorization": f"Bearer {token}"}) == 200
        assert httpx.get(f"{demo.url}/healthz", timeout=10).json() == {"status": "ok"}
        frames = run_stream(demo.url, "How do remote subagents stream?")
        rest = stop_with_sigint(demo)
        log = demo.stderr()
    assert not any(token in rest or token in log for token in tokens.values())
    assert check_frames(frames) == []
    kinds = [event["type"] for _, event in frames]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("SUBAGENT_STARTED") == 2 and kinds.count("SUBAGENT_FINISHED") == 2
    seen = subagents(frames)
    assert set(seen) == {"research", "review"}
    for key, subagent in seen.items():
        metadata = subagent["started"]["metadata"]
        assert metadata["protocol"] == "a2a" and metadata["remoteTaskId"], metadata
        assert subagent["started"]["parentToolCallId"]
        assert subagent["finished"]["outcome"] == {"type": "success"}, key
    assert seen["research"]["started"]["name"] == "Research Agent"
    assert "Trio nurseries give structured cancellation" in seen["research"]["text"]
    assert seen["review"]["text"].endswith(
        "Verdict: approve, with a replay window sized for slow viewers."
    )
    # The parent's answer quotes both results.
    answer = [
        e["delta"]
        for _, e in frames
        if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e
    ]
    assert "- review: completed: Verdict: approve" in "".join(answer)
    assert rest.startswith("stopping:"), rest
    assert "Traceback" not in log, log


def test_parent_claude_without_the_cli_on_path_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--parent", "claude"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert (
        "subagent-engine demo: --parent claude: the Claude Code CLI 'claude' is not on PATH"
        in done.stderr
    )
    assert "--model-endpoint URL" in done.stderr  # and what else is missing


def test_claude_parent_with_a_codex_remote_over_a2a(
    tmp_path: Path, cli_bin: Path, model: ScriptedModel
) -> None:
    """One CLI delegating to another: Claude Code calls delegate_to_agent, the remote is Codex
    served by a2a-serve; both CLIs run against the scripted model endpoint."""
    env = {**os.environ, "HOME": str(tmp_path), MODEL_KEY_ENV: "sk-scripted-not-a-key"}
    args = (
        "--parent", "claude",
        "--remote", "codex",
        "--binary-dir", str(cli_bin),
        "--model-endpoint", model.base_url,
        "--model", CODEX_MODEL,
        "--api-key-env", MODEL_KEY_ENV,
    )  # fmt: skip
    directive = json.dumps({"agent": "codex", "objective": "Find why test_x is flaky"})
    with running_demo(*args, env=env) as demo:
        assert set(demo.remotes) == {"codex"}
        frames = run_stream(demo.url, f"Fix the flaky test.\nDELEGATE: {directive}")
        stop_with_sigint(demo)
    assert check_frames(frames) == []
    events = [event for _, event in frames]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert started["name"] == "Codex"
    assert started["metadata"]["agentKey"] == "codex" and started["metadata"]["protocol"] == "a2a"
    call_id = started["parentToolCallId"]
    assert call_id.startswith("toolu_")  # Claude's own tool-use id: the card sits under its call
    finished = kinds.index("SUBAGENT_FINISHED")
    [result_at] = [
        i
        for i, e in enumerate(events)
        if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call_id
    ]
    assert finished < result_at
    result = json.loads(events[result_at]["content"])
    assert result["agent"] == "codex" and result["remote_protocol"] == "a2a"
    assert result["status"] == "completed"
    # Claude's turn went on after the result: its final text quotes the structured result.
    assert events[-1]["result"].startswith("Delegation result: ")
    apis = {request["api"] for request in model.requests()}
    assert {"anthropic", "openai"} <= apis, apis


ASKING_PROMPT = ASKING_EXAMPLE  # what the demo suggests at start


def test_a_prompt_that_asks_for_a_question_gets_one_from_the_remote_review_agent() -> None:
    """As a newcomer on the page: "ask me which framework to review" makes the remote review
    agent (over A2A) ask within the first minute; the answer, posted as the page posts it,
    continues the remote task, and its verdict names the answer."""
    with running_demo() as demo:
        started = httpx.post(
            f"{demo.url}/runs",
            json={"messages": [{"id": "1", "role": "user", "content": ASKING_PROMPT}]},
            timeout=10,
        )
        assert started.status_code == 201, started.text
        run = started.json()
        bearer = {"authorization": f"Bearer {run['viewer_token']}"}
        frames: list[dict[str, Any]] = []
        asked: dict[str, Any] | None = None
        answered: httpx.Response | None = None
        begun = time.monotonic()
        url = f"{demo.url}{run['events_url']}?token={run['viewer_token']}"
        with httpx.stream("GET", url, timeout=120) as events:
            buffer = b""
            for chunk in events.iter_bytes():
                buffer += chunk
                *blocks, buffer = buffer.split(b"\n\n")
                for _, event in parse_sse(b"".join(block + b"\n\n" for block in blocks)):
                    frames.append(event)
                    if event["type"] == "CUSTOM" and event["name"] == "subagent.input_required":
                        asked, waited = event["value"], time.monotonic() - begun
                        answered = httpx.post(
                            f"{demo.url}/runs/{run['run_id']}/answer",
                            json={
                                "delegationId": asked["delegationId"],
                                "questionId": asked["question"]["id"],
                                "text": "Trio",
                                "surface": "page",
                            },
                            headers=bearer,
                            timeout=10,
                        )
        stop_with_sigint(demo)
    assert asked is not None, [e["type"] for e in frames]
    assert waited < 60
    assert asked["agentKey"] == "review" and asked["protocol"] == "a2a"
    assert asked["question"]["text"] == (
        "Which framework or part of the design should I focus the review on?"
    )
    assert answered is not None and answered.status_code == 202, answered and answered.text
    closed = [
        e["value"]["question"]
        for e in frames
        if e["type"] == "CUSTOM" and e["name"] == "subagent.input_closed"
    ]
    assert [(q["id"], q["outcome"], q["surface"]) for q in closed] == [
        (asked["question"]["id"], "answered", "page")
    ]
    seen = subagents([(None, e) for e in frames])
    assert seen["review"]["finished"]["outcome"] == {"type": "success"}
    assert seen["review"]["text"].startswith("Reviewed Trio: ")
    assert "Verdict: approve Trio" in seen["review"]["text"]
    assert seen["research"]["finished"]["outcome"] == {"type": "success"}
    assert check_frames([(None, e) for e in frames]) == []
