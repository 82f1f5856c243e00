"""The run-scoped MCP endpoint: `delegate_to_agent` over Streamable HTTP, one path per run.

This module owns the I/O side of the MCP tool: one listener on 127.0.0.1, served by the hardened
listener (`adapters.listener`: Hypercorn's Trio worker, each connection's failure kept to
itself, behind the request guard, which refuses web pages, rebinding host names and
WebSockets), with the official `mcp` server (a stateful `StreamableHTTPSessionManager` over a
low-level `Server`), and the actor work of one tool call: start the delegation in the caller's
run, report MCP progress while it is blocked, return the structured result.

One listener, many runs. Every run gets its own path (`/runs/<run id>/mcp`) and its own fresh
256-bit bearer token, checked in constant time on every request; the token, not anything the
model says, tells the tool which run it serves. A listener per run was the alternative: it would
cost a port, a socket and a server task per run and race other processes for ports; one listener
holds hundreds of runs with one socket, and a run's path and token are revoked the moment it
ends (later requests get 401). Sessions are bound to the run whose token opened them (the
session manager refuses a session id presented with another run's token as unknown).

Cancellation reaches the delegation (and so its remote task) four ways: `notifications/cancelled`
and a session DELETE cancel the tool handler inside the SDK; a dropped connection does not (the
legacy transport keeps the handler running), so the request wrapper here cancels every call
whose POST ended before its result was written; and the tool timeout of the parent CLI arrives
as `notifications/cancelled`. A run that ends cancels its delegations, whose calls then return
their (cancelled) results.

A session can end while one of its requests is being handled: a client that cancels a call and
deletes its session at once (the Codex CLI on SIGINT) is ordinary client behaviour, not a server
error. The SDK's streams then raise `ClosedResourceError`/`BrokenResourceError` into the request;
the request wrapper answers 404 `session_ended` (the MCP spec's answer for a terminated session)
if the response has not started, and otherwise ends it quietly (an SSE stream the teardown cut
short is closed properly); the SDK's error reports of that teardown become one debug line of
this module's logger (`_TeardownLogFilter`).

Reading what did not fit. A delegation's result is lean (`adapters.mcp._tools.render_result`);
the rest of its output is read with the `read_delegation_output` tool or `resources/read` of its
output URI (`subagent://runs/<run id>/delegations/<delegation id>/output?offset=N`). Both look the
delegation up in the caller's own run (the run the token names), so another run's delegations
are as unknown as made-up ids, and return at most the agent's `max_result_chars` per read.

Progress: while a call is blocked, its own delegation's events (not other delegations of the
run) are summarised into `notifications/progress`, at most one per `progress_interval` and at
least one per `heartbeat_interval` even when the remote is silent, so parent CLIs that watch for
idle calls do not time out. Everything else of the delegation's live stream goes to the run
journal (which the UI watches) and never to the parent model.

Asking the requester. A host that can reach whoever sent a run its task gives the endpoint a
`Requester` (`subagent-engine a2a-serve`: the A2A client, through the task's input-required
state); every run of that endpoint then also lists `ask_requester`. A call blocks in
`Requester.ask` until the answer (the tool's result) or a `RequesterError` (an error result the
model reads: no answer in time, nobody to ask), sending the same progress heartbeats as a
delegation so the parent CLI does not give up on a long wait. Without a requester the tool is
neither listed nor callable.

Questions through MCP elicitation. When a delegation's agent has `elicitation = "ask"` (and
waits for answers: `input_required = "surface"`), each question the delegation asks is put to
the parent's user through the MCP client (`adapters.mcp._elicitation` says how: a form, or URL
mode for a sign-in so that credentials never pass through the client's model). Session-based
protocol versions get `elicitation/create` on the call's own stream while the call blocks; a
question closed elsewhere first (the page, AG-UI, HTTP, expiry) cancels it. The stateless
2026-07-28 version cannot send a request to the client: the call ends with an
`InputRequiredResult` carrying the elicitation and a `requestState` (sealed, expiring, bound to
the call and to the run's token) while the delegation keeps waiting; the client's retry with
its answer resumes the same delegation. The answer goes to `Run.answer` (surface
`mcp_elicitation`, answered by the client's name); a decline, a client without elicitation or
a failed elicitation goes to the agent's `on_elicitation_declined` (fail the delegation, end it
`input_required` for the parent model, or wait for another surface); an answer that does not
match the question's schema is asked again, at most `MAX_ASKS` times in all.

Traces. When the engine traces, each `tools/call` (both protocol generations, a 2026-07-28
retry included) is a server span of the run (`Run.traced`, named `tools/call <tool>` with the
attributes of https://opentelemetry.io/docs/specs/semconv/gen-ai/mcp/), around the whole call,
so the delegation it starts is its child. A W3C `traceparent` (and `tracestate`) in the call's
`_meta` makes the span continue the client's trace (linked to the run's); a value that is not a
string, is too long or does not parse is ignored. An error result marks the span failed.

The token never appears in a prompt, an event, a result or a log line (Hypercorn's access log is
off; refusals say why without echoing what was sent).
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Collection, MutableMapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final, Protocol

import anyio
import attrs
import mcp_types as types
import trio
from hypercorn.utils import UnexpectedMessageError
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from adapters.listener import (
    ListenerLimits,
    Refusal,
    RequestGuard,
    bearer_token,
    header_values,
    serve_listener,
)
from adapters.mcp._elicitation import (
    ELICITATION_KEY,
    MAX_ASKS,
    URL,
    ElicitationPlan,
    RoundState,
    can_elicit,
    elicit_request,
    plan_elicitation,
    read_elicited,
    read_state,
    write_state,
)
from adapters.mcp._tools import (
    ASK_TOOL,
    GENERIC_TOOL,
    OUTPUT_URI_SCHEME,
    READ_OUTPUT_TOOL,
    AgentSummary,
    OutputRead,
    list_tools,
    parent_tool_call_id,
    read_call,
    read_output_call,
    read_output_uri,
    read_question,
    render_answer,
    render_error,
    render_page,
    render_result,
    shortcut_tool_name,
)
from engine import (
    DEFAULT_MAX_RESULT_CHARS,
    AmbiguousCorrelation,
    AnswerSurface,
    Correlation,
    DelegationError,
    DelegationHandle,
    DelegationPolicy,
    DelegationResult,
    Elicitation,
    ElicitationDeclined,
    ErrorCode,
    InputRequiredMode,
    Kind,
    OutputPage,
    Question,
    Redactor,
    RegistryError,
    Run,
    RunEndpoint,
    Status,
    Target,
    delegation_output,
    output_page,
)

__all__ = ["DelegationEndpoint", "EndpointSettings", "Requester", "RequesterError"]

log = logging.getLogger(__name__)

#: Parent CLIs have been seen to give up on a tool call that is silent for about 10 s or more
#: (an idle watchdog); progress is sent at least this often.
MAX_HEARTBEAT_INTERVAL: Final = 10.0
#: Request bodies above this get HTTP 413 from the transport. It is above the tool contract's
#: 1 MiB so that an oversized `delegate_to_agent` argument gets a structured tool error.
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024
_RUN_PATH: Final = re.compile(r"^/runs/([A-Za-z0-9_.:-]{1,128})/mcp/?$")
_SCOPE_RUN: Final = "subagent_engine.run_id"
_SCOPE_CALLS: Final = "subagent_engine.calls"
#: The longest client-chosen id (JSON-RPC request id, error code) a tool call's span records.
_MAX_TRACED_ID: Final = 128
#: What a session's streams raise into a request being handled when the session is torn down
#: (DELETE, idle timeout, shutdown): anyio's (the SDK's streams) and trio's.
_TEARDOWN_ERRORS: Final = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.BrokenResourceError,
)
#: The SDK's transport, whose error reports of a teardown `_TeardownLogFilter` demotes.
_SDK_TRANSPORT_LOGGER: Final = "mcp.server.streamable_http"
#: The SDK's loggers whose lines name session ids (`_SessionIdFilter` redacts them).
_SDK_SESSION_LOGGERS: Final = (_SDK_TRANSPORT_LOGGER, "mcp.server.streamable_http_manager")
#: An MCP session id as the SDK makes them (uuid4().hex).
_SESSION_ID: Final = re.compile(r"\b[0-9a-f]{32}\b")


class _SessionIdFilter(logging.Filter):
    """Redacts session ids from the SDK's log lines: with a run's token, a session id is what
    a caller presents to use that session, and a refused attempt with another run's token must
    not print the id it tried (or the one it guessed right). Which words are session ids is
    this module's knowledge (their shape); they are redacted by the engine's one `Redactor`,
    as every secret is."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        session_ids = _SESSION_ID.findall(message)
        if session_ids:
            record.msg, record.args = Redactor(session_ids).text(message), None
        return True


