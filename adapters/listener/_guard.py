"""The request guard: `_rules` applied to every request of a listener, as ASGI middleware.

This module owns the one place where a listener refuses a request for what its headers say,
before the application (Quart-Trio, the MCP SDK, Starlette) reads a byte of it: repeated
single-valued headers, a `Host` the listener does not answer to, a page from a foreign `Origin`
(HTTP and WebSocket handshakes alike: browsers apply no same-origin policy to WebSockets), and a
body whose media type is not JSON where the listener only takes JSON (a browser sends
`text/plain` and form bodies cross-site without asking first). It also adds the headers that keep
its answers out of other sites' frames and sniffers. It runs on any ASGI server (Hypercorn's Trio
worker, uvicorn on asyncio): it awaits nothing but the ASGI callables it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any, Final

from adapters.listener._rules import (
    Refusal,
    check_host,
    check_origin,
    check_single_valued,
    header_values,
    is_json_media_type,
)

__all__ = ["BODY_METHODS", "SECURITY_HEADERS", "RequestGuard", "send_refusal"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: On every answer: no framing by another site (clickjacking), no content sniffing, and no
#: address of ours in another site's referrer.
SECURITY_HEADERS: Final = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
#: The methods whose requests carry a body the application reads.
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


async def send_refusal(scope: Scope, send: Send, refusal: Refusal) -> None:
    """Answer `refusal` as JSON: an HTTP response, or for a WebSocket handshake the ASGI
    "websocket.http.response" extension where the server has it (else a plain close, which
    servers answer with 403)."""
    body = refusal.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((name.encode(), value.encode()) for name, value in refusal.headers),
        *SECURITY_HEADERS,
    ]
    if scope["type"] == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        start = {"type": "websocket.http.response.start", "status": refusal.status}
        await send({**start, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """ASGI middleware: refuse what `_rules` forbids, pass the rest to `app` untouched but for
    `SECURITY_HEADERS` on its answers.

    `allowed_hosts`: host names served beyond IP literals and `localhost` (`"*"`: any).
    `allowed_origins`: web origins beyond the listener's own that may call it (CORS).
    `json_only`: a request with a body must declare a JSON media type (415 otherwise).
    `websockets`: whether the application serves WebSockets (else handshakes get 404).
    """

    def __init__(
        self,
        app: Any,
        *,
        allowed_hosts: Collection[str] = (),
        allowed_origins: Collection[str] = (),
        json_only: bool = True,
        websockets: bool = True,
    ) -> None:
        self.app = app
        self.websockets = websockets
        self.allowed_hosts = frozenset(host.lower() for host in allowed_hosts)
        self.allowed_origins = frozenset(allowed_origins)
        self.json_only = json_only
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            self.check(scope)
            if scope["type"] == "websocket" and not self.websockets:
                raise Refusal(404, "not_found", "This listener serves no WebSocket.")
        except Refusal as refusal:
            self.refused += 1
            await send_refusal(scope, send, refusal)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [pair for pair in SECURITY_HEADERS if pair[0] not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def check(self, scope: Scope) -> None:
        """Raise the `Refusal` a request's headers earn, if any."""
        headers = scope.get("headers") or ()
        check_single_valued(headers)
        host = next(iter(header_values(headers, b"host")), None)
        check_host(host, self.allowed_hosts)
        origin = next(iter(header_values(headers, b"origin")), None)
        check_origin(origin, host, self.allowed_origins)
        if self.json_only and scope.get("method") in BODY_METHODS and _has_body(headers):
            content_type = next(iter(header_values(headers, b"content-type")), None)
            if not is_json_media_type(content_type):
                raise Refusal(
                    415, "unsupported_media_type", "The body must be JSON (application/json)."
                )


def _has_body(headers: Any) -> bool:
    if header_values(headers, b"transfer-encoding"):
        return True
    length = next(iter(header_values(headers, b"content-length")), b"0")
    return length.strip() not in (b"", b"0")
