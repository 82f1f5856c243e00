"""Serving a parent agent (scripted, Claude Code, Codex) as an A2A 1.0 agent.

This module owns the A2A server side: one parent adapter exposed with the official a2a-sdk server
as the agent a `ServedParent` describes: the agent card (streaming, skills; JSON-RPC and HTTP+JSON
on one card), streamed status and artifact updates, and `GetTask`, `CancelTask`,
`SubscribeToTask` (the SDK's request handler and in-memory task store answer those). It holds no
protocol mapping of its own: `adapters.a2a._serve_mapping.ParentTaskMapper` turns the run's events
into A2A updates. `subagent-engine a2a-serve` (`cli.a2a_serve`) builds the `ServedParent` from its
options and host configuration; this is how "Codex as a remote subagent" is served: another engine
registers the card URL as an A2A agent.

Routes: the card at `/.well-known/agent-card.json` (with `Cache-Control`, `ETag` and
`Last-Modified`: it changes only when the server restarts), JSON-RPC at `/a2a/jsonrpc`, HTTP+JSON
under `/a2a/rest` (with the SDK's tenant form `/a2a/rest/<tenant>/...`), and `/healthz` (JSON:
tasks running, parent threads alive). A path under the two A2A prefixes answers the same with a
trailing slash (a client that joins the card's URL and "/" is served, not redirected: a 307 to a
POST loses its body with many clients). The first stdout line is `READY <port>` once it listens,
the second the card's URL; logs go to stderr.

What answers the tasks is `ParentAgentExecutor` (a parent run per task), or the executor a
`ServedParent` names with `make_executor`: `subagent-engine a2a-serve --parent conformance`
serves `adapters.a2a.conformance.ConformanceExecutor` (the A2A TCK's scripted agent) through this
same server: routes, guard, card and body limits.

Who may call. It listens on 127.0.0.1 unless told otherwise. With `--token-env NAME` (at least
`MIN_HOST_TOKEN_CHARS` characters) every call but the card's and /healthz needs
`Authorization: Bearer $NAME` (read by `adapters.listener.bearer_token`, compared in constant
time) and the card says so; an address beyond loopback without one is refused at start, because
the served parent runs model-directed commands for whoever reaches it. Every request, the card's
too, first passes `adapters.listener.RequestGuard`: a `Host` that is an IP literal, `localhost`,
the card's own host or one of `[server] allowed_hosts` (a page that rebinds its DNS name to
127.0.0.1 still sends its own name), no web `Origin` but its own, no repeated single-valued
header, JSON bodies only. A body is read before the SDK sees it: at most `MAX_BODY_BYTES` (413
as soon as it passes that) and one JSON document within `parse_json_body`'s rules (400), since
the SDK reads bodies whole and answers a deeply nested one as an internal error.

Sockets. uvicorn serves it on `adapters.listener.listening_socket` (`serve_on_uvicorn`), made
with `IPPROTO_TCP` so that no response waits for the client's delayed ACK (see there).

Threads. The SDK server runs on asyncio (its server stack does not run under Trio); the engine and
the parent adapters run on Trio. Each A2A task gets its own worker thread running `trio.run`: an
`Engine` (with a per-task MCP endpoint when the parent needs one: a CLI, or the host's agents to
delegate to), one run, the parent adapter's `run(run, prompt)`, and a reader of the run's journal.
The reader hands each batch of journal events to the asyncio loop (`loop.call_soon_threadsafe`);
the task's executor maps and enqueues it, then gives the Trio thread a credit back
(`TrioToken.run_sync_soon`). At most `MAX_BATCHES_IN_FLIGHT` batches are between the two: when the
SDK is slower than the parent, the reader waits and the run journal's subscriber buffer merges text
deltas meanwhile (its volatile lane), so memory stays bounded and no text is lost. Neither loop
ever blocks on the other.

Traces. A task's run continues the trace of the request that sent the task: its W3C
`traceparent` and `tracestate` headers (https://www.w3.org/TR/trace-context/, as the SDK's call
context keeps them) are given to `Engine.open_run`, so when the task's engine traces (a2a-serve's
`[telemetry]`) the run's span is a child of the caller's client span, and the delegations the
parent makes are beneath it. A header that does not parse starts a trace of its own.

Cancellation. `CancelTask` makes the SDK call `ParentAgentExecutor.cancel()`, which asks the Trio
thread to `run.cancel()` (through `run_sync_soon`). The run cancels its body: the adapter's `run()`
is cancelled, a CLI adapter stops its CLI (SIGINT, then SIGTERM, SIGKILL after its graces) and the
run's own delegations are cancelled; the run journals `run.cancelled`, which becomes `canceled`.
`cancel()` waits up to `cancel_grace` seconds for that, so CancelTask answers with the confirmed
state; a parent that takes longer is marked `canceled` at once and keeps stopping in the background
(its thread is still tracked, and joined at shutdown). `execute()` returns only after its task's
Trio thread has ended, or when the task turns input-required (below); if the SDK cancels
`execute()` first (the server stops), it cancels the run the same way.

Shutdown (SIGTERM, SIGINT, or stdin closed with `--watch-stdin`): uvicorn stops accepting and gives
open streams a second, every run still going is cancelled and its thread joined (bounded by
`SHUTDOWN_TIMEOUT`), and the process exits 0.

Multi-turn: the served parent may ask whoever sent the task (A2A 1.0 "multi-turn": a task in
`input-required` takes a message with the same `taskId` and `contextId`). The task's MCP endpoint
offers the parent `ask_requester(question)` (`adapters.mcp`; `ParentRunThread` is its `Requester`).
A call journals the question (`QUESTION_EVENT`) and blocks; the task turns `input-required` with
the question as its status message, and the request that was streaming ends there (`execute()`
returns; the run goes on waiting on its thread, the relay of its events into the task
(`ParentAgentExecutor._relay`) keeps running between requests). A follow-up message on the task
is the answer: its text (cut to `MAX_ANSWER_CHARS`) is the tool's result, the task turns
`working` again and that request streams the run on to its terminal or its next question. One
question waits at a time, at most `ServedParent.ask_timeout` seconds (`a2a-serve --ask-timeout`,
default 600): then the tool tells the parent that no answer came, the task turns `working` again
with a note saying so (followed by `SubscribeToTask` or `GetTask`) and a late answer is refused.
CancelTask while the task waits cancels the run as at any other time. A message to a task that
is not waiting (running, ended, never ours) is refused with `UnsupportedOperationError`, one with
another task's `contextId` or with no text with `InvalidParamsError`, before it reaches the task
(`_FollowUpGate`, the request context builder), so the task is left as it was; a follow-up with
no `contextId` continues the task's own. A message with no `taskId` starts a new task.

Nested questions: the run's own delegations ask too. A delegation whose agent waits for answers
(policy `input_required = "surface"`) journals `subagent.input_required` with the engine's
`Question`; the task then turns `input-required` (`auth-required` for credentials) with the
question's text and, as a data part, who asks and how an answer must look
(`adapters.a2a._serve_mapping.question_data`: the inner question's id, delegation, agent,
`lineage`, reason, `responseSchema`; the message's metadata says kind `question`), so that an
engine delegating to this agent keeps the lineage. The follow-up message is the answer: its
text and its first data part that is a JSON object go to `Run.answer` on the task's Trio thread
(surface `a2a`, answered by the caller's name: its authenticated user, else its `x-user-id`
header, else "a2a requester"). An answer the run refuses as `answer_invalid` (not what the
schema asks for) leaves the task `input-required`, its status saying why; a taken answer, or a
question that closed another way meanwhile (answered through another surface, expired,
withdrawn: `subagent.input_closed`), takes the task back to `working` (with a note saying how
it closed, when it did not close here) and the request streams the run on. A follow-up whose
metadata names the question it answers (`{"subagentEngine": {"questionId": ...}}`, as the
engine's A2A client sends) is refused with `InvalidParamsError` when the task waits for another.

One question at a time, in order. A task has one status, so it asks one question at a time: the
first asked (nested or `ask_requester`) is surfaced; what the run journals after it, later
questions included, is held and replayed once it is settled, so the next question surfaces
then, in the order they were asked (a question that closed meanwhile is skipped). Each waits
against its own deadline meanwhile (`input_wait_timeout`, `--ask-timeout`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, MutableMapping, Sequence
from contextlib import AbstractAsyncContextManager
from email.utils import formatdate
from typing import TYPE_CHECKING, Any, Final, TextIO
from urllib.parse import urlsplit

import attrs
import trio
from a2a.server.agent_execution import (
    AgentExecutor,
    RequestContext,
    RequestContextBuilder,
    SimpleRequestContextBuilder,
)
from a2a.server.events import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    json_format,
    struct_pb2,
)

from adapters.a2a._serve_mapping import METADATA_KEY, A2AUpdate, ParentTaskMapper
from adapters.listener import (
    BODY_METHODS,
    Refusal,
    RequestGuard,
    header_values,
    is_ip_literal,
    listening_socket,
    parse_json_body,
    require_bearer,
    send_refusal,
    serve_on_uvicorn,
)
from adapters.mcp import Requester, RequesterError
from engine import (
    AnswerSurface,
    DelegationError,
    DelegationEvent,
    Engine,
    ErrorCode,
    InputRequiredMode,
    Kind,
    Question,
    QuestionOutcome,
    Run,
)

if TYPE_CHECKING:
    from adapters.parents import ParentAgent

__all__ = [
    "CARD_PATH",
    "MAX_BATCHES_IN_FLIGHT",
    "MAX_BODY_BYTES",
    "ParentAgentExecutor",
    "ParentRunThread",
    "Listening",
    "ServedExecutor",
    "ServedParent",
    "agent_card",
    "build_app",
    "serve",
]

log: Final = logging.getLogger(__name__)

#: Journal batches handed to the asyncio side and not yet mapped, per task.
MAX_BATCHES_IN_FLIGHT: Final = 2
#: The largest request body read (a task's message with its parts); larger ones get 413.
MAX_BODY_BYTES: Final = 4 << 20
#: How long stopping the server waits for the parents still running to stop.
SHUTDOWN_TIMEOUT: Final = 15.0
CARD_PATH: Final = "/.well-known/agent-card.json"
#: How long a client may keep the card without asking again (RFC 9111 section 5.2.2.1): it
#: changes only with a restart, and a client revalidates cheaply with its ETag.
CARD_CACHE_CONTROL: Final = "public, max-age=300"
JSONRPC_PATH: Final = "/a2a/jsonrpc"
REST_PATH: Final = "/a2a/rest"
CANCEL_REASON: Final = "The A2A task was cancelled (CancelTask)."
SHUTDOWN_REASON: Final = "The A2A server is shutting down."
THREAD_PREFIX: Final = "a2a-serve-task"
#: The run journal's record of a question to the requester (`ask_requester`), its answer, and
#: a wait that ended without one: the parent's custom events (`name`), the question's id as
#: `message_id`, the text as `text`.
QUESTION_EVENT: Final = "requester.question"
ANSWER_EVENT: Final = "requester.answer"
NO_ANSWER_EVENT: Final = "requester.no_answer"
#: The longest answer handed to the parent; a longer follow-up is cut (and says so).
MAX_ANSWER_CHARS: Final = 64_000
#: Closed nested questions a task remembers (so that one asked and closed while another was
#: surfaced is not surfaced later).
CLOSED_QUESTIONS_KEPT: Final = 1024
#: How long a follow-up waits for the task's Trio thread to take or refuse its answer (it does
#: at once unless the thread is gone).
ANSWER_HANDOFF_TIMEOUT: Final = 10.0
#: Who answered, when the caller names no one (`answered_by`).
ANONYMOUS_REQUESTER: Final = "a2a requester"


@attrs.frozen(kw_only=True)
class ServedParent:
    """The agent `serve` exposes: its card's words, how to make its parent and engine, and
    where it listens (`listening`)."""

    #: The card's name and description.
    name: str
    description: str
    #: What kind of parent this is ("scripted", "claude-code", "codex"): a tag of every skill
    #: and a field of `/healthz`.
    label: str
    #: A new parent adapter per task (CLI adapters keep per-run state).
    make_parent: Callable[[], ParentAgent]
    #: The task's engine, opened on the task's own Trio thread (an agent's HTTP clients belong
    #: to the loop that made them) and closed when the task ends. It gets the task's
    #: `Requester` (the A2A client, asked through input-required) for its MCP endpoint.
    open_engine: Callable[[Requester], AbstractAsyncContextManager[Engine]]
    #: (name, description) per advertised skill; none: one skill named after the agent.
    skills: tuple[tuple[str, str], ...] = ()
    #: How long CancelTask waits for the parent to stop before it answers `canceled`.
    cancel_grace: float = 4.0
    listening: Listening = attrs.field(factory=lambda: Listening())
    #: How long one `ask_requester` question waits for the follow-up message with its answer
    #: before the tool tells the parent that none came (and the task goes back to working).
    ask_timeout: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: What answers the tasks; None: a `ParentAgentExecutor` (one parent run per task, made
    #: with `make_parent` and `open_engine`). Given for the conformance agent.
    make_executor: Callable[[ServedParent], ServedExecutor] | None = None


class ServedExecutor(AgentExecutor):
    """An a2a-sdk `AgentExecutor` as the server runs it: `/healthz` reads its counts and
    shutdown closes it (returning how many threads are still alive)."""

    @property
    @abc.abstractmethod
    def tasks_running(self) -> int: ...

    @property
    @abc.abstractmethod
    def parent_threads(self) -> int: ...

    @abc.abstractmethod
    async def aclose(self, grace: float = SHUTDOWN_TIMEOUT) -> int: ...

    def request_context_builder(self) -> RequestContextBuilder | None:
        """What builds each request's context (and may refuse a message before it reaches the
        task); None: the SDK's own."""
        return None