class RequesterError(Exception):
    """`Requester.ask` got no answer: `code` (`no_answer`: the wait limit passed; `unavailable`:
    there is nobody to ask right now) and a `message` the parent model reads."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Requester(Protocol):
    """Whoever sent a run its task, when the host can ask them (see the module docs)."""

    async def ask(self, run: Run, question: str) -> str:
        """Put `question` to the run's requester and return the answer's text; raise
        `RequesterError` when there is none. Cancelled when the call is."""
        ...


@attrs.define
class _Exchange:
    """One HTTP request to a run's path, as the request wrapper sees it."""

    session_id: str | None
    started: bool = False  # the app has started the response
    finished: bool = False  # ... and sent all of it
    session_ended: bool = False  # the session was torn down while the request was handled


#: The exchange the current task is handling (read by `_TeardownLogFilter`).
_EXCHANGE: ContextVar[_Exchange | None] = ContextVar("subagent_engine_mcp_exchange", default=None)


def _torn_down(exc: BaseException | None) -> bool:
    """Whether `exc` is (only) what a session's teardown raises into one of its requests."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_torn_down(inner) for inner in exc.exceptions)
    if isinstance(exc, UnexpectedMessageError):
        # The SDK answers a teardown with a second response (HTTP 500) even when the first had
        # gone out (a notification's 202); Hypercorn refuses it.
        return _torn_down(exc.__context__)
    return isinstance(exc, _TEARDOWN_ERRORS)


class _TeardownLogFilter(logging.Filter):
    """Takes over the SDK's error reports (with traceback) of a session torn down while one of
    its requests was handled: marks that exchange's session as ended and drops the SDK's record,
    logging one debug line of this module instead. The line goes through this module's logger, so
    the host's logging configuration decides whether it is shown (a record demoted in place would
    have passed the SDK logger's level check as an error and reached every handler anyway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exchange = _EXCHANGE.get()
        if exchange is None or exchange.session_id is None or record.exc_info is None:
            return True
        exc = record.exc_info[1]
        if record.levelno <= logging.DEBUG or not _torn_down(exc):
            return True
        exchange.session_ended = True
        if log.isEnabledFor(logging.DEBUG):
            said, why = record.getMessage(), repr(exc)
            redactor = Redactor(_SESSION_ID.findall(f"{said} {why}"))
            log.debug(
                "%s (%s): the session ended meanwhile (%s)",
                redactor.text(said),
                record.name,
                redactor.text(why),
            )
        return False


