"""The parent side of a run's endpoint: an official `mcp` client session with readable refusals.

This module owns connecting an in-process parent (the scripted parent, tests, a host's own
agent) to a run's `RunEndpoint` with the official `mcp` client. The client on its own reports
a refused request (a wrong or revoked token, an unknown path, an oversized body) as a nested
exception group whose message never mentions the HTTP status (mcp 2.3.0); `connect()` watches
the HTTP responses and raises `EndpointRefused` instead, with the status and the endpoint's own
JSON reason. The token travels only in the Authorization header.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx2
from mcp import ClientSession
from mcp.client.session import ElicitationFnT, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from adapters._asyncgens import closing_abandoned_generators
from engine import RunEndpoint

__all__ = ["EndpointRefused", "connect"]

#: A blocked `delegate_to_agent` call may take as long as its delegation: reads wait this long.
DEFAULT_READ_TIMEOUT: Final = 3600.0


class EndpointRefused(Exception):
    """The endpoint answered with an HTTP error (401: not this run's token, or the run ended)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the MCP endpoint refused the request: HTTP {status}: {reason}")
        self.status = status
        self.reason = reason


def _reason(body: bytes) -> str:
    try:
        document = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace") or "no reason given"
    if isinstance(document, dict):
        message = document.get("message") or document.get("error")
        if isinstance(message, dict):  # a JSON-RPC error object
            message = message.get("message")
        if isinstance(message, str):
            return message[:500]
    return "no reason given"


@asynccontextmanager
async def connect(
    endpoint: RunEndpoint,
    *,
    headers: Mapping[str, str] | None = None,
    url: str | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    terminate_on_close: bool = True,
    elicitation_callback: ElicitationFnT | None = None,
    client_info: Implementation | None = None,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` on the run's endpoint. `headers` and `url` replace the
    endpoint's own (tests of refusals use them). With an `elicitation_callback` the session
    declares elicitation (form and URL modes) and answers the endpoint's questions with it;
    `client_info` is how it introduces itself; `message_handler` sees the endpoint's
    notifications. Raises `EndpointRefused` when the endpoint
    answers with an HTTP error."""
    refusals: list[EndpointRefused] = []

    async def watch(response: Any) -> None:
        if response.status_code >= 400:
            await response.aread()
            refusals.append(EndpointRefused(response.status_code, _reason(response.content)))

    sent = dict(endpoint.headers if headers is None else headers)
    try:
        async with (
            # Last to exit: what the transport's tasks leave of httpx2's SSE readers is closed
            # once they have ended, not left to the garbage collector.
            closing_abandoned_generators(),
            httpx2.AsyncClient(
                headers=sent,
                timeout=httpx2.Timeout(30.0, read=read_timeout),
                event_hooks={"response": [watch]},
            ) as http,
            streamable_http_client(
                url or endpoint.url, http_client=http, terminate_on_close=terminate_on_close
            ) as streams,
            ClientSession(
                streams[0],
                streams[1],
                elicitation_callback=elicitation_callback,
                client_info=client_info,
                message_handler=message_handler,
            ) as session,
        ):
            await session.initialize()
            yield session
    except BaseException as exc:
        if refusals and not isinstance(exc, EndpointRefused):
            raise refusals[0] from exc
        raise
