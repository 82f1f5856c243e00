"""The target seam: how a delegation talks to whatever agent runs it.

A `Target` is what a host registers under an agent key; `Target.open_session(task, nursery)`
gives the `TargetSession` for one delegation. A session can start the task (streaming progress
while the remote streams), resubscribe to it after a dropped stream, poll its state, continue it
with an answer after an input request, and cancel it. Remote protocols (A2A, AG-UI) and in-process
agents implement this seam in `adapters/`; the delegation actor drives every target the same way
and never asks which one it has (like httpx's transports). The two protocols below declare every
member the engine and its adapters use; nothing is probed with `getattr`. `BaseTarget` and
`BaseTargetSession` give the optional members explicit no-op defaults. `engine.testing`
holds any implementation to this contract (`check_target`, given a harness that makes its remote
play each scenario).

Lifetimes: the `Engine` a target is registered with owns it. Opening the engine prepares every
target (`prepare()`: a remote one fetches and validates what it needs, e.g. its agent card); a
target that is misconfigured (a `DelegationError` that is not retryable, such as a malformed
card) makes the engine refuse to start with `TargetPrepareError`, while one whose remote is only
unreachable (a retryable error) is prepared again before each delegation. Closing the engine
closes every target (`aclose()`), shielded and bounded, whatever ended it.

Sessions report progress as protocol-neutral `TargetUpdate`s through the `emit` callback they
are given; `emit` may wait (backpressure), shielded, so a cancelled session normally meets its
cancellation at its own next await (inside a remote stream's `__anext__`, which unwinds the
stream's generators from within), not inside `emit`.
Sessions raise `DelegationError` for typed failures (`agent_unavailable`, `remote_rejected`,
...); anything else a session raises is treated as a bug in it and becomes `internal_error`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from engine._registry import DelegationPolicy, DelegationRequest
from engine._results import ArtifactRef, DelegationError, ErrorCode, RemoteCancel

__all__ = [
    "AgentDescription",
    "Answer",
    "BaseTarget",
    "BaseTargetSession",
    "DelegationTask",
    "Emit",
    "RemoteTaskRef",
    "Target",
    "TargetCapabilities",
    "TargetPrepareError",
    "TargetSession",
    "TargetUpdate",
]


@attrs.frozen(kw_only=True)
class TargetUpdate:
    """One observation a target made of its remote task, before the engine stamps identity.

    `kind` is an event kind (`Kind.*`). Lifecycle kinds mean: `subagent.started` the remote
    accepted the task; `subagent.status` a state change (`status`, with the remote's message in
    `text`); `subagent.input_required` the remote waits for input (`text` says what it needs,
    `subagent_id` which of its nested subagents asks, `response_schema` how an answer must look,
    and `status` `auth_required` with `auth_url` that it needs credentials);
    `subagent.finished` / `failed` / `cancelled` the remote task ended (`text` of a finished
    update is its final summary, `error` of a failed one says why). Artifact updates may be
    chunks: `artifact_bytes` is the size of this chunk, `artifact_append` says it extends an
    earlier chunk of the same artifact id. `artifact_data` is this chunk's content when the target
    has it: the engine keeps it (within `max_artifact_bytes`) for viewers (`Run.artifact`), never
    in an event or a result.

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
    artifact_data: bytes | None = None
    error: DelegationError | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None
    remote_message_id: str | None = None
    remote_artifact_id: str | None = None
    remote_tool_call_id: str | None = None
    card_fingerprint: str | None = None
    subagent_id: str | None = None
    parent_subagent_id: str | None = None
    #: On `subagent.input_required`: the JSON Schema an answer's data must match (dropped if
    #: it is no valid schema), and where a person signs in for an `auth_required` status.
    response_schema: dict[str, Any] | None = None
    auth_url: str | None = None
    #: On `subagent.input_required` from a remote that is itself an engine (a2a-serve): the
    #: remote's lineage of its question (its delegation id, then its nested subagents down to
    #: the asker), appended below this delegation's own in the question's `lineage`.
    remote_lineage: tuple[str, ...] = ()
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


@attrs.frozen(kw_only=True)
class AgentDescription:
    """What a target knows of its agent from the agent itself (an A2A card, say), in no
    protocol's terms: its `name`, what it does (`description`) and the names of its `skills`.
    The host's own words (`AgentSpec.description`, `skills`) take precedence where given."""

    name: str = ""
    description: str = ""
    skills: tuple[str, ...] = ()