@attrs.define
class _RunSlot:
    run: Run
    token: bytes
    path: str


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.define(kw_only=True)
class EndpointSettings:
    """How the endpoint listens and behaves; every field has a sane default."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: an ephemeral port, read back from `DelegationEndpoint.base_url`
    server_name: str = "subagents"
    #: Agent keys that also get a named tool `delegate_to_<key>`.
    shortcuts: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    #: Without a tool-call id in `_meta`: `medium` pairs calls with the parent's delegation tool
    #: calls in order; `weak` (diagnostic only) takes the one open call and refuses ambiguity.
    correlation: str = attrs.field(default=Correlation.MEDIUM)
    progress_interval: float = attrs.field(default=1.0, validator=_positive)
    heartbeat_interval: float = attrs.field(default=5.0, validator=_positive)
    session_idle_timeout: float = attrs.field(default=30 * 60.0, validator=_positive)
    max_sessions: int = attrs.field(default=10_000, validator=_positive)
    max_body_bytes: int = attrs.field(default=DEFAULT_MAX_BODY_BYTES, validator=_positive)
    #: How long listing tools may wait for an agent's card (for its description and skills).
    describe_timeout: float = attrs.field(default=2.0, validator=_positive)
    #: Pending connections the listener queues. Hypercorn's default (100) is too small for
    #: hundreds of runs whose parents call at once: the official mcp client opens a new
    #: connection for every tools/call, and a burst beyond the backlog is reset.
    backlog: int = attrs.field(default=1024, validator=_positive)
    #: For a run whose parent names tool calls its own way (`Run.parent_call_ids = "parent"`,
    #: Codex): how long a call may wait for the parent's stream to show the tool call it pairs
    #: with, before it keeps the model's id.
    parent_call_wait: float = attrs.field(default=5.0, validator=_positive)
    #: How long a 2026-07-28 client may take to answer an elicitation and retry its call with
    #: the sealed `requestState` (a later retry is refused as expired).
    request_state_ttl: float = attrs.field(default=3600.0, validator=_positive)
    #: Elicitation rounds of 2026-07-28 clients kept waiting for their retry at once; past it
    #: the oldest is forgotten (its retry is refused as stale; its question stays open).
    max_waiting_rounds: int = attrs.field(default=10_000, validator=_positive)

    @correlation.validator
    def _check_correlation(self, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in (Correlation.MEDIUM, Correlation.WEAK):
            raise ValueError(f"correlation must be 'medium' or 'weak', got {value!r}")

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_interval > MAX_HEARTBEAT_INTERVAL:
            raise ValueError(
                f"heartbeat_interval must be at most {MAX_HEARTBEAT_INTERVAL:g} s "
                "(parent CLIs time out silent calls)"
            )
        if self.host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(
                f"the MCP endpoint listens on loopback only (got host {self.host!r}): "
                "it serves the parent agents of this host"
            )


class DelegationEndpoint:
    """The MCP endpoint of an engine's runs; an `engine.RunEndpointProvider`.

    ```
    async with DelegationEndpoint().serve() as mcp:
        async with Engine(agents, endpoints=mcp) as eng, eng.open_run() as run:
            run.endpoint.url, run.endpoint.headers  # for the parent agent's MCP config
    ```
    """

    def __init__(
        self,
        settings: EndpointSettings | None = None,
        *,
        requester: Requester | None = None,
        **overrides: Any,
    ) -> None:
        """`overrides` are `EndpointSettings` fields, applied over `settings` (or defaults).
        With a `requester`, every run also gets `ask_requester`."""
        base = settings or EndpointSettings()
        self.settings = attrs.evolve(base, **overrides) if overrides else base
        self.requester = requester
        self._slots: dict[str, _RunSlot] = {}
        self._base_url: str | None = None
        self._server: Server[Any] = Server(
            "subagent-engine",
            title="subagent-engine delegation",
            instructions=(
                "delegate_to_agent hands a bounded task to a host-registered remote agent and "
                "returns its structured result when it ends."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
        )
        # The 2026-07-28 round trip: `requestState` is sealed (AES-GCM under a key of this
        # process), expires, and is bound to the tool call's name and arguments and to the run
        # whose token made the call, so a forged, altered, expired or other run's state is
        # refused before the handler runs (JSON-RPC invalid params, reason
        # `invalid_request_state`).
        self._server.middleware.append(
            RequestStateBoundary(
                RequestStateSecurity(
                    keys=[secrets.token_bytes(32)],
                    ttl=self.settings.request_state_ttl,
                    bind_principal=_run_of_request,
                ),
                default_audience=self.settings.server_name,
            )
        )
        self._manager: StreamableHTTPSessionManager | None = None
        #: Elicitation rounds of 2026-07-28 clients waiting for their retry, by ticket.
        self._rounds: dict[str, _WaitingRound] = {}
        #: Calls in flight and what became of finished ones, for tests and metrics.
        self.calls_in_flight = 0
        self.calls_cancelled_by_disconnect = 0
        self.refused_requests = 0
        #: Elicitations asked, answered through them, declined (or impossible: see the
        #: policy's `on_elicitation_declined`), withdrawn because the question closed
        #: elsewhere first, answers that did not match (asked again), and answers that came
        #: too late (the question had closed).
        self.elicitations_sent = 0
        self.elicitations_answered = 0
        self.elicitations_declined = 0
        self.elicitations_withdrawn = 0
        self.elicitation_answers_invalid = 0
        self.elicitation_answers_late = 0
        #: URL-mode elicitations the user accepted (went to the sign-in page).
        self.elicitations_consented = 0
        #: `elicitations_declined` by why (see `_declined`).
        self.elicitations_declined_by: dict[str, int] = {}
        #: 2026-07-28 retries that resumed a waiting round (`requestState` accepted).
        self.rounds_resumed = 0

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the endpoint is not serving (use `async with endpoint.serve()`)")
        return self._base_url

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[DelegationEndpoint]:
        """Listen until the block ends; every session and call still open is then cancelled."""
        settings = self.settings
        manager = StreamableHTTPSessionManager(
            self._server,
            session_idle_timeout=settings.session_idle_timeout,
            max_sessions=settings.max_sessions,
            max_request_body_size=settings.max_body_bytes,
        )
        # The parent agents reach it on loopback; no web page may (the MCP transport spec,
        # "Security Warning": servers must validate Origin against DNS rebinding).
        app = RequestGuard(self._asgi, allowed_origins=(), json_only=True, websockets=False)
        listen = functools.partial(
            serve_listener,
            app,
            host=settings.host,
            port=settings.port,
            limits=ListenerLimits(backlog=settings.backlog),
        )
        sdk_log = logging.getLogger(_SDK_TRANSPORT_LOGGER)
        teardown_filter = _TeardownLogFilter()
        sdk_log.addFilter(teardown_filter)
        session_filter = _SessionIdFilter()
        for name in _SDK_SESSION_LOGGERS:
            logging.getLogger(name).addFilter(session_filter)
        try:
            async with manager.run(), trio.open_nursery() as nursery:
                self._manager = manager
                binds = await nursery.start(listen)
                self._base_url = str(binds[0]).rstrip("/")
                try:
                    yield self
                finally:
                    self._base_url = None
                    self._manager = None
                    self._slots.clear()
                    nursery.cancel_scope.cancel()
        finally:
            sdk_log.removeFilter(teardown_filter)
            for name in _SDK_SESSION_LOGGERS:
                logging.getLogger(name).removeFilter(session_filter)

    # -- engine.RunEndpointProvider ----------------------------------------------------------

    async def open_endpoint(self, run: Run) -> RunEndpoint:
        if self._base_url is None:
            raise RuntimeError("the MCP endpoint is not serving")
        if not _RUN_PATH.match(f"/runs/{run.run_id}/mcp"):
            raise ValueError("the run id cannot be part of an endpoint path")
        token = secrets.token_urlsafe(32)
        path = f"/runs/{run.run_id}/mcp"
        self._slots[run.run_id] = _RunSlot(run=run, token=token.encode(), path=path)
        return RunEndpoint(
            url=f"{self._base_url}{path}", token=token, server_name=self.settings.server_name
        )

    async def close_endpoint(self, run_id: str) -> None:
        self._slots.pop(run_id, None)
        for ticket in [t for t, r in self._rounds.items() if r.run_id == run_id]:
            del self._rounds[ticket]

    @property
    def open_runs(self) -> int:
        return len(self._slots)

    # -- HTTP ---------------------------------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        match = _RUN_PATH.match(scope.get("path", ""))
        if match is None:
            await _json_response(send, 404, "not_found", "No such endpoint.")
            return
        slot = self._authenticate(match.group(1), scope)
        if isinstance(slot, str):
            self.refused_requests += 1
            await _json_response(
                send,
                401,
                "unauthorized",
                slot,
                headers=[(b"www-authenticate", b'Bearer realm="subagent-engine"')],
            )
            return
        manager = self._manager
        if manager is None:
            await _json_response(send, 503, "unavailable", "The endpoint is shutting down.")
            return
        run_id = slot.run.run_id
        scope[_SCOPE_RUN] = run_id
        calls: list[trio.CancelScope] = []
        scope[_SCOPE_CALLS] = calls
        # Binds each MCP session to the run whose token opened it.
        scope["user"] = AuthenticatedUser(AccessToken(token=run_id, client_id=run_id, scopes=[]))
        exchange = _Exchange(session_id=_header(scope, b"mcp-session-id"))

        async def watched_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                # Hypercorn commits the connection to a response before its first checkpoint:
                # a start cancelled there (the SDK cancels a request's response when its
                # session is torn down) would leave the request unable to get any answer.
                await trio.lowlevel.checkpoint_if_cancelled()
                exchange.started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                exchange.finished = True
            await send(message)

        reset = _EXCHANGE.set(exchange)
        try:
            await manager.handle_request(scope, receive, watched_send)
        except Exception as exc:
            # The session was torn down (a DELETE racing this request, e.g. a client that
            # cancels a call and deletes its session at once; an idle timeout; shutdown) while
            # this request was handled: the client's ordinary behaviour, answered below.
            if exchange.session_id is None or not _torn_down(exc):
                raise
            exchange.session_ended = True
            log.debug("a request ended with its session: %r", exc)
        finally:
            _EXCHANGE.reset(reset)
            # A call whose POST ended before its result was written lost its client: the
            # legacy transport would keep it running, so it is cancelled here (and with it the
            # delegation and the remote task).
            for call_scope in calls:
                self.calls_cancelled_by_disconnect += 1
                call_scope.cancel()
        if not exchange.session_ended:
            return
        if not exchange.started:
            await _json_response(
                send,
                404,
                "session_ended",
                "The MCP session ended while this request was handled; initialize a new session.",
            )
        elif not exchange.finished:
            # An SSE stream the teardown cut short: end it rather than leave it unterminated.
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _authenticate(self, run_id: str, scope: dict[str, Any]) -> _RunSlot | str:
        """The run's slot, or the reason (readable, echoing nothing) the request is refused."""
        try:
            presented = bearer_token(header_values(scope.get("headers", ()), b"authorization"))
        except Refusal as refusal:
            return refusal.message
        if presented is None:
            return (
                "This MCP endpoint needs the run's bearer token: send "
                "'Authorization: Bearer <token>' as given by the run's endpoint configuration."
            )
        slot = self._slots.get(run_id)
        expected = slot.token if slot is not None else b"\0" * 43
        # Constant-time, and as slow for an unknown run as for a wrong token.
        if not hmac.compare_digest(presented.encode(), expected) or slot is None:
            return "The bearer token is not this run's, or the run has ended."
        return slot

    # -- MCP handlers ---------------------------------------------------------------------

    def _slot_of(self, ctx: Any) -> _RunSlot | None:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        if not isinstance(scope, dict):
            return None
        slot = self._slots.get(scope.get(_SCOPE_RUN, ""))
        return slot

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        slot = self._slot_of(ctx)
        agents = await self._describe(slot.run) if slot is not None else []
        tools = list_tools(agents, self.settings.shortcuts, ask=self.requester is not None)
        return types.ListToolsResult(tools=tools)

    def _tool_label(self, name: str) -> str:
        """`name` if this endpoint can list a tool of that name for `run`, else "other": a
        model may call any name, and a metric's label must not grow with what it invents."""
        listed = {GENERIC_TOOL, READ_OUTPUT_TOOL, ASK_TOOL}
        listed.update(shortcut_tool_name(key) for key in self.settings.shortcuts)
        return name if name in listed else "other"

    async def _describe(self, run: Run) -> list[AgentSummary]:
        """Each registered agent's description and skills: the host's words first, else what
        the agent says of itself (`Target.description`, e.g. its card). Every target is
        prepared first, at most `describe_timeout` (cheap when its card is cached); one whose
        preparation fails is still listed, marked unavailable."""
        specs = list(run.registry)
        unavailable: dict[str, str] = {}

        async def prepare(key: str, target: Target) -> None:
            with trio.move_on_after(self.settings.describe_timeout):
                try:
                    await target.prepare()
                except DelegationError as error:
                    unavailable[key] = error.code  # the code only: remote text stays out
                except Exception as exc:
                    unavailable[key] = ErrorCode.AGENT_UNAVAILABLE
                    log.debug("describing agent %s: %r", key, exc)

        async with trio.open_nursery() as nursery:
            for spec in specs:
                nursery.start_soon(prepare, spec.key, spec.target)
        summaries = []
        for spec in specs:
            own = spec.target.description
            description = spec.description or (own.description if own is not None else "")
            skills = spec.skills or (own.skills if own is not None else ())
            summaries.append(
                AgentSummary(
                    key=spec.key,
                    name=spec.name,
                    description=description,
                    skills=tuple(s for s in skills if s),
                    protocol=spec.protocol,
                    unavailable=unavailable.get(spec.key, ""),
                    read_only=spec.read_only,
                )
            )
        return summaries

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        slot = self._slot_of(ctx)
        if slot is None:
            return render_error(
                DelegationError(
                    code=ErrorCode.CONFIGURATION_ERROR,
                    message="This call reached the MCP endpoint without a run: the endpoint "
                    "must be reached through a run's URL and token.",
                ),
                tool=params.name,
            )
        run = slot.run
        tool = self._tool_label(params.name)
        run.count_tool_call(tool)
        meta = params.meta if isinstance(params.meta, dict) else {}
        traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
        with run.traced(
            f"tools/call {tool}",
            kind="server",
            attributes={
                "mcp.method.name": "tools/call",
                "mcp.protocol.version": ctx.protocol_version,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": parent_tool_call_id(meta),
                "jsonrpc.request.id": _request_id(ctx.request_id),
            },
            traceparent=traceparent if isinstance(traceparent, str) else None,
            tracestate=tracestate if isinstance(tracestate, str) else None,
        ) as span:
            result = await self._handle_tool_call(ctx, run, params)
            if span.is_recording() and isinstance(result, types.CallToolResult):
                _trace_tool_result(span, result)
            return result

    async def _handle_tool_call(
        self, ctx: Any, run: Run, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.request_state is not None:
            return await self._resume_round(ctx, run, params)
        if params.name == ASK_TOOL and self.requester is not None:
            return await self._ask(ctx, run, self.requester, params.arguments)
        if params.name == READ_OUTPUT_TOOL:
            try:
                read = read_output_call(params.arguments)
                return render_page(read.delegation_id, _read_output(run, read))
            except DelegationError as error:
                return render_error(error, tool=READ_OUTPUT_TOOL)
        try:
            call = read_call(
                params.name, params.arguments, params.meta, shortcuts=self.settings.shortcuts
            )
        except DelegationError as error:
            return render_error(error, tool=params.name)
        request = call.request
        correlation = call.correlation
        model_call_id = request.parent_tool_call_id
        if model_call_id is not None and run.parent_call_ids == "parent":
            # The parent's stream names this call by its own id (Codex: item_N): the events
            # carry that id, so the page draws the subagent under the call; the model's is kept.
            paired = await run.pair_parent_tool_call(
                params.arguments, wait=self.settings.parent_call_wait
            )
            if paired is not None:
                correlation = Correlation.MEDIUM
                request = attrs.evolve(
                    request,
                    parent_tool_call_id=paired,
                    metadata={**request.metadata, "model_tool_call_id": model_call_id},
                )
        elif model_call_id is None:
            mode = self.settings.correlation
            try:
                claimed = run.claim_parent_tool_call(mode)
            except AmbiguousCorrelation as exc:
                return render_error(
                    DelegationError(code=ErrorCode.AMBIGUOUS_CORRELATION, message=str(exc)),
                    tool=params.name,
                )
            correlation = mode
            if claimed is not None:
                request = attrs.evolve(request, parent_tool_call_id=claimed)
        metadata = {**request.metadata, "correlation": correlation, "tool": params.name}
        request = attrs.evolve(request, metadata=metadata)
        policy = _asking_policy(run, request.agent)
        after = run.journal.head
        handle = run.start_delegation(request)
        if policy is not None and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._follow_rounds(ctx, run, handle, after, policy, tool=params.name)
        calls: list[trio.CancelScope] = ctx.request.scope.get(_SCOPE_CALLS, [])
        self.calls_in_flight += 1
        try:
            with trio.CancelScope() as call_scope:
                calls.append(call_scope)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._report_progress, ctx, run, handle.delegation_id, after)
                    if policy is not None:
                        nursery.start_soon(
                            self._elicit_in_session, ctx, run, handle.delegation_id, after, policy
                        )
                    result = await handle.wait()
                    nursery.cancel_scope.cancel()
            # The call is over (whatever happened): the wrapper must not count it as dropped.
            calls.remove(call_scope)
            if call_scope.cancelled_caught:
                return render_error(
                    DelegationError(
                        code=ErrorCode.CANCELLED, message="The caller's connection was dropped."
                    ),
                    tool=params.name,
                )
            # The delegation's events, terminal included, are in the journal before the parent
            # sees the result.
            await run.flush()
            return render_result(result, budget=_result_budget(run, result))
        finally:
            self.calls_in_flight -= 1

    # -- questions through MCP elicitation ----------------------------------------------------

    async def _elicit_in_session(
        self, ctx: Any, run: Run, delegation_id: str, after: int, policy: DelegationPolicy
    ) -> None:
        """Session-based protocol versions: put each question the delegation asks to the
        parent's user with `elicitation/create` on the call's own stream, until the delegation
        ends (this task is then cancelled). A question that closes elsewhere first (another
        surface answered it, it expired) has its pending elicitation cancelled, which sends the
        client `notifications/cancelled`; a URL-mode elicitation the user accepted is followed
        by `notifications/elicitation/complete` once its question closes."""
        asking: dict[str, _Asking] = {}
        subscription = run.events(after)
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        batch = await subscription.receive_batch()
                    except trio.EndOfChannel:
                        return
                    for entry in batch:
                        event = entry.event
                        question = event.question
                        if event.delegation_id != delegation_id or question is None:
                            continue
                        if event.kind == Kind.INPUT_REQUIRED and _still_open(run, question):
                            pending = asking[question.id] = _Asking()
                            nursery.start_soon(
                                self._ask_in_session, ctx, run, question, policy, pending
                            )
                        elif event.kind == Kind.INPUT_CLOSED:
                            closing = asking.pop(question.id, None)
                            if closing is None:
                                continue
                            closing.scope.cancel()
                            if closing.url_accepted:
                                await self._say_url_complete(ctx, question)
        finally:
            subscription.close()

    async def _ask_in_session(
        self, ctx: Any, run: Run, question: Question, policy: DelegationPolicy, asking: _Asking
    ) -> None:
        client = _client_name(ctx)
        with asking.scope:
            if asking.scope.cancel_called or not _still_open(run, question):
                return  # it closed before this task started: nothing to ask
            plan = plan_elicitation(question)
            if plan is None or not can_elicit(ctx.session.client_capabilities, plan.mode):
                self._declined(run, question, policy, client, "unsupported")
                return
            for _ in range(MAX_ASKS):
                self.elicitations_sent += 1
                try:
                    if plan.mode == URL:
                        assert plan.url is not None
                        reply = await ctx.session.elicit_url(
                            plan.message, plan.url, question.id, related_request_id=ctx.request_id
                        )
                    else:
                        assert plan.schema is not None
                        reply = await ctx.session.elicit_form(
                            plan.message, plan.schema, related_request_id=ctx.request_id
                        )
                except Exception as exc:
                    # Whatever the client or its transport did (an error reply, a malformed
                    # result, a torn-down stream), the call itself goes on: the policy decides.
                    log.debug("elicitation of %s failed: %r", question.id, exc)
                    self._declined(run, question, policy, client, "failed")
                    return
                if reply.action != "accept":
                    self._declined(run, question, policy, client, reply.action)
                    return
                if plan.mode == URL:
                    # The answer comes from the sign-in page's side (another surface, or the
                    # remote itself); the question's close is told to the client then.
                    asking.url_accepted = True
                    self.elicitations_consented += 1
                    return
                retry = self._take_answer(run, plan, reply.content, client)
                if retry is None:
                    return
                plan = plan_elicitation(question, retry_reason=retry) or plan
            self._declined(run, question, policy, client, "no_fitting_answer")
        if asking.scope.cancelled_caught:
            self.elicitations_withdrawn += 1

    async def _say_url_complete(self, ctx: Any, question: Question) -> None:
        try:
            await ctx.session.send_elicit_complete(question.id, related_request_id=ctx.request_id)
        except Exception as exc:  # a courtesy: the call goes on without it
            log.debug("elicitation/complete for %s not sent: %r", question.id, exc)

    def _take_answer(
        self, run: Run, plan: ElicitationPlan, content: Any, client: str | None
    ) -> str | None:
        """Answer the question with an accepted form. Returns why it did not fit (ask again),
        or None: answered, or the question had closed meanwhile (nothing more to do)."""
        question = plan.question
        try:
            answer = read_elicited(plan, content)
            run.answer(
                question.delegation_id,
                text=answer.text,
                data=answer.data,
                question_id=question.id,
                surface=AnswerSurface.MCP_ELICITATION,
                answered_by=client,
            )
        except DelegationError as error:
            if error.code == ErrorCode.ANSWER_INVALID:
                self.elicitation_answers_invalid += 1
                return error.message
            # question_closed (answered elsewhere, expired, withdrawn) or the delegation ended:
            # the user's answer came too late, and the call carries on.
            self.elicitation_answers_late += 1
            log.debug("an elicited answer to %s came too late: %s", question.id, error.code)
            return None
        self.elicitations_answered += 1
        return None

    def _declined(
        self,
        run: Run,
        question: Question,
        policy: DelegationPolicy,
        client: str | None,
        why: str,
    ) -> None:
        """The user declined or cancelled, the client cannot elicit, or the elicitation
        failed (`why`: `decline`, `cancel`, `unsupported`, `failed`, `no_fitting_answer`):
        the agent's `on_elicitation_declined` decides (`wait`: the question stays open for the
        other surfaces)."""
        self.elicitations_declined += 1
        self.elicitations_declined_by[why] = self.elicitations_declined_by.get(why, 0) + 1
        log.debug("elicitation of %s by %s ended without an answer: %s", question.id, client, why)
        then = policy.on_elicitation_declined
        if then == ElicitationDeclined.WAIT:
            return
        try:
            run.decline(
                question.delegation_id,
                question_id=question.id,
                then=then,
                surface=AnswerSurface.MCP_ELICITATION,
                answered_by=client,
            )
        except DelegationError as error:  # it closed meanwhile: nothing to decline
            log.debug("declining %s: %s", question.id, error.code)

    async def _follow_rounds(
        self,
        ctx: Any,
        run: Run,
        handle: DelegationHandle,
        after: int,
        policy: DelegationPolicy,
        *,
        tool: str,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The stateless protocol version (2026-07-28): wait for the delegation's result, or
        for a question to put to the user, which ends this call with an `InputRequiredResult`
        (its elicitation and the sealed round state) while the delegation keeps waiting for
        the answer; the client's retry resumes here (`_resume_round`). A call cancelled while
        it waits (the client closed the response stream) cancels the delegation."""
        calls: list[trio.CancelScope] = ctx.request.scope.get(_SCOPE_CALLS, [])
        self.calls_in_flight += 1
        stop: _Stop | None = None
        try:
            with trio.CancelScope() as call_scope:
                calls.append(call_scope)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            self._report_progress, ctx, run, handle.delegation_id, after
                        )
                        stop = await self._next_stop(ctx, run, handle.delegation_id, after, policy)
                        nursery.cancel_scope.cancel()
                except trio.Cancelled:
                    handle.cancel("The caller waiting for this delegation was cancelled.")
                    raise
            calls.remove(call_scope)
            if call_scope.cancelled_caught:
                return render_error(
                    DelegationError(
                        code=ErrorCode.CANCELLED, message="The caller's connection was dropped."
                    ),
                    tool=tool,
                )
            if stop is not None:
                return self._wait_for_retry(run, handle, stop, policy, tool=tool, asks=1)
            result = await handle.wait()
            await run.flush()
            return render_result(result, budget=_result_budget(run, result))
        finally:
            self.calls_in_flight -= 1

    async def _next_stop(
        self, ctx: Any, run: Run, delegation_id: str, after: int, policy: DelegationPolicy
    ) -> _Stop | None:
        """The next question of the delegation to put to the user (None: it ended). Questions
        the client cannot be asked go to the agent's `on_elicitation_declined` at once."""
        client = _client_name(ctx)
        subscription = run.events(after)
        try:
            while True:
                try:
                    batch = await subscription.receive_batch()
                except trio.EndOfChannel:
                    return None
                for entry in batch:
                    event = entry.event
                    if event.delegation_id != delegation_id:
                        continue
                    if event.kind in Kind.DELEGATION_TERMINALS:
                        return None
                    question = event.question
                    if (
                        event.kind != Kind.INPUT_REQUIRED
                        or question is None
                        or not _still_open(run, question)
                    ):
                        continue
                    plan = plan_elicitation(question)
                    if plan is None or not can_elicit(ctx.session.client_capabilities, plan.mode):
                        self._declined(run, question, policy, client, "unsupported")
                        continue
                    return _Stop(plan=plan, cursor=entry.cursor)
        finally:
            subscription.close()

    def _wait_for_retry(
        self,
        run: Run,
        handle: DelegationHandle,
        stop: _Stop,
        policy: DelegationPolicy,
        *,
        tool: str,
        asks: int,
    ) -> types.InputRequiredResult:
        """End this call with the question's elicitation; the round waits for the retry."""
        for ticket in [t for t, r in self._rounds.items() if r.handle.finished]:
            del self._rounds[ticket]
        while len(self._rounds) >= self.settings.max_waiting_rounds:
            del self._rounds[next(iter(self._rounds))]
        ticket = secrets.token_urlsafe(16)
        self._rounds[ticket] = _WaitingRound(
            run_id=run.run_id, handle=handle, stop=stop, policy=policy, tool=tool, asks=asks
        )
        self.elicitations_sent += 1
        question = stop.plan.question
        state = RoundState(
            run_id=run.run_id,
            delegation_id=question.delegation_id,
            question_id=question.id,
            ticket=ticket,
        )
        return types.InputRequiredResult(
            input_requests={ELICITATION_KEY: elicit_request(stop.plan)},
            request_state=write_state(state),
        )

    async def _resume_round(
        self, ctx: Any, run: Run, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A 2026-07-28 client's retry with its answer (`inputResponses`) and the round's state
        (already unsealed and checked by the `RequestStateBoundary`). A state this endpoint is
        not waiting on (used once already, forgotten, another run's) is refused as stale:
        JSON-RPC invalid params with `data.reason` `stale_request_state`."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(
                INVALID_PARAMS,
                "requestState belongs to the 2026-07-28 multi-round-trip calls only.",
                {"code": ErrorCode.INVALID_INPUT, "reason": "invalid_request_state"},
            )
        try:
            state = read_state(params.request_state)
        except DelegationError as error:
            raise MCPError(
                INVALID_PARAMS,
                error.message,
                {"code": error.code, "reason": "invalid_request_state"},
            ) from None
        waiting = self._rounds.get(state.ticket)
        question = waiting.stop.plan.question if waiting is not None else None
        if (
            waiting is None
            or question is None
            or waiting.run_id != run.run_id
            or state.run_id != run.run_id
            or question.id != state.question_id
            or question.delegation_id != state.delegation_id
            or waiting.tool != params.name
        ):
            raise MCPError(
                INVALID_PARAMS,
                "This requestState names no question waiting here (it was answered with "
                "already, or is from before the endpoint restarted): call the tool anew.",
                {"code": ErrorCode.INVALID_INPUT, "reason": "stale_request_state"},
            )
        del self._rounds[state.ticket]
        self.rounds_resumed += 1
        client = _client_name(ctx)
        plan, policy = waiting.stop.plan, waiting.policy
        reply = (params.input_responses or {}).get(ELICITATION_KEY)
        if not isinstance(reply, types.ElicitResult) or reply.action != "accept":
            self._declined(run, question, policy, client, _reply_action(reply))
        elif plan.mode == URL:
            self.elicitations_consented += 1
        else:
            retry = self._take_answer(run, plan, reply.content, client)
            if retry is not None:
                again = plan_elicitation(question, retry_reason=retry)
                if waiting.asks < MAX_ASKS and again is not None and _still_open(run, question):
                    return self._wait_for_retry(
                        run,
                        waiting.handle,
                        _Stop(plan=again, cursor=waiting.stop.cursor),
                        policy,
                        tool=waiting.tool,
                        asks=waiting.asks + 1,
                    )
                self._declined(run, question, policy, client, "no_fitting_answer")
        return await self._follow_rounds(
            ctx, run, waiting.handle, waiting.stop.cursor, policy, tool=waiting.tool
        )

    async def _list_resource_templates(
        self, ctx: Any, params: Any
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="delegation-output",
                    uri_template=(
                        f"{OUTPUT_URI_SCHEME}://runs/{{run_id}}/delegations/{{delegation_id}}"
                        "/output{?offset,limit}"
                    ),
                    description=(
                        "The whole output of one of this run's finished delegations, from "
                        "offset, at most the agent's result budget per read."
                    ),
                    mime_type="text/plain",
                )
            ]
        )

    async def _read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """A page of a delegation's output. A URI of another run, an unknown delegation or a
        bad offset is a JSON-RPC invalid-params error whose `data.code` is the engine's code."""
        slot = self._slot_of(ctx)
        if slot is None:
            raise MCPError(
                INVALID_PARAMS,
                "This request reached the MCP endpoint without a run.",
                {"code": ErrorCode.CONFIGURATION_ERROR},
            )
        try:
            page = _read_output(slot.run, read_output_uri(str(params.uri), slot.run.run_id))
        except DelegationError as error:
            data: dict[str, Any] = {"code": error.code}
            if error.metadata:
                data["field"] = error.metadata.get("field")
            raise MCPError(INVALID_PARAMS, error.message, data) from None
        meta = {"offset": page.offset, "next_offset": page.next_offset, "total_chars": page.total}
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=str(params.uri), mime_type="text/plain", text=page.text, _meta=meta
                )
            ]
        )

    async def _ask(
        self, ctx: Any, run: Run, requester: Requester, arguments: Any
    ) -> types.CallToolResult:
        """One `ask_requester` call: the requester's answer, with heartbeats while it waits."""
        try:
            question = read_question(arguments)
        except DelegationError as error:
            return render_error(error, tool=ASK_TOOL)
        calls: list[trio.CancelScope] = ctx.request.scope.get(_SCOPE_CALLS, [])
        self.calls_in_flight += 1
        result = _no_answer(RequesterError("cancelled", "The caller's connection was dropped."))
        try:
            with trio.CancelScope() as call_scope:
                calls.append(call_scope)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._heartbeat, ctx, "waiting for the requester's answer")
                    try:
                        result = render_answer(await requester.ask(run, question))
                    except RequesterError as exc:
                        result = _no_answer(exc)
                    nursery.cancel_scope.cancel()
            # The call is over (whatever happened): the wrapper must not count it as dropped.
            calls.remove(call_scope)
            return result
        finally:
            self.calls_in_flight -= 1

    async def _heartbeat(self, ctx: Any, message: str) -> None:
        """A progress notification every `heartbeat_interval` until cancelled."""
        sent = 0.0
        try:
            while True:
                await trio.sleep(self.settings.heartbeat_interval)
                sent += 1
                await ctx.session.report_progress(sent, None, message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("ask_requester heartbeats stopped: the client is gone (%r)", exc)

    async def _report_progress(self, ctx: Any, run: Run, delegation_id: str, after: int) -> None:
        settings = self.settings
        summary = _ProgressSummary()
        sent = 0.0
        last_sent = trio.current_time()
        changed = False
        subscription = run.events(after)
        live = True
        try:
            while True:
                wait = settings.progress_interval if changed else settings.heartbeat_interval
                deadline = last_sent + wait
                if live:
                    with trio.move_on_at(deadline):
                        try:
                            batch = await subscription.receive_batch()
                        except trio.EndOfChannel:
                            live = False
                            batch = []
                        for entry in batch:
                            if entry.event.delegation_id == delegation_id:
                                changed = summary.add(entry.event) or changed
                else:
                    await trio.sleep_until(deadline)
                now = trio.current_time()
                due = now - last_sent >= (
                    settings.progress_interval if changed else settings.heartbeat_interval
                )
                if due:
                    sent += 1
                    await ctx.session.report_progress(sent, None, summary.message())
                    last_sent = now
                    changed = False
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("progress for %s stopped: the client is gone (%r)", delegation_id, exc)
        finally:
            subscription.close()


@attrs.define
class _Asking:
    """One elicitation of a session-based call: cancelled when its question closes elsewhere."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    url_accepted: bool = False


@attrs.frozen
class _Stop:
    """A question to put to a 2026-07-28 client, and the journal cursor of its asking."""

    plan: ElicitationPlan
    cursor: int


@attrs.frozen(kw_only=True)
class _WaitingRound:
    """A 2026-07-28 call ended with an elicitation; its delegation waits for the retry."""

    run_id: str
    handle: DelegationHandle
    stop: _Stop
    policy: DelegationPolicy
    tool: str
    asks: int


def _asking_policy(run: Run, agent: str) -> DelegationPolicy | None:
    """The agent's policy when its questions go to the parent's user through elicitation
    (`elicitation = "ask"` on an agent whose delegations wait for answers), else None."""
    try:
        policy = run.registry.lookup(agent).policy
    except (DelegationError, RegistryError, KeyError):
        return None
    if policy.elicitation != Elicitation.ASK or policy.input_required != InputRequiredMode.SURFACE:
        return None
    return policy


def _reply_action(reply: Any) -> str:
    """What a 2026-07-28 retry said of the elicitation (`missing`: no response under its key)."""
    return reply.action if isinstance(reply, types.ElicitResult) else "missing"


def _still_open(run: Run, question: Question) -> bool:
    return any(q.id == question.id for q in run.questions())


def _client_name(ctx: Any) -> str | None:
    """The MCP client's name as it introduced itself (`clientInfo`), if it did."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name[:200] if isinstance(name, str) and name.strip() else None


def _run_of_request(ctx: Any) -> str | None:
    """The run whose token made the request: what a round's sealed state is bound to."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    run_id = scope.get(_SCOPE_RUN) if isinstance(scope, dict) else None
    return run_id if isinstance(run_id, str) else None


def _result_budget(run: Run, result: DelegationResult) -> int:
    """The result budget of the agent `result` came from (the default for one not registered)."""
    try:
        return run.registry.lookup(result.agent).policy.max_result_chars
    except (RegistryError, DelegationError, KeyError):
        return DEFAULT_MAX_RESULT_CHARS


def _read_output(run: Run, read: OutputRead) -> OutputPage:
    """A page of one of `run`'s finished delegations' output, at most its agent's budget.
    Raises `DelegationError`: `delegation_not_found` for an id that is not one of the run's
    (another run's ids included: nothing says whether they exist), `invalid_input` for a
    delegation still running or an offset past the end."""
    result = run.result(read.delegation_id)
    if result is None:
        raise DelegationError(
            code=ErrorCode.DELEGATION_NOT_FOUND,
            message=f"No delegation {read.delegation_id[:64]!r} in this run.",
            metadata={"field": "delegation_id"},
        )
    if result.status == Status.RUNNING:
        raise DelegationError(
            code=ErrorCode.INVALID_INPUT,
            message="The delegation is still running: its output is readable once it ends.",
            metadata={"field": "delegation_id"},
        )
    budget = _result_budget(run, result)
    limit = budget if read.limit is None else min(read.limit, budget)
    return output_page(delegation_output(result), read.offset, limit)


class _ProgressSummary:
    """What a progress notification says about one delegation: status and output so far."""

    def __init__(self) -> None:
        self.agent = ""
        self.status = "starting"
        self.text_chars = 0
        self.artifacts = 0
        self.tool_calls = 0

    def add(self, event: Any) -> bool:
        kind = event.kind
        if kind == Kind.STARTED:
            self.agent = event.agent_name or event.agent_key or ""
            self.status = "started"
        elif kind == Kind.STATUS and event.status:
            self.status = event.status
        elif kind in (Kind.TEXT_DELTA, Kind.REASONING_DELTA) and event.delta:
            self.text_chars += len(event.delta)
        elif kind == Kind.ARTIFACT:
            self.artifacts += 1
        elif kind == Kind.TOOL_CALL_START:
            self.tool_calls += 1
        elif kind == Kind.INPUT_REQUIRED:
            self.status = "waiting for input"
        elif kind in Kind.DELEGATION_TERMINALS:
            self.status = kind.rsplit(".", 1)[-1]
        else:
            return False
        return True

    def message(self) -> str:
        parts = [f"{self.agent or 'remote agent'}: {self.status}"]
        if self.text_chars:
            parts.append(f"{self.text_chars} chars of output")
        if self.artifacts:
            parts.append(f"{self.artifacts} artifact{'s' if self.artifacts != 1 else ''}")
        if self.tool_calls:
            parts.append(f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}")
        return ", ".join(parts)


def _request_id(request_id: Any) -> str | None:
    """A JSON-RPC request id as a span attribute (a client chooses it: bounded)."""
    if request_id is None:
        return None
    return str(request_id)[:_MAX_TRACED_ID]


def _trace_tool_result(span: trace.Span, result: types.CallToolResult) -> None:
    """Mark a tool call's span failed when its result is an error result (`isError`), with the
    engine's error code as `error.type` (https://opentelemetry.io/docs/specs/semconv/gen-ai/mcp/)."""
    if not result.is_error:
        return
    structured = result.structured_content or {}
    error = structured.get("error") if isinstance(structured, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    error_type = code[:_MAX_TRACED_ID] if isinstance(code, str) and code else "tool_error"
    span.set_attribute("error.type", error_type)
    span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))


def _no_answer(error: RequesterError) -> types.CallToolResult:
    """The error result of an `ask_requester` call that got no answer."""
    return types.CallToolResult(
        content=[types.TextContent(text=f"{ASK_TOOL}: no answer ({error.code}): {error.message}")],
        structured_content={
            "status": "failed",
            "error": {"code": error.code, "message": error.message},
        },
        is_error=True,
    )


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _json_response(
    send: Any,
    status: int,
    error: str,
    message: str,
    *,
    headers: Collection[tuple[bytes, bytes]] = (),
) -> None:
    body = json.dumps({"error": error, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
