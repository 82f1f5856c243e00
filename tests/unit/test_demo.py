"""`subagent-engine demo`: its plan (which remotes, which parent, what is refused) and
`demo --print`, the ordered stream a user sees in the terminal on a fresh machine.

The served demo itself (child processes, the page, SIGINT) is in
tests/integration/test_demo_command.py.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from adapters.parents import DEFAULT_SCRIPT, Ask, Delegate, Say, Think
from demo import (
    ASKING_EXAMPLE,
    BUILTIN_REMOTES,
    REMOTE_POLICY,
    REMOTE_TOKEN_ENV,
    DemoError,
    DemoOptions,
    RemoteAgent,
    model_endpoint_for,
    plan_demo,
    run_demo,
    run_plan,
)
from demo.agents import REVIEW_QUESTION
from demo.remote import PromptedScript, served_agent
from engine import InputRequiredMode
from web.config import ConfigError, parse_config


def run_json_demo() -> list[dict]:
    out = io.StringIO()
    assert run_demo(as_json=True, fast=True, out=out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_demo_stream_is_ordered_and_complete() -> None:
    lines = run_json_demo()
    cursors = [line["cursor"] for line in lines]
    assert cursors == sorted(set(cursors)), "cursors strictly increase"
    kinds = [line["event"]["kind"] for line in lines]
    assert kinds[0] == "run.started" and kinds[-1] == "run.finished"
    by_agent: dict[str, list[str]] = {}
    for line in lines:
        event = line["event"]
        if "delegation_id" in event:
            by_agent.setdefault(event["agent_key"], []).append(event["kind"])
    assert set(by_agent) == {"research", "review"}
    for agent_kinds in by_agent.values():
        assert agent_kinds[0] == "subagent.started"
        assert agent_kinds[-1] == "subagent.finished"
        assert agent_kinds.count("subagent.finished") == 1
    # Each parent tool result comes after the terminal of the subagent it carries.
    for line in lines:
        event = line["event"]
        if event["kind"] == "tool_call.result":
            result = event["result"]
            terminal = next(
                other["cursor"]
                for other in lines
                if other["event"].get("delegation_id") == result["delegation_id"]
                and other["event"]["kind"] == "subagent.finished"
            )
            assert terminal < line["cursor"]
            assert result["status"] == "completed"
            assert result["parent_tool_call_id"] == event["tool_call_id"]
    text = "".join(
        line["event"].get("delta", "")
        for line in lines
        if line["event"]["kind"] == "subagent.text.delta"
        and line["event"]["agent_key"] == "research"
    )
    assert text == "Trio nurseries give structured cancellation; memory channels carry events."


def test_console_script_prints_the_human_stream() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--print", "--fast"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "run.started" in lines[0] and "run.finished" in lines[-1]
    assert any("subagent.finished" in line and "[review]" in line for line in lines)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_print_options_and_served_options_do_not_mix() -> None:
    fast = cli("--fast")
    assert fast.returncode == 2
    assert "subagent-engine demo: --json and --fast go with --print" in fast.stderr
    mixed = cli("--print", "--parent", "codex", "--port", "9")
    assert mixed.returncode == 2
    assert "--print runs in the terminal: no --port, --parent" in mixed.stderr


def on_path(*names: str) -> Callable[[str], str | None]:
    return lambda name: f"/opt/bin/{name}" if name in names else None


def test_the_default_plan_is_two_builtin_a2a_remotes_and_the_scripted_parent(
    tmp_path: Path,
) -> None:
    plan = plan_demo(DemoOptions(), workdir=str(tmp_path), which=on_path(), python="py")
    assert [r.key for r in plan.remotes] == ["research", "review"]
    assert plan.remotes[0].argv[:5] == ("py", "-m", "demo.remote", "--script", "research")
    assert plan.parent.kind == "scripted" and plan.script == DEFAULT_SCRIPT
    assert plan.files == {}
    # The default script delegates to exactly the built-in remotes' keys.
    [delegate] = [step for step in DEFAULT_SCRIPT if isinstance(step, Delegate)]
    assert {call["agent"] for call in delegate.calls} == set(BUILTIN_REMOTES)
    urls = {"research": "http://127.0.0.1:1/card", "review": "http://127.0.0.1:2/card"}
    config = plan.host_config(urls)
    specs = config.agent_specs({REMOTE_TOKEN_ENV: "t" * 43})
    assert [(s.key, s.protocol, s.display_name) for s in specs] == [
        ("research", "a2a", "Research Agent"),
        ("review", "a2a", "Review Agent"),
    ]
    # Their questions (A2A input-required) wait for the page's viewer.
    assert all(s.policy == REMOTE_POLICY for s in specs)
    assert REMOTE_POLICY.input_required == InputRequiredMode.SURFACE
    assert REMOTE_POLICY.default_timeout > REMOTE_POLICY.input_wait_timeout
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8080)
    parent = plan.parent_factory(config)()
    assert parent.script == DEFAULT_SCRIPT


@pytest.mark.parametrize(
    ("options", "cli"),
    [(DemoOptions(), None), (DemoOptions(remote="codex", model_endpoint="http://m"), "codex")],
)
def test_every_remote_needs_the_token_the_bundled_servers_agents_present(
    tmp_path: Path, options: DemoOptions, cli: str | None
) -> None:
    """The remotes read their token from the environment (its name on their command line, never
    the token); the bundled server's agents present the same variable's value as a bearer."""
    plan = plan_demo(options, workdir=str(tmp_path), which=on_path("codex"), environ={})
    for remote in plan.remotes:
        argv = list(remote.argv)
        assert argv[argv.index("--token-env") + 1] == REMOTE_TOKEN_ENV
    config = plan.host_config(
        {remote.key: f"http://127.0.0.1:1/{remote.key}" for remote in plan.remotes}
    )
    token = "t0ken-" * 8
    specs = config.agent_specs({REMOTE_TOKEN_ENV: token})
    assert [spec.target.config.auth_header for spec in specs] == [  # type: ignore[attr-defined]
        ("Authorization", f"Bearer {token}")
    ] * len(plan.remotes)
    assert all(token in spec.secrets for spec in specs)  # redacted wherever the engine reports
    with pytest.raises(ConfigError, match=REMOTE_TOKEN_ENV):
        config.agent_specs({})


def test_the_builtin_remote_scripts_stream_at_a_human_pace() -> None:
    for remote in BUILTIN_REMOTES.values():
        said = [step for step in remote.script if isinstance(step, Say)]
        assert said and all(step.pause >= 0.2 for step in said)
        assert isinstance(remote.script[0], Think)
        assert len("".join(c for step in said for c in step.chunks)) > 40


def test_a_codex_remote_gets_its_own_config_and_the_scripted_parent_targets_it(
    tmp_path: Path,
) -> None:
    options = DemoOptions(
        remote="codex",
        model_endpoint="http://127.0.0.1:9/",
        model="m",
        api_key_env="DEMO_TEST_KEY",
    )
    plan = plan_demo(
        options,
        workdir=str(tmp_path),
        which=on_path("codex"),
        environ={"DEMO_TEST_KEY": "x"},
        python="py",
    )
    [remote] = plan.remotes
    assert remote.key == "codex" and remote.display_name == "Codex"
    [(path, text)] = plan.files.items()
    assert remote.argv[:6] == ("py", "-m", "cli", "a2a-serve", "--parent", "codex")
    argv = list(remote.argv)
    assert argv[argv.index("--config") + 1] == path
    assert argv[argv.index("--binary") + 1] == "/opt/bin/codex"
    assert "--watch-stdin" in argv
    entry = parse_config(text, path).parent
    assert (entry.kind, entry.model_endpoint, entry.model, entry.api_key_env) == (
        "codex",
        "http://127.0.0.1:9/v1",
        "m",
        "DEMO_TEST_KEY",
    )
    [delegate] = [step for step in plan.script if isinstance(step, Delegate)]
    assert delegate.calls == ({"agent": "codex", "objective": "{prompt}"},)


def test_a_claude_parent_is_the_configured_cli(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\n")
    claude.chmod(0o755)
    options = DemoOptions(
        parent="claude", model_endpoint="http://127.0.0.1:9/v1", binary_dir=str(bin_dir)
    )
    plan = plan_demo(options, workdir=str(tmp_path), which=on_path())
    assert plan.parent.kind == "claude-code"
    assert plan.parent.model_endpoint == "http://127.0.0.1:9"
    assert plan.parent.binary == str(claude)
    assert [r.key for r in plan.remotes] == ["research", "review"]
    config = plan.host_config({"research": "http://h/r", "review": "http://h/v"})
    assert type(plan.parent_factory(config)()).__name__ == "ClaudeCodeParent"


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        (
            DemoOptions(parent="claude", remote="codex"),
            [
                "--parent claude: the Claude Code CLI 'claude' is not on PATH "
                "(npm install -g @anthropic-ai/claude-code, or pass --binary-dir DIR)",
                "--remote codex: the Codex CLI 'codex' is not on PATH "
                "(npm install -g @openai/codex, or pass --binary-dir DIR)",
                "--parent claude and --remote codex need a model endpoint: pass "
                "--model-endpoint URL (and --model NAME, --api-key-env VAR if it needs them)",
            ],
        ),
        (
            DemoOptions(remote="claude", binary_dir="/nonexistent", model_endpoint="http://m"),
            ["--remote claude: no executable 'claude' in --binary-dir /nonexistent"],
        ),
        (
            DemoOptions(parent="codex", binary_dir="/nonexistent", model_endpoint="localhost:9"),
            [
                "--parent codex: no executable 'codex' in --binary-dir /nonexistent",
                "--model-endpoint localhost:9: not an http(s) URL (like http://127.0.0.1:4000)",
            ],
        ),
        (
            DemoOptions(model="m", binary_dir="/b"),
            [
                "--model, --binary-dir: only for --parent claude-code|codex "
                "or --remote claude-code|codex"
            ],
        ),
    ],
)
def test_options_that_cannot_run_name_every_flag_to_fix(
    tmp_path: Path, options: DemoOptions, problems: list[str]
) -> None:
    with pytest.raises(DemoError) as caught:
        plan_demo(options, workdir=str(tmp_path), which=on_path(), environ={})
    assert list(caught.value.problems) == problems


def test_an_api_key_variable_that_is_not_set_is_refused(tmp_path: Path) -> None:
    options = DemoOptions(parent="codex", model_endpoint="http://m", api_key_env="NOPE_KEY")
    with pytest.raises(DemoError) as caught:
        plan_demo(options, workdir=str(tmp_path), which=on_path("codex"), environ={})
    assert caught.value.problems == ("--api-key-env NOPE_KEY: the variable NOPE_KEY is not set",)


@pytest.mark.parametrize(
    ("url", "claude", "codex"),
    [
        ("http://127.0.0.1:9", "http://127.0.0.1:9", "http://127.0.0.1:9/v1"),
        ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9", "http://127.0.0.1:9/v1"),
        ("https://gw.example/llm", "https://gw.example/llm", "https://gw.example/llm/v1"),
    ],
)
def test_one_model_endpoint_serves_both_clis(url: str, claude: str, codex: str) -> None:
    assert model_endpoint_for("claude-code", url) == claude
    assert model_endpoint_for("codex", url) == codex


def test_each_builtin_remote_is_the_demo_remote_command_with_its_script(
    tmp_path: Path,
) -> None:
    from demo.scripts import SCRIPTS

    plan = plan_demo(DemoOptions(), workdir=str(tmp_path))
    for remote in plan.remotes:
        argv = list(remote.argv)
        assert argv[1:3] == ["-m", "demo.remote"]
        assert argv[argv.index("--script") + 1] == remote.key
        assert BUILTIN_REMOTES[remote.key].script == SCRIPTS[remote.key]
        served = served_agent(argv[3 : argv.index("--token-env")])
        assert (served.name, served.listening.host) == (remote.display_name, "127.0.0.1")


@pytest.mark.parametrize(
    ("key", "prompt", "plays"),
    [
        ("review", "Review the plan for: ask me which framework to review", "review-ask"),
        ("review", "Review the plan for: clarify the scope", "review-ask"),
        ("review", "Review the plan for: How do remote subagents stream?", "review"),
        ("research", "Research: ask me which framework to review", "research"),  # no variant
    ],
)
def test_a_builtin_remote_plays_its_asking_variant_for_a_task_that_asks(
    key: str, prompt: str, plays: str
) -> None:
    assert PromptedScript(key).script_for(prompt) == plays


def test_the_review_remote_s_asking_variant_asks_then_uses_the_answer() -> None:
    from demo.scripts import SCRIPTS

    asking = SCRIPTS["review-ask"]
    [ask] = [step for step in asking if isinstance(step, Ask)]
    assert ask.question == REVIEW_QUESTION  # the in-process review agent asks the same
    assert "{answer}" in ask.reply


def test_a_demo_remote_beyond_loopback_needs_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        served_agent(["--script", "review", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    assert "reaches beyond this machine: pass --token-env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        served_agent(["--script", "nothing-like-it"])


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        (
            "import sys; sys.exit(3)",
            "the broken agent (a test) exited before it was ready (exit code 3)",
        ),
        ("print('hello')", "the broken agent (a test) printed 'hello' instead of its READY line"),
    ],
)
def test_a_remote_that_does_not_start_ends_the_demo_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str, problem: str
) -> None:
    plan = plan_demo(DemoOptions(port=0), workdir=str(tmp_path))
    broken = RemoteAgent("broken", "Broken", "", (sys.executable, "-c", code), "a test")
    plan = attrs.evolve(plan, remotes=(broken,))
    out = io.StringIO()
    assert run_plan(plan, out) == 1
    assert out.getvalue() == ""  # the page never started
    assert capsys.readouterr().err == f"subagent-engine demo: {problem}\n"


def test_the_demo_suggests_a_prompt_that_gets_a_question(tmp_path: Path) -> None:
    from demo import _announce, _Running

    plan = plan_demo(DemoOptions(), workdir=str(tmp_path))
    running = [_Running(remote, 100 + i, 9000 + i) for i, remote in enumerate(plan.remotes)]
    out = io.StringIO()
    _announce(plan, "http://127.0.0.1:8080", "http://127.0.0.1:1/mcp", running, out)
    assert f"try: {ASKING_EXAMPLE!r}" in out.getvalue()
    assert PromptedScript("review").script_for(f"Review the plan for: {ASKING_EXAMPLE}") == (
        "review-ask"
    )
