"""Smoke test of `subagent-engine bench journal`: a tiny run prints every row and exits 0.

The benchmark drives its own `trio.run`, so the test is a plain synchronous function (pytest-trio's
trio_mode only takes over `async def` tests).
"""

from __future__ import annotations

import pytest

from tools.bench.journal import bench_journal


@pytest.mark.slow  # runs the benchmark
def test_bench_journal_prints_bare_channel_and_each_subscriber_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_journal(events=2000, subscriber_counts=[1, 3], repeat=1) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("bare channel nowait, 1 task ") for line in lines)
    assert any(line.startswith("journal, 1 subscriber ") for line in lines)
    assert any(line.startswith("journal, 3 subscribers ") for line in lines)
    assert any(line.startswith("goal: journal with 1 subscriber within 3x") for line in lines)
    assert not any(line.startswith("!! LOST") for line in lines)
