"""The hardened listener (`adapters.listener.serve_listener`) against hostile peers.

Real sockets on 127.0.0.1 where the kernel is part of what is tested (a broken upgrade request,
`Connection: close`, an idle socket); Trio's in-memory streams and `MockClock` where only time
is (a peer that never reads, descriptors that run out).
"""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
import trio
import trio.testing

from adapters.listener import ListenerLimits, serve_listener
from adapters.listener._serve import (
    LOG_INTERVAL,
    _Connection,
    _hypercorn_config,
    _RateLimitedLog,
    accept_connections,
)

#: A WebSocket upgrade request with frame bytes in the same write as its headers: Hypercorn
#: 0.18 answers 400, then raised out of the connection (and ended the whole server).
UPGRADE_WITH_BODY = (
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    b"\x81\x85garbagebytes"
)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A small app: `/stream` writes 1 MiB chunks until the client is gone, `/ws` is a
    WebSocket that rejects (like a route that refuses its caller), anything else says `ok`."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    if scope["path"] == "/stream":
        # As a framework does: stop when the server says the client is gone.
        async with trio.open_nursery() as nursery:

            async def until_disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_disconnected)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            chunk = {"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True}
            while True:
                await send(chunk)
    body = b"ok"
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    data = b""
    with trio.fail_after(10):  # a safety net; the peer closes long before
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def exchange(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        return await read_until_closed(stream)


async def listening(nursery: trio.Nursery, limits: ListenerLimits | None = None) -> int:
    binds = await nursery.start(
        lambda task_status: serve_listener(app, limits=limits, task_status=task_status)
    )
    return int(binds[0].rsplit(":", 1)[1])


async def test_a_broken_upgrade_request_ends_only_its_own_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with trio.open_nursery() as nursery:
        port = await listening(nursery)
        for _ in range(3):
            answer = await exchange(port, UPGRADE_WITH_BODY)
            assert answer.startswith(b"HTTP/1.1 4"), answer
        # The listener still serves others.
        answer = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        nursery.cancel_scope.cancel()
    failures = [r for r in caplog.records if "connection failed" in r.getMessage()]
    assert len(failures) <= 1  # one line per interval, however many peers fail
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.WARNING]


async def test_connection_close_closes_the_connection() -> None:
    # Quart-Trio cancels its handler once the response is sent, the case that left sockets open.
    from quart_trio import QuartTrio

    quart = QuartTrio("test")

    @quart.get("/")
    async def index() -> str:
        return "ok"

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve_listener(
                quart, limits=ListenerLimits(keep_alive_timeout=3600), task_status=task_status
            )
        )
        port = int(binds[0].rsplit(":", 1)[1])
        for _ in range(3):
            answer = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
            assert b"connection: close" in answer.lower()
        nursery.cancel_scope.cancel()


async def test_a_connection_that_sends_nothing_is_closed_when_idle() -> None:
    async with trio.open_nursery() as nursery:
        port = await listening(nursery, ListenerLimits(keep_alive_timeout=0.2))
        assert await exchange(port, b"") == b""
        # So is one that sends half a request line and stops.
        assert await exchange(port, b"GET / HT") == b""
        nursery.cancel_scope.cancel()


async def test_idle_connections_make_room_when_every_slot_is_taken() -> None:
    # Idle connections would stay an hour: only shedding lets the last peer in.
    limits = ListenerLimits(max_connections=3, keep_alive_timeout=3600)
    async with trio.open_nursery() as nursery:
        port = await listening(nursery, limits)
        silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
        # One of them asked and got its answer: kept alive, idle again.
        await silent[0].send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await silent[0].receive_some(4096)).startswith(b"HTTP/1.1 200")
        for _ in range(3):
            with trio.fail_after(10):
                answer = await exchange(
                    port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
            assert answer.startswith(b"HTTP/1.1 200")
        # The three were shed, longest idle first; each learns it by its end of stream.
        for stream in silent:
            with trio.fail_after(10):
                while await stream.receive_some(4096):
                    pass
            await stream.aclose()
        nursery.cancel_scope.cancel()


class _Stub:
    """What Hypercorn reads of a socket: its family and both addresses."""

    family = 2

    def getpeername(self) -> tuple[str, int]:
        return ("127.0.0.1", 40000)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8080)


