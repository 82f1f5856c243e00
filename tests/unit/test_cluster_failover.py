"""When a node of a shared store counts another as lost (`web.cluster`): only once it has seen
it without a lease for a whole lease period, never on one look (a Redis restarted empty loses
the leases of nodes that are well, which renew them within a third of a lease).

A scripted archive stands in for Redis, under `trio.testing.MockClock`: the looks and the
lease periods run instantly."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from engine import MemoryRunArchive, RunRecord
from engine._stats import EngineStats
from engine._tracing import Tracing
from web.cluster import _watch_lost_nodes

LEASE = 2.0


class ScriptedLeases(MemoryRunArchive):
    """A shared archive whose `lost_nodes` answers what `unleased(now)` says; records claims."""

    def __init__(self, unleased: Callable[[float], list[str]]) -> None:
        super().__init__(node="node-a")
        self.lease_seconds = LEASE
        self.unleased = unleased
        self.claims: list[tuple[float, str]] = []

    async def lost_nodes(self) -> list[str]:
        return self.unleased(trio.current_time())

    async def claim_node(self, node: str, hold: float) -> bool:
        self.claims.append((trio.current_time(), node))
        return True


def _host() -> Any:
    engine = SimpleNamespace(
        registry=[],
        clock=trio.current_time,
        retention_policy=None,
        stats=EngineStats(),
        tracing=Tracing(),
    )
    return SimpleNamespace(engine=engine)


async def _watch(archive: ScriptedLeases, seconds: float) -> None:
    await archive.open_run(RunRecord(run_id="run-1", started_at=0.0, node="node-b"))
    with trio.move_on_after(seconds):
        await _watch_lost_nodes(_host(), archive)  # type: ignore[arg-type]


def test_a_node_whose_lease_is_missing_briefly_is_not_lost() -> None:
    # node-b's lease is missing for 1.5 s (less than a lease: it renewed once Redis was back).
    archive = ScriptedLeases(lambda now: ["node-b"] if 10 <= now < 11.5 else [])
    trio.run(_watch, archive, 30.0, clock=trio.testing.MockClock(autojump_threshold=0))
    assert archive.claims == []


def test_a_node_without_a_lease_for_a_whole_lease_is_claimed_once_that_long() -> None:
    archive = ScriptedLeases(lambda now: ["node-b"] if now >= 10 else [])
    trio.run(_watch, archive, 30.0, clock=trio.testing.MockClock(autojump_threshold=0))
    first_claim = archive.claims[0][0]
    assert 10 + LEASE <= first_claim <= 10 + LEASE + LEASE / 2
    assert {node for _, node in archive.claims} == {"node-b"}


def test_a_failed_look_starts_the_series_again() -> None:
    # Missing from 10 s on, but the look at 11 s fails: counting starts again at the next one.
    class FailingOnce(ScriptedLeases):
        async def lost_nodes(self) -> list[str]:
            if trio.current_time() == 11.0:
                raise OSError("Redis is unavailable")
            return await super().lost_nodes()

    archive = FailingOnce(lambda now: ["node-b"] if now >= 10 else [])
    trio.run(_watch, archive, 30.0, clock=trio.testing.MockClock(autojump_threshold=0))
    assert archive.claims[0][0] >= 12 + LEASE
