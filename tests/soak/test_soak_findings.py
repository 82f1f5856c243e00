"""Regression tests for what the soak found (web/soak.py).

Finding 1 (seed 7, `subagent-engine soak --minutes 2 --seed 7`, run soak-7-65): a delegation to
an A2A agent that is cancelled a few milliseconds after it started, while its
SendStreamingMessage is in flight, ends `cancelled` with `remote_cancel="confirmed"` and no
`remote_task_id`, but the remote had accepted the message and created the task: no CancelTask
is ever sent and the remote task keeps WORKING forever (000 §15: cancellation must reach the
remote task, or the result must say `cancel_pending`). Cause:
`adapters/a2a/_target.py`, `_A2ASession.cancel()`: `if self.task_id is None: return True
# nothing was accepted remotely`, although the engine had already sent the task
(`engine/_actors.py` `_cancel_remote` only asks because `_sent_task` is true).
"""

from __future__ import annotations

from typing import Any

import httpx
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, DelegationPolicy, DelegationRequest, Engine, RemoteCancel
from web.soak import _FaultServer

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
