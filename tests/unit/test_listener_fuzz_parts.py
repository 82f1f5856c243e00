"""The listener fuzzer's sans-IO parts: no server error can hide from its reader, and an input
is drawn the same way every time (`fuzz._http_answers`, `fuzz._http_grammar`)."""

from __future__ import annotations

import struct

import hpack

from fuzz._http_answers import AnswerReader
from fuzz._http_grammar import Probe, Surface, draw_probe, regressions, ws_frame
from fuzz.listeners import A2A_ROUTES, MCP_ROUTES, SERVE_ROUTES, _allowed_5xx


def read(data: bytes, methods: tuple[bytes, ...] = (), *, pieces: int = 1) -> AnswerReader:
    reader = AnswerReader(methods)
    step = max(1, len(data) // pieces)
    for start in range(0, len(data), step):
        reader.feed(data[start : start + step])
    reader.close()
    return reader


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
FAILED = b"HTTP/1.1 500 \r\ncontent-length: 0\r\n\r\n"


def test_every_response_of_a_pipeline_is_read_in_any_pieces() -> None:
    chunked = b"HTTP/1.1 404 \r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    # A HEAD answer declares a length and carries no body (RFC 9112 section 6.3).
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n"
    data = OK + chunked + head + FAILED
    for pieces in (1, 3, len(data)):
        reader = read(data, (b"GET", b"GET", b"HEAD", b"POST"), pieces=pieces)
        assert reader.statuses == [200, 404, 200, 500], pieces
        assert reader.complete == 4 and reader.problem is None
        assert bytes(reader.bodies[1]) == b"abc"


def test_an_interim_answer_is_not_the_final_one() -> None:
    reader = read(b"HTTP/1.1 100 Continue\r\n\r\n" + FAILED, (b"POST",))
    assert reader.interim == [100] and reader.statuses == [500]


def test_a_websocket_close_code_after_the_switch_is_read() -> None:
    switch = b"HTTP/1.1 101 \r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
    frames = ws_frame(0x1, b"{}", mask=False) + ws_frame(0x8, struct.pack("!H", 1011), mask=False)
    reader = read(switch + frames, (b"GET",), pieces=5)
    assert reader.mode == "websocket" and reader.websocket_closes == [1011]


def test_http2_statuses_and_errors_are_read() -> None:
    block = hpack.Encoder().encode([(":status", "500")])
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    headers = len(block).to_bytes(3, "big") + b"\x01\x04\x00\x00\x00\x01" + block
    goaway = b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + struct.pack("!II", 1, 2)
    reader = read(settings + headers + goaway, pieces=4)  # a reply to the HTTP/2 preface
    assert reader.h2_statuses == [500] and reader.h2_errors == [("goaway", 2)]
    assert 500 in reader.all_statuses


def test_what_cannot_be_parsed_is_still_scanned_for_a_5xx() -> None:
    reader = read(b"garbage\r\nHTTP/1.1 502 Bad Gateway\r\n\r\n")
    assert reader.problem is not None and reader.statuses == []
    assert reader.suspect_5xx == [502] and reader.all_statuses == [502]


def test_an_input_is_drawn_the_same_way_every_time() -> None:
    for name, routes in (("serve", SERVE_ROUTES), ("mcp", MCP_ROUTES), ("a2a-serve", A2A_ROUTES)):
        surface = Surface(name, 8080, routes, 1 << 20, bearer="t" * 20, runs=(("run-1", "v"),))
        drawn = [draw_probe(7, name, index, surface, True) for index in range(300)]
        assert drawn == [draw_probe(7, name, index, surface, True) for index in range(300)]
        assert len({probe.kind for probe in drawn}) > 15
        assert draw_probe(8, name, 0, surface, True) != drawn[0] or drawn[1] != drawn[0]
        assert [n for n, _ in regressions(surface)] == [n for n, _ in regressions(surface)]


def test_only_two_5xx_answers_are_allowed() -> None:
    def probe(request: bytes) -> Probe:
        return Probe("t", (request,), methods=(request.split(b" ", 1)[0],))

    te = probe(b"POST /runs HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
    plain = probe(b"POST /runs HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    readyz = probe(b"GET /readyz HTTP/1.1\r\n\r\n")
    assert _allowed_5xx(501, te) and not _allowed_5xx(501, plain)
    assert _allowed_5xx(503, readyz) and not _allowed_5xx(503, plain)
    assert not _allowed_5xx(500, te) and not _allowed_5xx(500, readyz)
