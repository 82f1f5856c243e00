"""Smoke test of `subagent-engine bench a2a`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run` (its remote runs in a child process), so the test is
a plain synchronous function (pytest-trio's trio_mode only takes over `async def` tests). It
checks that each measurement completed, never how fast: timings are the benchmark's to print;
for tracing, that off, on and off again are all printed with positive figures, that only "on"
sent a traceparent, and that its spans reached the OTLP receiver.
"""

from __future__ import annotations

import io
import re

import pytest

from tools.bench.a2a import bench_a2a


@pytest.mark.slow  # runs the benchmark
def test_bench_a2a_prints_throughput_and_cancel_rows() -> None:
    out = io.StringIO()
    assert bench_a2a(events=500, delegations=5, repeat=1, out=out) == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    for row in (
        "raw httpx reader",
        "bare a2a-sdk client",
        "engine (run.delegate",
        "floor: bare a2a-sdk cancel_task",
        "engine: run.cancel() -> last CancelTask",
    ):
        assert any(line.startswith(row) for line in lines), row
    assert any(line.startswith("goal: engine >= 0.8x of the bare client: ") for line in lines)
    assert any(line.startswith("goal: run.cancel() -> last CancelTask p99 < ") for line in lines)
    assert "outcomes over 1 run(s): 5/5 delegations cancelled with remote_cancel=confirmed" in (
        out.getvalue()
    )
    assert not any(line.startswith("!!") for line in lines)
    # Tracing: off, on and off again side by side, each figure positive.
    header = next(line for line in lines if line.startswith("tracing off vs on "))
    assert header.split()[-5:] == ["on", "costs", "off", "again", "noise"], header
    for label in (
        "stream, events/s (median)",
        "cancel: run.cancel() -> last CancelTask, ms (median)",
        "cancel: run.cancel() -> run closed, ms (median)",
    ):
        line = next(line for line in lines if line.startswith(label + " "))
        off, on, cost, again, noise = line[len(label) :].split()
        for figure in (off, on, again):
            assert float(figure.replace(",", "")) > 0, line
        assert cost.endswith("%") and noise.endswith("%"), line
    for what in ("stream throughput", "cancel-cascade speed"):
        assert any(line.startswith(f"goal: tracing on loses <= 10% of {what}: ") for line in lines)
    # Off sends no traceparent, on sends one with every request (the stream and, per
    # delegation of the cascade, its stream and its CancelTask: 1 + 2 * 5 at least).
    sent = next(line for line in lines if line.startswith("JSON-RPC requests from the engine "))
    counts = re.fullmatch(
        r".*: off 0 of ([\d,]+), on ([\d,]+) of ([\d,]+), off again 0 of ([\d,]+)", sent
    )
    assert counts is not None, sent
    off_requests, on_traced, on_requests, again_requests = (
        int(count.replace(",", "")) for count in counts.groups()
    )
    assert on_traced == on_requests >= 11 and off_requests >= 11 and again_requests >= 11, sent
    assert any(line.startswith("off: the default engine") and "off again" in line for line in lines)
    receiver = next(line for line in lines if line.startswith("OTLP receiver "))
    spans = re.search(r": ([\d,]+) spans in ([\d,]+) exports .*, 0 refused$", receiver)
    assert spans is not None, receiver
    # Each cascade side makes a span per run, per delegation and per remote call.
    assert int(spans.group(1).replace(",", "")) >= 1 + 5 * 3, receiver
