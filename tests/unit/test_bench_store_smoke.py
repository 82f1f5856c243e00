"""Smoke test of `python -m tools.bench store --quick`: every section prints, nothing is lost.

The benchmark drives its own `trio.run` per measurement, so the tests are plain synchronous
functions (pytest-trio's trio_mode only takes over `async def` tests). They check that each
measurement ran for each store and that no reader missed an entry, never how fast: figures are
the benchmark's to print. The Redis rows need Debian's redis-server; without it the benchmark
says they were skipped, which the second test checks by hiding the binary.
"""

from __future__ import annotations

import io
import shutil

import attrs
import pytest

from tools.bench.store import QUICK, StoreBenchSizes, bench_store

SECTIONS = (
    "appends with fan-out: ",
    "goal: a durable store's journal >= 0.5x its raw client: ",
    "viewer latency on a non-owner node: ",
    "goal: p99 < 20 ms on loopback: ",
    "resume: a run of ",
    "goal: the whole replay in < 1 s: ",
    "idle viewers: ",
    "max RSS of this process: ",
)


@pytest.mark.slow  # runs the benchmark (a few seconds)
def test_bench_store_quick_prints_every_section_for_every_store() -> None:
    out = io.StringIO()
    code = bench_store(QUICK, out=out)
    text = out.getvalue()
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0].startswith("subagent-engine bench store: Python ")
    assert "os.cpu_count()=" in lines[0]
    for start in SECTIONS:
        assert any(line.startswith(start) for line in lines), start
    redis = shutil.which("redis-server") is not None
    stores = ["memory", "sqlite", "redis"] if redis else ["memory", "sqlite"]
    for store in stores:
        assert any(line.startswith(f"{store:<7} RunJournal + 4 subscribers ") for line in lines)
        assert any(line.startswith(f"{store:<7} store.read_after ") for line in lines)
        assert any(line.startswith(f"{store:<7} archive.wait_entries ") for line in lines)
    assert any(line.startswith("memory  n/a: ") for line in lines)
    assert any(line.startswith("sqlite  n/a: ") for line in lines)
    if redis:
        assert any(line.startswith("redis   archive B: JournalTail ") for line in lines)
        assert any(line.startswith("redis   raw: XADD pipeline -> XREAD BLOCK") for line in lines)
    else:
        assert any(
            line.startswith("redis   skipped: redis-server is not installed") for line in lines
        )
    assert not any(line.startswith("!!") for line in lines), text


def test_without_redis_server_the_redis_rows_say_they_were_skipped_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = io.StringIO()
    tiny = attrs.evolve(QUICK, resume_events=512, viewers=10)
    assert bench_store(tiny, stores=["redis"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert "redis: skipped: redis-server is not installed" in lines[1]
    skipped = [line for line in lines if line.startswith("redis   skipped: ")]
    assert len(skipped) == 4  # one per section
    assert all("apt-get install redis-server" in line for line in skipped)
    assert "no durable store measured" in out.getvalue()


def test_bench_store_refuses_an_unknown_store_and_sizes_out_of_range() -> None:
    out = io.StringIO()
    assert bench_store(QUICK, stores=["postgres"], out=out) == 2
    assert "--stores takes a comma-separated subset of memory,sqlite,redis" in out.getvalue()
    with pytest.raises(ValueError, match="viewers"):
        StoreBenchSizes(**{**attrs.asdict(QUICK), "viewers": 0})
    with pytest.raises(ValueError, match="events"):
        attrs.evolve(QUICK, events=10)
