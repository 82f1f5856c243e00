"""The A2A conformance agent: what `subagent-engine a2a-serve --parent conformance` serves.

The official A2A conformance suite (the TCK, github.com/a2aproject/a2a-tck, vendored under
`third_party/a2a-tck`) asks the agent under test for a behaviour through the `messageId` prefix of
each message it sends; its `scenarios/*.feature` files define them. `ConformanceExecutor` is an
a2a-sdk `AgentExecutor` that does exactly what those scenarios say, and nothing that needs a
model, so that the suite can exercise everything around it: the same `adapters.a2a.serving`
server that serves the real parents (routes, `RequestGuard`, bearer token, body limits, card,
error shapes). A failure the suite finds with it is a failure of that server, not of a parent.

The prefixes (first match wins, so `tck-artifact-file-url` comes before `tck-artifact-file`):

- `tck-complete-task`: completed, with the status message "Hello from TCK".
- `tck-artifact-text` / `-file` / `-file-url` / `-data`: completed with one artifact of that part.
- `tck-message-response`: a direct `Message` answer, no task.
- `tck-input-required`: stays `input_required`; a later message on the same task is handled by
  its own prefix (`tck-complete-task` completes it).
- `tck-reject-task`: the executor fails with an A2A error ("rejected").
- `tck-stream-001` / `-003` / `tck-stream-ordering-001` / `tck-stream-artifact-text` / `-file`:
  working, one artifact, completed. `tck-stream-002`: completed at once.
  `tck-stream-artifact-chunked`: working, the artifact in two chunks (the second the last),
  completed.
- `test-resubscribe-message-id`: working, then completed after `LONG_RUN_SECONDS` (twice the
  suite's streaming timeout, so that a client can subscribe while it runs) unless cancelled.
- anything else: completed with a message naming the unknown prefix.

`CancelTask` on a task still open (input required, or the long run) cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, Task, TaskState, TaskStatus
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2  # type: ignore[import-untyped, unused-ignore]

from adapters.a2a.serving import SHUTDOWN_TIMEOUT, Listening, ServedExecutor, ServedParent

if TYPE_CHECKING:
    from adapters.parents import ParentAgent
    from engine import Engine

__all__ = [
    "CONFORMANCE",
    "LONG_RUN_SECONDS",
    "ConformanceExecutor",
    "conformance_agent",
]

#: The `--parent` value that serves this agent.
CONFORMANCE: Final = "conformance"
#: How long the `test-resubscribe-message-id` task runs: twice the suite's streaming timeout
#: (2 s in the TCK's generated reference agent).
LONG_RUN_SECONDS: Final = 4.0

_FILE_URL: Final = "https://example.com/output.txt"

_Behaviour = Callable[[TaskUpdater, EventQueue, "asyncio.Event"], Awaitable[None]]


async def _complete_with_message(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
    await updater.complete(updater.new_agent_message([Part(text="Hello from TCK")]))


def _artifact(*parts: Part, working: bool = False) -> _Behaviour:
    async def behaviour(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
        if working:
            await updater.start_work()
        await updater.add_artifact(parts=list(parts), name="output")
        await updater.complete()

    return behaviour


async def _message_response(updater: TaskUpdater, queue: EventQueue, _c: asyncio.Event) -> None:
    await queue.enqueue_event(updater.new_agent_message([Part(text="Direct message response")]))


async def _input_required(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
    await updater.requires_input(
        updater.new_agent_message([Part(text="More input is needed to go on.")])
    )


async def _reject(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
    raise A2AError("rejected")


async def _complete_at_once(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
    await updater.complete()


async def _chunked(updater: TaskUpdater, _q: EventQueue, _c: asyncio.Event) -> None:
    await updater.start_work()
    artifact_id = f"{updater.task_id}-chunked"
    await updater.add_artifact([Part(text="chunk-1 ")], artifact_id=artifact_id, append=False)
    await updater.add_artifact(
        [Part(text="chunk-2")], artifact_id=artifact_id, append=True, last_chunk=True
    )
    await updater.complete()


async def _long_run(updater: TaskUpdater, _q: EventQueue, cancelled: asyncio.Event) -> None:
    await updater.start_work()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancelled.wait(), LONG_RUN_SECONDS)
    if not cancelled.is_set():
        await updater.complete()


def _data(value: dict[str, Any]) -> Part:
    return Part(data=json_format.ParseDict(value, struct_pb2.Value()))


_FILE: Final = Part(raw=b"tck", media_type="text/plain", filename="output.txt")

#: (messageId prefix, behaviour), the longer of two overlapping prefixes first.
BEHAVIOURS: Final[tuple[tuple[str, _Behaviour], ...]] = (
    ("tck-complete-task", _complete_with_message),
    ("tck-artifact-text", _artifact(Part(text="Generated text content"))),
    (
        "tck-artifact-file-url",
        _artifact(Part(url=_FILE_URL, media_type="text/plain", filename="output.txt")),
    ),
    ("tck-artifact-file", _artifact(_FILE)),
    ("tck-artifact-data", _artifact(_data({"key": "value", "count": 42}))),
    ("tck-message-response", _message_response),
    ("tck-input-required", _input_required),
    ("tck-reject-task", _reject),
    ("tck-stream-001", _artifact(Part(text="Stream hello from TCK"), working=True)),
    ("tck-stream-002", _complete_at_once),
    ("tck-stream-003", _artifact(Part(text="Stream task lifecycle"), working=True)),
    ("tck-stream-ordering-001", _artifact(Part(text="Ordered output"), working=True)),
    ("tck-stream-artifact-text", _artifact(Part(text="Streamed text content"), working=True)),
    ("tck-stream-artifact-file", _artifact(_FILE, working=True)),
    ("tck-stream-artifact-chunked", _chunked),
    ("test-resubscribe-message-id", _long_run),
)


def behaviour_for(message_id: str) -> _Behaviour | None:
    """The behaviour a message's id asks for; None for an id with no known prefix."""
    for prefix, behaviour in BEHAVIOURS:
        if message_id.startswith(prefix):
            return behaviour
    return None


