"""What every remote target that speaks HTTP shares: credentials bound to origins, identity, and
the text a remote agent is given.

This module owns the small rules the A2A and AG-UI targets must apply the same way: a configured
credential header goes only to the agent's own origin and the origins the host explicitly trusts
(`OriginBoundAuth`, used by `http_pools`, which also gives control calls a pool of their own,
and spreads each pool's connections over small httpcore pools, `ShardedTransport`; a target
holds them as `RemotePools`, which open anew after being closed);
the values to redact for a credential are the header value and its token without the scheme
(`credential_secrets`); and, when the host turns it on, every request says who is asking
(`identity_headers`: the run's user, the tenant, `x-source`, and the lineage of the delegation;
`ref_identity_headers` what of it the journal kept, for a cancel with no session),
as kagent's remote A2A subagents send `x-user-id`
(https://github.com/kagent-dev/kagent/blob/main/docs/architecture/a2a-subagents.md). `task_text`
is what a remote agent is asked, whatever its protocol.

It also bounds what a remote may make us hold: every response body read through the pools is
counted WHILE it is read, before anything parses it (`FrameBoundedStream`, installed on every
response by `bound_response_frames`): an event stream (`text/event-stream`) by the bytes of its
current event, anything else by its total bytes, decompressed bytes counted where the remote
compressed them. Past the limit, reading raises `FrameTooLargeError`, so no more than about the
limit plus one network read is ever buffered below the parser. The module itself does no I/O
beyond wrapping the streams the pools read.
"""

from __future__ import annotations

import functools
import re
import ssl
import urllib.request
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import httpx

from engine import DelegationTask, RegistryError, RemoteTaskRef, outgoing_trace_headers

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MAX_FRAME_LIMIT",
    "MIN_FRAME_LIMIT",
    "SHARD_REQUESTS",
    "FrameBoundedStream",
    "FrameTooLargeError",
    "OriginBoundAuth",
    "RemotePools",
    "ShardedTransport",
    "add_trace_headers",
    "bound_response_frames",
    "credential_secrets",
    "http_pools",
    "identity_headers",
    "origin",
    "valid_frame_limit",
    "ref_identity_headers",
    "task_text",
]


