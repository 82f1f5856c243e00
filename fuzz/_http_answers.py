"""What a server sent back on one connection, read for the listener fuzzer (sans-IO).

This module owns the client side's reading: it is fed the bytes a listener sent and finds every
status it answered with, so that no 5xx can hide behind pipelining, an interim response or a
protocol switch. HTTP/1.x responses are read in order with their own framing (RFC 9112 section
6.3: no body after HEAD, 1xx, 204 or 304; chunked; Content-Length; else until the connection
closes); after `101 Switching Protocols` the rest is WebSocket frames (RFC 6455 section 5.2, the
close codes) or HTTP/2 frames (RFC 9113: HEADERS decoded with HPACK for `:status`, GOAWAY and
RST_STREAM error codes), and so is a reply to the HTTP/2 preface. What cannot be parsed is kept
and scanned for anything that looks like a 5xx status line, so a parse failure can hide nothing.
It never touches a socket and never raises on what a server sends.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Final

__all__ = ["AnswerReader", "H2_INTERNAL_ERROR", "WS_INTERNAL_ERROR"]

#: RFC 6455 section 7.4.1: the server met a condition that kept it from fulfilling the request.
WS_INTERNAL_ERROR: Final = 1011
#: RFC 9113 section 7: an unexpected internal error.
H2_INTERNAL_ERROR: Final = 0x2
_STATUS_LINE: Final = re.compile(rb"HTTP/(\d)\.(\d) (\d{3})(?: [^\r\n]*)?")
_FIVE_XX: Final = re.compile(rb"(?:^|\n)HTTP/\d\.\d (5\d\d)")
_KEPT_BYTES: Final = 64 * 1024


class AnswerReader:
    """Feed it a connection's received bytes (`feed`, then `close` at EOF); read the statuses.

    `methods` are the methods of the requests sent on the connection, in order: a response to
    HEAD has no body whatever its headers say.
    """

    def __init__(self, methods: Sequence[bytes] = ()) -> None:
        self._methods = list(methods)
        self._buffer = bytearray()
        self.mode = "http"  # "http" | "websocket" | "h2" | "unparsed"
        #: Final statuses of HTTP/1.x responses whose head was read, in order.
        self.statuses: list[int] = []
        #: Their header fields (names lowercased; the last of a repeated name).
        self.headers: list[dict[bytes, bytes]] = []
        #: The first `_KEPT_BYTES` of each of those responses' bodies (chunked coding removed).
        self.bodies: list[bytearray] = []
        #: Interim (1xx) statuses.
        self.interim: list[int] = []
        #: Final responses read to the end of their body.
        self.complete = 0
        #: The last response's body has no end but the connection's (or is an event stream).
        self.streaming = False
        self.websocket_closes: list[int] = []
        self.h2_statuses: list[int] = []
        #: ("goaway" | "rst", error code) of HTTP/2 frames that end a connection or stream.
        self.h2_errors: list[tuple[str, int]] = []
        #: 5xx statuses found by scanning bytes that could not be parsed.
        self.suspect_5xx: list[int] = []
        self.problem: str | None = None
        self.received = 0
        self.closed = False
        self._body: _Body | None = None
        self._h2_block = bytearray()
        self._h2_decoder: object | None = None
        self._unparsed = bytearray()

    # -- input ----------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.received += len(data)
        self._buffer += data
        self._advance()

    def close(self) -> None:
        """The server closed the connection: a body read until close ends here."""
        self.closed = True
        if self._body is not None and self._body.until_close:
            self._body = None
            self.complete += 1
        self._advance()
        if self._buffer and self.mode == "http":
            self._give_up("bytes after the last response")

    # -- what was read --------------------------------------------------------------------------

    @property
    def all_statuses(self) -> list[int]:
        return self.statuses + self.h2_statuses + self.suspect_5xx

    @property
    def head_pending(self) -> bool:
        """A response has started (some bytes) but its head is not complete."""
        return self.mode == "http" and self._body is None and bool(self._buffer)

    def unparsed_sample(self) -> bytes:
        return bytes(self._unparsed[:512])

    # -- parsing --------------------------------------------------------------------------------

    def _advance(self) -> None:
        while self._buffer:
            if self.mode == "http":
                if not self._http_step():
                    return
            elif self.mode == "websocket":
                if not self._websocket_step():
                    return
            elif self.mode == "h2":
                if not self._h2_step():
                    return
            else:
                self._keep_unparsed(bytes(self._buffer))
                self._buffer.clear()
                return

    def _http_step(self) -> bool:
        if self._body is not None:
            return self._body_step()
        buffer = self._buffer
        if not buffer.startswith(b"HTTP/"[: len(buffer)]):
            if buffer[0] == 0 and len(buffer) < 9:
                return False  # perhaps the start of an HTTP/2 frame
            if _looks_like_h2_frame(buffer):
                self.mode = "h2"  # a reply to the HTTP/2 preface: the server's SETTINGS
                return True
            self._give_up("not an HTTP/1.x response")
            return True
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > 256 * 1024:
                self._give_up("a response head over 256 KiB")
                return True
            return False
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        lines = head.split(b"\r\n")
        match = _STATUS_LINE.fullmatch(lines[0])
        if match is None:
            self._keep_unparsed(head)
            self._give_up("a malformed status line")
            return True
        status = int(match.group(3))
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:
            self.interim.append(status)
            if status == 101:
                upgrade = headers.get(b"upgrade", b"").lower()
                self.mode = "websocket" if upgrade == b"websocket" else "h2"
            return True
        self.statuses.append(status)
        self.headers.append(headers)
        self.bodies.append(bytearray())
        method = (
            self._methods[len(self.statuses) - 1]
            if len(self._methods) >= len(self.statuses)
            else b"GET"
        )
        content_type = headers.get(b"content-type", b"").lower()
        if method.upper() == b"HEAD" or status in (204, 304):
            self.complete += 1
            return True
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._body = _Body(chunked=True)
        elif b"content-length" in headers:
            try:
                length = int(headers[b"content-length"])
            except ValueError:
                self._give_up("a bad Content-Length in a response")
                return True
            self._body = _Body(remaining=length)
        else:
            self._body = _Body(until_close=True)
        self.streaming = self._body.until_close or content_type.startswith(b"text/event-stream")
        return self._body_step()

    def _body_step(self) -> bool:
        body = self._body
        assert body is not None
        buffer = self._buffer
        if body.until_close:
            self._keep_body(buffer)
            buffer.clear()
            return False
        if not body.chunked:
            taken = min(body.remaining, len(buffer))
            self._keep_body(buffer[:taken])
            del buffer[:taken]
            body.remaining -= taken
            if body.remaining == 0:
                self._end_body()
                return True
            return False
        while True:
            if body.remaining > 0:
                taken = min(body.remaining, len(buffer))
                self._keep_body(buffer[:taken])
                del buffer[:taken]
                body.remaining -= taken
                if body.remaining > 0:
                    return False
                body.expect_crlf = True
            if body.expect_crlf:
                if len(buffer) < 2:
                    return False
                del buffer[:2]
                body.expect_crlf = False
            end = buffer.find(b"\r\n")
            if end < 0:
                return False
            line = bytes(buffer[:end])
            if body.trailers:
                del buffer[: end + 2]
                if line == b"":
                    self._end_body()
                    return True
                continue
            del buffer[: end + 2]
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._give_up("a bad chunk size in a response")
                return True
            if size == 0:
                body.trailers = True
                continue
            body.remaining = size

    def _keep_body(self, data: bytearray) -> None:
        kept = self.bodies[-1]
        if len(kept) < _KEPT_BYTES:
            kept += data[: _KEPT_BYTES - len(kept)]

    def _end_body(self) -> None:
        self._body = None
        self.complete += 1
        self.streaming = False

    def _websocket_step(self) -> bool:
        buffer = self._buffer
        if len(buffer) < 2:
            return False
        opcode = buffer[0] & 0x0F
        masked = buffer[1] & 0x80
        size = buffer[1] & 0x7F
        offset = 2
        if size == 126:
            if len(buffer) < 4:
                return False
            size = struct.unpack("!H", buffer[2:4])[0]
            offset = 4
        elif size == 127:
            if len(buffer) < 10:
                return False
            size = struct.unpack("!Q", buffer[2:10])[0]
            offset = 10
        if masked:
            offset += 4
        if len(buffer) < offset + size:
            return False
        payload = bytes(buffer[offset : offset + size])
        del buffer[: offset + size]
        if opcode == 0x8:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.websocket_closes.append(code)
        return True

    def _h2_step(self) -> bool:
        buffer = self._buffer
        if len(buffer) < 9:
            return False
        length = int.from_bytes(buffer[:3], "big")
        kind, flags = buffer[3], buffer[4]
        stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        if len(buffer) < 9 + length:
            return False
        payload = bytes(buffer[9 : 9 + length])
        del buffer[: 9 + length]
        if kind in (0x1, 0x9):  # HEADERS, CONTINUATION
            if kind == 0x1:
                start = 0
                pad = 0
                if flags & 0x8:
                    pad = payload[0] if payload else 0
                    start = 1
                if flags & 0x20:
                    start += 5
                payload = payload[start : len(payload) - pad if pad else len(payload)]
            self._h2_block += payload
            if flags & 0x4:  # END_HEADERS
                self._h2_headers(stream)
        elif kind == 0x7 and len(payload) >= 8:  # GOAWAY
            self.h2_errors.append(("goaway", int.from_bytes(payload[4:8], "big")))
        elif kind == 0x3 and len(payload) >= 4:  # RST_STREAM
            self.h2_errors.append(("rst", int.from_bytes(payload[:4], "big")))
        return True

    def _h2_headers(self, stream: int) -> None:
        import hpack

        if self._h2_decoder is None:
            self._h2_decoder = hpack.Decoder()
        block, self._h2_block = bytes(self._h2_block), bytearray()
        try:
            headers = self._h2_decoder.decode(block, raw=True)  # type: ignore[attr-defined]
        except Exception as exc:  # the decoder's errors are many; any is a parse failure
            self._keep_unparsed(block)
            self._give_up(f"an HPACK block that does not decode: {exc!r}")
            return
        for name, value in headers:
            if name == b":status" and value.isdigit():
                self.h2_statuses.append(int(value))

    def _give_up(self, why: str) -> None:
        if self.problem is None:
            self.problem = why
        self.mode = "unparsed"
        self._body = None
        self._keep_unparsed(bytes(self._buffer))
        self._buffer.clear()

    def _keep_unparsed(self, data: bytes) -> None:
        if not data:
            return
        if len(self._unparsed) < _KEPT_BYTES:
            self._unparsed += data[: _KEPT_BYTES - len(self._unparsed)]
        self.suspect_5xx += [int(m.group(1)) for m in _FIVE_XX.finditer(data)]


class _Body:
    __slots__ = ("chunked", "expect_crlf", "remaining", "trailers", "until_close")

    def __init__(
        self, *, chunked: bool = False, remaining: int = 0, until_close: bool = False
    ) -> None:
        self.chunked = chunked
        self.remaining = remaining
        self.until_close = until_close
        self.expect_crlf = False
        self.trailers = False


def _looks_like_h2_frame(buffer: bytearray) -> bool:
    """An HTTP/2 frame header of a type a server sends first (SETTINGS, GOAWAY)."""
    return len(buffer) >= 9 and buffer[3] in (0x4, 0x7) and buffer[0] == 0
