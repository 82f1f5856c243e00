"""What a remote protocol's adapter declares so a host's configuration can register its agents.

An `AgentProtocol` is one protocol as a host's configuration file sees it: its name (`protocol =
"a2a"`), the settings only its agents take (`card_url`; `url` and `stop_url`) and which of them
an agent must give, a phrase that says how its agents are reached (for a mistake's message),
`configure`, which turns an agent's `AgentSettings` into the adapter's own configuration
(validating it: a `ValueError` whose message names the setting at fault), and `target`, which
makes the `engine.Target` from that configuration. Each remote adapter exports its declaration
(`adapters.a2a.AGENT_PROTOCOL`, `adapters.agui.AGENT_PROTOCOL`); the configuration reader
(`web.config.register_protocol`) knows protocols only through these, so a new protocol is a new
declaration, not an edit of the reader. Nothing here performs I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import attrs

from engine import Target

__all__ = ["AgentProtocol", "AgentSettings"]

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
