"""The bundled server's traces, on a real listener: a run started over HTTP continues the
request's W3C trace context, its delegations and remote calls are beneath it, the trace goes on
to a remote AG-UI agent, and each viewer's connection (a `POST /agui` stream, an SSE stream, a
WebSocket) is a span of its own under the run's; a `traceparent` that does not parse leaves the
run a trace of its own; an untraced server sends no trace context. Then `serve` itself: with
`[telemetry]` on, the spans of a run reach an OTLP/HTTP receiver with the collector's headers,
flushed when the process stops; a collector headers variable that is unset or unreadable is
refused at start, naming the variable and never its value.

Servers: `open_host`, `create_app`, `serve_app` on 127.0.0.1 as `serve` wires them, the scripted
parent delegating over the real MCP endpoint; the remote AG-UI agent is a Quart-Trio app of this
module on the same hardened listener; viewers are httpx and trio-websocket clients; spans are
recorded by the OpenTelemetry SDK (a span processor that keeps what ends).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from quart import Response, request
from quart_trio import QuartTrio
from trio_websocket import ConnectionClosed, open_websocket_url

import web.server
from adapters._asyncgens import closing_abandoned_generators
from adapters.agui import AguiAgentConfig, AguiTarget, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from engine import AgentSpec, DelegationPolicy, Engine, InputRequiredMode
from tests.helpers.otlp import otlp_receiver
from tests.helpers.processes import serve_process
from web.config import parse_config
from web.server import ViewerTrace, create_app, default_encoder_factory, open_host, serve_app

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT_SPAN}-01"
SECRET = "s3cr3t-collector-key-9Qw2"

RUN_INPUT = {
    "threadId": "thread-traced",
    "messages": [{"id": "u1", "role": "user", "content": "Summarise Trio."}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


class EndedSpans(SpanProcessor):
    """Every span that ended, in order, and a wait (bounded by the caller's `fail_after`) for
    the ones a test expects: the server ends a viewer's span once the connection is closed on
    its side, which may be a moment after the client read the last byte."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []
        self._changed = trio.Event()

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        return

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)
        self._changed.set()
        self._changed = trio.Event()

    def shutdown(self) -> None:
        return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.ended if span.name == name]

    async def wait_for(self, name: str, count: int = 1) -> list[ReadableSpan]:
        with trio.fail_after(30):
            while len(self.named(name)) < count:
                await self._changed.wait()
        return self.named(name)


def recording() -> tuple[TracerProvider, EndedSpans]:
    spans = EndedSpans()
    provider = TracerProvider()
    provider.add_span_processor(spans)
    return provider, spans


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[int]:
    """The ids of the span's parents, nearest first, as far as `spans` holds them."""
    by_id = {span_id(s): s for s in spans}
    found: list[int] = []
    current = parent_id(span)
    while current is not None:
        found.append(current)
        above = by_id.get(current)
        current = parent_id(above) if above is not None else None
    return found


def attribute_values(spans: list[ReadableSpan]) -> list[str]:
    return [str(value) for span in spans for value in (span.attributes or {}).values()]


# -- the servers ---------------------------------------------------------------------------------


