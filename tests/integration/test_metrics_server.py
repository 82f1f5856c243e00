"""`/metrics` on a real listener: 404 while `[metrics]` is off; with it on, 401 without the
metrics token or with a wrong one; with the token, the Prometheus text exposition of a run in
which the scripted parent delegated to two in-process agents, one finishing and one failing with
an error code of its own making, which never becomes a label value.

A real server (`open_host`, `create_app`, `serve_app` on 127.0.0.1, as `serve` wires them), then
`serve` itself: a process with `[metrics]` in its file, and one refused before it listens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from cli.serve import serve_main
from engine import AgentSpec, DelegationError
from tests.helpers.processes import serve_process
from web.config import parse_config
from web.metrics import Metrics
from web.server import create_app, default_encoder_factory, open_host, serve_app

REPO = Path(__file__).resolve().parents[2]
METRICS_TOKEN = "metrics-token-4Rt6yU8iO0pQ"
#: What a remote controls: its error code. Shaped to break out of a label if pasted into one.
HOSTILE = 'evil"} 1\nsubagent_engine_runs_started_total{x="'

RUN_INPUT = {
    "threadId": "thread-metrics",
    "messages": [{"id": "u1", "role": "user", "content": "Summarise Trio."}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


async def research(task: LocalTask) -> str:
    await task.say("Trio nurseries.")
    return "Trio nurseries supervise tasks."


async def review(task: LocalTask) -> str:
    await task.say(HOSTILE)
    raise DelegationError(code=HOSTILE, message=HOSTILE)


AGENTS = [
    AgentSpec(key="research", target=InProcessTarget(research)),
    AgentSpec(key="review", target=InProcessTarget(review)),
]


async def test_metrics_are_404_while_off() -> None:
    config = parse_config("", "test.toml")
    async with open_host(config, AGENTS, ScriptedParent) as (host, _):
        app = create_app(host, config, default_encoder_factory())
        async with serve_app(app) as base, httpx.AsyncClient(timeout=30) as http:
            answer = await http.get(f"{base}/metrics")
            assert answer.status_code == 404
            with_token = await http.get(
                f"{base}/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"}
            )
            assert with_token.status_code == 404


async def test_metrics_need_their_token_and_count_a_run() -> None:
    config = parse_config('[metrics]\nenabled = true\ntoken_env = "M"\n', "test.toml")
    token = config.metrics_token({"M": METRICS_TOKEN})
    assert token == METRICS_TOKEN
    async with open_host(config, AGENTS, ScriptedParent) as (host, _):
        metrics = Metrics(host.engine, token=token)
        app = create_app(host, config, default_encoder_factory(), metrics=metrics)
        async with serve_app(app) as base, httpx.AsyncClient(timeout=30) as http:
            url = f"{base}/metrics"
            assert (await http.get(url)).status_code == 401
            wrong = await http.get(url, headers={"authorization": "Bearer x" + METRICS_TOKEN})
            assert wrong.status_code == 401
            assert wrong.headers["www-authenticate"].startswith("Bearer")
            auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
            before = await http.get(url, headers=auth)
            assert before.status_code == 200
            assert before.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert samples(before.text)[("subagent_engine_runs_started_total", ())] == 0

            started = await http.post(f"{base}/runs", json=RUN_INPUT)
            assert started.status_code == 201, started.text
            events = f"{base}{started.json()['events_url']}"
            viewer = {"authorization": f"Bearer {started.json()['viewer_token']}"}
            streamed = await http.get(events, headers=viewer)  # to the run's end
            assert b"RUN_FINISHED" in streamed.content
            hosted = await host.find(started.json()["run_id"], started.json()["viewer_token"])
            await hosted.ended.wait()  # its run actor closed: every counter moved
            answer = await http.get(url, headers=auth)
    assert answer.status_code == 200
    found = samples(answer.text)
    assert found[("subagent_engine_runs_started_total", ())] == 1
    assert found[("subagent_engine_runs_ended_total", (("outcome", "finished"),))] == 1
    assert found[("subagent_engine_runs_ended_total", (("outcome", "failed"),))] == 0
    assert found[("subagent_engine_runs_active", ())] == 0
    assert found[("subagent_engine_delegations_active", ())] == 0
    ended = {
        labels: value
        for (name, labels), value in found.items()
        if name == "subagent_engine_delegations_ended_total"
    }
    assert ended == {
        (("agent", "research"), ("error_code", "none"), ("status", "completed")): 1,
        (("agent", "review"), ("error_code", "other"), ("status", "failed")): 1,
    }
    assert found[("subagent_engine_journal_events_total", ())] > 0
    assert found[("subagent_engine_store_appends_total", ())] > 0
    assert found[("subagent_engine_viewers_active", (("transport", "sse"),))] == 0
    assert found[("subagent_engine_viewers_active", (("transport", "ws"),))] == 0
    # The remote's code is in no label and nowhere in the text.
    values = {value for _, labels in found for _, value in labels}
    assert values <= {
        "research",
        "review",
        "other",
        "none",
        "completed",
        "failed",
        "finished",
        "cancelled",
        "confirmed",
        "pending",
        "unsupported",
        "interrupted",  # recovery reasons
        "node_lost",
        "sse",
        "ws",
        "delegate_to_agent",  # the scripted parent's calls of the run endpoint's tool
    }
    assert found[("subagent_engine_mcp_tool_calls_total", (("tool", "delegate_to_agent"),))] == 2
    assert "evil" not in answer.text


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, parsed as Prometheus would."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_serve_exports_metrics_behind_the_token_it_read(tmp_path: Path) -> None:
    """`serve` as a user runs it: the `[metrics]` table wired, the token from its variable."""
    config = tmp_path / "host.toml"
    config.write_text(
        '[server]\nport = 0\n\n[store]\nkind = "memory"\n\n'
        '[metrics]\nenabled = true\ntoken_env = "SE_METRICS_TOKEN"\n'
    )
    env = {**os.environ, "SE_METRICS_TOKEN": METRICS_TOKEN}
    with serve_process("--config", str(config), env=env) as (proc, url, _):
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(3)]
        assert f"  metrics: {url}/metrics (token in $SE_METRICS_TOKEN)\n" in banner
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401
        auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
        answer = httpx.get(f"{url}/metrics", headers=auth, timeout=10)
        assert answer.status_code == 200
        assert samples(answer.text)[("subagent_engine_runs_active", ())] == 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_serve_refuses_metrics_beyond_loopback_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "host.toml"
    config.write_text('[server]\ntoken_env = "SE_HOST_TOKEN"\n\n[metrics]\nenabled = true\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_HOST_TOKEN", "host-token-5Ty7uI9oP1aS3dF")
        assert serve_main(str(config), host="0.0.0.0") == 2
    assert "metrics.enabled: metrics on a listener beyond loopback" in capsys.readouterr().err


def test_serve_can_export_metrics_on_a_listener_of_their_own(tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        '[server]\nport = 0\n\n[store]\nkind = "memory"\n\n'
        '[metrics]\nenabled = true\nlisten = "127.0.0.1:0"\n'
    )
    with subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[3]
            banner = [proc.stdout.readline() for _ in range(3)]
            (line,) = [line for line in banner if line.startswith("  metrics: ")]
            scrape_url = line.split()[1]
            assert scrape_url.startswith("http://127.0.0.1:") and scrape_url.endswith("/metrics")
            assert scrape_url != f"{url}/metrics"  # another port
            assert httpx.get(f"{url}/metrics", timeout=10).status_code == 404
            answer = httpx.get(scrape_url, timeout=10)
            assert answer.status_code == 200
            assert ("subagent_engine_runs_started_total", ()) in samples(answer.text)
            other = httpx.get(scrape_url.removesuffix("/metrics") + "/healthz", timeout=10)
            assert other.status_code == 404
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
