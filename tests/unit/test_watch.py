"""`subagent-engine watch` without a server: the URL a user copies, the stream read in pieces,
and every way watching ends, through httpx's own `MockTransport` seam.

`watch_target` and `EngineStream` are sans-IO and tested as such (bytes fed one at a time, every
refusal typed); `watch_main` runs whole, on a transport that answers what a server, a proxy or a
broken network would: its exit status and its one line on stderr are what a user sees.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from cli._watch_wire import BadUrl, EngineStream, StreamError, watch_target
from cli.watch import (
    EXIT_BAD_STREAM,
    EXIT_CANCELLED,
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    TOKEN_ENV,
    watch_main,
)
from engine import DelegationError, DelegationEvent, Kind, to_json

EVENTS_URL = "http://127.0.0.1:9/runs/run-abc/events"


def ev(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-abc", **fields)


def run_events(terminal: DelegationEvent) -> list[DelegationEvent]:
    return [
        ev(Kind.RUN_STARTED),
        ev(Kind.PARENT_TOOL_CALL_START, tool_call_id="c1", tool_name="delegate_to_agent"),
        ev(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id="c1", delta='{"agent": "research"}'),
        ev(Kind.PARENT_TOOL_CALL_END, tool_call_id="c1"),
        ev(Kind.STARTED, delegation_id="d1", agent_key="research", parent_tool_call_id="c1"),
        ev(Kind.TEXT_DELTA, delegation_id="d1", message_id="m1", delta="nurseries cancel"),
        ev(Kind.FINISHED, delegation_id="d1", text="done looking"),
        terminal,
    ]


FINISHED = ev(Kind.RUN_FINISHED, text="The answer.")


def sse(events: list[DelegationEvent], first: int = 1, retry: int | None = 0) -> bytes:
    head = b"" if retry is None else b"retry: %d\n\n" % retry
    return head + b"".join(
        b"id: %d\ndata: %s\n\n" % (first + i, to_json(event).encode())
        for i, event in enumerate(events)
    )


# -- the URL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "events", "token"),
    [
        (EVENTS_URL, EVENTS_URL, None),
        (EVENTS_URL + "?token=t1&mode=custom", EVENTS_URL, "t1"),
        ("http://127.0.0.1:9/runs/run-abc", EVENTS_URL, None),
        ("http://127.0.0.1:9/runs/run-abc/", EVENTS_URL, None),
        ("http://127.0.0.1:9/#run=run-abc&token=t2", EVENTS_URL, "t2"),
        ("http://127.0.0.1:9/?x=1#run=run-abc", EVENTS_URL, None),
        (
            "https://example.test/engine/runs/run-abc/events?token=t3",
            "https://example.test/engine/runs/run-abc/events",
            "t3",
        ),
    ],
)
def test_what_a_user_copies_names_the_events_url(url: str, events: str, token: str | None) -> None:
    target = watch_target(url)
    assert (target.events_url, target.run_id, target.token) == (events, "run-abc", token)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "run-abc",
        "ftp://127.0.0.1/runs/run-abc",
        "http:///runs/run-abc",
        "http://127.0.0.1:9/",
        "http://127.0.0.1:9/runs",
        "http://127.0.0.1:9/runs/a%20b/events",
        "http://127.0.0.1:9/#run=" + "r" * 201,
        "http://[::1/runs/x",
    ],
)
def test_a_url_that_names_no_run_is_a_bad_url(url: str) -> None:
    with pytest.raises(BadUrl):
        watch_target(url)


# -- the stream ------------------------------------------------------------------------------


def test_the_stream_read_a_byte_at_a_time_gives_each_event_with_its_cursor() -> None:
    body = b": keep-alive\n\n" + sse(run_events(FINISHED), retry=250).replace(b"\n", b"\r\n")
    stream = EngineStream()
    got: list[tuple[int | None, DelegationEvent]] = []
    for i in range(len(body)):
        got += stream.feed(body[i : i + 1])
    assert [cursor for cursor, _ in got] == list(range(1, 9))
    assert [event.kind for _, event in got] == [e.kind for e in run_events(FINISHED)]
    assert stream.cursor == 8 and stream.retry_ms == 250


def test_a_cut_frame_is_dropped_and_the_cursor_kept() -> None:
    stream = EngineStream()
    whole = sse(run_events(FINISHED))
    cut = whole.index(b"id: 3")
    assert len(stream.feed(whole[: cut + 20])) == 2
    stream.end()
    assert stream.cursor == 2
    assert [c for c, _ in stream.feed(sse(run_events(FINISHED)[2:], first=3))][:1] == [3]


def test_a_server_retry_is_capped() -> None:
    stream = EngineStream()
    stream.feed(b"retry: 999999999\n\nretry: x\n\n")
    assert stream.retry_ms == 30_000


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"data: {not json\n\n", "not an engine event"),
        (b'id: 4\ndata: {"kind": "run.started"}\n\n', "event 4 is not an engine event"),
        (b"data: [1, 2]\n\n", "not an engine event"),
        (b"id: x1\ndata: {}\n\n", "not a cursor"),
        (b"id: " + b"9" * 19 + b"\n\n", "not a cursor"),
        (b"data: \xff\xfe\n\n", "not UTF-8"),
        (
            b"id: 5\n"
            + b"data: "
            + to_json(ev(Kind.RUN_STARTED)).encode()
            + b"\n\n" * 1
            + b"id: 5\ndata: "
            + to_json(ev(Kind.RUN_STARTED)).encode()
            + b"\n\n",
            "does not follow",
        ),
    ],
)
def test_what_is_not_an_engine_stream_is_a_stream_error(body: bytes, says: str) -> None:
    with pytest.raises(StreamError, match=says):
        EngineStream().feed(body)


def test_lines_and_events_are_bounded() -> None:
    with pytest.raises(StreamError, match="over 64 bytes"):
        EngineStream(max_line_bytes=64).feed(b"data: " + b"x" * 100)  # no newline yet
    with pytest.raises(StreamError, match="over 64 bytes"):
        EngineStream(max_line_bytes=64).feed(b"data: " + b"x" * 100 + b"\n")
    with pytest.raises(StreamError, match="event of the stream is over 64 bytes"):
        EngineStream(max_line_bytes=64).feed(
            b"data: " + b"x" * 40 + b"\ndata: " + b"y" * 40 + b"\n"
        )


# -- watching, whole -------------------------------------------------------------------------


class Dropping(httpx.AsyncByteStream):
    """A body that sends `body` and then loses the connection."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body
        raise httpx.RemoteProtocolError("peer closed connection")


