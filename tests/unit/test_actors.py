"""The actor tree end to end in memory: delegation paths, limits, cancellation, supervision."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AgentSpec,
    DelegationError,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    EngineLimits,
    ErrorCode,
    InputRequiredMode,
    Kind,
    RemoteCancel,
    Status,
    TargetCapabilities,
    open_run,
)
from tests.helpers.agents import spec
from tests.helpers.fakes import ScriptedTarget, delta, finished, journal_kinds, started, status


def request(agent: str = "remote", **fields: object) -> DelegationRequest:
    return DelegationRequest(agent=agent, objective="do it", **fields)  # type: ignore[arg-type]


async def collect(run_or_journal: object) -> list:
    if hasattr(run_or_journal, "flush"):
        await run_or_journal.flush()
    journal = getattr(run_or_journal, "journal", run_or_journal)
    out = []
    async with journal.subscribe() as sub:  # type: ignore[attr-defined]
        while journal.head > (out[-1].cursor if out else 0):  # type: ignore[attr-defined]
            out.extend(await sub.receive_batch())
    return out


async def test_happy_path_orders_events_and_returns_after_terminal_is_journaled() -> None:
    target = ScriptedTarget(
        start=[[started(), status("working", "reading"), delta("Hel"), delta("lo"), finished("Hi")]]
    )
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request(parent_tool_call_id="toolu_1"))
        # The terminal is in the journal before delegate() returns.
        entries = await collect(run)
        assert entries[-1].event.kind == Kind.FINISHED
    assert result.status == Status.COMPLETED
    assert result.summary == "Hi"
    assert result.remote_task_id == "task-1" and result.remote_context_id == "ctx-1"
    assert result.parent_tool_call_id == "toolu_1"
    assert [m.text for m in result.messages] == ["Hello"]
    # A reader that replays after the fact may get the two deltas merged (it is behind).
    kinds = [
        k
        for i, k in enumerate(journal_kinds(entries, result.delegation_id))
        if k != Kind.TEXT_DELTA or journal_kinds(entries, result.delegation_id)[i - 1] != k
    ]
    assert kinds == [
        Kind.STARTED,
        Kind.STATUS,
        Kind.TEXT_START,
        Kind.TEXT_DELTA,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    assert "".join(e.event.delta for e in entries if e.event.kind == Kind.TEXT_DELTA) == "Hello"
    assert all(e.event.parent_tool_call_id == "toolu_1" for e in entries if e.event.delegation_id)
    assert target.closed == 1
    assert "cancel" not in target.calls


async def test_unknown_agent_fails_without_touching_any_target() -> None:
    target = ScriptedTarget()
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request(agent="unknown"))
        entries = await collect(run)
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.AGENT_NOT_FOUND
    assert "remote" in result.error.message  # names the keys the model may use
    assert target.calls == [] and target.tasks == []
    assert journal_kinds(entries, result.delegation_id) == [Kind.STARTED, Kind.FAILED]


async def test_per_run_concurrency_limit_refuses_at_once() -> None:
    target = ScriptedTarget(start=[[started(), "hang"], [started(), "hang"]])
    limits = EngineLimits(max_concurrent_per_run=2)
    async with Engine([spec(target)], limits=limits) as eng, eng.open_run() as run:
        first = run.start_delegation(request())
        second = run.start_delegation(request())
        third = await run.delegate(request())
        assert third.error is not None and third.error.code == ErrorCode.CONCURRENCY_LIMIT
        assert third.error.retryable is True
        assert eng.active_delegations == 2
        first.cancel()
        await first.wait()
        fourth = run.start_delegation(request())  # a slot freed up
        assert not fourth.finished
    assert (await second.wait()).status == Status.CANCELLED
    assert eng.active_delegations == 0


async def test_global_concurrency_limit_spans_runs() -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    limits = EngineLimits(max_concurrent_global=1)
    engine = Engine([spec(target)], limits=limits)
    async with engine as eng, eng.open_run() as run_a, eng.open_run() as run_b:
        run_a.start_delegation(request())
        refused = await run_b.delegate(request())
        assert refused.error is not None
        assert refused.error.code == ErrorCode.CONCURRENCY_LIMIT


async def test_timeout_cancels_the_remote_and_reports_its_last_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), status("working", "step 3 of 9"), "hang"]])
    async with open_run([spec(target, max_timeout=60)]) as run:
        t0 = trio.current_time()
        result = await run.delegate(request(timeout_seconds=10_000))  # clamped to 60
        elapsed = trio.current_time() - t0
    assert elapsed == pytest.approx(60)
    assert result.status == Status.FAILED
    assert result.error is not None
    assert result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert result.error.retryable is True
    assert result.error.remote_status == "working"
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert target.calls == ["start", "cancel"]


async def test_default_timeout_applies_when_none_requested(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with open_run([spec(target, default_timeout=7, max_timeout=60)]) as run:
        t0 = trio.current_time()
        result = await run.delegate(request())
        assert trio.current_time() - t0 == pytest.approx(7)
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT


async def test_cancel_confirmed_by_remote() -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with open_run([spec(target)]) as run:
        handle = run.start_delegation(request())
        await trio.testing.wait_all_tasks_blocked()
        handle.cancel("user pressed stop")
        result = await handle.wait()
        entries = await collect(run)
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert result.error is not None and result.error.message == "user pressed stop"
    assert journal_kinds(entries, result.delegation_id)[-1] == Kind.CANCELLED
    assert target.calls == ["start", "cancel"]


@pytest.mark.parametrize("mode", ["hang", "refuse", "raise"])
async def test_unconfirmed_cancel_reports_cancel_pending(
    autojump_clock: trio.testing.MockClock, mode: str
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]], cancel=mode)
    async with open_run([spec(target, cancel_timeout=3)]) as run:
        handle = run.start_delegation(request())
        await trio.testing.wait_all_tasks_blocked()
        t0 = trio.current_time()
        handle.cancel()
        result = await handle.wait()
        elapsed = trio.current_time() - t0
        entries = await collect(run)
    assert elapsed == pytest.approx(3 if mode == "hang" else 0)
    assert result.status == Status.CANCELLED
    assert result.remote_cancel == RemoteCancel.PENDING
    events = [e.event for e in entries if e.event.delegation_id == result.delegation_id]
    assert [e.status for e in events if e.kind == Kind.STATUS][-1] == "cancel_pending"
    assert events[-1].kind == Kind.CANCELLED


async def test_target_crash_becomes_failed_result_and_run_goes_on() -> None:
    crashing = ScriptedTarget(start=[[started(), RuntimeError("boom")]])
    healthy = ScriptedTarget(start=[[started(), finished("fine")]])
    async with Engine([spec(crashing, key="crash"), spec(healthy, key="ok")]) as eng:
        async with eng.open_run() as run:
            crashed = await run.delegate(request(agent="crash"))
            after = await run.delegate(request(agent="ok"))
        entries = await collect(eng.journal(run.run_id))
    assert crashed.status == Status.FAILED
    assert crashed.error is not None and crashed.error.code == ErrorCode.INTERNAL_ERROR
    assert "boom" not in crashed.error.message  # internals are not shown to the model
    assert after.status == Status.COMPLETED
    assert journal_kinds(entries, crashed.delegation_id)[-1] == Kind.FAILED
    assert entries[-1].event.kind == Kind.RUN_FINISHED


async def test_typed_target_error_keeps_its_code() -> None:
    error = DelegationError(code=ErrorCode.AGENT_UNAVAILABLE, message="card fetch failed: 503")
    target = ScriptedTarget(start=[[error]])
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request())
    assert result.error is not None
    assert result.error.code == ErrorCode.AGENT_UNAVAILABLE
    assert result.error.retryable is True


async def test_in_process_agent_crash_is_remote_failed() -> None:
    async def broken(task: LocalTask) -> str:
        await task.say("partial")
        raise KeyError("nope")

    async with open_run([spec(InProcessTarget(broken))]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_FAILED
    assert [m.text for m in result.messages] == ["partial"]


async def test_stream_drop_recovers_by_resubscribing() -> None:
    target = ScriptedTarget(
        start=[[started(), delta("a")]],
        resubscribe=[[status("working"), delta("b"), finished()]],
        capabilities=TargetCapabilities(streaming=True, resubscribe=True, poll=True),
    )
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request())
        entries = await collect(run)
    assert result.status == Status.COMPLETED
    assert target.calls == ["start", "resubscribe"]
    statuses = [e.event.status for e in entries if e.event.kind == Kind.STATUS]
    assert "stream_interrupted" in statuses
    assert [m.text for m in result.messages] == ["ab"]


async def test_stream_drop_falls_back_to_a_poll_then_fails_interrupted() -> None:
    target = ScriptedTarget(
        start=[[started()]],
        resubscribe=[[DelegationError(code=ErrorCode.REMOTE_FAILED, message="gone")]],
        poll=[[status("working")]],
        capabilities=TargetCapabilities(streaming=True, resubscribe=True, poll=True),
    )
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request())
    assert target.calls == ["start", "resubscribe", "poll", "cancel"]
    assert result.error is not None and result.error.code == ErrorCode.STREAM_INTERRUPTED
    assert result.error.retryable is True


async def test_stream_drop_recovered_by_poll_snapshot() -> None:
    target = ScriptedTarget(
        start=[[started()]],
        poll=[[finished("from snapshot")]],
        capabilities=TargetCapabilities(streaming=True, resubscribe=False, poll=True),
    )
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request())
    assert result.status == Status.COMPLETED and result.summary == "from snapshot"


async def test_stream_that_ends_early_without_recovery_is_interrupted() -> None:
    target = ScriptedTarget(start=[[started(), delta("x")]])
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.STREAM_INTERRUPTED


async def test_non_streaming_target_is_polled_and_repeats_are_folded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(
        start=[[started(status="submitted")]],
        poll=[[status("working")], [status("working")], [status("working")], [finished("done")]],
        capabilities=TargetCapabilities(streaming=False, poll=True),
    )
    async with open_run([spec(target, poll_interval=2)]) as run:
        t0 = trio.current_time()
        result = await run.delegate(request())
        assert trio.current_time() - t0 == pytest.approx(8)  # four polls, 2 s apart
        entries = await collect(run)
    kinds = journal_kinds(entries, result.delegation_id)
    assert kinds == [Kind.STARTED, Kind.STATUS, Kind.FINISHED]
    assert Kind.TEXT_DELTA not in kinds  # nothing invented
    assert result.summary == "done"
    assert target.tasks[0].stream is False


async def test_require_streaming_refuses_a_polling_target() -> None:
    target = ScriptedTarget(capabilities=TargetCapabilities(streaming=False, poll=True))
    async with open_run([spec(target, require_streaming=True)]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.CAPABILITY_UNSUPPORTED
    assert target.calls == []


def asking_agent() -> InProcessTarget:
    async def agent(task: LocalTask) -> str:
        await task.say("Need a detail.")
        answer = await task.ask("Which year?")
        await task.say(f"Using {answer.text}.")
        return f"answered with {answer.text}"

    return InProcessTarget(agent)


async def test_input_required_fails_by_default_and_cancels_the_remote() -> None:
    async with open_run([spec(asking_agent())]) as run:
        result = await run.delegate(request())
        entries = await collect(run)
    assert result.error is not None
    assert result.error.code == ErrorCode.INPUT_REQUIRED_UNSUPPORTED
    assert "Which year?" in result.error.message
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert Kind.INPUT_REQUIRED in journal_kinds(entries, result.delegation_id)


async def test_input_required_surfaced_and_answered_continues() -> None:
    async with open_run([spec(asking_agent(), input_required=InputRequiredMode.SURFACE)]) as run:
        handle = run.start_delegation(request())
        async with run.events() as events:
            async for entry in events:
                if entry.event.kind == Kind.INPUT_REQUIRED:
                    assert entry.event.text == "Which year?"
                    break
        run.answer(handle.delegation_id, text="2026")
        result = await handle.wait()
    assert result.status == Status.COMPLETED
    assert result.summary == "answered with 2026"
    assert [m.text for m in result.messages] == ["Need a detail.", "Using 2026."]


async def test_input_wait_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    policy = {"input_required": InputRequiredMode.SURFACE, "input_wait_timeout": 30}
    async with open_run([spec(asking_agent(), **policy)]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.INPUT_REQUIRED
    assert "30 s" in result.error.message


async def test_input_required_returned_to_the_parent() -> None:
    async with open_run([spec(asking_agent(), input_required=InputRequiredMode.RETURN)]) as run:
        result = await run.delegate(request())
        entries = await collect(run)
    assert result.status == Status.INPUT_REQUIRED
    assert result.error is not None and result.error.code == ErrorCode.INPUT_REQUIRED
    kinds = journal_kinds(entries, result.delegation_id)
    # The question is withdrawn (the parent model decides now) before the terminal.
    assert kinds[-3:] == [Kind.INPUT_REQUIRED, Kind.INPUT_CLOSED, Kind.FINISHED]


async def test_answer_to_a_delegation_not_waiting_is_a_typed_error() -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with open_run([spec(target)]) as run:
        handle = run.start_delegation(request())
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(DelegationError) as info:
            run.answer(handle.delegation_id, text="x")
        assert info.value.code == ErrorCode.INVALID_INPUT
        with pytest.raises(DelegationError):
            run.answer("del-missing", text="x")


async def test_run_cancel_cascades_to_every_delegation_and_remote() -> None:
    targets = [ScriptedTarget(start=[[started(f"t{i}"), "hang"]]) for i in range(3)]
    agents = [spec(t, key=f"a{i}") for i, t in enumerate(targets)]
    async with Engine(agents) as eng:
        async with eng.open_run() as run:
            handles = [run.start_delegation(request(agent=f"a{i}")) for i in range(3)]
            await trio.testing.wait_all_tasks_blocked()
            run.cancel("stop")
            await trio.sleep_forever()  # the body is cancelled too
        entries = await collect(eng.journal(run.run_id))
    assert all(t.calls == ["start", "cancel"] for t in targets)
    assert all(h.result().status == Status.CANCELLED for h in handles)
    assert entries[-1].event.kind == Kind.RUN_CANCELLED
    assert eng.open_runs == 0 and eng.active_delegations == 0


async def test_cancelling_the_waiting_caller_cancels_the_delegation() -> None:
    target = ScriptedTarget(start=[[started(), "hang"]])
    async with open_run([spec(target)]) as run:
        with trio.move_on_after(0.01):
            await run.delegate(request())
        result = run.delegations()[0]
        for _ in range(100):
            if result.status != Status.RUNNING:
                break
            await trio.testing.wait_all_tasks_blocked()
            result = run.delegations()[0]
    assert result.status == Status.CANCELLED
    assert target.calls == ["start", "cancel"]


async def test_leaving_the_run_cancels_running_delegations_and_results_survive() -> None:
    target = ScriptedTarget(start=[[started(), finished("ok")], [started(), "hang"]])
    async with Engine([spec(target)]) as eng:
        async with eng.open_run() as run:
            done = await run.delegate(request())
            running = run.start_delegation(request())
            await trio.testing.wait_all_tasks_blocked()
            snapshot = run.delegations()
            assert [r.status for r in snapshot] == [Status.COMPLETED, Status.RUNNING]
        assert running.finished
        results = eng.results(run.run_id)
    assert [r.delegation_id for r in results] == [done.delegation_id, running.delegation_id]
    assert results[1].status == Status.CANCELLED
    assert run.result(running.delegation_id) == results[1]


async def test_body_exception_propagates_unwrapped_and_fails_the_run() -> None:
    async with Engine([]) as eng:
        with pytest.raises(ValueError, match="parent broke"):
            async with eng.open_run() as run:
                raise ValueError("parent broke")
        entries = await collect(eng.journal(run.run_id))
    assert entries[-1].event.kind == Kind.RUN_FAILED


async def test_artifact_limit_ends_with_partial_result() -> None:
    async def producer(task: LocalTask) -> str:
        await task.artifact("small.txt", data=b"x" * 10)
        await task.artifact("huge.bin", data=b"x" * 1000)
        return "never"

    async with open_run([spec(InProcessTarget(producer), max_artifact_bytes=100)]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.ARTIFACT_TOO_LARGE
    assert [a.name for a in result.artifacts] == ["small.txt"]
    assert result.artifacts[0].uri is not None


async def test_parent_tool_result_follows_subagent_terminal() -> None:
    target = ScriptedTarget(start=[[started(), finished("x")]])
    async with open_run([spec(target)]) as run:
        await run.emit(
            Kind.PARENT_TOOL_CALL_START, tool_call_id="c1", tool_name="delegate_to_agent"
        )
        result = await run.delegate(request(parent_tool_call_id="c1"))
        await run.emit(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="c1", result=result.summary)
        entries = await collect(run)
    kinds = [e.event.kind for e in entries]
    assert kinds.index(Kind.FINISHED) < kinds.index(Kind.PARENT_TOOL_CALL_RESULT)


async def test_emit_refuses_lifecycle_kinds() -> None:
    async with open_run([]) as run:
        for kind in (Kind.RUN_FINISHED, Kind.RUN_STARTED, Kind.FINISHED):
            with pytest.raises(ValueError, match="not a parent payload kind"):
                await run.emit(kind)


async def test_finish_ends_the_run_early_and_refuses_new_delegations() -> None:
    target = ScriptedTarget(start=[[started(), finished()]])
    async with Engine([spec(target)]) as eng:
        async with eng.open_run() as run:
            await run.finish("all done")
            late = await run.delegate(request())
        entries = await collect(eng.journal(run.run_id))
    assert late.error is not None and late.error.code == ErrorCode.RUN_CLOSED
    assert [e.event.kind for e in entries].count(Kind.RUN_FINISHED) == 1
    assert target.calls == []


async def test_model_tool_input_becomes_a_correlated_delegation() -> None:
    from engine import parse_tool_input

    target = ScriptedTarget(start=[[started(), finished("ok")]])
    raw = b'{"agent": "remote", "objective": "check", "constraints": {"timeout_seconds": 30}}'
    request = DelegationRequest.from_tool_input(parse_tool_input(raw), parent_tool_call_id="t1")
    async with open_run([spec(target)]) as run:
        result = await run.delegate(request)
    assert result.status == Status.COMPLETED
    assert result.parent_tool_call_id == "t1"
    assert target.tasks[0].timeout == 30


@pytest.mark.parametrize("key", ["key\n", "Key", "http://host/agent", "", "a" * 65])
def test_registry_refuses_keys_a_model_could_not_name(key: str) -> None:
    from engine import RegistryError

    with pytest.raises(RegistryError, match="must match"):
        AgentSpec(key=key, target=ScriptedTarget())


def test_registry_refuses_duplicate_keys_and_names_known_keys_on_lookup() -> None:
    from engine import Registry, RegistryError

    registry = Registry([spec(ScriptedTarget(), key="a"), spec(ScriptedTarget(), key="b")])
    with pytest.raises(RegistryError, match="registered twice"):
        registry.register(spec(ScriptedTarget(), key="a"))
    with pytest.raises(DelegationError, match="registered keys: a, b") as info:
        registry.lookup("zz")
    assert info.value.code == ErrorCode.AGENT_NOT_FOUND


def test_policy_clamps_requested_timeouts() -> None:
    policy = DelegationPolicy(default_timeout=120, max_timeout=60)
    assert policy.effective_timeout(None) == 60
    assert policy.effective_timeout(10_000) == 60
    assert policy.effective_timeout(5) == 5


async def test_unconfirmed_cancel_is_retried_after_the_run_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"]], cancel="hang-once")
    async with Engine([spec(target, cancel_timeout=2, cancel_retry_window=30)]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(request())
            await trio.testing.wait_all_tasks_blocked()
            handle.cancel()
            result = await handle.wait()
        assert result.remote_cancel == RemoteCancel.PENDING
        assert eng.cancel_followups[result.delegation_id] == "retrying"
        assert target.closed == 0  # the engine still holds the session
        t0 = trio.current_time()
        assert await eng.wait_cancel_followup(result.delegation_id) == "confirmed_late"
        assert trio.current_time() - t0 == pytest.approx(2)  # one retry interval
        assert eng.cancel_followups[result.delegation_id] == "confirmed_late"
        assert target.calls == ["start", "cancel", "cancel"]
        assert target.closed == 1


async def test_follow_up_cancel_gives_up_after_its_window_and_never_holds_the_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = ScriptedTarget(start=[[started(), "hang"], [started(), "hang"]], cancel="hang")
    async with Engine([spec(target, cancel_timeout=2, cancel_retry_window=10)]) as eng:
        async with eng.open_run() as run:
            first = run.start_delegation(request())
            await trio.testing.wait_all_tasks_blocked()
            first.cancel()
            await first.wait()
        await trio.sleep(20)
        assert eng.cancel_followups[first.delegation_id] == "abandoned"
        assert target.closed == 1
        async with eng.open_run() as run:
            second = run.start_delegation(request())
            await trio.testing.wait_all_tasks_blocked()
        t0 = trio.current_time()
    # Closing the engine ended the second follow-up at once instead of waiting out its window.
    assert trio.current_time() - t0 < 1
    assert eng.cancel_followups[second.delegation_id] == "abandoned"
    assert target.closed == 2


async def test_run_failure_reason_is_redacted() -> None:
    secret = "sk-LIVE-0123456789"
    target = ScriptedTarget()
    agents = [AgentSpec(key="remote", target=target, secrets=(secret,))]
    async with Engine(agents) as eng:
        with pytest.raises(RuntimeError):
            async with eng.open_run() as run:
                raise RuntimeError(f"parent crashed holding {secret}")
        entries = await collect(eng.journal(run.run_id))
    from engine import to_json

    assert entries[-1].event.kind == Kind.RUN_FAILED
    assert all(secret not in to_json(e.event) for e in entries)
    assert "[REDACTED]" in (entries[-1].event.text or "")


async def test_prepare_runs_before_capabilities_and_its_error_is_typed() -> None:
    class Unreachable(ScriptedTarget):
        async def prepare(self) -> None:
            self.calls.append("prepare")
            raise DelegationError(code=ErrorCode.AGENT_UNAVAILABLE, message="card fetch failed")

    target = Unreachable()
    async with open_run([spec(target)]) as run:
        assert target.calls == ["prepare"]  # the engine's, at start: retryable, so tolerated
        result = await run.delegate(request())
    assert target.calls == ["prepare", "prepare"]
    assert result.error is not None and result.error.code == ErrorCode.AGENT_UNAVAILABLE
    assert result.remote_cancel == RemoteCancel.NOT_NEEDED


def echo_agent() -> InProcessTarget:
    async def agent(task: LocalTask) -> str:
        return "ok"

    return InProcessTarget(agent)


@pytest.mark.parametrize(
    ("policy", "same_run", "same_thread", "other_thread"),
    [
        ("ephemeral", False, False, False),
        ("sticky_per_run_agent", True, False, False),
        ("sticky_per_parent_thread_agent", True, True, False),
    ],
)
async def test_context_policies_choose_which_remote_context_continues(
    policy: str, same_run: bool, same_thread: bool, other_thread: bool
) -> None:
    agents = [spec(echo_agent(), context_policy=policy)]
    async with Engine(agents) as eng:
        async with eng.open_run(thread_id="chat-1") as run:
            first = await run.delegate(request())
            second = await run.delegate(request())
        async with eng.open_run(thread_id="chat-1") as run:
            third = await run.delegate(request())
        async with eng.open_run(thread_id="chat-2") as run:
            fourth = await run.delegate(request())
    assert first.remote_context_id
    assert (second.remote_context_id == first.remote_context_id) is same_run
    assert (third.remote_context_id == first.remote_context_id) is same_thread
    assert (fourth.remote_context_id == first.remote_context_id) is other_thread


def test_unknown_context_policy_is_a_configuration_error() -> None:
    from engine import RegistryError

    with pytest.raises(RegistryError, match="context_policy"):
        DelegationPolicy(context_policy="forever")


async def test_streamed_text_is_bounded_like_artifacts() -> None:
    async def chatty(task: LocalTask) -> str:
        await task.say("x" * 60, "y" * 60)
        return "never"

    async with open_run([spec(InProcessTarget(chatty), max_text_chars=100)]) as run:
        result = await run.delegate(request())
    assert result.error is not None and result.error.code == ErrorCode.OUTPUT_TOO_LARGE
    assert [m.text for m in result.messages] == ["x" * 60]  # the partial text is kept
