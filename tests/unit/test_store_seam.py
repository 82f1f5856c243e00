"""The journal's storage seam: a store of the host's own plugs in without touching actors.

The store here keeps everything (a window nothing leaves) and records each batch write, the way
a durable store (Redis Streams) would pipeline one write per batch. Everything the actors publish
must go through it, and a reader catching up must read it. It is a complete store for that one
policy, so the store conformance kit holds it to the contract under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from hypothesis import strategies as st

from engine import (
    DelegationRequest,
    Engine,
    EngineLimits,
    JournalEntry,
    Kind,
    RetentionPolicy,
    Status,
)
from engine.testing import check_journal_store
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, delta, finished, started


class RecordingStore:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.entries: list[JournalEntry] = []
        self.writes = 0
        self.reads = 0

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        await trio.lowlevel.checkpoint()  # a real store awaits its network
        assert [e.cursor for e in entries] == list(
            range(len(self.entries) + 1, len(self.entries) + 1 + len(entries))
        ), "cursors continue without holes"
        self.entries.extend(entries)
        self.writes += 1

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        return self.entries[cursor : cursor + max_entries]


async def test_a_custom_store_receives_every_entry_and_serves_replay() -> None:
    stores: dict[str, RecordingStore] = {}

    def factory(run_id: str, limits: EngineLimits) -> RecordingStore:
        stores[run_id] = RecordingStore(run_id)
        return stores[run_id]

    target = ScriptedTarget(start=[[started(), delta("a"), delta("b"), finished("done")]])
    async with Engine([spec(target)], store_factory=factory) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
        async with eng.journal(run.run_id).subscribe() as sub:  # type: ignore[union-attr]
            replayed = [entry async for entry in sub]
    store = stores[run.run_id]
    assert result.status == Status.COMPLETED
    assert store.writes >= 1 and store.reads >= 1
    assert [e.cursor for e in store.entries] == list(range(1, len(store.entries) + 1))
    assert store.entries[0].event.kind == Kind.RUN_STARTED
    assert store.entries[-1].event.kind == Kind.RUN_FINISHED
    assert [e.cursor for e in replayed][-1] == store.entries[-1].cursor
    text = "".join(e.event.delta or "" for e in replayed if e.event.kind == Kind.TEXT_DELTA)
    assert text == "ab"


async def test_the_recording_store_follows_the_store_contract_without_a_window() -> None:
    everything = RetentionPolicy(max_events=1 << 40, max_bytes=1 << 40)
    await check_journal_store(
        lambda run_id, policy: RecordingStore(run_id),
        examples=False,  # the examples need windows entries leave
        max_examples=25,
        policies=st.just(everything),
    )


class FailingStore(RecordingStore):
    async def append(self, entries: Sequence[JournalEntry]) -> None:
        await trio.lowlevel.checkpoint()
        raise OSError("disk full")


async def test_a_failing_store_does_not_take_the_run_or_engine_down() -> None:
    target = ScriptedTarget(start=[[started(), finished("done")]])
    eng = Engine([spec(target)], store_factory=lambda run_id, limits: FailingStore(run_id))
    async with eng, eng.open_run() as run:
        result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
    assert result.status == Status.COMPLETED
    assert run._actor.store_errors >= 1


async def test_live_readers_still_get_entries_the_store_failed_to_keep() -> None:
    from engine import DelegationEvent, RunJournal

    journal = RunJournal("r", store=FailingStore("r"))
    sub = journal.subscribe()
    await sub._catch_up()  # attach live before anything is appended
    for kind in (Kind.RUN_STARTED, Kind.RUN_FINISHED):
        try:
            await journal.append(DelegationEvent(kind=kind, run_id="r"))
        except OSError:
            pass
    assert [e.event.kind for e in await sub.receive_batch()] == [
        Kind.RUN_STARTED,
        Kind.RUN_FINISHED,
    ]
