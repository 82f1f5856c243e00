"""How the A2A target names what went wrong: an authentication refusal is told by the response's
status (or the SDK's "HTTP Error 401" when it kept no response), never by a "401" that happens to
stand in a URL."""

from __future__ import annotations

import httpx
import pytest
from a2a.client.errors import A2AClientError, AgentCardResolutionError

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import ErrorCode


def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://127.0.0.1:8080/card.json")
    return httpx.HTTPStatusError(
        "refused", request=request, response=httpx.Response(status, request=request)
    )


def _raised_from(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        # A port that holds "401" is no refusal (the card's remote was down).
        (
            AgentCardResolutionError(
                "Network communication error fetching agent card from "
                "http://127.0.0.1:40137/.well-known/agent-card.json: all attempts failed"
            ),
            ErrorCode.AGENT_UNAVAILABLE,
        ),
        (AgentCardResolutionError("HTTP 401", status_code=401), ErrorCode.REMOTE_REJECTED),
        (_raised_from(A2AClientError("refused"), _status_error(403)), ErrorCode.REMOTE_REJECTED),
        (_status_error(401), ErrorCode.REMOTE_REJECTED),
        (_status_error(503), ErrorCode.AGENT_UNAVAILABLE),
        (A2AClientError("HTTP Error 401: Unauthorized"), ErrorCode.REMOTE_REJECTED),
    ],
)
async def test_an_authentication_refusal_is_told_by_its_status(exc: Exception, code: str) -> None:
    target = A2ATarget(A2AAgentConfig(card_url="http://127.0.0.1:8080/card.json"))
    try:
        error = target._error(ErrorCode.AGENT_UNAVAILABLE, "fetching the agent card", exc)
    finally:
        await target.aclose()
    assert error.code == code, error
