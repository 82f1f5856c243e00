"""Every remote target we ship passes the target conformance kit (`engine.testing.check_target`)
against real servers: the A2A target against the a2a-sdk server (streaming and polling agents)
and the @a2a-js/sdk server, the AG-UI target against the AG-UI agent written with the official
`ag-ui-protocol` encoder. The kit's own tests, and the in-process target's run, are
tests/unit/test_target_kit.py.

Each harness says which of the peer's agents plays each scenario of the kit.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.agui import AguiAgentConfig, AguiTarget
from engine import Target
from engine.testing import Scenario, check_target
from tests.helpers import REPO_ROOT
from tests.helpers.processes import ready_server
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a

#: The a2a-sdk server's agents (tools/peers/a2a_faulty.py) for each scenario.
A2A_SDK_AGENTS: Mapping[str, str] = {
    Scenario.FINISH: "stream",
    Scenario.HANG: "hang",
    Scenario.ASK: "input",
    Scenario.DROP: "drop",
}


@attrs.define
class A2AHarness:
    """An A2A agent of `server` per scenario; `malformed_card_url` serves a malformed card."""

    server: Any
    agents: Mapping[str, str]
    malformed_card_url: str | None = None

    async def target(self, scenario: str) -> Target | None:
        if scenario == Scenario.MALFORMED:
            url = self.malformed_card_url
            return None if url is None else A2ATarget(A2AAgentConfig(card_url=url))
        agent = self.agents.get(scenario)
        if agent is None:
            return None
        return A2ATarget(A2AAgentConfig(card_url=self.server.card_url(agent), tenant="acme"))


async def test_the_a2a_target_passes_the_kit_against_the_a2a_sdk(
    a2a_server: Any, nursery: trio.Nursery
) -> None:
    # Started before the kit's checks: its tasks are the test's, not the target's.
    raw = await nursery.start(serve_raw_a2a, RawScenario(card_override={"name": "no interface"}))
    outcomes = await check_target(A2AHarness(a2a_server, A2A_SDK_AGENTS, raw.card_url))
    assert set(outcomes.values()) == {"passed"}, outcomes


async def test_the_a2a_target_passes_the_kit_polling_an_agent_that_cannot_stream(
    a2a_server: Any,
) -> None:
    # The agent's card says it cannot stream: the task is sent, then polled to its end.
    agents = {**A2A_SDK_AGENTS, Scenario.FINISH: "nostream"}
    outcomes = await check_target(A2AHarness(a2a_server, agents))
    assert outcomes["start and stream"] == outcomes["close"] == "passed", outcomes


async def test_the_a2a_target_passes_the_kit_against_a2a_js(a2a_js_server: Any) -> None:
    agents = {Scenario.FINISH: "stream", Scenario.HANG: "hang"}
    outcomes = await check_target(A2AHarness(a2a_js_server, agents))
    assert outcomes == {
        "prepare": "passed",
        "start and stream": "passed",
        "cancel": "passed",
        "resubscribe": "skipped: the harness has no 'drop' remote",
        "answer": "skipped: the harness has no 'ask' remote",
        "close": "passed",
    }


# -- AG-UI ----------------------------------------------------------------------------------------


@attrs.frozen
class AguiPeer:
    base_url: str


@pytest.fixture(scope="module")
def agui_peer() -> Iterator[AguiPeer]:
    argv = [sys.executable, "-m", "tools.peers.agui_app", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="agui_app") as (port, _pid, _stderr):
        yield AguiPeer(base_url=f"http://127.0.0.1:{port}")


#: The AG-UI agent's scenarios (tools/peers/agui_app.py). AG-UI has no resumption, and an
#: endpoint has no card to be malformed: no DROP, no MALFORMED.
AGUI_AGENTS: Mapping[str, str] = {
    Scenario.FINISH: "stream",
    Scenario.HANG: "hang",
    Scenario.ASK: "interrupt",
}


@attrs.define
class AguiHarness:
    peer: AguiPeer

    async def target(self, scenario: str) -> Target | None:
        agent = AGUI_AGENTS.get(scenario)
        if agent is None:
            return None
        url = f"{self.peer.base_url}/agents/{agent}"
        return AguiTarget(AguiAgentConfig(url=url, stop_url=f"{url}/stop", tenant="acme"))


async def test_the_agui_target_passes_the_kit(agui_peer: AguiPeer) -> None:
    outcomes = await check_target(AguiHarness(agui_peer))
    assert outcomes == {
        "prepare": "passed",
        "start and stream": "passed",
        "cancel": "passed",
        "resubscribe": "skipped: the harness has no 'drop' remote",
        "answer": "passed",
        "close": "passed",
    }