class ConformanceExecutor(ServedExecutor):
    """Answers each message as its `messageId` prefix asks (see the module docs)."""

    def __init__(self, options: ServedParent | None = None) -> None:
        self._open: dict[str, asyncio.Event] = {}

    @property
    def tasks_running(self) -> int:
        return len(self._open)

    @property
    def parent_threads(self) -> int:
        return 0  # no parent runs here

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if context.current_task is not None:  # a follow-up: the task's context, not a new one
            context_id = context.current_task.context_id or context_id
        if not task_id or not context_id:
            return
        updater = TaskUpdater(event_queue, task_id, context_id)
        message = context.message
        message_id = message.message_id if message is not None else ""
        if context.current_task is None and behaviour_for(message_id) is not _message_response:
            # The SDK takes a task's first event to be the Task itself.
            task = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            )
            task.status.timestamp.GetCurrentTime()
            if message is not None:
                task.history.append(message)
            await event_queue.enqueue_event(task)
        behaviour = behaviour_for(message_id)
        if behaviour is None:
            text = f"Unhandled messageId prefix: {message_id[:200]}"
            await updater.complete(updater.new_agent_message([Part(text=text)]))
            return
        cancelled = self._open.setdefault(task_id, asyncio.Event())
        try:
            await behaviour(updater, event_queue, cancelled)
        finally:
            self._open.pop(task_id, None)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if not task_id or not context_id:
            return
        running = self._open.get(task_id)
        if running is not None:
            running.set()
        await TaskUpdater(event_queue, task_id, context_id).cancel()

    async def aclose(self, grace: float = SHUTDOWN_TIMEOUT) -> int:
        for cancelled in self._open.values():
            cancelled.set()
        return 0


def _no_parent() -> ParentAgent:
    raise RuntimeError("the conformance agent runs no parent")


@contextlib.asynccontextmanager
async def _no_engine(*_: object) -> AsyncIterator[Engine]:
    raise RuntimeError("the conformance agent runs no engine")
    yield  # pragma: no cover


def conformance_agent(listening: Listening, *, name: str | None = None) -> ServedParent:
    """The conformance agent as `adapters.a2a.serving.serve` serves it."""
    return ServedParent(
        name=name or "subagent-engine conformance",
        description=(
            "The A2A conformance suite's scripted agent (messageId prefixes), served by "
            "subagent-engine a2a-serve; runs no model."
        ),
        label=CONFORMANCE,
        make_parent=_no_parent,
        open_engine=_no_engine,
        skills=(("conformance", "Answers the A2A TCK's messages as their messageId asks."),),
        listening=listening,
        make_executor=ConformanceExecutor,
    )
