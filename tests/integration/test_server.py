"""The bundled server on a real Hypercorn listener: runs, streams, reconnects, stops, refusals.

The parent is the scripted parent delegating over the real MCP endpoint to in-process agents;
viewers are httpx (SSE) and trio-websocket clients on 127.0.0.1. Streams are the server's default
wire format, AG-UI (`adapters.agui`), and every captured stream goes through the AG-UI checker;
`?format=engine` (the engine's own envelope) has one test of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from adapters._asyncgens import closing_abandoned_generators
from adapters.agui import MODES, check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from demo import demo_agents
from engine import AgentSpec, DelegationPolicy, InputRequiredMode, Kind
from tests.helpers.wire import messages_from_sse
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

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
        app = create_app(host, config, default_encoder_factory(), **app_options)
        async with serve_app(app) as base_url:
            yield base_url, host


Frames = list[tuple[int | None, dict[str, Any]]]


async def read_stream(
    http: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None, whole: bool = True
) -> Frames:
    """A viewer's stream, read to its end; a `whole` stream (from the first event) must pass
    the AG-UI checker."""
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    frames = parse_sse(body)
    if whole:
        assert_valid(frames)
    return frames


def assert_valid(frames: Frames) -> None:
    violations = check_frames(frames)
    assert not violations, "\n".join(str(v) for v in violations)
    ids = [cursor for cursor, _ in frames if cursor is not None]
    assert ids == sorted(set(ids)), ids  # strictly increasing
    assert frames[-1][0] is not None  # the terminal carries its cursor


def types(frames: Frames) -> list[str]:
    return [event["type"] for _, event in frames]


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
    messages = parse_sse(body)
    assert_valid(messages)
    kinds = types(messages)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("RUN_FINISHED") == 1
    assert kinds.count("SUBAGENT_STARTED") == 2 and kinds.count("SUBAGENT_FINISHED") == 2
    assert kinds.index("TOOL_CALL_START") < kinds.index("SUBAGENT_STARTED")
    events = [event for _, event in messages]
    parent_calls = {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"} - {
        e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START" and "subagentRunId" in e
    }
    for i, started in enumerate(events):
        if started["type"] != "SUBAGENT_STARTED":
            continue
        call = started["parentToolCallId"]
        assert call in parent_calls
        # Agents as tools: the call ends, then the subagent runs and ends, then the result.
        end = next(j for j, e in enumerate(events) if e == {"type": "TOOL_CALL_END", **_id(call)})
        finished = next(
            j
            for j, e in enumerate(events)
            if e["type"] == "SUBAGENT_FINISHED"
            and e["subagentRunId"] == started["subagentRunId"]
            and e["outcome"] == {"type": "success"}
        )
        result = next(
            j
            for j, e in enumerate(events)
            if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call
        )
        assert end < i < finished < result
        assert json.loads(events[result]["content"])["status"] == "completed"
    parent_text = "".join(t for (sub, _), t in texts(messages).items() if sub is None)
    assert "You asked: How does Trio stream events?" in parent_text
    assert "- research: completed: Trio nurseries" in parent_text


def _id(call: str) -> dict[str, str]:
    return {"toolCallId": call}


async def test_start_then_watch_and_reconnect_without_loss_or_duplicates() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{started['events_url']}"
        auth = {"authorization": f"Bearer {started['viewer_token']}"}
        whole = await read_stream(http, url, headers=auth)
        # A viewer that saw the first third reconnects with Last-Event-ID.
        at = next(i for i, (c, _) in enumerate(whole) if i >= len(whole) // 3 and c is not None)
        cut = whole[at][0]
        assert cut is not None
        headers = {**auth, "last-event-id": str(cut)}
        rest = await read_stream(http, url, headers=headers, whole=False)
        again = await read_stream(
            http, f"{url}?after={cut}&token={started['viewer_token']}", whole=False
        )
    tail = whole[at + 1 :]
    assert rest == again
    cursors = [c for c, _ in rest if c is not None]
    assert cursors == sorted(set(cursors)) and cursors[0] > cut
    # What the viewer saw before the cut plus what it got after is a valid stream on its own.
    assert_valid(whole[: at + 1] + rest)
    # A catching-up reader may get adjacent deltas merged; nothing else differs, no text is
    # lost and nothing is repeated.
    assert not_deltas(rest) == not_deltas(tail)
    assert texts(rest) == texts(tail)
    assert types(rest).count("RUN_FINISHED") == 1


DELTAS = {"TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS"}


def not_deltas(messages: Frames) -> list[tuple[Any, ...]]:
    """Every event but text and argument deltas, by type and the ids it names."""
    keys = ("messageId", "toolCallId", "subagentRunId", "name")
    return [
        (c, d["type"], *(d.get(k) for k in keys)) for c, d in messages if d["type"] not in DELTAS
    ]


def texts(messages: Frames) -> dict[tuple[Any, Any], str]:
    """Reassembled text per (subagent, message or tool call)."""
    out: dict[tuple[Any, Any], str] = {}
    for _, data in messages:
        if data["type"] in DELTAS:
            key = (data.get("subagentRunId"), data.get("messageId") or data.get("toolCallId"))
            out[key] = out.get(key, "") + data["delta"]
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
                if frame["data"]["type"] == "RUN_FINISHED":
                    break
            # After the terminal the server closes the socket normally.
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason.code == 1000
            # trio-websocket 0.12.2's client never closes its TCP stream after the server's
            # close (its reader loop just ends; shown with trio-websocket alone on both sides).
            await ws._stream.aclose()
    received = [(f["id"], f["data"]) for f in frames]
    assert_valid(received)
    assert not_deltas(received) == not_deltas(sse)
    assert texts(received) == texts(sse)


async def test_websocket_messages_are_the_sse_streams_events_to_the_byte() -> None:
    """One pipeline: a finished run read over SSE and over WebSocket, whole and after a cursor,
    gives the same events, each WebSocket message exactly the `{"id", "data"}` text the SSE
    block it matches spells."""
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        token = started["viewer_token"]
        url = f"{base}{started['events_url']}?token={token}"
        whole = await read_stream(http, url)  # to the terminal: the run has ended
        cut = whole[len(whole) // 2][0] or whole[-1][0]
        ws_url = base.replace("http://", "ws://") + started["websocket_url"]
        for after in ("", f"&after={cut}"):
            sse = (await http.get(url + after)).content
            messages: list[str] = []
            code = None
            async with open_websocket_url(f"{ws_url}?token={token}{after}") as ws:
                while True:
                    try:
                        messages.append(str(await ws.get_message()))
                    except ConnectionClosed as closed:
                        code = closed.reason.code
                        break
                await ws._stream.aclose()  # see test_websocket_carries_the_same_stream
            assert code == 1000
            assert messages == messages_from_sse(sse)
            assert [(m["id"], m["data"]) for m in map(json.loads, messages)] == parse_sse(sse)


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
    errors = [d for _, d in events if d["type"] == "SUBAGENT_ERROR"]
    assert [e["code"] for e in errors] == ["cancelled", "cancelled"]
    assert {e["subagentRunId"] for e in errors} == {
        d["subagentRunId"] for _, d in events if d["type"] == "SUBAGENT_STARTED"
    }
    assert events[-1][1]["type"] == "RUN_FINISHED"
    assert events[-1][1]["outcome"] == {"type": "cancelled"}
    assert types(events).count("RUN_FINISHED") == 1
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
    assert events[-1][1]["type"] == "RUN_FINISHED"
    assert events[-1][1]["outcome"] == {"type": "cancelled"}
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
    # httpx stops sending a body the server refused before reading it, and leaves the body's
    # generator suspended: closed here rather than by the garbage collector.
    async with (
        server() as (base, host),
        closing_abandoned_generators(),
        httpx.AsyncClient(timeout=30) as http,
    ):
        response = await http.request(
            method, f"{base}{path}", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == status, response.text
        assert response.json()["error"] == error
        assert host.active_runs == 0


#: RunAgentInputs `ag_ui.core.RunAgentInput` refuses, and the field each refusal names.
REFUSED_INPUTS = [
    ({"messages": [{"role": "user", "content": "hi"}]}, "messages[0].id: Field required"),
    ({"messages": [{"id": "u", "role": "robot", "content": "hi"}]}, "messages[0]: "),
    ({"messages": [{"id": "u", "role": "user", "content": [{"type": "text"}]}]}, "messages[0]"),
    ({"messages": {"role": "user"}}, "messages: Input should be a valid list"),
    ({"tools": {}}, "tools: Input should be a valid list"),
    ({"context": [{"description": "d"}]}, "context[0].value: Field required"),
    ({"threadId": 5}, "threadId: Input should be a valid string"),
    ({"runId": ""}, "runId must be 1 to 128 printable characters"),
    ({"runId": "a\nb"}, "runId must be 1 to 128 printable characters"),
]


async def test_a_run_input_the_protocol_refuses_is_a_400_naming_the_field() -> None:
    """`POST /runs` and `POST /agui` read their body with the protocol's own model; what it
    refuses is a JSON 400 `bad_input` whose message starts with the field, never a 500."""
    async with server() as (base, host), httpx.AsyncClient(timeout=30) as http:
        for body, message in REFUSED_INPUTS:
            for route in ("/runs", "/agui"):
                response = await http.post(f"{base}{route}", json={**RUN_INPUT, **body})
                assert response.status_code == 400, (route, body, response.text)
                assert response.json()["error"] == "bad_input"
                assert response.json()["message"].startswith(message), response.json()
        # What the protocol allows but this server does not need is still taken.
        lenient = {"messages": [{"id": "u", "role": "user", "content": "hi"}], "resume": []}
        started = await http.post(f"{base}/runs", json=lenient)
        assert started.status_code == 201, started.text
        assert started.json()["thread_id"].startswith("thread-")
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


async def test_the_audit_trail_of_a_finished_run_names_every_delegation() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        run = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        auth = {"authorization": f"Bearer {run['viewer_token']}"}
        await read_stream(http, f"{base}{run['events_url']}", headers=auth)
        trail = await http.get(f"{base}/runs/{run['run_id']}/audit", headers=auth)
        assert trail.status_code == 200, trail.text
        document = trail.json()
        assert document["run_id"] == run["run_id"]
        records = document["delegations"]
        assert sorted(r["agent_key"] for r in records) == ["research", "review"]
        for record in records:
            assert record["status"] == "completed" and record["error_code"] is None
            assert record["parent_tool_call_id"] and record["thread_id"] == run["thread_id"]
            assert record["started_at"] <= record["ended_at"]
        other = await http.get(f"{base}/runs/{run['run_id']}/audit")
        assert other.status_code == 404
    # A server that keeps runs in memory keeps no audit trail to read.
    memory = '[store]\nkind = "memory"\n'
    async with server(config_text=memory) as (base, _), httpx.AsyncClient(timeout=30) as http:
        run = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        auth = {"authorization": f"Bearer {run['viewer_token']}"}
        trail = await http.get(f"{base}/runs/{run['run_id']}/audit", headers=auth)
        assert (trail.status_code, trail.json()["error"]) == (404, "no_audit_trail")


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


async def test_every_visibility_mode_streams_a_valid_agui_run() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{started['events_url']}?token={started['viewer_token']}"
        streams = {mode: await read_stream(http, f"{url}&mode={mode}") for mode in MODES}
    subagent_types = {"SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"}
    custom_names = [d["name"] for _, d in streams["custom"] if d["type"] == "CUSTOM"]
    assert custom_names.count("subagent.started") == 2
    assert custom_names.count("subagent.finished") == 2
    for mode in ("custom", "inline", "hidden"):
        events = [d for _, d in streams[mode]]
        assert not subagent_types & {d["type"] for d in events}, mode
        assert all("subagentRunId" not in d for d in events), mode
    # Inline: the subagents' text arrives as the parent's; hidden: only the parent's own.
    inline_text = "".join(texts(streams["inline"]).values())
    hidden_text = "".join(texts(streams["hidden"]).values())
    assert "Trio nurseries give structured cancellation" in inline_text
    assert "The design is sound" in inline_text
    assert "The design is sound" not in hidden_text
    assert "You asked: How does Trio stream events?" in hidden_text
    # The parent's calls and their results are in every mode.
    for mode, frames in streams.items():
        assert types(frames).count("TOOL_CALL_RESULT") >= 2, mode


async def test_format_engine_streams_the_engines_own_envelope() -> None:
    async with server() as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{started['events_url']}?token={started['viewer_token']}"
        async with http.stream("GET", f"{url}&format=engine") as response:
            body = b"".join([chunk async for chunk in response.aiter_bytes()])
        refused = await http.get(f"{url}&format=xml")
        refused_post = await http.post(f"{base}/agui?format=xml", json=RUN_INPUT)
    frames = parse_sse(body)
    kinds = [d["kind"] for _, d in frames]
    assert kinds[0] == Kind.RUN_STARTED and kinds[-1] == Kind.RUN_FINISHED
    assert kinds.count(Kind.STARTED) == 2
    assert all(cursor is not None for cursor, _ in frames)  # one message per journal entry
    assert refused.status_code == 400 and refused.json()["error"] == "bad_format"
    assert refused_post.status_code == 400 and refused_post.json()["error"] == "bad_format"


@pytest.mark.parametrize(
    ("config_text", "expected"), [("", 1000), ("[server]\nreconnect_ms = 250", 250)]
)
async def test_every_sse_stream_opens_with_the_reconnect_delay(
    config_text: str, expected: int
) -> None:
    """Browsers reconnect after the `retry:` delay (EventSource waits ~3 s without it); the
    field comes first, before any event, on the POST stream and on a viewer's stream."""
    async with (
        server(config_text=config_text) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        async with http.stream("POST", f"{base}/agui", json=RUN_INPUT) as response:
            posted = b"".join([chunk async for chunk in response.aiter_bytes()])
        run_id, token = response.headers["x-run-id"], response.headers["x-viewer-token"]
        url = f"{base}/runs/{run_id}/events?token={token}&after=1"
        async with http.stream("GET", url) as response:
            watched = b"".join([chunk async for chunk in response.aiter_bytes()])
    for body in (posted, watched):
        assert body.startswith(b"retry: %d\n\n" % expected), body[:40]
        assert body.count(b"retry:") == 1
    assert_valid(parse_sse(posted))
    assert parse_sse(watched)[0][0] == 2  # the reconnect resumes after cursor 1


async def test_a_viewer_answers_a_subagent_waiting_for_input() -> None:
    """A subagent asks (CUSTOM subagent.input_required on the stream); the viewer answers with
    POST /runs/<id>/answer; the subagent goes on with the answer and the run finishes. Bad
    answers get 4xx JSON and change nothing."""

    async def asking(task: LocalTask) -> str:
        reply = await task.ask("Which year?")
        return f"Checked {reply.text}."

    async def quick(task: LocalTask) -> str:
        return "Reviewed."

    agents = [
        AgentSpec(
            key="research",
            target=InProcessTarget(asking),
            policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
        ),
        AgentSpec(key="review", target=InProcessTarget(quick)),
    ]
    async with server(agents) as (base, _), httpx.AsyncClient(timeout=30) as http:
        started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        auth = {"authorization": f"Bearer {started['viewer_token']}"}
        answer_url = f"{base}/runs/{started['run_id']}/answer"
        frames: Frames = []
        async with (
            http.stream("GET", f"{base}{started['events_url']}", headers=auth) as response,
            aclosing(_frames(response)) as stream,
        ):
            async for frame in stream:
                frames.append(frame)
                event = frame[1]
                if event["type"] == "CUSTOM" and event["name"] == "subagent.input_required":
                    delegation = event["subagentRunId"]
                    bad = [
                        (await http.post(answer_url, json={"text": "x"}, headers=auth), 400),
                        (
                            await http.post(
                                answer_url,
                                json={"delegationId": delegation, "text": "  "},
                                headers=auth,
                            ),
                            400,
                        ),
                        (
                            await http.post(
                                answer_url,
                                content=b"{",
                                headers={**auth, "content-type": "application/json"},
                            ),
                            400,
                        ),
                        (await http.post(answer_url, content=b"{}", headers=auth), 415),
                        (
                            await http.post(
                                answer_url,
                                json={"delegationId": delegation, "text": 1},
                                headers=auth,
                            ),
                            400,
                        ),
                        (
                            await http.post(
                                answer_url, json={"delegationId": "nope", "text": "x"}, headers=auth
                            ),
                            404,
                        ),
                        (
                            await http.post(
                                answer_url, json={"delegationId": delegation, "text": "1999"}
                            ),
                            404,
                        ),
                    ]
                    for response_, status in bad:
                        assert response_.status_code == status, response_.text
                        assert response_.json()["error"]
                    ok = await http.post(
                        answer_url, json={"delegationId": delegation, "text": "1999"}, headers=auth
                    )
                    assert ok.status_code == 202, ok.text
                    assert ok.json()["answered"] is True
                    assert ok.json()["question_id"] == event["value"]["interruptId"]
                    again = await http.post(
                        answer_url,
                        json={"delegationId": delegation, "text": "2000", "answeredBy": "bo"},
                        headers=auth,
                    )
                    assert again.status_code == 409, again.text
                    assert again.json()["error"] == "question_closed"
                    assert again.json()["details"]["surface"] == "http"
        assert_valid(frames)
        finished = [e for _, e in frames if e["type"] == "SUBAGENT_FINISHED"]
        assert {e["result"] for e in finished} == {"Checked 1999.", "Reviewed."}
        late = await http.post(answer_url, json={"delegationId": "d", "text": "late"}, headers=auth)
        assert late.status_code == 409 and late.json()["error"] == "run_ended"


async def _frames(response: httpx.Response) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
    """SSE frames as they arrive (a block at a time)."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            for frame in parse_sse(block + b"\n\n"):
                yield frame
