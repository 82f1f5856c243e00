"""Delegations to real A2A servers through the whole engine.

Remote side: `tools/peers/a2a_faulty.py` (the official a2a-sdk server in its own asyncio
process; each scenario an agent) and, for wire cases that server cannot produce, the raw server
in `tools/peers/raw_a2a.py`. Assertions are on what the engine journaled and returned *and*
on what the remote recorded (e.g. that CancelTask arrived with the tenant).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import (
    AgentSpec,
    DelegationRequest,
    Engine,
    ErrorCode,
    InputRequiredMode,
    Kind,
    RemoteCancel,
    Status,
    TargetPrepareError,
    to_json,
)
from tests.helpers.agents import a2a_agent
from tests.helpers.events import events_of, kinds
from tests.helpers.runs import delegate, raw_delegate
from tools.peers.a2a_faulty import REPORT_MD
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a, status_frame, task_frame

TOKEN = "test-token"


async def test_streaming_agent_text_artifact_and_structured_result(a2a_server: Any) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url("stream")))
    events = events_of(entries, result.delegation_id)
    assert result.status == Status.COMPLETED, result
    assert events[0].kind == Kind.STARTED and not events[0].synthesized
    assert events[0].remote_task_id == result.remote_task_id
    assert result.card_fingerprint and result.card_fingerprint.startswith("sha256:")
    assert events[0].card_fingerprint == result.card_fingerprint
    assert Kind.TEXT_DELTA in kinds(events)
    assert kinds(events)[-1] == Kind.FINISHED
    assert [e.kind for e in events].count(Kind.FINISHED) == 1
    text = "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert text and [m.text for m in result.messages] == [text]
    report = [a for a in result.artifacts if a.name == "report.md"]
    assert report and report[0].uri and report[0].mime_type == "text/markdown"
    assert result.summary and result.summary.startswith("done")
    assert result.remote_task_id and result.remote_context_id


async def test_non_streaming_agent_is_polled_without_fake_deltas(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("nostream"), poll_interval=0.05)
    result, entries = await delegate(agent)
    events = events_of(entries, result.delegation_id)
    assert result.status == Status.COMPLETED, result
    assert Kind.TEXT_DELTA not in kinds(events)
    statuses = [e.status for e in events if e.kind == Kind.STATUS]
    assert len(statuses) == len(set(statuses)), "status changes only"
    assert a2a_server.entries("nostream", "get_tasks", result.remote_task_id)


@pytest.mark.parametrize(
    ("scenario", "code"),
    [("fail", ErrorCode.REMOTE_FAILED), ("reject", ErrorCode.REMOTE_REJECTED)],
)
async def test_remote_failure_is_a_structured_error(
    a2a_server: Any, scenario: str, code: str
) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url(scenario)))
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == code
    assert result.error.remote_status in ("failed", "rejected")
    assert events_of(entries, result.delegation_id)[-1].kind == Kind.FAILED


async def test_timeout_cancels_the_remote_task_with_tenant(a2a_server: Any) -> None:
    result, _ = await delegate(a2a_agent(a2a_server.card_url("hang")), timeout_seconds=1)
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert result.error.remote_status == "working"
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    cancels = a2a_server.entries("hang", "cancels", result.remote_task_id)
    assert len(cancels) == 1
    assert cancels[0]["tenant"] == "acme"
    assert cancels[0]["metadata"]["delegation_id"] == result.delegation_id


async def test_run_cancel_reaches_the_remote_and_leaves_nothing_running(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("hang"))
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            async with run.events() as events:
                async for entry in events:
                    if entry.event.kind == Kind.STATUS and entry.event.status == "working":
                        break
            run.cancel("user pressed stop")
        result = handle.result()
        assert eng.active_delegations == 0 and eng.open_runs == 0
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert a2a_server.entries("hang", "cancels", result.remote_task_id)


@pytest.mark.parametrize("scenario", ["drop", "dropclean"])
async def test_dropped_stream_is_recovered_by_resubscribing(a2a_server: Any, scenario: str) -> None:
    # drop: the connection breaks mid-body; dropclean: the stream just ends, no terminal.
    result, entries = await delegate(a2a_agent(a2a_server.card_url(scenario)))
    assert result.status == Status.COMPLETED, result
    statuses = [e.status for e in events_of(entries, result.delegation_id) if e.kind == Kind.STATUS]
    assert "stream_interrupted" in statuses
    assert a2a_server.entries(scenario, "subscribes", result.remote_task_id)
    text = "".join(
        e.delta for e in events_of(entries, result.delegation_id) if e.kind == Kind.TEXT_DELTA
    )
    assert text == "before the drop, after the drop."  # no chunk lost or doubled


async def test_duplicate_remote_events_give_one_terminal_and_no_doubled_text(
    a2a_server: Any,
) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url("dup")))
    events = events_of(entries, result.delegation_id)
    assert result.status == Status.COMPLETED
    assert sum(e.kind in Kind.DELEGATION_TERMINALS for e in events) == 1


async def test_input_required_surfaced_answered_and_continued(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("input"), input_required=InputRequiredMode.SURFACE)
    async with Engine([agent]) as eng, eng.open_run() as run:
        handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
        async with run.events() as events:
            async for entry in events:
                if entry.event.kind == Kind.INPUT_REQUIRED:
                    break
        run.answer(handle.delegation_id, text="2026")
        result = await handle.wait()
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    assert "got: 2026" in (result.summary or "")
    follow_ups = [m for m in a2a_server.entries("input", "messages") if m["follow_up"]]
    assert follow_ups and follow_ups[-1]["task_id"] == result.remote_task_id


async def test_input_required_refused_by_policy_cancels_the_remote(a2a_server: Any) -> None:
    result, _ = await delegate(a2a_agent(a2a_server.card_url("input")))
    assert result.error is not None
    assert result.error.code == ErrorCode.INPUT_REQUIRED_UNSUPPORTED


async def test_auth_token_goes_to_the_agent_and_never_into_events(a2a_server: Any) -> None:
    refused, _ = await delegate(a2a_agent(a2a_server.card_url("auth")))
    assert refused.error is not None
    assert refused.error.code == ErrorCode.REMOTE_REJECTED  # 401: not retryable as is
    assert refused.error.retryable is False
    result, entries = await delegate(a2a_agent(a2a_server.card_url("auth"), token=TOKEN))
    assert result.status == Status.COMPLETED, result
    assert all(TOKEN not in to_json(e.event) for e in entries)
    assert TOKEN not in to_json(result) and TOKEN not in to_json(refused)


async def test_slow_cancel_reports_cancel_pending_then_is_followed_up(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("slowcancel"), cancel_timeout=0.5)
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(
                DelegationRequest(agent="remote", objective="x", timeout_seconds=1)
            )
        assert result.remote_cancel == RemoteCancel.PENDING
        with trio.fail_after(10):
            outcome = await eng.wait_cancel_followup(result.delegation_id)
        assert outcome == "confirmed_late"
        assert a2a_server.entries("slowcancel", "cancels", result.remote_task_id)
    await agent.target.aclose()  # type: ignore[attr-defined]


async def test_huge_artifact_is_refused_by_policy(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("huge"), max_artifact_bytes=1 << 20)
    result, _ = await delegate(agent)
    assert result.error is not None and result.error.code == ErrorCode.ARTIFACT_TOO_LARGE


async def test_concurrent_delegations_do_not_cross_talk(a2a_server: Any) -> None:
    agents = [
        a2a_agent(a2a_server.card_url("stream"), key="one"),
        a2a_agent(a2a_server.card_url("stream"), key="two"),
    ]
    async with Engine(agents) as eng:
        async with eng.open_run() as run:
            handles = [
                run.start_delegation(
                    DelegationRequest(agent=key, objective="x", parent_tool_call_id=f"call-{key}")
                )
                for key in ("one", "two")
            ]
            results = [await h.wait() for h in handles]
        journal = eng.journal(run.run_id)
        assert journal is not None
        async with journal.subscribe() as sub:
            entries = [entry async for entry in sub]
    for agent in agents:
        await agent.target.aclose()  # type: ignore[attr-defined]
    assert [r.status for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert results[0].remote_task_id != results[1].remote_task_id
    for result in results:
        events = events_of(entries, result.delegation_id)
        assert {e.parent_tool_call_id for e in events} == {f"call-{result.agent}"}
        assert {e.remote_task_id for e in events[1:]} == {result.remote_task_id}


async def test_unknown_key_makes_no_outbound_request(a2a_server: Any) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("stream"))
    async with Engine([agent]) as eng, eng.open_run() as run:
        result = await run.delegate(DelegationRequest(agent="unknown", objective="x"))
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.error is not None and result.error.code == ErrorCode.AGENT_NOT_FOUND
    assert a2a_server.entries("stream", "messages") == []


# -- wire cases from the raw server ------------------------------------------------------


async def test_a_terminal_before_any_task_is_confirmed_with_get_task(
    nursery: trio.Nursery,
) -> None:
    # A terminal for no announced task is a claim, not the end: the stream ended without the
    # task's own end, so the task it named is read with GetTask, which confirms it.
    scenario = RawScenario(
        stream=[status_frame("t1", "TASK_STATE_COMPLETED", "early")],
        get_task=task_frame("t1", "TASK_STATE_COMPLETED")["task"],
    )
    result, entries = await raw_delegate(nursery, scenario)
    events = events_of(entries, result.delegation_id)
    assert events[0].kind == Kind.STARTED
    assert events[-1].kind == Kind.FINISHED
    assert result.status == Status.COMPLETED
    assert result.remote_task_id == "t1"
    assert "GetTask" in scenario.methods()


async def test_a_terminal_before_any_task_that_get_task_refutes_is_not_a_completion(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(stream=[status_frame("t1", "TASK_STATE_COMPLETED", "early")])
    result, _ = await raw_delegate(nursery, scenario)  # GetTask: task not found
    assert result.status == Status.FAILED
    assert "GetTask" in scenario.methods()


async def test_bad_json_in_the_stream_is_a_typed_failure(nursery: trio.Nursery) -> None:
    scenario = RawScenario(stream=[task_frame("t1", "TASK_STATE_WORKING"), "{not json"])
    result, _ = await raw_delegate(nursery, scenario)
    assert result.status == Status.FAILED
    assert result.error is not None
    assert result.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert "CancelTask" in scenario.methods()


async def test_events_of_another_task_are_ignored(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            status_frame("other", "TASK_STATE_FAILED", "not yours"),
            status_frame("t1", "TASK_STATE_COMPLETED", "mine"),
        ]
    )
    result, _ = await raw_delegate(nursery, scenario)
    assert result.status == Status.COMPLETED
    assert result.summary == "mine"


async def test_stream_ending_without_terminal_is_recovered_from_get_task(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(
        stream=[task_frame("t1", "TASK_STATE_WORKING")],
        subscribe=None,
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_COMPLETED"}},
    )
    result, _ = await raw_delegate(nursery, scenario)
    assert result.status == Status.COMPLETED
    assert "GetTask" in scenario.methods()


@pytest.mark.parametrize(
    ("card", "reason"),
    [({"name": "broken"}, "no_interfaces"), ({"name": 5, "url": "http://h/"}, "unreadable")],
)
async def test_a_malformed_card_keeps_the_engine_from_starting(
    nursery: trio.Nursery, card: dict[str, Any], reason: str
) -> None:
    scenario = await nursery.start(serve_raw_a2a, RawScenario(card_override=card))
    agent = a2a_agent(scenario.card_url)
    with pytest.raises(TargetPrepareError) as refused:
        async with Engine([agent]):
            raise AssertionError("the engine started")
    error = refused.value.failures["remote"]
    assert error.code == ErrorCode.AGENT_UNAVAILABLE and not error.retryable
    assert (error.metadata or {}).get("reason") == reason
    assert "agent 'remote' cannot be used: agent_unavailable:" in str(refused.value)
    assert scenario.requests == []
    assert agent.target._pools.streams.is_closed  # type: ignore[attr-defined]


async def test_a_card_past_the_frame_limit_is_refused_before_it_is_parsed(
    nursery: trio.Nursery,
) -> None:
    """A card is a body read from a remote like any other: past `max_frame_bytes` it is not read
    further, and the agent is refused as a card to fix (the same card is as large next time)."""
    huge = {"name": "big", "description": "x" * (2 * 1024 * 1024)}
    scenario = await nursery.start(serve_raw_a2a, RawScenario(card_override=huge))
    config = A2AAgentConfig(card_url=scenario.card_url, max_frame_bytes=64 * 1024)
    agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))
    with pytest.raises(TargetPrepareError) as refused:
        async with Engine([agent]):
            raise AssertionError("the engine started")
    error = refused.value.failures["remote"]
    assert error.code == ErrorCode.AGENT_UNAVAILABLE and not error.retryable
    assert error.metadata is not None
    assert error.metadata["reason"] == "frame_too_large"
    assert error.metadata["limit_bytes"] == 64 * 1024
    assert "xxxx" not in error.message
    assert scenario.requests == []


async def test_a_card_that_turns_malformed_fails_the_delegation_before_any_task(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("adapters.a2a._target.CARD_TTL_SECONDS", 0.0)  # fetched every time
    scenario = await nursery.start(serve_raw_a2a, RawScenario())
    agent = a2a_agent(scenario.card_url)
    async with Engine([agent]) as eng, eng.open_run() as run:
        scenario.card_override = {"name": "broken"}
        result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
    assert result.error is not None and result.error.code == ErrorCode.AGENT_UNAVAILABLE
    assert not result.error.retryable
    assert scenario.requests == []


async def test_identity_and_lineage_are_forwarded_when_configured(a2a_server: Any) -> None:
    a2a_server.reset()
    config = A2AAgentConfig(
        card_url=a2a_server.card_url("stream"), tenant="acme", forward_identity=True
    )
    agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))
    async with Engine([agent]) as eng, eng.open_run(metadata={"user_id": "u-42"}) as run:
        result = await run.delegate(
            DelegationRequest(agent="remote", objective="x", parent_tool_call_id="toolu_9")
        )
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED
    message = a2a_server.entries("stream", "messages", result.remote_task_id)[0]
    assert message["x_user_id"] == "u-42"
    assert message["x_tenant"] == "acme"
    assert message["x_headers"]["x-parent-run-id"] == run.run_id
    assert message["x_headers"]["x-parent-tool-call-id"] == "toolu_9"
    assert message["x_headers"]["x-delegation-id"] == result.delegation_id


async def test_identity_is_not_forwarded_by_default(a2a_server: Any) -> None:
    a2a_server.reset()
    result, _ = await delegate(a2a_agent(a2a_server.card_url("stream")))
    message = a2a_server.entries("stream", "messages", result.remote_task_id)[0]
    assert message["x_user_id"] is None
    assert "x-parent-run-id" not in message["x_headers"]


@pytest.mark.parametrize("scenario", ["nocancel", "hangcancel"])
async def test_remote_that_never_confirms_a_cancel_is_reported_pending(
    a2a_server: Any, scenario: str
) -> None:
    agent = a2a_agent(a2a_server.card_url(scenario), cancel_timeout=0.5, cancel_retry_window=0)
    result, entries = await delegate(agent, timeout_seconds=1)
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert result.remote_cancel == RemoteCancel.PENDING
    statuses = [e.status for e in events_of(entries, result.delegation_id) if e.kind == Kind.STATUS]
    assert "cancel_pending" in statuses
    assert a2a_server.entries(scenario, "cancels", result.remote_task_id)


async def test_credentials_go_only_to_the_cards_origin(nursery: trio.Nursery) -> None:
    # The card (origin A) points the interface at origin B: B must not see the token.
    other = RawScenario(
        stream=[task_frame("t1", "TASK_STATE_WORKING"), status_frame("t1", "TASK_STATE_COMPLETED")]
    )
    await nursery.start(serve_raw_a2a, other)
    card = RawScenario(interface_url=f"http://127.0.0.1:{other.port}/jsonrpc")
    await nursery.start(serve_raw_a2a, card)
    result, _ = await delegate(a2a_agent(card.card_url, token=TOKEN))
    assert result.status == Status.COMPLETED
    assert card.headers[0].get("authorization") == f"Bearer {TOKEN}"
    assert other.headers and all("authorization" not in h for h in other.headers)


async def test_trusted_origins_receive_credentials(nursery: trio.Nursery) -> None:
    other = RawScenario(
        stream=[task_frame("t1", "TASK_STATE_WORKING"), status_frame("t1", "TASK_STATE_COMPLETED")]
    )
    await nursery.start(serve_raw_a2a, other)
    card = RawScenario(interface_url=f"http://127.0.0.1:{other.port}/jsonrpc")
    await nursery.start(serve_raw_a2a, card)
    config = A2AAgentConfig(
        card_url=card.card_url,
        auth_header=("X-API-Key", TOKEN),
        trusted_origins=(f"http://127.0.0.1:{other.port}",),
    )
    agent = AgentSpec(key="remote", target=A2ATarget(config), secrets=config.secrets)
    result, entries = await delegate(agent)
    assert result.status == Status.COMPLETED
    assert all(h.get("x-api-key") == TOKEN for h in other.headers)
    assert all(TOKEN not in to_json(e.event) for e in entries)


@pytest.mark.parametrize("scenario", ["stream", "hang", "drop", "fail"])
async def test_no_task_outlives_an_a2a_delegation(a2a_server: Any, scenario: str) -> None:
    from tests.helpers.task_tracker import tracking

    agent = a2a_agent(a2a_server.card_url(scenario))
    with tracking() as tracker:
        async with Engine([agent]) as eng, eng.open_run() as run:
            await run.delegate(DelegationRequest(agent="remote", objective="x", timeout_seconds=1))
        await agent.target.aclose()  # type: ignore[attr-defined]
        assert tracker.names(), "the tracker saw the run's tasks"
        assert tracker.alive() == []


async def test_a2a_0_3_agent_through_the_sdks_compat_transport(a2a_server: Any) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url("v03")))
    assert result.status == Status.COMPLETED, result
    events = events_of(entries, result.delegation_id)
    assert "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert result.card_fingerprint and result.card_fingerprint.startswith("sha256:")


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_each_binding_delegates_and_cancels(a2a_server: Any, binding: str) -> None:
    a2a_server.reset()
    results = {}
    for scenario in ("stream", "hang"):
        config = A2AAgentConfig(
            card_url=a2a_server.card_url(scenario),
            tenant="acme",
            bindings=(binding,),
            prefer_own_bindings=True,
        )
        agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))
        results[scenario], _ = await delegate(agent, timeout_seconds=1)
    assert results["stream"].status == Status.COMPLETED
    assert results["hang"].remote_cancel == RemoteCancel.CONFIRMED
    recorded = {"JSONRPC": "jsonrpc", "HTTP+JSON": "rest"}[binding]  # the server's spelling
    sent = a2a_server.entries("stream", "messages", results["stream"].remote_task_id)
    assert {m["binding"] for m in sent} == {recorded}
    cancels = a2a_server.entries("hang", "cancels", results["hang"].remote_task_id)
    assert [c["binding"] for c in cancels] == [recorded]
    assert cancels[0]["tenant"] == "acme"


def refusing_streamer() -> RawScenario:
    return RawScenario(
        refuse_streaming=True,
        send_result=task_frame("t1", "TASK_STATE_SUBMITTED"),
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_COMPLETED"}},
    )


async def test_refused_streaming_falls_back_to_polling(nursery: trio.Nursery) -> None:
    scenario = refusing_streamer()
    result, entries = await raw_delegate(nursery, scenario, poll_interval=0.01)
    assert result.status == Status.COMPLETED, result
    assert scenario.methods()[:2] == ["SendStreamingMessage", "SendMessage"]
    assert "GetTask" in scenario.methods()
    assert Kind.TEXT_DELTA not in kinds(events_of(entries, result.delegation_id))


async def test_refused_streaming_fails_when_policy_forbids_fallback(
    nursery: trio.Nursery,
) -> None:
    scenario = refusing_streamer()
    result, _ = await raw_delegate(nursery, scenario, fallback_to_polling=False)
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.AGENT_UNAVAILABLE
    assert scenario.methods() == ["SendStreamingMessage"]


async def test_auth_required_is_an_input_request(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            status_frame("t1", "TASK_STATE_AUTH_REQUIRED", "sign in at the portal"),
        ]
    )
    result, entries = await raw_delegate(nursery, scenario)
    events = events_of(entries, result.delegation_id)
    asked = [e for e in events if e.kind == Kind.INPUT_REQUIRED]
    assert asked and asked[0].status == "auth_required"
    assert asked[0].text == "sign in at the portal"
    assert result.error is not None
    assert result.error.code == ErrorCode.INPUT_REQUIRED_UNSUPPORTED
    assert "CancelTask" in scenario.methods()


async def test_card_is_cached_and_refetched_after_its_ttl(
    a2a_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapters.a2a._target as target_module

    agent = a2a_agent(a2a_server.card_url("stream"))
    target = agent.target
    await target.prepare()  # type: ignore[attr-defined]
    client = target._client(True)  # type: ignore[attr-defined]
    fetched_at = target._card_fetched_at  # type: ignore[attr-defined]
    await target.prepare()  # type: ignore[attr-defined]
    assert target._card_fetched_at == fetched_at  # type: ignore[attr-defined]  # cached
    monkeypatch.setattr(target_module, "CARD_TTL_SECONDS", 0.0)
    await target.prepare()  # type: ignore[attr-defined]
    assert target._card_fetched_at > fetched_at  # type: ignore[attr-defined]  # fetched again
    assert target._client(True) is client  # type: ignore[attr-defined]  # same card: kept
    result, _ = await delegate(agent)
    assert result.status == Status.COMPLETED


@pytest.mark.parametrize(
    ("policy", "sticky"), [("ephemeral", False), ("sticky_per_run_agent", True)]
)
async def test_context_policy_decides_the_context_id_sent_to_the_remote(
    a2a_server: Any, policy: str, sticky: bool
) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("stream"), context_policy=policy)
    async with Engine([agent]) as eng, eng.open_run() as run:
        first = await run.delegate(DelegationRequest(agent="remote", objective="one"))
        second = await run.delegate(DelegationRequest(agent="remote", objective="two"))
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert first.status == second.status == Status.COMPLETED
    sent = [m["client_context_id"] for m in a2a_server.entries("stream", "messages")]
    assert sent[0] == ""  # the first delegation lets the remote choose
    assert first.remote_context_id
    if sticky:
        assert sent[1] == first.remote_context_id
        assert second.remote_context_id == first.remote_context_id
    else:
        assert sent[1] == ""
        assert second.remote_context_id != first.remote_context_id


@pytest.mark.parametrize("display_name", ["", "Research desk"])
async def test_a_subagent_is_named_by_the_host_else_by_its_card(
    a2a_server: Any, display_name: str
) -> None:
    agent = attrs.evolve(a2a_agent(a2a_server.card_url("stream")), display_name=display_name)
    _, entries = await delegate(agent)
    names = {e.event.agent_name for e in entries if e.event.delegation_id}
    assert names == {display_name or "faulty-stream"}


async def test_a_remote_artifacts_inline_content_is_kept_for_viewers(a2a_server: Any) -> None:
    """A file the remote sends inline (report.md, one text part) can be read back from the run
    (`Run.artifact`, what `GET /runs/<id>/artifacts/...` serves), exactly as sent, while its
    result and events carry the reference only."""
    async with Engine([a2a_agent(a2a_server.card_url("stream"))]) as eng, eng.open_run() as run:
        result = await run.delegate(DelegationRequest(agent="remote", objective="go"))
        (report,) = [a for a in result.artifacts if a.name == "report.md"]
        kept = run.artifact(result.delegation_id, report.id)
    assert result.status == Status.COMPLETED, result
    assert kept is not None
    ref, content = kept
    assert ref.mime_type == "text/markdown" and content == REPORT_MD.encode()
    assert REPORT_MD not in to_json(result)
