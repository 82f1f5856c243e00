"""`delegate_to_agent` over MCP: the official mcp client against a run's endpoint.

The endpoint is `adapters.mcp.DelegationEndpoint` on a real Hypercorn listener on 127.0.0.1; the
parent side is the official `mcp` client (or raw HTTP where a test needs a precise wire event,
such as a connection dropped mid-call). Remote agents are in-process functions where the test is
about the tool, and the fault-injecting a2a-sdk server where it is about the remote task
(cancellation must reach it: the assertions read what that server recorded).
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import httpx
import pytest
import trio
from mcp.shared.exceptions import MCPError

from adapters.inprocess import LocalTask
from adapters.mcp import DelegationEndpoint, EndpointRefused
from engine import (
    Engine,
    ErrorCode,
    InputRequiredMode,
    Kind,
    Run,
    RunEndpoint,
    RunEndpointError,
    Status,
    to_json,
)
from tests.helpers.agents import a2a_agent, local_agent
from tests.helpers.mcp_endpoint import (
    RawMCP,
    call_args,
    journal_events,
    mcp_session,
    open_endpoint_run,
    post_initialize,
)
from tests.helpers.runs import OBJECTIVE
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a


async def wait_for_kind(run: Run, kind: str, count: int = 1) -> list[Any]:
    """Read the run's journal until `count` events of `kind` are there (bounded by the caller)."""
    found = []
    async with run.events() as subscription:
        async for entry in subscription:
            if entry.event.kind == kind:
                found.append(entry.event)
                if len(found) == count:
                    return found
    raise AssertionError(f"the run ended with {len(found)} {kind} events")


# -- tools/list ---------------------------------------------------------------------------


