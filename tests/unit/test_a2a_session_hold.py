"""The A2A session's relay with held text: `_A2ASession._relay` against a scripted stream.

The mapper holds streamed text (`hold_text=True`); the relay emits what the mapper gives it, and
a release task it schedules in the delegation's nursery emits the held text once the relay waits.
These tests drive that pair with a scripted stream and an `emit` that, like the run's mailbox
when it is full, takes a while to accept an update (shielded, as `_publish` is). They check what
the engine would see: the order in which updates were accepted, with nothing lost or reordered
when the stream ends, fails or is cancelled while text is held or being released. Time is
Trio's autojump clock, so the interleavings are deterministic (up to Trio's own batch order,
which the repeated tests cover).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from a2a.types import Part, StreamResponse, TaskState

from adapters.a2a._target import _A2ASession
from engine import (
    DelegationError,
    DelegationPolicy,
    DelegationRequest,
    DelegationTask,
    Kind,
    TargetUpdate,
)
from tests.helpers.a2a_builders import on_artifact, on_status, on_task, task

S = TaskState

#: Script steps besides items: wait for the network a moment, wait forever, raise.
YIELD = ("yield",)
FOREVER = ("forever",)


class Boom(Exception):
    pass


def session(nursery: trio.Nursery) -> _A2ASession:
    target: Any = SimpleNamespace(
        config=SimpleNamespace(text_artifact_names=frozenset({"response"})),
        fingerprint=None,
        card_info=None,
    )
    delegation = DelegationTask(
        run_id="run-1",
        delegation_id="del-1",
        agent_key="research",
        request=DelegationRequest(agent="research", objective="o"),
        policy=DelegationPolicy(),
        timeout=60.0,
        stream=True,
    )
    return _A2ASession(target, delegation, nursery)


async def scripted(steps: Sequence[Any]) -> AsyncIterator[StreamResponse]:
    for step in steps:
        if step == YIELD:
            await trio.sleep(0.001)  # the wire is quiet a moment: every other task gets to run
        elif step == FOREVER:
            await trio.sleep_forever()
        elif isinstance(step, BaseException):
            raise step
        else:
            yield step  # from what one read of the wire carried: no checkpoint


class Accepted:
    """An `emit` that takes 10 s (shielded) to accept a text delta that ends with one of
    `slow`: a full mailbox."""

    def __init__(self, *slow: str) -> None:
        self.slow = slow
        self.log: list[TargetUpdate] = []

    async def __call__(self, update: TargetUpdate) -> None:
        if update.delta and update.delta.endswith(self.slow):
            with trio.CancelScope(shield=True):
                await trio.sleep(10)
        self.log.append(update)

    def merged(self) -> list[tuple[str, str | None, str | None]]:
        """(kind, message id, delta) in order, adjacent deltas of one message joined."""
        out: list[tuple[str, str | None, str | None]] = []
        for u in self.log:
            if out and u.kind == Kind.TEXT_DELTA and out[-1][:2] == (u.kind, u.message_id):
                out[-1] = (u.kind, u.message_id, (out[-1][2] or "") + (u.delta or ""))
            else:
                out.append((u.kind, u.message_id, u.delta))
        return out


def opened(artifact_id: str, text: str) -> StreamResponse:
    return on_artifact(artifact_id, Part(text=text), name="response")


def chunk(artifact_id: str, text: str, *, last: bool = False) -> StreamResponse:
    return on_artifact(artifact_id, Part(text=text), append=True, last=last)


START = on_task(task(S.TASK_STATE_WORKING))


class _NeverRuns:
    def start_soon(self, *args: Any) -> None:
        pass


async def relay(
    steps: Sequence[Any],
    emit: Accepted,
    *,
    release_task: bool = True,
    cancel_after: float | None = None,
    raises: type[BaseException] | None = None,
) -> None:
    """Relay `steps` to `emit`, then log `relay.returned` (unless it raised or was cancelled).

    `release_task=False`: the release task never gets to run, so held text can only come out
    where the relay ends (its `finally`)."""
    async with trio.open_nursery() as nursery:
        under_test = session(nursery)
        if not release_task:
            under_test._nursery = _NeverRuns()  # type: ignore[assignment]
        with trio.move_on_after(cancel_after if cancel_after is not None else float("inf")):
            if raises is not None:
                with pytest.raises(raises):
                    await under_test._relay(scripted(steps), emit)
                return
            await under_test._relay(scripted(steps), emit)
            emit.log.append(TargetUpdate(kind="relay.returned"))


async def test_chunks_are_coalesced_and_released_when_the_stream_waits(
    autojump_clock: trio.abc.Clock,
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), chunk("a", "3"), YIELD, chunk("a", "4")]
    await relay([*steps, chunk("a", "5", last=True)], emit)
    assert emit.merged() == [
        (Kind.STARTED, None, None),
        (Kind.TEXT_DELTA, "a", "12345"),
        (Kind.TEXT_END, "a", None),
        ("relay.returned", None, None),
    ]
    deltas = [u.delta for u in emit.log if u.kind == Kind.TEXT_DELTA]
    assert deltas == ["1", "23", "4", "5"]  # "2" and "3" came in one read, so did "4" and "5"
    for update in emit.log[1:-1]:
        assert (update.remote_task_id, update.remote_context_id) == ("task-1", "ctx-1")


@pytest.mark.parametrize("release_task", [True, False])
async def test_a_stream_ending_with_held_text_emits_it_before_returning(
    release_task: bool, autojump_clock: trio.abc.Clock
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), chunk("a", "3")]
    await relay(steps, emit, release_task=release_task)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "123"), ("relay.returned", None, None)]


async def test_a_stream_ending_while_held_text_is_being_accepted_waits_for_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The release task took "2" and waits for room; the stream ends meanwhile: the relay must
    # not return (the actor would then publish `stream_interrupted`, a poll...) before "2" is in.
    emit = Accepted("2")
    await relay([START, opened("a", "1"), chunk("a", "2"), YIELD], emit)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "12"), ("relay.returned", None, None)]


async def test_a_status_after_held_text_comes_after_it(autojump_clock: trio.abc.Clock) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), on_status(S.TASK_STATE_WORKING, "busy")]
    await relay([*steps, chunk("a", "3"), on_status(S.TASK_STATE_COMPLETED)], emit)
    assert [(k, d) for k, _, d in emit.merged()] == [
        (Kind.STARTED, None),
        (Kind.TEXT_DELTA, "12"),
        (Kind.STATUS, None),
        (Kind.TEXT_DELTA, "3"),
        (Kind.FINISHED, None),
        ("relay.returned", None),
    ]


async def test_a_file_artifact_after_held_text_comes_after_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), on_artifact("f", Part(raw=b"x"), name="f")]
    await relay(steps, emit)
    assert [(k, d) for k, _, d in emit.merged()][1:] == [
        (Kind.TEXT_DELTA, "12"),
        (Kind.ARTIFACT, None),
        ("relay.returned", None),
    ]


@pytest.mark.parametrize("attempt", range(12))  # Trio may run a woken batch in either order
async def test_text_of_two_artifacts_keeps_its_order_while_a_release_waits(
    attempt: int, autojump_clock: trio.abc.Clock
) -> None:
    # The release task takes "a2" and waits for room; meanwhile "a3" is held and a chunk of "b"
    # arrives. Were "b2" held while "a3" waits to be emitted, a second release task could emit
    # it first.
    emit = Accepted("a2")
    steps = [START, opened("a", "a1"), opened("b", "b1"), chunk("a", "a2"), YIELD]
    await relay([*steps, chunk("a", "a3"), chunk("b", "b2"), YIELD, chunk("b", "b3")], emit)
    assert emit.merged()[1:] == [
        (Kind.TEXT_DELTA, "a", "a1"),
        (Kind.TEXT_DELTA, "b", "b1"),
        (Kind.TEXT_DELTA, "a", "a2a3"),
        (Kind.TEXT_DELTA, "b", "b2b3"),
        ("relay.returned", None, None),
    ]


async def test_a_duplicate_appended_chunk_is_not_held_twice(
    autojump_clock: trio.abc.Clock,
) -> None:
    emit = Accepted()
    newline = chunk("a", "\n")
    await relay([START, opened("a", "x"), newline, newline, chunk("a", "y"), newline], emit)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "x\ny\n"), ("relay.returned", None, None)]


@pytest.mark.parametrize("release_task", [True, False])
async def test_a_cancel_with_held_text_emits_it_first(
    release_task: bool, autojump_clock: trio.abc.Clock
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), chunk("a", "3"), FOREVER]
    await relay(steps, emit, release_task=release_task, cancel_after=5)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "123")]  # and no relay.returned


async def test_a_cancel_while_waiting_behind_a_release_loses_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The release task is accepting "2" (for 10 s); the relay maps COMPLETED and waits behind
    # it when the cancel arrives (at 5 s). FINISHED was mapped (the mapper counts it as said):
    # it must still be emitted, and the cancel reach the relay in the stream, not its loop body.
    emit = Accepted("2")
    steps = [START, opened("a", "1"), chunk("a", "2"), YIELD, on_status(S.TASK_STATE_COMPLETED)]
    await relay([*steps, FOREVER], emit, cancel_after=5)
    assert [(k, d) for k, _, d in emit.merged()] == [
        (Kind.STARTED, None),
        (Kind.TEXT_DELTA, "12"),
        (Kind.FINISHED, None),
    ]


@pytest.mark.parametrize("release_task", [True, False])
async def test_an_error_in_the_stream_emits_held_text_then_raises(
    release_task: bool, autojump_clock: trio.abc.Clock
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), Boom()]
    await relay(steps, emit, release_task=release_task, raises=Boom)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "12")]


@pytest.mark.parametrize("release_task", [True, False])
async def test_a_malformed_item_emits_held_text_then_raises(
    release_task: bool, autojump_clock: trio.abc.Clock
) -> None:
    emit = Accepted()
    steps = [START, opened("a", "1"), chunk("a", "2"), StreamResponse()]
    await relay(steps, emit, release_task=release_task, raises=DelegationError)
    assert emit.merged()[1:] == [(Kind.TEXT_DELTA, "a", "12")]
