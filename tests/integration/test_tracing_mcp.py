"""The spans of the run's MCP endpoint: each `tools/call` a server span of the run, the
delegation it starts its child, a W3C `traceparent` in the call's `_meta` continued.

The endpoint is `adapters.mcp.DelegationEndpoint` on a real listener on 127.0.0.1; the parent is
the official mcp client in both protocol generations (a session, `ClientSession`, and the
stateless 2026-07-28 `mcp.Client`); the spans are recorded by the OpenTelemetry SDK's in-memory
exporter given to the engine as its tracer provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters._asyncgens import closing_abandoned_generators
from adapters.mcp import DelegationEndpoint, connect
from engine import Engine, ErrorCode, Run, Status
from tests.helpers.agents import local_agent
from tests.helpers.mcp_endpoint import call_args

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER_PARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
TOOL_SPAN = "tools/call delegate_to_agent"
DELEGATION_SPAN = "subagent.delegation research"

Call = Callable[..., Awaitable[Any]]


@asynccontextmanager
async def session_parent(run: Run) -> AsyncIterator[Call]:
    assert run.endpoint is not None
    async with connect(run.endpoint, read_timeout=60.0) as session:
        yield session.call_tool


@asynccontextmanager
async def stateless_parent(run: Run) -> AsyncIterator[Call]:
    assert run.endpoint is not None
    async with (
        closing_abandoned_generators(),
        httpx2.AsyncClient(
            headers=dict(run.endpoint.headers), timeout=httpx2.Timeout(30.0, read=60.0)
        ) as http,
        Client(streamable_http_client(run.endpoint.url, http_client=http), mode="2026-07-28") as c,
    ):
        assert c.protocol_version == "2026-07-28"
        yield c.call_tool


PARENTS = {"session": session_parent, "stateless": stateless_parent}


@pytest.fixture(params=sorted(PARENTS))
def parent(request: pytest.FixtureRequest) -> Any:
    return PARENTS[request.param]


async def call_once(
    tracer_provider: TracerProvider | None, parent: Any, *calls: tuple[str, dict[str, Any], Any]
) -> tuple[str, list[types.CallToolResult]]:
    """Open a traced run on an endpoint, make `calls` (tool, arguments, `_meta`) through the
    parent's client, close the run; its id and the results."""
    results = []
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine(
            [local_agent("research")], endpoints=endpoint, tracer_provider=tracer_provider
        ) as eng,
        eng.open_run() as run,
        parent(run) as call,
    ):
        for tool, arguments, meta in calls:
            results.append(await call(tool, arguments, meta=meta))
    return run.run_id, results


def hex_span(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return format(context.span_id, "016x")


def hex_trace(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return format(context.trace_id, "032x")


def hex_parent(span: ReadableSpan) -> str | None:
    return format(span.parent.span_id, "016x") if span.parent is not None else None


def named(span_exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in span_exporter.get_finished_spans() if span.name == name]


async def test_a_tool_call_continues_the_callers_trace_and_parents_its_delegation(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, parent: Any
) -> None:
    meta = {"traceparent": CALLER_PARENT, "tracestate": "vendor=1", "callId": "call_7"}
    run_id, [result] = await call_once(
        tracer_provider, parent, ("delegate_to_agent", call_args("research"), meta)
    )
    assert not result.is_error, result
    [run_span] = named(span_exporter, "subagent.run")
    [tool] = named(span_exporter, TOOL_SPAN)
    [delegation] = named(span_exporter, DELEGATION_SPAN)
    [start] = [s for s in span_exporter.get_finished_spans() if s.name.endswith(" start")]

    assert tool.kind == trace.SpanKind.SERVER
    assert hex_trace(tool) == CALLER_TRACE
    assert hex_parent(tool) == CALLER_SPAN
    assert tool.parent is not None and tool.parent.is_remote
    assert [format(link.context.span_id, "016x") for link in tool.links] == [hex_span(run_span)]
    assert tool.parent.trace_state.get("vendor") == "1"
    attributes = dict(tool.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "delegate_to_agent"
    assert attributes["gen_ai.tool.call.id"] == "call_7"
    assert attributes["subagent.run_id"] == run_id
    assert isinstance(attributes["jsonrpc.request.id"], str) and attributes["jsonrpc.request.id"]
    assert tool.status.status_code == trace.StatusCode.UNSET

    assert hex_trace(delegation) == CALLER_TRACE
    assert hex_parent(delegation) == hex_span(tool)
    assert hex_parent(start) == hex_span(delegation)
    assert dict(delegation.attributes or {})["subagent.parent_tool_call_id"] == "call_7"
    # The run itself was opened by nobody remote: its own trace, the tool call linked to it.
    assert hex_trace(run_span) != CALLER_TRACE


async def test_a_tool_call_without_a_traceparent_is_a_child_of_the_run(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, parent: Any
) -> None:
    _, [result] = await call_once(
        tracer_provider, parent, ("delegate_to_agent", call_args("research"), None)
    )
    assert not result.is_error, result
    [run_span] = named(span_exporter, "subagent.run")
    [tool] = named(span_exporter, TOOL_SPAN)
    [delegation] = named(span_exporter, DELEGATION_SPAN)
    assert hex_trace(tool) == hex_trace(run_span) == hex_trace(delegation)
    assert hex_parent(tool) == hex_span(run_span)
    assert tool.links == ()
    assert hex_parent(delegation) == hex_span(tool)
    assert "gen_ai.tool.call.id" not in dict(tool.attributes or {})


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        f"00-{'0' * 32}-{CALLER_SPAN}-01",  # an all-zero trace id is invalid
        f"00-{CALLER_TRACE}-{CALLER_SPAN}-01" + "x" * 300,  # too long to be read
        12345,
        {"trace": CALLER_TRACE},
        ["00", CALLER_TRACE],
    ],
    ids=["garbage", "zero-trace", "oversized", "number", "object", "list"],
)
async def test_a_traceparent_that_is_not_one_is_ignored_and_the_call_succeeds(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, parent: Any, value: Any
) -> None:
    meta = {"traceparent": value, "tracestate": {"not": "text"}}
    _, [result] = await call_once(
        tracer_provider, parent, ("delegate_to_agent", call_args("research"), meta)
    )
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["status"] == Status.COMPLETED
    [run_span] = named(span_exporter, "subagent.run")
    [tool] = named(span_exporter, TOOL_SPAN)
    assert hex_parent(tool) == hex_span(run_span)
    assert hex_trace(tool) == hex_trace(run_span)


async def test_a_refused_call_is_an_error_span_with_the_engines_code(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, parent: Any
) -> None:
    _, [unknown, invented] = await call_once(
        tracer_provider,
        parent,
        ("delegate_to_agent", {"agent": "research"}, None),  # no objective
        ("make_coffee", {}, None),
    )
    assert unknown.is_error and invented.is_error
    [refused] = named(span_exporter, TOOL_SPAN)
    assert refused.status.status_code == trace.StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == ErrorCode.INVALID_INPUT
    # A name the model invented is not a span name of its own.
    [other] = named(span_exporter, "tools/call other")
    assert dict(other.attributes or {})["gen_ai.tool.name"] == "other"
    assert named(span_exporter, DELEGATION_SPAN) == []


async def test_without_a_provider_a_call_naming_a_traceparent_succeeds(parent: Any) -> None:
    _, [result] = await call_once(
        None, parent, ("delegate_to_agent", call_args("research"), {"traceparent": CALLER_PARENT})
    )
    assert not result.is_error, result
