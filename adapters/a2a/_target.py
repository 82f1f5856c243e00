"""Remote A2A agents as delegation targets: the a2a-sdk client driven under Trio.

This module owns the I/O of one A2A agent: discovering and validating its Agent Card (cached,
with a fingerprint), creating a2a-sdk clients over an httpx client whose credentials go only to
the card's origin and explicitly trusted origins, and one `TargetSession` per delegation that
sends the task (streaming, or `return_immediately` for agents that cannot stream), resubscribes,
polls `GetTask` (also to check a terminal the remote claimed before it announced its task, when
the stream then ends without the task's own end), continues after input-required with the same
task and context ids (the answer's message names the remote's question when the remote named
one, as `subagent-engine a2a-serve` does for its delegations' questions), and cancels
with `CancelTask` (tenant and structured metadata included), from a session or, for a process
that died, from the task id alone (`A2ATarget.cancel_remote`). The translation of what the remote
says into engine updates is `adapters.a2a._mapping` (sans-IO); this module only moves bytes.

Streams are left by cancelling the enclosing Trio scope (the delegation actor does that), never
by abandoning the SDK's iterator (with a2a-sdk 1.3.0, `break` leaves its nested async generators
unclosed). Every error the SDK or httpx raises becomes a typed `DelegationError` whose message
never carries a credential.

Every response the remote sends is bounded while it is read (`A2AAgentConfig.max_frame_bytes`,
through `adapters._remote_http.bound_response_frames`): one event of a stream, a unary answer
(GetTask, CancelTask, SendMessage, ListTasks), the card. A frame past it ends the delegation
with `artifact_too_large` when the frame begins as an artifact update, else
`malformed_remote_payload` (metadata `reason: frame_too_large`), and the remote task is cancelled
as for any failure; its state is then read with ListTasks without artifacts if the CancelTask
answer itself is too large.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import httpx
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client, ClientCallContext
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    MethodNotFoundError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import ParseError

from adapters._asyncgens import closing_abandoned_generators
from adapters._remote_http import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameTooLargeError,
    RemotePools,
    credential_secrets,
    identity_headers,
    ref_identity_headers,
    task_text,
    valid_frame_limit,
)
from adapters.a2a._card import CardInfo, validate_card
from adapters.a2a._mapping import A2AEventMapper, answer_metadata
from adapters.agent_protocols import AgentProtocol, AgentSettings
from engine import (
    AgentDescription,
    Answer,
    DelegationError,
    DelegationTask,
    Emit,
    ErrorCode,
    Redactor,
    RegistryError,
    RemoteCancel,
    RemoteTaskRef,
    TargetCapabilities,
    TargetUpdate,
    note_remote_method,
)

__all__ = ["AGENT_PROTOCOL", "A2AAgentConfig", "A2ATarget"]

#: How long a validated card is trusted before it is fetched again.
CARD_TTL_SECONDS: Final = 300.0

_TERMINAL_STATES: Final = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


#: A cancel that came after the task was sent but before the remote named it looks the task up
#: with ListTasks (the newest first, in the delegation's context when it has one), matching the
#: message id we chose, which the remote keeps in the task's history: up to this many lookups,
#: the first at once, then `FIND_BACKOFF` s apart, doubling (the remote may store the task a
#: moment after it read the message), each reading at most `FIND_PAGES` pages.
FIND_ATTEMPTS: Final = 3
FIND_BACKOFF: Final = 0.05
FIND_PAGES: Final = 2
FIND_PAGE_SIZE: Final = 100

#: What the SDK raises, untyped, for a remote document it cannot read (bad types, an enum of
#: 1e999, a lone surrogate in a key): the remote's payload is malformed, not our code broken.
_UNREADABLE: Final = (ParseError, SystemError, OverflowError, ValueError, KeyError, TypeError)


def _absolute_http_url(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise RegistryError(f"{attribute.name} must be an absolute http(s) URL, got {value!r}")
    if parts.username or parts.password:
        raise RegistryError(f"{attribute.name} must not carry credentials; use auth_header")


def _known_bindings(_: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    unknown = set(value) - {"JSONRPC", "HTTP+JSON"}
    if not value or unknown:
        raise RegistryError(f"{attribute.name} must name JSONRPC and/or HTTP+JSON, got {value!r}")


def _positive_seconds(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise RegistryError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class A2AAgentConfig:
    """How the host reaches one A2A agent. The model never sees any of this.

    `auth_header` is a (name, value) pair such as ("Authorization", "Bearer ...") resolved by the
    host (e.g. from an environment variable); it is sent only to the card's origin and to
    `trusted_origins`. `forward_headers` are sent with every request (user id, tenant, lineage).
    """

    card_url: str = attrs.field(validator=_absolute_http_url)
    tenant: str | None = None
    auth_header: tuple[str, str] | None = attrs.field(default=None, repr=False)
    trusted_origins: tuple[str, ...] = ()
    forward_headers: Mapping[str, str] = attrs.field(factory=dict)
    #: Send who is asking with every call (as kagent's remote A2A subagents do with `x-user-id`:
    #: https://github.com/kagent-dev/kagent/blob/main/docs/architecture/a2a-subagents.md,
    #: "User ID and session tagging"): `x-user-id` (the run's
    #: `metadata["user_id"]`), `x-tenant`, `x-source: subagent-engine` and the lineage
    #: `x-parent-run-id`, `x-parent-tool-call-id`, `x-delegation-id`.
    forward_identity: bool = False
    request_timeout: float = attrs.field(default=30.0, validator=_positive_seconds)
    #: Protocol bindings to use, in order of preference; the card's order wins unless
    #: `prefer_own_bindings` (e.g. ("HTTP+JSON",) to insist on REST).
    bindings: tuple[str, ...] = attrs.field(
        default=("JSONRPC", "HTTP+JSON"), validator=_known_bindings
    )
    prefer_own_bindings: bool = False
    text_artifact_names: frozenset[str] = frozenset({"assistant-output", "assistant_output"})
    #: The most bytes one frame from the remote may hold, counted while it is read, before any
    #: JSON parse: one event of a stream, or a whole unary answer or card. It bounds what a
    #: remote can make the engine hold (a 50 MiB event cost ~440 MiB of peak memory when parsed
    #: whole). Keep it above the largest artifact chunk the agent legitimately sends; a
    #: caller-given `http` client is used as it is, without this bound.
    max_frame_bytes: int = attrs.field(default=DEFAULT_MAX_FRAME_BYTES, validator=valid_frame_limit)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Credential values to redact everywhere (`AgentSpec.all_secrets` picks them up)."""
        return credential_secrets(self.auth_header)