SSE_HEADERS = {"content-type": "text/event-stream"}


def watch(
    handler: Callable[[httpx.Request], httpx.Response],
    url: str = EVENTS_URL,
    *,
    token: str | None = "tok",
    environ: dict[str, str] | None = None,
    retries: int = 2,
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = watch_main(
        url,
        token=token,
        out=out,
        err=err,
        environ=environ or {},
        retries=retries,
        transport=httpx.MockTransport(handler),
    )
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("terminal", "status", "ending"),
    [
        (FINISHED, EXIT_FINISHED, "The answer."),
        (
            ev(Kind.RUN_FAILED, error=DelegationError(code="failed", message="It broke.")),
            EXIT_FAILED,
            "The run failed: It broke.",
        ),
        (ev(Kind.RUN_CANCELLED, text="Stopped."), EXIT_CANCELLED, "The run was cancelled"),
    ],
)
def test_watching_ends_with_the_runs_outcome(
    terminal: DelegationEvent, status: int, ending: str
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(run_events(terminal)))

    got, out, err = watch(handler)
    assert (got, err) == (status, "")
    assert "research [done" in out and "delegate_to_agent [" in out
    assert ending in out
    assert "\x1b" not in out  # not a terminal: plain lines
    [request] = seen
    assert request.headers["authorization"] == "Bearer tok"
    assert request.url.params["format"] == "engine"
    assert "last-event-id" not in request.headers


def test_a_dropped_stream_is_reopened_from_its_last_event() -> None:
    events = run_events(FINISHED)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(200, headers=SSE_HEADERS, stream=Dropping(sse(events[:5])))
        if len(seen) == 2:
            return httpx.Response(503, json={"error": "store_unavailable", "message": "later"})
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(events[5:], first=6))

    status, out, err = watch(handler)
    assert status == EXIT_FINISHED
    assert [r.headers.get("last-event-id") for r in seen] == [None, "5", "5"]
    lines = err.splitlines()
    assert len(lines) == 2
    assert "connection was lost" in lines[0] and "from event 5 (1/2)" in lines[0]
    assert "answered 503: later" in lines[1] and "(2/2)" in lines[1]
    assert "research [done" in out


