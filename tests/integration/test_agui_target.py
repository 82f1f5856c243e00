"""Delegations to a real remote AG-UI agent through the whole engine (nesting in depth:
test_agui_nesting.py).

Remote side: `tools/peers/agui_app.py`, an AG-UI agent written with the official
`ag-ui-protocol` encoder on Starlette/uvicorn in its own process; each scenario a path.
Assertions are on what the engine journaled and returned *and* on what the remote recorded (the
`RunAgentInput` it received, the stop call on cancel, the resume payload on answer).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import attrs
import httpx
import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from adapters.agui import (
    MODES,
    AguiAgentConfig,
    AguiStreamEncoder,
    AguiTarget,
    check_frames,
    parse_sse,
)
from engine import (
    AgentSpec,
    ContextPolicy,
    DelegationEvent,
    DelegationPolicy,
    DelegationRequest,
    DelegationTask,
    Engine,
    ErrorCode,
    InputRequiredMode,
    Kind,
    RemoteCancel,
    Run,
    Status,
    to_json,
)
from tests.helpers import REPO_ROOT
from tests.helpers.events import MERGEABLE, events_of, kinds
from tests.helpers.ports import closed_port
from tests.helpers.processes import ready_server
from tests.helpers.runs import delegate_for_events, journal_so_far

TOKEN = "test-token"


@dataclass
class AguiServer:
    base_url: str
    _http: httpx.Client = field(repr=False, default_factory=lambda: httpx.Client(timeout=5.0))

    def url(self, scenario: str) -> str:
        return f"{self.base_url}/agents/{scenario}"

    def stop_url(self, scenario: str) -> str:
        return f"{self.base_url}/agents/{scenario}/stop"

    def log(self) -> dict[str, list[dict[str, Any]]]:
        response = self._http.get(f"{self.base_url}/_test/log")
        response.raise_for_status()
        data: dict[str, list[dict[str, Any]]] = response.json()
        return data

    def runs(self, thread_id: str | None) -> list[dict[str, Any]]:
        """The RunAgentInputs received for one thread (a delegation's remote context)."""
        return [r for r in self.log()["runs"] if r["input"]["threadId"] == thread_id]

    def stops(self, run_id: str | None) -> list[dict[str, Any]]:
        return [s for s in self.log()["stops"] if (s["body"] or {}).get("runId") == run_id]

    def disconnects(self, run_id: str | None) -> list[dict[str, Any]]:
        return [d for d in self.log()["disconnects"] if d["run_id"] == run_id]


@pytest.fixture(scope="module")
def agui_server() -> Iterator[AguiServer]:
    argv = [sys.executable, "-m", "tools.peers.agui_app", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="agui_app") as (port, _pid, _stderr):
        server = AguiServer(base_url=f"http://127.0.0.1:{port}")
        try:
            yield server
        finally:
            server._http.close()


def agui_agent(
    server: AguiServer,
    scenario: str,
    key: str = "remote",
    *,
    stop: bool = True,
    token: str | None = None,
    forward_identity: bool = False,
    **policy: Any,
) -> AgentSpec:
    config = AguiAgentConfig(
        url=server.url(scenario),
        stop_url=server.stop_url(scenario) if stop else None,
        tenant="acme",
        auth_header=("Authorization", f"Bearer {token}") if token else None,
        forward_identity=forward_identity,
    )
    return AgentSpec(
        key=key,
        display_name=f"AG-UI {key}",
        protocol="agui",
        target=AguiTarget(config),
        policy=DelegationPolicy(**policy),
        secrets=config.secrets,
    )


async def input_request(run: Run) -> DelegationEvent:
    """The run's first input request, read from its events as they come."""
    async with run.events() as events:
        async for entry in events:
            if entry.event.kind == Kind.INPUT_REQUIRED:
                return entry.event
    raise AssertionError("the run ended without an input request")


def text_of(events: list[Any], kind: str = Kind.TEXT_DELTA) -> str:
    return "".join(e.delta for e in events if e.kind == kind)


# -- the happy paths ------------------------------------------------------------------------------


async def test_stream_maps_to_the_subagent_family_and_the_remote_got_a_run_agent_input(
    agui_server: AguiServer,
) -> None:
    result, events = await delegate_for_events(
        agui_agent(agui_server, "stream"), context="The design doc", parent_tool_call_id="toolu_1"
    )
    assert result.status == Status.COMPLETED, result
    assert result.remote_protocol == "agui"
    assert result.summary == "done: Summarize the design."
    assert kinds(events, merged=MERGEABLE) == [
        Kind.STARTED,
        Kind.STATUS,  # step research started
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.STATUS,  # step research finished
        Kind.CUSTOM,
        Kind.CUSTOM,
        Kind.FINISHED,
    ]
    started = events[0]
    assert not started.synthesized
    assert started.remote_task_id == result.remote_task_id and result.remote_task_id
    assert started.remote_context_id == result.remote_context_id and result.remote_context_id
    assert text_of(events) == "Hello from AG-UI."
    assert [m.text for m in result.messages] == ["Hello from AG-UI."]
    custom = [e for e in events if e.kind == Kind.CUSTOM]
    assert [(e.name, e.raw["value"]) for e in custom] == [
        ("progress", {"percent": 100}),
        ("agui.state_snapshot", {"snapshot": {"sources": 3}}),
    ]
    assert [e.text for e in events if e.kind == Kind.STATUS] == [
        "step research started",
        "step research finished",
    ]
    # What the remote received: one RunAgentInput, per the official model.
    (received,) = agui_server.runs(result.remote_context_id)
    run_input = received["input"]
    assert run_input["runId"] == result.remote_task_id
    assert run_input["protocolVersion"] == "1.0"
    assert run_input["parentRunId"] == result.run_id
    assert run_input["tools"] == []
    (message,) = run_input["messages"]
    assert message["role"] == "user"
    assert message["content"].startswith("Summarize the design.")
    assert "Context:\nThe design doc" in message["content"]
    assert run_input["context"] == [
        {"description": "Context from the delegating agent", "value": "The design doc"}
    ]
    props = run_input["forwardedProps"]["subagentEngine"]
    assert props == {
        "delegationId": result.delegation_id,
        "parentRunId": result.run_id,
        "agentKey": "remote",
    }
    assert received["accept"] == "text/event-stream"
    assert received["x_headers"] == {}  # identity is not forwarded by default
    assert '"remote_protocol":"agui"' in to_json(result)


async def test_reasoning_and_text_keep_their_message_lifecycles(agui_server: AguiServer) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "reasoning"))
    assert result.status == Status.COMPLETED, result
    assert kinds(events, merged=MERGEABLE) == [
        Kind.STARTED,
        Kind.REASONING_START,
        Kind.REASONING_DELTA,
        Kind.REASONING_END,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    assert text_of(events, Kind.REASONING_DELTA) == "Thinking it over."
    assert result.summary == "Answer."  # no result: the last message


async def test_the_remotes_tool_call_is_a_subagent_tool_call(agui_server: AguiServer) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "tool"))
    assert result.status == Status.COMPLETED, result
    calls = [e for e in events if e.kind.startswith("subagent.tool_call.")]
    assert kinds(calls, merged=MERGEABLE) == [
        Kind.TOOL_CALL_START,
        Kind.TOOL_CALL_ARGS,
        Kind.TOOL_CALL_END,
        Kind.TOOL_CALL_RESULT,
    ]
    assert {e.tool_call_id for e in calls} == {"call-1"}
    assert calls[0].tool_name == "search"
    assert "".join(e.delta for e in calls if e.kind == Kind.TOOL_CALL_ARGS) == '{"q": "agui"}'
    assert calls[-1].result == "3 hits"
    assert not any(e.kind.startswith("tool_call.") for e in events)  # never the parent's own
    assert result.summary == '{"hits":3}'


