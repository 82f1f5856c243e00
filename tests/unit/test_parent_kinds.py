"""Parent kinds are declared once (`adapters.parents.PARENT_KINDS`): `claude-code` is the Claude
Code parent's name, `claude` its alias, and every place a kind is named (the host TOML's
`[parent] kind`, `a2a-serve --parent`, `demo --parent` and `--remote`) takes both and means the
same parent by them."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from adapters.parents import (
    CLAUDE_CODE,
    CLI_PARENT_KINDS,
    PARENT_KIND_ALIASES,
    PARENT_KIND_NAMES,
    PARENT_KINDS,
    ClaudeCodeParent,
    CodexParent,
    ScriptedParent,
    parent_kind,
    parent_kinds_text,
)
from cli import _parser
from cli.a2a_serve import A2AServeOptions, a2a_serve_main
from demo import DemoError, DemoOptions, plan_demo
from web.config import ConfigError, ParentEntry, parse_config

CLAUDE_SPELLINGS = ("claude-code", "claude")


def test_the_declaration() -> None:
    assert PARENT_KINDS == ("scripted", "claude-code", "codex")
    assert PARENT_KIND_ALIASES == {"claude": "claude-code"}
    assert PARENT_KIND_NAMES == ("scripted", "claude-code", "codex", "claude")
    assert set(CLI_PARENT_KINDS) == set(PARENT_KINDS) - {"scripted"}
    assert [parent_kind(name) for name in PARENT_KIND_NAMES] == [*PARENT_KINDS, CLAUDE_CODE]
    assert parent_kinds_text() == "scripted, claude-code (or claude), codex"
    with pytest.raises(ValueError, match="use one of scripted, claude-code \\(or claude\\), codex"):
        parent_kind("claude_code")
    # Each adapter names itself by its kind.
    assert (ScriptedParent().name, ClaudeCodeParent.name, CodexParent.name) == PARENT_KINDS


@pytest.mark.parametrize("spelling", CLAUDE_SPELLINGS)
def test_the_host_toml_takes_either_spelling(spelling: str) -> None:
    config = parse_config(f'[parent]\nkind = "{spelling}"\n', "host.toml")
    assert config.parent.kind == CLAUDE_CODE
    assert type(config.parent.cli_parent()[1]()) is ClaudeCodeParent
    assert ParentEntry(kind=spelling).kind == CLAUDE_CODE


def test_the_host_toml_refuses_another_kind_naming_the_kinds() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config('[parent]\nkind = "gpt"\n', "host.toml")
    assert str(refused.value) == (
        "host.toml:2: parent.kind: must be one of scripted, claude-code (or claude), codex"
    )


@pytest.mark.parametrize("spelling", CLAUDE_SPELLINGS)
def test_a2a_serve_takes_either_spelling(spelling: str) -> None:
    assert _parser().parse_args(["a2a-serve", "--parent", spelling]).parent == spelling
    options = A2AServeOptions(parent=spelling)
    assert options.parent == CLAUDE_CODE
    assert options.agent_description.startswith("Claude Code, served over A2A")


def test_a2a_serve_refuses_another_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert a2a_serve_main(parent="gpt") == 2
    assert capsys.readouterr().err == (
        "subagent-engine a2a-serve: unknown parent kind 'gpt': "
        "use one of scripted, claude-code (or claude), codex\n"
    )


def _claude_bin(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\n")
    claude.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("spelling", CLAUDE_SPELLINGS)
def test_demo_takes_either_spelling_for_the_parent(tmp_path: Path, spelling: str) -> None:
    assert _parser().parse_args(["demo", "--parent", spelling]).parent == spelling
    options = DemoOptions(
        parent=spelling, model_endpoint="http://127.0.0.1:9", binary_dir=_claude_bin(tmp_path)
    )
    plan = plan_demo(options, workdir=str(tmp_path), which=lambda name: None)
    assert plan.parent.kind == CLAUDE_CODE
    assert plan.parent.binary == str(tmp_path / "bin" / "claude")


@pytest.mark.parametrize("spelling", CLAUDE_SPELLINGS)
def test_demo_takes_either_spelling_for_the_remote(tmp_path: Path, spelling: str) -> None:
    assert _parser().parse_args(["demo", "--remote", spelling]).remote == spelling
    options = DemoOptions(
        remote=spelling, model_endpoint="http://127.0.0.1:9", binary_dir=_claude_bin(tmp_path)
    )
    [remote] = plan_demo(options, workdir=str(tmp_path), which=lambda name: None).remotes
    assert remote.key == spelling  # the agent is registered under the name the user gave
    argv = list(remote.argv)
    assert argv[argv.index("--parent") + 1] == CLAUDE_CODE
    assert remote.display_name == "Claude Code"


def test_demo_refuses_other_kinds_naming_the_spellings(tmp_path: Path) -> None:
    with pytest.raises(DemoError) as refused:
        plan_demo(DemoOptions(parent="gpt", remote="scripted"), workdir=str(tmp_path))
    assert refused.value.problems == (
        "--parent gpt: use one of scripted, claude-code (or claude), codex",
        "--remote scripted: use one of builtin, claude-code (or claude), codex",
    )


@pytest.mark.parametrize(
    ("command", "flag"), [("demo", "--parent"), ("demo", "--remote"), ("a2a-serve", "--parent")]
)
def test_the_command_lines_help_names_every_spelling(command: str, flag: str) -> None:
    """The help lists the kinds in words (the argument parser does not import the parents):
    it must name each one the declaration has, and each alias with its kind."""
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        _parser().parse_args([command, "--help"])
    text = " ".join(out.getvalue().split())
    start = text.index(f"{flag} KIND", text.index("options:"))
    help_text = text[start : text.index(" --", start + 1)]
    kinds = CLI_PARENT_KINDS if flag == "--remote" else PARENT_KINDS
    for kind in kinds:
        assert kind in help_text
    for alias, kind in PARENT_KIND_ALIASES.items():
        assert f"{kind} (or {alias})" in help_text