@attrs.frozen(kw_only=True)
class Listening:
    """Where the served agent listens and who may call it."""

    host: str = "127.0.0.1"
    port: int = 0
    #: The base URL the card advertises (behind a proxy); None: http://<host>:<bound port>.
    public_url: str | None = None
    #: Stop when stdin reaches end of file (a child process whose parent went away).
    watch_stdin: bool = False
    #: With a token, every request but the card's and /healthz needs `Authorization: Bearer
    #: <token>` (the card says so); without, anyone who reaches the port may run the parent.
    token: str | None = attrs.field(default=None, repr=False)
    #: Host names requests may carry beyond IP literals, `localhost` and the card's own.
    allowed_hosts: tuple[str, ...] = ()

    def hosts_for(self, base_url: str) -> tuple[str, ...]:
        """The host names requests may carry beyond IP literals and `localhost`: the one the
        card advertises (`base_url`: the public URL, else the listening host) and
        `allowed_hosts`."""
        advertised = urlsplit(base_url).hostname
        if advertised and not is_ip_literal(advertised):
            return (*self.allowed_hosts, advertised)
        return self.allowed_hosts


# -- the card -----------------------------------------------------------------------------------


def agent_card(options: ServedParent, base_url: str) -> AgentCard:
    """The agent card: both bindings at `base_url`, streaming, the configured skills."""
    skills = options.skills or ((options.name, options.description),)
    card = AgentCard(
        name=options.name,
        description=options.description,
        version=_version(),
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url}{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0"
            ),
            AgentInterface(
                url=f"{base_url}{REST_PATH}", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=_skill_id(name, index),
                name=name,
                description=description or options.description,
                tags=[options.label, "subagent-engine"],
            )
            for index, (name, description) in enumerate(skills)
        ],
    )
    if options.listening.token is not None:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card


