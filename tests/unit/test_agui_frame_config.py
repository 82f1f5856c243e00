"""`max_frame_bytes` of an AG-UI agent: validated in `AguiAgentConfig` with the same bounds as an
A2A agent's, given by a host's configuration (`AgentSettings.max_frame_bytes`)."""

from __future__ import annotations

import pytest

from adapters._remote_http import MAX_FRAME_LIMIT, MIN_FRAME_LIMIT
from adapters.agent_protocols import AgentSettings
from adapters.agui import AGENT_PROTOCOL, AguiAgentConfig
from adapters.agui._remote import MAX_FRAME_BYTES
from engine import RegistryError

URL = "http://127.0.0.1:1/agent"


def test_the_default_is_4_mib() -> None:
    assert AguiAgentConfig(url=URL).max_frame_bytes == MAX_FRAME_BYTES == 4 << 20


@pytest.mark.parametrize("value", [0, MIN_FRAME_LIMIT - 1, MAX_FRAME_LIMIT + 1, True, 8.0])
def test_a_limit_out_of_bounds_is_refused(value: object) -> None:
    with pytest.raises(RegistryError, match="max_frame_bytes"):
        AguiAgentConfig(url=URL, max_frame_bytes=value)  # type: ignore[arg-type]


def test_a_host_configuration_sets_it_per_agent() -> None:
    settings = AgentSettings(settings={"url": URL}, max_frame_bytes=16 << 20)
    assert AGENT_PROTOCOL.configure(settings).max_frame_bytes == 16 << 20
    plain = AgentSettings(settings={"url": URL})
    assert AGENT_PROTOCOL.configure(plain).max_frame_bytes == MAX_FRAME_BYTES
    with pytest.raises(RegistryError, match="max_frame_bytes"):
        AGENT_PROTOCOL.configure(AgentSettings(settings={"url": URL}, max_frame_bytes=1))
