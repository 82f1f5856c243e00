"""Remote AG-UI agents as delegation targets: a `RunAgentInput` POSTed, its SSE stream read.

This module owns the I/O of one AG-UI agent endpoint: an httpx client whose credential goes only
to the endpoint's origin (and explicitly trusted origins), and one `TargetSession` per delegation
that POSTs a `RunAgentInput` (the objective and context as the user message, a thread id per the
engine's context policy, the parent run as `parentRunId`, identity headers when configured),
streams the response body into `adapters.agui._remote.AguiRemoteMapper` (sans-IO) and emits its
updates, answers an interrupt with the remote's resume run (`RunAgentInput.resume` covering every
interrupt, same thread), and cancels by closing the stream and, when the host configured one,
POSTing the agent's stop endpoint. It only moves bytes; what they mean is the mapper's business.

A stop is sent only while a remote run may still be running (`remote_may_run`): from the moment a
`RunAgentInput` goes out until the remote refused it (an error answer, or no connection: no
stream, no run) or its stream reached the run's end (RUN_FINISHED, RUN_ERROR, an interrupt). A
run the engine left itself (a malformed or oversized frame, `output_too_large`, a timeout, a
cancel) or whose stream ended or dropped without a terminal may still be running: that one is
stopped. A cancel with nothing to stop is confirmed at once, as the A2A target confirms a task
that already ended: the remote holds no running run for this delegation. A run of a process that
died is stopped from the ids its journal kept (`AguiTarget.cancel_remote`: the remote's run id
and thread id), through the same stop endpoint.

For the engine an AG-UI agent is just another target: `delegate_to_agent` cannot tell it from an
A2A agent. What AG-UI cannot do is said through `capabilities`: it has no resumption (no
resubscribe, no poll: a dropped stream is `stream_interrupted`), and without `stop_url` a remote
run cannot be cancelled beyond closing its stream (`cancel` is then unsupported, and the result
says `remote_cancel: unsupported`).

Streams are left by cancelling the enclosing Trio scope (the delegation actor does that when a
terminal or an input request arrived), never with `break`. Every error httpx raises becomes a
typed `DelegationError` whose message never carries a credential.

Nothing a remote sends is held whole: the stream is asked for and read uncompressed (a compressed
one is refused: httpx would inflate it before any bound could count it) and its raw bytes go
straight to the mapper, whose decoder bounds each frame; an error answer is read to its first
2 KiB; a stop answer's body is never read (only its status counts).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, urlsplit

import attrs
import httpx
import trio
from ag_ui.core import PROTOCOL_VERSION, Context, ResumeEntry, RunAgentInput, UserMessage

from adapters._remote_http import (
    RemotePools,
    credential_secrets,
    identity_headers,
    ref_identity_headers,
    task_text,
    valid_frame_limit,
)
from adapters.agent_protocols import AgentProtocol, AgentSettings
from adapters.agui._remote import MAX_FRAME_BYTES, AguiRemoteMapper
from engine import (
    AgentDescription,
    Answer,
    DelegationError,
    DelegationTask,
    Emit,
    ErrorCode,
    Kind,
    Redactor,
    RegistryError,
    RemoteCancel,
    RemoteTaskRef,
    TargetCapabilities,
    TargetUpdate,
    note_remote_method,
)

__all__ = ["AGENT_PROTOCOL", "AguiAgentConfig", "AguiTarget"]

#: Bytes of an error response's body read to explain a refusal.
_ERROR_BODY_BYTES: Final = 2048


def _absolute_http_url(_: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is None and attribute.name == "stop_url":
        return
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise RegistryError(f"{attribute.name} must be an absolute http(s) URL, got {value!r}")
    if parts.username or parts.password:
        raise RegistryError(f"{attribute.name} must not carry credentials; use auth_header")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise RegistryError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class AguiAgentConfig:
    """How the host reaches one AG-UI agent. The model never sees any of this.

    `url` is the endpoint a `RunAgentInput` is POSTed to (the response is the run's SSE
    stream). `stop_url`, if the agent has one, is POSTed `{"threadId", "runId"}` to stop a run;
    `{thread_id}` and `{run_id}` in it are replaced by the (URL-quoted) ids. `auth_header` is a
    (name, value) pair resolved by the host (e.g. from an environment variable); it is sent only
    to `url`'s origin and to `trusted_origins`. `forward_headers` go with every request;
    `forward_identity` adds who is asking, as for A2A agents (`x-user-id`, `x-tenant`,
    `x-source`, `x-parent-run-id`, `x-parent-tool-call-id`, `x-delegation-id`).
    """

    url: str = attrs.field(validator=_absolute_http_url)
    stop_url: str | None = attrs.field(default=None, validator=_absolute_http_url)
    tenant: str | None = None
    auth_header: tuple[str, str] | None = attrs.field(default=None, repr=False)
    trusted_origins: tuple[str, ...] = ()
    forward_headers: Mapping[str, str] = attrs.field(factory=dict)
    forward_identity: bool = False
    request_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Longest SSE frame accepted from the remote, in bytes (`malformed_remote_payload` beyond,
    #: refused while it is read).
    max_frame_bytes: int = attrs.field(default=MAX_FRAME_BYTES, validator=valid_frame_limit)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Credential values to redact everywhere (`AgentSpec.all_secrets` picks them up)."""
        return credential_secrets(self.auth_header)


