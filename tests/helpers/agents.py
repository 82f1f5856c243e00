"""The `AgentSpec`s the tests register: any target with a policy, an in-process agent, an A2A
agent by its card."""

from __future__ import annotations

from typing import Any

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.inprocess import InProcessTarget, LocalTask
from engine import AgentSpec, DelegationPolicy


def spec(target: object, key: str = "remote", **policy: object) -> AgentSpec:
    """`target` registered as `key`, with a policy of `policy`'s fields."""
    return AgentSpec(key=key, target=target, policy=DelegationPolicy(**policy))  # type: ignore[arg-type]


async def _echo(task: LocalTask) -> str:
    await task.say("looked at ", task.objective)
    return f"summary of {task.objective}"


def local_agent(key: str = "research", fn: Any = _echo, **fields: Any) -> AgentSpec:
    """An in-process agent running `fn` (by default: it says, then returns, its objective)."""
    return AgentSpec(key=key, target=InProcessTarget(fn), **fields)


def a2a_agent(
    card_url: str, key: str = "remote", *, token: str | None = None, **policy: Any
) -> AgentSpec:
    """The A2A agent whose card is at `card_url`, in tenant `acme`, with a bearer `token`."""
    config = A2AAgentConfig(
        card_url=card_url,
        tenant="acme",
        auth_header=("Authorization", f"Bearer {token}") if token else None,
    )
    return AgentSpec(
        key=key,
        display_name=f"A2A {key}",
        protocol="a2a",
        target=A2ATarget(config),
        policy=DelegationPolicy(**policy),
        secrets=config.secrets,
    )
