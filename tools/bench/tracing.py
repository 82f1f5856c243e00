"""Tracing off and on for the benches (`bench sse`, `bench a2a`): the sides, and a receiver.

This module owns what "tracing on" means in a bench and the OTLP receiver it exports to. "Off"
is the default engine (`tracer_provider=None`); "on" is the server's own provider
(`web.telemetry.open_tracing` over a `TelemetryEntry` with `enabled = true`: OpenTelemetry's
SDK, a `BatchSpanProcessor` and an OTLP/HTTP exporter in its own thread) exporting to a receiver
on 127.0.0.1 in a process of its own (`python -m tools.bench.tracing --serve`), as a collector on
the host would be. The receiver answers every `POST /v1/traces` with 200 and an empty
`ExportTraceServiceResponse` (https://opentelemetry.io/docs/specs/otlp/#otlphttp-response),
counts the requests and spans it was sent and discards them; `GET /stats` returns the counts.
So the export is real: the spans are encoded, sent and parsed, on this machine's cores.

A third side, "off again", is the default engine measured a second time: the engine cannot be
run with its tracing hooks removed without editing it, so tracing off is checked against the
run-to-run noise this machine shows between two identical sides, which bounds what the off hooks
(one attribute test per run, delegation and remote call) could cost. The sides are measured in
a rotation (`rotation`), so drift and noise fall on each side alike.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, TextIO

import attrs
import httpx
from opentelemetry.sdk.trace import TracerProvider

from tools.peers.children import read_ready_port, stop_process_group
from web.config import TelemetryEntry
from web.telemetry import open_tracing

__all__ = [
    "OFF",
    "OFF_AGAIN",
    "ON",
    "SIDES",
    "OtlpSink",
    "SideRow",
    "SinkFailed",
    "SinkStats",
    "goal_line",
    "otlp_sink",
    "print_sides",
    "rotation",
    "side_tracing",
    "sink_line",
    "warm",
]

OFF: Final = "off"
ON: Final = "on"
OFF_AGAIN: Final = "off again"
#: Every side a bench measures, in the order its report prints them.
SIDES: Final = (OFF, ON, OFF_AGAIN)
#: The goal: tracing on loses at most this share of throughput.
GOAL_LOSS_PERCENT: Final = 10.0
#: What the reports say about the sides (one line each).
ON_MEANS: Final = (
    "on: web.telemetry's provider (the server's: SDK TracerProvider, BatchSpanProcessor at its "
    "defaults, OTLP/HTTP exporter) sending to a receiver in its own process on 127.0.0.1 that "
    "parses and discards every export; a provider per measurement, flushed after its clock stops"
)
OFF_MEANS: Final = (
    "off: the default engine (tracer_provider=None: no span, no traceparent); checked against "
    "'off again', the same default engine measured a second time in the same rotation: the "
    "engine cannot run with its tracing hooks removed without editing it, so the off-vs-off "
    "difference is this machine's run-to-run noise, the floor under which off's hooks hide"
)

READY_DEADLINE: Final = 30.0
STOP_DEADLINE: Final = 5.0
TRACES_PATH: Final = "/v1/traces"


def rotation(index: int) -> tuple[str, ...]:
    """The sides in the order repetition `index` measures them: each side goes first, second
    and third in turn, so a machine that warms or slows during a run favours none."""
    shift = index % len(SIDES)
    return SIDES[shift:] + SIDES[:shift]


# -- the receiver, in its own process ---------------------------------------------------------


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.spans = 0
        self.bytes = 0
        self.refused = 0  # bodies that did not parse as an ExportTraceServiceRequest


def _handler(counts: _Counts) -> type[BaseHTTPRequestHandler]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    answer = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector answers

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != TRACES_PATH:
                self._reply(404, b"", "text/plain")
                return
            spans = 0
            try:
                if self.headers.get("content-encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        spans += len(scope.spans)
            except Exception:
                with counts.lock:
                    counts.refused += 1
                self._reply(400, b"", "text/plain")
                return
            with counts.lock:
                counts.requests += 1
                counts.spans += spans
                counts.bytes += len(body)
            self._reply(200, answer, "application/x-protobuf")

        def do_GET(self) -> None:
            if self.path != "/stats":
                self._reply(404, b"", "text/plain")
                return
            with counts.lock:
                stats = {
                    "requests": counts.requests,
                    "spans": counts.spans,
                    "bytes": counts.bytes,
                    "refused": counts.refused,
                }
            self._reply(200, json.dumps(stats).encode(), "application/json")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the counts are the record

    return Handler


def _serve_main(argv: Sequence[str]) -> int:
    """`python -m tools.bench.tracing --serve [--port P]`: the receiver's own process; prints
    `READY <port>` and stops when stdin closes."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.tracing",
        description="the OTLP/HTTP receiver the benches export to (accepts and discards)",
    )
    parser.add_argument("--serve", action="store_true", help="run the receiver (required)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    args = parser.parse_args(argv)
    if not args.serve:
        parser.error("run as --serve; the benchmarks start it themselves")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(_Counts()))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"READY {server.server_address[1]}", flush=True)
    while sys.stdin.buffer.read(4096):  # until the measuring process closes our stdin
        pass
    server.shutdown()
    server.server_close()
    return 0


# -- the measuring side -----------------------------------------------------------------------


