"""Fakes for unit tests only: a scripted target whose every session call is a script step.

Integration tests use real servers; these exist so the delegation actor's paths (recovery,
polling, cancellation, crashes) can be driven deterministically under `MockClock`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

from engine import (
    Answer,
    BaseTarget,
    BaseTargetSession,
    DelegationError,
    DelegationTask,
    Emit,
    ErrorCode,
    Kind,
    RemoteCancel,
    RemoteTaskRef,
    TargetCapabilities,
    TargetUpdate,
)

#: A script step: updates to emit, then optionally "hang" (sleep forever) or raise.
Step = Sequence[TargetUpdate | str | BaseException]


def started(
    task_id: str = "task-1", context_id: str = "ctx-1", status: str = "working"
) -> TargetUpdate:
    return TargetUpdate(
        kind=Kind.STARTED, remote_task_id=task_id, remote_context_id=context_id, status=status
    )


def status(value: str, text: str | None = None) -> TargetUpdate:
    return TargetUpdate(kind=Kind.STATUS, status=value, text=text)


def delta(text: str, message_id: str = "m1") -> TargetUpdate:
    return TargetUpdate(kind=Kind.TEXT_DELTA, delta=text, message_id=message_id)


def finished(summary: str | None = None) -> TargetUpdate:
    return TargetUpdate(kind=Kind.FINISHED, text=summary, status="completed")


@attrs.define
class ScriptedTarget(BaseTarget):
    """Each session method plays its script: a list of steps consumed one per call. `closed`
    counts session closes; `prepares` and `target_closes` the engine's calls on the target."""

    start: list[Step] = attrs.field(factory=list)
    resubscribe: list[Step] = attrs.field(factory=list)
    poll: list[Step] = attrs.field(factory=list)
    answer: list[Step] = attrs.field(factory=list)
    cancel: str = "confirm"  # confirm | refuse | hang | raise | hang-once
    capabilities: TargetCapabilities = attrs.field(factory=TargetCapabilities)
    calls: list[str] = attrs.field(factory=list)
    answers: list[Answer] = attrs.field(factory=list)
    tasks: list[DelegationTask] = attrs.field(factory=list)
    closed: int = 0
    prepares: int = 0
    target_closes: int = 0
    #: What `cancel_remote` was asked (it answers by `cancel`, as a session's cancel does).
    remote_cancels: list[RemoteTaskRef] = attrs.field(factory=list)

    async def prepare(self) -> None:
        self.prepares += 1

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _ScriptedSession:
        self.tasks.append(task)
        return _ScriptedSession(self)

    async def aclose(self) -> None:
        self.target_closes += 1

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        self.remote_cancels.append(ref)
        if ref.remote_task_id is None:
            return RemoteCancel.NOT_NEEDED
        if self.cancel in ("hang", "hang-once"):
            await trio.sleep_forever()
        if self.cancel == "raise":
            raise OSError("connection refused")
        return RemoteCancel.CONFIRMED if self.cancel == "confirm" else RemoteCancel.PENDING


class _ScriptedSession(BaseTargetSession):
    def __init__(self, target: ScriptedTarget) -> None:
        self.target = target

    async def _play(self, name: str, emit: Emit) -> None:
        self.target.calls.append(name)
        script: list[Step] = getattr(self.target, name)
        if not script:
            raise DelegationError(code=ErrorCode.CAPABILITY_UNSUPPORTED, message=f"no {name}")
        for item in script.pop(0):
            if isinstance(item, BaseException):
                raise item
            if item == "hang":
                await trio.sleep_forever()
            elif isinstance(item, TargetUpdate):
                await emit(item)
            else:
                raise AssertionError(f"bad step {item!r}")

    async def start(self, emit: Emit) -> None:
        await self._play("start", emit)

    async def resubscribe(self, emit: Emit) -> None:
        await self._play("resubscribe", emit)

    async def poll(self, emit: Emit) -> None:
        await self._play("poll", emit)

    async def answer(self, answer: Answer, emit: Emit) -> None:
        self.target.answers.append(answer)
        await self._play("answer", emit)

    async def cancel(self) -> bool:
        self.target.calls.append("cancel")
        mode = self.target.cancel
        if mode == "hang-once":
            self.target.cancel = "confirm"
            mode = "hang"
        if mode == "hang":
            await trio.sleep_forever()
        if mode == "raise":
            raise OSError("connection refused")
        return mode == "confirm"

    async def aclose(self) -> None:
        self.target.closed += 1


def journal_kinds(entries: Sequence[Any], delegation_id: str | None = None) -> list[str]:
    return [
        e.event.kind
        for e in entries
        if delegation_id is None or e.event.delegation_id == delegation_id
    ]
