"""The soak's short form: a fixed workload (fixed seed, fixed run count), then one random seed.

Each case runs `web.soak.run_soak` for a bounded number of runs (never a wall-clock budget), so
the same seed draws the same faults, cancel moments and viewer behaviours every time. A failure
prints the whole report, seed included: `subagent-engine soak --seed S --total N` replays it.
Both cases start their own fault server (tests/servers/a2a_faulty.py) as a child process.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine import DelegationEvent, JournalEntry, Kind, MemoryJournalStore, RunJournal
from web.soak import (
    SoakConfig,
    SoakReport,
    _account_viewer,
    _plan,
    _RecordingStore,
    _RunOutcome,
    _Viewer,
    run_soak,
)

#: The fixed workload: every fault kind is drawn at least once with this seed and run count.
FIXED_SEED = 20261202
FIXED_RUNS = 24
RANDOM_RUNS = 12
CONCURRENCY = 6
#: Finding 1 (a timing race, tests/soak/test_soak_findings.py) is reported, not failed on:
#: remove this once that xfail passes.
TOLERATE: frozenset[str] = frozenset()  # soak finding 1 is fixed: nothing is tolerated


def _check(report: SoakReport) -> None:
    assert report.ok, "the soak found problems:\n" + report.format()
    assert report.runs > 0 and report.delegations > 0 and report.events > 0, report.format()


def test_fixed_seed_soak_loses_nothing_and_leaks_nothing() -> None:
    report = run_soak(
        SoakConfig(seed=FIXED_SEED, runs=FIXED_RUNS, concurrency=CONCURRENCY, tolerate=TOLERATE)
    )
    _check(report)
    assert report.runs == FIXED_RUNS, report.format()
    assert report.parent_cancels > 0 and report.reconnects > 0, report.format()
    assert {"hang", "drop", "dup", "slowcancel", "input_answered", "talker"} <= set(
        report.faults
    ), report.format()


def test_random_seed_soak_loses_nothing_and_leaks_nothing() -> None:
    seed = random.SystemRandom().randrange(1 << 31)
    print(f"soak seed {seed} (replay: subagent-engine soak --seed {seed} --total {RANDOM_RUNS})")
    try:
        report = run_soak(
            SoakConfig(seed=seed, runs=RANDOM_RUNS, concurrency=CONCURRENCY, tolerate=TOLERATE)
        )
    except Exception as exc:  # pragma: no cover - the seed must survive any failure
        pytest.fail(f"soak seed {seed} raised {exc!r}")
    _check(report)


async def test_the_accounting_notices_every_kind_of_loss() -> None:
    """The soak's viewer accounting is only worth its zeros if it counts a real loss."""
    store = _RecordingStore(MemoryJournalStore("r"))
    journal = RunJournal("r", store=store)
    fields: dict[str, Any] = {"run_id": "r", "delegation_id": "d"}
    await journal.append(DelegationEvent(kind=Kind.RUN_STARTED, run_id="r"))
    await journal.append(DelegationEvent(kind=Kind.STARTED, **fields))
    for n in range(3):
        delta = DelegationEvent(kind=Kind.TEXT_DELTA, message_id="m", delta=f"<{n}>", **fields)
        await journal.append(delta)
    await journal.append(DelegationEvent(kind=Kind.STATUS, status="working", **fields))
    await journal.append(DelegationEvent(kind=Kind.FINISHED, **fields))
    await journal.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id="r"))

    def lost(entries: list[JournalEntry]) -> list[str]:
        viewer = _Viewer("v", "live", entries=entries, done=True)
        outcome = _RunOutcome(
            plan=_plan(SoakConfig(), 0),
            store=store,
            handles=[],
            objectives={},
            viewers=[viewer],
            results=[],
            cancelled=False,
        )
        report = SoakReport(seed=0)
        _account_viewer(outcome, viewer, report)
        return report.lost

    everything = list(store.accepted)
    assert lost(everything) == []
    for missing in range(1, len(everything)):  # a start, a delta, a status, a terminal
        kept = everything[:missing] + everything[missing + 1 :]
        assert lost(kept), f"losing cursor {everything[missing].cursor} went unnoticed"