async def test_chunk_events_are_expanded_as_the_official_client_does(
    agui_server: AguiServer,
) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "chunks"))
    assert result.status == Status.COMPLETED, result
    assert text_of(events) == "Chunked text arrives."
    assert kinds(events, merged=MERGEABLE) == [
        Kind.STARTED,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.TOOL_CALL_START,
        Kind.TOOL_CALL_ARGS,
        Kind.TOOL_CALL_END,
        Kind.FINISHED,
    ]


async def test_crlf_framing_is_read(agui_server: AguiServer) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "crlf"))
    assert result.status == Status.COMPLETED, result
    assert text_of(events) == "Hello from AG-UI."


async def test_remote_subagents_are_nested_subagents_of_the_delegation(
    agui_server: AguiServer,
) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "subagents"))
    assert result.status == Status.COMPLETED, result
    nested_id = f"{result.delegation_id}/sub-1"
    lifecycle = [(e.kind, e.nested_id) for e in events if e.kind.startswith("subagent.nested.")]
    assert lifecycle == [(Kind.NESTED_STARTED, nested_id), (Kind.NESTED_FINISHED, nested_id)]
    started = next(e for e in events if e.kind == Kind.NESTED_STARTED)
    assert (started.name, started.text, started.remote_subagent_id) == (
        "researcher",
        "Finds sources",
        "sub-1",
    )
    tagged = [e for e in events if e.kind == Kind.TEXT_DELTA and e.nested_id == nested_id]
    assert [e.delta for e in tagged] == ["Three sources."]
    assert text_of(events) == "Three sources.Summary of the sources."
    assert [m.text for m in result.messages] == ["Summary of the sources."]  # its own only