def origin(url: str) -> str:
    """`scheme://host[:port]`, lowercased: what a credential is bound to."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def credential_secrets(auth_header: tuple[str, str] | None) -> tuple[str, ...]:
    """Credential values to redact everywhere: the header value and its bare token."""
    if auth_header is None:
        return ()
    value = auth_header[1]
    token = value.split(" ", 1)[1] if " " in value else value
    return tuple({value, token})


class OriginBoundAuth(httpx.Auth):
    """Adds the credential header only to requests for the allowed origins."""

    def __init__(self, header: tuple[str, str], origins: frozenset[str]) -> None:
        self._header = header
        self._origins = origins

    def auth_flow(self, request: httpx.Request) -> Any:
        if origin(str(request.url)) in self._origins:
            request.headers[self._header[0]] = self._header[1]
        yield request


#: The default bound on one event of a remote's event stream, and on any other response body.
DEFAULT_MAX_FRAME_BYTES: Final = 8 << 20

#: The bounds a host may set a frame limit in: below a few KiB an ordinary card or status would
#: not fit; above 1 GiB it bounds nothing a host would want to hold.
MIN_FRAME_LIMIT: Final = 4 << 10
MAX_FRAME_LIMIT: Final = 1 << 30


def valid_frame_limit(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    """attrs validator of a `max_frame_bytes` setting: a whole number of bytes within
    `MIN_FRAME_LIMIT`..`MAX_FRAME_LIMIT`, else `RegistryError` naming the setting."""
    if type(value) is not int or not MIN_FRAME_LIMIT <= value <= MAX_FRAME_LIMIT:
        raise RegistryError(
            f"{attribute.name} must be a whole number of bytes from {MIN_FRAME_LIMIT} to "
            f"{MAX_FRAME_LIMIT}, got {value!r}"
        )


#: What the error keeps of the frame it refused (to tell what it was, e.g. an artifact chunk).
FRAME_HEAD_BYTES: Final = 256

#: Decompressed bytes produced per step: what one compressed read may make us hold at most.
_INFLATE_STEP: Final = 64 << 10

#: A blank line of an event stream: two line ends in a row, a line end being CRLF, LF or CR
#: (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
#: Atomic groups: the CR and LF of one CRLF are never taken for two line ends.
_BLANK_LINE: Final = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")


class FrameTooLargeError(Exception):
    """A remote's response held more than `limit` bytes in one frame: one event of an event
    stream, or the whole body of any other response. Raised while reading, before any parser
    saw the frame. `content_type` is the response's; `head` the frame's first bytes (at most
    `FRAME_HEAD_BYTES`: what the frame was, never the whole of it)."""

    def __init__(self, *, limit: int, content_type: str, head: bytes) -> None:
        what = "one event of its stream" if _is_event_stream(content_type) else "its answer"
        super().__init__(
            f"The remote sent more than {limit} bytes in {what} ({content_type or 'no type'})."
        )
        self.limit = limit
        self.content_type = content_type
        self.head = head


def _is_event_stream(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


class FrameBoundedStream(httpx.AsyncByteStream):
    """A response body that raises `FrameTooLargeError` as soon as one frame passes `limit`
    bytes: for an event stream a frame is what follows the last blank line, for any other body
    it is the whole body. `encodings` are the body's content codings (gzip, deflate): they are
    undone here, in bounded steps, so a small compressed frame that inflates past the limit is
    refused too (the caller then drops its Content-Encoding header: httpx must not undo them
    again). Closing it closes the stream it wraps."""

    def __init__(
        self,
        stream: httpx.AsyncByteStream,
        *,
        limit: int,
        content_type: str = "",
        encodings: Sequence[str] = (),
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._stream = stream
        self._limit = limit
        self._content_type = content_type
        self._events = _is_event_stream(content_type)
        self._inflaters = [_inflater(e) for e in encodings]
        self._frame = 0  # bytes of the current frame so far
        self._head = b""  # its first bytes
        self._tail = b""  # the last bytes seen, for a blank line split across two reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raws = self._stream.__aiter__()
        try:
            async for raw in raws:
                for chunk in self._decoded(raw):
                    self._count(chunk)
                    yield chunk
            for chunk in self._flushed():
                self._count(chunk)
                yield chunk
        finally:
            # The body beneath (often an async generator) is closed here, not left to the
            # garbage collector, when a frame is refused or the reader leaves.
            close = getattr(raws, "aclose", None)
            if close is not None:
                await close()

    def _decoded(self, raw: bytes) -> Iterator[bytes]:
        chunks: Iterator[bytes] = iter((raw,))
        for inflater in reversed(self._inflaters):  # the last coding applied is undone first
            chunks = _inflate(inflater, chunks)
        return (c for c in chunks if c)

    def _flushed(self) -> Iterator[bytes]:
        chunks: Iterator[bytes] = iter(())
        for inflater in reversed(self._inflaters):
            chunks = _inflate(inflater, chunks, flush=True)
        return (c for c in chunks if c)

    def _count(self, chunk: bytes) -> None:
        if not self._events:
            self._add(chunk)
            return
        data = self._tail + chunk
        pos = len(self._tail)  # what precedes was counted with the chunk before
        for match in _BLANK_LINE.finditer(data):
            end = match.end()
            if end > pos:
                self._add(data[pos:end])  # the frame, up to and with its blank line
                self._frame = 0
                self._head = b""
                pos = end
        self._add(data[pos:])
        self._tail = data[-3:]

    def _add(self, data: bytes) -> None:
        self._frame += len(data)
        if len(self._head) < FRAME_HEAD_BYTES:
            self._head += data[: FRAME_HEAD_BYTES - len(self._head)]
        if self._frame > self._limit:
            raise FrameTooLargeError(
                limit=self._limit, content_type=self._content_type, head=self._head
            )

    async def aclose(self) -> None:
        await self._stream.aclose()


def _inflater(encoding: str) -> Any:
    if encoding == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    return _Deflate()


class _Deflate:
    """HTTP "deflate": zlib-wrapped as the RFC says, or raw as some servers send it (httpx
    accepts both the same way)."""

    def __init__(self) -> None:
        self._inner: Any = zlib.decompressobj()
        self._first = True
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._first and data:
            self._first = False
            try:
                out = self._inner.decompress(data, max_length)
            except zlib.error:
                self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._inner.decompress(data, max_length)
        else:
            out = self._inner.decompress(data, max_length)
        self.unconsumed_tail = self._inner.unconsumed_tail
        return bytes(out)

    def flush(self) -> bytes:
        return bytes(self._inner.flush())


def _inflate(inflater: Any, chunks: Iterator[bytes], *, flush: bool = False) -> Iterator[bytes]:
    """`chunks` decompressed, at most `_INFLATE_STEP` bytes at a time (a bomb inflates only as
    far as the reader reads). A corrupt coding is httpx's `DecodingError`, as httpx says it."""
    try:
        for data in chunks:
            while data:
                yield inflater.decompress(data, _INFLATE_STEP)
                data = inflater.unconsumed_tail
        if flush:
            yield inflater.flush()
    except zlib.error as exc:
        raise httpx.DecodingError(f"the remote's compressed body is corrupt: {exc}") from None


