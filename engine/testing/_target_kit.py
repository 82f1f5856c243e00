"""A conformance kit for `Target`s: does a target follow the target seam's contract?

The contract is `engine._targets`: what the delegation actor may expect of any target, whatever
protocol it speaks. This kit drives a target's sessions the way the actor does and checks each
promise, one check per part of the seam:

- `check_prepare`: `prepare()` may be called again and again; `capabilities`, `secrets` and
  `description` have their declared types; `cancel_remote()` of a reference that names no remote
  task answers `not_needed` or `unsupported` and does not raise; a target that cannot work as
  configured (the `MALFORMED` scenario) is refused with a `DelegationError` that is not
  retryable.
- `check_start_and_stream`: `start()` reports through `emit`, only `TargetUpdate`s, progress
  before the end, and exactly one terminal (`subagent.finished` here), nothing after it; a target
  that cannot stream is polled to its end, as the actor would.
- `check_cancel`: while the remote runs (`HANG`), `remote_may_run` says so; cancelling the
  `start()` call ends it (a stream is left by cancellation); `cancel()` returns True once the
  remote confirmed; a target that can be polled then reports the task ended.
- `check_resubscribe` (targets that can): after the stream dropped (`DROP`), `start()` returns
  without a terminal and `resubscribe()` follows the task to its end.
- `check_answer` (targets that take input): `start()` reports one `subagent.input_required`
  (`ASK`), and `answer()` continues the same task to its end.
- `check_close`: after a delegation the target's `aclose()` may be called twice; the closed
  target can be prepared again and runs another delegation; closed again, no task it or its
  sessions started is still running.

Every check also closes each session (`aclose()` last, as the actor does), cancels the nursery
it gave the session and requires that it ends, and requires that no task the target started
during the check outlives it (tasks in the kit's nursery, and Trio system tasks it spawned).

The kit knows no protocol. A *harness* says how to make the remote play a scenario: its
`target(scenario)` returns a new target whose remote plays that scenario for every task, or None
when this remote cannot (the check is then skipped and says why). The scenarios:

- `FINISH`: the remote accepts the task, reports progress, and finishes with a summary;
- `HANG`: it accepts the task and runs until cancelled; it confirms a cancel;
- `ASK`: it asks for input once; given the kit's answer, it finishes;
- `DROP`: it accepts the task, then its stream breaks before the end while the task goes on to
  finish (the remote's resumption can follow it);
- `MALFORMED`: the target cannot work as configured (e.g. its agent card is malformed).

Checks run inside Trio (pytest-trio, `trio.run`); every step is bounded by `step_seconds` of
Trio's clock, so a `MockClock` runs them instantly. A broken promise raises
`TargetContractError` (an `AssertionError`) that names the check and what the target did.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, NoReturn, Protocol

import attrs
import trio

from engine._events import Kind
from engine._registry import DelegationPolicy, DelegationRequest
from engine._results import DelegationError, RemoteCancel
from engine._targets import (
    AgentDescription,
    Answer,
    DelegationTask,
    RemoteTaskRef,
    Target,
    TargetCapabilities,
    TargetSession,
    TargetUpdate,
)

__all__ = [
    "TARGET_CHECKS",
    "Scenario",
    "TargetContractError",
    "TargetHarness",
    "check_answer",
    "check_cancel",
    "check_close",
    "check_prepare",
    "check_resubscribe",
    "check_start_and_stream",
    "check_target",
]


class Scenario:
    """What a harness's remote plays for every task (see the module docs)."""

    FINISH: Final = "finish"
    HANG: Final = "hang"
    ASK: Final = "ask"
    DROP: Final = "drop"
    MALFORMED: Final = "malformed"


class TargetHarness(Protocol):
    """How a protocol's remote is made to play a scenario, for the kit."""

    async def target(self, scenario: str) -> Target | None:
        """A new target whose remote plays `scenario` (a `Scenario`) for every task; None when
        this remote cannot play it. The kit prepares it, uses it and closes it. Servers the
        harness needs are started before the check (or by a fixture): a task started during a
        check under the checking task counts as the target's."""
        ...


class TargetContractError(AssertionError):
    """A target broke a promise of the target seam."""


#: The answer `check_answer` gives to the remote's question.
ANSWER: Final = Answer(text="yes")
#: How often a target that cannot stream is polled.
POLL_INTERVAL: Final = 0.05
#: How long a call may go on after it emitted a terminal (or an input request) before the kit
#: leaves it by cancellation, as the actor does at once.
AFTER_END: Final = 1.0

_TERMINALS: Final = Kind.DELEGATION_TERMINALS