class A2ATarget:
    """One host-registered A2A agent. `await prepare()` (the engine does, when it opens and
    before each delegation) fetches and validates its card; the result is cached for
    `CARD_TTL_SECONDS`. `aclose()` closes its HTTP pools (not a caller-given `http`); a later
    `prepare()` opens them anew."""

    def __init__(self, config: A2AAgentConfig, *, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._redactor = Redactor(config.secrets)
        self._pools = RemotePools(
            config.card_url,
            trusted_origins=config.trusted_origins,
            auth_header=config.auth_header,
            forward_headers=config.forward_headers,
            request_timeout=config.request_timeout,
            http=http,
            max_frame_bytes=config.max_frame_bytes,
        )
        self.card: AgentCard | None = None
        self.card_info: CardInfo | None = None
        self.fingerprint: str | None = None
        self._card_fetched_at = -CARD_TTL_SECONDS
        self._clients: dict[str, Client] = {}
        self._lock = trio.Lock()
        #: False once the remote said it has no ListTasks (then a task it never named stays
        #: `cancel_pending`, as before).
        self.can_list_tasks = True

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credential values this target sends (the engine redacts them everywhere)."""
        return self.config.secrets

    @property
    def capabilities(self) -> TargetCapabilities:
        streaming = self.card_info.streaming if self.card_info is not None else True
        return TargetCapabilities(
            streaming=streaming, resubscribe=streaming, poll=True, cancel=True, input=True
        )

    @property
    def description(self) -> AgentDescription | None:
        """The card's name, description and skill names (None before a card was fetched)."""
        info = self.card_info
        if info is None:
            return None
        return AgentDescription(
            name=info.name,
            description=info.description,
            skills=tuple(skill.name or skill.id for skill in info.skills if skill.name or skill.id),
        )

    async def prepare(self) -> None:
        """Fetch and validate the card unless a fresh one is cached. Raises `DelegationError`
        (`agent_unavailable`): retryable for an unreachable card, not retryable for a malformed
        one (unreadable JSON, not an Agent Card, or one the engine cannot use)."""
        async with self._lock:
            self._pools.reopen()
            if time.monotonic() - self._card_fetched_at < CARD_TTL_SECONDS and self.card:
                return
            try:
                base, path = _split_card_url(self.config.card_url)
                resolver = A2ACardResolver(self._pools.streams, base, agent_card_path=path)
                async with closing_abandoned_generators():
                    card = await resolver.get_agent_card()
            except FrameTooLargeError as exc:
                # The same card is as large next time: a card to fix, not a remote to wait for.
                error = self._frame_error(exc, "fetching the agent card")
                raise attrs.evolve(
                    error, code=ErrorCode.AGENT_UNAVAILABLE, retryable=False
                ) from None
            except (A2AError, httpx.HTTPError, *_UNREADABLE) as exc:
                error = self._error(ErrorCode.AGENT_UNAVAILABLE, "fetching the agent card", exc)
                if isinstance(exc, _UNREADABLE) or _is_malformed(exc):
                    # The same document fails the same way: a card to fix, not a remote to wait
                    # for (`validate_card` says the same of a card it cannot use).
                    error = attrs.evolve(
                        error,
                        retryable=False,
                        metadata={**(error.metadata or {}), "reason": "unreadable"},
                    )
                raise error from None
            info = validate_card(card)
            self._card_fetched_at = time.monotonic()
            if info.fingerprint == self.fingerprint:
                return  # unchanged: keep the clients (and the sessions using them) as they are
            self.card_info = info
            self.card = card
            self.fingerprint = info.fingerprint
            # New clients for new sessions. The old ones are not closed: sessions that started
            # with them may still be streaming, and they hold nothing but our shared httpx pools.
            self._clients.clear()

    def _client(self, streaming: bool, *, control: bool = False) -> Client:
        key = "control" if control else ("stream" if streaming else "send")
        client = self._clients.get(key)
        if client is None:
            if self.card is None:
                raise DelegationError(
                    code=ErrorCode.AGENT_UNAVAILABLE, message="The agent card was not fetched."
                )
            factory = ClientFactory(
                ClientConfig(
                    streaming=streaming and not control,
                    httpx_client=self._pools.control if control else self._pools.streams,
                    supported_protocol_bindings=list(self.config.bindings),
                    use_client_preference=self.config.prefer_own_bindings,
                )
            )
            try:
                client = factory.create(self.card)
            except ValueError as exc:  # the SDK's way of saying "no compatible interface"
                raise self._error(
                    ErrorCode.CAPABILITY_UNSUPPORTED, "choosing a transport", exc
                ) from None
            self._clients[key] = client
        return client

    def _error(self, code: str, doing: str, exc: BaseException) -> DelegationError:
        detail = self._redactor.text(str(exc) or type(exc).__name__)[:300]
        if _http_status(exc) in (401, 403) or _AUTH_REFUSED.search(detail):
            code = ErrorCode.REMOTE_REJECTED
            detail = f"authentication refused ({detail})"
        return DelegationError(
            code=code,
            message=f"A2A agent error while {doing}: {type(exc).__name__}: {detail}",
            metadata={"exception": type(exc).__name__},
        )

    def _frame_error(self, exc: FrameTooLargeError, doing: str) -> DelegationError:
        """A frame past `max_frame_bytes`: `artifact_too_large` if it began as an artifact
        update (the bytes before the limit say so), else a malformed payload. Nothing of the
        frame goes into the error but its size limit and media type."""
        artifact = b'"artifactUpdate"' in exc.head
        what = "an artifact chunk" if artifact else "a frame"
        return DelegationError(
            code=ErrorCode.ARTIFACT_TOO_LARGE if artifact else ErrorCode.MALFORMED_REMOTE_PAYLOAD,
            message=f"The remote A2A agent sent {what} larger than the {exc.limit}-byte frame "
            f"limit (max_frame_bytes) while {doing}; it was not read.",
            metadata={
                "reason": "frame_too_large",
                "limit_bytes": exc.limit,
                "content_type": self._redactor.text(exc.content_type)[:100],
            },
        )

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _A2ASession:
        return _A2ASession(self, task, nursery)

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        """Cancel the A2A task `ref.remote_task_id` (the task id the remote gave, as journaled)
        with no session: prepare if needed, send `CancelTask` (tenant, and metadata naming the
        delegation with the reason), and read the task's state from the answer, or from
        `GetTask` when the remote refused the cancel (it may have ended already).

        Returns `not_needed` without a task id; `confirmed` once the remote says the task is in
        a terminal state; `pending` when it is not, or when the remote could not be asked
        (unreachable, an error answer, an unreadable one, no answer within the config's
        `request_timeout`). A task the remote does not know (`TaskNotFoundError` to both calls)
        is `pending` too: the remote may have forgotten it or keep it under another tenant, and
        it did not say that the task ended. `unsupported` when the target cannot work as
        configured (a card the engine cannot use, no transport in common). Never raises for
        what the remote does; the whole call is bounded by `request_timeout` (the control
        pool reads without a timeout) and by the caller."""
        task_id = ref.remote_task_id
        if not task_id:
            return RemoteCancel.NOT_NEEDED
        ended = False
        with trio.move_on_after(self.config.request_timeout):
            try:
                await self.prepare()
                self._client(False, control=True)
            except DelegationError as error:
                cannot = error.retryable is False or error.code == ErrorCode.CAPABILITY_UNSUPPORTED
                return RemoteCancel.UNSUPPORTED if cannot else RemoteCancel.PENDING
            metadata = {
                "delegation_id": ref.delegation_id,
                "agent_key": ref.agent_key,
                **({"run_id": ref.run_id} if ref.run_id else {}),
                "reason": "the delegating process ended",
            }
            context = None
            if self.config.forward_identity:
                identity = ref_identity_headers(ref, self.config.tenant)
                context = ClientCallContext(service_parameters=identity)
            ended = await self._cancel_task(task_id, metadata, context, ref.remote_context_id)
        return RemoteCancel.CONFIRMED if ended else RemoteCancel.PENDING

    async def _cancel_task(
        self,
        task_id: str,
        metadata: Mapping[str, Any],
        context: ClientCallContext | None,
        context_id: str | None = None,
    ) -> bool:
        """`CancelTask` for `task_id`; True once the remote says the task is in a terminal
        state. A refused or lost cancel (e.g. not cancelable because it already ended) asks
        `GetTask`: the task's own state is the answer to "is it still running?". An answer past
        `max_frame_bytes` (a task holding huge artifacts answers with all of them) is read as
        the task's entry in ListTasks instead, which leaves artifacts out. False when none of
        them answered."""
        client = self._client(False, control=True)
        tenant = self.config.tenant or ""
        request = CancelTaskRequest(tenant=tenant, id=task_id)
        request.metadata.update(dict(metadata))
        too_large = False
        async with closing_abandoned_generators():
            try:
                note_remote_method("a2a", "CancelTask")
                task = await client.cancel_task(request, context=context)
                return task.status.state in _TERMINAL_STATES
            except FrameTooLargeError:
                too_large = True
            except (A2AError, httpx.HTTPError, *_UNREADABLE):
                pass
            if not too_large:
                try:
                    note_remote_method("a2a", "GetTask")
                    task = await client.get_task(
                        GetTaskRequest(tenant=tenant, id=task_id), context=context
                    )
                    return task.status.state in _TERMINAL_STATES
                except FrameTooLargeError:
                    pass
                except (A2AError, httpx.HTTPError, *_UNREADABLE):
                    return False
            state = await self._listed_state(task_id, context_id, context)
        return state in _TERMINAL_STATES

    async def _listed_state(
        self, task_id: str, context_id: str | None, context: ClientCallContext | None
    ) -> int | None:
        """The state of `task_id` as ListTasks gives it, without artifacts or history (in its
        context when known, up to `FIND_PAGES` pages); None if it is not found or the remote
        cannot list."""
        client = self._client(False, control=True)
        token = ""
        for _ in range(FIND_PAGES):
            request = ListTasksRequest(
                tenant=self.config.tenant or "",
                context_id=context_id or "",
                page_size=FIND_PAGE_SIZE,
                page_token=token,
                history_length=0,
                include_artifacts=False,
            )
            try:
                async with closing_abandoned_generators():
                    note_remote_method("a2a", "ListTasks")
                    page = await client.list_tasks(request, context=context)
            except (A2AError, httpx.HTTPError, FrameTooLargeError, *_UNREADABLE):
                return None
            for task in page.tasks:
                if task.id == task_id:
                    return int(task.status.state)
            token = page.next_page_token
            if not token:
                break
        return None

    async def aclose(self) -> None:
        """Close the SDK clients and the pools; idempotent. Called once every session ended."""
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.close()
        await self._pools.aclose()


def _configure(agent: AgentSettings) -> A2AAgentConfig:
    limits: dict[str, Any] = {}
    if agent.max_frame_bytes is not None:
        limits["max_frame_bytes"] = agent.max_frame_bytes
    return A2AAgentConfig(
        card_url=agent.settings["card_url"],
        tenant=agent.tenant,
        auth_header=agent.auth_header,
        trusted_origins=agent.trusted_origins,
        forward_identity=agent.forward_identity,
        **limits,
    )


#: A2A as a host's configuration file declares it: an agent is found by its card; the most bytes
#: one frame of it may hold is `max_frame_bytes` ("8 MiB" by default).
AGENT_PROTOCOL: Final = AgentProtocol(
    name="a2a",
    settings={"card_url": True},
    reached="an A2A agent is found by its `card_url`",
    configure=_configure,
    target=A2ATarget,
)


def _split_card_url(card_url: str) -> tuple[str, str]:
    parts = urlsplit(card_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("the card URL must be an absolute http(s) URL")
    base = f"{parts.scheme}://{parts.netloc}"
    return base, parts.path or "/.well-known/agent-card.json"


class _StreamingRefused(Exception):
    """A streaming send the remote refused before accepting any task."""

    def __init__(self, error: DelegationError) -> None:
        super().__init__(error.message)
        self.error = error


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from, outermost first (bounded: chains can be long)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 16 and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


#: How an SDK error that lost its response says the remote refused our credential. Not any
#: "401" in the text: a URL's port may hold one.
_AUTH_REFUSED: Final = re.compile(r"\bHTTP (?:Error )?40[13]\b")


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of the response `exc` (or what it was raised from) is about, if any."""
    for cause in _causes(exc):
        status = getattr(cause, "status_code", None)
        if status is None:
            status = getattr(getattr(cause, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
    return None


def _is_malformed(exc: BaseException) -> bool:
    """The SDK wraps an unreadable remote document (bad JSON in an SSE frame, a payload of the
    wrong shape) in a generic client error; its cause says what it was."""
    if any(
        isinstance(cause, _UNREADABLE) and not isinstance(cause, httpx.HTTPError)
        for cause in _causes(exc)[1:]
    ):
        return True
    return "invalid json" in str(exc).lower()


def _is_transport_error(exc: BaseException) -> bool:
    """A broken connection (as opposed to a protocol-level refusal by the remote)."""
    if any(isinstance(cause, httpx.TransportError) for cause in _causes(exc)):
        return True
    return "network" in str(exc).lower() or "connection" in str(exc).lower()


class _A2ASession:
    def __init__(self, target: A2ATarget, task: DelegationTask, nursery: trio.Nursery) -> None:
        self._target = target
        self._task = task
        self._nursery = nursery
        self._mapper = A2AEventMapper(
            text_artifact_names=target.config.text_artifact_names,
            card_fingerprint=target.fingerprint,
            streaming=task.stream,
            hold_text=True,
        )
        self._release_scheduled = False
        self._emitting = False  # an emit is under way (it may wait for room in the mailbox)
        self._emitted = trio.lowlevel.ParkingLot()
        self.task_id: str | None = None
        self.context_id: str | None = task.remote_context_id
        self._message_sent = False
        #: The id we gave the message that is to create the task: how a cancel that comes
        #: before the remote names the task finds it (ListTasks, `_find_task`).
        self._new_task_message_id: str | None = None
        #: The validated card this delegation uses (the actor puts it on every result), and the
        #: name it gives the agent (shown when the host gave no display name).
        self.card_fingerprint = target.fingerprint
        info = target.card_info
        self.agent_name: str | None = info.name if info is not None else None
        #: False once a refused streaming send fell back to polling (the actor reads it).
        self.streaming = task.stream
        #: The session cannot tell whether a task it sent ended: its `cancel` finds out (and
        #: confirms at once when nothing was sent).
        self.remote_may_run = True

    def _context(self) -> ClientCallContext | None:
        config = self._target.config
        if not config.forward_identity:
            return None
        return ClientCallContext(service_parameters=identity_headers(self._task, config.tenant))

    def _metadata(self) -> dict[str, Any]:
        return {
            "delegation_id": self._task.delegation_id,
            "run_id": self._task.run_id,
            "agent_key": self._task.agent_key,
        }

    async def _relay(self, responses: AsyncIterator[StreamResponse], emit: Emit) -> None:
        # The SDK's generators are closed right here, not left to the garbage collector: the
        # outermost by aclosing, and those beneath it, which no SDK layer closes when one raises
        # or the actor stops the relay (terminal reached), by closing_abandoned_generators.
        async with (
            closing_abandoned_generators(),
            aclosing(responses) as stream,  # type: ignore[type-var]
        ):
            try:
                async for response in stream:
                    updates = self._mapper.feed(response)
                    if updates:
                        await self._emit(updates, emit)
                    if self._mapper.holding and not self._release_scheduled:
                        # Released by a task that runs once this one waits for the network.
                        self._release_scheduled = True
                        self._nursery.start_soon(self._release_held, emit)
            finally:
                # Held text came before whatever ended the stream (its end, an error, a cancel),
                # and so did text the release task may still be emitting: both go out first.
                with trio.CancelScope(shield=True):
                    await self._emit(self._mapper.release(), emit)

    async def _release_held(self, emit: Emit) -> None:
        """Emit the text the mapper holds. Scheduled by the relay; it runs once the relay waits
        (for the network, or for room in the run's mailbox), so it coalesces what the relay
        read meanwhile."""
        await self._emitted_all()
        # Taken only now: text the relay took while this waited is older and went first. What
        # is held now is newer than anything emitted, and the mapper holds nothing while the
        # relay has updates to emit, so this cannot overtake them.
        self._release_scheduled = False
        await self._emit(self._mapper.release(), emit)

    async def _emitted_all(self) -> None:
        while self._emitting:
            await self._emitted.park()

    async def _emit(self, updates: list[TargetUpdate], emit: Emit) -> None:
        """Emit in order, after any emit under way (even with nothing to emit: the caller may
        be about to leave, and what is under way came first). The relay and `_release_held`
        both emit, and an emit may wait for room in the run's mailbox: neither may overtake the
        other meanwhile."""
        if self._emitting:
            # Shielded, like the emit it waits for (bounded: the run's writer always drains the
            # mailbox). A cancel here would lose `updates`, which the mapper already counts as
            # emitted, and reach the relay in its loop body instead of in the stream's
            # `__anext__`, leaving the SDK's nested generators to the garbage collector.
            with trio.CancelScope(shield=True):
                await self._emitted_all()
        if not updates:
            return
        self._emitting = True
        try:
            for update in updates:
                self._learn(update.remote_task_id, update.remote_context_id)
                await emit(update)
        finally:
            self._emitting = False
            if self._emitted:
                self._emitted.unpark_all()

    def _learn(self, task_id: str | None, context_id: str | None) -> None:
        if task_id and self.task_id is None:
            self.task_id = task_id
        if context_id and self.context_id is None:
            self.context_id = context_id

    async def _send(
        self,
        parts: Sequence[Part],
        emit: Emit,
        doing: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._message_sent = True  # from here on the remote may hold a task we cannot name yet
        try:
            await self._send_once(parts, emit, doing, stream=self.streaming, metadata=metadata)
        except _StreamingRefused as refused:
            if not self._task.policy.fallback_to_polling:
                raise refused.error from None
            # The card said it streams, the remote refused: send again and poll instead.
            self.streaming = False
            self._mapper.streaming = False
            await self._send_once(parts, emit, doing, stream=False, metadata=metadata)

    async def _send_once(
        self,
        parts: Sequence[Part],
        emit: Emit,
        doing: str,
        *,
        stream: bool,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        config = self._target.config
        message = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=list(parts),
            task_id=self.task_id or "",
            context_id=self.context_id or "",
        )
        if metadata:
            message.metadata.update(dict(metadata))
        request = SendMessageRequest(
            tenant=config.tenant or "",
            message=message,
            configuration=SendMessageConfiguration(
                history_length=self._task.request.history_length or 0,
                return_immediately=not stream,
            ),
        )
        request.metadata.update(self._metadata())
        client = self._target._client(stream)
        if self.task_id is None:
            self._new_task_message_id = message.message_id
        note_remote_method("a2a", "SendStreamingMessage" if stream else "SendMessage")
        try:
            await self._relay(client.send_message(request, context=self._context()), emit)
        except FrameTooLargeError as exc:
            raise self._target._frame_error(exc, doing) from None
        except _UNREADABLE as exc:
            raise self._target._error(ErrorCode.MALFORMED_REMOTE_PAYLOAD, doing, exc) from None
        except (A2AError, httpx.HTTPError) as exc:
            if self.task_id is not None and _is_transport_error(exc):
                # The task was accepted and the connection broke: that is a dropped stream,
                # which the delegation recovers with resubscribe/GetTask, not a failure.
                return
            if self.task_id is None and not _is_transport_error(exc):
                # Refused before any task (an error answer, not a broken connection): no task
                # of this message exists for a cancel to look up.
                self._new_task_message_id = None
            code = (
                ErrorCode.MALFORMED_REMOTE_PAYLOAD
                if _is_malformed(exc)
                else (ErrorCode.AGENT_UNAVAILABLE)
            )
            error = self._target._error(code, doing, exc)
            if code == ErrorCode.MALFORMED_REMOTE_PAYLOAD:
                raise error from None
            if stream and self.task_id is None and isinstance(exc, A2AError):
                raise _StreamingRefused(error) from None
            raise error from None

    async def start(self, emit: Emit) -> None:
        await self._send([Part(text=task_text(self._task))], emit, "sending the task")

    async def resubscribe(self, emit: Emit) -> None:
        task_id = await self._task_to_read()
        if task_id is None:
            raise DelegationError(
                code=ErrorCode.STREAM_INTERRUPTED, message="No task to resubscribe to."
            )
        client = self._target._client(True)
        request = SubscribeToTaskRequest(tenant=self._target.config.tenant or "", id=task_id)
        note_remote_method("a2a", "SubscribeToTask")
        try:
            await self._relay(client.subscribe(request, context=self._context()), emit)
        except FrameTooLargeError as exc:
            raise self._target._frame_error(exc, "resubscribing") from None
        except _UNREADABLE as exc:
            raise self._target._error(
                ErrorCode.MALFORMED_REMOTE_PAYLOAD, "resubscribing", exc
            ) from None
        except (UnsupportedOperationError, TaskNotFoundError) as exc:
            raise self._target._error(ErrorCode.STREAM_INTERRUPTED, "resubscribing", exc) from None
        except (A2AError, httpx.HTTPError) as exc:
            raise self._target._error(ErrorCode.STREAM_INTERRUPTED, "resubscribing", exc) from None

    async def _task_to_read(self) -> str | None:
        """The task to resubscribe to or poll: the one the remote announced; else, when the
        stream ended before any (it may have claimed an end first), the one our message created
        (ListTasks, `_find_task`), else the task id the remote's claimed end named, which the
        read then confirms or refutes (a Task announces itself; an unknown id is an error)."""
        if self.task_id is None and not await self._find_task():
            return self._mapper.unconfirmed_task_id
        return self.task_id

    async def poll(self, emit: Emit) -> None:
        task_id = await self._task_to_read()
        if task_id is None:
            raise DelegationError(code=ErrorCode.STREAM_INTERRUPTED, message="No task to poll.")
        client = self._target._client(False, control=True)
        request = GetTaskRequest(tenant=self._target.config.tenant or "", id=task_id)
        note_remote_method("a2a", "GetTask")
        try:
            async with closing_abandoned_generators():
                task = await client.get_task(request, context=self._context())
        except FrameTooLargeError as exc:
            raise self._target._frame_error(exc, "reading the task") from None
        except _UNREADABLE as exc:
            raise self._target._error(
                ErrorCode.MALFORMED_REMOTE_PAYLOAD, "reading the task", exc
            ) from None
        except (A2AError, httpx.HTTPError) as exc:
            raise self._target._error(
                ErrorCode.AGENT_UNAVAILABLE, "reading the task", exc
            ) from None
        await self._emit(self._mapper.snapshot(task), emit)

    async def answer(self, answer: Answer, emit: Emit) -> None:
        parts = []
        if answer.text is not None:
            parts.append(Part(text=answer.text))
        if answer.data is not None:
            from google.protobuf.struct_pb2 import Value

            value = Value()
            value.struct_value.update(dict(answer.data))
            parts.append(Part(data=value))
        # Naming the remote's question (when it named one: a nested question from another
        # engine) lets the remote refuse an answer meant for a question it no longer asks.
        metadata = answer_metadata(self._mapper.remote_question_id)
        self._mapper.resume()
        await self._send(parts or [Part(text="")], emit, "sending the answer", metadata)

    async def cancel(self) -> bool:
        if self.task_id is None:
            if not self._message_sent:
                return True  # nothing sent: nothing to cancel
            # Sent, but cancelled before the remote named its task: it may be running there
            # (found by the soak). Look it up by the message id we chose; not found (the
            # message never arrived, the remote cannot list or keeps no history): not
            # confirmed, and the result says cancel_pending rather than pretending.
            if not await self._find_task():
                return False
        assert self.task_id is not None
        metadata = {**self._metadata(), "reason": "cancelled by the delegating run"}
        return await self._target._cancel_task(
            self.task_id, metadata, self._context(), self.context_id
        )

    async def _find_task(self) -> bool:
        """Learn the id of the task our last new-task message created, with ListTasks
        (bounded: `FIND_ATTEMPTS` x `FIND_PAGES` calls). True if found."""
        message_id = self._new_task_message_id
        target = self._target
        if message_id is None or not target.can_list_tasks:
            return False
        client = target._client(False, control=True)
        delay = FIND_BACKOFF
        for attempt in range(FIND_ATTEMPTS):
            if attempt:
                await trio.sleep(delay)
                delay *= 2
            token = ""
            for _ in range(FIND_PAGES):
                request = ListTasksRequest(
                    tenant=target.config.tenant or "",
                    context_id=self.context_id or "",
                    page_size=FIND_PAGE_SIZE,
                    page_token=token,
                )
                try:
                    async with closing_abandoned_generators():
                        note_remote_method("a2a", "ListTasks")
                        page = await client.list_tasks(request, context=self._context())
                except (UnsupportedOperationError, MethodNotFoundError):
                    target.can_list_tasks = False
                    return False
                except (A2AError, httpx.HTTPError, FrameTooLargeError, *_UNREADABLE):
                    return False
                for task in page.tasks:
                    if task.id and any(m.message_id == message_id for m in task.history):
                        self._learn(task.id, task.context_id)
                        return True
                token = page.next_page_token
                if not token:
                    break
        return False

    async def aclose(self) -> None:
        return None
