"""The server's log lines on a real listener: the run and delegation lines with their fields, the
access log, in both formats, and no secret in any line.

A real server (`open_host`, `create_app`, `serve_app` on 127.0.0.1, as `serve` wires them) hosts
the scripted parent delegating to two in-process agents: `research` completes, `review` fails
with `remote_failed` and writes the secret credential it was configured with into its output and
its error. Starting the run needs the host token; the viewer token is sent both in `?token=` and
as `Authorization: Bearer`. Everything the log handler writes (the checkout's loggers at DEBUG,
the libraries' at WARNING, the access log on) is captured and searched for every secret.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from engine import AgentSpec, DelegationError, ErrorCode
from web.config import parse_config
from web.logs import OWN_LOGGERS, AccessLog, configure_logging
from web.server import create_app, default_encoder_factory, open_host, serve_app

AGENT_SECRET = "agent-credential-Zq81xW0pLm"
HOST_TOKEN = "host-token-5Ty7uI9oP1aS3dF"

RUN_INPUT = {
    "threadId": "thread-logs",
    "messages": [{"id": "u1", "role": "user", "content": "Summarise Trio."}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *OWN_LOGGERS)}
    handlers = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


async def research(task: LocalTask) -> str:
    await task.say(f"Trio nurseries (signed {AGENT_SECRET}).")
    return "Trio nurseries supervise tasks."


async def review(task: LocalTask) -> str:
    await task.say(f"Using {AGENT_SECRET} to review.")
    raise DelegationError(code=ErrorCode.REMOTE_FAILED, message=f"rejected {AGENT_SECRET}")


async def one_run(kind: str) -> tuple[str, str]:
    """Serve one run to its end, viewed twice; what the log handler wrote, and the viewer token."""
    out = io.StringIO()
    configure_logging(kind, "DEBUG", secrets=[AGENT_SECRET, HOST_TOKEN], stream=out)
    agents = [
        AgentSpec(key="research", target=InProcessTarget(research), secrets=(AGENT_SECRET,)),
        AgentSpec(key="review", target=InProcessTarget(review), secrets=(AGENT_SECRET,)),
    ]
    config = parse_config("", "test.toml")
    async with open_host(config, agents, ScriptedParent) as (host, _):
        app = create_app(host, config, default_encoder_factory(), host_token=HOST_TOKEN)
        async with serve_app(AccessLog(app)) as base, httpx.AsyncClient(timeout=30) as http:
            refused = await http.post(f"{base}/runs", json=RUN_INPUT)
            assert refused.status_code == 401
            started = await http.post(
                f"{base}/runs?note=x",
                json=RUN_INPUT,
                headers={"authorization": f"Bearer {HOST_TOKEN}"},
            )
            assert started.status_code == 201, started.text
            token = started.json()["viewer_token"]
            url = f"{base}{started.json()['events_url']}"
            first = await http.get(f"{url}?token={token}")
            second = await http.get(url, headers={"authorization": f"Bearer {token}"})
            assert first.status_code == second.status_code == 200
            assert b"RUN_FINISHED" in first.content and b"RUN_FINISHED" in second.content
    return out.getvalue(), token


def _secret_free(output: str, token: str) -> None:
    for secret in (AGENT_SECRET, HOST_TOKEN, token):
        assert secret not in output
    assert "?token" not in output and "note=x" not in output
    assert "authorization" not in output.lower()


@pytest.mark.usefixtures("restore_logging")
async def test_json_lines_carry_the_runs_lines_and_no_secret() -> None:
    output, token = await one_run("json")
    _secret_free(output, token)
    lines = [json.loads(line) for line in output.splitlines()]
    for line in lines:
        assert {"ts", "level", "logger", "event"} <= set(line)
    runs = [line for line in lines if line["logger"] == "subagent_engine.runs"]
    by_event: dict[str, list[dict[str, Any]]] = {}
    for line in runs:
        by_event.setdefault(line["event"], []).append(line)
    (start,) = by_event["run.start"]
    (end,) = by_event["run.end"]
    assert start["run_id"] == end["run_id"] and start["thread_id"] == "thread-logs"
    assert end["status"] == "finished" and end["delegations"] == 2
    assert end["error_code"] is None and end["duration_s"] >= 0
    assert sorted(d["agent"] for d in by_event["delegation.start"]) == ["research", "review"]
    ended = {d["agent"]: d for d in by_event["delegation.end"]}
    assert len(by_event["delegation.end"]) == 2
    assert ended["research"]["status"] == "completed" and ended["research"]["error_code"] is None
    assert ended["review"]["status"] == "failed"
    assert ended["review"]["error_code"] == "remote_failed"
    for line in by_event["delegation.end"]:
        assert line["run_id"] == start["run_id"] and line["parent_tool_call_id"]
        assert line["delegation_id"] in {d["delegation_id"] for d in by_event["delegation.start"]}
    requests = [line for line in lines if line["event"] == "http.request"]
    assert [(r["method"], r["status"]) for r in requests] == [
        ("POST", 401),
        ("POST", 201),
        ("GET", 200),
        ("GET", 200),
    ]
    events_path = f"/runs/{start['run_id']}/events"
    assert [r["path"] for r in requests] == ["/runs", "/runs", events_path, events_path]
    assert all(r["remote"].startswith("127.0.0.1:") and r["bytes"] > 0 for r in requests)


@pytest.mark.usefixtures("restore_logging")
async def test_text_lines_carry_the_runs_lines_and_no_secret() -> None:
    output, token = await one_run("text")
    _secret_free(output, token)
    lines = output.splitlines()
    run_end = [line for line in lines if " subagent_engine.runs run.end " in line]
    assert len(run_end) == 1
    assert " status=finished " in run_end[0] and run_end[0].endswith(" delegations=2")
    failed = [line for line in lines if " delegation.end " in line and "agent=review" in line]
    assert len(failed) == 1
    assert " status=failed " in failed[0] and " error_code=remote_failed" in failed[0]
    access = [line for line in lines if " subagent_engine.access http.request " in line]
    assert len(access) == 4
    assert "method=GET path=/runs/run-" in access[2] and " status=200 " in access[2]
