"""The target interface: how a delegation talks to whatever agent runs it.

A `Target` is what a host registers under an agent key; `Target.open_session(task, nursery)`
gives the `TargetSession` for one delegation. A session can start the task (streaming progress
while the remote streams), resubscribe to it after a dropped stream, poll its state, continue it
with an answer after an input request, and cancel it. Remote protocols (A2A, AG-UI) and in-process
agents implement this seam in `adapters/`; the delegation actor drives every target the same way
and never asks which one it has (like httpx's transports).

Sessions report progress as protocol-neutral `TargetUpdate`s through the `emit` callback they
are given; `emit` may wait (backpressure) and is where cancellation reaches a chatty target.
Sessions raise `DelegationError` for typed failures (`agent_unavailable`, `remote_rejected`,
...); anything else a session raises is treated as a bug in it and becomes `internal_error`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from engine._registry import DelegationPolicy, DelegationRequest
from engine._results import ArtifactRef, DelegationError

__all__ = [
    "Answer",
    "DelegationTask",
    "Emit",
    "Target",
    "TargetCapabilities",
    "TargetSession",
    "TargetUpdate",
]


@attrs.frozen(kw_only=True)
class TargetUpdate:
    """One observation a target made of its remote task, before the engine stamps identity.

    `kind` is an event kind (`Kind.*`). Lifecycle kinds mean: `subagent.started` the remote
    accepted the task; `subagent.status` a state change (`status`, with the remote's message in
    `text`); `subagent.input_required` the remote waits for input (`text` says what it needs);
    `subagent.finished` / `failed` / `cancelled` the remote task ended (`text` of a finished
    update is its final summary, `error` of a failed one says why). Artifact updates may be
    chunks: `artifact_bytes` is the size of this chunk, `artifact_append` says it extends an
    earlier chunk of the same artifact id.

    Nesting: `subagent_id` names the remote's own subagent that produced the update (None: the
    remote agent itself), in the remote's ids; the engine namespaces it. The nested lifecycle
    kinds (`subagent.nested.started` / `finished` / `failed`) say about `subagent_id`: started
    (with `parent_subagent_id`, None for a subagent of the remote agent itself, `name`, `text`
    the description, `tool_call_id` / `message_id` the remote's spawning tool call and its
    message), finished (`status` `completed`, or `suspended` for a subagent paused on an
    interrupt that a resume run may continue under the same id; `text` its result) or failed
    (`error`).
    """

    kind: str
    status: str | None = None
    text: str | None = None
    delta: str | None = None
    role: str | None = None
    name: str | None = None
    message_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    args: Any = None
    result: Any = None
    artifact: ArtifactRef | None = None
    artifact_bytes: int = 0
    artifact_append: bool = False
    error: DelegationError | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None
    remote_message_id: str | None = None
    remote_artifact_id: str | None = None
    remote_tool_call_id: str | None = None
    card_fingerprint: str | None = None
    subagent_id: str | None = None
    parent_subagent_id: str | None = None
    raw: dict[str, Any] | None = None


Emit = Callable[[TargetUpdate], Awaitable[None]]


@attrs.frozen(kw_only=True)
class TargetCapabilities:
    """What a target can do. The actor degrades instead of asking what protocol it is."""

    streaming: bool = True
    resubscribe: bool = False
    poll: bool = False
    cancel: bool = True
    input: bool = False


@attrs.frozen(kw_only=True)
class DelegationTask:
    """Everything a session needs to run one delegation (identity, request, bounds)."""

    run_id: str
    delegation_id: str
    agent_key: str
    request: DelegationRequest
    policy: DelegationPolicy
    timeout: float
    stream: bool
    remote_context_id: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Answer:
    """A reply to an input request, given through `Run.answer(...)`."""

    text: str | None = None
    data: Mapping[str, Any] | None = None


class TargetSession(Protocol):
    """One delegation on one target. Methods are called by one actor task, never concurrently,
    except `cancel()`, which may run (shielded, with its own deadline) after any of them was
    cancelled. `aclose()` is always called last and must not raise.

    A session may have a `streaming` attribute: read after `start()`, False means it fell back
    from streaming to polling (e.g. the remote refused a streaming send), and the actor polls.
    A `card_fingerprint` attribute (read when the session opens) goes on the result even when
    the delegation fails before its first update; an `agent_name` attribute (the remote's own
    name, e.g. from its card) names the subagent when the host gave no display name. A
    `remote_may_run` attribute, read when the delegation is to be cancelled, False means the
    remote task or run cannot be running (it refused the task, or its stream already carried
    its end): nothing is sent and the result says `remote_cancel: not_needed`."""

    async def start(self, emit: Emit) -> None:
        """Send the task. Streaming: emit progress until the remote stream ends. Otherwise:
        emit what the acceptance said and return."""

    async def resubscribe(self, emit: Emit) -> None:
        """Re-attach to the running task's stream after a drop; emit until it ends."""

    async def poll(self, emit: Emit) -> None:
        """Emit a snapshot of the task's current state (repeats are folded by the engine)."""

    async def answer(self, answer: Answer, emit: Emit) -> None:
        """Continue the task after an input request; emit progress like `start`."""

    async def cancel(self) -> bool:
        """Ask the remote to cancel the task; True once it confirmed."""

    async def aclose(self) -> None:
        """Release what the session holds (connections, processes)."""


class Target(Protocol):
    """A host-registered agent implementation (A2A, AG-UI, in-process, ...).

    A target may also define `async def prepare(self) -> None`: the delegation actor awaits it
    before reading `capabilities` (a remote target fetches and validates its card there, raising
    `DelegationError` such as `agent_unavailable`)."""

    @property
    def capabilities(self) -> TargetCapabilities: ...

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> TargetSession:
        """A session for one delegation. `nursery` is the delegation actor's own: background
        tasks the session starts there are cancelled when the delegation ends."""
        ...
