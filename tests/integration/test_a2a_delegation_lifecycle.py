"""A remote A2A task's whole life under a delegation, checked where the remote records it.

What `test_a2a_delegation.py` / `test_a2a_js_delegation.py` leave out or check only in part: the
full event sequence of a streamed delegation, the card's fingerprint on results, polling, stream
recovery, stale snapshots, every way a cancel reaches the remote, input and auth requests, artifact
limits, duplicates, credentials, sticky contexts and tasks left running. Remote side: the
fault-injecting a2a-sdk server (`a2a_server`), the raw server (`tools/peers/raw_a2a.py`) for wire
cases and the @a2a-js/sdk server (`a2a_js_server`). Assertions read what the remote recorded, not
only what the engine says.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

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
    to_json,
)
from tests.helpers.agents import a2a_agent
from tests.helpers.events import events_of, kinds
from tests.helpers.runs import delegate, raw_delegate, whole_journal
from tests.helpers.task_tracker import tracking
from tools.peers.raw_a2a import RawScenario, serve_raw_a2a, status_frame, task_frame

#: No journaled event may be bigger than this: artifact content stays out of the stream.
MAX_EVENT_JSON = 64 * 1024


async def wait_for_working(run: Any) -> Any:
    """The delegation's first `working` status (the remote task exists and runs)."""
    with trio.fail_after(20):
        async with run.events() as events:
            async for entry in events:
                event = entry.event
                if event.kind == Kind.STATUS and event.status == "working":
                    return event
    raise AssertionError("the run ended before the remote task was working")


def artifact_frame(
    task_id: str,
    artifact_id: str,
    name: str,
    text: str,
    *,
    append: bool = False,
    last: bool = False,
) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": "ctx-raw",
            "artifact": {
                "artifactId": artifact_id,
                "name": name,
                "parts": [{"text": text, "mediaType": "application/octet-stream"}],
            },
            "append": append,
            "lastChunk": last,
        }
    }


def timed_task(task_id: str, state: str, timestamp: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "contextId": "ctx-raw",
        "status": {"state": state, "timestamp": timestamp},
    }


# -- a streamed delegation, every assertion at the engine level -------------------------


async def test_a_streamed_delegation_journals_text_an_artifact_and_its_end_with_the_task_id(
    a2a_server: Any,
) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url("stream")))
    events = events_of(entries, result.delegation_id)
    sequence = [e.kind for e in events]
    assert sequence[0] == Kind.STARTED
    assert sequence.index(Kind.TEXT_START) < sequence.index(Kind.TEXT_DELTA)
    assert sequence.index(Kind.TEXT_DELTA) < sequence.index(Kind.TEXT_END)
    assert sequence.index(Kind.ARTIFACT) < sequence.index(Kind.FINISHED) == len(sequence) - 1
    artifacts = [e for e in events if e.kind == Kind.ARTIFACT]
    assert [a.artifact.name for a in artifacts] == ["report.md"]
    assert artifacts[0].artifact.uri and "# Report" not in to_json(artifacts[0])
    finished = events[-1]
    assert finished.remote_task_id == result.remote_task_id
    assert finished.card_fingerprint == result.card_fingerprint
    # The remote ids are on every event after the remote named its task.
    assert {e.remote_task_id for e in events} == {result.remote_task_id}


# -- discovery: the fingerprint on every result ----------------------------------------


async def test_a_failed_result_carries_the_fingerprint_of_the_card_it_used(
    a2a_server: Any,
) -> None:
    agent = a2a_agent(a2a_server.card_url("auth"))  # no token: 401 on SendStreamingMessage
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="remote", objective="x"))
        entries = await whole_journal(eng, run.run_id)
    fingerprint = agent.target.fingerprint  # type: ignore[attr-defined]
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_REJECTED
    assert fingerprint and fingerprint.startswith("sha256:")
    started = events_of(entries, result.delegation_id)[0]
    assert started.kind == Kind.STARTED
    assert result.card_fingerprint == fingerprint
    assert started.card_fingerprint == fingerprint


# -- non-streaming: return_immediately, the policy's poll interval -------------------------