@pytest.mark.parametrize(
    "scenario", ["stream", "reasoning", "tool", "chunks", "subagents", "error"]
)
async def test_the_parents_agui_stream_stays_valid_in_every_mode(
    agui_server: AguiServer, scenario: str
) -> None:
    agent = agui_agent(agui_server, scenario)
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            await run.delegate(
                DelegationRequest(agent="remote", objective="x", parent_tool_call_id="toolu_1")
            )
        entries = await journal_so_far(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    for mode in MODES:
        encoder = AguiStreamEncoder("thread", run.run_id, mode)
        frames = parse_sse(encoder.feed_batch(entries))
        assert check_frames(frames) == [], (mode, frames)
        if mode == "attributed":
            types = [event["type"] for _, event in frames]
            assert "SUBAGENT_STARTED" in types
            # The delegation, plus the remote's own subagent nested under it.
            assert types.count("SUBAGENT_STARTED") == (2 if scenario == "subagents" else 1)


# -- identity, credentials, context policy --------------------------------------------------------


async def test_credential_and_identity_go_to_the_agent_and_never_into_events(
    agui_server: AguiServer,
) -> None:
    refused, _ = await delegate_for_events(agui_agent(agui_server, "auth", token="wrong"))
    assert refused.error is not None and refused.error.code == ErrorCode.REMOTE_REJECTED
    assert "authentication refused" in refused.error.message
    assert "wrong" not in to_json(refused)

    agent = agui_agent(agui_server, "auth", token=TOKEN, forward_identity=True)
    async with Engine([agent]) as eng, eng.open_run(metadata={"user_id": "u-42"}) as run:
        result = await run.delegate(
            DelegationRequest(agent="remote", objective="x", parent_tool_call_id="toolu_9")
        )
        entries = await journal_so_far(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    (received,) = agui_server.runs(result.remote_context_id)
    assert received["authorization_present"]
    assert received["x_headers"]["x-user-id"] == "u-42"
    assert received["x_headers"]["x-tenant"] == "acme"
    assert received["x_headers"]["x-parent-run-id"] == run.run_id
    assert received["x_headers"]["x-parent-tool-call-id"] == "toolu_9"
    assert received["x_headers"]["x-delegation-id"] == result.delegation_id
    for entry in entries:
        assert TOKEN not in to_json(entry.event)
    assert TOKEN not in to_json(result)


async def test_sticky_context_policy_reuses_the_thread(agui_server: AguiServer) -> None:
    agent = agui_agent(agui_server, "stream", context_policy=ContextPolicy.STICKY_PER_RUN_AGENT)
    async with Engine([agent]) as eng, eng.open_run() as run:
        first = await run.delegate(DelegationRequest(agent="remote", objective="one"))
        second = await run.delegate(DelegationRequest(agent="remote", objective="two"))
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert first.remote_context_id and first.remote_context_id == second.remote_context_id
    assert first.remote_task_id != second.remote_task_id
    assert len(agui_server.runs(first.remote_context_id)) == 2


# -- input required: the resume run ---------------------------------------------------------------


async def test_interrupt_is_answered_by_a_resume_run_covering_every_interrupt(
    agui_server: AguiServer,
) -> None:
    agent = agui_agent(agui_server, "interrupt", input_required=InputRequiredMode.SURFACE)
    async with Engine([agent]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="clean up"))
        asked = await input_request(run)
        run.answer(handle.delegation_id, data={"approve-delete": True, "confirm-scope": "tmp only"})
        result = await handle.wait()
        entries = events_of(await journal_so_far(eng, run.run_id), handle.delegation_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert asked.raw is not None
    assert asked.raw["interruptIds"] == ["approve-delete", "confirm-scope"]
    assert asked.raw["interrupts"][1]["subagentRunId"] == "deleter-1"
    assert "May I delete?" in (asked.text or "") and "Which scope?" in (asked.text or "")
    assert result.status == Status.COMPLETED, result
    assert result.summary == "approved"
    assert text_of(entries).endswith('got: [true, "tmp only"]')
    assert [e.kind for e in entries].count(Kind.STARTED) == 1  # the resume run continues it
    resumed = [e for e in entries if e.kind == Kind.STATUS and (e.raw or {}).get("resumedFrom")]
    assert resumed and resumed[0].raw["resumedFrom"] == result.remote_task_id
    first, second = agui_server.runs(result.remote_context_id)
    assert "resume" not in first["input"]
    assert second["input"]["threadId"] == first["input"]["threadId"]
    assert second["input"]["runId"] != first["input"]["runId"]
    assert second["input"]["resume"] == [
        {"interruptId": "approve-delete", "status": "resolved", "payload": True},
        {"interruptId": "confirm-scope", "status": "resolved", "payload": "tmp only"},
    ]
    # The conversation so far goes with it, as the official client sends it.
    assert [m["role"] for m in second["input"]["messages"]] == ["user", "assistant"]
    assert second["input"]["messages"][1]["content"] == "May I delete?"


async def test_one_text_answer_answers_every_interrupt(agui_server: AguiServer) -> None:
    agent = agui_agent(agui_server, "interrupt", input_required=InputRequiredMode.SURFACE)
    async with Engine([agent]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        await input_request(run)
        run.answer(handle.delegation_id, text="yes")
        result = await handle.wait()
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    second = agui_server.runs(result.remote_context_id)[1]
    assert [e["payload"] for e in second["input"]["resume"]] == ["yes", "yes"]


async def test_interrupt_refused_by_default_policy_is_a_typed_error(
    agui_server: AguiServer,
) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "interrupt"))
    assert result.error is not None
    assert result.error.code == ErrorCode.INPUT_REQUIRED_UNSUPPORTED
    assert "May I delete?" in result.error.message
    assert sum(e.kind in Kind.DELEGATION_TERMINALS for e in events) == 1


# -- failures and malformed streams ---------------------------------------------------------------


async def test_run_error_is_a_remote_failure(agui_server: AguiServer) -> None:
    result, events = await delegate_for_events(agui_agent(agui_server, "error"))
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_FAILED
    assert "boom" in result.error.message
    assert (result.error.metadata or {})["remote_code"] == "E_BOOM"
    assert [m.text for m in result.messages] == ["Trying..."]  # what came before is kept
    assert kinds(events, merged=MERGEABLE)[-1] == Kind.FAILED


@pytest.mark.parametrize(
    ("scenario", "code", "words"),
    [
        ("badjson", ErrorCode.MALFORMED_REMOTE_PAYLOAD, "not JSON"),
        ("early", ErrorCode.MALFORMED_REMOTE_PAYLOAD, "before RUN_STARTED"),
        ("unopened", ErrorCode.MALFORMED_REMOTE_PAYLOAD, "never started"),
        ("noterminal", ErrorCode.STREAM_INTERRUPTED, "ended before the run ended"),
    ],
)
async def test_malformed_streams_end_with_a_typed_error_and_the_run_goes_on(
    agui_server: AguiServer, scenario: str, code: str, words: str
) -> None:
    bad = agui_agent(agui_server, scenario, key="bad")
    good = agui_agent(agui_server, "stream", key="good")
    async with Engine([bad, good]) as eng, eng.open_run() as run:
        with trio.fail_after(10):  # badjson keeps its stream open: the frame itself must end it
            failed = await run.delegate(DelegationRequest(agent="bad", objective="x"))
        after = await run.delegate(DelegationRequest(agent="good", objective="y"))
        entries = await journal_so_far(eng, run.run_id)
    for agent in (bad, good):
        await agent.target.aclose()  # type: ignore[attr-defined]
    assert failed.status == Status.FAILED
    assert failed.error is not None and failed.error.code == code, failed.error
    assert words in failed.error.message
    events = events_of(entries, failed.delegation_id)
    assert sum(e.kind in Kind.DELEGATION_TERMINALS for e in events) == 1
    assert events[-1].kind == Kind.FAILED
    assert after.status == Status.COMPLETED, after
    if scenario == "badjson":
        assert text_of(events) == "partial"  # what came before the bad frame is kept
        # The stream was still open: the engine stopped the remote run it gave up on.
        assert failed.remote_cancel == RemoteCancel.CONFIRMED
        await wait_for(lambda: agui_server.stops(failed.remote_task_id))


async def wait_for(condition: Any, seconds: float = 5.0) -> None:
    """Poll the remote's log (another process: there is no event to wait on)."""
    with trio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.02)