def _skill_id(name: str, index: int) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    return slug or f"skill-{index + 1}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("subagent-engine")
    except PackageNotFoundError:
        return "0.0.0"


# -- one task's parent run on its Trio thread ---------------------------------------------------


@attrs.frozen
class _Ended:
    """The Trio thread ended; `error` if its machinery crashed (not the parent: that fails the
    run, which is an ordinary outcome)."""

    error: str | None = None


_Item = list[DelegationEvent] | _Ended


class ParentRunThread:
    """One A2A task's parent run, on its own Trio loop in a worker thread.

    Created and driven from the asyncio loop: `start()`, `receive()` (the next batch of the run's
    events, or `_Ended` last), `ack()` after each batch, `cancel(reason)`, `release()` once the
    asyncio side stops reading. `ended` is set (on the asyncio loop) when the thread is gone.
    Every call into the Trio thread is `TrioToken.run_sync_soon`: it never blocks the asyncio
    loop; calls made before the Trio loop runs are replayed when it starts.

    It is also the run's `Requester`: `ask(run, question)` (Trio side, from the MCP endpoint's
    `ask_requester`) journals the question (`QUESTION_EVENT`) and waits, at most `ask_timeout`
    seconds, for `answer(question_id, text)` (asyncio side, from the follow-up message). One
    question is open at a time (`open_question`); a later one waits for it to be settled.

    The questions of the run's own delegations are the engine's: `waits_for(question_id)` says
    whether the run waits for an answer to one (its agent's policy surfaces questions; noted
    before the batch that asks it is handed over, forgotten when it closes), and
    `answer_question(...)` gives the answer to `Run.answer` on the Trio thread, its outcome (the
    closed question, or the run's refusal) coming back as an asyncio future.
    """

    def __init__(
        self,
        *,
        name: str,
        options: ServedParent,
        parent: ParentAgent,
        prompt: str,
        metadata: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        ask_timeout: float = 600.0,
        trace_context: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self.name = name
        self._trace_context = trace_context
        self.ask_timeout = ask_timeout
        self._options = options
        self._parent = parent
        self._prompt = prompt
        self._metadata = metadata
        self._loop = loop
        self._inbox: asyncio.Queue[_Item] = asyncio.Queue()
        self.ended = asyncio.Event()
        self._lock = threading.Lock()
        self._token: trio.lowlevel.TrioToken | None = None
        self._early: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        # Trio side only (touched from the Trio thread alone):
        self._run: Run | None = None
        self._cancel_reason: str | None = None
        self._in_flight = 0
        self._unlimited = False
        self._credit: trio.Event | None = None
        self._questions = 0
        self._ask_lock: trio.Lock | None = None
        self._answer: tuple[str, trio.Event, list[str]] | None = None
        self._ask_scope: trio.CancelScope | None = None
        # Shared (under `_lock`): the id of the question waiting for its answer, and the open
        # questions of the run's delegations that wait for answers.
        self._open_question: str | None = None
        self._asked: dict[str, Question] = {}

    # -- asyncio side ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def receive(self) -> _Item:
        return await self._inbox.get()

    async def join(self) -> None:
        """Return once the thread is gone (`ended`, then the thread's last instructions)."""
        await self.ended.wait()
        await asyncio.to_thread(self._thread.join, 5.0)  # bounded: never hang a pool thread

    def ack(self) -> None:
        """One batch was mapped and enqueued: the reader may send another."""
        self._call_in_trio(self._ack_in_trio)

    def cancel(self, reason: str) -> None:
        """Cancel the run (and so stop the parent); idempotent, first reason wins."""
        self._call_in_trio(self._cancel_in_trio, reason)

    @property
    def open_question(self) -> str | None:
        """The id of the question waiting for an answer, if one is."""
        with self._lock:
            return self._open_question

    def answer(self, question_id: str, text: str) -> bool:
        """Answer the open question `question_id`; False if it is no longer open (its wait
        ended first)."""
        with self._lock:
            if self._open_question != question_id:
                return False
            self._open_question = None
        self._call_in_trio(self._answer_in_trio, question_id, text)
        return True

    def waits_for(self, question_id: str) -> bool:
        """Whether the run waits for an answer to its delegation's question `question_id`."""
        with self._lock:
            return question_id in self._asked

    def answer_question(
        self,
        question: Question,
        text: str | None,
        data: dict[str, Any] | None,
        answered_by: str,
    ) -> asyncio.Future[Question | DelegationError]:
        """Answer a question of one of the run's delegations (`Run.answer`, surface `a2a`):
        resolves to the closed question, or to the run's refusal (`answer_invalid`,
        `question_closed`, ...) as a `DelegationError`, never raised."""
        future: asyncio.Future[Question | DelegationError] = self._loop.create_future()
        if not self._call_in_trio(
            self._answer_question_in_trio, future, question, text, data, answered_by
        ):
            future.set_result(
                DelegationError(code=ErrorCode.INVALID_INPUT, message="The run has ended.")
            )
        return future

    def release(self, cancel_reason: str | None = None) -> None:
        """The asyncio side stops reading: the reader no longer waits for credits. With a
        reason, the run is cancelled too."""
        self._call_in_trio(self._release_in_trio, cancel_reason)

    def _call_in_trio(self, fn: Callable[..., None], *args: Any) -> bool:
        """Call `fn(*args)` on the Trio thread soon; False if its loop has ended."""
        with self._lock:
            token = self._token
            if token is None:
                self._early.append((fn, args))
                return True
        try:
            token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            return False  # the run is over: nothing left to tell it
        return True

    # -- the thread -----------------------------------------------------------------------

    def _main(self) -> None:
        error = None
        try:
            trio.run(self._trio_main)
        except BaseException as exc:  # reported as the task's failure, never lost
            log.exception("%s: the parent run's thread failed", self.name)
            error = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            self._post(_Ended(error))
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                self._loop.call_soon_threadsafe(self.ended.set)

    def _post(self, item: _Item) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, item)
        except RuntimeError:
            return False
        return True

    async def _trio_main(self) -> None:
        self._credit = trio.Event()
        self._ask_lock = trio.Lock()
        with self._lock:
            self._token = trio.lowlevel.current_trio_token()
            early, self._early = self._early, []
        for fn, args in early:
            fn(*args)
        async with (
            self._options.open_engine(self) as eng,
            trio.open_nursery() as nursery,
            eng.open_run(
                metadata=self._metadata,
                traceparent=self._trace_context[0],
                tracestate=self._trace_context[1],
            ) as run,
        ):
            self._run = run
            if self._cancel_reason is not None:
                run.cancel(self._cancel_reason)
            nursery.start_soon(self._forward, run)
            try:
                await self._parent.run(run, self._prompt)
            except Exception as exc:  # a parent's failure is the run's outcome, not a crash
                log.warning("%s: the parent failed: %r", self.name, exc)
                await run.fail(f"The parent agent failed: {type(exc).__name__}: {exc}")

    async def _forward(self, run: Run) -> None:
        """Hand the run's journal to the asyncio side, batch by batch, until its terminal."""
        async with run.events() as events:
            while True:
                try:
                    batch = await events.receive_batch()
                except trio.EndOfChannel:
                    return
                self._in_flight += 1
                for entry in batch:
                    self._note_question(run, entry.event)
                if not self._post([entry.event for entry in batch]):
                    self._cancel_in_trio("The A2A server stopped listening to the task.")
                    return
                while self._in_flight >= MAX_BATCHES_IN_FLIGHT and not self._unlimited:
                    self._credit = trio.Event()
                    await self._credit.wait()

    async def ask(self, run: Run, question: str) -> str:
        """`Requester.ask`: journal the question, wait for its answer (see the class docs)."""
        assert self._ask_lock is not None
        async with self._ask_lock:
            if self._cancel_reason is not None:
                raise RequesterError("cancelled", "The task was cancelled.")
            self._questions += 1
            question_id = f"question-{self._questions}"
            answered, box = trio.Event(), list[str]()
            self._answer = (question_id, answered, box)
            with self._lock:
                self._open_question = question_id
            try:
                await run.emit(
                    Kind.PARENT_CUSTOM, name=QUESTION_EVENT, message_id=question_id, text=question
                )
                with trio.CancelScope(deadline=trio.current_time() + self.ask_timeout) as scope:
                    self._ask_scope = scope
                    await answered.wait()
                with self._lock:
                    settled = self._open_question != question_id  # `answer()` took it
                    self._open_question = None
                if not answered.is_set() and settled and self._cancel_reason is None:
                    await answered.wait()  # accepted on the asyncio side, on its way here
                if answered.is_set():
                    await run.emit(
                        Kind.PARENT_CUSTOM, name=ANSWER_EVENT, message_id=question_id, text=box[0]
                    )
                    return box[0]
                if self._cancel_reason is not None:
                    raise RequesterError("cancelled", "The task was cancelled.")
                why = (
                    f"No answer came within {self.ask_timeout:g} s. Go on without it, or end "
                    "your turn saying what you need."
                )
                await run.emit(
                    Kind.PARENT_CUSTOM, name=NO_ANSWER_EVENT, message_id=question_id, text=why
                )
                raise RequesterError("no_answer", why)
            finally:
                self._answer = None
                self._ask_scope = None
                with self._lock:
                    if self._open_question == question_id:
                        self._open_question = None

    def _note_question(self, run: Run, event: DelegationEvent) -> None:
        """Keep track of the delegations' questions the run waits answers for."""
        question = event.question
        if question is None:
            return
        if event.kind == Kind.INPUT_REQUIRED and question.open:
            if _waits_for_answers(run, question.agent_key):
                with self._lock:
                    self._asked[question.id] = question
        elif event.kind == Kind.INPUT_CLOSED:
            with self._lock:
                self._asked.pop(question.id, None)

    def _answer_question_in_trio(
        self,
        future: asyncio.Future[Question | DelegationError],
        question: Question,
        text: str | None,
        data: dict[str, Any] | None,
        answered_by: str,
    ) -> None:
        outcome: Question | DelegationError
        run = self._run
        if run is None:
            outcome = DelegationError(code=ErrorCode.INVALID_INPUT, message="No run is going.")
        else:
            try:
                outcome = run.answer(
                    question.delegation_id,
                    text,
                    data,
                    question_id=question.id,
                    surface=AnswerSurface.A2A,
                    answered_by=answered_by,
                )
            except DelegationError as refusal:
                outcome = refusal
            except Exception as exc:  # never into Trio's run_sync_soon: that would crash it
                log.exception("%s: answering question %s failed", self.name, question.id)
                outcome = DelegationError(
                    code=ErrorCode.INTERNAL_ERROR,
                    message=f"The answer could not be given: {type(exc).__name__}.",
                )

        def settle() -> None:
            if not future.done():
                future.set_result(outcome)

        with contextlib.suppress(RuntimeError):  # the asyncio loop is closed: nobody waits
            self._loop.call_soon_threadsafe(settle)

    def _answer_in_trio(self, question_id: str, text: str) -> None:
        if self._answer is not None and self._answer[0] == question_id:
            self._answer[2].append(text)
            self._answer[1].set()

    def _ack_in_trio(self) -> None:
        self._in_flight -= 1
        if self._credit is not None:
            self._credit.set()

    def _cancel_in_trio(self, reason: str) -> None:
        if self._cancel_reason is None:
            self._cancel_reason = reason
        if self._ask_scope is not None:
            self._ask_scope.cancel()
        if self._run is not None:
            self._run.cancel(self._cancel_reason)

    def _release_in_trio(self, cancel_reason: str | None) -> None:
        self._unlimited = True
        if self._credit is not None:
            self._credit.set()
        if cancel_reason is not None:
            self._cancel_in_trio(cancel_reason)


