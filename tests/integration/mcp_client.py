"""The official mcp client, connected to one run's endpoint, for the MCP tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from engine import RunEndpoint


@asynccontextmanager
async def mcp_session(
    endpoint: RunEndpoint | None,
    *,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    terminate_on_close: bool = True,
) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` on the run's endpoint (its URL and token by default)."""
    assert endpoint is not None or url is not None
    target = url or (endpoint.url if endpoint else "")
    sent = dict(endpoint.headers if headers is None and endpoint else headers or {})
    async with (
        httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(
            target, http_client=http, terminate_on_close=terminate_on_close
        ) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session