# -- cancellation ---------------------------------------------------------------------------------


async def cancel_while_streaming(agent: AgentSpec) -> Any:
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            async with run.events() as events:
                async for entry in events:
                    if entry.event.kind == Kind.TEXT_DELTA:
                        break
            handle.cancel("user pressed stop")
            result = await handle.wait()
        assert eng.active_delegations == 0 and eng.open_runs == 0
    await agent.target.aclose()  # type: ignore[attr-defined]
    return result


async def test_cancel_closes_the_stream_and_calls_the_stop_endpoint(
    agui_server: AguiServer,
) -> None:
    result = await cancel_while_streaming(agui_agent(agui_server, "hang"))
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    (stop,) = agui_server.stops(result.remote_task_id)
    assert stop["found"] and stop["body"]["threadId"] == result.remote_context_id
    assert stop["body"]["delegationId"] == result.delegation_id
    assert stop["path"].endswith("/agents/hang/stop")
    await wait_for(lambda: agui_server.disconnects(result.remote_task_id))


async def test_without_stop_url_cancel_closes_the_stream_and_says_unsupported(
    agui_server: AguiServer,
) -> None:
    result = await cancel_while_streaming(agui_agent(agui_server, "hang", stop=False))
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.UNSUPPORTED
    assert agui_server.stops(result.remote_task_id) == []
    await wait_for(lambda: agui_server.disconnects(result.remote_task_id))


