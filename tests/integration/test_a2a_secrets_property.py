"""Property: an A2A agent's credential never reaches events, results or logs, whatever the remote
echoes back and wherever (status text, artifact names and text, failure messages, ids)."""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, DelegationRequest, Engine, to_json
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a, status_frame, task_frame

SECRET = "SKLIVEQWERTYUIOP"  # uppercase only: the filler alphabet below cannot form it by chance
filler = st.text(alphabet="abcdefgh -:", max_size=12)


def with_secret(where: st.DrawFn) -> str:
    return where(filler) + SECRET + where(filler)


@st.composite
def frames(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [task_frame("t1", "TASK_STATE_WORKING")]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["status", "artifact", "text"]))
        if kind == "status":
            out.append(status_frame("t1", "TASK_STATE_WORKING", with_secret(draw)))
        else:
            name = "assistant-output" if kind == "text" else with_secret(draw)
            out.append(
                {
                    "artifactUpdate": {
                        "taskId": "t1",
                        "contextId": "ctx-raw",
                        "artifact": {
                            "artifactId": draw(st.sampled_from(["a1", "a2"])),
                            "name": name,
                            "parts": [{"text": with_secret(draw)}],
                        },
                        "append": False,
                        "lastChunk": True,
                    }
                }
            )
    end = draw(
        st.sampled_from(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"])
    )
    out.append(status_frame("t1", end, with_secret(draw)))
    return out


async def scenario(stream: list[dict[str, Any]]) -> list[str]:
    raw = RawScenario(stream=stream)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_raw_a2a, raw)
        config = A2AAgentConfig(
            card_url=raw.card_url, auth_header=("Authorization", f"Bearer {SECRET}")
        )
        target = A2ATarget(config)
        agent = AgentSpec(key="remote", protocol="a2a", target=target, secrets=config.secrets)
        async with Engine([agent]) as eng:
            async with eng.open_run() as run:
                result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
            journal = eng.journal(run.run_id)
            assert journal is not None
            async with journal.subscribe() as sub:
                documents = [to_json(entry.event) async for entry in sub]
        await target.aclose()
        nursery.cancel_scope.cancel()
    # The remote really did send the secret back to us (else the property is vacuous).
    assert raw.headers[1].get("authorization") == f"Bearer {SECRET}"
    return [*documents, to_json(result)]


@settings(max_examples=25, deadline=None)
@given(frames())
def test_secret_never_leaves_the_engine(stream: list[dict[str, Any]]) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("subagent_engine")
    logger.addHandler(handler)
    try:
        documents = trio.run(scenario, stream)
    finally:
        logger.removeHandler(handler)
    assert documents
    for document in documents:
        assert SECRET not in document
    for record in records:
        assert SECRET not in record.getMessage()


def test_a_targets_own_credentials_are_redacted_even_if_the_host_forgot_them() -> None:
    config = A2AAgentConfig(card_url="http://127.0.0.1:1/card", auth_header=("X-Key", SECRET))
    agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))  # no secrets=
    assert SECRET in agent.all_secrets