async def bound_response_frames(response: httpx.Response, *, max_frame_bytes: int) -> None:
    """An httpx response hook (`event_hooks={"response": [partial(bound_response_frames,
    max_frame_bytes=N)]}`) that puts a `FrameBoundedStream` under `response`'s body before
    anything reads it. The gzip and deflate codings are undone by the bounded stream (counted
    decompressed), so their Content-Encoding is removed for httpx; a body with another coding
    is counted as it comes (httpx cannot decode it either)."""
    codings = [
        c.strip().lower()
        for c in response.headers.get_list("content-encoding", split_commas=True)
        if c.strip()
    ]
    undone: list[str] = []
    if codings and all(c in ("gzip", "deflate", "identity") for c in codings):
        undone = [c for c in codings if c != "identity"]
        del response.headers["content-encoding"]
    assert isinstance(response.stream, httpx.AsyncByteStream)
    response.stream = FrameBoundedStream(
        response.stream,
        limit=max_frame_bytes,
        content_type=response.headers.get("content-type", ""),
        encodings=undone,
    )


#: Requests one httpcore pool of a `ShardedTransport` carries at once before the next request
#: goes to another pool. httpcore walks every connection of a pool (and, per queued request,
#: every connection again) each time a request starts or ends, so one pool holding a thousand
#: open streams made each start, end and CancelTask cost a thousand steps: at 1,000
#: delegations a run's cancel cascade spent ~40% of its time in that walk (bench scale).
SHARD_REQUESTS: Final = 32


class _Release(httpx.AsyncByteStream):
    """A response body that gives its pool's slot back when closed (httpx closes every
    response it hands out: after reading it, or when a stream is left)."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Any) -> None:
        self._stream = stream
        self._release = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The inner iterator itself: no extra generator hop per chunk of a stream.
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        release, self._release = self._release, None
        try:
            await self._stream.aclose()
        finally:
            if release is not None:
                await release()


class _Shard:
    __slots__ = ("active", "transport")

    def __init__(self, transport: httpx.AsyncHTTPTransport) -> None:
        self.transport = transport
        self.active = 0


class ShardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over as many small connection pools as its concurrency needs: a
    request goes to the first pool carrying fewer than `per_shard` requests, or to a new one.
    The first pool stays (it keeps the keep-alive connections an everyday load reuses); an
    extra pool is closed as soon as its last request ends, so a burst (a cancel cascade, a
    thousand streams) leaves no idle connections behind. No connection limit of its own: the
    engine bounds how many delegations, and so streams and control calls, exist at once."""

    def __init__(self, *, per_shard: int = SHARD_REQUESTS, verify: ssl.SSLContext | None = None):
        if per_shard < 1:
            raise ValueError("per_shard must be at least 1")
        self._per_shard = per_shard
        # One TLS context for every pool (building one costs ~20 ms: not per burst).
        self._verify = verify if verify is not None else httpx.create_ssl_context()
        self._shards: list[_Shard] = []
        self._closed = False

    @property
    def shards(self) -> int:
        """How many pools are open now."""
        return len(self._shards)

    def _new_shard(self) -> _Shard:
        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=self._per_shard, keepalive_expiry=5.0
        )
        return _Shard(httpx.AsyncHTTPTransport(verify=self._verify, limits=limits))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        for shard in self._shards:
            if shard.active < self._per_shard:
                break
        else:
            shard = self._new_shard()
            self._shards.append(shard)
        shard.active += 1
        try:
            response = await shard.transport.handle_async_request(request)
        except BaseException:
            await self._release(shard)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Release(response.stream, lambda: self._release(shard))
        return response

    async def _release(self, shard: _Shard) -> None:
        shard.active -= 1
        if shard.active == 0 and self._shards and shard is not self._shards[0]:
            # Out of the list first (no await before): no request can pick it while it closes.
            self._shards.remove(shard)
            await shard.transport.aclose()

    async def aclose(self) -> None:
        self._closed = True
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.transport.aclose()


async def add_trace_headers(request: httpx.Request) -> None:
    """Send the W3C `traceparent` / `tracestate` of the remote call the engine is making in
    this task (`engine.outgoing_trace_headers`), so that the remote's spans join the trace; an
    engine that does not trace sends none (https://www.w3.org/TR/trace-context/#traceparent-header).
    """
    headers = outgoing_trace_headers()
    if headers:
        request.headers.update(headers)