class AguiTarget:
    """One host-registered AG-UI agent endpoint (`AgentSpec(protocol="agui", target=...)`).
    An endpoint has no card: nothing to fetch before a run, nothing it says of itself.
    `aclose()` closes its HTTP pools (not a caller-given `http`); `prepare()` opens them anew."""

    #: AG-UI has no self-description (no card): the host's words are all a listing shows.
    description: AgentDescription | None = None

    def __init__(self, config: AguiAgentConfig, *, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._redactor = Redactor(config.secrets)
        self._pools = RemotePools(
            config.url,
            trusted_origins=config.trusted_origins,
            auth_header=config.auth_header,
            forward_headers=config.forward_headers,
            request_timeout=config.request_timeout,
            http=http,
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credential values this target sends (the engine redacts them everywhere)."""
        return self.config.secrets

    @property
    def capabilities(self) -> TargetCapabilities:
        return TargetCapabilities(
            streaming=True,
            resubscribe=False,
            poll=False,
            cancel=self.config.stop_url is not None,
            input=True,
        )

    async def prepare(self) -> None:
        """Nothing to fetch; reopens the pools if a previous engine closed them."""
        self._pools.reopen()

    def open_session(self, task: DelegationTask, nursery: trio.Nursery) -> _AguiSession:
        return _AguiSession(self, task)

    async def aclose(self) -> None:
        """Close the pools; idempotent. Called once every session ended."""
        await self._pools.aclose()

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        """Stop the remote run `ref` names with no session: POST the stop endpoint, as a
        session's `cancel` does, with the ids the journal kept. What an AG-UI delegation
        journals as `remote_task_id` is the run id the remote's first RUN_STARTED gave, and as
        `remote_context_id` the remote's thread id. A resume run (after an answered interrupt)
        has a run id of its own that is not kept there: its stop names the first run and the
        thread, which stops it only at an endpoint that stops by thread.

        Returns `not_needed` without a run id; `unsupported` without a `stop_url` (AG-UI itself
        has no way to stop a run); `confirmed` once the stop endpoint answered 2xx; `pending`
        when it refused, could not be reached, did not answer within the config's
        `request_timeout`, or needs a thread id (`{thread_id}` in `stop_url`) the journal did
        not keep. Never raises for what the remote does; bounded by the caller too."""
        run_id = ref.remote_task_id
        if not run_id:
            return RemoteCancel.NOT_NEEDED
        if self.config.stop_url is None:
            return RemoteCancel.UNSUPPORTED
        self._pools.reopen()
        headers = {}
        if self.config.forward_identity:
            headers = ref_identity_headers(ref, self.config.tenant)
        fields = {"delegationId": ref.delegation_id, "reason": "the delegating process ended"}
        stopped = False
        with trio.move_on_after(self.config.request_timeout):
            stopped = await self._stop(run_id, ref.remote_context_id, fields, headers)
        return RemoteCancel.CONFIRMED if stopped else RemoteCancel.PENDING

    async def _stop(
        self,
        run_id: str,
        thread_id: str | None,
        fields: Mapping[str, Any],
        headers: Mapping[str, str],
    ) -> bool:
        """POST `stop_url` (its `{thread_id}` and `{run_id}` filled in, URL-quoted) the body
        `{"threadId", "runId", **fields}`; True once the remote answered 2xx. False when it
        refused or could not be reached, and, without asking, when `stop_url` needs a thread id
        and none is known."""
        stop_url = self.config.stop_url
        if stop_url is None or (thread_id is None and "{thread_id}" in stop_url):
            return False
        url = stop_url.replace("{thread_id}", quote(thread_id or "", safe="")).replace(
            "{run_id}", quote(run_id, safe="")
        )
        body = {**({"threadId": thread_id} if thread_id is not None else {}), "runId": run_id}
        try:
            # Only the status counts: the answer's body is never read (a remote could make it
            # any size); leaving the block closes the response unread.
            note_remote_method("agui", "stop")
            async with self._pools.control.stream(
                "POST", url, json={**body, **fields}, headers=dict(headers)
            ) as response:
                return 200 <= response.status_code < 300
        except httpx.HTTPError:
            return False

    def _error(self, code: str, doing: str, detail: str) -> DelegationError:
        detail = self._redactor.text(detail)[:300]
        return DelegationError(
            code=code, message=f"AG-UI agent error while {doing}: {detail}", remote_status=None
        )


def _configure(agent: AgentSettings) -> AguiAgentConfig:
    limits: dict[str, Any] = {}
    if agent.max_frame_bytes is not None:
        limits["max_frame_bytes"] = agent.max_frame_bytes
    return AguiAgentConfig(
        url=agent.settings["url"],
        stop_url=agent.settings.get("stop_url"),
        tenant=agent.tenant,
        auth_header=agent.auth_header,
        trusted_origins=agent.trusted_origins,
        forward_identity=agent.forward_identity,
        **limits,
    )


#: AG-UI as a host's configuration file declares it: an agent is an endpoint URL, with an
#: optional stop endpoint; the most bytes one frame of its stream may hold is `max_frame_bytes`
#: ("4 MiB" by default).
AGENT_PROTOCOL: Final = AgentProtocol(
    name="agui",
    settings={"url": True, "stop_url": False},
    reached="an AG-UI agent is reached at `url`",
    configure=_configure,
    target=AguiTarget,
)


class _AguiSession:
    """One delegation: one remote run, plus one resume run per answered interrupt."""

    def __init__(self, target: AguiTarget, task: DelegationTask) -> None:
        self._target = target
        self._task = task
        self._mapper = AguiRemoteMapper(max_frame_bytes=target.config.max_frame_bytes)
        #: The thread the remote runs in: the engine's context (sticky policies) or a new one.
        self.thread_id = task.remote_context_id or f"thread-{uuid.uuid4().hex}"
        #: The run id of the last `RunAgentInput` sent (the remote's own is `remote_run_id`).
        self.run_id: str | None = None
        self.card_fingerprint: str | None = None  # AG-UI agents have no card
        self.agent_name: str | None = None  # nor a name of their own
        self.streaming = True
        self._user_message = UserMessage(
            id=f"msg-{uuid.uuid4().hex}", role="user", content=task_text(task)
        )
        # The conversation so far, sent again with a resume run as the official client does:
        # the user message and the remote's finished assistant messages.
        self._replies: dict[str, tuple[str, list[str]]] = {}
        self._conversation: list[dict[str, Any]] = []
        #: The last `RunAgentInput` went out and the remote did not refuse it (see
        #: `remote_may_run`, which adds whether its stream ended the run).
        self._sent = False

    @property
    def remote_run_id(self) -> str | None:
        return self._mapper.run_id

    @property
    def remote_may_run(self) -> bool:
        """Whether the last run sent may still be running at the remote (a stop is needed).

        False before anything was sent, after the remote refused the run (an error answer to
        the POST, or no connection), and once its stream ended it (RUN_FINISHED, RUN_ERROR, or
        an interrupt outcome: the resume is a new run). True otherwise, including after we left
        the stream ourselves or it ended without a terminal."""
        mapper = self._mapper
        return self._sent and mapper.terminal is None and not mapper.suspended

    # -- requests -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        # Identity only: a compressed body would be inflated by httpx before any of our bounds
        # could count it (a small gzip frame can inflate a thousandfold).
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
        config = self._target.config
        if config.forward_identity:
            headers.update(identity_headers(self._task, config.tenant))
        return headers

    def _input(self, resume: list[ResumeEntry] | None) -> dict[str, Any]:
        self.run_id = f"run-{uuid.uuid4().hex}"
        task = self._task
        messages: list[Any] = [self._user_message, *self._conversation]
        context = []
        if task.request.context:
            context.append(
                Context(description="Context from the delegating agent", value=task.request.context)
            )
        run_input = RunAgentInput(
            thread_id=self._mapper.thread_id or self.thread_id,
            run_id=self.run_id,
            parent_run_id=task.run_id,
            protocol_version=PROTOCOL_VERSION,
            messages=messages,
            tools=[],
            context=context,
            forwarded_props={
                "subagentEngine": {
                    "delegationId": task.delegation_id,
                    "parentRunId": task.run_id,
                    "agentKey": task.agent_key,
                }
            },
            resume=resume,
        )
        body: dict[str, Any] = run_input.model_dump(mode="json", by_alias=True)
        return body

    async def _run(self, body: dict[str, Any], emit: Emit, doing: str) -> None:
        target = self._target
        # From here the remote may hold a run, even if we are cancelled before its answer.
        self._sent = True
        note_remote_method("agui", "RunAgent")
        try:
            async with target._pools.streams.stream(
                "POST", target.config.url, json=body, headers=self._headers()
            ) as response:
                await self._check_response(response, doing)
                # Left by cancellation, never by `break` or an exception in the loop body: the
                # Cancelled unwinds httpx's nested generators from the inside (a `break` would
                # leave them for the garbage collector to close).
                with trio.CancelScope() as reading:
                    # Raw bytes as they arrive (`_check_response` refused a compressed body):
                    # the mapper's decoder bounds every frame by bytes, so nothing here holds
                    # more than one network read.
                    async for chunk in response.aiter_raw():
                        if self._mapper.error is not None:
                            continue  # buffered bytes, read while the cancel lands
                        await self._emit(self._mapper.feed(chunk), emit)
                        if self._mapper.error is not None:
                            reading.cancel()
                if self._mapper.error is not None:
                    raise self._mapper.error
                await self._emit(self._mapper.end(), emit)
                if self._mapper.error is not None:
                    raise self._mapper.error
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                self._sent = False  # no connection: the request never reached the remote
            started = self._mapper.run_id is not None and not self._mapper.done
            code = ErrorCode.STREAM_INTERRUPTED if started else ErrorCode.AGENT_UNAVAILABLE
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise target._error(code, doing, detail) from None

    async def _check_response(self, response: httpx.Response, doing: str) -> None:
        status = response.status_code
        if status >= 400:
            self._sent = False  # refused: no stream, no run to stop
            body = b""
            if _encoding(response) == "identity":  # a compressed explanation is not shown
                # Bounded in size and time; left by cancellation like the stream (no `break`).
                with trio.move_on_after(self._target.config.request_timeout) as reading:
                    async for chunk in response.aiter_raw():
                        body += chunk[: _ERROR_BODY_BYTES - len(body)]
                        if len(body) >= _ERROR_BODY_BYTES:
                            reading.cancel()
            text = body.decode("utf-8", "replace").strip()
            detail = f"HTTP {status}" + (f": {text}" if text else "")
            if status in (401, 403):
                code, detail = ErrorCode.REMOTE_REJECTED, f"authentication refused ({detail})"
            elif status in (400, 405, 409, 413, 415, 422):
                code = ErrorCode.REMOTE_REJECTED
            else:
                code = ErrorCode.AGENT_UNAVAILABLE
            raise self._target._error(code, doing, detail)
        if status != 200:
            raise self._target._error(ErrorCode.MALFORMED_REMOTE_PAYLOAD, doing, f"HTTP {status}")
        media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "text/event-stream":
            raise self._target._error(
                ErrorCode.MALFORMED_REMOTE_PAYLOAD,
                doing,
                f"the response is {media or 'untyped'}, not an SSE stream (text/event-stream)",
            )
        encoding = _encoding(response)
        if encoding != "identity":
            raise self._target._error(
                ErrorCode.MALFORMED_REMOTE_PAYLOAD,
                doing,
                f"the stream is compressed ({encoding[:40]}) although only identity was "
                "accepted (its frames could not be bounded before they are inflated)",
            )

    async def _emit(self, updates: list[TargetUpdate], emit: Emit) -> None:
        for update in updates:
            self._remember(update)
            await emit(update)

    def _remember(self, update: TargetUpdate) -> None:
        """Keep the remote's assistant messages for the conversation a resume run sends."""
        message_id = update.message_id
        if message_id is None:
            return
        if update.kind == Kind.TEXT_START:
            self._replies[message_id] = (update.role or "assistant", [])
        elif update.kind == Kind.TEXT_DELTA and message_id in self._replies:
            self._replies[message_id][1].append(update.delta or "")
        elif update.kind == Kind.TEXT_END and message_id in self._replies:
            role, parts = self._replies.pop(message_id)
            if role == "assistant" and parts:
                self._conversation.append(
                    {"id": message_id, "role": "assistant", "content": "".join(parts)}
                )

    # -- the session protocol -----------------------------------------------------------------

    async def start(self, emit: Emit) -> None:
        await self._run(self._input(None), emit, "sending the task")

    async def answer(self, answer: Answer, emit: Emit) -> None:
        if not self._mapper.suspended:
            raise DelegationError(
                code=ErrorCode.INVALID_INPUT,
                message="The remote AG-UI run is not waiting for input.",
            )
        entries = _resume_entries(self._mapper.interrupts, answer)
        self._mapper.resume()
        await self._run(self._input(entries), emit, "sending the answer")

    async def resubscribe(self, emit: Emit) -> None:
        raise DelegationError(
            code=ErrorCode.STREAM_INTERRUPTED,
            message="An AG-UI run cannot be resubscribed to (the protocol has no resumption).",
        )

    async def poll(self, emit: Emit) -> None:
        raise DelegationError(
            code=ErrorCode.STREAM_INTERRUPTED,
            message="An AG-UI run cannot be polled (the protocol has no run status endpoint).",
        )

    async def cancel(self) -> bool:
        """POST the stop endpoint while the remote run may still be running; True once the
        remote answered 2xx, or at once when there is nothing to stop (nothing sent, the run
        refused, or it already ended: `remote_may_run`). The stream itself is closed by the
        actor cancelling the scope that read it."""
        if not self.remote_may_run:
            return True  # nothing running there: nothing to stop
        if self._target.config.stop_url is None or self.run_id is None:
            return False
        fields = {
            "requestedRunId": self.run_id,
            "delegationId": self._task.delegation_id,
            "reason": "cancelled by the delegating run",
        }
        return await self._target._stop(
            self._mapper.run_id or self.run_id,
            self._mapper.thread_id or self.thread_id,
            fields,
            self._headers(),
        )

    async def aclose(self) -> None:
        return None


def _encoding(response: httpx.Response) -> str:
    """The response's content coding, lower-cased; `identity` when it names none."""
    coding = response.headers.get("content-encoding", "").strip().lower()
    return coding or "identity"


def _resume_entries(interrupts: list[dict[str, Any]], answer: Answer) -> list[ResumeEntry]:
    """One resolved entry per interrupt. `answer.data` keyed by every interrupt id answers each
    on its own; otherwise the whole answer (`data`, else `text`) answers every interrupt."""
    ids = [str(interrupt["id"]) for interrupt in interrupts]
    data = answer.data
    per_interrupt = isinstance(data, Mapping) and bool(ids) and all(i in data for i in ids)
    entries = []
    for interrupt_id in ids:
        if per_interrupt:
            assert data is not None
            payload: Any = data[interrupt_id]
        elif data is not None:
            payload = dict(data)
        else:
            payload = answer.text
        entries.append(ResumeEntry(interrupt_id=interrupt_id, status="resolved", payload=payload))
    return entries