def _waits_for_answers(run: Run, agent_key: str) -> bool:
    """Whether a delegation to `agent_key` waits for answers to its questions (its policy
    surfaces them and its target can take input), as the engine's own delegation decides."""
    try:
        spec = run.registry.lookup(agent_key)
    except DelegationError:
        return False
    return (
        spec.policy.input_required == InputRequiredMode.SURFACE and spec.target.capabilities.input
    )


# -- the executor (asyncio) ---------------------------------------------------------------------


@attrs.define
class _ServedTask:
    thread: ParentRunThread
    mapper: ParentTaskMapper
    #: The task's event queue (the SDK gives every request of a task the same one).
    queue: EventQueue
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    #: Set once the task's terminal update was enqueued (by the relay or by cancel()).
    concluded: asyncio.Event = attrs.field(factory=asyncio.Event)
    #: The question the task is input-required for (its id), while it waits for the answer.
    waiting: str | None = None
    #: That question, when it is one of the run's delegations' (else `ask_requester`'s).
    question: Question | None = None
    #: Delegation questions that closed (their ids), newest last.
    closed: OrderedDict[str, None] = attrs.field(factory=OrderedDict)
    #: Set when the current request's part is over: the task turned input-required.
    paused: asyncio.Event = attrs.field(factory=asyncio.Event)
    #: The relay of the run's events into the task, from the first message to the terminal.
    relay: asyncio.Task[None] | None = None
    #: What the run journaled while its question was open, mapped once the task works again.
    held: list[DelegationEvent] = attrs.field(factory=list)