def http_pools(
    home_url: str,
    *,
    trusted_origins: Sequence[str],
    auth_header: tuple[str, str] | None,
    forward_headers: Mapping[str, str],
    request_timeout: float,
    http: httpx.AsyncClient | None,
    max_frame_bytes: int | None = None,
) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
    """(the streaming pool, the control pool) of a remote target: the credential only for
    `home_url`'s origin and `trusted_origins`, the trace context of the engine's remote call
    (`add_trace_headers`), no redirects, reads without a timeout (streams
    last as long as the task). Control calls (cancel, get, stop) get a pool of their own: queued
    behind a hundred open streams, a run's cancel cascade took ~30 ms longer (bench a2a). Both
    are `ShardedTransport`s without a connection cap: httpx's default cap of 100 connections
    left the 101st concurrent delegation to one agent waiting for a connection until it failed
    (and made a cascade's CancelTasks queue behind each other). When the environment names a
    proxy (HTTP_PROXY, HTTPS_PROXY, ...), httpx's own transports are kept, so the proxy is used
    (a custom transport turns httpx's environment proxies off), still without the cap. Every
    response they read is bounded by `max_frame_bytes` (`bound_response_frames`; None, the
    default: not bounded). A caller-given `http` serves both as it is, bounds included (and
    stays the caller's to close)."""
    if http is not None:
        return http, http
    origins = frozenset({origin(home_url), *(origin(o) for o in trusted_origins)})
    auth = OriginBoundAuth(auth_header, origins) if auth_header else None
    verify = httpx.create_ssl_context()
    proxied = bool(urllib.request.getproxies())
    hooks: dict[str, list[Any]] = {"request": [add_trace_headers]}
    if max_frame_bytes is not None:
        hooks["response"] = [
            functools.partial(bound_response_frames, max_frame_bytes=max_frame_bytes)
        ]

    def new_pool() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout, read=None),
            headers=dict(forward_headers),
            auth=auth,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=SHARD_REQUESTS),
            transport=None if proxied else ShardedTransport(verify=verify),
            event_hooks=hooks,
        )

    return new_pool(), new_pool()


class RemotePools:
    """A remote target's two pools (`http_pools`: `streams` and `control`). `aclose()` closes
    the pools it opened (a caller-given client stays the caller's to close) and is idempotent;
    `reopen()` opens them anew once closed, so a target closed with one engine serves the next
    engine it is registered with."""

    def __init__(
        self,
        home_url: str,
        *,
        trusted_origins: Sequence[str],
        auth_header: tuple[str, str] | None,
        forward_headers: Mapping[str, str],
        request_timeout: float,
        http: httpx.AsyncClient | None,
        max_frame_bytes: int | None = None,
    ) -> None:
        self._open = functools.partial(
            http_pools,
            home_url,
            trusted_origins=trusted_origins,
            auth_header=auth_header,
            forward_headers=forward_headers,
            request_timeout=request_timeout,
            http=http,
            max_frame_bytes=max_frame_bytes,
        )
        self._owned = http is None
        self.streams, self.control = self._open()

    def reopen(self) -> None:
        if self._owned and self.streams.is_closed:
            self.streams, self.control = self._open()

    async def aclose(self) -> None:
        if self._owned:
            await self.streams.aclose()
            await self.control.aclose()


def identity_headers(task: DelegationTask, tenant: str | None) -> dict[str, str]:
    """Who is asking, for a host that forwards identity: the headers that have a value."""
    user_id = task.metadata.get("user_id")
    headers = {
        "x-user-id": str(user_id) if user_id else None,
        "x-tenant": tenant or task.metadata.get("tenant"),
        "x-source": "subagent-engine",
        "x-parent-run-id": task.run_id,
        "x-parent-tool-call-id": task.request.parent_tool_call_id,
        "x-delegation-id": task.delegation_id,
    }
    return {name: str(value) for name, value in headers.items() if value}


def ref_identity_headers(ref: RemoteTaskRef, tenant: str | None) -> dict[str, str]:
    """Who is asking, for a cancel with no session (`Target.cancel_remote`): `identity_headers`
    as far as the journal kept them (the tenant, `x-source`, the run and the delegation; no
    user id, no parent tool call)."""
    headers = {
        "x-tenant": tenant,
        "x-source": "subagent-engine",
        "x-parent-run-id": ref.run_id,
        "x-delegation-id": ref.delegation_id,
    }
    return {name: value for name, value in headers.items() if value}


def task_text(task: DelegationTask) -> str:
    """The remote's user message: the objective, then the prompt, context and artifact
    references (by name and URI, never their content)."""
    request = task.request
    sections = [request.objective]
    if request.prompt:
        sections.append(request.prompt)
    if request.context:
        sections.append(f"Context:\n{request.context}")
    if request.artifacts:
        refs = "\n".join(f"- {a.name or ''} {a.uri or ''}".rstrip() for a in request.artifacts)
        sections.append(f"Artifacts:\n{refs}")
    return "\n\n".join(sections)
