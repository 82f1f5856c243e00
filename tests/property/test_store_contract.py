"""The store conformance kit (`engine.testing.check_journal_store`): the engine's store passes
it, in every form a factory may take, and stores that break a rule of the contract fail it.

The broken stores are realistic mistakes a durable store could make: keeping only starts and
terminals beyond the window, an off-by-one gap, ignoring the window's byte bound or the cap on
what is retained, answering with more entries than asked, forgetting that a terminal closes
what its delegation held open. Their runs use a derandomized hypothesis without shrinking, so
they are deterministic and quick.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import hypothesis
import pytest
import trio
from hypothesis import Phase
from hypothesis import strategies as st

from engine import (
    DelegationEvent,
    JournalEntry,
    Kind,
    LifecycleRetention,
    MemoryJournalStore,
    RetentionPolicy,
    event_from_json,
    gap_entry,
    to_json,
)
from engine.testing import (
    JournalStoreContractError,
    StoreFactory,
    check_journal_store,
    check_journal_store_sync,
)
from engine.testing._store_kit import _events, _Reference

#: Broken stores: no shrinking (a failure is all these tests want), the same examples each run.
QUICK_FAILURE = hypothesis.settings(
    database=None, derandomize=True, phases=[Phase.explicit, Phase.generate]
)


async def test_the_memory_store_follows_the_store_contract() -> None:
    await check_journal_store(MemoryJournalStore.from_policy, max_examples=100)


def test_the_kit_runs_outside_trio() -> None:
    check_journal_store_sync(MemoryJournalStore.from_policy, max_examples=10)


async def test_a_factory_may_be_an_async_context_manager_or_awaitable() -> None:
    opened = closed = 0

    @asynccontextmanager
    async def managed(run_id: str, policy: RetentionPolicy) -> AsyncIterator[MemoryJournalStore]:
        nonlocal opened, closed
        await trio.lowlevel.checkpoint()  # async setup, as a database connection would need
        opened += 1
        try:
            yield MemoryJournalStore.from_policy(run_id, policy)
        finally:
            closed += 1

    async def awaited(run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
        await trio.lowlevel.checkpoint()
        return MemoryJournalStore.from_policy(run_id, policy)

    await check_journal_store(managed, max_examples=10)
    assert opened == closed > 10  # the explicit examples, then the scenarios
    await check_journal_store(awaited, max_examples=10)


class ReferenceStore:
    """The kit's reference model as a store, to hold it to the examples' written answers."""

    def __init__(self, run_id: str, policy: RetentionPolicy) -> None:
        self.model = _Reference(run_id, policy)

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        self.model.append(entries)

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return self.model.read_after(cursor, max_entries)


async def test_the_reference_model_gives_the_examples_written_answers() -> None:
    await check_journal_store(ReferenceStore, max_examples=0)


# -- broken stores ---------------------------------------------------------------------------


class _StartsAndTerminalsOnly(LifecycleRetention):
    """Keeps beyond the window only starts, terminals and input requests: no message, tool
    call or nested subagent can be rebuilt by a viewer resuming behind the window."""

    def retains(self, event: DelegationEvent) -> bool:
        return event.kind in {
            Kind.STARTED,
            Kind.INPUT_REQUIRED,
            Kind.INPUT_CLOSED,
            Kind.RUN_STARTED,
        } or (event.is_terminal)


def loses_lifecycle_entries(run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
    store = MemoryJournalStore.from_policy(run_id, policy)
    store._retention = _StartsAndTerminalsOnly()
    return store


class OffByOneGaps(MemoryJournalStore):
    """Reports a stretch of missing cursors as starting one cursor late."""

    def read_after_nowait(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        out = super().read_after_nowait(cursor, max_entries)
        for index, entry in enumerate(out):
            report = entry.event.dropped
            if entry.event.kind == Kind.GAP and report is not None and report.count > 1:
                first, last = report.first_cursor, report.last_cursor
                assert first is not None and last is not None
                out[index] = gap_entry(self.run_id, first + 1, last)
        return out


class ReadsPastTheLimit(MemoryJournalStore):
    """Finishes the stretch before the window whatever `max_entries` says."""

    def read_after_nowait(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return super().read_after_nowait(cursor, max_entries + 1)


def ignores_the_byte_bound(run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
    return MemoryJournalStore(
        run_id, max_events=policy.max_events, max_retained_critical=policy.max_retained
    )


def retains_without_a_cap(run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
    return MemoryJournalStore(run_id, max_events=policy.max_events, max_bytes=policy.max_bytes)


BROKEN: dict[str, StoreFactory] = {
    "loses lifecycle entries": loses_lifecycle_entries,
    "reports a wrong gap": OffByOneGaps.from_policy,
    "reads past max_entries": ReadsPastTheLimit.from_policy,
    "ignores the byte bound": ignores_the_byte_bound,
    "retains without a cap": retains_without_a_cap,
}


@pytest.mark.parametrize("name", sorted(BROKEN))
async def test_scenarios_alone_reject_a_broken_store(name: str) -> None:
    with pytest.raises(JournalStoreContractError):
        await check_journal_store(
            BROKEN[name], examples=False, max_examples=100, settings=QUICK_FAILURE
        )


class _KeepsWhatTerminalsClose(LifecycleRetention):
    """Never forgets what a terminal closed, so a message that carries on after its delegation
    ended is not kept from its first event again."""

    def retains(self, event: DelegationEvent) -> bool:
        if event.is_terminal or event.kind in Kind.NESTED_TERMINALS:
            return True
        return super().retains(event)


def keeps_what_terminals_close(run_id: str, policy: RetentionPolicy) -> MemoryJournalStore:
    store = MemoryJournalStore.from_policy(run_id, policy)
    store._retention = _KeepsWhatTerminalsClose()
    return store


@pytest.mark.parametrize("name", [*sorted(BROKEN), "keeps what terminals close"])
async def test_the_examples_alone_reject_a_broken_store(name: str) -> None:
    factory = BROKEN.get(name, keeps_what_terminals_close)
    with pytest.raises(JournalStoreContractError) as failure:
        await check_journal_store(factory, max_examples=0)
    assert "breaks the store contract" in str(failure.value)


async def test_a_failure_names_the_read_and_the_difference() -> None:
    with pytest.raises(JournalStoreContractError) as failure:
        await check_journal_store(OffByOneGaps.from_policy, max_examples=0)
    message = str(failure.value)
    assert "read_after(" in message
    assert "expected:" in message and "got:" in message
    assert "gap[" in message


async def test_a_store_that_follows_only_some_policies_is_checked_under_those() -> None:
    # A store with a window nothing leaves (the seam test's RecordingStore is one).
    unbounded = RetentionPolicy(max_events=1 << 40, max_bytes=1 << 40)
    await check_journal_store(
        lambda run_id, policy: MemoryJournalStore.from_policy(run_id, unbounded),
        examples=False,
        max_examples=20,
        policies=st.just(unbounded),
    )
    with pytest.raises(JournalStoreContractError):  # ... and only those
        await check_journal_store(
            lambda run_id, policy: MemoryJournalStore.from_policy(run_id, unbounded),
            examples=False,
            max_examples=100,
            settings=QUICK_FAILURE,
        )


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(st.data())
def test_the_kits_events_survive_the_wire(data: st.DataObject) -> None:
    # A durable store that serializes entries with the engine's wire format gets them back
    # equal, as the kit compares them.
    event = data.draw(_events(data.draw))
    assert event_from_json(to_json(event)) == event