class ParentAgentExecutor(ServedExecutor):
    """The a2a-sdk `AgentExecutor` that runs one parent run per A2A task (see the module docs)."""

    def __init__(self, options: ServedParent) -> None:
        self.options = options
        self._make_parent = options.make_parent
        self._tasks: dict[str, _ServedTask] = {}
        self._threads: set[ParentRunThread] = set()
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def tasks_running(self) -> int:
        return len(self._tasks)

    @property
    def parent_threads(self) -> int:
        """Parent run threads still alive (a task's thread outlives it only while its parent
        is still stopping after a cancel that was not confirmed in time)."""
        self._threads = {thread for thread in self._threads if thread.alive}
        return len(self._threads)

    def request_context_builder(self) -> RequestContextBuilder:
        return _FollowUpGate(self)

    def check_follow_up(self, task_id: str, context_id: str | None, message: Message) -> str:
        """Refuse a message to an existing task unless the task waits for input, the message
        names the task's context (or none), has text (or, for a delegation's question, a data
        part with a JSON object) and names no other question than the one waiting; the task's
        context id otherwise."""
        served = self._tasks.get(task_id)
        if served is None or served.waiting is None:
            raise UnsupportedOperationError(
                message=f"Task {task_id[:64]} is not waiting for input: a message continues a "
                "task only while it is input-required. Start a new task (same contextId if "
                "you like)."
            )
        if context_id and context_id != served.mapper.context_id:
            raise InvalidParamsError(
                message=f"The message's contextId is not the context of task {task_id[:64]}."
            )
        named = _named_question(message)
        if named is not None and named != served.waiting:
            raise InvalidParamsError(
                message=f"The message answers question {named[:128]!r}, but the task waits "
                f"for {served.waiting[:128]!r}."
            )
        has_text = any(part.text.strip() for part in message.parts if part.HasField("text"))
        if served.question is not None:
            if not has_text and _answer_data(message) is None:
                raise InvalidParamsError(
                    message="The answer has no text and no data (a JSON object); the task "
                    "still waits."
                )
        elif not has_text:
            raise InvalidParamsError(message="The answer has no text; the task still waits.")
        return served.mapper.context_id

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is not None:
            await self._continue(task_id, context, event_queue)
            return
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
        )
        task.status.timestamp.GetCurrentTime()
        if context.message is not None:
            task.history.append(context.message)
        await event_queue.enqueue_event(task)
        prompt = context.get_user_input()
        if not prompt.strip():
            status = TaskStatus(state=TaskState.TASK_STATE_REJECTED)
            status.timestamp.GetCurrentTime()
            status.message.CopyFrom(
                Message(
                    role=Role.ROLE_AGENT,
                    message_id=f"{task_id}-rejected",
                    task_id=task_id,
                    context_id=context_id,
                    parts=[Part(text="The message has no text to work on.")],
                )
            )
            await event_queue.enqueue_event(
                TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
            )
            return
        thread = ParentRunThread(
            name=f"{THREAD_PREFIX}-{task_id[:32]}",
            options=self.options,
            parent=self._make_parent(),
            prompt=prompt,
            metadata={"a2a_task_id": task_id, "a2a_context_id": context_id},
            loop=asyncio.get_running_loop(),
            ask_timeout=self.options.ask_timeout,
            trace_context=_trace_context(context),
        )
        mapper = ParentTaskMapper(task_id, context_id, clock=time.time)
        served = _ServedTask(thread, mapper, event_queue)
        self._tasks[task_id] = served
        # Threads still stopping after an unconfirmed cancel are kept (and joined at shutdown)
        # until they end; the ended are forgotten here and below, each holding its run.
        self._threads = {other for other in self._threads if other.alive}
        self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            self._tasks.pop(task_id, None)
            raise
        served.relay = asyncio.create_task(self._relay(task_id, served), name=thread.name)
        self._relays.add(served.relay)
        served.relay.add_done_callback(self._relays.discard)
        await self._until_paused_or_ended(served)

    async def _continue(
        self, task_id: str, context: RequestContext, event_queue: EventQueue
    ) -> None:
        """A follow-up message: the answer to the question the task waits for. The task goes
        back to working and this request streams the run on until its terminal or the next
        question."""
        served = self._tasks.get(task_id)
        question_id = served.waiting if served is not None else None
        if served is None or question_id is None:
            # `check_follow_up` refused what it could see; the wait ended (or the task did)
            # between its check and now: there is nothing left to answer.
            log.info("task %s: a follow-up came after its question was settled", task_id)
            return
        if served.question is not None:
            await self._answer_question(served, served.question, context, event_queue)
            return
        text = context.get_user_input()
        if len(text) > MAX_ANSWER_CHARS:
            cut = len(text) - MAX_ANSWER_CHARS
            text = f"{text[:MAX_ANSWER_CHARS]}\n[answer cut: {cut} more characters]"
        async with served.lock:
            if served.waiting != question_id or not served.thread.answer(question_id, text):
                return  # its wait ended meanwhile: the relay resumes the task
            served.waiting = None
            served.paused = asyncio.Event()
            held, served.held = served.held, []
            for update in [*served.mapper.resume(), *self._map_batch(served, held)]:
                await event_queue.enqueue_event(update)
            if served.waiting is not None:
                served.paused.set()  # a question held meanwhile is surfaced now
        await self._until_paused_or_ended(served)

    async def _answer_question(
        self,
        served: _ServedTask,
        question: Question,
        context: RequestContext,
        event_queue: EventQueue,
    ) -> None:
        """A follow-up answers a delegation's question: `Run.answer` on the task's thread. A
        refused answer (`answer_invalid`) leaves the task waiting, saying why; a taken one, or
        a question that closed meanwhile, takes it back to working and streams on."""
        message = context.message
        text = context.get_user_input().strip() or None
        if text is not None and len(text) > MAX_ANSWER_CHARS:
            text = text[:MAX_ANSWER_CHARS]  # a schema may ask for a short text: cut, not noted
        data = _answer_data(message) if message is not None else None
        async with served.lock:
            if served.waiting != question.id:
                return  # it closed meanwhile: the relay resumed the task
            outcome: Question | DelegationError
            try:
                outcome = await asyncio.wait_for(
                    served.thread.answer_question(question, text, data, _requester(context)),
                    ANSWER_HANDOFF_TIMEOUT,
                )
            except TimeoutError:
                outcome = DelegationError(
                    code=ErrorCode.INTERNAL_ERROR, message="The run did not take the answer."
                )
            if served.waiting != question.id:
                return  # the task ended meanwhile (cancelled)
            note: str | None = None
            if isinstance(outcome, DelegationError):
                if outcome.code == ErrorCode.ANSWER_INVALID:
                    for update in served.mapper.ask(question, refused=outcome.message):
                        await event_queue.enqueue_event(update)
                    return
                # Closed another way meanwhile, or its delegation ended: nothing waits for it.
                note = f"The answer was not needed: {outcome.message}"
            _remember_closed(served, question.id)
            served.waiting = served.question = None
            served.paused = asyncio.Event()
            held, served.held = served.held, []
            for update in [*served.mapper.resume(note), *self._map_batch(served, held)]:
                await event_queue.enqueue_event(update)
            if served.waiting is not None:
                served.paused.set()  # a question held meanwhile is surfaced now
        await self._until_paused_or_ended(served)

    async def _until_paused_or_ended(self, served: _ServedTask) -> None:
        """Return when the task turns input-required or its relay ends (the thread joined); if
        this request is cancelled first (the server stops), the run is cancelled."""
        assert served.relay is not None
        paused = asyncio.ensure_future(served.paused.wait())
        try:
            await asyncio.wait({served.relay, paused}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            if not served.mapper.done:
                served.thread.release(CANCEL_REASON)
            raise
        finally:
            paused.cancel()

    async def _relay(self, task_id: str, served: _ServedTask) -> None:
        """Map the run's events into the task until its terminal update is enqueued, then let
        the thread end and forget the task."""
        thread = served.thread
        try:
            await self._relay_events(served)
            thread.release()
            await thread.join()
        finally:
            served.concluded.set()
            served.paused.set()
            if not thread.ended.is_set():
                # Cancelled (the server stopping) or failed: the run must stop.
                thread.release(CANCEL_REASON)
            self._tasks.pop(task_id, None)
            if not thread.alive:
                self._threads.discard(thread)

    async def _relay_events(self, served: _ServedTask) -> None:
        thread, mapper, queue = served.thread, served.mapper, served.queue
        while not mapper.done:
            item = await thread.receive()
            async with served.lock:
                updates: list[A2AUpdate]
                if isinstance(item, _Ended):
                    reason = "The parent run ended without an outcome"
                    updates = mapper.conclude("failed", f"{reason}: {item.error or 'no error'}.")
                else:
                    updates = self._map_batch(served, item)
                for update in updates:
                    await queue.enqueue_event(update)
                if mapper.done:
                    served.waiting = served.question = None
                elif served.waiting is not None:
                    served.paused.set()
            if isinstance(item, _Ended):
                break
            thread.ack()
        served.concluded.set()

    def _map_batch(self, served: _ServedTask, batch: list[DelegationEvent]) -> list[A2AUpdate]:
        """The updates of one batch, with the questions the run waits answers for as
        input-required: the requester's (those the thread really has open: a parent's own
        custom event cannot pose as one) and its delegations' (those the thread `waits_for`);
        a wait that ended unanswered, or a delegation's question that closed another way, as
        working again. While a question is open, what the run journals meanwhile (a CLI
        reports the call it is blocked in only after the call reached us, say; another
        question) is held, not mapped: mapped, it would turn the task `working` while it
        waits, and go to no request's stream. Once the question is settled (`_continue`, the
        end of the wait, its close) what was held is mapped as if it came now, so a question
        held is surfaced then; a run terminal releases it too."""
        mapper, out = served.mapper, list[A2AUpdate]()
        pending: list[DelegationEvent] = []
        events = deque(batch)
        while events:
            event = events.popleft()
            if event.kind == Kind.PARENT_CUSTOM and event.name == QUESTION_EVENT:
                question_id = event.message_id
                if (
                    served.waiting is None
                    and question_id is not None
                    and served.thread.open_question == question_id
                ):
                    out += mapper.feed(pending)
                    pending = []
                    out += mapper.interrupt(event.text or "")
                    served.waiting = question_id
                    continue
            elif (
                event.kind == Kind.PARENT_CUSTOM
                and event.name == NO_ANSWER_EVENT
                and served.waiting is not None
                and served.question is None
                and served.waiting == event.message_id
            ):
                out += mapper.resume(event.text)
                served.waiting = None
                events.extendleft(reversed(served.held))
                served.held = []
                continue
            elif event.kind == Kind.INPUT_REQUIRED and event.question is not None:
                question = event.question
                if (
                    served.waiting is None
                    and question.id not in served.closed
                    and served.thread.waits_for(question.id)
                ):
                    out += mapper.feed(pending)
                    pending = []
                    out += mapper.ask(question)
                    served.waiting, served.question = question.id, question
                    continue
            elif event.kind == Kind.INPUT_CLOSED and event.question is not None:
                closed = event.question
                _remember_closed(served, closed.id)
                if served.question is not None and served.waiting == closed.id:
                    out += mapper.resume(_closed_note(closed))
                    served.waiting = served.question = None
                    events.extendleft(reversed(served.held))
                    served.held = []
                    continue
            if served.waiting is None:
                pending.append(event)
            elif event.kind in Kind.RUN_TERMINALS:
                # The run ended while it waited (cancelled, say): everything, then its end.
                pending += [*served.held, event]
                served.held = []
            else:
                served.held.append(event)
        out += mapper.feed(pending)
        return out

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        served = self._tasks.get(context.task_id or "")
        if served is None:
            return  # nothing runs for it: the SDK marks the task canceled itself
        served.thread.cancel(CANCEL_REASON)
        try:
            await asyncio.wait_for(served.concluded.wait(), self.options.cancel_grace)
        except TimeoutError:
            log.warning(
                "task %s: the parent did not stop within %.1f s; marking it canceled while it "
                "keeps stopping",
                context.task_id,
                self.options.cancel_grace,
            )
            async with served.lock:
                reason = f"{CANCEL_REASON} The parent agent is still stopping."
                for update in served.mapper.conclude("canceled", reason):
                    await event_queue.enqueue_event(update)
                served.waiting = served.question = None
            served.concluded.set()

    async def aclose(self, grace: float = SHUTDOWN_TIMEOUT) -> int:
        """Cancel every run still going and wait (up to `grace` s) for their threads to end.
        Returns how many threads are still alive after that."""
        threads = [thread for thread in self._threads if thread.alive]
        for thread in threads:
            thread.release(SHUTDOWN_REASON)
        if threads:
            waiting = asyncio.gather(*(thread.join() for thread in threads))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting, grace)
        relays = list(self._relays)
        if relays:
            # Their threads have ended (or will not): a relay has its terminal to write at
            # most; one still waiting after a moment is cancelled.
            _, pending = await asyncio.wait(relays, timeout=1.0)
            for relay in pending:
                relay.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        left = self.parent_threads
        if left:
            log.error("%d parent run thread(s) did not stop within %.0f s", left, grace)
        return left


