"""Serving an asyncio ASGI app on uvicorn from a child process: socket, start, stop on EOF.

The A2A server of `a2a-serve` runs on asyncio (the a2a-sdk server does not run under Trio), and
so do the peer servers the tests start; each is a child process that prints `READY <port>` once
it accepts connections and stops when its stdin closes. This module owns that shape once:

- `listening_socket` makes the socket with `IPPROTO_TCP` rather than protocol 0: asyncio turns
  Nagle's algorithm off (`TCP_NODELAY`) on the connections it accepts only when the socket says
  it is TCP, and uvicorn writes a response's head and its body in two writes. With Nagle on,
  the body waits until the head is acknowledged (RFC 896), and the client delays that ACK
  (RFC 1122 section 4.2.3.2): about 40 ms on every response of a kept-alive connection.
- `serve_on_uvicorn` runs the app until uvicorn stops, calls `ready()` once it listens, and
  with `watch_stdin` asks uvicorn to stop when stdin reaches end of file (the parent died or
  closed its end), so even a killed parent leaves no server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

__all__ = ["listening_socket", "serve_on_uvicorn"]


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (`host`, `port`) for uvicorn to listen on (see the module docs)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_on_uvicorn(
    config: uvicorn.Config,
    sock: socket.socket,
    *,
    ready: Callable[[], None],
    watch_stdin: bool = False,
) -> None:
    """Serve `config`'s app on `sock` until uvicorn stops; `ready()` once it listens."""
    import uvicorn

    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # startup failed: raise its error
            raise SystemExit("the server exited before it started")
        await asyncio.sleep(0.01)
    if watch_stdin:
        _stop_when_stdin_closes(server)
    ready()
    await serving


def _stop_when_stdin_closes(server: Any) -> None:
    loop = asyncio.get_running_loop()

    def watch() -> None:
        # The raw descriptor, not sys.stdin: a daemon thread parked in a buffered read holds
        # the buffer's lock, and the interpreter aborts when it finalizes ("could not acquire
        # lock for <stdin>") if the process stops for another reason (SIGTERM).
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to stop
            loop.call_soon_threadsafe(setattr, server, "should_exit", True)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
