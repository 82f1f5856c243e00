"""The bundled server and its MCP listener against callers that are not who they should be.

Each test plays one stranger on 127.0.0.1: a web page on another site (foreign `Origin`, simple
bodies), a page that rebinds its DNS name to this machine (foreign `Host`), a caller without the
host token, one that starts runs until the server is full, one that probes run ids, and one that
sends what no client should (deep JSON, odd cursors, oversized WebSocket messages). Every
refusal is a 4xx with a JSON `{error, message}`, and the server goes on serving everyone else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from adapters.agui import check_frames, parse_sse
from adapters.parents import ScriptedParent
from demo import demo_agents
from engine import Engine, EngineLimits, Run
from tests.helpers.mcp_endpoint import INITIALIZE, PROTOCOL_VERSION
from web.config import parse_config
from web.server import (
    WS_MESSAGE_BURST,
    HttpError,
    RunHost,
    create_app,
    default_encoder_factory,
    open_host,
    serve_app,
)

pytestmark = pytest.mark.filterwarnings(
    # trio-websocket leaves its socket to the collector when a handshake is rejected.
    "ignore:Exception ignored in.*socket.socket:pytest.PytestUnraisableExceptionWarning",
)

RUN_INPUT = {"messages": [{"id": "u1", "role": "user", "content": "How does Trio stream?"}]}
HOST_TOKEN = "host-token-0123456789abcdef"


@asynccontextmanager
async def server(
    config_text: str = "",
    parent: Callable[[], Any] = ScriptedParent,
    **app_options: Any,
) -> AsyncIterator[tuple[str, RunHost, Any]]:
    config = parse_config(config_text, "test.toml")
    async with open_host(config, demo_agents(pause=0), parent) as (host, endpoint):
        app = create_app(host, config, default_encoder_factory(), page=b"<html>", **app_options)
        async with serve_app(app) as base:
            yield base, host, endpoint


async def start(http: httpx.AsyncClient, base: str, **body: Any) -> dict[str, Any]:
    response = await http.post(f"{base}/runs", json={**RUN_INPUT, **body})
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


async def whole_stream(http: httpx.AsyncClient, base: str, run: dict[str, Any]) -> bytes:
    url = f"{base}{run['events_url']}?token={run['viewer_token']}"
    response = await http.get(url)
    assert response.status_code == 200
    return response.content


def refused(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == error


async def raw_exchange(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    async with stream:
        await stream.send_all(request)
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data


async def close_code(ws: Any) -> int:
    """Read until the server closes the WebSocket; its close code."""
    with trio.fail_after(10):
        try:
            while True:
                await ws.get_message()
        except ConnectionClosed as closed:
            code: int = closed.reason.code
            return code


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].rstrip("/"))


# -- web pages on other sites --------------------------------------------------------------


async def test_a_page_on_another_site_can_neither_start_nor_watch_runs() -> None:
    async with server() as (base, host, _), httpx.AsyncClient(timeout=30) as http:
        evil = {"origin": "http://evil.example"}
        body = json.dumps(RUN_INPUT).encode()
        for path in ("/runs", "/agui"):
            # The simple bodies a browser sends cross-site without asking first.
            for content_type in (
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
            ):
                response = await http.post(
                    f"{base}{path}", content=body, headers={"content-type": content_type}
                )
                refused(response, 415, "unsupported_media_type")
            response = await http.post(f"{base}{path}", json=RUN_INPUT, headers=evil)
            refused(response, 403, "forbidden_origin")
            null = await http.post(f"{base}{path}", json=RUN_INPUT, headers={"origin": "null"})
            refused(null, 403, "forbidden_origin")
        assert host.active_runs == 0
        run = await start(http, base)
        events = f"{base}{run['events_url']}?token={run['viewer_token']}"
        refused(await http.get(events, headers=evil), 403, "forbidden_origin")
        ws_url = base.replace("http://", "ws://") + run["websocket_url"]
        with pytest.raises(ConnectionRejected) as rejected:
            async with open_websocket_url(
                f"{ws_url}?token={run['viewer_token']}", extra_headers=[("origin", "http://x.y")]
            ):
                pass
        assert rejected.value.status_code == 403
        # The server's own page may: same origin.
        own = await http.post(f"{base}/runs", json=RUN_INPUT, headers={"origin": base})
        assert own.status_code == 201


async def test_a_rebinding_host_name_is_misdirected_everywhere() -> None:
    async with server() as (base, host, endpoint), httpx.AsyncClient(timeout=30) as http:
        rebound = {"host": "evil.example"}
        for method, path in (("GET", "/"), ("GET", "/healthz"), ("POST", "/runs")):
            response = await http.request(method, f"{base}{path}", json={}, headers=rebound)
            refused(response, 421, "unknown_host")
        mcp = await http.post(f"{endpoint.base_url}/runs/x/mcp", json={}, headers=rebound)
        refused(mcp, 421, "unknown_host")
        assert host.active_runs == 0
    config = '[server]\nallowed_hosts = ["Agents.Example"]\n'
    async with server(config) as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        named = await http.get(f"{base}/healthz", headers={"host": "agents.example:8080"})
        assert named.status_code == 200


async def test_repeated_single_valued_headers_are_refused() -> None:
    async with server() as (base, _, endpoint):
        for port in (port_of(base), port_of(endpoint.base_url)):
            for name in (b"Host", b"Authorization", b"Content-Type", b"Origin"):
                request = (
                    b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                    b"Content-Type: application/json\r\nConnection: close\r\n"
                    + name
                    + b": a\r\n"
                    + (name + b": b\r\n" if name != b"Host" and name != b"Content-Type" else b"")
                    + b"\r\n{}"
                )
                answer = await raw_exchange(port, request)
                assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
                if name != b"Host":  # h11 itself refuses a second Host (RFC 9112 3.2)
                    assert b"duplicate_header" in answer


# -- the host token ----------------------------------------------------------------------------


async def test_starting_a_run_needs_the_host_token_when_one_is_set() -> None:
    async with server(host_token=HOST_TOKEN) as (base, host, _), httpx.AsyncClient() as http:
        for headers in (
            {},
            {"authorization": "Bearer wrong-token-0123456789"},
            {"authorization": f"Basic {HOST_TOKEN}"},
        ):
            response = await http.post(f"{base}/runs", json=RUN_INPUT, headers=headers)
            assert response.status_code == 401, response.text
            assert response.json()["error"] in ("unauthorized", "bad_authorization")
            assert response.headers["www-authenticate"].startswith("Bearer")
            agui = await http.post(f"{base}/agui", json=RUN_INPUT, headers=headers)
            assert agui.status_code == 401
        assert host.active_runs == 0
        # The scheme in any case (RFC 9110 section 11.1).
        ok = await http.post(
            f"{base}/runs", json=RUN_INPUT, headers={"authorization": f"bearer {HOST_TOKEN}"}
        )
        assert ok.status_code == 201
        run = ok.json()
        # Watching is the viewer token's business: the host token is not a viewer token.
        frames = parse_sse(await whole_stream(http, base, run))
        assert frames[-1][1]["type"] == "RUN_FINISHED"
        url = f"{base}{run['events_url']}"
        other = await http.get(url, headers={"authorization": f"Bearer {HOST_TOKEN}"})
        refused(other, 404, "unknown_run")


# -- run ids, caps and retention ------------------------------------------------------------------


async def test_a_callers_run_id_names_its_agui_run_only() -> None:
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        first = await start(http, base, runId="taken")
        second = await start(http, base, runId="taken")  # no 409: nothing to learn or reserve
        assert first["run_id"] != second["run_id"]
        assert first["run_id"].startswith("run-") and first["agui_run_id"] == "taken"
        frames = parse_sse(await whole_stream(http, base, first))
        assert frames[0][1] == {**frames[0][1], "type": "RUN_STARTED", "runId": "taken"}
        assert frames[-1][1]["runId"] == "taken"
        for odd in ("a/b", "..", "a b", "\u00e9", "a%2fb", "run-" + "x" * 100):
            run = await start(http, base, runId=odd)
            frames = parse_sse(await whole_stream(http, base, run))
            assert check_frames(frames) == []
            assert frames[-1][1]["type"] == "RUN_FINISHED" and frames[-1][1]["runId"] == odd
        for bad in ("", "x" * 129, "a\nb", 5):
            response = await http.post(f"{base}/runs", json={**RUN_INPUT, "runId": bad})
            refused(response, 400, "bad_input")


class _WaitingParent:
    """A parent that waits until its run is stopped."""

    async def run(self, run: Run, prompt: str) -> None:
        await trio.sleep_forever()


async def test_runs_beyond_the_cap_get_429_with_retry_after() -> None:
    config = "[server]\nmax_active_runs = 2\n"
    async with (
        server(config, parent=_WaitingParent) as (base, host, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        runs = [await start(http, base), await start(http, base)]
        full = await http.post(f"{base}/runs", json=RUN_INPUT)
        refused(full, 429, "too_many_runs")
        assert int(full.headers["retry-after"]) > 0
        refused(await http.post(f"{base}/agui", json=RUN_INPUT), 429, "too_many_runs")
        auth = {"authorization": f"Bearer {runs[0]['viewer_token']}"}
        stopped = await http.post(f"{base}/runs/{runs[0]['run_id']}/stop", headers=auth)
        assert stopped.json()["stopped"] is True
        assert host.active_runs == 1
        await start(http, base)


async def test_a_new_run_never_pushes_a_young_finished_run_out_of_the_replay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Quick:
        async def run(self, run: Run, prompt: str) -> None:
            await trio.lowlevel.checkpoint()

    limits = EngineLimits(retained_closed_runs=3)
    async with Engine([], limits=limits) as engine, trio.open_nursery() as nursery:
        host = RunHost(engine, nursery, Quick, max_active_runs=3, replay_retention=300)
        first = await host.start("a", thread_id=None, agui_run_id=None, mode=None)
        for _ in range(2):
            await trio.sleep(10)
            await host.start("b", thread_id=None, agui_run_id=None, mode=None)
        await trio.sleep(10)
        with pytest.raises(HttpError) as full:
            await host.start("c", thread_id=None, agui_run_id=None, mode=None)
        assert full.value.status == 429
        wait = int(dict(full.value.headers)["retry-after"])
        assert 265 <= wait <= 271  # when the first run turns 300 s old
        assert engine.journal(first.run_id) is not None
        await trio.sleep(wait)
        await host.start("d", thread_id=None, agui_run_id=None, mode=None)
        # The first run's journal may go now; the others are kept.
        nursery.cancel_scope.cancel()


def test_the_cap_cannot_exceed_the_runs_the_engine_retains() -> None:
    from web.config import ConfigError

    text = "[server]\nmax_active_runs = 100\n[limits]\nretained_closed_runs = 64\n"
    with pytest.raises(ConfigError, match=r"test.toml:2: server.max_active_runs: must be at most"):
        parse_config(text, "test.toml")
    parse_config(text.replace("[limits]", "replay_retention_seconds = 0\n[limits]"), "test.toml")


# -- what no client should send -------------------------------------------------------------------


async def test_odd_requests_get_json_4xx_and_the_server_goes_on() -> None:
    async with server() as (base, host, _), httpx.AsyncClient(timeout=30) as http:
        run = await start(http, base)
        token = run["viewer_token"]
        auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        deep = b"[" * 100_000 + b"]" * 100_000
        for path in ("/runs", "/agui", f"/runs/{run['run_id']}/answer"):
            response = await http.post(f"{base}{path}", content=deep, headers=auth)
            refused(response, 400, "too_deep")
            nan = await http.post(f"{base}{path}", content=b'{"a": NaN}', headers=auth)
            refused(nan, 400, "bad_json")
        events = f"{base}{run['events_url']}"
        for cursor in ("\u00b2", "\u0661", "1e3", "9" * 19):
            query = await http.get(events, params={"token": token, "after": cursor})
            refused(query, 400, "bad_cursor")
        header = await http.get(
            events, headers={"authorization": f"Bearer {token}", "last-event-id": "\u00b2".encode()}
        )
        refused(header, 400, "bad_cursor")
        refused(await http.get(f"{base}/static/{'a' * 5000}"), 404, "not_found")
        refused(await http.get(f"{base}/static/index.html"), 404, "not_found")
        plain = await http.get(f"{base}/runs/{run['run_id']}/ws?token={token}")
        refused(plain, 400, "websocket_required")
        with trio.fail_after(10):
            head = await http.head(f"{events}?token={token}")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"].startswith("text/event-stream")
        ws_url = base.replace("http://", "ws://") + run["websocket_url"]
        async with open_websocket_url(f"{ws_url}?token={token}&after=%C2%B2") as ws:
            assert json.loads(await ws.get_message())["error"] == "bad_cursor"
            assert await close_code(ws) == 4400
        assert (await http.get(f"{base}/healthz")).status_code == 200
        await whole_stream(http, base, run)
        assert host.active_runs == 0


async def test_a_websocket_handshake_to_an_http_route_is_refused_not_failed() -> None:
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        run = await start(http, base)
        ws_base = base.replace("http://", "ws://")
        for path in ("/", "/healthz", "/readyz", f"{run['events_url']}?token=x", "/nowhere"):
            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(f"{ws_base}{path}"):
                    pass
            assert 400 <= rejected.value.status_code < 500, (path, rejected.value.status_code)
        assert (await http.get(f"{base}/healthz")).status_code == 200


async def test_a_resume_at_the_terminal_answers_204_so_event_source_stops() -> None:
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        run = await start(http, base)
        body = await whole_stream(http, base, run)
        last = max(int(c) for c in re.findall(rb"^id: (\d+)$", body, re.MULTILINE))
        url = f"{base}{run['events_url']}?token={run['viewer_token']}"
        done = await http.get(url, headers={"last-event-id": str(last)})
        assert done.status_code == 204 and done.content == b""
        # One before the terminal still gets the terminal.
        rest = await http.get(url, headers={"last-event-id": str(last - 1)})
        assert rest.status_code == 200 and b"RUN_FINISHED" in rest.content
        ws_url = base.replace("http://", "ws://") + run["websocket_url"]
        async with open_websocket_url(f"{ws_url}?token={run['viewer_token']}&after={last}") as ws:
            assert await close_code(ws) == 1000


async def test_the_viewer_token_goes_back_only_to_who_started_the_run() -> None:
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", f"{base}/agui", json=RUN_INPUT) as started:
            assert started.headers["x-viewer-token"]
            token = started.headers["x-viewer-token"]
            run_id = started.headers["x-run-id"]
            await started.aread()
        watched = await http.get(f"{base}/runs/{run_id}/events?token={token}")
        assert watched.status_code == 200
        assert "x-viewer-token" not in watched.headers
        assert token.encode() not in watched.content


async def test_every_answer_refuses_framing_and_sniffing() -> None:
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        for response in (
            await http.get(f"{base}/"),
            await http.get(f"{base}/healthz"),
            await http.get(f"{base}/nowhere"),
            await http.post(f"{base}/runs", content=b"x", headers={"content-type": "text/plain"}),
        ):
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["content-security-policy"] == "frame-ancestors 'none'"
            assert response.headers["x-content-type-options"] == "nosniff"


async def test_a_websocket_viewers_messages_are_read_bounded_and_rate_limited() -> None:
    async with (
        server(parent=_WaitingParent) as (base, host, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        run = await start(http, base)
        ws_url = base.replace("http://", "ws://") + run["websocket_url"]
        url = f"{ws_url}?token={run['viewer_token']}"
        async with open_websocket_url(url) as ws:
            await ws.get_message()  # RUN_STARTED
            # Over the listener's 64 KiB message bound (a larger one the server stops reading
            # once it has refused it; the kernel's buffers would then hold the client's send).
            with contextlib.suppress(ConnectionClosed):
                await ws.send_message("x" * (100 * 1024))
            assert await close_code(ws) == 1009  # message too big
        async with open_websocket_url(url) as ws:
            await ws.get_message()
            with contextlib.suppress(ConnectionClosed):  # the server may close mid-burst
                for _ in range(WS_MESSAGE_BURST + 4):
                    await ws.send_message("hello")
            assert await close_code(ws) == 1008  # policy violation
        # A viewer that sends a little is fine, and the run was never touched.
        async with open_websocket_url(url) as ws:
            await ws.get_message()
            for _ in range(3):
                await ws.send_message("ping")
        assert host.active_runs == 1


async def test_a_lone_surrogate_in_the_prompt_runs_and_streams_in_every_format() -> None:
    body = b'{"messages": [{"id": "u", "role": "user", "content": "hi \\ud800 there"}]}'
    async with server() as (base, _, _), httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/runs", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 201
        run = response.json()
        url = f"{base}{run['events_url']}?token={run['viewer_token']}"
        agui = (await http.get(url)).content
        agui.decode("utf-8")
        assert parse_sse(agui)[-1][1]["type"] == "RUN_FINISHED"
        engine = (await http.get(f"{url}&format=engine")).content
        cursors = [int(c) for c in re.findall(rb"^id: (\d+)$", engine, re.MULTILINE)]
        assert b'"run.finished"' in engine
        for cursor in cursors[:-1]:  # every reconnect works
            again = await http.get(f"{url}&format=engine&after={cursor}")
            assert again.status_code == 200 and b'"run.finished"' in again.content


# -- the MCP listener ---------------------------------------------------------------------------


async def test_the_mcp_listener_refuses_pages_rebinding_websockets_and_two_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with (
        server() as (_, host, endpoint),
        httpx.AsyncClient(timeout=30) as http,
        host.engine.open_run() as first,
        host.engine.open_run() as second,
    ):
        url, token = first.endpoint.url, first.endpoint.token
        accept = {"accept": "application/json, text/event-stream"}
        page = await http.post(
            url,
            json=INITIALIZE,
            headers={**accept, "authorization": f"Bearer {token}", "origin": "http://x.y"},
        )
        refused(page, 403, "forbidden_origin")
        plain = await http.post(
            url,
            content=json.dumps(INITIALIZE),
            headers={
                **accept,
                "authorization": f"Bearer {token}",
                "content-type": "text/plain",
            },
        )
        refused(plain, 415, "unsupported_media_type")
        port = port_of(endpoint.base_url)
        upgrade = await raw_exchange(
            port,
            b"GET /runs/x/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n",
        )
        assert upgrade.startswith(b"HTTP/1.1 404"), upgrade[:100]
        two = await raw_exchange(
            port,
            b"POST " + url.split(str(port), 1)[1].encode() + b" HTTP/1.1\r\n"
            b"Host: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"Authorization: Bearer " + second.endpoint.token.encode() + b"\r\n"
            b"Connection: close\r\n\r\n{}",
        )
        assert two.startswith(b"HTTP/1.1 400"), two[:100]
        # The scheme in any case; a session opened with one run's token is unknown to
        # another's, and its id is never printed.
        opened = await http.post(
            url, json=INITIALIZE, headers={**accept, "authorization": f"bearer {token}"}
        )
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        foreign = await http.post(
            second.endpoint.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={
                **accept,
                "authorization": f"Bearer {second.endpoint.token}",
                "mcp-session-id": session,
                "mcp-protocol-version": PROTOCOL_VERSION,
            },
        )
        assert foreign.status_code == 404
    assert session not in caplog.text
    assert token not in caplog.text
