"""Bounded response bodies (`adapters._remote_http`): an event stream is bounded per event, any
other body as a whole, compressed bodies by what they inflate to, all while reading."""

from __future__ import annotations

import functools
import gzip
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest

from adapters._asyncgens import closing_abandoned_generators
from adapters._remote_http import (
    FrameBoundedStream,
    FrameTooLargeError,
    bound_response_frames,
    http_pools,
)


class Source(httpx.AsyncByteStream):
    """A body given in chunks, that says how many of them were read and whether it was closed."""

    def __init__(self, chunks: list[bytes] | None = None, *, endless: bytes | None = None) -> None:
        self.chunks = chunks or []
        self.endless = endless
        self.read = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk
        while self.endless is not None:
            self.read += 1
            yield self.endless

    async def aclose(self) -> None:
        self.closed = True


async def read_all(stream: httpx.AsyncByteStream) -> bytes:
    return b"".join([chunk async for chunk in stream])


SSE = "text/event-stream; charset=utf-8"


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n"])
async def test_every_blank_line_of_the_sse_spec_ends_a_frame(end: bytes) -> None:
    frame = b"data: " + b"x" * 90 + end  # 96 + len(end) bytes
    body = frame * 50
    stream = FrameBoundedStream(Source([body]), limit=100, content_type=SSE)
    assert await read_all(stream) == body


async def test_a_crlf_is_one_line_end_not_a_blank_line() -> None:
    # Two lines ended by CRLF: no blank line, so one frame of 2 x 60 bytes.
    body = (b"data: " + b"y" * 52 + b"\r\n") * 2
    with pytest.raises(FrameTooLargeError):
        await read_all(FrameBoundedStream(Source([body]), limit=100, content_type=SSE))


async def test_a_frame_one_byte_over_the_limit_is_refused_and_one_at_it_passes() -> None:
    at_limit = b"data: " + b"a" * 92 + b"\n\n"  # exactly 100 bytes
    assert len(at_limit) == 100
    stream = FrameBoundedStream(Source([at_limit, at_limit]), limit=100, content_type=SSE)
    assert await read_all(stream) == at_limit * 2
    over = b"data: " + b"a" * 93 + b"\n\n"
    with pytest.raises(FrameTooLargeError) as caught:
        await read_all(FrameBoundedStream(Source([at_limit, over]), limit=100, content_type=SSE))
    assert caught.value.limit == 100
    assert caught.value.content_type == SSE
    assert caught.value.head.startswith(b"data: aaa")


async def test_a_blank_line_split_across_two_reads_still_ends_the_frame() -> None:
    frame = b"data: " + b"z" * 60 + b"\r\n\r\n"
    for cut in range(1, 5):
        chunks = [frame[:-cut], frame[-cut:] + frame[:-cut], frame[-cut:]]
        stream = FrameBoundedStream(Source(chunks), limit=len(frame), content_type=SSE)
        assert await read_all(stream) == frame * 2


async def test_a_big_frame_between_small_ones_in_one_read_is_refused() -> None:
    small = b"data: 1\n\n"
    big = b"data: " + b"b" * 500 + b"\n\n"
    with pytest.raises(FrameTooLargeError) as caught:
        await read_all(
            FrameBoundedStream(Source([small + big + small]), limit=100, content_type=SSE)
        )
    assert caught.value.head.startswith(b"data: bbb")


async def test_an_endless_frame_is_refused_after_about_the_limit_was_read() -> None:
    source = Source([b"data: "], endless=b"q" * 1024)
    with pytest.raises(FrameTooLargeError):
        await read_all(FrameBoundedStream(source, limit=64 * 1024, content_type=SSE))
    assert source.read <= 1 + 64 + 1


