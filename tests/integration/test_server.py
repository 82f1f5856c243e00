"""The bundled server on a real Hypercorn listener: runs, streams, reconnects, stops, refusals.

The parent is the scripted parent delegating over the real MCP endpoint to in-process agents;
viewers are httpx (SSE) and trio-websocket clients on 127.0.0.1. Streams here use the engine's
own envelope (`EngineEventEncoder`) so assertions read engine kinds; the AG-UI output has its
own tests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from engine import VOLATILE, AgentSpec, Kind, lane_of
from web.config import parse_config
from web.demo import demo_agents
from web.server import EngineEventEncoder, create_app, open_host, serve_app

pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*httpx2:pytest.PytestUnraisableExceptionWarning",
    "ignore:Exception ignored in.*EventSource:pytest.PytestUnraisableExceptionWarning",
    "ignore:Exception ignored in.*aiter:pytest.PytestUnraisableExceptionWarning",
)

RUN_INPUT = {
    "threadId": "thread-1",
    "messages": [{"id": "u1", "role": "user", "content": "How does Trio stream events?"}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


@asynccontextmanager
async def server(
    agents: list[AgentSpec] | None = None, config_text: str = "", **app_options: Any
) -> AsyncIterator[tuple[str, Any]]:
    config = parse_config(config_text, "test.toml")
    async with open_host(config, agents or demo_agents(pause=0), ScriptedParent) as (host, _):
        app = create_app(host, config, EngineEventEncoder, **app_options)
        async with serve_app(app) as base_url:
            yield base_url, host


def parse_sse(text: str) -> list[tuple[int | None, dict[str, Any]]]:
    messages = []
    for block in text.split("\n\n"):
        cursor = None
        data = None
        for line in block.split("\n"):
            if line.startswith("id: "):
                cursor = int(line[4:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            messages.append((cursor, data))
    return messages


async def read_stream(
    http: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None
) -> list[tuple[int | None, dict[str, Any]]]:
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    return parse_sse(body.decode())


async def test_agui_post_streams_the_whole_run_in_order() -> None:
    async with (
        server() as (base, _),
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{base}/agui", json=RUN_INPUT) as response,
    ):
        assert response.status_code == 200
        assert response.headers["x-run-id"].startswith("run-")
        assert response.headers["x-viewer-token"]
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    messages = parse_sse(body.decode())
    kinds = [data["kind"] for _, data in messages]
    assert kinds[0] == Kind.RUN_STARTED and kinds[-1] == Kind.RUN_FINISHED
    cursors = [cursor for cursor, _ in messages]
    assert cursors == sorted(set(cursors))  # strictly increasing, each message has its id
    assert kinds.count(Kind.STARTED) == 2 and kinds.count(Kind.FINISHED) == 2
    assert kinds.index(Kind.PARENT_TOOL_CALL_START) < kinds.index(Kind.STARTED)


async def test_start_then_watch_and_reconnect_without_loss_or_duplicates() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{started['events_url']}"
        auth = {"authorization": f"Bearer {started['viewer_token']}"}
        whole = await read_stream(http, url, headers=auth)
        # A viewer that saw the first third reconnects with Last-Event-ID.
        cut = whole[len(whole) // 3][0]
        assert cut is not None
        rest = await read_stream(http, url, headers={**auth, "last-event-id": str(cut)})
        again = await read_stream(http, f"{url}?after={cut}&token={started['viewer_token']}")
    tail = [(c, d) for c, d in whole if c is not None and c > cut]
    assert rest == again
    cursors = [c for c, _ in rest]
    assert cursors == sorted(set(cursors)) and cursors[0] > cut
    # A catching-up reader may get adjacent deltas merged; nothing else differs, no text is
    # lost and nothing is repeated.
    assert not_deltas(rest) == not_deltas(tail)
    assert texts(rest) == texts(tail)
    assert [d["kind"] for _, d in rest].count(Kind.RUN_FINISHED) == 1


def is_delta(kind: str) -> bool:
    return lane_of(kind) == VOLATILE


def not_deltas(messages: list[tuple[int | None, dict[str, Any]]]) -> list[tuple[Any, ...]]:
    return [(c, d["kind"]) for c, d in messages if not is_delta(d["kind"])]


def texts(messages: list[tuple[int | None, dict[str, Any]]]) -> dict[tuple[Any, Any], str]:
    out: dict[tuple[Any, Any], str] = {}
    for _, data in messages:
        if is_delta(data["kind"]):
            key = (data.get("delegation_id"), data.get("message_id") or data.get("tool_call_id"))
            out[key] = out.get(key, "") + str(data.get("delta") or data.get("args") or "")
    return out


async def test_websocket_carries_the_same_stream() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        sse = await read_stream(
            http, f"{base}{started['events_url']}?token={started['viewer_token']}"
        )
        ws_url = base.replace("http://", "ws://") + started["websocket_url"]
        frames = []
        async with open_websocket_url(f"{ws_url}?token={started['viewer_token']}") as ws:
            while True:
                frame = json.loads(await ws.get_message())
                frames.append(frame)
                if frame["data"]["kind"] == Kind.RUN_FINISHED:
                    break
            # After the terminal the server closes the socket normally.
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason.code == 1000
            # trio-websocket 0.12.2's client never closes its TCP stream after the server's
            # close (its reader loop just ends; shown with trio-websocket alone on both sides).
            await ws._stream.aclose()
    received = [(f["id"], f["data"]) for f in frames]
    assert not_deltas(received) == not_deltas(sse)
    assert texts(received) == texts(sse)


async def test_stop_cancels_the_run_and_its_delegations() -> None:
    started_event = trio.Event()

    async def forever(task: LocalTask) -> str:
        started_event.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    agents = [
        AgentSpec(key="research", target=InProcessTarget(forever)),
        AgentSpec(key="review", target=InProcessTarget(forever)),
    ]
    async with server(agents) as (base, host), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        with trio.fail_after(10):
            await started_event.wait()
        token = started["viewer_token"]
        refused = await http.post(f"{base}/runs/{started['run_id']}/stop")
        assert refused.status_code == 404
        stopped = await http.post(
            f"{base}/runs/{started['run_id']}/stop", headers={"authorization": f"Bearer {token}"}
        )
        assert stopped.json() == {"run_id": started["run_id"], "stopped": True}
        events = await read_stream(
            http, f"{base}{started['events_url']}", headers={"authorization": f"Bearer {token}"}
        )
    kinds = [d["kind"] for _, d in events]
    assert kinds.count(Kind.CANCELLED) == 2
    assert kinds[-1] == Kind.RUN_CANCELLED
    assert host.active_runs == 0


async def test_closing_the_agui_post_stream_cancels_the_run() -> None:
    started_event = trio.Event()

    async def forever(task: LocalTask) -> str:
        started_event.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    agents = [AgentSpec(key=k, target=InProcessTarget(forever)) for k in ("research", "review")]
    async with server(agents) as (base, host), httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", f"{base}/agui", json=RUN_INPUT) as response:
            run_id = response.headers["x-run-id"]
            token = response.headers["x-viewer-token"]
            with trio.fail_after(10):
                await started_event.wait()
        # The client went away; the run ends cancelled.
        events = await read_stream(
            http, f"{base}/runs/{run_id}/events", headers={"authorization": f"Bearer {token}"}
        )
    assert [d["kind"] for _, d in events][-1] == Kind.RUN_CANCELLED
    assert host.active_runs == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("POST", "/runs", b"not json", 400, "bad_json"),
        ("POST", "/runs", b"[]", 400, "bad_input"),
        ("POST", "/runs", b'{"messages": 3}', 400, "bad_input"),
        ("POST", "/runs", b'{"threadId": 5}', 400, "bad_input"),
        ("POST", "/runs?mode=loud", b"{}", 400, "bad_mode"),
        ("POST", "/agui", b"x" * (1024 * 1024 + 1), 413, "too_large"),
        ("GET", "/runs/nope/events", None, 404, "unknown_run"),
        ("GET", "/nowhere", None, 404, "not_found"),
        ("GET", "/runs", None, 405, "method_not_allowed"),
    ],
)
async def test_bad_requests_get_json_errors(
    method: str, path: str, body: bytes | None, status: int, error: str
) -> None:
    async with server() as (base, host), httpx.AsyncClient(timeout=30) as http:
        response = await http.request(
            method, f"{base}{path}", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == status, response.text
        assert response.json()["error"] == error
        assert host.active_runs == 0


async def test_bad_cursors_are_refused_before_streaming() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        auth = {"authorization": f"Bearer {started['viewer_token']}"}
        url = f"{base}{started['events_url']}"
        for bad in ("abc", "-1", "99999999"):
            response = await http.get(url, headers={**auth, "last-event-id": bad})
            assert response.status_code == 400
            assert response.json()["error"] == "bad_cursor"


async def test_a_viewer_needs_the_runs_token() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        first = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        second = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{first['events_url']}"
        for headers in ({}, {"authorization": f"Bearer {second['viewer_token']}"}):
            response = await http.get(url, headers=headers)
            assert response.status_code == 404
            assert response.json()["error"] == "unknown_run"


async def test_health_readiness_and_cors() -> None:
    config = '[server]\ncors_origins = ["http://app.test"]\n'
    async with server(config_text=config) as (base, _), httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
        ready = await http.get(f"{base}/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        allowed = await http.get(f"{base}/healthz", headers={"origin": "http://app.test"})
        assert allowed.headers["access-control-allow-origin"] == "http://app.test"
        other = await http.get(f"{base}/healthz", headers={"origin": "http://evil.test"})
        assert "access-control-allow-origin" not in other.headers


async def test_cors_is_closed_by_default() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"{base}/healthz", headers={"origin": "http://app.test"})
        assert "access-control-allow-origin" not in response.headers
