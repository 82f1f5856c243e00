"""The tracer provider `[telemetry]` asks for: OpenTelemetry's SDK exporting over OTLP/HTTP.

This module owns turning a `TelemetryEntry` into a `TracerProvider` for `Engine(tracer_provider=
...)` (`open_tracing`): spans are batched and sent from the SDK's own export thread, so an
exporting engine never waits for its collector; a collector that is down costs dropped spans
(the SDK logs it), never a request. The provider names the service (`service.name`,
`service.version`, https://opentelemetry.io/docs/specs/semconv/resource/#service) and samples
new traces at `sample_ratio` while following a remote parent's decision (`ParentBased`), so a
trace that began in another process is kept or dropped as a whole.

Headers for the collector (an API key, say) come from the variable `headers_env` names, in the
format of `OTEL_EXPORTER_OTLP_HEADERS`: `name=value` pairs separated by commas, values
percent-encoded (https://opentelemetry.io/docs/specs/otel/protocol/exporter/#specifying-headers-via-environment-variables).
They are secrets: they never appear in a log line or an error (`telemetry_problem` names the
variable, never its value).

With `enabled = false` (the default) nothing here runs and the engine is given no provider.
"""

from __future__ import annotations

import importlib.metadata
import os
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager

import trio
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from web.config import TelemetryEntry

__all__ = [
    "collector_headers",
    "open_tracing",
    "process_tracing",
    "telemetry_problem",
    "tracer_provider",
]

#: How long one export to the collector may take before the SDK gives it up (seconds).
EXPORT_TIMEOUT = 10.0


def collector_headers(value: str) -> dict[str, str]:
    """`name=value,...` (values percent-encoded) as a dict; `ValueError` naming the position
    of a pair that is not `name=value`, never its content."""
    headers: dict[str, str] = {}
    for index, pair in enumerate(value.split(",")):
        if not pair.strip():
            continue
        name, equals, raw = pair.partition("=")
        name = name.strip().lower()
        if not equals or not name or not name.isascii() or not name.replace("-", "").isalnum():
            raise ValueError(f"pair {index + 1} is not name=value")
        headers[name] = urllib.parse.unquote(raw.strip())
    return headers


def telemetry_problem(
    entry: TelemetryEntry, environ: Mapping[str, str] | None = None
) -> str | None:
    """Why `entry` cannot export as configured (for a start-up check), or None."""
    if not entry.enabled or entry.headers_env is None:
        return None
    env = os.environ if environ is None else environ
    value = env.get(entry.headers_env)
    if not value:
        return f"telemetry.headers_env names {entry.headers_env!r}, which is not set"
    try:
        collector_headers(value)
    except ValueError as exc:
        return f"the collector headers in {entry.headers_env!r}: {exc}"
    return None


def tracer_provider(
    entry: TelemetryEntry, environ: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """The provider `entry` describes, exporting over OTLP/HTTP; None when it is disabled.
    `ValueError` when its headers variable is missing or unreadable (`telemetry_problem`)."""
    if not entry.enabled:
        return None
    problem = telemetry_problem(entry, environ)
    if problem is not None:
        raise ValueError(problem)
    env = os.environ if environ is None else environ
    headers = collector_headers(env[entry.headers_env]) if entry.headers_env else None
    try:
        version = importlib.metadata.version("subagent-engine")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    provider = TracerProvider(
        resource=Resource.create({"service.name": entry.service_name, "service.version": version}),
        sampler=ParentBased(TraceIdRatioBased(entry.sample_ratio)),
    )
    exporter = OTLPSpanExporter(endpoint=entry.endpoint, headers=headers, timeout=EXPORT_TIMEOUT)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


@contextmanager
def process_tracing(entry: TelemetryEntry) -> Iterator[TracerProvider | None]:
    """`tracer_provider(entry)` for a process that is not a Trio program (a2a-serve's asyncio
    server), for the block: the spans it still holds are sent when the block ends, at most
    `EXPORT_TIMEOUT` s, on this thread."""
    provider = tracer_provider(entry)
    try:
        yield provider
    finally:
        if provider is not None:
            provider.shutdown()


@asynccontextmanager
async def open_tracing(
    entry: TelemetryEntry, environ: Mapping[str, str] | None = None
) -> AsyncIterator[TracerProvider | None]:
    """`tracer_provider(entry)` for the block; on leaving, the spans still batched are sent
    (at most `EXPORT_TIMEOUT` s, in a worker thread, so the event loop is not held)."""
    provider = tracer_provider(entry, environ)
    try:
        yield provider
    finally:
        if provider is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(provider.shutdown, abandon_on_cancel=True)
