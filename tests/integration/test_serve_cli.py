"""`subagent-engine serve` as a user runs it: a process on embedded defaults, and bad configs."""

from __future__ import annotations

import http.server
import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from adapters.agui import check_frames, parse_sse
from cli.serve import serve_main
from tests.helpers.processes import serve_process

REPO = Path(__file__).resolve().parents[2]


def test_serve_on_embedded_defaults_answers_and_stops_on_sigint() -> None:
    with serve_process("--port", "0") as (proc, url, _):
        assert proc.stdout is not None
        assert "agents: research, review; parent: scripted" in proc.stdout.readline()
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        started = httpx.post(
            f"{url}/runs",
            json={"messages": [{"id": "1", "role": "user", "content": "hi"}]},
            timeout=10,
        )
        assert started.status_code == 201
        # The default wire format is AG-UI: the whole run, valid, with its two subagents.
        run = started.json()
        events = httpx.get(f"{url}{run['events_url']}?token={run['viewer_token']}", timeout=30)
        assert events.headers["content-type"].startswith("text/event-stream")
        frames = parse_sse(events.content)
        assert check_frames(frames) == []
        kinds = [event["type"] for _, event in frames]
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
        assert kinds.count("SUBAGENT_STARTED") == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_a_bad_config_exits_2_with_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[server]\nvisibility = "loud"\n')
    assert serve_main(str(path)) == 2
    assert f"{path}:2: server.visibility: must be one of" in capsys.readouterr().err


def test_a_missing_credential_fails_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    path = tmp_path / "host.toml"
    path.write_text(
        '[[agents]]\nkey = "a"\ncard_url = "http://127.0.0.1:9/c"\n'
        'auth = { token_env = "NOPE_TOKEN" }\n'
    )
    assert serve_main(str(path)) == 2
    assert "'NOPE_TOKEN' is not set" in capsys.readouterr().err


def test_a_cli_parent_that_is_not_installed_fails_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    path = tmp_path / "host.toml"
    path.write_text('[parent]\nkind = "codex"\n')
    assert serve_main(str(path)) == 2
    error = capsys.readouterr().err
    assert "host.toml:2: parent.kind: the codex CLI 'codex' is not an executable on PATH" in error


def test_an_agent_with_a_malformed_card_is_refused_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Card(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"name": "broken"}'  # an Agent Card without any interface
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Card) as card_server:
        thread = threading.Thread(target=card_server.serve_forever, daemon=True)
        thread.start()
        try:
            card_url = f"http://127.0.0.1:{card_server.server_address[1]}/card.json"
            path = tmp_path / "host.toml"
            path.write_text(
                f'[server]\nport = 0\n\n[[agents]]\nkey = "a"\ncard_url = "{card_url}"\n'
            )
            assert serve_main(str(path)) == 2
        finally:
            card_server.shutdown()
            thread.join()
    out, error = capsys.readouterr()
    assert "serving on" not in out  # refused before anything listened
    assert (
        f"{path}:4: agents[0]: cannot be used: agent_unavailable: The remote agent's card "
        "cannot be used: the card names no interface"
    ) in error


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1"])
def test_listening_beyond_loopback_without_a_host_token_is_refused(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve_main(None, host=host) == 2
    error = capsys.readouterr().err
    assert f"listening on {host} lets every machine that reaches the port start runs" in error
    assert "--token-env" in error


def test_a_host_token_that_is_unset_or_short_is_refused_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOST_TOKEN", raising=False)
    path = tmp_path / "host.toml"
    path.write_text('[server]\ntoken_env = "HOST_TOKEN"\n')
    assert serve_main(str(path), host="0.0.0.0") == 2
    assert "host.toml:2: server.token_env: the environment variable 'HOST_TOKEN' is not set" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("HOST_TOKEN", "short")
    assert serve_main(None, token_env="HOST_TOKEN") == 2
    assert "must be at least 16 characters" in capsys.readouterr().err


def test_serve_with_a_host_token_starts_runs_only_for_who_presents_it(tmp_path: Path) -> None:
    token = "t" * 12 + "0123456789"
    env = {**os.environ, "SE_HOST_TOKEN": token}
    with serve_process("--port", "0", "--token-env", "SE_HOST_TOKEN", env=env) as (proc, url, _):
        assert proc.stdout is not None
        body = {"messages": [{"id": "1", "role": "user", "content": "hi"}]}
        refused = httpx.post(f"{url}/runs", json=body, timeout=10)
        assert refused.status_code == 401
        started = httpx.post(
            f"{url}/runs", json=body, timeout=10, headers={"authorization": f"Bearer {token}"}
        )
        assert started.status_code == 201
        output = proc.stdout.readline() + proc.stdout.readline()
        assert token not in output
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_a_run_store_that_is_not_ours_fails_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.sqlite3"
    store.write_bytes(b"not a database, and not to be overwritten\n" * 10)
    before = store.read_bytes()
    path = tmp_path / "host.toml"
    path.write_text(f'[store]\npath = "{store}"\n')
    assert serve_main(str(path), port=0) == 2
    err = capsys.readouterr().err
    assert f"subagent-engine serve: the run store {store} cannot be used:" in err
    assert "not an SQLite database" in err
    assert store.read_bytes() == before
