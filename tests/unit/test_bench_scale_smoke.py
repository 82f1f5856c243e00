"""Smoke test of `subagent-engine bench scale --quick`: every section is printed, nothing is lost.

The benchmark drives its own `trio.run` (its memory figures and its remote run in child
processes), so the test is a plain synchronous function (pytest-trio's trio_mode only takes
over `async def` tests). It checks that each measurement completed and that the plot was
written when matplotlib is there, never how fast or how big: figures are the benchmark's to
print.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest

from tools.bench.scale import QUICK_CASCADE, QUICK_CHUNKS, QUICK_SIZES, QUICK_STEPS, bench_scale


@pytest.mark.slow  # runs the benchmark
def test_bench_scale_quick_prints_every_section(tmp_path: Path) -> None:
    out = io.StringIO()
    plot = tmp_path / "scale.png"
    code = bench_scale(
        sizes=QUICK_SIZES,
        steps=QUICK_STEPS,
        cascade=QUICK_CASCADE,
        chunks=QUICK_CHUNKS,
        repeat=1,
        short_step_runs=1,
        plot=str(plot),
        out=out,
    )
    text = out.getvalue()
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0].startswith("subagent-engine bench scale: Python ")
    assert "os.cpu_count()=" in lines[0]
    for start in (
        "memory: KiB of resident set per item ",
        "goal: < 50 KiB per active delegation, replay window excluded: ",
        "whole path: d delegations to the remote, ",
        "goal: cost grows linearly or better ",
        "cancel cascade: n delegations WORKING ",
        "goal (bench a2a's, at ",
        "max RSS of this process: ",
    ):
        assert any(line.startswith(start) for line in lines), start
    # One row per size, step and cascade, with every delegation accounted for.
    memory_rows = [line.split() for line in lines if len(line.split()) == 12]
    for size in QUICK_SIZES:
        assert any(row[0] == f"{size:,}" for row in memory_rows), size
    for step in QUICK_STEPS:
        assert any(line.endswith(f" {step:,}/{step:,}") for line in lines), step
    for count in QUICK_CASCADE:
        assert any(line.endswith(f" {count:,}/{count:,}") for line in lines), count
    assert not any(line.startswith("!!") for line in lines)
    if importlib.util.find_spec("matplotlib") is not None:
        assert f"plot: {plot}" in lines
        assert plot.read_bytes().startswith(b"\x89PNG")
    else:
        assert any(line.startswith("plot: skipped, matplotlib is not installed") for line in lines)


def test_bench_scale_refuses_arguments_out_of_range() -> None:
    out = io.StringIO()
    assert bench_scale(sizes=[0], out=out) == 2
    assert "at least 1" in out.getvalue()