def test_reconnects_are_bounded() -> None:
    events = run_events(FINISHED)

    def handler(request: httpx.Request) -> httpx.Response:
        resumed = "last-event-id" in request.headers  # nothing new after event 3, ever
        body = sse([] if resumed else events[:3])
        return httpx.Response(200, headers=SSE_HEADERS, content=body)

    status, _, err = watch(handler, retries=2)
    assert status == EXIT_UNREACHABLE
    lines = err.splitlines()
    assert len(lines) == 3
    assert lines[-1].endswith("gave up after 2 reconnects")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        (httpx.Response(401, json={"message": "Bearer needed"}), EXIT_REFUSED, "401: Bearer"),
        (httpx.Response(403, text="no"), EXIT_REFUSED, "refused the token (403)"),
        (
            httpx.Response(404, json={"error": "unknown_run", "message": "No such run."}),
            EXIT_NOT_FOUND,
            "404: No such run.",
        ),
        (httpx.Response(400, json={"message": "bad\x1b[2Jcursor"}), EXIT_BAD_STREAM, "(400: bad"),
        (httpx.Response(502, text="<html>"), EXIT_BAD_STREAM, "(502)"),
        (httpx.Response(204), EXIT_BAD_STREAM, "its end never came"),
        (httpx.Response(200, text="<html>"), EXIT_BAD_STREAM, "not an event stream"),
        (
            httpx.Response(200, headers=SSE_HEADERS, content=b"data: {oops\n\n"),
            EXIT_BAD_STREAM,
            "cannot be read",
        ),
    ],
)
def test_each_refusal_is_one_line_and_its_own_status(
    answer: httpx.Response, status: int, says: str
) -> None:
    got, _, err = watch(lambda request: answer)
    assert got == status
    assert err.count("\n") == 1 and says in err, err
    assert "\x1b" not in err


def test_an_unreachable_server_is_said_at_once() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    status, _, err = watch(handler)
    assert status == EXIT_UNREACHABLE
    assert err.startswith(
        "subagent-engine watch: cannot reach http://127.0.0.1:9/runs/run-abc/events"
    )
    assert err.count("\n") == 1


def test_the_token_comes_from_the_option_then_the_url_then_the_environment() -> None:
    tokens: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        tokens.append(request.headers["authorization"])
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(run_events(FINISHED)))

    env = {TOKEN_ENV: "from-env"}
    watch(handler, EVENTS_URL + "?token=from-url", token="from-option", environ=env)
    watch(handler, EVENTS_URL + "?token=from-url", token=None, environ=env)
    watch(handler, EVENTS_URL, token=None, environ=env)
    assert tokens == ["Bearer from-option", "Bearer from-url", "Bearer from-env"]


@pytest.mark.parametrize(
    ("url", "token", "says"),
    [
        ("not a url", "tok", "http:// or https://"),
        (EVENTS_URL, None, "no viewer token"),
        (EVENTS_URL, "two words", "not one a server gives"),
        (EVENTS_URL, "tok\r\nx: y", "not one a server gives"),
    ],
)
def test_a_bad_url_or_token_is_refused_before_any_request(
    url: str, token: str | None, says: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request may go out")

    status, _, err = watch(handler, url, token=token)
    assert status == EXIT_CONFIG
    assert says in err and err.count("\n") == 1


def test_on_a_terminal_the_tree_is_redrawn_in_place() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(run_events(FINISHED)))

    out = io.StringIO()
    status = watch_main(
        EVENTS_URL,
        token="tok",
        out=out,
        err=io.StringIO(),
        environ={},
        force_tty=True,
        transport=httpx.MockTransport(handler),
    )
    text = out.getvalue()
    assert status == EXIT_FINISHED
    assert text.startswith("\x1b[?25l") and text.endswith("\x1b[?25h")  # cursor hidden, shown
    assert "\x1b[J" in text  # the frame replaced in place
    assert "research  \x1b[32mdone" in text  # the last frame, coloured
    assert "research [done" not in text  # no plain notes


def test_no_color_asks_for_plain_lines_even_on_a_terminal() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(run_events(FINISHED)))

    out = io.StringIO()
    watch_main(
        EVENTS_URL,
        token="tok",
        out=out,
        err=io.StringIO(),
        environ={"NO_COLOR": "1"},
        force_tty=True,
        transport=httpx.MockTransport(handler),
    )
    assert "\x1b" not in out.getvalue() and "research [done" in out.getvalue()
