"""One delegation through a whole engine, and reading what its run journaled.

`delegate` runs one delegation in an engine of its own and returns the result with the run's
journal; `raw_delegate` does it against the raw A2A server (`tools.peers.raw_a2a`), for wire
cases the real SDK server cannot produce. `journal_so_far` reads a run's journal while the run
may still be open; `whole_journal` reads it to the end once the run is closed.
"""

from __future__ import annotations

from typing import Any

import trio

from engine import AgentSpec, DelegationRequest, DelegationResult, Engine, JournalEntry
from tests.helpers.agents import a2a_agent
from tests.helpers.events import events_of
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a

#: What a delegation asks for unless a test says otherwise.
OBJECTIVE = "Summarize the design."


async def journal_so_far(eng: Engine, run_id: str) -> list[JournalEntry]:
    """The run's journal up to its head now (the run may still be open: no waiting for more)."""
    journal = eng.journal(run_id)
    assert journal is not None
    head = journal.head
    out: list[JournalEntry] = []
    if head == 0:
        return out
    async with journal.subscribe() as sub:
        async for entry in sub:
            out.append(entry)
            if entry.cursor >= head:
                break
    return out


async def whole_journal(eng: Engine, run_id: str) -> list[JournalEntry]:
    """The journal of a closed run, to its end."""
    journal = eng.journal(run_id)
    assert journal is not None
    async with journal.subscribe() as sub:
        return [entry async for entry in sub]


async def delegate(agent: AgentSpec, **request: Any) -> tuple[DelegationResult, list[JournalEntry]]:
    """One delegation to `agent` (`request`: the `DelegationRequest`'s fields, the objective
    `OBJECTIVE` unless given) in a run of its own engine; the result and the run's whole journal.
    The agent's target is closed after."""
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(
                DelegationRequest(**{"agent": agent.key, "objective": OBJECTIVE, **request})
            )
        entries = await whole_journal(eng, run.run_id)
    await agent.target.aclose()
    return result, entries


async def delegate_for_events(
    agent: AgentSpec, **request: Any
) -> tuple[DelegationResult, list[Any]]:
    """`delegate`, with the delegation's own events instead of the whole journal."""
    result, entries = await delegate(agent, **request)
    return result, events_of(entries, result.delegation_id)


async def raw_delegate(
    nursery: trio.Nursery, scenario: RawScenario, **policy: Any
) -> tuple[DelegationResult, list[JournalEntry]]:
    """`delegate` to the raw A2A server playing `scenario` (started in `nursery`)."""
    await nursery.start(serve_raw_a2a, scenario)
    return await delegate(a2a_agent(scenario.card_url, **policy))
