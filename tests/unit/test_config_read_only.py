"""`read_only` in an `[[agents]]` entry: the host's word that delegating to the agent changes
nothing, carried into `AgentSpec.read_only` (and so into the MCP tools' `readOnlyHint`)."""

from __future__ import annotations

import textwrap

import pytest

from engine import AgentSpec
from web.config import ConfigError, parse_config

HOST = textwrap.dedent(
    """\
    [[agents]]
    key = "research"
    card_url = "http://127.0.0.1:9999/.well-known/agent-card.json"
    read_only = true

    [[agents]]
    key = "review"
    card_url = "http://127.0.0.1:9998/.well-known/agent-card.json"
    """
)


def test_read_only_reaches_the_agent_spec_and_defaults_to_false() -> None:
    specs = parse_config(HOST, "host.toml").agent_specs({})
    assert [(s.key, s.read_only) for s in specs] == [("research", True), ("review", False)]


def test_read_only_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(HOST.replace("read_only = true", 'read_only = "yes"'), "host.toml")
    assert caught.value.line == 4
    assert caught.value.field == "agents[0].read_only"


def test_an_agent_spec_takes_only_a_boolean() -> None:
    from adapters.inprocess import InProcessTarget

    async def answer(task: object) -> str:
        return "ok"

    with pytest.raises(TypeError, match="read_only"):
        AgentSpec(key="research", target=InProcessTarget(answer), read_only="yes")  # type: ignore[arg-type]