async def test_a_non_streaming_card_gets_return_immediately_and_no_stream_call(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(
        streaming=False,
        send_result=task_frame("t1", "TASK_STATE_SUBMITTED"),
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_COMPLETED"}},
    )
    result, _ = await raw_delegate(nursery, scenario, poll_interval=0.01)
    assert result.status == Status.COMPLETED, result
    assert scenario.methods()[0] == "SendMessage"
    assert "SendStreamingMessage" not in scenario.methods()
    configuration = scenario.requests[0]["params"].get("configuration", {})
    assert configuration.get("returnImmediately") is True


async def test_polls_are_spaced_by_the_policys_interval(a2a_server: Any) -> None:
    a2a_server.reset()
    interval = 0.12
    agent = a2a_agent(a2a_server.card_url("nostream"), poll_interval=interval)
    result, _ = await delegate(agent)
    assert result.status == Status.COMPLETED, result
    times = [e["time"] for e in a2a_server.entries("nostream", "get_tasks", result.remote_task_id)]
    assert len(times) >= 2
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= interval * 0.9, gaps


# -- recovery: resubscribe, then GetTask, then stream_interrupted; stale snapshots -------------


async def test_an_unrecoverable_stream_fails_with_stream_interrupted_after_both_recoveries(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(
        stream=[task_frame("t1", "TASK_STATE_WORKING")],
        subscribe=None,  # SubscribeToTask: "Task not found"
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_WORKING"}},
    )
    result, entries = await raw_delegate(nursery, scenario)
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.STREAM_INTERRUPTED
    methods = scenario.methods()
    assert methods[:3] == ["SendStreamingMessage", "SubscribeToTask", "GetTask"]
    assert methods[-1] == "CancelTask"  # the task still runs remotely: it is cancelled
    statuses = [e.status for e in events_of(entries, result.delegation_id) if e.kind == Kind.STATUS]
    assert "stream_interrupted" in statuses
    assert [e.kind for e in events_of(entries, result.delegation_id)][-1] == Kind.FAILED


async def test_a_stale_snapshot_never_overrides_newer_streamed_state(
    nursery: trio.Nursery,
) -> None:
    scenario = RawScenario(
        stream=[{"task": timed_task("t1", "TASK_STATE_WORKING", "2026-01-01T00:00:02Z")}],
        subscribe=None,
        get_task=timed_task("t1", "TASK_STATE_SUBMITTED", "2026-01-01T00:00:01Z"),
    )
    result, entries = await raw_delegate(nursery, scenario)
    assert "GetTask" in scenario.methods()
    statuses = [e.status for e in events_of(entries, result.delegation_id) if e.kind == Kind.STATUS]
    assert "submitted" not in statuses
    assert events_of(entries, result.delegation_id)[0].status == "working"  # started carried it
    assert result.error is not None and result.error.code == ErrorCode.STREAM_INTERRUPTED


async def test_remote_timeout_reports_the_remotes_last_status_when_the_cancel_is_pending(
    a2a_server: Any,
) -> None:
    agent = a2a_agent(a2a_server.card_url("nocancel"), cancel_timeout=0.5, cancel_retry_window=0)
    result, _ = await delegate(agent, timeout_seconds=1)
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert result.remote_cancel == RemoteCancel.PENDING
    assert result.error.remote_status == "working"


async def test_stream_interrupted_reports_the_remotes_last_status(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        stream=[task_frame("t1", "TASK_STATE_WORKING")],
        subscribe=None,
        get_task={"id": "t1", "contextId": "ctx-raw", "status": {"state": "TASK_STATE_WORKING"}},
    )
    result, _ = await raw_delegate(nursery, scenario)
    assert result.error is not None and result.error.code == ErrorCode.STREAM_INTERRUPTED
    assert result.error.remote_status == "working"


# -- cancellation: parent cancel with a slow or hanging remote cancel, run end -------------


async def test_parent_cancel_with_a_slow_remote_cancel_is_pending_then_followed_up(
    a2a_server: Any,
) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("slowcancel"), cancel_timeout=0.5)
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            await wait_for_working(run)
            cancelled_at = trio.current_time()
            run.cancel("user pressed stop")
        # The run ends after ~cancel_timeout, not when the remote confirms (3 s). Measured, not
        # bounded with fail_after: the run's close is shielded, a deadline could not interrupt it.
        assert trio.current_time() - cancelled_at < 2.5
        result = handle.result()
        assert eng.cancel_followups[result.delegation_id] == "retrying"  # the watcher goes on
        with trio.fail_after(15):
            outcome = await eng.wait_cancel_followup(result.delegation_id)
        entries = await whole_journal(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.PENDING
    events = events_of(entries, result.delegation_id)
    assert [e.kind for e in events][-2:] == [Kind.STATUS, Kind.CANCELLED]
    assert events[-2].status == "cancel_pending"
    assert outcome == "confirmed_late"
    cancels = a2a_server.entries("slowcancel", "cancels", result.remote_task_id)
    assert len(cancels) >= 2  # the first (timed out locally) and the follow-up
    assert {c["tenant"] for c in cancels} == {"acme"}


async def test_parent_cancel_with_a_hanging_remote_cancel_ends_bounded_and_leaks_nothing(
    a2a_server: Any,
) -> None:
    a2a_server.reset()
    agent = a2a_agent(
        a2a_server.card_url("hangcancel"), cancel_timeout=0.3, cancel_retry_window=0.8
    )
    with tracking() as tracker:
        async with Engine([agent]) as eng:
            async with eng.open_run() as run:
                handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
                await wait_for_working(run)
                cancelled_at = trio.current_time()
                run.cancel("user pressed stop")
            assert trio.current_time() - cancelled_at < 2.5  # bounded by cancel_timeout
            result = handle.result()
            with trio.fail_after(10):
                outcome = await eng.wait_cancel_followup(result.delegation_id)
        await agent.target.aclose()  # type: ignore[attr-defined]
        assert tracker.alive() == []
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.PENDING
    assert outcome == "abandoned"
    assert a2a_server.entries("hangcancel", "cancels", result.remote_task_id)


async def test_ending_the_run_cancels_the_remote_task_with_tenant_and_metadata(
    a2a_server: Any,
) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("hang"))
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            await wait_for_working(run)
            # Leaving the block normally ends the run: the delegation is cancelled.
        result = handle.result()
        entries = await whole_journal(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    run_kinds = [e.event.kind for e in entries if not e.event.delegation_id]
    assert run_kinds[-1] == Kind.RUN_FINISHED
    cancels = a2a_server.entries("hang", "cancels", result.remote_task_id)
    assert len(cancels) == 1
    assert cancels[0]["tenant"] == "acme"
    assert cancels[0]["outcome"] == "TASK_STATE_CANCELED"
    metadata = cancels[0]["metadata"]
    assert metadata["delegation_id"] == result.delegation_id
    assert metadata["run_id"] == run.run_id
    assert metadata["agent_key"] == "remote"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_js_agent_parent_cancel_reaches_the_remote(a2a_js_server: Any, binding: str) -> None:
    config = A2AAgentConfig(
        card_url=a2a_js_server.card_url("hang"),
        tenant="acme",
        bindings=(binding,),
        prefer_own_bindings=True,
    )
    agent = AgentSpec(key="remote", protocol="a2a", target=A2ATarget(config))
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            await wait_for_working(run)
            run.cancel("user pressed stop")
        result = handle.result()
        assert eng.active_delegations == 0
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    cancels = a2a_js_server.cancels_for(result.remote_task_id)
    assert len(cancels) == 1
    assert cancels[0]["binding"] == binding
    assert cancels[0]["tenant"] == "acme"
    assert cancels[0]["outcome"] == "TASK_STATE_CANCELED"


# -- input-required: same ids, bounded wait, AUTH_REQUIRED surfaced ------------------------


async def test_the_answer_goes_to_the_same_task_and_context(a2a_server: Any) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("input"), input_required=InputRequiredMode.SURFACE)
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
            with trio.fail_after(20):
                async with run.events() as events:
                    async for entry in events:
                        if entry.event.kind == Kind.INPUT_REQUIRED:
                            asked = entry.event
                            break
            run.answer(handle.delegation_id, text="Ada")
            result = await handle.wait()
        entries = await whole_journal(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    assert asked.text == "What is your name?"
    follow_up = [m for m in a2a_server.entries("input", "messages") if m["follow_up"]]
    assert len(follow_up) == 1
    assert follow_up[0]["client_task_id"] == result.remote_task_id
    assert follow_up[0]["client_context_id"] == result.remote_context_id
    assert follow_up[0]["text"] == "Ada"
    events = events_of(entries, result.delegation_id)
    after = [e.kind for e in events][[e.kind for e in events].index(Kind.INPUT_REQUIRED) :]
    assert Kind.TEXT_DELTA in after  # it streamed again after the answer
    assert sum(e.kind in Kind.DELEGATION_TERMINALS for e in events) == 1


async def test_an_unanswered_input_request_times_out_and_cancels_the_remote(
    a2a_server: Any,
) -> None:
    a2a_server.reset()
    agent = a2a_agent(
        a2a_server.card_url("input"),
        input_required=InputRequiredMode.SURFACE,
        input_wait_timeout=0.3,
    )
    result, entries = await delegate(agent)
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.INPUT_REQUIRED
    assert Kind.INPUT_REQUIRED in kinds(events_of(entries, result.delegation_id))
    assert a2a_server.entries("input", "cancels", result.remote_task_id)


async def test_auth_required_is_surfaced_like_input_and_bounded(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            status_frame("t1", "TASK_STATE_AUTH_REQUIRED", "sign in at the portal"),
        ]
    )
    result, entries = await raw_delegate(
        nursery, scenario, input_required=InputRequiredMode.SURFACE, input_wait_timeout=0.2
    )
    asked = [e for e in events_of(entries, result.delegation_id) if e.kind == Kind.INPUT_REQUIRED]
    assert len(asked) == 1 and asked[0].status == "auth_required"
    assert result.error is not None and result.error.code == ErrorCode.INPUT_REQUIRED
    assert scenario.methods()[-1] == "CancelTask"


# -- artifacts: out of band, cumulative limit, max_artifacts --------------------------------


async def test_a_huge_artifact_is_referenced_never_inlined_into_events(a2a_server: Any) -> None:
    # 5 MiB under the default 10 MiB limit: accepted, by reference only.
    result, entries = await delegate(a2a_agent(a2a_server.card_url("huge")))
    assert result.status == Status.COMPLETED, result
    (artifact,) = result.artifacts
    assert artifact.uri and artifact.size_bytes == 5 * 1024 * 1024
    assert max(len(to_json(e.event)) for e in entries) < MAX_EVENT_JSON
    assert len(to_json(result)) < MAX_EVENT_JSON


async def test_a_huge_artifact_refused_by_policy_is_not_inlined_either(a2a_server: Any) -> None:
    agent = a2a_agent(a2a_server.card_url("huge"), max_artifact_bytes=1 << 20)
    result, entries = await delegate(agent)
    assert result.error is not None and result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    events = events_of(entries, result.delegation_id)
    refused = [e for e in events if e.kind == Kind.ARTIFACT and e.error is not None]
    assert refused and refused[0].error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert events[-1].kind == Kind.FAILED
    assert max(len(to_json(e.event)) for e in entries) < MAX_EVENT_JSON


def _chunked_artifact_scenario(chunk: int) -> RawScenario:
    return RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            artifact_frame("t1", "a1", "data.bin", "a" * chunk),
            artifact_frame("t1", "a1", "data.bin", "b" * chunk, append=True),
            artifact_frame("t1", "a1", "data.bin", "c" * chunk, append=True, last=True),
            status_frame("t1", "TASK_STATE_COMPLETED", "done"),
        ]
    )


