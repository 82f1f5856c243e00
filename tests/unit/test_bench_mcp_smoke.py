"""Smoke test of `subagent-engine bench mcp`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run` (its servers and clients run in it), so the test is a
plain synchronous function (pytest-trio's trio_mode only takes over `async def` tests). It
checks that each measurement completed, never how fast: timings are the benchmark's to print.
"""

from __future__ import annotations

import io

import pytest

from tools.bench.mcp import bench_mcp

# The mcp client leaves httpx2's response generators to the garbage collector when it closes an
# SSE response early (every tools/call) or a session; that is the client library's business.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*httpx2:pytest.PytestUnraisableExceptionWarning",
    "ignore:Exception ignored in.*EventSource:pytest.PytestUnraisableExceptionWarning",
    "ignore:Exception ignored in.*aiter:pytest.PytestUnraisableExceptionWarning",
)


@pytest.mark.slow  # runs the benchmark
def test_bench_mcp_prints_round_trip_and_many_runs_rows() -> None:
    out = io.StringIO()
    assert bench_mcp(calls=5, runs=4, repeat=1, out=out) == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("subagent-engine bench mcp: Python ")
    assert "os.cpu_count()=" in lines[0]
    for row in (
        "floor: bare mcp Server, constant result ",
        "endpoint: DelegationEndpoint -> in-process agent ",
        "engine alone: run.delegate -> in-process agent ",
        "endpoint over the floor at p50: ",
        "endpoint run 1 ",
        "floor run 1 ",
        "endpoint: per-call latency, 4 calls at once ",
        "floor: per-call latency, 4 calls at once ",
        "max RSS of this process: ",
    ):
        assert any(line.startswith(row) for line in lines), row
    endpoint_run = next(line for line in lines if line.startswith("endpoint run 1 "))
    # errors, endpoint.open_runs with every run open, and after they closed
    assert endpoint_run.split()[9:12] == ["0", "4", "0"], endpoint_run
    assert not any(line.startswith("!!") for line in lines)


def test_bench_mcp_refuses_arguments_out_of_range() -> None:
    out = io.StringIO()
    assert bench_mcp(calls=0, runs=1, repeat=1, out=out) == 2
    assert "at least 1" in out.getvalue()