async def test_a_refused_stop_is_cancel_pending(agui_server: AguiServer) -> None:
    agent = agui_agent(agui_server, "stubborn", cancel_retry_window=0.0)
    result = await cancel_while_streaming(agent)
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.PENDING
    assert agui_server.stops(result.remote_task_id)


# -- when the remote run needs a stop -------------------------------------------------------------
#
# A stop goes to the remote only while its run may still be running: not once the run ended there
# (RUN_FINISHED, RUN_ERROR, an interrupt outcome) or was refused (an error answer, no stream);
# always when we left a live stream ourselves (our limits, a timeout, a cancel) or the stream
# ended without a terminal. Stops are matched by the delegation id their body carries, so even a
# refused run (which the remote does not record) is covered.


def stops_of(server: AguiServer, delegation_id: str) -> list[dict[str, Any]]:
    return [
        s for s in server.log()["stops"] if (s["body"] or {}).get("delegationId") == delegation_id
    ]


@pytest.mark.parametrize(
    ("scenario", "options", "code", "remote_cancel"),
    [
        # RUN_ERROR: the remote's terminal ends the delegation; the engine has nothing to cancel.
        ("error", {}, ErrorCode.REMOTE_FAILED, None),
        # 401: the remote refused the run before it started (no stream, no run).
        ("auth", {"token": "wrong"}, ErrorCode.REMOTE_REJECTED, RemoteCancel.NOT_NEEDED),
        # RUN_FINISHED with an interrupt the policy refuses: the remote's run already ended.
        ("interrupt", {}, ErrorCode.INPUT_REQUIRED_UNSUPPORTED, RemoteCancel.NOT_NEEDED),
        # No connection: the RunAgentInput never reached the remote.
        ("unreachable", {}, ErrorCode.AGENT_UNAVAILABLE, RemoteCancel.NOT_NEEDED),
    ],
)
async def test_no_stop_for_a_remote_run_that_ended_or_never_started(
    agui_server: AguiServer, scenario: str, options: dict[str, Any], code: str, remote_cancel: str
) -> None:
    agent = agui_agent(agui_server, "stream" if scenario == "unreachable" else scenario, **options)
    if scenario == "unreachable":  # the same stop endpoint, but nothing listens at `url`
        config = agent.target.config  # type: ignore[attr-defined]
        url = f"http://127.0.0.1:{closed_port()}/agents/stream"
        agent = attrs.evolve(agent, target=AguiTarget(attrs.evolve(config, url=url)))
    result, _ = await delegate_for_events(agent)
    assert result.error is not None and result.error.code == code, result.error
    # Nothing runs at the remote for this delegation: not_needed (or no cancel at all), never
    # cancel_pending, and no stop request.
    assert result.remote_cancel == remote_cancel
    assert stops_of(agui_server, result.delegation_id) == []


