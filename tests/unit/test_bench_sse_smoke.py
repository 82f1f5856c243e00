"""Smoke test of `subagent-engine bench sse`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run` (its server and readers run in it), so the test is a
plain synchronous function (pytest-trio's trio_mode only takes over `async def` tests). It
checks that each measurement completed and nothing was lost, never how fast: timings are the
benchmark's to print; for tracing, that off, on and off again are all printed with positive
figures and that the "on" side's spans reached the OTLP receiver.
"""

from __future__ import annotations

import io
import re

import pytest

from tools.bench.sse import bench_sse


@pytest.mark.slow  # runs the benchmark
def test_bench_sse_prints_throughput_latency_and_slow_viewer_rows() -> None:
    out = io.StringIO()
    code = bench_sse(events=2_000, delegations=4, rate=200, seconds=0.5, repeat=1, out=out)
    assert code == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("subagent-engine bench sse: Python ")
    assert "os.cpu_count()=" in lines[0]
    for row in (
        "raw ASGI app, same writes (limit) ",
        "no engine, json.dumps per event ",
        "engine: journal -> encoder -> SSE ",
        "goal: >= 0.5x the raw limit and >= 150,000 events/s: ",
        "fast viewer alone ",
        "fast viewer, with the slow viewer attached ",
        "goal: p99 < 5 ms (fast viewer alone): ",
        "subscription pending bytes, max (slow viewer) ",
        "text per message equals the fast viewer's ",
        "non-delta events equal the fast viewer's ",
        "max RSS of this process: ",
    ):
        assert any(line.startswith(row) for line in lines), row
    for row in ("text per message", "non-delta events", "subscription pending bytes"):
        line = next(line for line in lines if line.startswith(row))
        assert line.endswith("ok"), line
    assert not any(line.startswith("!!") for line in lines)
    # Tracing: off, on and off again side by side, each figure positive.
    header = next(line for line in lines if line.startswith("tracing off vs on "))
    assert header.split()[-5:] == ["on", "costs", "off", "again", "noise"], header
    for label in (
        "throughput, events/s",
        "latency p50 ms, fast viewer alone",
        "latency p99 ms, fast viewer alone",
    ):
        off, on, cost, again, noise = _side_row(lines, label)
        assert off > 0 and on > 0 and again > 0, (label, off, on, again)
        assert cost.endswith("%") and noise.endswith("%"), (label, cost, noise)
    assert any(line.startswith("goal: tracing on loses <= 10% of throughput: ") for line in lines)
    # How "off" was checked is said, and the "on" side really exported to the receiver.
    assert any(line.startswith("off: the default engine") and "off again" in line for line in lines)
    receiver = next(line for line in lines if line.startswith("OTLP receiver "))
    spans = re.search(r": ([\d,]+) spans in ([\d,]+) exports .*, 0 refused$", receiver)
    assert spans is not None, receiver
    # At least a span per run (a throughput run, a latency run) and per delegation (4).
    assert int(spans.group(1).replace(",", "")) >= 2 + 4, receiver


def _side_row(lines: list[str], label: str) -> tuple[float, float, str, float, str]:
    """(off, on, on's cost, off again, noise) of the tracing table's row `label`."""
    line = next(line for line in lines if line.startswith(label + " "))
    off, on, cost, again, noise = line[len(label) :].split()
    return (
        float(off.replace(",", "")),
        float(on.replace(",", "")),
        cost,
        float(again.replace(",", "")),
        noise,
    )


def test_bench_sse_refuses_arguments_out_of_range() -> None:
    out = io.StringIO()
    assert bench_sse(events=1, repeat=1, out=out) == 2
    assert "at least" in out.getvalue()
