"""The HTTP pools of remote targets (`adapters._remote_http`): no connection cap (httpx's default
of 100 left the 101st concurrent delegation to one agent waiting for a connection until it
failed), and a `ShardedTransport` that keeps each httpcore pool small (httpcore walks every
connection of a pool on each request start and end: one pool of 1,000 streams made a run's
cancel cascade ~40% slower) and closes the extra pools a burst opened.

The server is a raw HTTP/1.1 responder in the test's own Trio loop that sends a response's
headers at once and holds its body open until the test releases it.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from adapters._remote_http import SHARD_REQUESTS, ShardedTransport, http_pools
from tools.peers.raw_http import read_request

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class HoldingServer:
    def __init__(self) -> None:
        self.release = trio.Event()
        self.port = 0
        self.requests = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await read_request(stream)
            except (EOFError, ValueError, trio.BrokenResourceError):
                return
            self.requests += 1
            try:
                await stream.send_all(HEAD)
                await self.release.wait()
                await stream.send_all(b"5\r\ndata:\r\n0\r\n\r\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self.handle, listeners, handler_nursery=nursery)


async def _open_streams(client: httpx.AsyncClient, url: str, count: int) -> list[httpx.Response]:
    """`count` concurrent streaming requests, each until its headers arrived (fails after 10 s:
    a capped pool never gets there)."""
    responses: list[httpx.Response] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(count):

                async def one() -> None:
                    request = client.build_request("POST", url, content=b"{}")
                    responses.append(await client.send(request, stream=True))

                nursery.start_soon(one)
    return responses


async def test_more_than_a_hundred_concurrent_streams_to_one_agent(
    nursery: trio.Nursery,
) -> None:
    server = HoldingServer()
    await nursery.start(server.serve)
    url = f"http://127.0.0.1:{server.port}/jsonrpc"
    streams, control = http_pools(
        url,
        trusted_origins=(),
        auth_header=None,
        forward_headers={},
        request_timeout=30.0,
        http=None,
    )
    try:
        responses = await _open_streams(streams, url, 150)
        assert len(responses) == 150 and server.requests == 150
        # A control call still goes through while every stream is open.
        control_responses = await _open_streams(control, url, 1)
        server.release.set()
        for response in responses + control_responses:
            assert (await response.aread()) == b"data:"
            await response.aclose()
    finally:
        await streams.aclose()
        await control.aclose()


async def test_a_burst_spreads_over_small_pools_which_close_after_it(
    nursery: trio.Nursery,
) -> None:
    server = HoldingServer()
    await nursery.start(server.serve)
    url = f"http://127.0.0.1:{server.port}/"
    transport = ShardedTransport(per_shard=4)
    async with httpx.AsyncClient(transport=transport) as client:
        responses = await _open_streams(client, url, 10)
        assert transport.shards == 3  # 4 + 4 + 2
        server.release.set()
        for response in responses:
            await response.aread()
            await response.aclose()
        assert transport.shards == 1  # the first stays, with its keep-alive connections
        # The next request reuses the first pool.
        server.release = trio.Event()
        more = await _open_streams(client, url, 1)
        assert transport.shards == 1
        server.release.set()
        await more[0].aread()
        await more[0].aclose()
    assert transport.shards == 0


async def test_a_failed_request_gives_its_slot_back() -> None:
    transport = ShardedTransport(per_shard=1)
    async with httpx.AsyncClient(transport=transport) as client:
        # Nothing listens on port 9 of 127.0.0.1 (discard): the connect is refused.
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await client.get("http://127.0.0.1:9/")
        assert transport.shards == 1


def test_the_default_shard_size_is_small() -> None:
    assert 1 <= SHARD_REQUESTS <= 64
    with pytest.raises(ValueError, match="per_shard"):
        ShardedTransport(per_shard=0)


async def test_an_environment_proxy_is_still_used_without_a_connection_cap(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A custom transport turns httpx's environment proxies off: with HTTP_PROXY set, the pools
    # keep httpx's own transports (so the proxy gets every request), still uncapped.
    proxy = HoldingServer()
    await nursery.start(proxy.serve)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    # Never resolved: the proxy on 127.0.0.1 answers for it.
    url = "http://agent.invalid/jsonrpc"
    streams, control = http_pools(
        url,
        trusted_origins=(),
        auth_header=None,
        forward_headers={},
        request_timeout=30.0,
        http=None,
    )
    try:
        responses = await _open_streams(streams, url, 120)
        assert len(responses) == 120 and proxy.requests == 120
        proxy.release.set()
        for response in responses:
            assert (await response.aread()) == b"data:"
            await response.aclose()
    finally:
        await streams.aclose()
        await control.aclose()