async def test_no_stop_for_an_interrupted_run_cancelled_while_it_waits_for_an_answer(
    agui_server: AguiServer,
) -> None:
    agent = agui_agent(agui_server, "interrupt", input_required=InputRequiredMode.SURFACE)
    async with Engine([agent]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        await input_request(run)
        handle.cancel("the user walked away")
        result = await handle.wait()
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.NOT_NEEDED  # the run ended with its interrupt
    assert stops_of(agui_server, result.delegation_id) == []


@pytest.mark.parametrize(
    ("scenario", "policy", "code"),
    [
        # Our own limits ended a stream the remote kept open: its run may still be running.
        ("oversized", {}, ErrorCode.MALFORMED_REMOTE_PAYLOAD),
        ("badjson", {}, ErrorCode.MALFORMED_REMOTE_PAYLOAD),
        ("hang", {"max_text_chars": 5}, ErrorCode.OUTPUT_TOO_LARGE),
        ("hang", {"timeout": 0.5}, ErrorCode.REMOTE_TIMEOUT),
        # The stream ended or dropped without a terminal: the remote may still be running.
        ("noterminal", {}, ErrorCode.STREAM_INTERRUPTED),
        ("drop", {}, ErrorCode.STREAM_INTERRUPTED),
    ],
)
async def test_a_run_we_left_without_its_terminal_is_stopped_once(
    agui_server: AguiServer, scenario: str, policy: dict[str, Any], code: str
) -> None:
    timeout = policy.pop("timeout", None)
    agent = agui_agent(agui_server, scenario, cancel_retry_window=0.0, **policy)
    with trio.fail_after(20):
        result, _ = await delegate_for_events(agent, timeout_seconds=timeout)
    assert result.error is not None and result.error.code == code, result.error
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    (stop,) = stops_of(agui_server, result.delegation_id)
    assert stop["found"] and stop["body"]["runId"] == result.remote_task_id
    assert stop["path"].endswith(f"/agents/{scenario}/stop")
    assert result.remote_task_id not in agui_server.log()["running"]


# The engine calls `cancel()` whenever it ends a delegation without the remote's terminal, and a
# cancel may land after the stream already carried the run's end (the soak's run stops race the
# streams). Driving the session itself makes that order deterministic.


def open_session(server: AguiServer, scenario: str) -> Any:
    target = AguiTarget(
        AguiAgentConfig(url=server.url(scenario), stop_url=server.stop_url(scenario))
    )
    task = DelegationTask(
        run_id="run-direct",
        delegation_id=f"del-{uuid.uuid4().hex}",
        agent_key="remote",
        request=DelegationRequest(agent="remote", objective="x"),
        policy=DelegationPolicy(),
        timeout=10.0,
        stream=True,
    )
    return target, task, target.open_session(task, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("scenario", "last"), [("error", Kind.FAILED), ("stream", Kind.FINISHED)])
async def test_a_cancel_after_the_remotes_terminal_sends_no_stop(
    agui_server: AguiServer, scenario: str, last: str
) -> None:
    target, task, session = open_session(agui_server, scenario)
    updates: list[Any] = []

    async def emit(update: Any) -> None:
        updates.append(update)

    try:
        with trio.fail_after(10):
            await session.start(emit)
        assert updates[-1].kind == last
        assert not session.remote_may_run
        assert await session.cancel() is True  # nothing runs there: confirmed, nothing sent
    finally:
        await target.aclose()
    assert stops_of(agui_server, task.delegation_id) == []


async def test_a_cancel_of_a_live_run_sends_its_stop(agui_server: AguiServer) -> None:
    target, task, session = open_session(agui_server, "hang")
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def emit(update: Any) -> None:
                    if update.kind == Kind.TEXT_DELTA:
                        nursery.cancel_scope.cancel()  # as the actor leaves a stream

                nursery.start_soon(session.start, emit)
        assert session.remote_may_run
        assert await session.cancel() is True
    finally:
        await target.aclose()
    (stop,) = stops_of(agui_server, task.delegation_id)
    assert stop["found"] and stop["body"]["runId"] == session.remote_run_id


# -- side by side with A2A ------------------------------------------------------------------------


async def test_agui_and_a2a_delegations_side_by_side_give_the_same_event_family(
    agui_server: AguiServer, a2a_server: Any
) -> None:
    agui = agui_agent(agui_server, "stream", key="agui-agent")
    a2a = AgentSpec(
        key="a2a-agent",
        protocol="a2a",
        target=A2ATarget(A2AAgentConfig(card_url=a2a_server.card_url("stream"))),
    )
    results: dict[str, Any] = {}
    async with Engine([agui, a2a]) as eng, eng.open_run() as run:

        async def one(key: str) -> None:
            results[key] = await run.delegate(
                DelegationRequest(agent=key, objective="Summarize the design.")
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "agui-agent")
            nursery.start_soon(one, "a2a-agent")
        entries = await journal_so_far(eng, run.run_id)
    for agent in (agui, a2a):
        await agent.target.aclose()  # type: ignore[attr-defined]
    families = {}
    for key, result in results.items():
        assert result.status == Status.COMPLETED, result
        events = events_of(entries, result.delegation_id)
        assert all(e.kind.startswith("subagent.") for e in events)
        assert events[0].kind == Kind.STARTED and events[-1].kind == Kind.FINISHED
        assert {e.agent_key for e in events} == {key}
        families[key] = {Kind.STARTED, Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END} & {
            e.kind for e in events
        }
        assert results[key].summary and results[key].remote_task_id
    assert families["agui-agent"] == families["a2a-agent"]
    assert {results[k].remote_protocol for k in results} == {"agui", "a2a"}