Check = Callable[..., Awaitable[str | None]]


async def check_target(harness: TargetHarness, *, step_seconds: float = 10.0) -> dict[str, str]:
    """Run every check; raises `TargetContractError` at the first broken promise. Returns each
    check's outcome by name: `passed`, or `skipped: <why>`."""
    outcomes = {}
    for name, check in TARGET_CHECKS.items():
        skipped = await check(harness, step_seconds=step_seconds)
        outcomes[name] = "passed" if skipped is None else f"skipped: {skipped}"
    return outcomes


# -- the checks ----------------------------------------------------------------------------------


async def check_prepare(harness: TargetHarness, *, step_seconds: float = 10.0) -> str | None:
    """`prepare()` twice; the declared members' types; `cancel_remote()` with no remote task;
    `MALFORMED` refused, not retryable. Returns None, or why the check was skipped."""
    async with _checking("prepare", harness, Scenario.FINISH, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.FINISH!r} remote"
        await kit.prepare()
        await kit.prepare()  # again: the engine prepares before each delegation too
        target = kit.target
        kit.require(
            isinstance(target.capabilities, TargetCapabilities),
            f"capabilities is not a TargetCapabilities but {type(target.capabilities).__name__}",
        )
        secrets = target.secrets
        kit.require(
            isinstance(secrets, tuple) and all(isinstance(s, str) for s in secrets),
            f"secrets is not a tuple of strings: {type(secrets).__name__}",
        )
        description = target.description
        kit.require(
            description is None or isinstance(description, AgentDescription),
            f"description is neither None nor an AgentDescription: {type(description).__name__}",
        )
        await _check_cancel_remote_of_nothing(kit)
    async with _checking("prepare", harness, Scenario.MALFORMED, step_seconds) as kit:
        if kit is None:
            return None  # nothing this protocol can be misconfigured with: the rest passed
        try:
            with kit.bounded("prepare() of a malformed target"):
                await kit.target.prepare()
        except DelegationError as error:
            kit.require(
                error.retryable is False,
                f"a target that cannot work as configured was refused as retryable ({error}): "
                "the engine would start with it and fail every delegation",
            )
        except Exception as exc:
            kit.fail(f"prepare() raised {type(exc).__name__} ({exc}), not a DelegationError")
        else:
            kit.fail("prepare() accepted a target that cannot work as configured")
    return None


async def _check_cancel_remote_of_nothing(kit: _Kit) -> None:
    """A reference without remote ids (a delegation that never reached its remote) names
    nothing to cancel: `not_needed`, or `unsupported` from a target that cannot cancel so."""
    ref = RemoteTaskRef(delegation_id="del-conformance-nothing", agent_key="conformance")
    try:
        with kit.bounded("cancel_remote() of a reference that names no remote task"):
            answer = await kit.target.cancel_remote(ref)
    except TargetContractError:
        raise
    except Exception as exc:
        kit.fail(f"cancel_remote() with no remote ids raised {type(exc).__name__} ({exc})")
    kit.require(
        answer in (RemoteCancel.NOT_NEEDED, RemoteCancel.UNSUPPORTED),
        f"cancel_remote() with no remote ids answered {answer!r}, not "
        f"{RemoteCancel.NOT_NEEDED!r} or {RemoteCancel.UNSUPPORTED!r}",
    )


async def check_start_and_stream(
    harness: TargetHarness, *, step_seconds: float = 10.0
) -> str | None:
    """`FINISH`: progress through `emit`, then exactly one terminal, nothing after it."""
    async with _checking("start and stream", harness, Scenario.FINISH, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.FINISH!r} remote"
        await kit.prepare()
        session = kit.open()
        declared = {"card_fingerprint": session.card_fingerprint, "agent_name": session.agent_name}
        for name, value in declared.items():
            kit.require(value is None or isinstance(value, str), f"{name} is {value!r}")
        await kit.call("start", session.start)
        kit.require(isinstance(session.streaming, bool), f"streaming is {session.streaming!r}")
        await kit.poll_to_end(session)
        kit.require_end(Kind.FINISHED)
        kit.require(
            len(kit.updates) > 1,
            "the remote's task finished without any update before its terminal: progress must "
            "arrive through emit as it happens",
        )
    return None


