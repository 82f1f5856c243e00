"""Regression tests for what the soak found (web/soak.py).

Finding 1 (seed 7, `subagent-engine soak --minutes 2 --seed 7`, run soak-7-65): a delegation to
an A2A agent that is cancelled a few milliseconds after it started, while its
SendStreamingMessage is in flight, ends `cancelled` with `remote_cancel="confirmed"` and no
`remote_task_id`, but the remote had accepted the message and created the task: no CancelTask
is ever sent and the remote task keeps WORKING forever (cancellation must reach the remote
task, or the result must say `cancel_pending`). Cause:
`adapters/a2a/_target.py`, `_A2ASession.cancel()`: `if self.task_id is None: return True
# nothing was accepted remotely`, although the engine had already sent the task
(`engine/_actors.py` `_cancel_remote` only asks because `_sent_task` is true).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, DelegationPolicy, DelegationRequest, Engine, RemoteCancel
from tools.soak import _FaultServer

DELEGATIONS = 60


async def _cancel_right_after_start(port: int) -> list[str]:
    config = A2AAgentConfig(
        card_url=f"http://127.0.0.1:{port}/agents/hang/.well-known/agent-card.json",
        forward_identity=True,
    )
    target = A2ATarget(config)
    spec = AgentSpec(
        key="hang",
        protocol="a2a",
        target=target,
        policy=DelegationPolicy(cancel_timeout=1.0, cancel_retry_window=0.0),
    )
    results: list[Any] = []
    try:
        async with Engine([spec]) as eng:
            for n in range(DELEGATIONS):
                async with eng.open_run() as run:
                    run.start_delegation(DelegationRequest(agent="hang", objective="wait"))
                    await trio.sleep((n % 10) / 1000)  # 0-9 ms: the request is in flight
                    run.cancel("the parent gave up")
                results.extend(eng.results(run.run_id))
    finally:
        await target.aclose()
    async with httpx.AsyncClient(timeout=10.0) as http:
        log = (await http.get(f"http://127.0.0.1:{port}/_test/log")).json()["hang"]
    cancelled = {cancel["task_id"] for cancel in log["cancels"]}
    remote = {m["x_headers"].get("x-delegation-id"): m["task_id"] for m in log["messages"]}
    orphans = []
    for result in results:
        task_id = remote.get(result.delegation_id)
        if task_id and task_id not in cancelled and result.remote_cancel != RemoteCancel.PENDING:
            orphans.append(
                f"{result.delegation_id}: remote task {task_id} never got a CancelTask; result "
                f"{result.status}, remote_cancel {result.remote_cancel}, "
                f"remote_task_id {result.remote_task_id}"
            )
    return orphans


def test_a_delegation_cancelled_while_its_message_is_in_flight_cancels_the_remote_task() -> None:
    server = _FaultServer()
    try:
        orphans = trio.run(_cancel_right_after_start, server.port)
    finally:
        server.close()
    assert not orphans, f"{len(orphans)} of {DELEGATIONS} remote tasks orphaned:\n" + "\n".join(
        orphans[:10]
    )


# Finding 2 (fixed; seed 4242, `subagent-engine soak --minutes 1 --seed 4242`, runs
# soak-4242-28/64/67/92/...): an AG-UI viewer of `GET /runs/<id>/events` that reconnected with
# a `Last-Event-ID` older than the run's replay window got a `stream.gap` and then a stream
# whose encoder did not know what the viewer's first connection had open. Spliced at the resume
# point, the viewer's stream broke the AG-UI rules @ag-ui/client enforces: `open_at_finish`,
# `duplicate_start`. Cause: `web/server.py` `open_stream` replays `journal.store.read_after(0,
# after)` into a fresh encoder, and the entries before the window were gone. Fix: the store
# keeps, beyond the window, what opens and closes each message, reasoning message, tool call
# and nested subagent (`engine._journal._Lifecycles`); the property
# `test_a_viewer_resuming_after_the_window_moved_on_gets_a_valid_stream` covers every cut.

WINDOW = 24


async def _resume_after_the_window() -> list[Any]:
    from adapters.agui import check_frames, parse_sse
    from adapters.inprocess import InProcessTarget, LocalTask
    from engine import EngineLimits, JournalStore, MemoryJournalStore, Run
    from web.config import HostConfig
    from web.server import RunHost, create_app, default_encoder_factory, serve_app

    go = trio.Event()

    async def agent(task: LocalTask) -> str:
        message = await task.text_start()
        await task.text_delta("first ", message_id=message)
        await go.wait()
        for n in range(3 * WINDOW):  # the first connection's cursor leaves the window
            await task.text_delta(f"{n} ", message_id=message)
        await task.text_end(message)
        return "done"

    class Parent:
        async def run(self, run: Run, prompt: str) -> None:
            await run.delegate(DelegationRequest(agent="talker", objective="talk"))

    def store_factory(run_id: str, limits: EngineLimits) -> JournalStore:
        return MemoryJournalStore(run_id, max_events=WINDOW, max_bytes=1 << 20)

    limits = EngineLimits()
    spec = AgentSpec(key="talker", target=InProcessTarget(agent))
    async with (
        Engine([spec], limits=limits, store_factory=store_factory) as eng,
        trio.open_nursery() as nursery,
    ):
        host = RunHost(eng, nursery, Parent)
        app = create_app(
            host, HostConfig(source="<test>", limits=limits), default_encoder_factory()
        )
        async with serve_app(app) as base, httpx.AsyncClient(timeout=10.0) as http:
            started = (await http.post(f"{base}/runs", json={"messages": []})).json()
            url = f"{base}{started['events_url']}"
            auth = {"authorization": f"Bearer {started['viewer_token']}"}
            first = b""
            async with http.stream("GET", url, headers=auth) as response:
                async for chunk in response.aiter_bytes():
                    first += chunk
                    if b'"TEXT_MESSAGE_CONTENT"' in first and first.endswith(b"\n\n"):
                        break
            frames = parse_sse(first)
            last = max(cursor for cursor, _ in frames if cursor is not None)
            go.set()
            hosted = await host.find(started["run_id"], started["viewer_token"])
            await hosted.ended.wait()
            rest = await http.get(url, headers={**auth, "last-event-id": str(last)})
        nursery.cancel_scope.cancel()
    return check_frames(frames + parse_sse(rest.content))


@pytest.mark.filterwarnings("ignore:Exception ignored in.*:pytest.PytestUnraisableExceptionWarning")
def test_an_agui_viewer_resuming_after_the_replay_window_gets_a_valid_stream() -> None:
    violations = trio.run(_resume_after_the_window)
    assert not violations, "\n".join(str(v) for v in violations)
