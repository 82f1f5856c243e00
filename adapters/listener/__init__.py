"""The HTTP edge every listener of ours shares: request rules, the request guard, the server.

- `_rules` (sans-IO): `Host`, `Origin`, single-valued headers, the bearer credential parser and
  check,
  JSON bodies (media type, depth, numbers, text) and stream cursors; a broken rule is a
  `Refusal` (status, error, message).
- `_guard`: `RequestGuard`, ASGI middleware that applies the rules to every request before the
  application reads it, and adds framing and sniffing protection to every answer.
- `_serve`: `serve_listener`, Hypercorn's Trio worker with each connection's failure kept to
  that connection, shielded closes, a deadline on sends, bounded connections and an accept loop
  that degrades quietly when descriptors run out (`ListenerLimits`).
- `_uvicorn`: an asyncio ASGI app served on uvicorn from a child process (`listening_socket`,
  `serve_on_uvicorn`): no Nagle delay, `READY` once it listens, stopped when stdin closes.

The bundled server, the MCP endpoint and `a2a-serve` (whose uvicorn runs the same guard) listen
through this package, so a rule fixed here is fixed on every listener.
"""

from adapters.listener._guard import BODY_METHODS, SECURITY_HEADERS, RequestGuard, send_refusal
from adapters.listener._rules import (
    MAX_JSON_DEPTH,
    Refusal,
    bearer_token,
    check_host,
    check_origin,
    check_single_valued,
    header_values,
    is_bearer_credential,
    is_ip_literal,
    is_json_media_type,
    is_loopback,
    parse_cursor,
    parse_json_body,
    require_bearer,
)
from adapters.listener._serve import ListenerLimits, serve_listener
from adapters.listener._uvicorn import listening_socket, serve_on_uvicorn

__all__ = [
    "BODY_METHODS",
    "MAX_JSON_DEPTH",
    "SECURITY_HEADERS",
    "ListenerLimits",
    "Refusal",
    "RequestGuard",
    "bearer_token",
    "check_host",
    "check_origin",
    "check_single_valued",
    "header_values",
    "is_bearer_credential",
    "is_ip_literal",
    "is_json_media_type",
    "is_loopback",
    "listening_socket",
    "parse_cursor",
    "parse_json_body",
    "require_bearer",
    "send_refusal",
    "serve_listener",
    "serve_on_uvicorn",
]
