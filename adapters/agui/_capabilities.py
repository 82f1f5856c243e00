"""Which visibility mode a `POST /agui` client gets when it names none: `stream_mode` (sans-IO).

This module owns one rule: reading what an AG-UI client says about itself in its
`RunAgentInput` and picking `attributed` (SUBAGENT_* lifecycle events, `subagentRunId` tags) or
`custom` (the same facts as CUSTOM `subagent.*` events, which every AG-UI client reads) for it.
It does no I/O and does not know about explicit modes: the server applies `?mode=` and
`forwardedProps.mode` first and asks here only when neither is given.

What a client can say, strongest first:

1. `forwardedProps.capabilities.multiAgent.subagents`: `true` (it reads SUBAGENT_* events) or
   `false` (it does not). AG-UI 1.0 capabilities are discovery only, declared by the agent
   (`AgentCapabilities`, https://docs.ag-ui.com/concepts/capabilities: "there is no
   negotiation", and there `multiAgent.subagents` is the list of subagents an agent can invoke);
   the protocol gives a client no field of its own for this, so this server reads it from
   `forwardedProps` (which the protocol passes through untouched), under the protocol's own
   category name.
2. `protocolVersion` (AG-UI 1.0, "Run Input": a consumer implementing 1.0 declares it; absence
   identifies a peer from before the protocol carried a version): a declared version of major 1
   or later reads SUBAGENT_* events, which are part of 1.0 (@ag-ui/client 1.0.0 sends "1.0").
3. Nothing declared: the server's configured mode (`[server] visibility`, `attributed` unless
   the operator chose otherwise). An operator whose clients include pre-1.0 ones (before
   @ag-ui/client 0.0.59 SUBAGENT_* events are refused outright) sets `visibility = "custom"`;
   1.0 clients still get `attributed`, because they say so.

A declaration only ever chooses between `attributed` and `custom`: a server configured `inline`
or `hidden` keeps subagents out of every stream that names no mode. A declaration that is not
one of the shapes above is a `CapabilityError` (the server answers 400), never a guess.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["CapabilityError", "stream_mode"]

#: The modes a declaration chooses between; a configured default outside them is kept.
_NEGOTIABLE: Final = frozenset({"attributed", "custom"})
#: AG-UI's version form, `major.minor` (the official client compares only this form).
_VERSION: Final = re.compile(r"(\d{1,6})\.(\d{1,6})")


class CapabilityError(ValueError):
    """A capability declaration that cannot be read; `field` names where (`forwardedProps...`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def declared_subagents(forwarded_props: Any, protocol_version: str | None) -> bool | None:
    """Whether the client declared it reads SUBAGENT_* events (see the module's docstring);
    None when it declared nothing either way."""
    if isinstance(forwarded_props, dict) and "capabilities" in forwarded_props:
        capabilities = forwarded_props["capabilities"]
        where = "forwardedProps.capabilities"
        if not isinstance(capabilities, dict):
            raise CapabilityError(where, "must be an object.")
        if "multiAgent" in capabilities:
            multi_agent = capabilities["multiAgent"]
            if not isinstance(multi_agent, dict):
                raise CapabilityError(f"{where}.multiAgent", "must be an object.")
            if "subagents" in multi_agent:
                subagents = multi_agent["subagents"]
                if not isinstance(subagents, bool):
                    raise CapabilityError(f"{where}.multiAgent.subagents", "must be true or false.")
                return subagents
    if protocol_version is None:
        return None
    match = _VERSION.fullmatch(protocol_version)
    if match is None:
        raise CapabilityError("protocolVersion", "must be a version such as 1.0.")
    return int(match.group(1)) >= 1


def stream_mode(forwarded_props: Any, protocol_version: str | None, default: str) -> str:
    """The mode a client that named none gets: `attributed` or `custom` by its declaration,
    else `default` (and `default` whenever it is neither of those two)."""
    declared = declared_subagents(forwarded_props, protocol_version)
    if declared is None or default not in _NEGOTIABLE:
        return default
    return "attributed" if declared else "custom"
