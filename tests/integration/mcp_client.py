"""The official mcp client, connected to one run's endpoint, for the MCP tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from mcp import ClientSession

from adapters.mcp import connect
from engine import RunEndpoint


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