async def test_tools_list_names_the_registered_agents_with_descriptions_and_skills() -> None:
    agents = [
        local_agent("research", description="Finds sources.", skills=("search", "cite")),
        local_agent("review", display_name="Code review"),
    ]
    async with (
        open_endpoint_run(agents, shortcuts={"review"}) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == {"delegate_to_agent", "delegate_to_review", "read_delegation_output"}
    generic = tools["delegate_to_agent"]
    assert generic.description is not None
    assert "- research: Finds sources. Skills: search, cite." in generic.description
    assert "- review (Code review)" in generic.description
    assert generic.input_schema["properties"]["agent"]["enum"] == ["research", "review"]
    assert generic.input_schema["additionalProperties"] is False
    shortcut = tools["delegate_to_review"]
    assert "agent" not in shortcut.input_schema["properties"]
    assert shortcut.input_schema["required"] == ["objective"]


async def test_tools_list_describes_an_a2a_agent_from_its_card(a2a_server: Any) -> None:
    async with (
        open_endpoint_run([a2a_agent(a2a_server.card_url("stream"))]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        tools = (await session.list_tools()).tools
    description = tools[0].description or ""
    line = next(line for line in description.splitlines() if line.startswith("- remote"))
    assert "(A2A remote)" in line
    assert "Skills:" in line  # from the card: the host gave none


async def test_an_agent_whose_card_turned_malformed_is_marked_unavailable_and_never_called(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A malformed card at start keeps the engine from starting (test_a2a_delegation): this one
    # was fine then, and is fetched again (no cache) for the listing and the call.
    monkeypatch.setattr("adapters.a2a._target.CARD_TTL_SECONDS", 0.0)
    scenario = await nursery.start(serve_raw_a2a, RawScenario())
    async with (
        open_endpoint_run([a2a_agent(scenario.card_url, "broken")]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        scenario.card_override = {"name": "broken"}
        tools = (await session.list_tools()).tools
        result = await session.call_tool("delegate_to_agent", call_args("broken"))
    line = next(line for line in (tools[0].description or "").splitlines() if "broken" in line)
    assert "Unavailable right now (agent_unavailable): calls will fail." in line
    assert result.is_error
    assert result.structured_content["error"]["code"] == ErrorCode.AGENT_UNAVAILABLE
    assert scenario.requests == []  # the card was fetched; no task was ever sent


async def test_an_agent_unreachable_at_start_is_listed_unavailable_and_its_call_fails() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    card_url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    async with (
        open_endpoint_run([a2a_agent(card_url, "down")]) as (_, _, run),  # the engine starts
        mcp_session(run.endpoint) as session,
    ):
        tools = (await session.list_tools()).tools
        result = await session.call_tool("delegate_to_agent", call_args("down"))
    line = next(line for line in (tools[0].description or "").splitlines() if "down" in line)
    assert "Unavailable right now (agent_unavailable): calls will fail." in line
    assert result.structured_content["error"]["code"] == ErrorCode.AGENT_UNAVAILABLE
    assert result.structured_content["error"]["retryable"] is True


# -- calls ----------------------------------------------------------------------------------


async def test_call_returns_the_structured_result_with_strong_correlation() -> None:
    async with open_endpoint_run([local_agent()]) as (_, eng, run):
        async with mcp_session(run.endpoint) as session:
            result = await session.call_tool(
                "delegate_to_agent", call_args(), meta={"claudecode/toolUseId": "toolu_01"}
            )
            # Everything of the delegation is journaled before the parent sees the result.
            journaled = [e.event for e in await run.journal.store.read_after(0, run.journal.head)]
        assert not result.is_error
        structured = result.structured_content
        assert structured["status"] == Status.COMPLETED
        assert (
            structured["output"]["text"]
            == f"Summary: summary of {OBJECTIVE}\n\nlooked at {OBJECTIVE}"
        )
        assert structured["parent_tool_call_id"] == "toolu_01"
        text = result.content[0].text  # type: ignore[union-attr]
        assert "completed" in text and structured["delegation_id"] in text
        mine = [e for e in journaled if e.delegation_id == structured["delegation_id"]]
        assert mine[0].kind == Kind.STARTED and mine[-1].kind == Kind.FINISHED
        assert {e.parent_tool_call_id for e in mine} == {"toolu_01"}
        # The parent model got the result only; the live text stayed in the journal.
        assert any(e.kind == Kind.TEXT_DELTA for e in mine)
    assert eng.results(run.run_id)[0].parent_tool_call_id == "toolu_01"


async def test_codex_call_id_is_the_parent_tool_call_id() -> None:
    async with (
        open_endpoint_run([local_agent()]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool(
            "delegate_to_agent", call_args(), meta={"callId": "call_abc", "threadId": "t"}
        )
    assert result.structured_content["parent_tool_call_id"] == "call_abc"


async def test_named_shortcut_delegates_to_its_agent() -> None:
    async with (
        open_endpoint_run([local_agent("review")], shortcuts={"review"}) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool("delegate_to_review", {"objective": OBJECTIVE})
        refused = await session.call_tool(
            "delegate_to_review", {"objective": OBJECTIVE, "agent": "review"}
        )
    assert result.structured_content["agent"] == "review"
    assert not result.is_error
    assert refused.is_error
    assert refused.structured_content["error"]["metadata"] == {"field": "agent"}


BAD_CALLS = [
    pytest.param("delegate_to_agent", {"objective": OBJECTIVE}, "agent", id="missing-agent"),
    pytest.param("delegate_to_agent", {"agent": "research"}, "objective", id="missing-objective"),
    pytest.param(
        "delegate_to_agent", call_args(endpoint_url="http://evil.test"), "endpoint_url", id="url"
    ),
    pytest.param("delegate_to_agent", call_args(surprise=1), "surprise", id="unknown-field"),
    pytest.param(
        "delegate_to_agent",
        call_args(constraints={"timeout_seconds": 10**9}),
        "constraints.timeout_seconds",
        id="timeout-out-of-range",
    ),
    pytest.param(
        "delegate_to_agent",
        call_args(constraints={"max_artifacts": -1}),
        "constraints.max_artifacts",
        id="negative-bound",
    ),
    pytest.param(
        "delegate_to_agent",
        call_args(input={"prompt": "x" * (1024 * 1024 + 10)}),
        None,
        id="oversized-body",
    ),
    pytest.param("delegate_to_nobody", {"objective": OBJECTIVE}, "name", id="unknown-tool"),
]


@pytest.mark.parametrize(("tool", "arguments", "field"), BAD_CALLS)
async def test_bad_calls_get_a_structured_tool_error_and_no_delegation(
    tool: str, arguments: dict[str, Any], field: str | None
) -> None:
    started: list[str] = []

    async def agent(task: LocalTask) -> str:
        started.append(task.objective)
        return "should not run"

    async with (
        open_endpoint_run([local_agent(fn=agent)]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool(tool, arguments)
        assert run.delegations() == []
    assert result.is_error
    error = result.structured_content["error"]
    assert error["code"] == ErrorCode.INVALID_INPUT
    assert error["retryable"] is False
    if field is not None:
        assert error["metadata"]["field"] == field
    assert "refused" in result.content[0].text  # type: ignore[union-attr]
    assert started == []


async def test_unknown_agent_is_a_structured_failure_without_outbound_request() -> None:
    async with (
        open_endpoint_run([local_agent()]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool("delegate_to_agent", call_args("nobody"))
    assert result.is_error
    assert result.structured_content["error"]["code"] == ErrorCode.AGENT_NOT_FOUND


# -- auth -----------------------------------------------------------------------------------


async def test_requests_without_the_runs_token_get_a_readable_401(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine([local_agent()], endpoints=endpoint) as eng,
        eng.open_run() as run,
        eng.open_run() as other,
    ):
        assert run.endpoint is not None and other.endpoint is not None
        url = run.endpoint.url
        cases = {
            "none": {},
            "scheme": {"authorization": f"Basic {run.endpoint.token}"},
            "wrong": {"authorization": "Bearer not-the-token"},
            "other run": dict(other.endpoint.headers),
        }
        for name, headers in cases.items():
            response = await post_initialize(url, headers)
            assert response.status_code == 401, name
            assert response.headers["www-authenticate"].startswith("Bearer")
            body = response.json()
            assert body["error"] == "unauthorized"
            assert "token" in body["message"].lower() or "bearer" in body["message"].lower()
        ok = await post_initialize(url, dict(run.endpoint.headers))
        assert ok.status_code == 200
        assert endpoint.refused_requests == len(cases)
        tokens = (run.endpoint.token, other.endpoint.token)
    assert not any(token in record.getMessage() for record in caplog.records for token in tokens)


async def test_the_parent_side_gets_a_readable_refusal() -> None:
    async with open_endpoint_run([local_agent()]) as (_, _, run):
        with pytest.raises(EndpointRefused) as caught:
            async with mcp_session(run.endpoint, headers={"Authorization": "Bearer nope"}):
                raise AssertionError("the session must not open")  # pragma: no cover
    assert caught.value.status == 401
    assert "bearer token is not this run's" in str(caught.value)
    assert "nope" not in str(caught.value)


async def test_a_closed_runs_token_is_revoked() -> None:
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine([local_agent()], endpoints=endpoint) as eng,
    ):
        async with eng.open_run() as run:
            assert run.endpoint is not None
            endpoint_of_run: RunEndpoint = run.endpoint
            opened = await post_initialize(run.endpoint.url, dict(run.endpoint.headers))
            assert opened.is_success
        assert endpoint.open_runs == 0
        response = await post_initialize(endpoint_of_run.url, dict(endpoint_of_run.headers))
    assert response.status_code == 401


async def test_a_run_that_cannot_get_its_endpoint_fails_before_it_opens() -> None:
    endpoint = DelegationEndpoint()  # never served
    async with Engine([local_agent()], endpoints=endpoint) as eng:
        with pytest.raises(RunEndpointError, match="tool endpoint"):
            async with eng.open_run(run_id="run-no-endpoint"):
                raise AssertionError("the body must not run")  # pragma: no cover
        events = await journal_events(eng, "run-no-endpoint")
    assert [e.kind for e in events] == [Kind.RUN_STARTED, Kind.RUN_FAILED]
    assert "endpoint" in (events[-1].text or "")


async def test_the_token_is_never_in_events_results_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with open_endpoint_run([local_agent()]) as (_, eng, run):
        assert run.endpoint is not None
        token = run.endpoint.token
        assert token not in repr(run.endpoint)
        async with mcp_session(run.endpoint) as session:
            result = await session.call_tool("delegate_to_agent", call_args())
    assert token not in json.dumps(result.model_dump(mode="json"))
    assert all(token not in to_json(e) for e in await journal_events(eng, run.run_id))
    assert all(token not in to_json(r) for r in eng.results(run.run_id))
    assert not any(token in record.getMessage() for record in caplog.records)


# -- isolation and correlation ---------------------------------------------------------------


async def test_concurrent_runs_never_see_each_others_delegations() -> None:
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine([local_agent()], endpoints=endpoint) as eng,
        eng.open_run() as first,
        eng.open_run() as second,
    ):
        results: dict[str, list[Any]] = {first.run_id: [], second.run_id: []}

        async def parent(run: Run, n: int) -> None:
            async with mcp_session(run.endpoint) as session:
                for i in range(3):
                    result = await session.call_tool(
                        "delegate_to_agent",
                        call_args(),
                        meta={"claudecode/toolUseId": f"toolu_{n}_{i}"},
                    )
                    results[run.run_id].append(result.structured_content)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent, first, 1)
            nursery.start_soon(parent, second, 2)
        for run, n in ((first, 1), (second, 2)):
            mine = {r["delegation_id"] for r in results[run.run_id]}
            assert {r["run_id"] for r in results[run.run_id]} == {run.run_id}
            await run.flush()
            events = [e.event for e in await run.journal.store.read_after(0, run.journal.head)]
            seen = {e.delegation_id for e in events if e.delegation_id}
            assert seen == mine
            assert {e.parent_tool_call_id for e in events if e.delegation_id} == {
                f"toolu_{n}_{i}" for i in range(3)
            }


async def test_two_concurrent_calls_in_one_run_stay_apart() -> None:
    release = trio.Event()
    both_started = trio.Event()
    running: list[str] = []

    async def agent(task: LocalTask) -> str:
        running.append(task.objective)
        if len(running) == 2:
            both_started.set()
        await release.wait()
        await task.say(f"answer to {task.objective}")
        return task.objective

    async with (
        open_endpoint_run([local_agent(fn=agent)]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            result = await session.call_tool(
                "delegate_to_agent",
                {"agent": "research", "objective": name},
                meta={"callId": f"call_{name}"},
            )
            results[name] = result.structured_content

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "one")
            nursery.start_soon(call, "two")
            with trio.fail_after(10):
                await both_started.wait()
            release.set()
    assert results["one"]["delegation_id"] != results["two"]["delegation_id"]
    for name in ("one", "two"):
        assert results[name]["parent_tool_call_id"] == f"call_{name}"
        assert results[name]["output"]["text"] == f"answer to {name}"  # the summary is in it


async def test_medium_correlation_pairs_calls_with_parent_tool_calls_in_order() -> None:
    async with (
        open_endpoint_run([local_agent()]) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        for tool_call_id in ("toolu_a", "toolu_b"):
            await run.emit(
                Kind.PARENT_TOOL_CALL_START,
                tool_call_id=tool_call_id,
                tool_name="mcp__subagents__delegate_to_agent",
            )
        await run.emit(Kind.PARENT_TOOL_CALL_START, tool_call_id="toolu_x", tool_name="Bash")
        first = await session.call_tool("delegate_to_agent", call_args())
        second = await session.call_tool("delegate_to_agent", call_args())
        third = await session.call_tool("delegate_to_agent", call_args())
    assert first.structured_content["parent_tool_call_id"] == "toolu_a"
    assert second.structured_content["parent_tool_call_id"] == "toolu_b"
    assert "parent_tool_call_id" not in third.structured_content  # nothing left to pair with


async def test_weak_correlation_refuses_ambiguous_concurrent_calls() -> None:
    async with (
        open_endpoint_run([local_agent()], correlation="weak") as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        await run.emit(
            Kind.PARENT_TOOL_CALL_START, tool_call_id="toolu_1", tool_name="delegate_to_agent"
        )
        single = await session.call_tool("delegate_to_agent", call_args())
        for tool_call_id in ("toolu_2", "toolu_3"):
            await run.emit(
                Kind.PARENT_TOOL_CALL_START,
                tool_call_id=tool_call_id,
                tool_name="delegate_to_agent",
            )
        ambiguous = await session.call_tool("delegate_to_agent", call_args())
        strong = await session.call_tool(
            "delegate_to_agent", call_args(), meta={"claudecode/toolUseId": "toolu_2"}
        )
        # toolu_2 is claimed now, so only toolu_3 is open: no longer ambiguous.
        after = await session.call_tool("delegate_to_agent", call_args())
    assert single.structured_content["parent_tool_call_id"] == "toolu_1"
    assert ambiguous.is_error
    assert ambiguous.structured_content["error"]["code"] == ErrorCode.AMBIGUOUS_CORRELATION
    assert strong.structured_content["parent_tool_call_id"] == "toolu_2"
    assert after.structured_content["parent_tool_call_id"] == "toolu_3"


# -- while blocked ------------------------------------------------------------------------


async def test_progress_notifications_arrive_while_blocked_and_only_for_the_own_delegation() -> (
    None
):
    release = trio.Event()
    chatty_spoke = trio.Event()

    async def chatty(task: LocalTask) -> str:
        await task.say("x" * 500)
        chatty_spoke.set()
        await release.wait()
        return "chatty done"

    async def silent(task: LocalTask) -> str:
        await release.wait()
        return "silent done"

    agents = [local_agent("chatty", fn=chatty), local_agent("silent", fn=silent)]
    progress: dict[str, list[tuple[float, str | None]]] = {"chatty": [], "silent": []}
    enough = trio.Event()

    def on_progress(name: str) -> Any:
        async def record(value: float, total: float | None, message: str | None) -> None:
            progress[name].append((value, message))
            if len(progress["silent"]) >= 3 and any(
                "500 chars" in (m or "") for _, m in progress["chatty"]
            ):
                enough.set()

        return record

    async with (
        open_endpoint_run(agents, progress_interval=0.05, heartbeat_interval=0.1) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):

        async def call(name: str) -> None:
            await session.call_tool(
                "delegate_to_agent",
                {"agent": name, "objective": OBJECTIVE},
                progress_callback=on_progress(name),
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "chatty")
            nursery.start_soon(call, "silent")
            with trio.fail_after(20):
                await chatty_spoke.wait()
                await enough.wait()
            # Blocked all along: neither delegation has finished.
            assert all(r.status == Status.RUNNING for r in run.delegations())
            release.set()
    # The silent delegation's heartbeats never mention the other delegation's output.
    assert all("chars" not in (m or "") for _, m in progress["silent"])
    assert all(m and m.startswith("silent") for _, m in progress["silent"][1:])
    for values in progress.values():
        numbers = [v for v, _ in values]
        assert numbers == sorted(set(numbers))  # strictly increasing


# -- cancellation and failures against a real A2A server ----------------------------------


async def _running_remote_task(run: Run) -> Any:
    """The delegation's first WORKING status event (the remote task exists and runs)."""
    with trio.fail_after(20):
        async with run.events() as subscription:
            async for entry in subscription:
                if entry.event.kind == Kind.STATUS and entry.event.remote_task_id:
                    return entry.event
    raise AssertionError("the run ended before the remote task was working")


async def test_cancelling_the_client_call_cancels_the_remote_task(a2a_server: Any) -> None:
    async with open_endpoint_run([a2a_agent(a2a_server.card_url("hang"))]) as (_, eng, run):
        async with mcp_session(run.endpoint) as session, trio.open_nursery() as nursery:
            cancel_scope = trio.CancelScope()

            async def call() -> None:
                with cancel_scope:
                    await session.call_tool("delegate_to_agent", call_args("remote"))

            nursery.start_soon(call)
            working = await _running_remote_task(run)
            cancel_scope.cancel()
        await _wait_until_ended(run)
    result = eng.results(run.run_id)[0]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == "confirmed"
    cancels = a2a_server.entries("hang", "cancels", working.remote_task_id)
    assert len(cancels) == 1
    assert cancels[0]["tenant"] == "acme"


async def test_the_parents_tool_timeout_cancels_the_remote_task(a2a_server: Any) -> None:
    # A parent CLI's tool timeout is the client giving up on the request: the mcp client then
    # sends notifications/cancelled, as Claude Code and Codex do.
    async with (
        open_endpoint_run([a2a_agent(a2a_server.card_url("hang"))]) as (_, eng, run),
        mcp_session(run.endpoint) as session,
    ):
        with pytest.raises(MCPError, match="timed out"):
            await session.call_tool(
                "delegate_to_agent", call_args("remote"), read_timeout_seconds=1.5
            )
        await _wait_until_ended(run)
    result = eng.results(run.run_id)[0]
    assert result.status == Status.CANCELLED
    assert result.remote_task_id
    assert len(a2a_server.entries("hang", "cancels", result.remote_task_id)) == 1


async def _wait_until_ended(run: Run) -> None:
    """Until the run's (only) delegation has its terminal event in the journal."""
    with trio.fail_after(20):
        async with run.events() as subscription:
            async for entry in subscription:
                if entry.event.kind in Kind.DELEGATION_TERMINALS:
                    return
    raise AssertionError("the run ended before its delegation did")


async def test_a_dropped_connection_cancels_the_remote_task(a2a_server: Any) -> None:
    async with open_endpoint_run([a2a_agent(a2a_server.card_url("hang"))]) as (endpoint, eng, run):
        assert run.endpoint is not None
        async with httpx.AsyncClient(timeout=10.0) as http:
            raw = RawMCP(run.endpoint, http)
            await raw.open()
            async with http.stream(
                "POST",
                run.endpoint.url,
                json=raw.call_body(call_args("remote")),
                headers=raw.headers(),
            ) as response:
                assert response.status_code == 200
                working = await _running_remote_task(run)
            # Leaving the block closed the connection without a word to the server.
        await _wait_until_ended(run)
        assert endpoint.calls_cancelled_by_disconnect == 1
    result = eng.results(run.run_id)[0]
    assert result.status == Status.CANCELLED
    assert len(a2a_server.entries("hang", "cancels", working.remote_task_id)) == 1


async def test_a_session_delete_cancels_the_remote_task(a2a_server: Any) -> None:
    async with open_endpoint_run([a2a_agent(a2a_server.card_url("hang"))]) as (_, eng, run):
        assert run.endpoint is not None
        async with httpx.AsyncClient(timeout=10.0) as http, trio.open_nursery() as nursery:
            raw = RawMCP(run.endpoint, http)
            await raw.open()

            async def call() -> None:
                async with http.stream(
                    "POST",
                    run.endpoint.url,  # type: ignore[union-attr]
                    json=raw.call_body(call_args("remote")),
                    headers=raw.headers(),
                ) as response:
                    async for _ in response.aiter_bytes():
                        pass

            nursery.start_soon(call)
            working = await _running_remote_task(run)
            deleted = await http.delete(run.endpoint.url, headers=raw.headers())
            assert deleted.status_code == 200
            await _wait_until_ended(run)
            nursery.cancel_scope.cancel()
    result = eng.results(run.run_id)[0]
    assert result.status == Status.CANCELLED
    assert len(a2a_server.entries("hang", "cancels", working.remote_task_id)) == 1


async def test_remote_failure_and_timeout_are_structured_errors(a2a_server: Any) -> None:
    agents = [
        a2a_agent(a2a_server.card_url("fail"), "failing"),
        a2a_agent(a2a_server.card_url("hang"), "hanging"),
    ]
    async with (
        open_endpoint_run(agents) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        failed = await session.call_tool("delegate_to_agent", call_args("failing"))
        timed_out = await session.call_tool(
            "delegate_to_agent", call_args("hanging", constraints={"timeout_seconds": 1})
        )
    assert failed.is_error
    assert failed.structured_content["status"] == Status.FAILED
    assert failed.structured_content["error"]["code"] == ErrorCode.REMOTE_FAILED
    assert failed.structured_content["remote_task_id"]
    assert timed_out.is_error
    error = timed_out.structured_content["error"]
    assert error["code"] == ErrorCode.REMOTE_TIMEOUT
    assert error["retryable"] is True
    assert error["remote_status"] == "working"
    assert timed_out.structured_content["remote_cancel"] == "confirmed"
    assert "remote_timeout" in timed_out.content[0].text  # type: ignore[union-attr]


async def test_ending_the_run_ends_a_blocked_call_with_a_cancelled_result() -> None:
    started = trio.Event()

    async def forever(task: LocalTask) -> str:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    results: list[Any] = []
    returned = trio.Event()
    async with (
        open_endpoint_run([local_agent(fn=forever)]) as (_, _, run),
        mcp_session(run.endpoint) as session,
        trio.open_nursery() as nursery,
    ):

        async def call() -> None:
            results.append(await session.call_tool("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(10):
            await started.wait()
        # The run ends (its delegations are cancelled) while the parent's call blocks.
        with trio.fail_after(10):
            await run.finish("the user stopped the run")
            await returned.wait()
    assert results[0].is_error
    assert results[0].structured_content["status"] == Status.CANCELLED


# -- whole delegations through the MCP tool ----------------------------------------------------


async def test_a_remote_stream_appears_under_the_parents_tool_call(
    a2a_server: Any,
) -> None:
    async with open_endpoint_run([a2a_agent(a2a_server.card_url("stream"), "research")]) as (
        _,
        eng,
        run,
    ):
        await run.emit(
            Kind.PARENT_TOOL_CALL_START,
            tool_call_id="toolu_s1",
            tool_name="mcp__subagents__delegate_to_agent",
        )
        async with mcp_session(run.endpoint) as session:
            result = await session.call_tool(
                "delegate_to_agent",
                call_args("research"),
                meta={"claudecode/toolUseId": "toolu_s1"},
            )
        returned_at = run.journal.head  # everything journaled before the result came back
        await run.emit(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="toolu_s1", result="ok")
        await run.emit(Kind.PARENT_TEXT_DELTA, message_id="m1", delta="The research says...")
    journal = eng.journal(run.run_id)
    assert journal is not None
    entries = await journal.store.read_after(0, journal.head)
    events = [e.event for e in entries]
    cursor = {}  # kind -> cursor of its first entry
    for entry in entries:
        cursor.setdefault(entry.event.kind, entry.cursor)
    assert cursor[Kind.PARENT_TOOL_CALL_START] < cursor[Kind.STARTED]
    assert cursor[Kind.STARTED] < cursor[Kind.TEXT_DELTA] < cursor[Kind.FINISHED]
    assert cursor[Kind.STARTED] < cursor[Kind.ARTIFACT] < cursor[Kind.FINISHED]
    # The terminal was journaled before the tool result reached the parent.
    assert cursor[Kind.FINISHED] <= returned_at < cursor[Kind.PARENT_TOOL_CALL_RESULT]
    assert cursor[Kind.PARENT_TOOL_CALL_RESULT] < cursor[Kind.PARENT_TEXT_DELTA]
    finished = next(e for e in events if e.kind == Kind.FINISHED)
    assert finished.remote_task_id == result.structured_content["remote_task_id"]
    subagent = [e for e in events if e.delegation_id]
    assert {e.parent_tool_call_id for e in subagent} == {"toolu_s1"}
    assert not result.is_error
    assert result.structured_content["artifacts"]  # by reference
    assert "chunk" not in json.dumps(result.structured_content["artifacts"])


async def test_the_tool_blocks_until_the_input_request_is_answered(
    a2a_server: Any,
) -> None:
    agent = a2a_agent(a2a_server.card_url("input"), input_required=InputRequiredMode.SURFACE)
    returned = trio.Event()
    results: list[Any] = []
    async with (
        open_endpoint_run([agent]) as (_, _, run),
        mcp_session(run.endpoint) as session,
        trio.open_nursery() as nursery,
    ):

        async def call() -> None:
            results.append(await session.call_tool("delegate_to_agent", call_args("remote")))
            returned.set()

        nursery.start_soon(call)
        asked = (await wait_for_kind_with_deadline(run, Kind.INPUT_REQUIRED))[0]
        assert not returned.is_set()  # still blocked on the remote's question
        run.answer(asked.delegation_id, text="2026")
        with trio.fail_after(20):
            await returned.wait()
    assert not results[0].is_error
    assert results[0].structured_content["status"] == Status.COMPLETED


async def wait_for_kind_with_deadline(run: Run, kind: str) -> list[Any]:
    with trio.fail_after(20):
        return await wait_for_kind(run, kind)


async def _parent_shows_call(run: Run, tool_call_id: str, arguments: dict[str, Any]) -> None:
    await run.emit(
        Kind.PARENT_TOOL_CALL_START, tool_call_id=tool_call_id, tool_name="delegate_to_agent"
    )
    await run.emit(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=tool_call_id, args=arguments)
    await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=tool_call_id)


async def test_a_parent_with_its_own_call_ids_gets_its_delegations_paired() -> None:
    """Codex prints `item_N`, never the model's `call_id` (which only reaches `_meta`): with
    `parent_call_ids = "parent"` each delegation carries the parent's id of the call with its
    arguments (whatever order the calls arrive in, even before the parent printed the call),
    and keeps the model's id as metadata."""
    first_args, second_args = call_args(), call_args(objective="Something else entirely.")
    async with (
        open_endpoint_run([local_agent()]) as (_, eng, run),
        mcp_session(run.endpoint) as session,
    ):
        run.parent_call_ids = "parent"
        await _parent_shows_call(run, "item_1", first_args)
        results: dict[str, Any] = {}

        async def call(name: str, arguments: dict[str, Any], model_id: str) -> None:
            results[name] = await session.call_tool(
                "delegate_to_agent", arguments, meta={"callId": model_id}
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "second", second_args, "call_B")
            await wait_for_kind(run, Kind.PARENT_TOOL_CALL_END)  # the second call now waits
            await trio.testing.wait_all_tasks_blocked()
            await _parent_shows_call(run, "item_2", second_args)  # printed after the call came
            nursery.start_soon(call, "first", first_args, "call_A")
        events = await journal_events(eng, run.run_id)
    assert results["first"].structured_content["parent_tool_call_id"] == "item_1"
    assert results["second"].structured_content["parent_tool_call_id"] == "item_2"
    started = [e for e in events if e.kind == Kind.STARTED]
    by_call = {e.parent_tool_call_id: e for e in started}
    assert set(by_call) == {"item_1", "item_2"}
    assert by_call["item_1"].extra == {"model_tool_call_id": "call_A"}
    assert by_call["item_2"].extra == {"model_tool_call_id": "call_B"}
    assert results["first"].structured_content["metadata"] == {"model_tool_call_id": "call_A"}
    # Every subagent is announced after its call's arguments ended, so it nests under it.
    kinds = [(e.kind, e.tool_call_id or e.parent_tool_call_id) for e in events]
    for item in ("item_1", "item_2"):
        assert kinds.index((Kind.PARENT_TOOL_CALL_END, item)) < kinds.index((Kind.STARTED, item))


async def test_a_call_the_parent_never_shows_keeps_the_models_id() -> None:
    async with (
        open_endpoint_run([local_agent()], parent_call_wait=0.2) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        run.parent_call_ids = "parent"
        result = await session.call_tool("delegate_to_agent", call_args(), meta={"callId": "c9"})
    assert result.structured_content["parent_tool_call_id"] == "c9"
    with pytest.raises(ValueError, match="parent_call_ids"):
        run.parent_call_ids = "codex"