async def test_artifact_bytes_are_counted_across_appended_chunks_and_the_partial_is_kept(
    nursery: trio.Nursery,
) -> None:
    chunk = 400_000  # each chunk under the limit, three of them over it
    scenario = _chunked_artifact_scenario(chunk)
    result, entries = await raw_delegate(nursery, scenario, max_artifact_bytes=1_000_000)
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert result.error.metadata["artifact_id"] == "a1"
    (partial,) = result.artifacts  # the first two chunks, by reference
    assert partial.size_bytes == 2 * chunk and partial.uri
    assert max(len(to_json(e.event)) for e in entries) < MAX_EVENT_JSON


async def test_a_delegation_ended_by_the_artifact_limit_cancels_its_remote_task(
    nursery: trio.Nursery,
) -> None:
    chunk = 400_000
    scenario = RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            artifact_frame("t1", "a1", "data.bin", "a" * chunk),
            artifact_frame("t1", "a1", "data.bin", "b" * chunk, append=True),
            artifact_frame("t1", "a1", "data.bin", "c" * chunk, append=True),
        ]  # the remote is still working when the limit is crossed
    )
    result, _ = await raw_delegate(nursery, scenario, max_artifact_bytes=1_000_000)
    assert result.error is not None and result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert "CancelTask" in scenario.methods()