def _remember_closed(served: _ServedTask, question_id: str) -> None:
    served.closed[question_id] = None
    while len(served.closed) > CLOSED_QUESTIONS_KEPT:
        served.closed.popitem(last=False)


def _closed_note(question: Question) -> str:
    """What the task's `working` status says when a question closed without this task's
    answer."""
    if question.outcome == QuestionOutcome.ANSWERED:
        who = f" by {question.answered_by}" if question.answered_by else ""
        return f"The question was answered via {question.surface or 'another surface'}{who}."
    if question.outcome == QuestionOutcome.EXPIRED:
        return "The question expired unanswered."
    if question.outcome == QuestionOutcome.DECLINED:
        return "The question was declined."
    return "The question was withdrawn: its delegation ended."


def _answer_data(message: Message) -> dict[str, Any] | None:
    """The first data part of `message` that is a JSON object (an answer's `data`)."""
    for part in message.parts:
        if part.HasField("data") and part.data.HasField("struct_value"):
            value = json_format.MessageToDict(part.data.struct_value)
            if isinstance(value, dict):
                return value
    return None


def _named_question(message: Message) -> str | None:
    """The question id a follow-up says it answers (`{"subagentEngine": {"questionId"}}`)."""
    if METADATA_KEY not in message.metadata:
        return None
    ours = message.metadata[METADATA_KEY]
    if not isinstance(ours, struct_pb2.Struct) or "questionId" not in ours:
        return None
    named = ours["questionId"]
    return named if isinstance(named, str) and named else None


