"""`delegate_to_agent` over MCP with a real remote A2A agent behind the call.

`test_mcp_endpoint.py` checks the tool mostly against in-process agents. These check its promises
where a real remote is involved, reading what the remote recorded: a refused call sends nothing to
the remote, the run's bearer token never reaches the remote agent, the tool's constraints become the
A2A request's configuration, concurrent calls to remote agents keep their events apart, and a silent
remote still yields progress notifications. Also: the run context comes from the token, never from
an argument.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import AgentSpec, ErrorCode, Kind, Status
from tests.helpers.agents import a2a_agent, local_agent
from tests.helpers.mcp_endpoint import call_args, journal_events, mcp_session, open_endpoint_run
from tests.helpers.runs import OBJECTIVE
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a, task_frame

REFUSED_CALLS = [
    pytest.param(
        call_args("remote", endpoint_url="http://evil.test"), ErrorCode.INVALID_INPUT, id="url"
    ),
    pytest.param(call_args("remote", surprise=True), ErrorCode.INVALID_INPUT, id="unknown-field"),
    pytest.param(
        call_args("remote", constraints={"history_length": 10**6}),
        ErrorCode.INVALID_INPUT,
        id="out-of-range",
    ),
    pytest.param(
        call_args("remote", input={"prompt": "x" * (1024 * 1024 + 1)}),
        ErrorCode.INVALID_INPUT,
        id="oversized",
    ),
    pytest.param(call_args("nobody"), ErrorCode.AGENT_NOT_FOUND, id="unknown-agent"),
]


@pytest.mark.parametrize(("arguments", "code"), REFUSED_CALLS)
async def test_a_refused_call_sends_nothing_to_the_remote_agent(
    a2a_server: Any, arguments: dict[str, Any], code: str
) -> None:
    a2a_server.reset()
    async with (
        open_endpoint_run([a2a_agent(a2a_server.card_url("stream"))]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool("delegate_to_agent", arguments)
    assert result.is_error
    assert result.structured_content["error"]["code"] == code
    recorded = a2a_server.log()["stream"]
    assert recorded["messages"] == [] and recorded["cancels"] == []


async def test_the_runs_token_never_reaches_the_remote_agent(a2a_server: Any) -> None:
    a2a_server.reset()
    config = A2AAgentConfig(
        card_url=a2a_server.card_url("stream"), tenant="acme", forward_identity=True
    )
    agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))
    async with open_endpoint_run([agent]) as (_, _, run):
        assert run.endpoint is not None
        token = run.endpoint.token
        async with mcp_session(run.endpoint) as session:
            result = await session.call_tool(
                "delegate_to_agent",
                call_args("remote", input={"prompt": "p", "context": "c"}),
                meta={"claudecode/toolUseId": "toolu_tok"},
            )
    assert not result.is_error, result.structured_content
    (message,) = a2a_server.entries(
        "stream", "messages", result.structured_content["remote_task_id"]
    )
    assert message["x_headers"]["x-parent-tool-call-id"] == "toolu_tok"  # lineage did arrive
    assert message["authorization_present"] is False
    assert token not in json.dumps(message)


async def test_constraints_become_the_a2a_request_configuration(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        send_result=task_frame("t1", "TASK_STATE_SUBMITTED"),
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_COMPLETED"}},
    )
    await nursery.start(serve_raw_a2a, scenario)
    agent = a2a_agent(scenario.card_url, poll_interval=0.01)
    async with (
        open_endpoint_run([agent]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool(
            "delegate_to_agent",
            call_args("remote", constraints={"stream": False, "history_length": 3}),
        )
    assert not result.is_error, result.structured_content
    assert scenario.methods()[0] == "SendMessage"  # stream: false, although the card streams
    configuration = scenario.requests[0]["params"]["configuration"]
    assert configuration["returnImmediately"] is True
    assert configuration["historyLength"] == 3


async def test_two_concurrent_calls_to_remote_agents_keep_their_events_apart(
    a2a_server: Any,
) -> None:
    agents = [
        a2a_agent(a2a_server.card_url("stream"), "one"),
        a2a_agent(a2a_server.card_url("stream"), "two"),
    ]
    results: dict[str, Any] = {}
    async with open_endpoint_run(agents) as (_, eng, run):
        async with mcp_session(run.endpoint) as session:

            async def call(key: str) -> None:
                result = await session.call_tool(
                    "delegate_to_agent", call_args(key), meta={"callId": f"call_{key}"}
                )
                results[key] = result.structured_content

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "one")
                nursery.start_soon(call, "two")
        events = await journal_events(eng, run.run_id)
    assert results["one"]["delegation_id"] != results["two"]["delegation_id"]
    assert results["one"]["remote_task_id"] != results["two"]["remote_task_id"]
    for key, result in results.items():
        assert result["status"] == Status.COMPLETED
        assert result["parent_tool_call_id"] == f"call_{key}"
        mine = [e for e in events if e.delegation_id == result["delegation_id"]]
        assert mine[0].kind == Kind.STARTED and mine[-1].kind == Kind.FINISHED
        assert {e.parent_tool_call_id for e in mine} == {f"call_{key}"}
        assert {e.agent_key for e in mine} == {key}
        assert {e.remote_task_id for e in mine} == {result["remote_task_id"]}


async def test_a_silent_remote_still_gets_heartbeat_progress_while_the_call_blocks(
    a2a_server: Any,
) -> None:
    progress: list[tuple[float, str | None]] = []
    enough = trio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))
        if len(progress) >= 3:
            enough.set()

    agent = a2a_agent(a2a_server.card_url("hang"))
    async with (
        open_endpoint_run([agent], progress_interval=0.05, heartbeat_interval=0.1) as (_, eng, run),
        mcp_session(run.endpoint) as session,
        trio.open_nursery() as nursery,
    ):

        async def call() -> None:
            await session.call_tool(
                "delegate_to_agent", call_args("remote"), progress_callback=on_progress
            )

        nursery.start_soon(call)
        with trio.fail_after(20):
            await enough.wait()
        assert [r.status for r in run.delegations()] == [Status.RUNNING]  # still blocked
        nursery.cancel_scope.cancel()
    assert [v for v, _ in progress] == sorted({v for v, _ in progress})
    assert progress[-1][1] and progress[-1][1].endswith("working")
    result = eng.results(run.run_id)[0]
    assert a2a_server.entries("hang", "cancels", result.remote_task_id)


async def test_the_run_context_comes_from_the_token_never_from_arguments() -> None:
    async with (
        open_endpoint_run([local_agent()]) as (_, eng, run),
        eng.open_run() as other,
    ):
        async with mcp_session(run.endpoint) as session:
            refused = await session.call_tool("delegate_to_agent", call_args(run_id=other.run_id))
            accepted = await session.call_tool("delegate_to_agent", call_args())
        assert other.delegations() == []
    assert refused.is_error
    assert refused.structured_content["error"]["metadata"]["field"] == "run_id"
    assert not accepted.is_error
    assert accepted.structured_content["run_id"] == run.run_id
    assert f"summary of {OBJECTIVE}" in accepted.structured_content["output"]["text"]