async def test_max_artifacts_trims_the_excess_and_announces_it(nursery: trio.Nursery) -> None:
    scenario = RawScenario(
        stream=[
            task_frame("t1", "TASK_STATE_WORKING"),
            *(
                artifact_frame("t1", f"a{i}", f"file{i}.bin", "x" * 10, last=True)
                for i in (1, 2, 3)
            ),
            status_frame("t1", "TASK_STATE_COMPLETED", "done"),
        ]
    )
    await nursery.start(serve_raw_a2a, scenario)
    result, entries = await delegate(a2a_agent(scenario.card_url), max_artifacts=1)
    assert result.status == Status.COMPLETED, result
    assert [a.id for a in result.artifacts] == ["a1"]
    assert (result.metadata or {}).get("artifacts_dropped") == 2
    dropped = [e for e in events_of(entries, result.delegation_id) if e.kind == Kind.STREAM_DROPPED]
    assert [e.remote_artifact_id for e in dropped] == ["a2", "a3"]
    assert {e.dropped.reason for e in dropped} == {"max_artifacts"}


# -- duplicates: no doubled text or status ---------------------------------------------


async def test_duplicate_remote_events_double_neither_text_nor_status(a2a_server: Any) -> None:
    result, entries = await delegate(a2a_agent(a2a_server.card_url("dup")))
    events = events_of(entries, result.delegation_id)
    assert result.status == Status.COMPLETED
    text = "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert text == "said twice"
    assert [m.text for m in result.messages] == ["said twice"]
    statuses = [(e.status, e.text) for e in events if e.kind == Kind.STATUS]
    assert len(statuses) == len(set(statuses))
    assert [e.kind for e in events].count(Kind.STARTED) == 1


