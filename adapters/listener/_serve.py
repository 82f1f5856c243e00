"""One hardened HTTP listener: Hypercorn's Trio worker, with every connection kept to itself.

This module owns the accept loop and the life of each connection for every listener of ours (the
bundled server and the MCP endpoint); it knows nothing of routes, tokens or runs. It reuses
Hypercorn's protocol machinery (h11, wsproto, h2) and its ASGI lifespan, and replaces the
worker loop around them (`hypercorn.trio.run.worker_serve`, Hypercorn 0.18) to repair what
lets one peer hurt the process or other peers:

- A connection's failure stays in that connection. Hypercorn lets an exception raised while it
  answers a broken request (e.g. `h11.LocalProtocolError` when a WebSocket upgrade request
  carries body bytes in the same write, raised from its error-response path) escape the
  connection into the server's nursery, which ends the whole process. Here each connection
  runs under a handler that logs such a failure (rate-limited, one line) and closes only it.
- Closing is shielded. Hypercorn closes a connection from inside the application's task; when
  the framework has already cancelled that task (Quart-Trio does, once a response is sent), the
  close is cancelled before the socket is, so `Connection: close` left sockets open until the
  peer went away. Here the close always completes.
- A peer that stops reading is dropped. Hypercorn sends in a shielded scope with no deadline, so
  a viewer that never reads holds its task, its subscription and its socket forever. Here each
  piece of at most `SEND_PIECE` bytes must be taken by the kernel within `send_timeout`.
- Accepting degrades instead of storming. Out of file descriptors, Trio's loop logs a traceback
  every 0.1 s; here it backs off (up to a second) and logs one line per `LOG_INTERVAL`.
  At most `max_connections` connections are open at once (never more than half the process's
  descriptor limit); when all are taken and another peer waits, the connection idle longest
  (no request in progress) is closed to make room, so peers that open sockets and send nothing
  cannot keep others out; when none is idle, the kernel's backlog holds new ones until a
  slot frees.

Idle connections (before the first request and between requests) are closed after
`keep_alive_timeout`, so a peer that opens sockets and sends nothing, or a request header slowly,
costs a slot only that long. Header blocks are bounded by `max_header_bytes` and WebSocket
messages by `websocket_max_message_bytes` (Hypercorn answers beyond them itself).
"""

from __future__ import annotations

import errno
import logging
import math
import resource
from collections.abc import Callable
from typing import Any, Final

import attrs
import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

__all__ = ["ListenerLimits", "accept_connections", "serve_listener"]

log: Final = logging.getLogger("subagent_engine.listener")

