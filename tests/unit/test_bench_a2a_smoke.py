"""Smoke test of `subagent-engine bench a2a`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run` (its remote runs in a child process), so the test is
a plain synchronous function (pytest-trio's trio_mode only takes over `async def` tests). It
checks that each measurement completed, never how fast: timings are the benchmark's to print.
"""

from __future__ import annotations

import io

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