class SinkFailed(Exception):
    """The receiver process did not start."""


@attrs.frozen
class SinkStats:
    requests: int
    spans: int
    bytes: int
    refused: int

    def __sub__(self, other: SinkStats) -> SinkStats:
        return SinkStats(
            self.requests - other.requests,
            self.spans - other.spans,
            self.bytes - other.bytes,
            self.refused - other.refused,
        )


@attrs.frozen
class OtlpSink:
    """The measuring side's handle on the receiver process."""

    port: int
    pid: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}{TRACES_PATH}"

    @property
    def entry(self) -> TelemetryEntry:
        """The `[telemetry]` a deployment exporting to this receiver would configure."""
        return TelemetryEntry(enabled=True, endpoint=self.endpoint, service_name="bench")

    def stats(self) -> SinkStats:
        """What the receiver was sent so far (a blocking call: between measurements only)."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=10.0)
        response.raise_for_status()
        document = response.json()
        return SinkStats(
            int(document["requests"]),
            int(document["spans"]),
            int(document["bytes"]),
            int(document["refused"]),
        )


#: Where `python -m tools.bench.tracing` resolves: the checkout holding the `tools` folder.
_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextmanager
def otlp_sink() -> Iterator[OtlpSink]:
    """Start the receiver in its own process and session; always stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.bench.tracing", "--serve", "--port", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=_ROOT,
        start_new_session=True,
    )
    try:
        try:
            port = read_ready_port(proc, READY_DEADLINE)
        except (TimeoutError, RuntimeError) as exc:
            raise SinkFailed(f"the OTLP receiver did not start: {exc}") from None
        yield OtlpSink(port=port, pid=proc.pid)
    finally:
        stop_process_group(proc, STOP_DEADLINE)


@asynccontextmanager
async def side_tracing(side: str, sink: OtlpSink) -> AsyncIterator[TracerProvider | None]:
    """The provider for `side` for the block: None when off; when on, the server's provider
    exporting to `sink`, flushed and shut down on leaving (as `serve` does on exit)."""
    if side != ON:
        yield None
        return
    async with open_tracing(sink.entry) as provider:
        yield provider


def warm(sink: OtlpSink) -> None:
    """One span exported before any clock starts: the SDK's and the exporter's first-use costs
    (lazy imports, the HTTP session's connection) stay out of the first "on" figure."""
    from web.telemetry import tracer_provider

    provider = tracer_provider(sink.entry)
    assert provider is not None
    provider.get_tracer("bench").start_span("warm-up").end()
    provider.shutdown()


def sink_line(sink: OtlpSink, stats: SinkStats) -> str:
    return (
        f"OTLP receiver (pid {sink.pid}, {sink.endpoint}): {stats.spans:,} spans in "
        f"{stats.requests:,} exports ({stats.bytes / 1024:,.1f} KiB) from the 'on' side, "
        f"{stats.refused} refused"
    )


# -- the report ------------------------------------------------------------------------------


@attrs.frozen
class SideRow:
    """One figure measured on every side (`values[side]`), e.g. events/s or p99 ms."""

    label: str
    values: Mapping[str, float]
    higher_is_better: bool  # throughput; latency is lower-is-better
    digits: int = 0

    def cost(self, side: str) -> float:
        """What `side` costs against off, in percent: throughput lost, or latency added
        (negative: `side` did better)."""
        off, other = self.values.get(OFF, math.nan), self.values.get(side, math.nan)
        if not off or not math.isfinite(off) or not math.isfinite(other):
            return math.nan
        return (off - other) / off * 100 if self.higher_is_better else (other - off) / off * 100

    def shown(self, side: str) -> str:
        value = self.values.get(side, math.nan)
        return f"{value:,.{self.digits}f}" if math.isfinite(value) else "-"


def _percent(value: float) -> str:
    return f"{value:+.1f}%" if math.isfinite(value) else "-"


def print_sides(title: str, rows: Sequence[SideRow], out: TextIO) -> None:
    """The figures of every side beside each other: off, on, what on costs, off again, and
    what off again "costs" (the noise: the same engine measured twice)."""
    width = max(len(title), *(len(row.label) for row in rows))
    header = (
        f"{title:<{width}} {'off':>11} {'on':>11} {'on costs':>9} {'off again':>11} {'noise':>8}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for row in rows:
        print(
            f"{row.label:<{width}} {row.shown(OFF):>11} {row.shown(ON):>11} "
            f"{_percent(row.cost(ON)):>9} {row.shown(OFF_AGAIN):>11} "
            f"{_percent(row.cost(OFF_AGAIN)):>8}",
            file=out,
        )


def goal_line(row: SideRow, what: str) -> str:
    """The goal for `row`: tracing on costs at most GOAL_LOSS_PERCENT, with the noise beside."""
    cost, noise = row.cost(ON), row.cost(OFF_AGAIN)
    met = math.isfinite(cost) and cost <= GOAL_LOSS_PERCENT
    return (
        f"goal: tracing on loses <= {GOAL_LOSS_PERCENT:g}% of {what}: "
        f"{'MET' if met else 'NOT MET'} (on costs {_percent(cost)}; off again vs off "
        f"{_percent(noise)}, the run-to-run noise tracing off is checked against)"
    )


if __name__ == "__main__":
    sys.exit(_serve_main(sys.argv[1:]))
