"""The engine's spans (`engine._tracing`), recorded by the OpenTelemetry SDK's in-memory exporter:
one span per run, per delegation and per remote call, in the tree the actors form, with the
protocol ids as attributes; a remote `traceparent` continued; nothing recorded or sent when the
engine is given no tracer provider."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine import (
    DelegationError,
    DelegationRequest,
    Engine,
    ErrorCode,
    TargetCapabilities,
    TargetUpdate,
    Tracing,
    outgoing_trace_headers,
    parent_context,
)
from engine._events import Kind
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, finished, started

REMOTE_TRACE = "0af7651916cd43dd8448eb211c80319c"
REMOTE_PARENT = f"00-{REMOTE_TRACE}-b7ad6b7169203331-01"


def request(agent: str = "remote", **fields: Any) -> DelegationRequest:
    return DelegationRequest(agent=agent, objective="do it", **fields)


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


async def test_a_run_its_delegation_and_the_remote_call_form_one_tree_with_the_protocol_ids(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    target = ScriptedTarget(start=[[started("task-9", "ctx-9"), finished("done")]])
    engine = Engine([spec(target, key="research")], tracer_provider=tracer_provider)
    async with engine, engine.open_run(run_id="run-t", thread_id="th-1") as run:
        result = await run.delegate(request("research", parent_tool_call_id="toolu_1"))
    spans = by_name(span_exporter.get_finished_spans())
    assert set(spans) == {"subagent.run", "subagent.delegation research", "inprocess start"} or (
        set(spans) == {"subagent.run", "subagent.delegation research", "fake start"}
    ), set(spans)
    run_span = spans["subagent.run"]
    delegation = spans["subagent.delegation research"]
    call = next(s for n, s in spans.items() if n.endswith(" start"))
    assert run_span.parent is None
    assert parent_of(delegation) == span_id(run_span)
    assert parent_of(call) == span_id(delegation)
    assert len({trace_id(s) for s in spans.values()}) == 1
    assert run_span.kind == trace.SpanKind.INTERNAL
    assert call.kind == trace.SpanKind.CLIENT
    assert dict(run_span.attributes or {}) == {
        "subagent.run_id": "run-t",
        "subagent.thread_id": "th-1",
        "subagent.outcome": "finished",
        "subagent.delegations": 1,
    }
    attributes = dict(delegation.attributes or {})
    assert attributes["subagent.delegation_id"] == result.delegation_id
    assert attributes["subagent.agent"] == "research"
    assert attributes["subagent.parent_tool_call_id"] == "toolu_1"
    assert attributes["subagent.status"] == "completed"
    assert attributes["subagent.remote_task_id"] == "task-9"
    assert attributes["subagent.remote_context_id"] == "ctx-9"
    assert "subagent.error_code" not in attributes
    assert dict(call.attributes or {})["subagent.remote_task_id"] == "task-9"
    assert dict(call.attributes or {})["subagent.operation"] == "start"
    assert delegation.status.status_code == trace.StatusCode.UNSET


async def test_a_failed_delegation_and_a_refused_one_are_error_spans_with_their_codes(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    bad = ScriptedTarget(start=[[DelegationError(code=ErrorCode.REMOTE_FAILED, message="no")]])
    engine = Engine([spec(bad, key="bad")], tracer_provider=tracer_provider)
    async with engine, engine.open_run() as run:
        await run.delegate(request("bad"))
        await run.delegate(request("nobody"))
    spans = span_exporter.get_finished_spans()
    failed = [s for s in spans if s.name == "subagent.delegation bad"]
    refused = [s for s in spans if s.name == "subagent.delegation nobody"]
    assert len(failed) == 1 and len(refused) == 1
    assert failed[0].status.status_code == trace.StatusCode.ERROR
    assert dict(failed[0].attributes or {})["subagent.error_code"] == ErrorCode.REMOTE_FAILED
    assert dict(refused[0].attributes or {})["subagent.error_code"] == ErrorCode.AGENT_NOT_FOUND
    assert refused[0].status.description == ErrorCode.AGENT_NOT_FOUND


async def test_a_cancelled_delegation_records_its_cancel_call_and_the_run_its_outcome(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(
        start=[[started(), "hang"]], capabilities=TargetCapabilities(cancel=True)
    )
    engine = Engine([spec(target, key="slow")], tracer_provider=tracer_provider)
    async with engine, engine.open_run() as run:
        handle = run.start_delegation(request("slow"))
        await trio.sleep(1)
        handle.cancel("the user stopped it")
        result = await handle.wait()
        run.cancel("stopped")
    assert result.status == "cancelled"
    spans = span_exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert [n for n in names if n.endswith(" cancel")], names
    cancel = next(s for s in spans if s.name.endswith(" cancel"))
    delegation = next(s for s in spans if s.name == "subagent.delegation slow")
    start = next(s for s in spans if s.name.endswith(" start"))
    assert parent_of(cancel) == span_id(delegation)
    assert dict(cancel.attributes or {})["subagent.cancel_confirmed"] is True
    assert dict(start.attributes or {}).get("subagent.cancelled") is True
    assert dict(delegation.attributes or {})["subagent.remote_cancel"] == "confirmed"
    run_span = next(s for s in spans if s.name == "subagent.run")
    assert dict(run_span.attributes or {})["subagent.outcome"] == "cancelled"


async def test_a_run_continues_a_remote_traceparent_and_a_traced_scope_parents_its_delegation(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    target = ScriptedTarget(start=[[started(), finished("ok")], [started(), finished("ok")]])
    engine = Engine([spec(target, key="research")], tracer_provider=tracer_provider)
    async with engine, engine.open_run(traceparent=REMOTE_PARENT, tracestate="k=v") as run:
        with run.traced("mcp tools/call", attributes={"mcp.tool": "delegate"}) as tool:
            assert tool.is_recording()
            await run.delegate(request("research"))
        other_parent = f"00-{'1' * 32}-{'2' * 16}-01"
        with run.traced("mcp tools/call other", traceparent=other_parent):
            await run.delegate(request("research"))
    spans = span_exporter.get_finished_spans()
    run_span = next(s for s in spans if s.name == "subagent.run")
    tool_span = next(s for s in spans if s.name == "mcp tools/call")
    other = next(s for s in spans if s.name == "mcp tools/call other")
    first, second = [s for s in spans if s.name == "subagent.delegation research"]
    assert run_span.kind == trace.SpanKind.SERVER
    assert format(trace_id(run_span), "032x") == REMOTE_TRACE
    assert parent_of(run_span) == int("b7ad6b7169203331", 16)
    assert parent_of(tool_span) == span_id(run_span)
    assert parent_of(first) == span_id(tool_span)
    # A tool call that names its own parent continues that trace, linked to the run.
    assert format(trace_id(other), "032x") == "1" * 32
    assert [link.context.span_id for link in other.links] == [span_id(run_span)]
    assert parent_of(second) == span_id(other)


async def test_the_remote_call_publishes_its_traceparent_to_this_tasks_requests(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    seen: list[dict[str, str]] = []

    class Recording(ScriptedTarget):
        def open_session(self, task: Any, nursery: trio.Nursery) -> Any:
            session = super().open_session(task, nursery)
            play = session.start

            async def start(emit: Any) -> None:
                seen.append(dict(outgoing_trace_headers()))
                await play(emit)

            start.__name__ = "start"
            session.start = start  # type: ignore[method-assign]
            return session

    target = Recording(start=[[started(), finished("ok")]])
    engine = Engine([spec(target, key="research")], tracer_provider=tracer_provider)
    async with engine, engine.open_run() as run:
        await run.delegate(request("research"))
    assert outgoing_trace_headers() == {}
    call = next(s for s in span_exporter.get_finished_spans() if s.name.endswith(" start"))
    assert len(seen) == 1
    version, trace_hex, span_hex, flags = seen[0]["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled (the SDK may add Level 2's random)
    assert int(trace_hex, 16) == trace_id(call)
    assert int(span_hex, 16) == span_id(call)


async def test_an_engine_without_a_provider_records_and_sends_nothing() -> None:
    seen: list[dict[str, str]] = []

    async def look(emit: Any) -> None:
        seen.append(dict(outgoing_trace_headers()))
        await emit(started())
        await emit(finished("ok"))

    target = ScriptedTarget(start=[[started(), finished("ok")]])
    engine = Engine([spec(target, key="research")])
    assert not engine.tracing.enabled
    async with engine, engine.open_run(traceparent=REMOTE_PARENT) as run:
        with run.traced("mcp tools/call") as span:
            assert not span.is_recording()
            result = await run.delegate(request("research"))
        assert run._actor.span is trace.INVALID_SPAN
    assert result.status == "completed"
    assert outgoing_trace_headers() == {}


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",  # an all-zero trace id is invalid
        "00-" + REMOTE_TRACE + "-" + "0" * 16 + "-01",  # so is an all-zero span id
        "ff-" + REMOTE_TRACE + "-b7ad6b7169203331-01",  # version ff is forbidden
        "00-" + REMOTE_TRACE + "-b7ad6b7169203331-01" + "x" * 300,  # oversized
        "00-" + REMOTE_TRACE.upper() + "-b7ad6b7169203331-01",  # upper-case hex
    ],
)
def test_a_traceparent_that_does_not_parse_is_ignored(header: str) -> None:
    assert parent_context(header) is None


def test_a_valid_traceparent_with_a_tracestate_is_read() -> None:
    context = parent_context(REMOTE_PARENT, "vendor=opaque")
    assert context is not None
    span_context = trace.get_current_span(context).get_span_context()
    assert format(span_context.trace_id, "032x") == REMOTE_TRACE
    assert span_context.is_remote
    assert span_context.trace_state.get("vendor") == "opaque"


async def test_a_bad_traceparent_leaves_the_run_a_trace_of_its_own(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    engine = Engine([], tracer_provider=tracer_provider)
    async with engine, engine.open_run(traceparent="00-nonsense") as run:
        assert run.run_id
    (run_span,) = span_exporter.get_finished_spans()
    assert run_span.parent is None
    assert run_span.kind == trace.SpanKind.INTERNAL


async def test_an_update_kind_the_engine_knows_reaches_the_span_as_the_call_ends(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    # The remote's ids arrive during the call; the call's span carries them when it ends.
    late = TargetUpdate(kind=Kind.STARTED, remote_task_id="late-task", remote_context_id="c")
    target = ScriptedTarget(start=[[late, finished("ok")]])
    engine = Engine([spec(target, key="research")], tracer_provider=tracer_provider)
    async with engine, engine.open_run() as run:
        await run.delegate(request("research"))
    call = next(s for s in span_exporter.get_finished_spans() if s.name.endswith(" start"))
    assert dict(call.attributes or {})["subagent.remote_task_id"] == "late-task"


def test_tracing_off_is_the_default() -> None:
    assert not Tracing().enabled
    assert Tracing().start("x") is trace.INVALID_SPAN


async def test_the_embedding_shortcut_traces_when_given_a_provider(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    from engine import open_run

    target = ScriptedTarget(start=[[started(), finished("ok")]])
    async with open_run(
        [spec(target, key="research")], tracer_provider=tracer_provider, traceparent=REMOTE_PARENT
    ) as run:
        await run.delegate(request("research"))
    spans = span_exporter.get_finished_spans()
    assert {format(trace_id(s), "032x") for s in spans} == {REMOTE_TRACE}
    assert len(spans) == 3


async def test_an_adapter_names_the_protocol_methods_a_remote_call_used(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    from engine import note_remote_method

    class Naming(ScriptedTarget):
        def open_session(self, task: Any, nursery: trio.Nursery) -> Any:
            session = super().open_session(task, nursery)
            play = session.start

            async def start(emit: Any) -> None:
                note_remote_method("a2a", "CancelTask")
                note_remote_method("a2a", "GetTask")
                await play(emit)

            start.__name__ = "start"
            session.start = start  # type: ignore[method-assign]
            return session

    note_remote_method("a2a", "outside any call")  # nothing to name: a no-op
    engine = Engine(
        [spec(Naming(start=[[started(), finished("ok")]]), key="research")],
        tracer_provider=tracer_provider,
    )
    async with engine, engine.open_run() as run:
        await run.delegate(request("research"))
    call = next(s for s in span_exporter.get_finished_spans() if s.name.endswith(" start"))
    attributes = dict(call.attributes or {})
    assert (attributes["rpc.system"], attributes["rpc.method"]) == ("a2a", "CancelTask")
    assert [event.name for event in call.events] == ["CancelTask", "GetTask"]


async def test_recovery_traces_each_remote_cancel_it_sends_for_a_run_a_dead_process_left(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, tmp_path: Any
) -> None:
    from adapters.sqlite_archive import open_sqlite_archive
    from engine import DelegationEvent, JournalEntry, RunRecord

    target = ScriptedTarget()
    async with open_sqlite_archive(tmp_path / "runs.sqlite3", node="node-a") as archive:
        await archive.open_run(RunRecord(run_id="run-dead", started_at=1.0, node="node-a"))
        store = archive.journal_store("run-dead", Engine().retention_policy)
        events = [
            DelegationEvent(kind=Kind.RUN_STARTED, run_id="run-dead"),
            DelegationEvent(
                kind=Kind.STARTED,
                run_id="run-dead",
                delegation_id="d1",
                agent_key="remote",
                protocol="a2a",
                remote_task_id="t-1",
            ),
        ]
        await store.append([JournalEntry(event, n) for n, event in enumerate(events, 1)])
        engine = Engine([spec(target)], archive=archive, tracer_provider=tracer_provider)
        async with engine:
            assert [r.run_id for r in engine.recovered] == ["run-dead"]
    assert [ref.remote_task_id for ref in target.remote_cancels] == ["t-1"]
    spans = by_name(span_exporter.get_finished_spans())
    recovery = spans["subagent.recovery"]
    cancel = next(s for name, s in spans.items() if name.endswith(" cancel"))
    assert recovery.parent is None
    assert dict(recovery.attributes or {})["subagent.recovery_reason"] == ErrorCode.INTERRUPTED
    assert parent_of(cancel) == span_id(recovery)
    attributes = dict(cancel.attributes or {})
    assert attributes["subagent.remote_task_id"] == "t-1"
    assert attributes["subagent.remote_cancel"] == "confirmed"
