"""The trace context a traced engine sends its remotes: every request of a remote call carries
the W3C `traceparent` of that call's client span (https://www.w3.org/TR/trace-context/), so
the remote's server span continues the delegating run's trace beneath the call that made it.

Remote side, real servers in their own processes: the a2a-sdk server of
`tools/peers/a2a_faulty.py` (SendMessage, CancelTask, GetTask, SubscribeToTask, each recording
the trace headers it received) and the AG-UI agent of `tools/peers/agui_app.py` (its run and
stop requests). The engine's spans are recorded by the SDK's in-memory span_exporter. Without a
tracer provider no `traceparent` leaves the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters.agui import AguiAgentConfig, AguiTarget
from engine import (
    AgentSpec,
    DelegationRequest,
    DelegationResult,
    Engine,
    RemoteCancel,
    Status,
)
from tests.helpers.agents import a2a_agent
from tests.helpers.peers import AguiApp, agui_app
from tests.helpers.runs import OBJECTIVE


@pytest.fixture(scope="module")
def agui_peer() -> Iterator[AguiApp]:
    with agui_app() as peer:
        yield peer


def agui_agent(peer: AguiApp, scenario: str) -> AgentSpec:
    url = peer.url(scenario)
    config = AguiAgentConfig(url=url, stop_url=f"{url}/stop", tenant="acme")
    return AgentSpec(key="remote", protocol="agui", target=AguiTarget(config))


async def traced_delegation(
    agent: AgentSpec, tracer_provider: TracerProvider | None, **request: Any
) -> DelegationResult:
    """One delegation to `agent` in a run of an engine traced by `tracer_provider` (or not)."""
    try:
        async with Engine([agent], tracer_provider=tracer_provider) as eng, eng.open_run() as run:
            return await run.delegate(
                DelegationRequest(**{"agent": agent.key, "objective": OBJECTIVE, **request})
            )
    finally:
        await agent.target.aclose()


@dataclass(frozen=True)
class Parent:
    """A `traceparent` as W3C Trace Context writes it, read."""

    trace_id: str
    parent_id: str
    flags: str

    @classmethod
    def read(cls, value: Any) -> Parent:
        assert isinstance(value, str), f"no traceparent reached the remote: {value!r}"
        version, trace_id, parent_id, flags = value.split("-")
        assert version == "00" and len(trace_id) == 32 and len(parent_id) == 16, value
        return cls(trace_id=trace_id, parent_id=parent_id, flags=flags)


def ids(span: ReadableSpan) -> tuple[str, str]:
    """A span's (trace id, span id) in hex."""
    context = span.get_span_context()
    assert context is not None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def spans_named(span_exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in span_exporter.get_finished_spans() if span.name == name]


def run_trace(span_exporter: InMemorySpanExporter) -> str:
    [run_span] = spans_named(span_exporter, "subagent.run")
    return ids(run_span)[0]


def sent_under(value: Any, span_exporter: InMemorySpanExporter, call: str) -> ReadableSpan:
    """The client span named `call` whose traceparent `value` is, in the run's trace."""
    parent = Parent.read(value)
    assert parent.trace_id == run_trace(span_exporter)
    assert int(parent.flags, 16) & 1  # sampled: the remote records its side too
    by_id = {ids(span)[1]: span for span in spans_named(span_exporter, call)}
    assert parent.parent_id in by_id, (parent, sorted(by_id))
    return by_id[parent.parent_id]


# -- A2A ------------------------------------------------------------------------------------


