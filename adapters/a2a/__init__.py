"""Remote A2A agents as delegation targets: card discovery, the A2A -> event mapping, the session.

`A2ATarget(A2AAgentConfig(card_url=...))` is what a host registers under an agent key
(`AgentSpec(key=..., protocol="a2a", target=..., secrets=config.secrets)`). The translation is
sans-IO (`_mapping`, `_card`); `_target` holds the I/O (a2a-sdk client under Trio). The served
side, a parent run shown as an A2A task (`subagent-engine a2a-serve`), is `_serve_mapping`
(`ParentTaskMapper`, sans-IO); its I/O, the A2A server, is `adapters.a2a.serving`.
"""

from adapters.a2a._card import CardInfo, card_fingerprint, validate_card
from adapters.a2a._mapping import A2AEventMapper
from adapters.a2a._serve_mapping import ParentTaskMapper
from adapters.a2a._target import AGENT_PROTOCOL, A2AAgentConfig, A2ATarget

__all__ = [
    "AGENT_PROTOCOL",
    "A2AAgentConfig",
    "A2AEventMapper",
    "A2ATarget",
    "CardInfo",
    "ParentTaskMapper",
    "card_fingerprint",
    "validate_card",
]
