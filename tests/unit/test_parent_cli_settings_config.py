"""The host TOML's `[parent] model_silence_seconds` and `auto_background_ms` reach the CLI
configs, and bad values are `ConfigError`s naming the field and its line."""

from __future__ import annotations

import pytest

from web.config import ConfigError, parse_config


def cli_config(toml: str) -> object:
    config, _ = parse_config(toml, "host.toml").parent.cli_parent()
    return config


def test_model_silence_seconds_reaches_the_cli_config() -> None:
    config = cli_config('[parent]\nkind = "codex"\nmodel_silence_seconds = 45\n')
    assert config.model_silence == 45.0  # type: ignore[attr-defined]
    off = cli_config('[parent]\nkind = "claude-code"\nmodel_silence_seconds = 0\n')
    assert off.silence_limit() is None  # type: ignore[attr-defined]
    default = cli_config(
        '[parent]\nkind = "codex"\nmax_retries = 1\nrequest_timeout_seconds = 10\n'
    )
    assert default.silence_limit() == 2 * 10.0 + 30.0  # type: ignore[attr-defined]


def test_auto_background_ms_reaches_claude_code() -> None:
    config = cli_config('[parent]\nkind = "claude"\nauto_background_ms = 120000\n')
    assert config.auto_background_ms == 120000  # type: ignore[attr-defined]
    default = cli_config('[parent]\nkind = "claude-code"\n')
    assert default.auto_background_ms == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model_silence_seconds = -1", "must be a number of seconds >= 0"),
        ("model_silence_seconds = inf", "must be a number of seconds >= 0"),
        ('model_silence_seconds = "60"', "must be"),
        ("auto_background_ms = -1", "must not be negative"),
        ("auto_background_ms = 1.5", "must be"),
        ("auto_background_ms = true", "must be"),
    ],
)
def test_bad_cli_settings_are_config_errors(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(f'[parent]\nkind = "claude-code"\n{setting}\n', "host.toml")
    assert str(caught.value).startswith(f"host.toml:3: parent.{setting.split()[0]}: ")


def test_auto_background_ms_is_refused_for_codex() -> None:
    with pytest.raises(ConfigError, match="claude-code' only") as caught:
        parse_config('[parent]\nkind = "codex"\nauto_background_ms = 0\n', "host.toml")
    assert str(caught.value).startswith("host.toml:3: parent.auto_background_ms: ")