#: Bytes handed to the kernel per deadline: a peer that drains slowly but steadily is kept.
SEND_PIECE: Final = 64 * 1024
#: How long closing a connection waits for a send in progress to finish.
CLOSE_GRACE: Final = 1.0
#: At most one log line per this many seconds for each kind of trouble (descriptors exhausted,
#: a connection that failed); the lines say how many were not logged.
LOG_INTERVAL: Final = 10.0
#: `accept()` errors that mean "out of a resource for now", as Trio counts them.
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
)
#: Shortest and longest pause of the accept loop while descriptors are exhausted.
_MIN_ACCEPT_BACKOFF: Final = 0.01
_MAX_ACCEPT_BACKOFF: Final = 1.0


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class ListenerLimits:
    """What one listener allows a peer; every field has a default fit for loopback use."""

    #: Connections the kernel queues before they are accepted.
    backlog: int = attrs.field(default=1024, validator=_positive)
    #: Connections open at once; capped at half the process's descriptor limit.
    max_connections: int = attrs.field(default=1000, validator=_positive)
    #: Seconds a connection may sit idle (no request in progress) before it is closed.
    keep_alive_timeout: float = attrs.field(default=5.0, validator=_positive)
    #: Seconds a peer may take to accept `SEND_PIECE` bytes before it is dropped.
    send_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Largest request line plus header block.
    max_header_bytes: int = attrs.field(default=16 * 1024, validator=_positive)
    #: Largest WebSocket message a peer may send (larger ones close the connection, 1009).
    websocket_max_message_bytes: int = attrs.field(default=64 * 1024, validator=_positive)
    #: Seconds open connections get to finish when the listener stops.
    graceful_timeout: float = attrs.field(default=1.0, validator=_positive)

    def connection_cap(self) -> int:
        """`max_connections`, but at most half the descriptors this process may open."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or soft <= 0:
            return self.max_connections
        return max(1, min(self.max_connections, soft // 2))


class _RateLimitedLog:
    """One line per `LOG_INTERVAL`, saying how many like it were held back."""

    def __init__(self, level: int) -> None:
        self.level = level
        self._last = -math.inf
        self._held = 0

    def __call__(self, message: str, *args: object) -> None:
        now = trio.current_time()
        if now - self._last < LOG_INTERVAL:
            self._held += 1
            return
        held, self._held, self._last = self._held, 0, now
        suffix = f" ({held} more like it in the last {LOG_INTERVAL:g} s)" if held else ""
        log.log(self.level, message + suffix, *args)


class _Connection(TCPServer):
    """Hypercorn's connection with a shielded close, a deadline on every send, and a record of
    since when it has been idle (no request in progress), so it can be shed under pressure."""

    send_timeout: float = 30.0
    #: `trio.current_time()` since when no request is in progress; None while one is.
    idle_since: float | None = None

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self.idle_since = trio.current_time() if event.idle else None
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        stalled = False
        async with self.send_lock:
            data = memoryview(event.data)
            try:
                for start in range(0, len(data), SEND_PIECE):
                    # Shielded as Hypercorn's own send is (a response is never cut by the
                    # application's cancellation), but with a deadline of its own.
                    with trio.CancelScope(shield=True) as scope:
                        scope.deadline = trio.current_time() + self.send_timeout
                        await self.stream.send_all(data[start : start + SEND_PIECE])
                    if scope.cancelled_caught:
                        stalled = True
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                stalled = True
        if stalled:
            await self._close()
            await self.protocol.handle(Closed())

    async def shed(self) -> None:
        """Close this connection if it is still idle: as its keep-alive timeout would."""
        if self.idle_since is not None:
            with trio.CancelScope(shield=True):
                await self.idle_task.stop()  # else it holds the connection's task group open
                await self._initiate_server_close()

    async def _close(self) -> None:
        with trio.CancelScope(shield=True):
            try:
                # What is being sent goes out first, unless that send is stuck.
                with trio.move_on_after(CLOSE_GRACE):
                    async with self.send_lock:
                        await self.stream.send_eof()
            except (
                trio.BrokenResourceError,
                trio.BusyResourceError,
                trio.ClosedResourceError,
                AttributeError,  # an SSL stream has no send_eof
                OSError,
            ):
                pass
            finally:
                await self.stream.aclose()


def _peer_failure(exc: BaseException | None) -> bool:
    """Whether `exc` is only what a peer's broken or vanished connection raises into the
    application (a send in a protocol state the peer's bytes ended, a closed stream), with the
    cancellations that follow it."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_peer_failure(inner) for inner in exc.exceptions)
    return isinstance(
        exc,
        h11.LocalProtocolError
        | trio.Cancelled
        | trio.BrokenResourceError
        | trio.ClosedResourceError,
    )


class _PeerFailureFilter(logging.Filter):
    """Hypercorn reports an application that raised as "Error in ASGI Framework" with its
    traceback. When what it raised is only the peer's broken connection, that is one line at
    debug level, not a traceback an attacker can print at will."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and _peer_failure(record.exc_info[1]):
            record.msg = (
                f"{record.getMessage()} (the peer's connection failed: {record.exc_info[1]!r})"
            )
            record.args = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None
            return log.isEnabledFor(logging.DEBUG)
        return True


#: Hypercorn's error log for our listeners (kept apart from the global "hypercorn.error").
_HYPERCORN_LOG: Final = logging.getLogger("subagent_engine.listener.hypercorn")
_HYPERCORN_LOG.addFilter(_PeerFailureFilter())


def _hypercorn_config(limits: ListenerLimits) -> HypercornConfig:
    config = HypercornConfig()
    config.accesslog = None
    config.errorlog = _HYPERCORN_LOG
    config.loglevel = "WARNING"
    config.keep_alive_timeout = limits.keep_alive_timeout
    config.h11_max_incomplete_size = limits.max_header_bytes
    config.h2_max_header_list_size = limits.max_header_bytes
    config.websocket_max_message_size = limits.websocket_max_message_bytes
    config.graceful_timeout = limits.graceful_timeout
    config.include_server_header = False
    return config


async def serve_listener(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ListenerLimits | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the ASGI `app` on `host:port` until cancelled; `task_status.started` gets the
    bound URLs (`http://127.0.0.1:PORT`). Runs the app's lifespan around serving; on
    cancellation open connections get `graceful_timeout` seconds, then are closed."""
    limits = limits or ListenerLimits()
    config = _hypercorn_config(limits)
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.backlog = limits.backlog
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    sockets = config.create_sockets()
    for sock in sockets.insecure_sockets:
        sock.listen(limits.backlog)
    listeners = [
        trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in sockets.insecure_sockets
    ]
    binds = [
        f"http://{repr_socket_addr(s.family, s.getsockname())}" for s in sockets.insecure_sockets
    ]

    state: dict[str, Any] = {}
    context = WorkerContext(None)
    lifespan = Lifespan(wrapped, config, state)
    slots = trio.Semaphore(limits.connection_cap())
    failed = _RateLimitedLog(logging.WARNING)
    exhausted = _RateLimitedLog(logging.WARNING)

    open_connections: set[_Connection] = set()

    async def connection(stream: trio.SocketStream) -> None:
        server = _Connection(
            wrapped,
            config,
            context,
            ConnectionState(state.copy()),
            stream,  # type: ignore[arg-type]
        )
        server.send_timeout = limits.send_timeout
        server.idle_since = trio.current_time()  # no request yet
        open_connections.add(server)
        try:
            await server.run()
        except* Exception as group:
            # Contained: this peer's connection ends, nothing else does.
            first = group.exceptions[0]
            failed("a connection failed and was closed: %s: %s", type(first).__name__, first)
            log.debug("connection failure", exc_info=group)
            with trio.CancelScope(shield=True):
                await stream.aclose()
        finally:
            open_connections.discard(server)
            slots.release()

    def shed_idlest(nursery: trio.Nursery) -> None:
        idle = [c for c in open_connections if c.idle_since is not None]
        if idle:
            nursery.start_soon(min(idle, key=lambda c: c.idle_since or 0.0).shed)

    try:
        async with trio.open_nursery() as lifespan_nursery:
            await lifespan_nursery.start(lifespan.handle_lifespan)
            await lifespan.wait_for_startup()
            async with trio.open_nursery() as connections:
                try:
                    async with trio.open_nursery() as acceptors:
                        for listener in listeners:
                            acceptors.start_soon(
                                accept_connections,
                                listener,
                                lambda stream: connections.start_soon(connection, stream),
                                slots,
                                exhausted,
                                lambda: shed_idlest(connections),
                            )
                        task_status.started(binds)
                        await trio.sleep_forever()
                finally:
                    await _close_all(listeners)
                    await context.terminated.set()
                    deadline = trio.current_time() + limits.graceful_timeout
                    connections.cancel_scope.deadline = deadline
            await lifespan.wait_for_shutdown()
            lifespan_nursery.cancel_scope.cancel()
    finally:
        await _close_all(listeners)


async def accept_connections(
    listener: trio.abc.Listener[Any],
    start: Callable[[Any], object],
    slots: trio.Semaphore,
    exhausted: Callable[..., None],
    shed: Callable[[], None] = lambda: None,
) -> None:
    """Accept forever: take a slot, accept, `start(stream)` (whose task releases the slot when
    its connection ends). With every slot taken and a peer waiting to be accepted, `shed()`
    closes the longest-idle connection (no request in progress) to make room: a peer that
    opens connections and sends nothing holds slots only while nobody else needs them. When
    the process is out of descriptors or memory for sockets, back off (doubling up to
    `_MAX_ACCEPT_BACKOFF`) and tell `exhausted` (a rate-limited log), then try again; any other
    accept error ends the listener."""
    backoff = _MIN_ACCEPT_BACKOFF
    waiting = getattr(listener, "socket", None)
    while True:
        if slots.value == 0 and waiting is not None:
            await trio.lowlevel.wait_readable(waiting)  # a peer waits in the backlog
            shed()
        await slots.acquire()
        try:
            stream = await listener.accept()
        except OSError as exc:
            slots.release()
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            exhausted(
                "not accepting connections for %.2f s: %s",
                backoff,
                errno.errorcode.get(exc.errno or 0, str(exc.errno)),
            )
            await trio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_ACCEPT_BACKOFF)
            continue
        backoff = _MIN_ACCEPT_BACKOFF
        start(stream)


async def _close_all(listeners: list[trio.SocketListener]) -> None:
    with trio.CancelScope(shield=True):
        for listener in listeners:
            await listener.aclose()
