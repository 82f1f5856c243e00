"""One MCP endpoint holds hundreds of runs at once: one listener, many runs.

One `DelegationEndpoint`, one `Engine`, `RUNS` runs open together, each with its own official
mcp client session (as each run's parent CLI would have), each with one `delegate_to_agent`
call in flight at the same time: every agent waits until all of them have started. Each call
carries its own `claudecode/toolUseId`; each result, each run's journal and the endpoint's
counters must show that no run saw another's call.

Connections are opened at most `CONNECTING` at a time (the sessions, then the calls: the
official client opens a new connection for every `tools/call`). The endpoint's listen backlog
(`EndpointSettings.backlog`, 1024) takes far larger bursts; pacing keeps this test about how the
endpoint holds runs, not about the kernel's accept queue.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import DelegationEndpoint
from engine import AgentSpec, Engine, EngineLimits, Kind, Run, Status
from tests.helpers.mcp_endpoint import mcp_session

#: Runs open at once (each with its own session and one call in flight).
RUNS = 200
#: Connections being opened at once: below the listen backlog (see the module docstring).
CONNECTING = 25
#: The whole test; it takes about 10 s on a 2-core machine.
DEADLINE = 60.0


async def test_one_endpoint_holds_hundreds_of_runs_each_with_its_own_call() -> None:
    all_started = trio.Event()
    started = 0

    async def agent(task: LocalTask) -> str:
        nonlocal started
        started += 1
        if started == RUNS:
            all_started.set()
        await all_started.wait()  # every call is in flight before any returns
        return f"done: {task.objective}"

    all_open, all_answered = trio.Event(), trio.Event()
    opened = answered = 0
    connecting = trio.Semaphore(CONNECTING)
    results: dict[int, Any] = {}
    journals: dict[int, list[Any]] = {}
    run_ids: dict[int, str] = {}
    in_flight_seen: list[int] = []

    async def parent(n: int, endpoint: DelegationEndpoint, eng: Engine) -> None:
        nonlocal opened, answered
        async with eng.open_run() as run, AsyncExitStack() as stack:
            run_ids[n] = run.run_id
            async with connecting:
                session = await stack.enter_async_context(mcp_session(run.endpoint))
            opened += 1
            if opened == RUNS:
                all_open.set()
            await all_open.wait()
            # Hold a connecting slot until this call's delegation has started (its POST is
            # connected and read), so at most CONNECTING connects are pending.
            async with trio.open_nursery() as nursery, connecting:
                nursery.start_soon(call, n, session)
                await _delegation_started(run)
            answered += 1
            if answered == RUNS:
                all_answered.set()
            await all_answered.wait()  # every run stays open until every call returned
            stored = await run.journal.store.read_after(0, run.journal.head)
            journals[n] = [entry.event for entry in stored]

    async def call(n: int, session: Any) -> None:
        results[n] = await session.call_tool(
            "delegate_to_agent",
            {"agent": "worker", "objective": f"task {n}"},
            meta={"claudecode/toolUseId": f"toolu_{n:04d}"},
        )

    limits = EngineLimits(max_concurrent_global=RUNS, retained_closed_runs=RUNS)
    spec = AgentSpec(key="worker", target=InProcessTarget(agent))
    failure = None
    try:
        with trio.fail_after(DEADLINE):
            async with (
                DelegationEndpoint().serve() as endpoint,
                Engine([spec], limits=limits, endpoints=endpoint) as eng,
            ):
                async with trio.open_nursery() as nursery:
                    for n in range(RUNS):
                        nursery.start_soon(parent, n, endpoint, eng)
                    await all_open.wait()
                    assert endpoint.open_runs == RUNS
                    await all_started.wait()
                    in_flight_seen.append(endpoint.calls_in_flight)
                assert endpoint.open_runs == 0
                assert endpoint.calls_in_flight == 0
                assert endpoint.refused_requests == 0
                assert endpoint.calls_cancelled_by_disconnect == 0

    except (BaseExceptionGroup, trio.TooSlowError) as exc:
        # Hundreds of sessions fail together when one thing goes wrong (or the deadline ends
        # them all); a flat summary keeps the report readable: pytest would walk every nested
        # traceback of the group, for minutes.
        failure = _summary(exc)
    if failure is not None:  # raised here, the group is not even its context
        raise AssertionError(failure)

    assert in_flight_seen == [RUNS]
    assert sorted(results) == list(range(RUNS))
    for n, result in results.items():
        structured = result.structured_content
        assert not result.is_error, structured
        assert structured["status"] == Status.COMPLETED
        assert structured["run_id"] == run_ids[n]
        assert structured["parent_tool_call_id"] == f"toolu_{n:04d}"
        assert structured["output"]["text"].endswith(f"done: task {n}")
        mine = [e for e in journals[n] if e.delegation_id is not None]
        assert {e.delegation_id for e in mine} == {structured["delegation_id"]}
        assert {e.parent_tool_call_id for e in mine} == {f"toolu_{n:04d}"}
        assert {e.run_id for e in journals[n]} == {run_ids[n]}
        assert [e.kind for e in mine].count(Kind.STARTED) == 1
        assert mine[-1].kind == Kind.FINISHED
        assert len(eng.results(run_ids[n])) == 1


async def _delegation_started(run: Run) -> None:
    """Until the run has a delegation (the endpoint has read the call and started it)."""
    async with run.events() as subscription:
        async for entry in subscription:
            if entry.event.kind == Kind.STARTED and entry.event.delegation_id is not None:
                return


def _summary(exc: BaseException) -> str:
    """What failed: the exception, and the leaves of the group it holds or came from (how
    many, by type, and the first few)."""
    group = exc if isinstance(exc, BaseExceptionGroup) else exc.__context__
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group] if group is not None else []
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    kinds: dict[str, int] = {}
    for leaf in leaves:
        kinds[type(leaf).__name__] = kinds.get(type(leaf).__name__, 0) + 1
    return f"{exc!r}: {len(leaves)} failures {kinds}; first: {leaves[:3]!r}"
