"""A WebSocket client for tests that lets the server close first, without leaking its socket.

trio-websocket 0.12's client waits for the server's TCP close after the server's close frame
(RFC 6455, section 7.1.1: the client SHOULD wait for the server to close the TCP connection),
and its reader then ends without closing its own socket; `aclose()` returns at once because a
close reason is already recorded. The socket is left to the garbage collector, which warns
(`ResourceWarning: unclosed socket`). `open_websocket` closes the stream itself on the way out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from trio_websocket import WebSocketConnection, open_websocket_url

__all__ = ["open_websocket"]


@asynccontextmanager
async def open_websocket(url: str, **options: Any) -> AsyncIterator[WebSocketConnection]:
    """`trio_websocket.open_websocket_url(url)`, whose TCP stream is closed on leaving."""
    async with open_websocket_url(url, **options) as ws:
        try:
            yield ws
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await ws._stream.aclose()  # the socket trio-websocket left open
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
