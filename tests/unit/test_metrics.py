"""The engine's counters (`engine._stats`, `Engine.statistics()`) and the Prometheus collector
over them (`web.metrics`): they move as runs and delegations end, and every label value comes
from the registry or the engine's own enumerations, whatever a parent or a remote sent."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from engine import (
    DelegationError,
    DelegationEvent,
    DelegationRequest,
    Engine,
    ErrorCode,
    JournalEntry,
    Kind,
    MemoryJournalStore,
    RunJournal,
)
from engine._lanes import EVENT_OVERHEAD
from engine._stats import viewer_totals
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, finished, started
from web.metrics import Metrics, ViewerCount

HOSTILE = 'evil"} 1\nsubagent_engine_runs_started_total 99'


def request(agent: str, **fields: Any) -> DelegationRequest:
    return DelegationRequest(agent=agent, objective="do it", **fields)


def scrape(metrics: Metrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> sorted labels -> value, from the text exposition."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    text = metrics.exposition().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def label_values(metrics: Metrics) -> set[str]:
    text = metrics.exposition().decode()
    return {
        value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        for value in sample.labels.values()
    }


async def test_counters_move_as_runs_and_delegations_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ok = ScriptedTarget(start=[[started(), finished("done")]])
    bad = ScriptedTarget(start=[[DelegationError(code=ErrorCode.REMOTE_FAILED, message="no")]])
    engine = Engine([spec(ok, key="ok"), spec(bad, key="bad")])
    async with engine:
        before = engine.statistics()
        assert (before.runs_started, before.runs_active, before.delegations_ended) == (0, 0, {})
        async with engine.open_run(run_id="run-a") as run:
            await run.delegate(request("ok"))
            await run.delegate(request("bad"))
            unknown = await run.delegate(request(HOSTILE))
            assert unknown.error is not None
            during = engine.statistics()
            assert (during.runs_started, during.runs_active) == (1, 1)
            assert during.runs_ended == {}
        after = engine.statistics()
    assert after.runs_started == 1 and after.runs_active == 0
    assert after.runs_ended == {"finished": 1}
    assert after.delegations_active == 0
    assert after.delegations_ended == {
        ("ok", "completed", "none"): 1,
        ("bad", "failed", "remote_failed"): 1,
        ("other", "failed", "agent_not_found"): 1,
    }
    assert after.journal_events >= during.journal_events > 0
    assert after.store_appends > 0 and after.store_errors == 0
    assert after.agents == {"ok", "bad"}


async def test_an_error_code_no_one_defined_is_counted_as_other() -> None:
    odd = ScriptedTarget(start=[[DelegationError(code="x" * 300, message="odd")]])
    async with Engine([spec(odd, key="odd")]) as engine, engine.open_run() as run:
        result = await run.delegate(request("odd"))
        assert result.error is not None and result.error.code == "x" * 300
    assert engine.statistics().delegations_ended == {("odd", "failed", "other"): 1}


async def test_a_cancelled_run_counts_its_remote_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with Engine([spec(target, key="slow")]) as engine, engine.open_run() as run:
        run.start_delegation(request("slow"))
        await trio.sleep(1)
        assert engine.statistics().delegations_active == 1
        run.cancel("stop")
    stats = engine.statistics()
    assert stats.runs_ended == {"cancelled": 1}
    assert stats.remote_cancels == {"confirmed": 1}
    assert stats.delegations_ended == {("slow", "cancelled", "cancelled"): 1}


async def test_the_exposition_names_each_metric_with_closed_labels(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ok = ScriptedTarget(start=[[started(), finished("done")]])
    engine = Engine([spec(ok, key="ok")])
    metrics = Metrics(engine)
    async with engine:
        async with engine.open_run() as run:
            await run.delegate(request("ok"))
            await run.delegate(request(HOSTILE))
        # What a later engine change might record unchecked: the collector closes it again.
        engine.stats.delegations_ended["ghost", "weird", "made_up"] += 2
        engine.stats.runs_ended["exploded"] += 1
        engine.stats.remote_cancels["maybe"] += 1
        found = scrape(metrics)
    assert found["subagent_engine_runs_started_total"] == {(): 1}
    assert found["subagent_engine_runs_ended_total"] == {
        (("outcome", "finished"),): 1,
        (("outcome", "failed"),): 0,
        (("outcome", "cancelled"),): 0,
        (("outcome", "other"),): 1,
    }
    assert found["subagent_engine_runs_active"] == {(): 0}
    assert found["subagent_engine_delegations_active"] == {(): 0}
    ended = found["subagent_engine_delegations_ended_total"]
    assert ended == {
        (("agent", "ok"), ("error_code", "none"), ("status", "completed")): 1,
        (("agent", "other"), ("error_code", "agent_not_found"), ("status", "failed")): 1,
        (("agent", "other"), ("error_code", "other"), ("status", "other")): 2,
    }
    assert found["subagent_engine_remote_cancels_total"][(("outcome", "other"),)] == 1
    assert found["subagent_engine_viewers_active"] == {
        (("transport", "sse"),): 0,
        (("transport", "ws"),): 0,
    }
    assert found["subagent_engine_journal_events_total"][()] > 0
    for name in ("journal_gaps_total", "journal_folds_total", "store_errors_total"):
        assert found[f"subagent_engine_{name}"] == {(): 0}
    assert found["subagent_engine_store_appends_total"][()] > 0
    assert found["subagent_engine_viewer_buffer_bytes"] == {(): 0}
    values = label_values(metrics)
    assert HOSTILE not in values and "ghost" not in values and "made_up" not in values
    assert HOSTILE not in metrics.exposition().decode()


async def test_a_viewer_buffer_is_read_at_the_scrape(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    engine = Engine([spec(target, key="slow")])
    metrics = Metrics(engine)
    async with engine, engine.open_run() as run:
        journal = engine.journal(run.run_id)
        assert journal is not None
        viewer = journal.subscribe(0)
        await viewer.receive_batch()  # caught up: live appends now wait in its buffer
        run.start_delegation(request("slow"))
        await trio.sleep(1)
        assert scrape(metrics)["subagent_engine_viewer_buffer_bytes"][()] > 0
        viewer.close()
        assert scrape(metrics)["subagent_engine_viewer_buffer_bytes"][()] == 0
        run.cancel()


def _event(kind: str, delegation: str | None = None, **fields: Any) -> DelegationEvent:
    if delegation is not None:
        fields.update(agent_key="a", agent_name="A", protocol="a2a")
    return DelegationEvent(kind=kind, run_id="run-1", delegation_id=delegation, **fields)


async def _append(journal: RunJournal, events: list[DelegationEvent]) -> None:
    await journal.append_entries([JournalEntry(e) for e in events])


async def test_folds_and_gaps_count_what_viewers_were_given_and_stay_when_they_leave(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = RunJournal("run-1", store=MemoryJournalStore("run-1", max_events=3))
    await _append(journal, [_event(Kind.RUN_STARTED), _event(Kind.STARTED, "d1")])
    # Under pressure from the second status on: the repeats fold into one.
    slow = journal.subscribe(after=journal.head, max_buffer_bytes=2 * EVENT_OVERHEAD)
    with trio.move_on_after(1):
        await slow.receive_batch()
    statuses = [_event(Kind.STATUS, "d1", status="working") for _ in range(3)]
    await _append(journal, statuses)
    assert viewer_totals(journal)[1] == 2
    slow.close()
    assert viewer_totals(journal)[:2] == (0, 2)  # the viewer left; its folds stay counted
    await _append(journal, [_event(Kind.STATUS, "d1", status="working") for _ in range(5)])
    # A late viewer from the start: the store's window (3 entries) lost statuses.
    late = journal.subscribe(0)
    got = await late.receive_batch()
    gaps = [e for e in got if e.event.kind == Kind.GAP]
    assert gaps
    # It catches up behind: its own repeats fold too.
    folded = sum(
        e.event.dropped.count
        for e in got
        if e.event.dropped is not None and e.event.dropped.reason == "status_folded"
    )
    assert folded > 0
    late.close()
    assert viewer_totals(journal) == (len(gaps), 2 + folded, 0)


class _Stream:
    """An ASGI app answering with a response of `content_type`, held open until `release`."""

    def __init__(self, content_type: bytes, status: int = 200) -> None:
        self.content_type = content_type
        self.status = status
        self.release = trio.Event()
        self.started = trio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
        else:
            headers = [(b"content-type", self.content_type)]
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
        self.started.set()
        await self.release.wait()


async def _noop(message: Any) -> None:
    pass


async def _nothing() -> Any:
    return {}


@pytest.mark.parametrize(
    ("kind", "content_type", "status", "counted"),
    [
        ("http", b"text/event-stream", 200, "sse"),
        ("http", b"application/json", 200, None),
        ("http", b"text/event-stream", 401, None),
        ("websocket", b"", 101, "ws"),
    ],
)
async def test_viewer_count_follows_each_stream_while_it_is_served(
    kind: str, content_type: bytes, status: int, counted: str | None
) -> None:
    app = _Stream(content_type, status)
    viewers = ViewerCount(app)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(viewers, {"type": kind, "path": "/x"}, _nothing, _noop)
        await app.started.wait()
        expected = {"sse": 0, "ws": 0}
        if counted is not None:
            expected[counted] = 1
        assert viewers.active == expected
        app.release.set()
    assert viewers.active == {"sse": 0, "ws": 0}
