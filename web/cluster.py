"""One server node among several sharing a Redis run store: its lease, failover, commands.

This module owns what a node does for the others while it serves (`run_node`, started by
`open_host` when the store is shared):

- it holds its lease in the store, renewed every third of `lease_seconds`, and gives it up
  when it stops cleanly;
- it watches for nodes whose lease lapsed while they still own live runs (a node killed, cut
  off or frozen) and stayed lapsed for a whole lease period (a Redis restarted empty loses
  the leases of nodes that are well); once it claimed such a node (one survivor does), it
  ends each of its runs as crash recovery does (`engine.recover_runs`, error `node_lost`): a
  journaled terminal per delegation and for the run, which the run's viewers on every node
  read, and the remote tasks cancelled from the ids the audit trail kept;
- it carries out the commands other nodes forward to it for the runs it owns: a viewer's stop
  (`{"op": "stop"}`) and answer (`{"op": "answer", "delegation_id", "text", "data",
  "question_id", "surface", "answered_by"}`).

A node that cannot reach the store keeps trying; if its lease lapses meanwhile, survivors end its
runs, and its own later writes to them are refused by the store (their runs are over).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import trio

from engine import DelegationError, Engine, ErrorCode, SharedRunArchive, recover_runs

__all__ = ["NodeHost", "run_node"]

log = logging.getLogger(__name__)

#: How long a command wait blocks before the loop looks again (seconds).
COMMAND_WAIT = 5.0


class NodeHost(Protocol):
    """What a node needs of the server's run host (`web.server.RunHost`)."""

    @property
    def engine(self) -> Engine: ...

    def local_run(self, run_id: str) -> Any: ...

    def stop(self, hosted: Any, reason: str) -> None: ...


async def run_node(
    host: NodeHost,
    archive: SharedRunArchive,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold this node's lease, end lost nodes' runs, and carry out forwarded commands, until
    cancelled (then the lease is given up)."""
    await archive.renew_lease()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_keep_lease, archive, name="lease")
            nursery.start_soon(_watch_lost_nodes, host, archive, name="failover")
            nursery.start_soon(_serve_commands, host, archive, name="commands")
            task_status.started()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            try:
                await archive.drop_lease()
            except OSError as exc:
                log.warning("could not give the lease up: %r", exc)


async def _keep_lease(archive: SharedRunArchive) -> None:
    while True:
        await trio.sleep(archive.lease_seconds / 3)
        try:
            await archive.renew_lease()
        except OSError as exc:
            log.warning("renewing this node's lease failed (retrying): %r", exc)


async def _watch_lost_nodes(host: NodeHost, archive: SharedRunArchive) -> None:
    """End the runs of nodes seen without a lease for a whole lease period.

    A lease missing once proves nothing: a Redis restarted empty (or failed over to a replica
    that had not the key yet) loses every lease at once, while the nodes behind them are well
    and renew within a third of a lease. Only a node seen without a lease at every look for
    `lease_seconds` has failed to renew for that long; ending the runs of one that did not
    would fail runs that are still running (and that their node goes on writing)."""
    engine = host.engine
    #: Node -> when this node first saw it without a lease, in an unbroken series of looks.
    unleased: dict[str, float] = {}
    while True:
        await trio.sleep(archive.lease_seconds / 2)
        try:
            now = trio.current_time()
            unleased = {node: unleased.get(node, now) for node in await archive.lost_nodes()}
            lost = [
                node for node, since in unleased.items() if now - since >= archive.lease_seconds
            ]
            for node in lost:
                if not await archive.claim_node(node, hold=_recovery_hold(engine, archive)):
                    continue
                ended = await recover_runs(
                    archive,
                    engine.registry,
                    clock=engine.clock,
                    reason=ErrorCode.NODE_LOST,
                    message=f"The server node {node!r} running this run stopped answering.",
                    node=node,
                    policy=engine.retention_policy,
                    tracing=engine.tracing,
                )
                engine.stats.recovered(ended)
                log.warning("node %s lost its lease: ended its %d live run(s)", node, len(ended))
        except OSError as exc:
            unleased.clear()  # the series of looks is broken: start it again
            log.warning("looking for lost nodes failed (retrying): %r", exc)


def _recovery_hold(engine: Engine, archive: SharedRunArchive) -> float:
    """How long a claim on a lost node must last to cover its recovery: each remote cancel is
    bounded by its agent's `cancel_timeout`, and the journal and result writes by a few store
    calls (a lease period each is ample), plus a margin."""
    longest_cancel = max((spec.policy.cancel_timeout for spec in engine.registry), default=0.0)
    return longest_cancel + 2 * archive.lease_seconds + 10.0


async def _serve_commands(host: NodeHost, archive: SharedRunArchive) -> None:
    while True:
        try:
            commands = await archive.next_commands(COMMAND_WAIT)
        except OSError as exc:
            log.warning("reading this node's commands failed (retrying): %r", exc)
            await trio.sleep(1.0)
            continue
        for command in commands:
            carry_out(host, command)


def carry_out(host: NodeHost, command: dict[str, Any]) -> None:
    """Do what another node forwarded for a run of this one (unknown runs and ops are logged
    and dropped: the run may have ended meanwhile)."""
    run_id = command.get("run_id")
    hosted = host.local_run(run_id) if isinstance(run_id, str) else None
    op = command.get("op")
    if hosted is None or hosted.run is None:
        log.info("forwarded %r for run %r: not a live run of this node", op, run_id)
        return
    if op == "stop":
        reason = command.get("reason")
        host.stop(hosted, reason if isinstance(reason, str) else "Stopped by a viewer.")
    elif op == "answer":
        delegation_id = command.get("delegation_id")
        text, data = command.get("text"), command.get("data")
        if not isinstance(delegation_id, str):
            return

        def label(key: str) -> str | None:
            value = command.get(key)
            return value if isinstance(value, str) else None

        try:
            hosted.run.answer(
                delegation_id,
                text=text if isinstance(text, str) else None,
                data=data if isinstance(data, dict) else None,
                question_id=label("question_id"),
                surface=label("surface") or "http",
                answered_by=label("answered_by"),
            )
        except DelegationError as exc:
            log.info("forwarded answer for %s/%s refused: %s", run_id, delegation_id, exc)
    else:
        log.info("forwarded command %r ignored", op)