def _requester(context: RequestContext) -> str:
    """Who answers, as a label (`answered_by`, shown, never trusted): the authenticated user,
    else the caller's `x-user-id` header, else `ANONYMOUS_REQUESTER`."""
    call = context.call_context
    if call is None:
        return ANONYMOUS_REQUESTER
    if call.user.is_authenticated and call.user.user_name:
        return call.user.user_name
    headers = call.state.get("headers")
    named = headers.get("x-user-id") if isinstance(headers, dict) else None
    if isinstance(named, str) and named.strip():
        return f"{named.strip()} (x-user-id)"
    return ANONYMOUS_REQUESTER


def _trace_context(context: RequestContext) -> tuple[str | None, str | None]:
    """The W3C `traceparent` and `tracestate` headers of the request that sent the task
    (https://www.w3.org/TR/trace-context/#traceparent-header), for the task's run to continue
    the caller's trace; the engine ignores values that do not parse."""
    call = context.call_context
    headers = call.state.get("headers") if call is not None else None
    if not isinstance(headers, dict):
        return None, None
    traceparent, tracestate = headers.get("traceparent"), headers.get("tracestate")
    return (
        traceparent if isinstance(traceparent, str) else None,
        tracestate if isinstance(tracestate, str) else None,
    )


class _FollowUpGate(RequestContextBuilder):
    """The SDK's request context builder, refusing first a message to an existing task that
    cannot continue it (`ParentAgentExecutor.check_follow_up`): refused here, it is a typed
    error for its caller and leaves the task as it was (an error raised by `execute()` would
    fail the task)."""

    def __init__(self, executor: ParentAgentExecutor) -> None:
        self._executor = executor
        self._inner = SimpleRequestContextBuilder()

    async def build(
        self,
        context: Any,
        params: Any = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        if params is not None and task_id:
            context_id = self._executor.check_follow_up(task_id, context_id, params.message)
        return await self._inner.build(
            context=context, params=params, task_id=task_id, context_id=context_id, task=task
        )


# -- the server ---------------------------------------------------------------------------------


#: AIP-193 `status` names (google.rpc.Code) of the HTTP statuses a2a-serve refuses with.
_RPC_STATUS: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    405: "UNIMPLEMENTED",
    415: "INVALID_ARGUMENT",
    421: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
#: JSON-RPC 2.0 error codes: a body that is not one JSON document is a parse error (-32700); a
#: body that is not JSON by its Content-Type is A2A's ContentTypeNotSupportedError (-32005);
#: anything else refused before the request is read is an invalid request (-32600).
_PARSE_ERRORS: Final = frozenset({"bad_json", "too_deep"})
_JSONRPC_PARSE_ERROR: Final = -32700
_JSONRPC_INVALID_REQUEST: Final = -32600
_JSONRPC_CONTENT_TYPE: Final = -32005
#: The ErrorInfo domain of a2a-serve's own refusals; A2A's own reasons use the spec's.
_OWN_DOMAIN: Final = "subagent-engine"
_A2A_DOMAIN: Final = "a2a-protocol.org"


def a2a_refusal(path: str, refusal: Refusal) -> Refusal:
    """`refusal` in the error shape of the A2A binding that serves `path`: a JSON-RPC error
    response under `JSONRPC_PATH`, an AIP-193 error (the HTTP+JSON binding's) under
    `REST_PATH`, as it is elsewhere. The HTTP status and headers stay; either error carries a
    `google.rpc.ErrorInfo` whose reason is the refusal's code in upper case (A2A 1.0's error
    details)."""
    content_type = refusal.status == 415
    reason = "CONTENT_TYPE_NOT_SUPPORTED" if content_type else refusal.error.upper()
    info: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": _A2A_DOMAIN if content_type else _OWN_DOMAIN,
        "metadata": {},
    }
    if path.startswith(JSONRPC_PATH):
        if content_type:
            code = _JSONRPC_CONTENT_TYPE
        elif refusal.error in _PARSE_ERRORS:
            code = _JSONRPC_PARSE_ERROR
        else:
            code = _JSONRPC_INVALID_REQUEST
        error = {"code": code, "message": refusal.message, "data": [info]}
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "error": error}
    elif path.startswith(REST_PATH):
        status = _RPC_STATUS.get(refusal.status, "UNKNOWN")
        error = {"code": refusal.status, "status": status, "message": refusal.message}
        body = {"error": {**error, "details": [info]}}
    else:
        return refusal
    return _ShapedRefusal(refusal, json.dumps(body).encode())


class _ShapedRefusal(Refusal):
    """A refusal whose body is already written."""

    def __init__(self, refusal: Refusal, body: bytes) -> None:
        super().__init__(refusal.status, refusal.error, refusal.message, refusal.headers)
        self._body = body

    def body(self) -> bytes:
        return self._body


async def _send_a2a_refusal(scope: Any, send: Any, refusal: Refusal) -> None:
    await send_refusal(scope, send, a2a_refusal(scope.get("path", ""), refusal))


class _A2AGuard:
    """`RequestGuard`, its refusals in the A2A bindings' error shapes (`a2a_refusal`)."""

    def __init__(self, guard: RequestGuard) -> None:
        self.guard = guard

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            try:
                self.guard.check(scope)
            except Refusal as refusal:
                self.guard.refused += 1
                await _send_a2a_refusal(scope, send, refusal)
                return
        await self.guard(scope, receive, send)


class _BearerAuth:
    """Every HTTP request but the card's and /healthz must carry the bearer token: read by the
    one parser of every listener (`bearer_token`: the scheme in any case, a repeated header
    refused with 400), compared in constant time; others get 401 with a JSON reason and
    `WWW-Authenticate` (RFC 6750 section 3)."""

    OPEN_PATHS: Final = frozenset({CARD_PATH, "/healthz"})

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in self.OPEN_PATHS:
            try:
                require_bearer(
                    header_values(scope.get("headers") or (), b"authorization"),
                    self._expected,
                    message="This agent needs its bearer token.",
                    realm="subagent-engine a2a-serve",
                )
            except Refusal as refusal:
                await _send_a2a_refusal(scope, send, refusal)
                return
        await self.app(scope, receive, send)


_Message = MutableMapping[str, Any]


_NO_BODY: Final = object()
#: Seconds a request may take to send its whole body (as Quart's `BODY_TIMEOUT` for `serve`).
BODY_TIMEOUT: Final = 60.0
#: Seconds a connection may take to send a whole request head, counted from when it opened or
#: its last answer ended (uvicorn's own keep-alive timer is cancelled by any byte, so a peer
#: that sends nothing, or a head a byte at a time, would hold its connection forever).
HEAD_TIMEOUT: Final = 5.0


#: The SDK's lines about a request it refused (the caller has its JSON-RPC or HTTP error): at
#: error level, with a traceback and the whole offending document, one per bad request.
_SDK_REFUSAL_LINES: Final = (
    ("a2a.server.routes.jsonrpc_dispatcher", "Failed to validate base JSON-RPC request"),
    ("a2a.server.routes.jsonrpc_dispatcher", "Failed to parse request params"),
    ("a2a.utils.error_handlers", "Parse error"),
)
#: The longest log line a2a-serve lets the SDK print.
MAX_LOG_LINE: Final = 2000