@asynccontextmanager
async def remote_agui(seen: list[dict[str, str]]) -> AsyncIterator[str]:
    """A remote AG-UI agent that records each request's headers and answers one short run;
    yields its run URL."""
    app = QuartTrio("remote_agui")

    @app.post("/run")
    async def run() -> Response:
        seen.append({name.lower(): value for name, value in request.headers.items()})
        document = await request.get_json()
        ids = {"threadId": document["threadId"], "runId": document["runId"]}
        events = [
            {"type": "RUN_STARTED", **ids},
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Trio nurseries."},
            {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
            {"type": "RUN_FINISHED", **ids},
        ]
        body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
        return Response(body, content_type="text/event-stream")

    async with serve_app(app) as base:
        yield f"{base}/run"


async def review(task: LocalTask) -> str:
    await task.say("Looks right.")
    return "The plan holds."


def agents(remote_url: str) -> list[AgentSpec]:
    """`research` is the remote AG-UI agent, `review` runs in process (the scripted parent
    delegates to both at once)."""
    return [
        AgentSpec(
            key="research", protocol="agui", target=AguiTarget(AguiAgentConfig(url=remote_url))
        ),
        AgentSpec(key="review", target=InProcessTarget(review)),
    ]


@asynccontextmanager
async def server(
    provider: TracerProvider | None, specs: list[AgentSpec]
) -> AsyncIterator[tuple[str, Any]]:
    config = parse_config("", "test.toml")
    async with open_host(config, specs, ScriptedParent, tracer_provider=provider) as (host, _):
        app = create_app(host, config, default_encoder_factory())
        async with serve_app(app) as base_url:
            yield base_url, host


async def post_agui(
    http: httpx.AsyncClient, base: str, headers: Any = None
) -> tuple[httpx.Response, list[tuple[int | None, dict[str, Any]]]]:
    async with http.stream("POST", f"{base}/agui", json=RUN_INPUT, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    frames = parse_sse(body)
    assert frames[-1][1]["type"] == "RUN_FINISHED", frames[-1]
    return response, frames


# -- traces of runs started over HTTP ----------------------------------------------------------


async def test_post_agui_continues_the_requests_trace_to_the_remote_and_traces_its_viewer() -> None:
    provider, spans = recording()
    seen: list[dict[str, str]] = []
    async with (
        remote_agui(seen) as remote_url,
        server(provider, agents(remote_url)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
        response, frames = await post_agui(http, base, headers)
        run_id = response.headers["x-run-id"]
        viewer_token = response.headers["x-viewer-token"]
        (viewer,) = await spans.wait_for("subagent.viewer agui")
        (run_span,) = await spans.wait_for("subagent.run")
    ended = spans.ended

    # The run's span is the request's child: the caller's trace, its parent span, its state.
    context = run_span.get_span_context()
    assert context is not None
    assert trace_id(run_span) == int(TRACE, 16)
    assert parent_id(run_span) == int(PARENT_SPAN, 16)
    assert run_span.parent is not None and run_span.parent.is_remote
    assert context.trace_state.get("vendor") == "abc"
    assert run_span.kind == trace.SpanKind.SERVER
    assert (run_span.attributes or {})["subagent.run_id"] == run_id
    assert (run_span.attributes or {})["subagent.outcome"] == "finished"

    # Both delegations are beneath it, in the same trace.
    delegations = {
        name: spans.named(f"subagent.delegation {name}")[0] for name in ("research", "review")
    }
    for delegation in delegations.values():
        assert trace_id(delegation) == int(TRACE, 16)
        assert span_id(run_span) in ancestors(delegation, ended)
        assert (delegation.attributes or {})["subagent.status"] == "completed"

    # The remote got the trace: its request's parent is our client span for that call.
    calls = [
        span
        for span in ended
        if span.kind == trace.SpanKind.CLIENT
        and parent_id(span) == span_id(delegations["research"])
    ]
    assert [span.name for span in calls] == ["agui start"], [span.name for span in ended]
    assert len(seen) == 1
    version, trace_hex, span_hex, _flags = seen[0]["traceparent"].split("-")
    assert (version, int(trace_hex, 16)) == ("00", int(TRACE, 16))
    assert int(span_hex, 16) == span_id(calls[0])

    # The viewer's connection: a child of the run's span, from connect to the run's end.
    assert parent_id(viewer) == span_id(run_span)
    assert trace_id(viewer) == int(TRACE, 16)
    assert viewer.kind == trace.SpanKind.SERVER
    assert viewer.status.status_code == trace.StatusCode.UNSET
    assert dict(viewer.attributes or {}) == {
        "subagent.run_id": run_id,
        "subagent.viewer.transport": "agui",
        "subagent.viewer.mode": "attributed",
        "subagent.viewer.format": "agui",
        "subagent.viewer.resumed": False,
        "subagent.viewer.events": len(frames),
        "subagent.viewer.end": "run_ended",
    }
    assert not any(viewer_token in value for value in attribute_values(ended))


async def test_post_runs_continues_the_trace_and_each_viewer_connection_is_a_span() -> None:
    provider, spans = recording()
    seen: list[dict[str, str]] = []
    async with (
        remote_agui(seen) as remote_url,
        server(provider, agents(remote_url)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        started = await http.post(
            f"{base}/runs", json=RUN_INPUT, headers={"traceparent": TRACEPARENT}
        )
        assert started.status_code == 201, started.text
        document = started.json()
        token = document["viewer_token"]
        events = f"{base}{document['events_url']}"
        # A whole stream with the token as a header, then one resumed from Last-Event-ID with
        # the token in the query (as an EventSource sends it), in another mode.
        whole = await http.get(events, headers={"authorization": f"Bearer {token}"})
        assert whole.status_code == 200
        whole_frames = parse_sse(whole.content)
        cursor = next(c for c, _ in whole_frames[len(whole_frames) // 2 :] if c is not None)
        resumed = await http.get(
            f"{events}?token={token}&mode=inline", headers={"last-event-id": str(cursor)}
        )
        assert resumed.status_code == 200
        resumed_frames = parse_sse(resumed.content)
        assert resumed_frames and all(c is None or c > cursor for c, _ in resumed_frames)
        # A WebSocket viewer of the engine's own envelope.
        ws_url = f"{base.replace('http', 'ws', 1)}/runs/{document['run_id']}/ws"
        received: list[str] = []
        async with open_websocket_url(f"{ws_url}?token={token}&format=engine") as socket:
            try:
                while True:
                    received.append(await socket.get_message())
            except ConnectionClosed:
                pass
            # trio-websocket's client leaves its TCP stream open after the server's close.
            await socket._stream.aclose()
        (run_span,) = await spans.wait_for("subagent.run")
        sse = await spans.wait_for("subagent.viewer sse", 2)
        (websocket,) = await spans.wait_for("subagent.viewer websocket")

    assert trace_id(run_span) == int(TRACE, 16)
    assert parent_id(run_span) == int(PARENT_SPAN, 16)
    assert seen and seen[0]["traceparent"].split("-")[1] == TRACE
    for viewer in (*sse, websocket):
        assert parent_id(viewer) == span_id(run_span)
        assert viewer.kind == trace.SpanKind.SERVER
    first, second = sorted(sse, key=lambda span: span.start_time or 0)
    common = {"subagent.run_id": document["run_id"], "subagent.viewer.end": "run_ended"}
    assert dict(first.attributes or {}) == common | {
        "subagent.viewer.transport": "sse",
        "subagent.viewer.mode": "attributed",
        "subagent.viewer.format": "agui",
        "subagent.viewer.resumed": False,
        "subagent.viewer.events": len(whole_frames),
    }
    assert dict(second.attributes or {}) == common | {
        "subagent.viewer.transport": "sse",
        "subagent.viewer.mode": "inline",
        "subagent.viewer.format": "agui",
        "subagent.viewer.resumed": True,
        "subagent.viewer.after_cursor": cursor,
        "subagent.viewer.events": len(resumed_frames),
    }
    assert dict(websocket.attributes or {}) == common | {
        "subagent.viewer.transport": "websocket",
        "subagent.viewer.mode": "attributed",
        "subagent.viewer.format": "engine",
        "subagent.viewer.resumed": False,
        "subagent.viewer.events": len(received),
    }
    assert not any(token in value for value in attribute_values(spans.ended))


async def test_a_viewer_that_leaves_ends_its_span_as_disconnected_not_failed() -> None:
    provider, spans = recording()
    release = trio.Event()

    async def slow(task: LocalTask) -> str:
        await task.say("Working.")
        await release.wait()
        return "done"

    specs = [AgentSpec(key=key, target=InProcessTarget(slow)) for key in ("research", "review")]
    async with server(provider, specs) as (base, host), httpx.AsyncClient(timeout=30) as http:
        document = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
        url = f"{base}{document['events_url']}?token={document['viewer_token']}"
        # (httpx's byte streams left suspended are closed here, not by the garbage collector)
        async with closing_abandoned_generators(), http.stream("GET", url) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                if b"SUBAGENT_STARTED" in chunk:
                    break  # leave while the run goes on
        (viewer,) = await spans.wait_for("subagent.viewer sse")
        hosted = await host.find(document["run_id"], document["viewer_token"])
        assert not hosted.over  # the viewer left; the run did not end
        release.set()
    attributes = dict(viewer.attributes or {})
    assert attributes["subagent.viewer.end"] == "disconnected"
    assert attributes["subagent.viewer.events"] >= 1
    assert viewer.status.status_code == trace.StatusCode.UNSET


async def test_an_interrupted_agui_stream_and_its_resume_are_two_viewer_spans_of_one_run() -> None:
    provider, spans = recording()
    schema = {"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}

    async def asker(task: LocalTask) -> str:
        reply = await task.ask("Which year?", schema=schema)
        return f"Checked {(reply.data or {}).get('year')}."

    specs = [
        AgentSpec(
            key="research",
            target=InProcessTarget(asker),
            policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
        ),
        AgentSpec(key="review", target=InProcessTarget(review)),
    ]
    async with server(provider, specs) as (base, _), httpx.AsyncClient(timeout=30) as http:
        first = await http.post(
            f"{base}/agui", json=RUN_INPUT, headers={"traceparent": TRACEPARENT}
        )
        assert first.status_code == 200, first.content
        interrupted = parse_sse(first.content)
        outcome = interrupted[-1][1]["outcome"]
        assert outcome["type"] == "interrupt"
        (interrupt,) = outcome["interrupts"]
        resume = {
            **RUN_INPUT,
            "resume": [
                {"interruptId": interrupt["id"], "status": "resolved", "payload": {"year": 1999}}
            ],
        }
        second = await http.post(f"{base}/agui", json=resume)  # no traceparent: the run's trace
        assert second.status_code == 200, second.content
        resumed = parse_sse(second.content)
        assert resumed[-1][1]["type"] == "RUN_FINISHED"
        (run_span,) = await spans.wait_for("subagent.run")
        viewers = await spans.wait_for("subagent.viewer agui", 2)
    suspension = max(cursor for cursor, _ in interrupted if cursor is not None)
    before, after = sorted(viewers, key=lambda span: span.start_time or 0)
    for viewer in (before, after):
        assert parent_id(viewer) == span_id(run_span)
        assert trace_id(viewer) == int(TRACE, 16)
    first_attributes = dict(before.attributes or {})
    assert first_attributes["subagent.viewer.end"] == "interrupt"
    assert first_attributes["subagent.viewer.resumed"] is False
    assert first_attributes["subagent.viewer.events"] == len(interrupted)
    second_attributes = dict(after.attributes or {})
    assert second_attributes["subagent.viewer.end"] == "run_ended"
    assert second_attributes["subagent.viewer.resumed"] is True
    assert second_attributes["subagent.viewer.after_cursor"] == suspension
    assert second_attributes["subagent.viewer.events"] == len(resumed)


async def test_a_body_closed_at_a_write_ends_its_viewer_span_as_disconnected_not_failed() -> None:
    """The other way a viewer leaves: the server closes the response body while it waits to
    write (`aclose` at the `yield`), not while it waits for the run's next events."""
    provider, spans = recording()
    closed = trio.Event()

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            yield b"one"
            yield b"two"
        finally:
            closed.set()

    async with Engine([], tracer_provider=provider) as engine, engine.open_run() as run:
        viewer = ViewerTrace(run, "sse", {"subagent.viewer.transport": "sse"})
        stream = viewer.traced(body())
        assert await stream.__anext__() == b"one"
        viewer.events = 1
        await stream.aclose()
        assert closed.is_set()  # the body beneath was closed with it
    (span,) = spans.named("subagent.viewer sse")
    assert span.status.status_code == trace.StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "subagent.run_id": run.run_id,
        "subagent.viewer.transport": "sse",
        "subagent.viewer.events": 1,
        "subagent.viewer.end": "disconnected",
    }


@pytest.mark.parametrize(
    "headers",
    [
        [("traceparent", "00-not-a-trace-01")],
        [("traceparent", f"00-{'0' * 32}-{PARENT_SPAN}-01")],  # the all-zero trace id
        [("traceparent", f"ff-{TRACE}-{PARENT_SPAN}-01")],  # version ff is invalid
        [("traceparent", "x" * 10_000)],
        [("traceparent", TRACEPARENT), ("traceparent", f"00-{'1' * 32}-{PARENT_SPAN}-01")],
        [("tracestate", "vendor=abc")],  # a tracestate alone names no parent
    ],
    ids=["garbled", "zero-trace", "version-ff", "oversized", "repeated", "tracestate-only"],
)
async def test_a_traceparent_that_does_not_parse_leaves_the_run_a_trace_of_its_own(
    headers: list[tuple[str, str]],
) -> None:
    provider, spans = recording()
    seen: list[dict[str, str]] = []
    async with (
        remote_agui(seen) as remote_url,
        server(provider, agents(remote_url)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        await post_agui(http, base, headers)
        (run_span,) = await spans.wait_for("subagent.run")
    assert run_span.parent is None
    assert trace_id(run_span) not in (int(TRACE, 16), 0, int("1" * 32, 16))
    assert run_span.kind == trace.SpanKind.INTERNAL
    # The trace that went out is the run's own.
    assert int(seen[0]["traceparent"].split("-")[1], 16) == trace_id(run_span)


async def test_an_untraced_server_makes_no_viewer_span_and_sends_no_trace_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a viewer span was made by a server that does not trace")

    monkeypatch.setattr(web.server, "ViewerTrace", refuse)
    seen: list[dict[str, str]] = []
    async with (
        remote_agui(seen) as remote_url,
        server(None, agents(remote_url)) as (base, host),
        httpx.AsyncClient(timeout=30) as http,
    ):
        assert not host.engine.tracing.enabled
        headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
        _, frames = await post_agui(http, base, headers)
        run_id = next(event["runId"] for _, event in frames if event["type"] == "RUN_STARTED")
        assert run_id
    assert len(seen) == 1
    assert "traceparent" not in seen[0] and "tracestate" not in seen[0]


# -- serve -------------------------------------------------------------------------------------


def test_serve_exports_a_runs_spans_to_the_collector_and_flushes_them_when_it_stops(
    tmp_path: Path,
) -> None:
    with otlp_receiver() as receiver:
        config = tmp_path / "host.toml"
        config.write_text(
            '[server]\nport = 0\n\n[store]\nkind = "memory"\n\n'
            f'[telemetry]\nenabled = true\nendpoint = "{receiver.endpoint}"\n'
            'headers_env = "SE_OTLP_HEADERS"\nservice_name = "agents-under-test"\n'
        )
        env = {**os.environ, "SE_OTLP_HEADERS": f"api-key={SECRET}"}
        stderr_path = tmp_path / "stderr.txt"
        serving = serve_process("--config", str(config), env=env, stderr=stderr_path)
        with serving as (proc, url, line):
            assert proc.stdout is not None
            banner = []
            while not any(entry.startswith("  traces:") for entry in banner):
                banner.append(proc.stdout.readline())
                assert banner[-1], banner
            assert f"  traces: OTLP/HTTP to {receiver.endpoint} (sample ratio 1)\n" in banner
            with httpx.Client(timeout=30) as http:
                headers = {"traceparent": TRACEPARENT}
                answer = http.post(f"{url}/agui", json=RUN_INPUT, headers=headers)
            assert answer.status_code == 200
            assert b"RUN_FINISHED" in answer.content
            run_id = answer.headers["x-run-id"]
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
            rest = proc.stdout.read()
        # The process is gone: what it exported arrived before it exited (the batch processor
        # waits 5 s between exports; the last batch was sent when the provider shut down).
        spans = receiver.spans
    names = {span.name for span in spans}
    assert {"subagent.run", "subagent.delegation research", "subagent.delegation review"} <= names
    assert "subagent.viewer agui" in names
    assert {span.service for span in spans} == {"agents-under-test"}
    (run_span,) = [span for span in spans if span.name == "subagent.run"]
    assert run_span.attributes["subagent.run_id"] == run_id
    assert (run_span.trace_id, run_span.parent_span_id) == (TRACE, PARENT_SPAN)
    assert {span.trace_id for span in spans if span.name.startswith("subagent.")} == {TRACE}
    assert receiver.request_headers and all(
        headers.get("api-key") == SECRET for headers in receiver.request_headers
    )
    logged = stderr_path.read_text() + line + "".join(banner) + rest
    assert SECRET not in logged
