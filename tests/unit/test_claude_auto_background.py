"""Claude Code's auto-background threshold for MCP calls, as `claude_command` hands it over.

A delegation moved to the background answers the model with a placeholder and may lose its
result (see `adapters.parents._claude_code`), so the default is 0 (never), the configured value
wins over the same variable in `env`, and a threshold that is not whole milliseconds >= 0 is a
typed error.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.parents._claude_code import ClaudeCodeConfig, claude_command
from adapters.parents._process import child_environment

VARIABLE = "CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS"


def env_of(config: ClaudeCodeConfig) -> dict[str, str]:
    """The CLI's whole environment for one run."""
    _, extra = claude_command(config, "hi", url="http://127.0.0.1:9/mcp", server_name="subagents")
    return child_environment(config, extra)


def test_by_default_claude_never_moves_a_delegation_to_the_background() -> None:
    assert env_of(ClaudeCodeConfig())[VARIABLE] == "0"


def test_the_configured_threshold_wins_over_the_same_variable_in_env() -> None:
    config = ClaudeCodeConfig(auto_background_ms=2000, env={VARIABLE: "5"})
    assert env_of(config)[VARIABLE] == "2000"


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("2000", TypeError), (None, TypeError)],
)
def test_a_threshold_that_is_not_whole_milliseconds_is_refused(
    value: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="auto_background_ms"):
        ClaudeCodeConfig(auto_background_ms=value)
