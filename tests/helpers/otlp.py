"""An OTLP/HTTP trace receiver on 127.0.0.1, for tests that check the spans a process exports.

`otlp_receiver()` serves `POST /v1/traces` with `application/x-protobuf` bodies (OTLP/HTTP,
https://opentelemetry.io/docs/specs/otlp/#otlphttp) from a thread of its own, decodes each
`ExportTraceServiceRequest` into flat `ReceivedSpan` records and answers as a collector does.
Any process (a `serve` subprocess, an in-process `OTLPSpanExporter`) can export to its
`endpoint`. Tests wait for the spans they expect with `wait_for` (or `await wait_for_async` from
Trio), which blocks on a condition until a predicate over everything received holds, up to a
bounded timeout: never a sleep.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "ReceivedSpan", "otlp_receiver"]

#: OTLP's `Span.SpanKind` values by the names `Run.traced` uses.
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
#: OTLP's `Status.StatusCode` values.
_STATUSES = {0: "unset", 1: "ok", 2: "error"}
#: How long a wait lasts by default (seconds): an SDK's batch processor exports every 5 s.
WAIT = 20.0


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened: ids in lowercase hex as W3C `traceparent` writes them."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    service: str | None
    status: str
    links: tuple[tuple[str, str], ...] = ()

    @property
    def traceparent(self) -> str:
        """This span as the `traceparent` a child in another process would receive."""
        return f"00-{self.trace_id}-{self.span_id}-01"


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which)


def _attributes(values: Sequence[KeyValue]) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in values}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one `ExportTraceServiceRequest` body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        service = _attributes(resource_spans.resource.attributes).get("service.name")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        kind=_KINDS.get(span.kind, str(span.kind)),
                        attributes=_attributes(span.attributes),
                        service=service,
                        status=_STATUSES.get(span.status.code, str(span.status.code)),
                        links=tuple(
                            (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                    )
                )
    return found


@dataclass
class OtlpReceiver:
    """What the receiver got so far; `endpoint` is the URL to give an OTLP/HTTP exporter."""

    endpoint: str = ""
    _spans: list[ReceivedSpan] = field(default_factory=list)
    _headers: list[dict[str, str]] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def spans(self) -> list[ReceivedSpan]:
        """A copy of every span received, in arrival order."""
        with self._changed:
            return list(self._spans)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers (names lowercased) of each export request received."""
        with self._changed:
            return [dict(headers) for headers in self._headers]

    def add(self, spans: list[ReceivedSpan], headers: dict[str, str]) -> None:
        with self._changed:
            self._spans.extend(spans)
            self._headers.append(headers)
            self._changed.notify_all()

    def wait_for(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool],
        within: float = WAIT,
        what: str = "the spans expected",
    ) -> list[ReceivedSpan]:
        """Every span received, once `predicate` holds for them; `TimeoutError` (naming the
        spans that did arrive) when it does not within `within` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(list(self._spans)), within):
                names = sorted(f"{span.service}: {span.name}" for span in self._spans)
                raise TimeoutError(f"{what} did not arrive in {within} s; got {names}")
            return list(self._spans)

    def wait_for_names(self, *names: str, within: float = WAIT) -> dict[str, ReceivedSpan]:
        """The spans named `names` (each received once, the first if more), waited for."""
        wanted = set(names)
        spans = self.wait_for(
            lambda spans: wanted <= {span.name for span in spans},
            within,
            what=f"spans {sorted(wanted)}",
        )
        found: dict[str, ReceivedSpan] = {}
        for span in spans:
            if span.name in wanted:
                found.setdefault(span.name, span)
        return found

    async def wait_for_async(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool],
        within: float = WAIT,
        what: str = "the spans expected",
    ) -> list[ReceivedSpan]:
        """`wait_for` from Trio, in a worker thread so the event loop keeps running."""
        return await trio.to_thread.run_sync(
            lambda: self.wait_for(predicate, within, what), abandon_on_cancel=True
        )


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.split("?")[0] != "/v1/traces":
                self._answer(404, b"not found", "text/plain")
                return
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type != "application/x-protobuf":
                self._answer(415, b"only application/x-protobuf", "text/plain")
                return
            encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                spans = decode(body)
            except Exception:
                self._answer(400, b"undecodable body", "text/plain")
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            receiver.add(spans, headers)
            answer = ExportTraceServiceResponse().SerializeToString()
            self._answer(200, answer, "application/x-protobuf")

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver listening on a free 127.0.0.1 port for as long as the context lasts."""
    receiver = OtlpReceiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