class _SocketLike(trio.abc.Stream):
    """An in-memory stream that looks like a `trio.SocketStream` to Hypercorn."""

    socket = _Stub()

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.closed = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def send_eof(self) -> None:
        raise trio.BrokenResourceError

    async def aclose(self) -> None:
        self.closed.set()
        await self.inner.aclose()

    @classmethod
    def pair(cls) -> tuple[_SocketLike, trio.abc.Stream]:
        """(the server's end, the client's): a send waits until the other end reads it."""
        server_end, client_end = trio.testing.lockstep_stream_pair()
        return cls(server_end), client_end


def _connection_over(stream: _SocketLike, limits: ListenerLimits) -> _Connection:
    """One connection of the listener, as `serve_listener` makes it, over `stream`."""
    from hypercorn.trio.worker_context import WorkerContext
    from hypercorn.typing import ConnectionState
    from hypercorn.utils import wrap_app

    config = _hypercorn_config(limits)
    connection = _Connection(
        wrap_app(app, config.wsgi_max_body_size, "asgi"),
        config,
        WorkerContext(None),
        ConnectionState({}),
        stream,  # type: ignore[arg-type]
    )
    connection.send_timeout = limits.send_timeout
    return connection


async def test_a_peer_that_stops_reading_is_dropped_after_the_send_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream, client_end = _SocketLike.pair()
    connection = _connection_over(
        stream, ListenerLimits(send_timeout=30.0, keep_alive_timeout=3600)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client_end.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        first = await client_end.receive_some(1024)  # then the client reads no more
        assert first.startswith(b"HTTP/1.1 200")
        started = trio.current_time()
        with trio.fail_after(120):  # without a deadline on sends, never
            await stream.closed.wait()
        assert 30.0 <= trio.current_time() - started < 31.0
    # The whole connection ended (the nursery exited): its app task and its socket.


async def test_a_peer_that_reads_slowly_but_steadily_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream, client_end = _SocketLike.pair()
    connection = _connection_over(
        stream, ListenerLimits(send_timeout=30.0, keep_alive_timeout=3600)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client_end.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        received = 0
        # 64 KiB every 20 s: slower than a whole 1 MiB write in 30 s, yet always moving.
        while received < 3 << 20:
            await trio.sleep(20)
            received += len(await client_end.receive_some(64 * 1024))
        assert not stream.closed.is_set()
        nursery.cancel_scope.cancel()


class _ExhaustedListener(trio.abc.Listener[trio.abc.Stream]):
    """Raises EMFILE `failures` times, then hands out in-memory streams."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.accepted = 0

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        self.accepted += 1
        return trio.testing.memory_stream_pair()[0]

    async def aclose(self) -> None:
        pass


async def test_running_out_of_descriptors_backs_off_logs_little_and_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[str] = []
    listener = _ExhaustedListener(failures=200)
    started: list[trio.abc.Stream] = []
    reached = {count: trio.Event() for count in (1, 3, 4)}

    def start(stream: trio.abc.Stream) -> None:
        started.append(stream)
        if len(started) in reached:
            reached[len(started)].set()

    slots = trio.Semaphore(3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            accept_connections, listener, start, slots, lambda *a: lines.append(a[0])
        )
        begun = trio.current_time()
        await reached[1].wait()
        elapsed = trio.current_time() - begun
        # 200 failures, backing off up to 1 s: well under 200 s, far over 200 x 0.1 s storms.
        assert 100 < elapsed < 210
        await reached[3].wait()
        await trio.sleep(60)  # every slot taken: no fourth accept until one frees
        assert len(started) == 3 and listener.accepted == 3
        slots.release()
        await reached[4].wait()
        nursery.cancel_scope.cancel()
    assert 1 <= len(lines) <= 200  # the caller's log decides how many reach the log
    assert all("not accepting connections" in line for line in lines)


async def test_the_rate_limited_log_says_how_many_lines_it_held_back(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    caplog.set_level(logging.WARNING, logger="subagent_engine.listener")
    say = _RateLimitedLog(logging.WARNING)
    for _ in range(100):
        say("trouble %d", 1)
        await trio.sleep(LOG_INTERVAL / 40)
    messages = [r.getMessage() for r in caplog.records if r.name == "subagent_engine.listener"]
    assert 2 <= len(messages) <= 4
    assert messages[0] == "trouble 1"
    assert "more like it" in messages[1]
