"""What a remote protocol's adapter declares so a host's configuration can register its agents.

An `AgentProtocol` is one protocol as a host's configuration file sees it: its name (`protocol =
"a2a"`), the settings only its agents take (`card_url`; `url` and `stop_url`) and which of them
an agent must give, a phrase that says how its agents are reached (for a mistake's message),
`configure`, which turns an agent's `AgentSettings` into the adapter's own configuration
(validating it: a `ValueError` whose message names the setting at fault), and `target`, which
makes the `engine.Target` from that configuration. What every remote agent takes, whatever its
protocol, is a field of `AgentSettings` (tenant, credential, trusted origins, identity
forwarding, the frame limit); `parse_byte_size` reads the sizes a configuration writes as
strings ("8 MiB"). Each remote adapter exports its declaration
(`adapters.a2a.AGENT_PROTOCOL`, `adapters.agui.AGENT_PROTOCOL`); the configuration reader
(`web.config.register_protocol`) knows protocols only through these, so a new protocol is a new
declaration, not an edit of the reader. Nothing here performs I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final, Generic, TypeVar

import attrs

from engine import Target

__all__ = ["AgentProtocol", "AgentSettings", "parse_byte_size"]

C = TypeVar("C")


@attrs.frozen(kw_only=True)
class AgentSettings:
    """One remote agent as its host configured it, credentials resolved: the settings of its
    protocol (`settings`, strings by name) and what every remote agent takes."""

    settings: Mapping[str, str] = attrs.field(factory=dict)
    tenant: str | None = None
    #: (header, value) sent to the agent's own origin and `trusted_origins` only.
    auth_header: tuple[str, str] | None = attrs.field(default=None, repr=False)
    trusted_origins: tuple[str, ...] = ()
    #: Send who is asking (user, tenant, lineage) with every request.
    forward_identity: bool = False
    #: The most bytes one frame of the agent's stream, or one body it answers, may hold (read no
    #: further than that, before any parse); None: the protocol's default.
    max_frame_bytes: int | None = None


@attrs.frozen(kw_only=True)
class AgentProtocol(Generic[C]):
    """One protocol a host's agents may speak; see the module docs."""

    name: str
    #: The settings only this protocol's agents take: name -> whether an agent must give it.
    settings: Mapping[str, bool]
    #: How its agents are reached, for messages: "an AG-UI agent is reached at `url`".
    reached: str
    configure: Callable[[AgentSettings], C]
    target: Callable[[C], Target]

    def build(self, agent: AgentSettings) -> Target:
        """The target of one agent (`configure`, then `target`)."""
        return self.target(self.configure(agent))


_SIZE: Final = re.compile(r"\s*(\d{1,10})\s*(B|KiB|MiB|GiB)?\s*")
_SIZE_UNITS: Final = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_byte_size(setting: str, text: str) -> int:
    """A size a host's configuration gives as a string: bytes, or a number with `B`, `KiB`,
    `MiB` or `GiB` ("8 MiB"). Raises `ValueError` naming `setting`."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{setting} must be a number of bytes, or one with a unit B, KiB, MiB or GiB "
            f'("8 MiB"); got {text!r}'
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]
