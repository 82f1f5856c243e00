"""Spans of the actor tree, for a host that traces with OpenTelemetry.

This module owns `Tracing`, the engine's one handle on a tracer: a span for each run, each
delegation and each call a delegation makes to its remote (start, poll, resubscribe, answer,
cancel), plus what an edge asks for through `Run.traced` (a tool call of the run's endpoint, a
viewer's connection). It uses only the OpenTelemetry API; which SDK, sampler and exporter record
the spans is the host's choice, given as a `TracerProvider` to `Engine(tracer_provider=...)`.
Without one (the default), `Tracing` is off: every method returns at once without touching
OpenTelemetry, so an engine that does not trace pays one attribute test per run, delegation and
remote call (and its remote HTTP pools one context-variable read per request).

Trace context crosses processes as W3C Trace Context (https://www.w3.org/TR/trace-context/,
section 3: the `traceparent` and `tracestate` headers). Inbound, `parent_context` reads a pair of
those values (from an A2A request's headers, an MCP tool call's `_meta`) into the parent of a
run or of a traced scope; a value that does not parse is ignored, as the specification asks
(section 4.3), and never fails the request. Outbound, while the engine runs a remote call, the
call's own span is published in this task's context (`outgoing_trace_headers`): the remote
targets' HTTP pools add it to each request they send, so the remote's server span becomes a
child of our client span. Only `traceparent` and `tracestate` go out, never baggage.

Attributes carry identifiers and statuses (the run, the delegation, the agent key, the protocol
ids: remote task and context, card fingerprint, parent tool-call id), never a prompt, a result
or a credential.
"""

from __future__ import annotations

import contextvars
import importlib.metadata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from engine._results import DelegationResult

__all__ = [
    "SPAN_KINDS",
    "Tracing",
    "note_remote_method",
    "outgoing_trace_headers",
    "parent_context",
]

#: The instrumentation scope the engine's spans are recorded under.
TRACER_NAME: Final = "subagent_engine"
#: The span kinds a traced scope may declare, by the names `Run.traced` takes.
SPAN_KINDS: Final = {
    "internal": trace.SpanKind.INTERNAL,
    "server": trace.SpanKind.SERVER,
    "client": trace.SpanKind.CLIENT,
    "consumer": trace.SpanKind.CONSUMER,
}
#: The longest `traceparent` / `tracestate` read (the specification's own bounds: 55 characters
#: for version 00, and 32 list members of at most 256 + 1 + 256 characters; section 3.3.1.1
#: recommends propagating at least 512 characters of tracestate).
MAX_TRACEPARENT: Final = 256
MAX_TRACESTATE: Final = 8192

_PROPAGATOR: Final = TraceContextTextMapPropagator()
#: What a task that makes no traced remote call sends: no trace headers.
_NONE: Final[Mapping[str, str]] = MappingProxyType({})
#: The span of the remote call this task is making (recorded or sampled out), if any.
_CALL: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar(
    "subagent_engine_remote_call", default=None
)
#: The span a delegation started in this task is a child of (`Run.traced`), if any.
_SCOPE: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar(
    "subagent_engine_trace_scope", default=None
)


def outgoing_trace_headers() -> Mapping[str, str]:
    """The `traceparent` (and `tracestate`) of the remote call this task is making, for an
    adapter to send with its request; empty when the engine does not trace. A call its sampler
    left out is still named (its flags say so), so the remote leaves it out too."""
    span = _CALL.get()
    return _headers_of(span) if span is not None else _NONE


def note_remote_method(system: str, method: str) -> None:
    """Name the protocol method an adapter is calling within the engine's remote call (A2A's
    `SendStreamingMessage`, `CancelTask`, ...): the call's span takes the first as `rpc.system`
    / `rpc.method` (https://opentelemetry.io/docs/specs/semconv/rpc/rpc-spans/) and records each
    as an event, so a cancel that falls back to `GetTask` shows both. No-op when not traced."""
    span = _CALL.get()
    if span is None or not span.is_recording():
        return
    if "rpc.method" not in (getattr(span, "attributes", None) or {}):
        span.set_attributes({"rpc.system": system, "rpc.method": method})
    span.add_event(method)


def parent_context(
    traceparent: str | None, tracestate: str | None = None
) -> otel_context.Context | None:
    """The remote parent a W3C `traceparent` names, or None when it is absent or does not parse
    (then the span starts a trace of its own). Oversized values are ignored unread."""
    if not isinstance(traceparent, str) or not traceparent or len(traceparent) > MAX_TRACEPARENT:
        return None
    carrier = {"traceparent": traceparent}
    if isinstance(tracestate, str) and tracestate and len(tracestate) <= MAX_TRACESTATE:
        carrier["tracestate"] = tracestate
    try:
        found = _PROPAGATOR.extract(carrier)
    except Exception:  # a propagator must not fail a request over a header (section 4.3)
        return None
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