class TargetSession(Protocol):
    """One delegation on one target. Methods are called by one actor task, never concurrently,
    except `cancel()`, which may run (shielded, with its own deadline) after any of them was
    cancelled, or from within `emit` when an engine limit ended the delegation. `aclose()` is
    always called last and must not raise."""

    @property
    def card_fingerprint(self) -> str | None:
        """The identity of what describes the remote (e.g. `sha256:...` of its agent card),
        read when the session opens: it goes on the result even when the delegation fails
        before its first update. None: the remote has no such document."""
        ...

    @property
    def agent_name(self) -> str | None:
        """The remote's own name for itself (e.g. from its card), read when the session opens;
        it names the subagent when the host gave no display name. None: unknown."""
        ...

    @property
    def streaming(self) -> bool:
        """Read after `start()`: False once the session fell back from streaming to polling
        (e.g. the remote refused a streaming send); the actor then polls. The actor streams
        only while the task asked to stream and this is True."""
        ...

    @property
    def remote_may_run(self) -> bool:
        """Read when the delegation is to be cancelled: False means the remote task or run
        cannot be running (it refused the task, or its stream already carried its end), so no
        cancel is sent and the result says `remote_cancel: not_needed`. True when unsure."""
        ...

    async def start(self, emit: Emit) -> None:
        """Send the task. Streaming: emit progress until the remote stream ends. Otherwise:
        emit what the acceptance said and return."""

    async def resubscribe(self, emit: Emit) -> None:
        """Re-attach to the running task's stream after a drop; emit until it ends. Called only
        when the target's capabilities say `resubscribe`."""

    async def poll(self, emit: Emit) -> None:
        """Emit a snapshot of the task's current state (repeats are folded by the engine).
        Called only when the target's capabilities say `poll`."""

    async def answer(self, answer: Answer, emit: Emit) -> None:
        """Continue the task after an input request; emit progress like `start`. Called only
        when the target's capabilities say `input`."""

    async def cancel(self) -> bool:
        """Ask the remote to cancel the task; True once it confirmed (or nothing was running).
        Called only when the target's capabilities say `cancel`."""

    async def aclose(self) -> None:
        """Release what the session holds (connections, processes)."""


class Target(Protocol):
    """A host-registered agent implementation (A2A, AG-UI, in-process, ...). See the module
    docs for who prepares and closes it, and when."""

    @property
    def capabilities(self) -> TargetCapabilities:
        """What the target can do; read after `prepare()` (a remote's card may say)."""
        ...

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credential values the target sends (the engine redacts them everywhere, even
        when the host forgot to list them in `AgentSpec.secrets`). Empty: none."""
        ...

    @property
    def description(self) -> AgentDescription | None:
        """What the agent says of itself, for tool listings; None until `prepare()` learned it,
        or when the agent says nothing (an in-process function, an AG-UI endpoint)."""
        ...

    async def prepare(self) -> None:
        """Make the target ready to open sessions: a remote target fetches and validates what
        describes its agent (cached as it sees fit). Awaited when the engine opens and again
        before each delegation, so it must be cheap once done. Raises `DelegationError`: not
        retryable for a target that cannot work as configured (a malformed card), retryable for
        a remote that may come back (unreachable)."""
        ...

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> TargetSession:
        """A session for one delegation. `nursery` is the delegation actor's own: background
        tasks the session starts there are cancelled when the delegation ends."""
        ...

    async def aclose(self) -> None:
        """Release what the target holds (connection pools); idempotent, never raises. Called
        by the engine when it closes, after every session ended. A target closed this way may
        be prepared again (e.g. registered with a new engine): it opens what it needs anew."""
        ...

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        """Cancel a remote task known only by the ids the journal kept, with no session: what
        the engine does for the delegations of a process that died (crash recovery, a lost
        node). Returns a `RemoteCancel` value: `confirmed` (the remote says the task ended),
        `pending` (sent or tried, not confirmed), `not_needed` (no remote task was named) or
        `unsupported` (the protocol or the target cannot). Bounded by the caller; never raises
        for a remote's failure."""
        ...


@attrs.frozen(kw_only=True)
class RemoteTaskRef:
    """A remote task as the journal and the audit trail know it, for `Target.cancel_remote`:
    the delegation and agent key, and the protocol ids the remote gave (an A2A task and
    context id; an AG-UI run id and thread id)."""

    delegation_id: str
    agent_key: str
    run_id: str | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None


class TargetPrepareError(Exception):
    """Opening an engine found registered targets that cannot work as configured (their
    `prepare()` raised a `DelegationError` that is not retryable, e.g. a malformed agent card,
    or crashed). `failures` maps each such agent key to its error; the engine did not start."""

    def __init__(self, failures: Mapping[str, DelegationError]) -> None:
        self.failures = dict(failures)
        super().__init__(
            "; ".join(f"agent {key!r} cannot be used: {error}" for key, error in failures.items())
        )


class BaseTarget:
    """A convenient base for targets: explicit defaults for the members most targets do not
    need (no credentials, no self-description, nothing to prepare or close). Subclasses provide
    `capabilities` and `open_session`; the `Target` protocol stays the contract."""

    secrets: tuple[str, ...] = ()
    description: AgentDescription | None = None

    async def prepare(self) -> None:
        """Nothing to prepare."""

    async def aclose(self) -> None:
        """Nothing to release."""

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        """No remote task to cancel without a session (an in-process agent ends with its
        process)."""
        return RemoteCancel.UNSUPPORTED


class BaseTargetSession:
    """A convenient base for sessions: explicit defaults for the members a simple session does
    not need. It has no card and no name of its own, streams as the task asked, may always have
    a running remote (a cancel is sent), cannot resubscribe, poll or take an answer (typed
    `capability_unsupported`, which the actor never meets while the target's capabilities say
    so), and holds nothing to release. Subclasses provide `start` and `cancel`."""

    card_fingerprint: str | None = None
    agent_name: str | None = None
    streaming: bool = True
    remote_may_run: bool = True

    async def resubscribe(self, emit: Emit) -> None:
        raise _unsupported("resubscribe")

    async def poll(self, emit: Emit) -> None:
        raise _unsupported("poll")

    async def answer(self, answer: Answer, emit: Emit) -> None:
        raise _unsupported("answer")

    async def aclose(self) -> None:
        """Nothing to release."""


def _unsupported(what: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.CAPABILITY_UNSUPPORTED, message=f"This agent cannot {what}."
    )
