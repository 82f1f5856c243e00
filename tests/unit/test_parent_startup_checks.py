"""`serve`, `a2a-serve` and `demo` refuse to start a CLI parent that cannot reach its model.

Before anything listens (exit 2, the problem named): the variable `[parent] api_key_env` names
must be set (one check, `web.config.api_key_problem`, for the three commands), and the model
endpoint must answer HTTP (`HostConfig.check_parent`, `adapters.parents.probe_model_endpoint`):
a closed port and a port that accepts and never answers are both refused, the second within the
probe's bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import web.config
from cli.a2a_serve import a2a_serve_main
from cli.serve import serve_main
from demo import DemoOptions, demo_main
from tests.helpers import ports
from web.config import ConfigError, api_key_problem, parse_config

KEY_ENV = "STARTUP_CHECK_MODEL_KEY"


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """An executable where a CLI's binary is looked for (never run by these tests)."""
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return binary


@pytest.fixture
def closed_port() -> int:
    return ports.closed_port()


@pytest.fixture
def silent_port() -> Iterator[int]:
    with ports.silent_port() as port:
        yield port


def host_toml(path: Path, binary: Path, *, endpoint: str | None, key_env: str | None) -> str:
    lines = ["[parent]", 'kind = "claude-code"', f'binary = "{binary}"']
    if endpoint is not None:
        lines.append(f'model_endpoint = "{endpoint}"')
    if key_env is not None:
        lines.append(f'api_key_env = "{key_env}"')
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def start(command: str, config: str) -> int:
    if command == "serve":
        return serve_main(config, port=0)
    return a2a_serve_main(parent=None, config_path=config, port=0)


@pytest.mark.parametrize("command", ["serve", "a2a-serve"])
def test_an_unset_api_key_variable_is_refused_at_start(
    command: str,
    tmp_path: Path,
    fake_cli: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    config = host_toml(tmp_path / "host.toml", fake_cli, endpoint=None, key_env=KEY_ENV)
    assert start(command, config) == 2
    err = capsys.readouterr().err
    assert f"host.toml:4: parent.api_key_env: the variable {KEY_ENV} is not set" in err
    assert err.startswith(f"subagent-engine {command}: ")


@pytest.mark.parametrize("command", ["serve", "a2a-serve"])
def test_a_closed_model_endpoint_is_refused_at_start_naming_its_url(
    command: str,
    tmp_path: Path,
    fake_cli: Path,
    closed_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-not-a-key")
    url = f"http://127.0.0.1:{closed_port}"
    config = host_toml(tmp_path / "host.toml", fake_cli, endpoint=url, key_env=KEY_ENV)
    assert start(command, config) == 2
    err = capsys.readouterr().err
    assert f"host.toml:4: parent.model_endpoint: the model endpoint {url} cannot be reached" in err


@pytest.mark.parametrize("command", ["serve", "a2a-serve"])
def test_a_model_endpoint_that_never_answers_is_refused_within_the_probe_bound(
    command: str,
    tmp_path: Path,
    fake_cli: Path,
    silent_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(web.config, "PROBE_TIMEOUT", 0.5)
    url = f"http://127.0.0.1:{silent_port}/v1"
    config = host_toml(tmp_path / "host.toml", fake_cli, endpoint=url, key_env=None)
    began = time.monotonic()
    assert start(command, config) == 2
    assert time.monotonic() - began < 5.0
    err = capsys.readouterr().err
    assert f"parent.model_endpoint: the model endpoint {url} did not answer within 0.5 s" in err


def test_a2a_serve_checks_the_parent_it_serves_not_only_the_configured_kind(
    tmp_path: Path,
    fake_cli: Path,
    closed_port: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "host.toml").write_text(
        f'[parent]\nmodel_endpoint = "http://127.0.0.1:{closed_port}"\n'
    )  # kind: scripted
    config = str(tmp_path / "host.toml")
    assert a2a_serve_main(parent="claude-code", binary=str(fake_cli), config_path=config) == 2
    assert "parent.model_endpoint" in capsys.readouterr().err


def test_the_scripted_parent_needs_no_model(tmp_path: Path, closed_port: int) -> None:
    config = parse_config(
        f'[parent]\nmodel_endpoint = "http://127.0.0.1:{closed_port}"\napi_key_env = "{KEY_ENV}"\n',
        "host.toml",
    )
    config.check_parent()  # nothing to check: no CLI


def test_demo_refuses_a_closed_model_endpoint_before_starting_anything(
    fake_cli: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    options = DemoOptions(
        parent="claude", model_endpoint=url, binary_dir=str(fake_cli.parent), port=0
    )
    assert demo_main(options) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"subagent-engine demo: --model-endpoint: the model endpoint {url}")


def test_the_api_key_check_is_one_rule() -> None:
    assert api_key_problem("K", {"K": "v"}) is None
    assert api_key_problem("K", {"K": ""}) == "the variable K is not set"
    assert api_key_problem("K", {}) == "the variable K is not set"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("max_retries = 16", "must be between 0 and 15"),
        ("max_retries = -1", "must be between 0 and 15"),
        ("max_retries = 1.5", "must be"),
        ("request_timeout_seconds = 0", "must be a positive number of seconds"),
        ("run_deadline_seconds = -3", "must be a positive number of seconds"),
        ("run_deadline_seconds = inf", "must be a positive number of seconds"),
    ],
)
def test_bad_model_bounds_are_config_errors(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(f'[parent]\nkind = "codex"\n{setting}\n', "host.toml")
    assert str(caught.value).startswith(f"host.toml:3: parent.{setting.split()[0]}: ")


def test_the_model_bounds_reach_the_cli_config() -> None:
    config = parse_config(
        '[parent]\nkind = "codex"\nmax_retries = 0\nrequest_timeout_seconds = 30\n'
        "run_deadline_seconds = 90\n",
        "host.toml",
    )
    cli_config, _ = config.parent.cli_parent()
    assert (cli_config.max_retries, cli_config.request_timeout, cli_config.run_deadline) == (
        0,
        30.0,
        90.0,
    )
    default, _ = parse_config('[parent]\nkind = "codex"\n', "host.toml").parent.cli_parent()
    assert (default.max_retries, default.request_timeout, default.run_deadline) == (2, 120.0, None)