async def test_a_body_that_is_not_a_stream_is_bounded_as_a_whole() -> None:
    lines = [b'{"a": 1}\n\n'] * 20  # blank lines mean nothing outside an event stream
    with pytest.raises(FrameTooLargeError) as caught:
        await read_all(
            FrameBoundedStream(Source(lines), limit=100, content_type="application/json")
        )
    assert "answer" in str(caught.value)
    body = b"".join(lines)
    ok = FrameBoundedStream(Source(lines), limit=len(body), content_type="application/json")
    assert await read_all(ok) == body


async def test_closing_closes_the_stream_beneath() -> None:
    source = Source([b"x"])
    stream = FrameBoundedStream(source, limit=10)
    await stream.aclose()
    assert source.closed


def test_a_limit_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        FrameBoundedStream(Source(), limit=0)


def client_for(
    body: httpx.AsyncByteStream, headers: dict[str, str], limit: int
) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=body)

    hook = functools.partial(bound_response_frames, max_frame_bytes=limit)
    return httpx.AsyncClient(
        transport=httpx.MockTransport(answer), event_hooks={"response": [hook]}
    )


async def test_the_hook_bounds_a_unary_answer_before_it_is_parsed() -> None:
    body = Source([b'{"result": "', b"x" * 4096, b'"}'])
    # httpx's own byte streams do not close the one beneath when a read raises.
    async with (
        client_for(body, {"content-type": "application/json"}, 1000) as client,
        closing_abandoned_generators(),
    ):
        with pytest.raises(FrameTooLargeError):
            await client.get("http://127.0.0.1/task")
    assert body.closed


async def test_a_compressed_bomb_is_counted_as_it_inflates() -> None:
    bomb = gzip.compress(b"{" + b" " * (8 << 20) + b"}")  # 8 MiB of JSON in ~8 KiB
    assert len(bomb) < 64 << 10
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    # httpx's own byte streams do not close the one beneath when a read raises.
    async with (
        client_for(Source([bomb]), headers, 1 << 20) as client,
        closing_abandoned_generators(),
    ):
        with pytest.raises(FrameTooLargeError):
            await client.get("http://127.0.0.1/task")


@pytest.mark.parametrize("coding", ["gzip", "deflate-zlib", "deflate-raw"])
async def test_a_compressed_answer_under_the_limit_reads_as_sent(coding: str) -> None:
    document = b'{"ok": true, "pad": "' + b"p" * 5000 + b'"}'
    if coding == "gzip":
        data, header = gzip.compress(document), "gzip"
    elif coding == "deflate-zlib":
        data, header = zlib.compress(document), "deflate"
    else:
        raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        data, header = raw.compress(document) + raw.flush(), "deflate"
    headers = {"content-type": "application/json", "content-encoding": header}
    chunks = [data[i : i + 100] for i in range(0, len(data), 100)]
    async with client_for(Source(chunks), headers, 10_000) as client:
        response = await client.get("http://127.0.0.1/task")
    assert response.json()["ok"] is True
    assert "content-encoding" not in response.headers


async def test_a_corrupt_compressed_body_is_a_decoding_error() -> None:
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    async with (
        client_for(Source([b"not gzip at all"]), headers, 10_000) as client,
        closing_abandoned_generators(),
    ):
        with pytest.raises(httpx.DecodingError):
            await client.get("http://127.0.0.1/task")


async def test_http_pools_bound_their_bodies_unless_told_not_to() -> None:
    streams, control = http_pools(
        "http://127.0.0.1:1",
        trusted_origins=(),
        auth_header=None,
        forward_headers={},
        request_timeout=1.0,
        http=None,
        max_frame_bytes=1234,
    )
    unbounded, _ = http_pools(
        "http://127.0.0.1:1",
        trusted_origins=(),
        auth_header=None,
        forward_headers={},
        request_timeout=1.0,
        http=None,
        max_frame_bytes=None,
    )
    try:
        for pool in (streams, control):
            (hook,) = pool.event_hooks["response"]
            assert isinstance(hook, functools.partial)
            assert hook.keywords == {"max_frame_bytes": 1234}
        assert unbounded.event_hooks["response"] == []
    finally:
        for pool in (streams, control, unbounded):
            await pool.aclose()