async def check_cancel(harness: TargetHarness, *, step_seconds: float = 10.0) -> str | None:
    """`HANG`: running, the start call left by cancellation, `cancel()` confirmed."""
    async with _checking("cancel", harness, Scenario.HANG, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.HANG!r} remote"
        await kit.prepare()
        session = kit.open()
        await kit.start_until_accepted(session)
        kit.require(
            session.remote_may_run is True,
            f"remote_may_run is {session.remote_may_run!r} while the remote task runs: the "
            "engine would leave it running",
        )
        if not kit.capabilities.cancel:
            return None  # the actor never asks it to: leaving its stream was all it owed
        with kit.bounded("cancel()"):
            confirmed = await session.cancel()
        kit.require(
            confirmed is True,
            f"cancel() returned {confirmed!r} although the remote confirms its cancel",
        )
        if kit.capabilities.poll:
            await kit.poll_until_ended(session, "polling after the cancel")
            end = kit.end()
            kit.require(
                end.kind in _TERMINALS,
                f"after a confirmed cancel, a poll reports {end.kind}, not that the task ended",
            )
    return None


async def check_resubscribe(harness: TargetHarness, *, step_seconds: float = 10.0) -> str | None:
    """`DROP`: `start()` returns without a terminal, `resubscribe()` follows to the end."""
    async with _checking("resubscribe", harness, Scenario.DROP, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.DROP!r} remote"
        await kit.prepare()
        if not kit.capabilities.resubscribe:
            return "the target cannot resubscribe (its capabilities say so)"
        session = kit.open(stream=True)
        await kit.call("start", session.start)
        kit.require(
            kit.ended_at is None,
            "the stream was to drop before the end, but start() saw the terminal",
        )
        kit.require(
            bool(kit.updates), "start() returned without reporting that the remote accepted"
        )
        kit.require(
            session.remote_may_run is True,
            f"remote_may_run is {session.remote_may_run!r} after a dropped stream",
        )
        await kit.call("resubscribe", session.resubscribe)
        kit.require_end(Kind.FINISHED)
    return None


async def check_answer(harness: TargetHarness, *, step_seconds: float = 10.0) -> str | None:
    """`ASK`: one `subagent.input_required`, then `answer()` continues to the end."""
    async with _checking("answer", harness, Scenario.ASK, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.ASK!r} remote"
        await kit.prepare()
        if not kit.capabilities.input:
            return "the target takes no input (its capabilities say so)"
        session = kit.open()
        await kit.call("start", session.start)
        await kit.poll_to_end(session)
        asked = [u for u in kit.updates if u.kind == Kind.INPUT_REQUIRED]
        kit.require(
            len(asked) == 1 and kit.end() is asked[0],
            "start() did not end with exactly one input request (subagent.input_required): "
            f"{kit.kinds()}",
        )
        kit.ended_at = None
        await kit.call("answer", lambda emit: session.answer(ANSWER, emit))
        await kit.poll_to_end(session)
        kit.require_end(Kind.FINISHED)
    return None


async def check_close(harness: TargetHarness, *, step_seconds: float = 10.0) -> str | None:
    """`aclose()` twice after a delegation; prepared again, the target runs another one."""
    async with _checking("close", harness, Scenario.FINISH, step_seconds) as kit:
        if kit is None:
            return f"the harness has no {Scenario.FINISH!r} remote"
        for _ in range(2):  # the second time on a target closed (an engine after another)
            await kit.prepare()
            session = kit.open()
            await kit.call("start", session.start)
            await kit.poll_to_end(session)
            kit.require_end(Kind.FINISHED)
            await kit.close_session()
            for _ in range(2):
                await kit.close_target()
            kit.reset()
    return None


TARGET_CHECKS: Final[dict[str, Check]] = {
    "prepare": check_prepare,
    "start and stream": check_start_and_stream,
    "cancel": check_cancel,
    "resubscribe": check_resubscribe,
    "answer": check_answer,
    "close": check_close,
}


# -- the kit's driver ----------------------------------------------------------------------------


@asynccontextmanager
async def _checking(
    check: str, harness: TargetHarness, scenario: str, step_seconds: float
) -> AsyncIterator[_Kit | None]:
    """One check on one new target: the driver, the session's nursery, and the cleanup the actor
    would do (session closed, nursery cancelled, target closed), then the leak check."""
    watch = _TaskWatch(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(watch)
    try:
        target = await harness.target(scenario)
        if target is None:
            yield None
            return
        kit = _Kit(check=check, target=target, step_seconds=step_seconds)
        try:
            async with trio.open_nursery() as nursery:
                kit.nursery = nursery
                try:
                    yield kit
                finally:
                    with trio.CancelScope(shield=True):
                        await kit.close_session()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            error = _contract_error(group)
            if error is None:
                raise
            raise error from None
        finally:
            with trio.CancelScope(shield=True):
                await kit.close_target()
        await watch.settle(kit)
    finally:
        trio.lowlevel.remove_instrument(watch)


def _contract_error(group: BaseExceptionGroup[BaseException]) -> TargetContractError | None:
    """The broken promise a nursery wrapped (with cancellations), if that is all it holds."""
    errors, rest = group.split(TargetContractError)
    if errors is None or (rest is not None and rest.split(trio.Cancelled)[1] is not None):
        return None
    leaf: BaseException = errors
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, TargetContractError)
    return leaf