class _CallerErrorLogFilter(logging.Filter):
    """Demotes the SDK's reports of a request it refused to one debug line, and cuts any of
    its lines to `MAX_LOG_LINE` characters: a caller must not be able to write the log."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.prefixes and message.startswith(self.prefixes):
            if not log.isEnabledFor(logging.DEBUG):
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None
        if len(message) > MAX_LOG_LINE:
            record.msg, record.args = message[:MAX_LOG_LINE] + " [...]", None
        return True


def quiet_sdk_refusals() -> None:
    """Install `_CallerErrorLogFilter` on the SDK's loggers (once per process)."""
    prefixes: dict[str, list[str]] = {}
    for name, prefix in _SDK_REFUSAL_LINES:
        prefixes.setdefault(name, []).append(prefix)
    for name in ("a2a.server.routes.rest_dispatcher", *prefixes):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _CallerErrorLogFilter) for f in logger.filters):
            logger.addFilter(_CallerErrorLogFilter(prefixes.get(name, ())))


def _head_deadline_protocol() -> type[Any]:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline on every request head."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadlineProtocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a head arrived (or the peer broke)
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(HEAD_TIMEOUT, self._head_overdue)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_overdue(self) -> None:
            self._head_deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineProtocol


class _BoundedJsonBody:
    """Read each request's body before the application does, and refuse what it must not see.

    The SDK reads a body whole (`request.json()`, `request.body()`) with no bound, and its
    JSON-RPC route answers a body nested too deep for Python's parser as an internal error.
    Here a body is counted as it arrives: a declared `Content-Length` above `limit` is refused
    before a byte is read, and a body that passes `limit` is refused as soon as it does (413,
    `Connection: close`), so at most `limit` bytes are ever held. A POST, PUT or PATCH body must
    then be one JSON document within `parse_json_body`'s rules (400: not JSON, `NaN`, deeper than
    `MAX_JSON_DEPTH`). The application receives the checked document (re-encoded, its text valid
    Unicode) as one message, then the server's own `receive` (a disconnect while it streams its
    answer)."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        document: Any = _NO_BODY
        try:
            body = await self._read(scope, receive)
            if body and scope["method"] in BODY_METHODS:
                document = parse_json_body(body)
        except Refusal as refusal:
            await _send_a2a_refusal(scope, send, refusal)
            return
        if body is None:
            return  # the client left before its body ended: nobody to answer
        if document is not _NO_BODY:
            # What the SDK reads is the checked document, its text valid Unicode: a lone
            # surrogate escape or invalid UTF-8 it would echo back could not be encoded.
            body = json.dumps(document, ensure_ascii=False).encode()
        pending: list[_Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> _Message:
            if pending:
                return pending.pop()
            message: _Message = await receive()
            return message

        await self.app(scope, replay, send)

    async def _read(self, scope: Any, receive: Any) -> bytes | None:
        declared = header_values(scope.get("headers") or (), b"content-length")
        if declared and declared[0].strip().isdigit() and int(declared[0]) > self.limit:
            raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        raise self._too_large()
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise Refusal(
                408,
                "body_timeout",
                f"The request body did not arrive within {BODY_TIMEOUT:g} s.",
                headers=[("connection", "close")],
            ) from None

    def _too_large(self) -> Refusal:
        # The rest of the body is never read, so the connection cannot carry another request.
        return Refusal(
            413,
            "too_large",
            f"The request body is over {self.limit} bytes.",
            headers=[("connection", "close")],
        )


class _TrailingSlash:
    """A path under one of `prefixes` that ends in "/" is routed as the same path without it:
    served, not redirected (Starlette's redirect answers a POST with a 307 and no body)."""

    def __init__(self, app: Any, prefixes: Sequence[str]) -> None:
        self.app = app
        self.prefixes = tuple(prefixes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.endswith("/") and path.startswith(self.prefixes):
            stripped = path.rstrip("/")
            raw = scope.get("raw_path")
            scope = {**scope, "path": stripped}
            if isinstance(raw, bytes):
                scope["raw_path"] = raw.rstrip(b"/")
        await self.app(scope, receive, send)


def _card_routes(card: AgentCard, last_modified: float) -> list[Any]:
    """The SDK's card route (its ETag and 304), with `CARD_CACHE_CONTROL` and a
    `Last-Modified` of when the server started (RFC 9110 section 8.8.2)."""
    from a2a.server.routes import create_agent_card_routes
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    stamp = formatdate(last_modified, usegmt=True)
    wrapped: list[Any] = []
    for route in create_agent_card_routes(
        card, card_url=CARD_PATH, cache_control=CARD_CACHE_CONTROL
    ):
        endpoint = route.endpoint

        async def with_last_modified(request: Request, endpoint: Any = endpoint) -> Response:
            response: Response = await endpoint(request)
            response.headers.setdefault("last-modified", stamp)
            return response

        wrapped.append(Route(route.path, with_last_modified, methods=route.methods))
    return wrapped


def build_app(
    options: ServedParent, base_url: str, executor: ServedExecutor
) -> tuple[Any, AgentCard]:
    """The Starlette app (card, JSON-RPC, HTTP+JSON, health) and its card."""
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
    from a2a.server.tasks import InMemoryTaskStore
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Mount, Route

    card = agent_card(options, base_url)
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=card,
        request_context_builder=executor.request_context_builder(),
    )

    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "parent": options.label,
                "tasks_running": executor.tasks_running,
                "parent_threads": executor.parent_threads,
            }
        )

    routes: list[Any] = [Route("/healthz", healthz, methods=["GET"])]
    routes += _card_routes(card, time.time())
    routes += create_jsonrpc_routes(handler, rpc_url=JSONRPC_PATH)
    # Mounted (not path_prefix=): the SDK's tenant form is then /a2a/rest/{tenant}/..., where
    # the SDK's REST client puts a tenant.
    routes.append(Mount(REST_PATH, routes=create_rest_routes(handler)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await executor.aclose()
        with contextlib.suppress(Exception, TimeoutError):
            await asyncio.wait_for(handler.aclose(), timeout=1.0)

    app: Any = _BoundedJsonBody(
        _TrailingSlash(Starlette(routes=routes, lifespan=lifespan), (JSONRPC_PATH, REST_PATH))
    )
    if options.listening.token is not None:
        app = _BearerAuth(app, options.listening.token)
    # Outermost: refused for its headers before a token is compared or a body byte is read.
    guarded = RequestGuard(
        app,
        allowed_hosts=options.listening.hosts_for(base_url),
        allowed_origins=(),
        websockets=False,
    )
    return _A2AGuard(guarded), card


async def serve(options: ServedParent, out: TextIO) -> None:
    """Listen, print `READY <port>` and the card URL, serve until stopped."""
    import uvicorn

    where = options.listening
    sock = listening_socket(where.host, where.port)
    with sock:  # closed even when serving is cancelled (uvicorn closes it only on shutdown)
        port = sock.getsockname()[1]
        host = f"[{where.host}]" if ":" in where.host else where.host
        base_url = (where.public_url or f"http://{host}:{port}").rstrip("/")
        make_executor = options.make_executor or ParentAgentExecutor
        executor = make_executor(options)
        app, _ = build_app(options, base_url, executor)
        quiet_sdk_refusals()
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            http=_head_deadline_protocol(),
            ws="none",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )

        def announce() -> None:
            out.write(f"READY {port}\ncard: {base_url}{CARD_PATH}\n")
            out.flush()

        await serve_on_uvicorn(config, sock, ready=announce, watch_stdin=where.watch_stdin)
