"""The MCP side of a run, for the tests of `delegate_to_agent`: an endpoint, a client, raw HTTP.

`open_endpoint_run` serves a `DelegationEndpoint` on 127.0.0.1 and opens one run on it;
`mcp_session` connects the official mcp client to a run's endpoint (`adapters.mcp.connect`);
`RawMCP` speaks just enough MCP over raw HTTP for a test that needs a precise wire event (a
connection dropped or a session deleted mid-call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp import ClientSession

from adapters.a2a import A2ATarget
from adapters.mcp import DelegationEndpoint, connect
from engine import AgentSpec, Engine, Run, RunEndpoint
from tests.helpers.runs import OBJECTIVE

#: The MCP protocol version `RawMCP` speaks.
PROTOCOL_VERSION = "2025-06-18"


def call_args(agent: str = "research", **extra: Any) -> dict[str, Any]:
    """`delegate_to_agent`'s arguments: the agent, `OBJECTIVE`, and `extra`."""
    return {"agent": agent, "objective": OBJECTIVE, **extra}


@asynccontextmanager
async def open_endpoint_run(
    agents: list[AgentSpec], **settings: Any
) -> AsyncIterator[tuple[DelegationEndpoint, Engine, Run]]:
    """An endpoint (`settings` configure it), an engine with `agents` on it, and one open run;
    the A2A agents' targets are closed after."""
    try:
        async with (
            DelegationEndpoint(**settings).serve() as endpoint,
            Engine(agents, endpoints=endpoint) as eng,
            eng.open_run() as run,
        ):
            yield endpoint, eng, run
    finally:
        for agent in agents:
            if isinstance(agent.target, A2ATarget):
                await agent.target.aclose()


async def journal_events(eng: Engine, run_id: str) -> list[Any]:
    """The run's journaled events up to its head now."""
    journal = eng.journal(run_id)
    assert journal is not None
    return [e.event for e in await journal.store.read_after(0, journal.head)]


@asynccontextmanager
async def mcp_session(
    endpoint: RunEndpoint | None,
    *,
    headers: Mapping[str, str] | None = None,
    terminate_on_close: bool = True,
) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` on the run's endpoint (`adapters.mcp.connect`)."""
    assert endpoint is not None, "the run has no endpoint: was the Engine given one?"
    async with connect(
        endpoint, headers=headers, read_timeout=300.0, terminate_on_close=terminate_on_close
    ) as session:
        yield session


#: An MCP `initialize` request's JSON-RPC body.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


async def post_initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    """An MCP `initialize` request on raw HTTP, with `headers`; the response as it came."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        return await http.post(
            url,
            json=INITIALIZE,
            headers={"accept": "application/json, text/event-stream", **headers},
        )


class RawMCP:
    """Just enough MCP over raw HTTP to drop a connection or DELETE a session mid-call."""

    def __init__(self, endpoint: RunEndpoint, http: httpx.AsyncClient) -> None:
        self.endpoint = endpoint
        self.http = http
        self.session_id = ""

    def headers(self) -> dict[str, str]:
        headers = {
            **self.endpoint.headers,
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": PROTOCOL_VERSION,
        }
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        return headers

    async def open(self) -> None:
        response = await post_initialize(self.endpoint.url, dict(self.endpoint.headers))
        response.raise_for_status()
        self.session_id = response.headers["mcp-session-id"]
        notified = await self.http.post(
            self.endpoint.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=self.headers(),
        )
        assert notified.status_code == 202

    def call_body(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "delegate_to_agent", "arguments": arguments},
        }