@attrs.define(eq=False)
class _Kit:
    check: str
    target: Target
    step_seconds: float
    nursery: trio.Nursery | None = None
    capabilities: TargetCapabilities = attrs.field(factory=TargetCapabilities)
    session: TargetSession | None = None
    updates: list[TargetUpdate] = attrs.field(factory=list)
    #: Index in `updates` of the terminal or input request that ended the current call.
    ended_at: int | None = None
    #: Set by the first update (`start_until_accepted` waits for it).
    accepted: trio.Event | None = None
    #: The first broken promise, kept: a session that swallows what `emit` raised still fails.
    broken: TargetContractError | None = None
    _leave: trio.CancelScope | None = None

    def fail(self, problem: str) -> NoReturn:
        error = TargetContractError(f"{self.check}: {problem}")
        self.broken = self.broken or error
        raise error

    def require(self, condition: bool, problem: str) -> None:
        if not condition:
            self.fail(problem)

    def kinds(self) -> list[str]:
        return [update.kind for update in self.updates]

    def bounded(self, what: str) -> _Bounded:
        return _Bounded(self, what)

    def reset(self) -> None:
        self.updates.clear()
        self.ended_at = None

    async def prepare(self) -> None:
        try:
            with self.bounded("prepare()"):
                await self.target.prepare()
        except DelegationError as error:
            self.fail(f"prepare() refused a target that should work: {error}")
        except TargetContractError:
            raise
        except Exception as exc:
            self.fail(f"prepare() raised {type(exc).__name__} ({exc}), not a DelegationError")
        self.capabilities = self.target.capabilities

    def open(self, *, stream: bool | None = None) -> TargetSession:
        assert self.nursery is not None
        task = DelegationTask(
            run_id="run-conformance",
            delegation_id=f"del-conformance-{self.check.replace(' ', '-')}",
            agent_key="conformance",
            request=DelegationRequest(agent="conformance", objective=f"conformance: {self.check}"),
            policy=DelegationPolicy(),
            timeout=self.step_seconds,
            stream=self.capabilities.streaming if stream is None else stream,
        )
        self.session = self.target.open_session(task, self.nursery)
        return self.session

    async def emit(self, update: TargetUpdate) -> None:
        if not isinstance(update, TargetUpdate):
            self.fail(f"emitted {type(update).__name__}, not a TargetUpdate")
        if self.ended_at is not None:
            self.fail(
                f"emitted {update.kind} after {self.updates[self.ended_at].kind} ended the "
                f"call: {[*self.kinds(), update.kind]}"
            )
        self.updates.append(update)
        if self.accepted is not None:
            self.accepted.set()
        if update.kind in _TERMINALS or update.kind == Kind.INPUT_REQUIRED:
            self.ended_at = len(self.updates) - 1
            if self._leave is not None:
                # Like the actor, leave the call once it told what it waits for; a call that
                # ends by itself soon after (its remote's stream ended too) is left alone.
                self._leave.deadline = min(self._leave.deadline, trio.current_time() + AFTER_END)
        # An emit may wait (backpressure), shielded as the actor's: the session's other tasks
        # run meanwhile, and a cancel reaches it at its own next await, not in here.
        with trio.CancelScope(shield=True):
            await trio.lowlevel.checkpoint()

    async def call(self, name: str, method: Callable[[Any], Awaitable[None]]) -> None:
        """`method(emit)` as the actor calls it: a `DelegationError` is the delegation's typed
        failure (a failure of this check), anything else is a bug in the target."""
        try:
            with self.bounded(f"{name}()"), trio.CancelScope() as self._leave:
                await method(self.emit)
        except DelegationError as error:
            if self.broken is None:
                self.fail(f"{name}() failed: {error} (updates so far: {self.kinds()})")
        except TargetContractError:
            raise
        except Exception as exc:
            if self.broken is None:
                self.fail(f"{name}() raised {type(exc).__name__} ({exc}), not a DelegationError")
        finally:
            self._leave = None
        if self.broken is not None:
            raise self.broken

    async def poll_to_end(self, session: TargetSession) -> None:
        """After `start()`/`answer()` returned: a target that could not stream (or fell back) is
        polled until the task ends, as the actor does; one that streams has ended already."""
        if self.ended_at is not None:
            return
        streamed = self.capabilities.streaming and session.streaming
        self.require(
            not streamed and self.capabilities.poll,
            f"the call returned before the remote's task ended (no terminal): {self.kinds()}",
        )
        await self.poll_until_ended(session, "polling to the end")

    async def poll_until_ended(self, session: TargetSession, what: str) -> None:
        """`poll()` every `POLL_INTERVAL` until a terminal (or an input request) came."""
        with self.bounded(what):
            while self.ended_at is None:
                await self.call("poll", session.poll)
                if self.ended_at is None:
                    await trio.sleep(POLL_INTERVAL)

    async def start_until_accepted(self, session: TargetSession) -> None:
        """`start()` until its first update, then left by cancellation; it must end then."""
        accepted = self.accepted = trio.Event()
        done = trio.Event()

        async def start(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                try:
                    await self.call("start", session.start)
                finally:
                    done.set()

        assert self.nursery is not None
        scope: trio.CancelScope = await self.nursery.start(start)
        with self.bounded("waiting for the remote to accept the task"):
            await accepted.wait()
        self.require(
            self.ended_at is None,
            f"the remote was to run until cancelled, but it ended: {self.kinds()}",
        )
        scope.cancel()
        with self.bounded("start() to end once cancelled (a stream is left by cancellation)"):
            await done.wait()

    def end(self) -> TargetUpdate:
        """The update that ended the last call (a terminal or an input request)."""
        if self.ended_at is None:
            self.fail(f"no terminal came: {self.kinds()}")
        return self.updates[self.ended_at]

    def require_end(self, kind: str) -> None:
        end = self.end()
        self.require(
            end.kind == kind,
            f"the task ended {end.kind} ({end.error or end.text}), not {kind}: {self.kinds()}",
        )
        terminals = [u.kind for u in self.updates if u.kind in _TERMINALS]
        self.require(len(terminals) == 1, f"more than one terminal: {self.kinds()}")

    async def close_session(self) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        try:
            with self.bounded("the session's aclose()"):
                await session.aclose()
        except TargetContractError:
            raise
        except Exception as exc:
            self.fail(f"the session's aclose() raised {type(exc).__name__} ({exc})")

    async def close_target(self) -> None:
        try:
            with self.bounded("the target's aclose()"):
                await self.target.aclose()
        except TargetContractError:
            raise
        except Exception as exc:
            self.fail(f"the target's aclose() raised {type(exc).__name__} ({exc})")


@attrs.define(eq=False)
class _Bounded:
    """`with kit.bounded(what):` at most `step_seconds`, else a contract error naming it."""

    kit: _Kit
    what: str
    _scope: trio.CancelScope | None = None

    def __enter__(self) -> None:
        self._scope = trio.move_on_after(self.kit.step_seconds)
        self._scope.__enter__()

    def __exit__(self, *exc_info: Any) -> bool:
        assert self._scope is not None
        swallowed = self._scope.__exit__(*exc_info)
        if self._scope.cancelled_caught:
            self.kit.fail(f"{self.what} did not end within {self.kit.step_seconds:g} s")
        return bool(swallowed)


class _TaskWatch(trio.abc.Instrument):
    """The tasks started during a check under the checking task (the sessions' nursery and what
    the target starts in it) or as Trio system tasks (a target's background refresher, say),
    with their descendants, and whether each has exited. A harness's own servers run in a
    nursery outside the check (a fixture's), so they are not counted."""

    def __init__(self, checker: trio.lowlevel.Task) -> None:
        self._checker = checker
        self._init = trio.lowlevel.current_root_task()
        self._ours: set[trio.lowlevel.Task] = set()
        self.alive: dict[trio.lowlevel.Task, str] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        nursery = task.parent_nursery
        parent = nursery.parent_task if nursery is not None else None
        if parent is self._checker or parent is self._init or parent in self._ours:
            self._ours.add(task)
            self.alive[task] = task.name

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive.pop(task, None)

    async def settle(self, kit: _Kit) -> None:
        """Wait (briefly) for what is ending anyway; then anything still running is a leak."""
        with trio.move_on_after(min(kit.step_seconds, AFTER_END)):
            # Polled: an instrument's hooks run inside the scheduler, no place to set an Event.
            while self.alive:  # noqa: ASYNC110
                await trio.sleep(POLL_INTERVAL / 5)
        kit.require(
            not self.alive,
            "tasks started during the check still run after the target was closed: "
            f"{sorted(self.alive.values())}",
        )
