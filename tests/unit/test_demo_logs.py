"""`subagent-engine demo`'s log options, `--log-format text|json` and `--access-log`, as `serve`
takes them: they parse, `demo --print` writes a JSON line per run's start and end when asked
(and none when not), the built-in remotes write their lines in the demo's format, and a bad
value exits 2 naming the flag.

The served demo's lines (the page's runs, the access log, the remotes) are checked on the real
command in tests/integration/test_demo_logs.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli import _parser
from demo import REMOTE_TOKEN_ENV, DemoError, DemoOptions, plan_demo
from demo.remote import served_agent


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_log_flags_parse_as_serve_s() -> None:
    given = _parser().parse_args(["demo", "--log-format", "json", "--access-log"])
    assert (given.log_format, given.access_log) == ("json", True)
    off = _parser().parse_args(["demo", "--no-access-log"])
    assert (off.log_format, off.access_log) == (None, False)
    default = _parser().parse_args(["demo"])
    assert (default.log_format, default.access_log) == (None, None)
    served = _parser().parse_args(["serve", "--log-format", "json", "--access-log"])
    assert (served.log_format, served.access_log) == (given.log_format, given.access_log)


def test_print_in_json_mode_writes_a_json_line_per_run_start_and_end() -> None:
    done = demo("--print", "--fast", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    # The event stream on stdout is unchanged; the log lines are on stderr, each one JSON.
    assert "run.started" in done.stdout.splitlines()[0]
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    [start] = [line for line in lines if line["event"] == "run.start"]
    assert start["level"] == "INFO" and start["logger"] == "subagent_engine.runs"
    assert start["run_id"].startswith("run-") and start["ts"].endswith("Z")
    [end] = [line for line in lines if line["event"] == "run.end"]
    assert (end["run_id"], end["status"], end["delegations"]) == (start["run_id"], "finished", 2)
    agents = sorted(line["agent"] for line in lines if line["event"] == "delegation.end")
    assert agents == ["research", "review"]


def test_print_in_text_mode_writes_readable_lines_and_without_the_flag_none() -> None:
    text = demo("--print", "--fast", "--log-format", "text")
    assert text.returncode == 0, text.stderr
    [start] = [line for line in text.stderr.splitlines() if " run.start " in line]
    assert " INFO subagent_engine.runs run.start run=run-" in start
    quiet = demo("--print", "--fast")
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--log-format", "xml"),
            "argument --log-format: invalid choice: 'xml' (choose from 'text', 'json')",
        ),
        (
            ("--print", "--log-format", "JSON"),
            "argument --log-format: invalid choice: 'JSON' (choose from 'text', 'json')",
        ),
        (
            ("--print", "--access-log"),
            "subagent-engine demo: --access-log logs the page's requests; --print serves no page",
        ),
    ],
)
def test_a_bad_log_option_exits_2_naming_it(args: tuple[str, ...], message: str) -> None:
    done = demo(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""


def test_a_plan_with_an_unknown_log_format_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(DemoError) as refused:
        plan_demo(DemoOptions(log_format="yaml"), workdir=str(tmp_path))
    assert refused.value.problems == ("--log-format yaml: use one of text, json",)


@pytest.mark.parametrize("kind", ["text", "json"])
def test_the_builtin_remotes_write_in_the_demo_s_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv(REMOTE_TOKEN_ENV, "t" * 32)
    plan = plan_demo(DemoOptions(log_format=kind), workdir=str(tmp_path))
    for remote in plan.remotes:
        argv = list(remote.argv)
        assert argv[argv.index("--log-format") + 1] == kind
        served_agent(argv[argv.index("demo.remote") + 1 :])  # the remote takes it


def test_a_remote_refuses_an_unknown_log_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        served_agent(["--script", "review", "--log-format", "xml"])
    assert exited.value.code == 2
    assert "argument --log-format: invalid choice: 'xml'" in capsys.readouterr().err
