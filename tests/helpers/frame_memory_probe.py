"""The engine side of the frame-memory test, run in a fresh process so its peak RSS is its own.

    python -m tests.helpers.frame_memory_probe WARMUP_CARD_URL BIG_CARD_URL [MAX_FRAME_BYTES]

One small delegation first (warm-up: imports, pools, the SDK's lazy parts), then one to the agent
that sends the big frame; prints one JSON line: peak RSS (KiB, `ru_maxrss`) after each, the RSS
just before the big delegation and the peak during it (the kernel's high-water mark `VmHWM`,
reset first through `/proc/self/clear_refs`: `ru_maxrss` of a process started by another starts
at that parent's size, which can hide the growth being measured), the big delegation's status,
error code and remote cancel, and whether a third small delegation still worked (the run and the
target stay usable). Linux only.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, DelegationPolicy, DelegationRequest, Engine


def _agent(key: str, card_url: str, max_frame_bytes: int | None) -> AgentSpec:
    fields: dict[str, Any] = {"card_url": card_url}
    if max_frame_bytes is not None:
        fields["max_frame_bytes"] = max_frame_bytes
    return AgentSpec(
        key=key,
        target=A2ATarget(A2AAgentConfig(**fields)),
        policy=DelegationPolicy(cancel_retry_window=0),
    )


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (`VmRSS`, `VmHWM`), in KiB."""
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(f"{field}:"))


def _reset_peak() -> None:
    """Start the kernel's high-water mark (`VmHWM`) again from what is resident now."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


async def main(warmup_url: str, big_url: str, max_frame_bytes: int | None) -> dict[str, Any]:
    agents = [_agent("small", warmup_url, max_frame_bytes), _agent("big", big_url, max_frame_bytes)]
    async with Engine(agents) as eng, eng.open_run() as run:
        warm = await run.delegate(DelegationRequest(agent="small", objective="warm up"))
        before = _peak_kib()
        _reset_peak()
        rss_before = _status_kib("VmRSS")
        big = await run.delegate(DelegationRequest(agent="big", objective="send it all"))
        after = _peak_kib()
        peak_during = _status_kib("VmHWM")
        again = await run.delegate(DelegationRequest(agent="small", objective="still there?"))
    for agent in agents:
        await agent.target.aclose()
    return {
        "warmup_status": warm.status,
        "before_kib": before,
        "after_kib": after,
        "rss_before_kib": rss_before,
        "peak_during_kib": peak_during,
        "status": big.status,
        "code": big.error.code if big.error else None,
        "error_metadata": dict(big.error.metadata or {}) if big.error else None,
        "remote_cancel": big.remote_cancel,
        "remote_task_id": big.remote_task_id,
        "again_status": again.status,
    }


if __name__ == "__main__":
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
    print(json.dumps(trio.run(main, sys.argv[1], sys.argv[2], limit)))
