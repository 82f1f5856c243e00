"""Smoke test of `subagent-engine bench sse`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run` (its server and readers run in it), so the test is a
plain synchronous function (pytest-trio's trio_mode only takes over `async def` tests). It
checks that each measurement completed and nothing was lost, never how fast: timings are the
benchmark's to print.
"""

from __future__ import annotations

import io

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


def test_bench_sse_refuses_arguments_out_of_range() -> None:
    out = io.StringIO()
    assert bench_sse(events=1, repeat=1, out=out) == 2
    assert "at least" in out.getvalue()