# -- auth failure: typed, and the secret redacted everywhere -------------------------------


async def test_a_wrong_token_is_remote_rejected_and_never_leaks(
    a2a_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a2a_server.reset()
    wrong = "wrong-secret-token-7f3a9c"
    result, entries = await delegate(a2a_agent(a2a_server.card_url("auth"), token=wrong))
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_REJECTED
    assert result.error.retryable is False
    assert a2a_server.entries("auth", "auth_rejections")
    assert a2a_server.entries("auth", "messages") == []
    assert wrong not in to_json(result)
    assert all(wrong not in to_json(e.event) for e in entries)
    assert not any(wrong in record.getMessage() for record in caplog.records)


async def test_an_unknown_key_sends_nothing_and_exposes_no_secret(a2a_server: Any) -> None:
    a2a_server.reset()
    agent = a2a_agent(a2a_server.card_url("auth"), token="test-token")
    async with Engine([agent]) as eng:
        async with eng.open_run() as run:
            result = await run.delegate(DelegationRequest(agent="unknown", objective="x"))
        entries = await whole_journal(eng, run.run_id)
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.error is not None and result.error.code == ErrorCode.AGENT_NOT_FOUND
    assert events_of(entries, result.delegation_id)[-1].kind == Kind.FAILED
    assert "test-token" not in to_json(result)
    assert all("test-token" not in to_json(e.event) for e in entries)
    log = a2a_server.log()["auth"]
    assert log["messages"] == [] and log["auth_rejections"] == []


# -- sessions: sticky per parent thread -------------------------------------------------


async def test_sticky_per_parent_thread_reuses_the_context_across_runs_of_one_thread(
    a2a_server: Any,
) -> None:
    a2a_server.reset()
    agent = a2a_agent(
        a2a_server.card_url("stream"), context_policy="sticky_per_parent_thread_agent"
    )
    results = []
    async with Engine([agent]) as eng:
        for thread in ("thread-a", "thread-a", "thread-b"):
            async with eng.open_run(thread_id=thread) as run:
                results.append(
                    await run.delegate(DelegationRequest(agent="remote", objective=thread))
                )
    await agent.target.aclose()  # type: ignore[attr-defined]
    assert [r.status for r in results] == [Status.COMPLETED] * 3
    sent = [m["client_context_id"] for m in a2a_server.entries("stream", "messages")]
    assert sent == ["", results[0].remote_context_id, ""]
    assert results[1].remote_context_id == results[0].remote_context_id
    assert results[2].remote_context_id != results[0].remote_context_id


# -- no task left running: after a parent cancel and an input refusal ---------------------


@pytest.mark.parametrize("scenario", ["hang", "input"])
async def test_no_task_outlives_a_cancelled_or_refused_a2a_delegation(
    a2a_server: Any, scenario: str
) -> None:
    agent = a2a_agent(a2a_server.card_url(scenario))
    with tracking() as tracker:
        async with Engine([agent]) as eng:
            async with eng.open_run() as run:
                handle = run.start_delegation(DelegationRequest(agent="remote", objective="x"))
                if scenario == "hang":
                    await wait_for_working(run)
                    run.cancel("stop")
                else:
                    await handle.wait()
            assert eng.active_delegations == 0
        await agent.target.aclose()  # type: ignore[attr-defined]
        assert any(name.startswith("delegation ") for name in tracker.names())
        assert tracker.alive() == []
    expected = Status.CANCELLED if scenario == "hang" else Status.FAILED
    assert handle.result().status == expected
