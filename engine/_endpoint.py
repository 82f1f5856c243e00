"""The run-scoped endpoint seam: what a run gets to hand to its parent agent.

A run that may delegate needs a tool endpoint its parent agent can call (the MCP server of
`adapters.mcp`). The engine does not know MCP: it knows a `RunEndpointProvider`, asked for one
`RunEndpoint` per run when the run opens and told when the run ends. The endpoint is a URL and a
fresh bearer token; the token identifies the run, so the tool never needs the run id from the
model. A run whose provider cannot give it an endpoint fails in `open_run()` with
`RunEndpointError`, before any parent agent is started with a configuration that would not work.

The token is a credential: it is kept out of `repr`, and the engine never puts it into an event,
a result or a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from engine._actors import Run

__all__ = ["RunEndpoint", "RunEndpointError", "RunEndpointProvider"]


@attrs.frozen(kw_only=True)
class RunEndpoint:
    """Where a run's parent agent calls `delegate_to_agent`: a URL and the run's bearer token.

    `server_name` is the name the parent's MCP configuration should give the server (tools then
    show up as `mcp__<server_name>__delegate_to_agent` in Claude Code).
    """

    url: str
    token: str = attrs.field(repr=False)
    server_name: str = "subagents"
    transport: str = "http"

    @property
    def headers(self) -> Mapping[str, str]:
        """The HTTP headers every request to the endpoint must carry."""
        return {"Authorization": f"Bearer {self.token}"}


class RunEndpointError(Exception):
    """A run could not get its endpoint, so it was not opened."""


class RunEndpointProvider(Protocol):
    """Gives each run its endpoint (e.g. `adapters.mcp.DelegationEndpoint`)."""

    async def open_endpoint(self, run: Run) -> RunEndpoint:
        """Register `run` and return its endpoint. Raising fails the run's opening."""
        ...

    async def close_endpoint(self, run_id: str) -> None:
        """The run ended: revoke its token (later requests are refused) and end its calls."""
        ...