async def test_an_a2a_start_carries_the_traceparent_of_its_client_span(
    a2a_server: Any, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    result = await traced_delegation(a2a_agent(a2a_server.card_url("stream")), tracer_provider)
    assert result.status == Status.COMPLETED, result
    [message] = a2a_server.entries("stream", "messages", result.remote_task_id)
    start = sent_under(message["traceparent"], span_exporter, "a2a start")
    [delegation] = spans_named(span_exporter, "subagent.delegation remote")
    assert start.parent is not None and start.parent.span_id == delegation.context.span_id
    assert message["tracestate"] is None  # the run made a trace of its own: no state to pass


async def test_an_a2a_cancel_carries_the_traceparent_of_the_cancel_call(
    a2a_server: Any, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    agent = a2a_agent(a2a_server.card_url("hang"))
    result = await traced_delegation(agent, tracer_provider, timeout_seconds=1)
    assert result.remote_cancel == RemoteCancel.CONFIRMED, result
    [cancel] = a2a_server.entries("hang", "cancels", result.remote_task_id)
    sent_under(cancel["traceparent"], span_exporter, "a2a cancel")
    [message] = a2a_server.entries("hang", "messages", result.remote_task_id)
    sent_under(message["traceparent"], span_exporter, "a2a start")


async def test_each_a2a_poll_carries_the_traceparent_of_its_poll_call(
    a2a_server: Any, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    agent = a2a_agent(a2a_server.card_url("nostream"), poll_interval=0.05)
    result = await traced_delegation(agent, tracer_provider)
    assert result.status == Status.COMPLETED, result
    polls = a2a_server.entries("nostream", "get_tasks", result.remote_task_id)
    assert polls
    under = {ids(sent_under(p["traceparent"], span_exporter, "a2a poll"))[1] for p in polls}
    # Each GetTask is its own call: as many client spans as requests, none shared.
    assert len(under) == len(polls)


async def test_a_resubscribe_carries_the_traceparent_of_the_resubscribe_call(
    a2a_server: Any, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    result = await traced_delegation(a2a_agent(a2a_server.card_url("drop")), tracer_provider)
    assert result.status == Status.COMPLETED, result
    subscribes = a2a_server.entries("drop", "subscribes", result.remote_task_id)
    assert subscribes
    for subscribe in subscribes:
        sent_under(subscribe["traceparent"], span_exporter, "a2a resubscribe")


async def test_without_a_provider_no_traceparent_reaches_an_a2a_remote(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("hang"))
    result = await traced_delegation(agent, None, timeout_seconds=1)
    assert result.remote_cancel == RemoteCancel.CONFIRMED, result
    [message] = a2a_server.entries("hang", "messages", result.remote_task_id)
    [cancel] = a2a_server.entries("hang", "cancels", result.remote_task_id)
    assert message["traceparent"] is None and message["tracestate"] is None
    assert cancel["traceparent"] is None


# -- AG-UI ----------------------------------------------------------------------------------


def agui_runs(peer: AguiApp, result: DelegationResult) -> list[dict[str, Any]]:
    return [r for r in peer.log("runs") if r["input"]["runId"] == result.remote_task_id]


async def test_an_agui_run_and_its_stop_carry_the_traceparent_of_their_calls(
    agui_peer: AguiApp, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    result = await traced_delegation(agui_agent(agui_peer, "stream"), tracer_provider)
    assert result.status == Status.COMPLETED, result
    [run] = agui_runs(agui_peer, result)
    sent_under(run["traceparent"], span_exporter, "agui start")

    span_exporter.clear()
    stopped = await traced_delegation(
        agui_agent(agui_peer, "hang"), tracer_provider, timeout_seconds=1
    )
    assert stopped.remote_cancel == RemoteCancel.CONFIRMED, stopped
    [run] = agui_runs(agui_peer, stopped)
    sent_under(run["traceparent"], span_exporter, "agui start")
    [stop] = [s for s in agui_peer.log("stops") if s["body"]["runId"] == stopped.remote_task_id]
    sent_under(stop["traceparent"], span_exporter, "agui cancel")


async def test_without_a_provider_no_traceparent_reaches_an_agui_remote(
    agui_peer: AguiApp,
) -> None:
    result = await traced_delegation(agui_agent(agui_peer, "stream"), None)
    assert result.status == Status.COMPLETED, result
    [run] = agui_runs(agui_peer, result)
    assert run["traceparent"] is None