def _headers_of(span: trace.Span) -> dict[str, str]:
    """`span` as W3C Trace Context headers (version 00, section 3.2), written directly: the
    propagator's way costs twice as much, on every remote call."""
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    headers = {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-"
        f"{context.trace_flags:02x}"
    }
    if context.trace_state:
        headers["tracestate"] = context.trace_state.to_header()
    return headers


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """Only the attributes that have a value (OpenTelemetry refuses None)."""
    return {key: value for key, value in values.items() if value is not None and value != ""}


class Tracing:
    """The engine's tracer, or none (`enabled` false: every method is a no-op)."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer: trace.Tracer | None = None
        if provider is not None:
            self._tracer = provider.get_tracer(TRACER_NAME, _version())

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def current_scope(self) -> trace.Span | None:
        """The span of the traced scope this task is in (`Run.traced`), if any."""
        return _SCOPE.get() if self._tracer is not None else None

    def start(
        self,
        name: str,
        *,
        parent: trace.Span | otel_context.Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: tuple[trace.Span, ...] = (),
    ) -> trace.Span:
        """A started span (`trace.INVALID_SPAN` when off), a child of `parent`: a span, a
        context read from a remote (`parent_context`), or None for the span of the enclosing
        `Run.traced` scope, or else OpenTelemetry's current context (a host's own span)."""
        if self._tracer is None:
            return trace.INVALID_SPAN
        if parent is None:
            parent = _SCOPE.get()
        context = trace.set_span_in_context(parent) if isinstance(parent, trace.Span) else parent
        span_links = [
            trace.Link(link.get_span_context())
            for link in links
            if link.get_span_context().is_valid
        ]
        return self._tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=_attributes(attributes or {}),
            links=span_links,
        )

    @contextmanager
    def remote_call(
        self, parent: trace.Span, protocol: str, operation: str, attributes: Mapping[str, Any]
    ) -> Iterator[trace.Span]:
        """A client span around one call to a remote, published to this task's outgoing
        requests (`outgoing_trace_headers`) and as OpenTelemetry's current span while it runs."""
        if self._tracer is None:
            yield trace.INVALID_SPAN
            return
        span = self.start(
            f"{protocol} {operation}",
            parent=parent,
            kind=trace.SpanKind.CLIENT,
            attributes={"subagent.protocol": protocol, "subagent.operation": operation}
            | dict(attributes),
        )
        with _in_force(span, _CALL):
            yield span

    @contextmanager
    def scope(self, span: trace.Span) -> Iterator[trace.Span]:
        """Make `span` the parent of what this task starts next (a delegation under a tool call),
        and OpenTelemetry's current span; ends it on leaving, marked failed on an exception."""
        if self._tracer is None:
            yield span
            return
        with _in_force(span, _SCOPE):
            yield span

    def end_delegation(self, span: trace.Span, result: DelegationResult | None) -> None:
        """End a delegation's span with what its result says: status, error code, remote ids."""
        if self._tracer is None:
            return
        if result is not None:
            span.set_attributes(delegation_result_attributes(result))
            if result.error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, result.error.code))
        span.end()


@contextmanager
def _in_force(span: trace.Span, slot: contextvars.ContextVar[trace.Span | None]) -> Iterator[None]:
    """`span` in `slot` and as OpenTelemetry's current span for the block (this task), then
    ended; marked failed if the block raised (`_failed`)."""
    saved = slot.set(span)
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        otel_context.detach(token)
        slot.reset(saved)
        span.end()


def delegation_result_attributes(result: DelegationResult) -> dict[str, Any]:
    """The attributes a delegation's result adds to its span: identifiers and codes only."""
    return _attributes(
        {
            "subagent.status": result.status,
            "subagent.error_code": result.error.code if result.error is not None else None,
            "subagent.remote_task_id": result.remote_task_id,
            "subagent.remote_context_id": result.remote_context_id,
            "subagent.card_fingerprint": result.card_fingerprint,
            "subagent.remote_cancel": result.remote_cancel,
        }
    )


def _version() -> str | None:
    try:
        return importlib.metadata.version("subagent-engine")
    except importlib.metadata.PackageNotFoundError:
        return None


def _failed(span: trace.Span, exc: BaseException) -> None:
    """Mark a span failed by an exception (its type only: a message may carry remote text).
    Cancellation is not a failure of the span's work: it is recorded as an attribute."""
    if isinstance(exc, trio.Cancelled) or (
        isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None
    ):
        span.set_attribute("subagent.cancelled", True)
        return
    span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
