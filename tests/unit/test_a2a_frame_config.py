"""`max_frame_bytes` of an A2A agent: validated in `A2AAgentConfig`, given by a host's configuration
(`AgentSettings.max_frame_bytes`, read from TOML as a size string)."""

from __future__ import annotations

import pytest

from adapters._remote_http import DEFAULT_MAX_FRAME_BYTES
from adapters.a2a import AGENT_PROTOCOL, A2AAgentConfig
from adapters.agent_protocols import AgentSettings, parse_byte_size
from engine import RegistryError

CARD = "http://127.0.0.1:1/.well-known/agent-card.json"


@pytest.mark.parametrize(
    ("text", "size"),
    [("8388608", 8 << 20), ("8 MiB", 8 << 20), ("512KiB", 512 << 10), (" 1 GiB ", 1 << 30)],
)
def test_sizes_read_with_or_without_a_unit(text: str, size: int) -> None:
    assert parse_byte_size("max_frame_bytes", text) == size


@pytest.mark.parametrize("text", ["", "8 MB", "-1", "1.5 MiB", "eight", "8 mib"])
def test_a_size_that_is_not_one_names_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        parse_byte_size("max_frame_bytes", text)


def test_the_default_is_8_mib() -> None:
    assert A2AAgentConfig(card_url=CARD).max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 8 << 20


@pytest.mark.parametrize("value", [0, 4095, (1 << 30) + 1, True, 8.0])
def test_a_limit_out_of_bounds_is_refused(value: object) -> None:
    with pytest.raises(RegistryError, match="max_frame_bytes"):
        A2AAgentConfig(card_url=CARD, max_frame_bytes=value)  # type: ignore[arg-type]


def test_a_host_configuration_sets_it_per_agent() -> None:
    settings = AgentSettings(settings={"card_url": CARD}, max_frame_bytes=16 << 20)
    assert AGENT_PROTOCOL.configure(settings).max_frame_bytes == 16 << 20
    assert AGENT_PROTOCOL.configure(AgentSettings(settings={"card_url": CARD})).max_frame_bytes == (
        DEFAULT_MAX_FRAME_BYTES
    )
    with pytest.raises(RegistryError, match="max_frame_bytes"):
        AGENT_PROTOCOL.configure(AgentSettings(settings={"card_url": CARD}, max_frame_bytes=1))
