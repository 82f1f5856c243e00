"""In-process delegation targets: an async function as an agent.

`InProcessTarget(agent_fn)` registers a plain async function as a delegation target. The function
receives a `LocalTask`, through which it streams what a remote agent would: text (`say`,
`text_delta`...), reasoning (`think`), status changes, tool calls, artifacts, and input requests
(`ask`, which waits for `Run.answer(...)`). Whatever it returns becomes the delegation's summary;
raising `DelegationError` fails the delegation with that error, and any other exception fails it
as `remote_failed`, exactly as a remote agent's crash would.

The function runs as a task in the delegation actor's nursery and reports through a small
channel, so an input request can suspend it while the actor waits for an answer. Cancelling the
delegation cancels the function. Nothing here touches the network.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from engine import (
    Answer,
    ArtifactRef,
    BaseTarget,
    BaseTargetSession,
    DelegationError,
    DelegationTask,
    Emit,
    ErrorCode,
    Kind,
    TargetCapabilities,
    TargetUpdate,
)

__all__ = ["AgentFunction", "InProcessTarget", "LocalTask"]

AgentFunction = Callable[["LocalTask"], Awaitable[str | None]]

_task_numbers = itertools.count(1)


class LocalTask:
    """What an in-process agent function sees of its delegation, and how it reports."""

    def __init__(self, task: DelegationTask, send: trio.MemorySendChannel[TargetUpdate]) -> None:
        self.task = task
        self._send = send
        self._answer: Answer | None = None
        self._answered = trio.Event()
        self._messages = itertools.count(1)

    @property
    def objective(self) -> str:
        return self.task.request.objective

    @property
    def prompt(self) -> str | None:
        return self.task.request.prompt

    @property
    def context(self) -> str | None:
        return self.task.request.context

    async def _emit(self, update: TargetUpdate) -> None:
        await self._send.send(update)

    async def status(self, status: str, text: str | None = None) -> None:
        await self._emit(TargetUpdate(kind=Kind.STATUS, status=status, text=text))

    async def say(self, *chunks: str, message_id: str | None = None) -> str:
        """Stream one assistant message made of `chunks` (each one delta); returns its id."""
        message_id = message_id or f"{self.task.delegation_id}-msg-{next(self._messages)}"
        await self._emit(
            TargetUpdate(kind=Kind.TEXT_START, message_id=message_id, role="assistant")
        )
        for chunk in chunks:
            await self._emit(TargetUpdate(kind=Kind.TEXT_DELTA, message_id=message_id, delta=chunk))
        await self._emit(TargetUpdate(kind=Kind.TEXT_END, message_id=message_id))
        return message_id

    async def text_start(self, message_id: str | None = None) -> str:
        """Open an assistant message to stream piece by piece; returns its id."""
        message_id = message_id or f"{self.task.delegation_id}-msg-{next(self._messages)}"
        await self._emit(
            TargetUpdate(kind=Kind.TEXT_START, message_id=message_id, role="assistant")
        )
        return message_id

    async def text_delta(self, delta: str, *, message_id: str) -> None:
        """One delta of a message (opened by `text_start`, or implicitly by this first delta)."""
        await self._emit(TargetUpdate(kind=Kind.TEXT_DELTA, message_id=message_id, delta=delta))

    async def text_end(self, message_id: str) -> None:
        await self._emit(TargetUpdate(kind=Kind.TEXT_END, message_id=message_id))

    async def think(self, *chunks: str) -> None:
        message_id = f"{self.task.delegation_id}-reasoning-{next(self._messages)}"
        await self._emit(TargetUpdate(kind=Kind.REASONING_START, message_id=message_id))
        for chunk in chunks:
            await self._emit(
                TargetUpdate(kind=Kind.REASONING_DELTA, message_id=message_id, delta=chunk)
            )
        await self._emit(TargetUpdate(kind=Kind.REASONING_END, message_id=message_id))

    async def tool_call(self, name: str, args: Any, result: Any = None) -> None:
        call_id = f"{self.task.delegation_id}-tool-{next(self._messages)}"
        await self._emit(
            TargetUpdate(kind=Kind.TOOL_CALL_START, tool_call_id=call_id, tool_name=name)
        )
        await self._emit(TargetUpdate(kind=Kind.TOOL_CALL_ARGS, tool_call_id=call_id, args=args))
        await self._emit(TargetUpdate(kind=Kind.TOOL_CALL_END, tool_call_id=call_id))
        if result is not None:
            await self._emit(
                TargetUpdate(kind=Kind.TOOL_CALL_RESULT, tool_call_id=call_id, result=result)
            )

    async def artifact(
        self,
        name: str,
        *,
        data: bytes | str = b"",
        uri: str | None = None,
        mime_type: str | None = None,
        artifact_id: str | None = None,
        append: bool = False,
    ) -> str:
        """Report an artifact (or, with `append`, one more chunk of it); returns its id.

        The content is counted against the policy's byte limit and kept by the engine for
        viewers (`Run.artifact`), never put into an event: events and results carry the
        reference (`uri`).
        """
        artifact_id = artifact_id or f"{self.task.delegation_id}-artifact-{next(self._messages)}"
        # surrogatepass: content is only counted, and a lone surrogate must not fail the agent.
        size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        await self._emit(
            TargetUpdate(
                kind=Kind.ARTIFACT,
                artifact=ArtifactRef(
                    id=artifact_id,
                    name=name,
                    mime_type=mime_type,
                    uri=uri or f"local://{self.task.delegation_id}/artifacts/{name}",
                ),
                artifact_bytes=size,
                artifact_append=append,
                artifact_data=data.encode("utf-8", "surrogatepass")
                if isinstance(data, str)
                else data,
                remote_artifact_id=artifact_id,
            )
        )
        return artifact_id

    async def custom(self, name: str, value: Any) -> None:
        await self._emit(TargetUpdate(kind=Kind.CUSTOM, name=name, raw={"value": value}))

    async def ask(
        self,
        question: str,
        *,
        schema: dict[str, Any] | None = None,
        auth_url: str | None = None,
    ) -> Answer:
        """Ask the delegating side for input and wait for its answer (`Run.answer(...)` or any
        other surface). `schema`: the JSON Schema an answer's data must match; `auth_url`:
        ask for credentials (`auth_required`) at that address instead."""
        self._answered = trio.Event()
        await self._emit(
            TargetUpdate(
                kind=Kind.INPUT_REQUIRED,
                status="auth_required" if auth_url else "input_required",
                text=question,
                response_schema=schema,
                auth_url=auth_url,
            )
        )
        await self._answered.wait()
        assert self._answer is not None
        return self._answer

    def _give_answer(self, answer: Answer) -> None:
        self._answer = answer
        self._answered.set()


@attrs.define
class InProcessTarget(BaseTarget):
    """An async function registered as an agent; see the module docstring. It holds no
    credentials, describes nothing of its own, and has nothing to prepare or close."""

    agent: AgentFunction
    capabilities: TargetCapabilities = attrs.field(
        factory=lambda: TargetCapabilities(streaming=True, cancel=True, input=True)
    )

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _InProcessSession:
        return _InProcessSession(self.agent, task, nursery)


class _InProcessSession(BaseTargetSession):
    """The function's run: no card, and a cancel always confirmed (it cancels the function)."""

    def __init__(self, agent: AgentFunction, task: DelegationTask, nursery: trio.Nursery) -> None:
        self._agent = agent
        self._task = task
        self._nursery = nursery
        self._send, self._receive = trio.open_memory_channel[TargetUpdate](0)
        self._local = LocalTask(task, self._send)
        self._scope = trio.CancelScope()
        self.task_id = f"local-{next(_task_numbers)}"

    async def start(self, emit: Emit) -> None:
        await emit(
            TargetUpdate(
                kind=Kind.STARTED,
                status="working",
                remote_task_id=self.task_id,
                remote_context_id=self._task.remote_context_id or f"{self.task_id}-ctx",
            )
        )
        self._nursery.start_soon(self._run_agent, name=f"in-process agent {self.task_id}")
        await self._relay(emit)

    async def _run_agent(self) -> None:
        with self._scope:
            async with self._send:
                try:
                    summary = await self._agent(self._local)
                except DelegationError as error:
                    await self._send.send(TargetUpdate(kind=Kind.FAILED, error=error))
                except Exception as exc:  # the agent crashed: that is the remote failing
                    crash = DelegationError(
                        code=ErrorCode.REMOTE_FAILED,
                        message=f"The in-process agent raised {type(exc).__name__}.",
                        metadata={"exception": type(exc).__name__},
                    )
                    await self._send.send(TargetUpdate(kind=Kind.FAILED, error=crash))
                else:
                    await self._send.send(TargetUpdate(kind=Kind.FINISHED, text=summary))

    async def _relay(self, emit: Emit) -> None:
        async for update in self._receive:
            await emit(update)

    async def resubscribe(self, emit: Emit) -> None:
        await self._relay(emit)

    async def answer(self, answer: Answer, emit: Emit) -> None:
        self._local._give_answer(answer)
        await self._relay(emit)

    async def cancel(self) -> bool:
        self._scope.cancel()
        return True

    async def aclose(self) -> None:
        self._scope.cancel()
        self._receive.close()
