"""The bundled server (`subagent-engine serve`): runs over AG-UI, SSE and WebSocket, on Quart-Trio.

This module owns the HTTP surface and the runs it hosts; it composes the engine, the MCP endpoint,
a parent agent and the AG-UI output adapter, and holds no protocol rules of its own.

Routes (JSON errors everywhere, never a 500 for a bad request, never a hung stream):

- `POST /agui`: the AG-UI endpoint. Body: a `RunAgentInput`. Answer: `text/event-stream` of that
  run (the parent's events and every delegation's, one ordered stream, AG-UI 1.0 events from
  `adapters.agui` in the run's visibility mode), the last event of each journal entry with
  `id: <cursor>`. The run id and its viewer token come back in `X-Run-Id` / `X-Viewer-Token`.
  Closing this request stops the run (an AG-UI client aborts a run by disconnecting). A
  subagent's question ends the stream at an AG-UI interrupt while the run waits (every mode but
  `custom`; `forwardedProps.interrupts: false` keeps it open), and a `RunAgentInput` on the same
  `threadId` with `resume` entries answers it and streams the same run on from there
  (`AguiStreamEncoder.suspend` / `resume`, `ResumedEncoder`; AG-UI 1.0 "Interrupts and Resume",
  https://docs.ag-ui.com/spec/1.0/basic/patterns/interrupt-resume). A client that names no
  mode gets `attributed` or `custom` by what it declares (`adapters.agui.stream_mode`:
  `forwardedProps.capabilities.multiAgent.subagents`, else `protocolVersion`), else the
  configured one.
- `POST /runs`: start a run and answer at once with `{run_id, viewer_token, events_url}`; the
  page uses this, then watches with GET so that a dropped connection is only a reconnect.
- `GET /runs/<id>/events`: the run's stream after `Last-Event-ID` (or `?after=`), then live. A
  cursor older than the replay window gets an explicit gap event first. Needs the viewer token
  (`Authorization: Bearer`, or `?token=` for `EventSource`, which cannot send headers).
- `GET /runs/<id>/ws`: the same stream over WebSocket: one text message per event,
  `{"id": <cursor or null>, "data": <event>}`, the same events and cursors as the SSE stream.
- Every stream takes `?mode=` (one of `adapters.agui.MODES`) and `?format=engine` for the
  engine's own envelope (`EngineEventEncoder`) instead of AG-UI.
- `POST /runs/<id>/stop`: cancel the run; the cascade reaches every remote task.
- `POST /runs/<id>/answer`: `{"delegationId", "text" and/or "data"}` answers a subagent waiting
  for input (`subagent.input_required` on the stream); 409 when it is not waiting.
- `GET /runs/<id>/audit`: the run's audit trail as its store keeps it (one record per
  delegation: every protocol id, status, error code, remote cancel outcome, times).
- `GET /healthz` (process up), `GET /readyz` (engine and MCP endpoint serving).

Callers are strangers until they prove otherwise (`adapters.listener`): every request passes the
request guard (a `Host` the server answers to, no page from a foreign `Origin`, JSON bodies only,
no repeated single-valued headers) before a route reads it. Starting a run needs the host token
when one is configured (`[server] token_env`; required to listen beyond loopback); at most
`max_active_runs` run at once, and a new run is refused (429, `Retry-After`) rather than let it
push a run that ended less than `replay_retention_seconds` ago out of the replay the engine keeps.
Run ids are the server's own (`run-<random>`): a caller's `runId` is only the AG-UI run id its
streams report, so it can neither probe for nor reserve another caller's run. A viewer that stops
reading is dropped by the listener, and a resume after a run's terminal is answered 204 (which
tells an `EventSource` not to reconnect).

Streaming: each viewer reads the run journal from its cursor through its own bounded lanes (a
slow viewer never slows the run or other viewers). One pipeline for both transports: the
viewer's encoder translates what is ready once into frames (each event's JSON and the cursor it
carries, `frames_batch`), which are written as one SSE body write (`sse_bytes`) or as WebSocket
messages (`websocket_messages`); nothing is parsed back. The run's viewers share the encoding of
text deltas, every SSE stream opens with `retry: <reconnect_ms>`, and a keep-alive comment goes
out when the run is idle.
CORS is closed unless origins are configured. Once a server is up it freezes its startup
objects out of the garbage collector's walks (`freeze_startup_objects`).

Traces, when the engine has a tracer provider (`open_host(tracer_provider=...)`, `[telemetry]`):
a run started by `POST /agui` or `POST /runs` continues the request's W3C `traceparent` /
`tracestate` (https://www.w3.org/TR/trace-context/; a value that does not parse is ignored and
the request goes on), and each viewer's connection is a span under its run's (`ViewerTrace`).
An engine that does not trace reads no trace header and makes nothing per viewer.

Shutdown (`RunHost.drain`, what `serve` and `demo` do on SIGINT/SIGTERM) goes in order, with the
listener still open: new runs are refused (`POST /runs`, `POST /agui`: 503 `shutting_down` with
`Retry-After`), every live run is cancelled with the reason `SHUTDOWN_REASON` (its delegations'
remote tasks are cancelled before the run's `run.cancelled` terminal is journaled, and the store
records the run as ended), and the drain waits until every request in flight has finished, which
the stream routes do once they have written the run's terminal (`RUN_FINISHED` with outcome
`cancelled` in AG-UI) to their viewer; only then may the caller close the listener. All of it is
bounded by a grace period; what is still running after it is cut.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import hmac
import json
import logging
import math
import os
import secrets
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing, asynccontextmanager, contextmanager, nullcontext
from typing import Any, Final, Protocol, TextIO, TypeVar

import attrs
import pydantic
import trio
from ag_ui.core import ResumeEntry, RunAgentInput, TextPart, UserMessage
from opentelemetry.trace import TracerProvider
from quart import Response, has_websocket_context, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from adapters.agui import (
    DEFAULT_MODE,
    KEEPALIVE,
    MODES,
    AguiStreamEncoder,
    CapabilityError,
    Frame,
    SharedEncoding,
    sse_bytes,
    stream_mode,
    websocket_messages,
)
from adapters.listener import (
    ListenerLimits,
    Refusal,
    RequestGuard,
    bearer_token,
    parse_cursor,
    parse_json_body,
    require_bearer,
    serve_listener,
)
from adapters.parents import ParentAgent
from engine import (
    AnswerSurface,
    DelegationError,
    Engine,
    ErrorCode,
    InputExpiry,
    JournalEntry,
    JournalTail,
    Question,
    Run,
    RunJournal,
    SharedRunArchive,
    Subscription,
    check_answer,
    to_json,
    to_jsonable,
)
from web.artifacts import ARTIFACT_MAX_BYTES, ArtifactRefused, artifact_response_parts
from web.cluster import run_node
from web.config import HostConfig
from web.metrics import Metrics
from web.stores import open_store

__all__ = [
    "FORCED_EXIT_SECONDS",
    "SHUTDOWN_REASON",
    "ParentAgent",
    "RunHost",
    "StreamEncoder",
    "create_app",
    "force_exit",
]

log = logging.getLogger(__name__)

MAX_PROMPT_CHARS: Final = 64 * 1024
#: `Retry-After` when every run slot is taken (a run's end cannot be foreseen).
RETRY_WHEN_FULL: Final = 5
#: The reason every live run is cancelled with when the server shuts down (its `run.cancelled`
#: text; an AG-UI viewer sees it as `RUN_FINISHED` `metadata.reason`).
SHUTDOWN_REASON: Final = "shutdown: the server is shutting down."
#: `Retry-After` of a run refused while the server shuts down (another process, or this one
#: restarted, may take it by then).
RETRY_WHEN_SHUTTING_DOWN: Final = 5
#: After a second stop signal, how long the process may take to unwind (its parent agents'
#: processes stopped, its store closed) before it exits regardless.
FORCED_EXIT_SECONDS: Final = 1.0
#: A WebSocket viewer may send a few messages (the stream takes none): this many at once, then
#: one per second; beyond that the connection is closed (1008, policy violation).
WS_MESSAGE_BURST: Final = 16


class StreamEncoder(Protocol):
    """Translates one viewer's journal entries into frames (`adapters.agui.Frame`: each event's
    JSON and the cursor it carries), which the stream writes as SSE or WebSocket messages.

    `frames_batch` gets what is ready at once (one write); it may merge text deltas, as a
    viewer behind the journal gets them merged anyway. `frames` is used to replay a reconnecting
    viewer's history, and must leave the encoder as `frames_batch` would."""

    def frames(self, entry: JournalEntry) -> list[Frame]: ...

    def frames_batch(self, entries: Sequence[JournalEntry]) -> list[Frame]: ...


#: What one write of a stream is: SSE bytes, or a list of WebSocket text messages.
Out = TypeVar("Out")


#: (thread id, run id, mode, the run's shared dict) -> one viewer's encoder. The dict lives as
#: long as the hosted run: a factory keeps there what its encoders share across the run's viewers
#: (the AG-UI encoder's `SharedEncoding`: each event's common bytes encoded once).
EncoderFactory = Callable[[str, str, str, dict[str, Any]], StreamEncoder]


class HttpError(Refusal):
    """A route's refusal: the status, a machine-readable error and a message."""


@attrs.frozen
class AguiSuspension:
    """Where a `POST /agui` stream ended at an interrupt (AG-UI 1.0 `RUN_FINISHED` with an
    `interrupt` outcome) while the engine's run went on: the last journal cursor that stream
    carried and the open questions it ended at, in the order its interrupts list them."""

    cursor: int
    questions: tuple[Question, ...]


@attrs.define(eq=False)
class HostedRun:
    run_id: str
    thread_id: str
    viewer_token: str = attrs.field(repr=False)
    mode: str
    #: The run id its AG-UI streams report: the caller's `runId`, else `run_id`.
    agui_run_id: str = ""
    run: Run | None = None
    started: trio.Event = attrs.field(factory=trio.Event)
    ended: trio.Event = attrs.field(factory=trio.Event)
    #: `trio.current_time()` when the run ended.
    ended_at: float | None = None
    error: str | None = None
    #: What the viewers' encoders share (see `EncoderFactory`).
    shared: dict[str, Any] = attrs.field(factory=dict)
    #: The journal of a run read back from the engine's archive (not run by this process).
    archived_journal: RunJournal | None = None
    #: The node that owns an archived run (its record's `node`).
    owner: str = ""
    #: Where each of its `POST /agui` streams ended at an interrupt, oldest first (the last:
    #: where the stream that resumes it goes on from, `ResumedEncoder`).
    agui_suspensions: list[AguiSuspension] = attrs.field(factory=list)
    #: Its last `POST /agui` stream ended at an interrupt that no resume has answered yet.
    agui_paused: bool = False
    #: The `POST /agui` stream serving it now (a token; None: none is).
    agui_stream: object | None = None

    @property
    def over(self) -> bool:
        """Whether the run ended: its terminal is journaled (what its viewers saw last), even
        if the engine is still putting it away (closing its actor, archiving its end)."""
        return self.ended.is_set() or (self.run is not None and self.run.journal.ended)


def store_unavailable(what: str) -> HttpError:
    """The 503 a request gets while the run store cannot be `what` ("read", "reached")."""
    return HttpError(
        503,
        "store_unavailable",
        f"The run store cannot be {what} right now; try again shortly.",
        headers=[("retry-after", str(RETRY_WHEN_FULL))],
    )


def token_digest(token: str) -> str:
    """What the archive keeps of a viewer token: its SHA-256, hex (the token itself is never
    written anywhere)."""
    return hashlib.sha256(token.encode()).hexdigest()


class RunHost:
    """The runs this server hosts: starts them (with their parent) in its own nursery, finds
    them by id and viewer token, stops them.

    Admission: at most `max_active_runs` run at once, and while `replay_retention` > 0 a run
    that ended less than that many seconds ago is never pushed out of the engine's retained
    runs (`EngineLimits.retained_closed_runs`) by newer ones: a run that could do so is refused
    instead (`HttpError` 429 with `Retry-After`). This holds for the runs of an engine that this
    host alone starts runs on. Run ids come from `new_run_id` (default: `run-<random>`)."""

    def __init__(
        self,
        engine: Engine,
        nursery: trio.Nursery,
        parent_factory: Callable[[], ParentAgent],
        *,
        visibility: str = DEFAULT_MODE,
        max_active_runs: int = 32,
        replay_retention: float = 60.0,
        new_run_id: Callable[[str | None], str] | None = None,
        shared: SharedRunArchive | None = None,
    ) -> None:
        self.engine = engine
        #: The store this node shares with others (Redis), through which a viewer's stop or
        #: answer for a run of another node is forwarded to it (`web.cluster`).
        self.shared = shared
        self.nursery = nursery
        self.parent_factory = parent_factory
        self.visibility = visibility
        self.max_active_runs = max_active_runs
        self.replay_retention = replay_retention
        #: (the caller's AG-UI run id or None) -> the new run's id.
        self.new_run_id = new_run_id or (lambda _: f"run-{uuid.uuid4().hex[:16]}")
        self._runs: OrderedDict[str, HostedRun] = OrderedDict()
        #: Set once `drain` began: new runs are refused.
        self.draining = False
        #: HTTP requests and WebSocket connections being served (`count_requests`).
        self.requests_in_flight = 0
        #: Set (and replaced) whenever a request ends or a run ends: what `drain` waits on.
        self._changed = trio.Event()

    def _note_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def request_began(self) -> None:
        self.requests_in_flight += 1

    def request_ended(self) -> None:
        self.requests_in_flight -= 1
        self._note_change()

    async def drain(self, grace: float, reason: str = SHUTDOWN_REASON) -> bool:
        """Shut down the runs, for the process to stop: refuse new runs from now on, cancel
        every live run this host runs with `reason` (its remote tasks are cancelled and its
        terminal journaled, which its viewers' streams then deliver), and wait until each of
        them has ended and no request is in flight. True if that happened within `grace`
        seconds; False if the wait was cut (the caller closes the listener either way)."""
        self.draining = True
        with trio.move_on_after(grace):
            while True:
                live = [hosted for hosted in self._runs.values() if not hosted.ended.is_set()]
                for hosted in live:
                    if hosted.archived_journal is None:
                        self.stop(hosted, reason)
                local = [hosted for hosted in live if hosted.archived_journal is None]
                if not local and self.requests_in_flight <= 0:
                    return True
                changed = self._changed
                if local:
                    async with trio.open_nursery() as nursery:
                        # Wake on the first run ending or the first request ending.
                        for hosted in local:
                            nursery.start_soon(_set_when, hosted.ended, nursery.cancel_scope)
                        nursery.start_soon(_set_when, changed, nursery.cancel_scope)
                else:
                    await changed.wait()
        return False

    @property
    def active_runs(self) -> int:
        return sum(1 for hosted in self._runs.values() if not hosted.over)

    def _forget_expired(self) -> None:
        """Drop the ended runs whose journal the engine no longer keeps (their viewers could
        get nothing more)."""
        for run_id in [
            run_id
            for run_id, hosted in self._runs.items()
            if hosted.ended.is_set() and self.engine.journal(run_id) is None
        ]:
            del self._runs[run_id]

    def retry_after(self) -> int | None:
        """None if a new run may start now, else the seconds after which one may."""
        self._forget_expired()
        active = self.active_runs
        if active >= self.max_active_runs:
            return RETRY_WHEN_FULL
        retained = self.engine.limits.retained_closed_runs
        if self.replay_retention <= 0 or retained <= 0 or self.engine.archive is not None:
            return None  # (an archive keeps every finished run's replay: nothing is pushed out)
        now = trio.current_time()
        young = [
            hosted.ended_at
            for hosted in self._runs.values()
            if hosted.ended_at is not None and now - hosted.ended_at < self.replay_retention
        ]
        if active + len(young) + 1 <= retained:
            return None
        if not young:
            return RETRY_WHEN_FULL
        return max(1, math.ceil(self.replay_retention - (now - min(young))))

    async def start(
        self,
        prompt: str,
        *,
        thread_id: str | None,
        agui_run_id: str | None,
        mode: str | None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> HostedRun:
        """Start a run of `prompt` and return once it is open. `traceparent` / `tracestate`:
        the W3C trace context of the request that asked for it, which the run's span continues
        when the engine traces (`Engine.open_run`; a value that does not parse is ignored)."""
        if self.draining:
            raise HttpError(
                503,
                "shutting_down",
                "The server is shutting down and starts no new runs; try again shortly.",
                headers=[("retry-after", str(RETRY_WHEN_SHUTTING_DOWN))],
            )
        wait = self.retry_after()
        if wait is not None:
            raise HttpError(
                429,
                "too_many_runs",
                "The server runs as many runs as it may at once; try again later.",
                headers=[("retry-after", str(wait))],
            )
        run_id = self.new_run_id(agui_run_id)
        if run_id in self._runs or self.engine.journal(run_id) is not None:
            raise HttpError(409, "run_exists", "A run with this id already exists.")
        hosted = HostedRun(
            run_id=run_id,
            thread_id=thread_id or f"thread-{uuid.uuid4().hex[:16]}",
            viewer_token=secrets.token_urlsafe(24),
            mode=mode or self.visibility,
            agui_run_id=agui_run_id or run_id,
        )
        self._runs[run_id] = hosted
        trace_context = (traceparent, tracestate)
        self.nursery.start_soon(self._drive, hosted, prompt, trace_context, name=f"run {run_id}")
        await hosted.started.wait()
        if hosted.run is None:
            self._runs.pop(run_id, None)
            raise HttpError(503, "run_failed", hosted.error or "The run could not be started.")
        return hosted

    async def _drive(
        self,
        hosted: HostedRun,
        prompt: str,
        trace_context: tuple[str | None, str | None] = (None, None),
    ) -> None:
        metadata = {"thread_id": hosted.thread_id}
        if hosted.agui_run_id != hosted.run_id:
            metadata["agui_run_id"] = hosted.agui_run_id
        # What serving the run's viewers after a restart (or from another node) needs.
        attributes = {
            "viewer_token_sha256": token_digest(hosted.viewer_token),
            "mode": hosted.mode,
            "agui_run_id": hosted.agui_run_id,
        }
        try:
            async with self.engine.open_run(
                run_id=hosted.run_id,
                thread_id=hosted.thread_id,
                metadata=metadata,
                attributes=attributes,
                traceparent=trace_context[0],
                tracestate=trace_context[1],
            ) as run:
                hosted.run = run
                hosted.started.set()
                try:
                    await self.parent_factory().run(run, prompt)
                except Exception as exc:
                    log.warning("run %s: the parent failed: %r", hosted.run_id, exc)
                    await run.fail(f"The parent agent failed: {type(exc).__name__}: {exc}")
        except Exception as exc:
            hosted.error = f"{type(exc).__name__}: {exc}"
            log.warning("run %s could not run: %s", hosted.run_id, hosted.error)
        finally:
            hosted.ended_at = trio.current_time()
            hosted.started.set()
            hosted.ended.set()
            self._note_change()

    async def find(self, run_id: str, token: str | None) -> HostedRun:
        """The run `run_id` if `token` is its viewer token: one this host runs, else one its
        engine's archive keeps (a run of an earlier process, or of another node). 404 for
        anything else, the same whether the run or the token is wrong."""
        presented = token or ""
        hosted = self._runs.get(run_id)
        if hosted is None and self.engine.archive is not None and len(run_id) <= 200:
            hosted = await self._archived(run_id)
        if hosted is not None and hosted.archived_journal is not None:
            expected = hosted.viewer_token  # the digest the archive kept
            presented = token_digest(presented)
        else:
            expected = hosted.viewer_token if hosted is not None else "x" * 32
        if not hmac.compare_digest(presented.encode(), expected.encode()) or hosted is None:
            raise HttpError(
                404, "unknown_run", "No such run, or the viewer token is not this run's."
            )
        return hosted

    async def _archived(self, run_id: str) -> HostedRun | None:
        """A run this host does not run, as its engine's archive keeps it (None: unknown)."""
        try:
            found = await self.engine.find_run(run_id)
        except OSError as exc:
            log.warning("reading run %s from the archive failed: %r", run_id, exc)
            raise store_unavailable("read") from None
        if found is None:
            return None
        record, journal = found
        if record is None:  # the engine still holds it: a run of this host, forgotten here
            return None
        digest = record.attributes.get("viewer_token_sha256")
        if not digest:
            return None
        hosted = HostedRun(
            run_id=run_id,
            thread_id=record.thread_id or "",
            viewer_token=digest,
            mode=record.attributes.get("mode") or self.visibility,
            agui_run_id=record.attributes.get("agui_run_id") or run_id,
            archived_journal=journal,
            owner=record.node,
        )
        hosted.started.set()
        if not record.live:
            hosted.ended.set()
        return hosted

    def local_run(self, run_id: str) -> HostedRun | None:
        """A run this host runs (no token check: for commands between nodes)."""
        hosted = self._runs.get(run_id)
        return hosted if hosted is not None and hosted.archived_journal is None else None

    def paused_on_thread(self, thread_id: str) -> HostedRun:
        """The live run of AG-UI thread `thread_id` whose `POST /agui` stream ended at an
        interrupt, for a resume to continue: 409 `stream_live` while a `POST /agui` stream of
        that thread still runs, 404 `no_live_run` when no live run of the thread waits."""
        live = [
            hosted
            for hosted in self._runs.values()
            if hosted.thread_id == thread_id and hosted.archived_journal is None and not hosted.over
        ]
        if any(hosted.agui_stream is not None for hosted in live):
            raise HttpError(
                409, "stream_live", "A stream of this thread is still live; resume after it ends."
            )
        paused = [hosted for hosted in live if hosted.agui_paused and hosted.run is not None]
        if not paused:
            raise HttpError(404, "no_live_run", "No live run of this thread waits for a resume.")
        return paused[-1]

    def refuse_unanswered(self, thread_id: str | None) -> None:
        """409 `interrupt_pending` when a live run of `thread_id` waits on open interrupts of
        its `POST /agui` stream: AG-UI's next run on that thread is the resume that answers
        them (https://docs.ag-ui.com/concepts/interrupts)."""
        if thread_id is None:
            return
        for hosted in self._runs.values():
            if (
                hosted.thread_id != thread_id
                or not hosted.agui_paused
                or hosted.run is None
                or hosted.over
                or not hosted.agui_suspensions
            ):
                continue
            asked = {question.id for question in hosted.agui_suspensions[-1].questions}
            pending = sorted(asked & {question.id for question in hosted.run.questions()})
            if pending:
                raise HttpError(
                    409,
                    "interrupt_pending",
                    "This thread's run waits on interrupts; resume it with an answer for each "
                    f"(RunAgentInput.resume): {', '.join(pending)[:400]}.",
                )

    def runs_named(self, agui_run_id: str) -> list[HostedRun]:
        """The hosted runs whose callers named them `agui_run_id` (callers choose these, so
        several may share one): what ties a caller's AG-UI run id to the runs here."""
        return [hosted for hosted in self._runs.values() if hosted.agui_run_id == agui_run_id]

    def stop(self, hosted: HostedRun, reason: str) -> None:
        if hosted.run is not None and not hosted.ended.is_set():
            hosted.run.cancel(reason)

    def runs_elsewhere(self, hosted: HostedRun) -> bool:
        """Whether `hosted` is live on another node (its stop and answers are forwarded)."""
        return hosted.archived_journal is not None and not hosted.ended.is_set()

    async def forward(self, hosted: HostedRun, command: dict[str, Any]) -> None:
        """Send a viewer's command for a run of another node to that node (`web.cluster`
        carries it out there). 409 when no node can be reached this way."""
        if self.shared is None or not hosted.owner:
            raise HttpError(409, "run_elsewhere", "The run is not served by this process.")
        try:
            await self.shared.send_command(hosted.owner, {**command, "run_id": hosted.run_id})
        except OSError as exc:
            log.warning("forwarding to node %s failed: %r", hosted.owner, exc)
            raise store_unavailable("reached") from None

    async def wait_archived_end(self, hosted: HostedRun, within: float) -> bool:
        """Wait at most `within` seconds for a run of another node to end; True if it did."""
        archive = self.engine.archive
        if archive is None:
            return False
        with trio.move_on_after(within):
            while True:
                try:
                    record = await archive.run(hosted.run_id)
                    if record is not None and not record.live:
                        hosted.ended.set()
                        return True
                    head = await archive.head(hosted.run_id)
                    await archive.wait_entries(hosted.run_id, head, 1.0)
                except OSError:
                    await trio.sleep(1.0)
        return False


async def _set_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class CountRequests:
    """ASGI middleware: counts the HTTP requests and WebSocket connections in flight on `host`
    (`RunHost.requests_in_flight`), each until its application call has returned, so after its
    last byte was handed to the server; `RunHost.drain` waits for the count to reach zero."""

    def __init__(self, app: Any, host: RunHost) -> None:
        self.app = app
        self.host = host

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        self.host.request_began()
        try:
            await self.app(scope, receive, send)
        finally:
            self.host.request_ended()


def _authorization(headers: Any) -> list[bytes]:
    """Every `Authorization` value of a Quart request's or WebSocket's headers."""
    return [value.encode("latin-1") for value in headers.getlist("authorization")]


def _viewer_token(headers: Any, args: Any, *, query: bool) -> str | None:
    """The viewer token of a request: `Authorization: Bearer`, or with `query` (the stream
    routes, for `EventSource` and browsers' WebSocket, which cannot send headers) `?token=`."""
    token = bearer_token(_authorization(headers))
    if token is None and query:
        value = args.get("token")
        token = str(value) if value is not None else None
    return token


class RunOver(Exception):
    """The viewer has everything: the run ended and its cursor is at the run's terminal."""


async def open_stream(
    host: RunHost,
    hosted: HostedRun,
    after: int | None,
    encoder: StreamEncoder,
    write: Callable[[list[Frame]], Out],
    *,
    keepalive: float,
    idle: Out | None = None,
    preamble: Out | None = None,
    opening: Callable[[], list[Frame]] | None = None,
    closing: Callable[[Sequence[JournalEntry]], list[Frame] | None] | None = None,
) -> AsyncGenerator[Out, None]:
    """A viewer's stream: the journal after `after`, then live, ending after the run's terminal;
    each batch of entries translated once into frames by `encoder` and written by `write`
    (`sse_bytes`, `websocket_messages`). Checks the cursor before returning (bad cursors are
    `HttpError`s, answered before anything is streamed; a cursor at the terminal of an ended run
    is `RunOver`). The stream subscribes to the journal only once it is iterated (a stream never
    iterated holds nothing) and first feeds the encoder the entries up to `after` (their frames
    discarded), so a reconnecting viewer's stream continues in the state the old one left.
    `preamble` (the SSE `retry:` field) goes out first; `idle` (the SSE keep-alive comment), if
    given, whenever the run has been quiet for `keepalive` seconds. `opening`, if given, is
    called once the history is replayed and its frames go out next (a resumed stream's
    RUN_STARTED); `closing`, if given, is called after each batch is translated, and frames it
    returns end the stream with that batch (an interrupt) although the run goes on."""
    journal = hosted.archived_journal or host.engine.journal(hosted.run_id)
    if journal is None:
        raise HttpError(404, "unknown_run", "The run's journal is no longer kept.")
    if after is not None and after > journal.head:
        raise HttpError(400, "bad_cursor", f"Cursor {after} is beyond the run's last event.")
    if after is not None and after == journal.head and hosted.over:
        raise RunOver()
    tail = None
    archive = host.engine.archive
    if hosted.archived_journal is not None and not hosted.ended.is_set() and archive is not None:
        # Live on another node: follow its journal in the shared store.
        wait = functools.partial(archive.wait_entries, hosted.run_id)
        tail = JournalTail(journal.store, after or 0, wait, wait_timeout=keepalive)
    return _stream(
        journal, after, encoder, write, keepalive, idle, preamble, tail, opening, closing
    )


async def _stream(
    journal: RunJournal,
    after: int | None,
    encoder: StreamEncoder,
    write: Callable[[list[Frame]], Out],
    keepalive: float,
    idle: Out | None,
    preamble: Out | None,
    tail: JournalTail | None = None,
    opening: Callable[[], list[Frame]] | None = None,
    closing: Callable[[Sequence[JournalEntry]], list[Frame] | None] | None = None,
) -> AsyncGenerator[Out, None]:
    subscription: Subscription | JournalTail = tail or journal.subscribe(after)
    try:
        async with subscription:
            if after:
                for entry in await journal.store.read_after(0, after):
                    if entry.cursor > after:  # gap markers stand for many cursors: stop here
                        break
                    encoder.frames(entry)
            if preamble is not None:
                yield preamble
            if opening is not None:
                opened = opening()
                if opened:
                    yield write(opened)
            while True:
                batch: list[JournalEntry] = []
                with trio.move_on_after(keepalive):
                    try:
                        batch = await subscription.receive_batch()
                    except trio.EndOfChannel:
                        return
                if not batch:
                    if idle is not None:
                        yield idle
                    continue
                frames = encoder.frames_batch(batch)
                last = closing(batch) if closing is not None else None
                if last:
                    yield write(frames + last)
                    return
                if frames:
                    yield write(frames)
    except OSError as exc:
        # The run store cannot be read (a Redis outage, say) and what this viewer needs next
        # is only there (a run of another node, or a reader behind the live fan-out): the
        # stream ends without the run's terminal, so the viewer reconnects from its last
        # cursor (for a run of another node, answered 503 store_unavailable while the store
        # stays unreadable), rather than the connection being cut by an error.
        log.warning("run %s: a stream ended, the run store cannot be read: %r", journal.run_id, exc)


#: Why a viewer's connection ended, as its span records it (`subagent.viewer.end`): the run's
#: terminal was sent; the `POST /agui` stream stopped at an interrupt (the run waits for a
#: resume); the stream stopped before the terminal (the journal could not be read on, and the
#: viewer reconnects from its cursor); the connection closed first (the viewer left, or the
#: listener dropped it); a WebSocket viewer sent more than the stream takes (closed 1008).
VIEWER_ENDS: Final = ("run_ended", "interrupt", "cut", "disconnected", "refused_messages")


class ViewerTrace:
    """The span of one viewer's connection to a run this host runs (`subagent.viewer
    <transport>`, `Run.traced`: a child of the run's span), from its first write to its close.

    Its attributes are identifiers and counts: the run, the transport (`sse`, `websocket`,
    `agui`), the mode and wire format, whether the stream resumed from a cursor (and which),
    and at the end how many events it was sent and why it ended (`VIEWER_ENDS`); never a
    token, a header or the URL's query. Made only when the engine traces (`viewer_trace`)."""

    def __init__(self, run: Run, transport: str, attributes: Mapping[str, Any]) -> None:
        self.run = run
        self.transport = transport
        self.attributes = attributes
        #: Events written to the viewer so far.
        self.events = 0
        #: Why the connection ended (one of `VIEWER_ENDS`), once known.
        self.end: str | None = None

    def counting(self, write: Callable[[list[Frame]], Out]) -> Callable[[list[Frame]], Out]:
        """`write` (`sse_bytes`), counting the events it writes."""

        def counted(frames: list[Frame]) -> Out:
            self.events += len(frames)
            return write(frames)

        return counted

    @contextmanager
    def span(self) -> Iterator[None]:
        """The connection's span, open for the block; on leaving it records what was sent and
        why it ended (`disconnected` unless the block said otherwise)."""
        name = f"subagent.viewer {self.transport}"
        with self.run.traced(name, kind="server", attributes=self.attributes) as span:
            try:
                yield
            finally:
                span.set_attributes(
                    {
                        "subagent.viewer.events": self.events,
                        "subagent.viewer.end": self.end or "disconnected",
                    }
                )

    async def traced(self, body: AsyncGenerator[Out, None]) -> AsyncGenerator[Out, None]:
        """`body` (an SSE response body) inside the connection's span; closes `body` when it is
        closed (Quart closes a response body in the request's task, so the span's context is
        entered and left in that one task). A viewer that goes away ends the span as
        `disconnected`, which is not a failure of the span's work."""
        with self.span():
            async with aclosing(body):
                try:
                    async for chunk in body:
                        yield chunk
                except GeneratorExit:
                    self.end = "disconnected"
                    return
                self.finished()

    def finished(self) -> None:
        """The stream came to its end: after the run's terminal, or cut before it."""
        if self.end is None:
            self.end = "run_ended" if self.run.journal.ended else "cut"


def viewer_trace(
    host: RunHost,
    hosted: HostedRun,
    transport: str,
    *,
    mode: str,
    wire_format: str,
    after: int | None,
) -> ViewerTrace | None:
    """The span of a viewer's connection to `hosted` (`ViewerTrace`), or None: when the engine
    does not trace (so an untraced server does nothing more per viewer than this test), and for
    a run this host does not run (another node's, or an earlier process's: the archive keeps no
    trace context of its run, so there is no run span to be a child of)."""
    if not host.engine.tracing.enabled or hosted.run is None or hosted.archived_journal is not None:
        return None
    attributes: dict[str, Any] = {
        "subagent.viewer.transport": transport,
        "subagent.viewer.mode": mode,
        "subagent.viewer.format": wire_format,
        "subagent.viewer.resumed": after is not None,
    }
    if after is not None:
        attributes["subagent.viewer.after_cursor"] = after
    return ViewerTrace(hosted.run, transport, attributes)


def _trace_context(headers: Any) -> tuple[str | None, str | None]:
    """The W3C trace context a request carries (https://www.w3.org/TR/trace-context/, the
    `traceparent` and `tracestate` headers): its one `traceparent` (two name no single parent,
    so neither is used) and its `tracestate` headers joined into one list, as the specification
    asks of repeated ones. What does not parse is the engine's to ignore (`Engine.open_run`)."""
    parents = headers.getlist("traceparent")
    if len(parents) != 1:
        return None, None
    states = headers.getlist("tracestate")
    return parents[0], ",".join(states) if states else None


def create_app(
    host: RunHost,
    config: HostConfig,
    encoder_factory: EncoderFactory,
    *,
    ready: Callable[[], bool] = lambda: True,
    page: bytes | None = None,
    host_token: str | None = None,
    artifact_max_bytes: int = ARTIFACT_MAX_BYTES,
    metrics: Metrics | None = None,
) -> RequestGuard:
    """The Quart-Trio application over `host`, behind the request guard (`adapters.listener`):
    the ASGI app to serve. `host_token`, when given, is the bearer credential that starting a
    run (`POST /runs`, `POST /agui`) requires; `artifact_max_bytes` bounds what the artifacts
    route serves (`web.artifacts`). `metrics`, when given, is served at `GET /metrics`
    (`web.metrics`; else that route is 404)."""
    app = QuartTrio("subagent_engine", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_body_bytes
    allowed_origins = frozenset(config.server.cors_origins)
    keepalive = config.server.keepalive_seconds
    # Each SSE stream opens with `retry:` so a browser that loses the connection comes back
    # after reconnect_ms (EventSource's default is ~3 s) with Last-Event-ID.
    retry_field = b"retry: %d\n\n" % config.server.reconnect_ms

    def error_response(
        status: int, error: str, message: str, headers: Sequence[tuple[str, str]] = ()
    ) -> Response:
        response = Response(
            json.dumps({"error": error, "message": message}),
            status=status,
            content_type="application/json",
        )
        for name, value in headers:
            response.headers[name] = value
        return response

    @app.errorhandler(Refusal)
    async def _refused(exc: Refusal) -> Response:
        response = error_response(exc.status, exc.error, exc.message, exc.headers)
        if exc.details:
            response.set_data(exc.body())
        return response

    @app.errorhandler(HTTPException)
    async def _http_exception(exc: HTTPException) -> Response:
        status = exc.code or 400
        if status == 413:
            limit = config.server.max_body_bytes
            return error_response(413, "too_large", f"The request body is over {limit} bytes.")
        if status == 404:
            return error_response(404, "not_found", "No such route.")
        if status == 405:
            return error_response(
                405, "method_not_allowed", "This route does not take that method."
            )
        if status == 400 and not has_websocket_context() and request.path.endswith("/ws"):
            return error_response(400, "websocket_required", "This route is a WebSocket.")
        name = (exc.name or "error").lower().replace(" ", "_")
        return error_response(status, name, exc.description or "The request was refused.")

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        if has_websocket_context():
            # A WebSocket whose peer broke the connection mid-handshake; nothing to answer.
            log.debug("websocket %s failed: %r", websocket.path[:200], exc)
        else:
            log.exception("request %s %s failed", request.method, request.path[:200])
        return error_response(500, "internal_error", "The server failed to answer this request.")

    @app.after_request
    async def _cors(response: Response) -> Response:
        origin = request.headers.get("origin")
        if origin and origin in allowed_origins:
            response.headers["access-control-allow-origin"] = origin
            response.headers["vary"] = "Origin"
            response.headers["access-control-allow-headers"] = (
                "authorization, content-type, last-event-id"
            )
            response.headers["access-control-allow-methods"] = "GET, POST, OPTIONS"
            response.headers["access-control-expose-headers"] = "x-run-id, x-viewer-token"
        return response

    def require_host_token() -> None:
        if host_token is not None:
            require_bearer(
                _authorization(request.headers),
                host_token,
                message="Starting a run needs the server's host token: "
                "'Authorization: Bearer <token>'.",
            )

    async def read_json() -> Any:
        return parse_json_body(
            await request.get_data(cache=False, as_text=False, parse_form_data=False)
        )

    def trace_context() -> tuple[str | None, str | None]:
        """The request's W3C trace context, for the run it starts (read only when tracing)."""
        if not host.engine.tracing.enabled:
            return None, None
        return _trace_context(request.headers)

    async def start_hosted() -> HostedRun:
        require_host_token()
        prompt, thread_id, agui_run_id, mode = _read_run_input(
            await read_json(), request.args.get("mode")
        )
        _format(request.args.get("format"))  # refused before the run starts
        traceparent, tracestate = trace_context()
        return await host.start(
            prompt,
            thread_id=thread_id,
            agui_run_id=agui_run_id,
            mode=mode,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    async def sse_stream(
        hosted: HostedRun,
        after: int | None,
        encoder: StreamEncoder,
        write: Callable[[list[Frame]], bytes] = sse_bytes,
    ) -> AsyncGenerator[bytes, None]:
        return await open_stream(
            host,
            hosted,
            after,
            encoder,
            write,
            keepalive=keepalive,
            idle=KEEPALIVE,
            preamble=retry_field,
        )

    def sse_response(hosted: HostedRun, body: AsyncIterable[bytes]) -> Response:
        response = Response(body, content_type="text/event-stream")
        response.headers["cache-control"] = "no-cache"
        response.headers["x-accel-buffering"] = "no"
        response.headers["x-run-id"] = hosted.run_id
        response.timeout = None  # a stream lasts as long as its run
        return response

    @app.post("/agui")
    async def agui() -> Response:
        """A new run, or (`resume` entries) the continuation of the thread's run whose last
        `POST /agui` stream ended at an interrupt (see `_read_resume`)."""
        require_host_token()
        document = await read_json()
        prompt, thread_id, agui_run_id, mode = _read_run_input(document, request.args.get("mode"))
        if mode is None:
            mode = _client_mode(document, host.visibility)
        wire_format = _format(request.args.get("format"))  # refused before the run starts
        resume = _read_resume(document)
        if resume:
            if wire_format != "agui":
                raise HttpError(400, "bad_resume", "A resumed stream is AG-UI (no ?format=).")
            return await resume_agui(document, resume, thread_id, agui_run_id)
        host.refuse_unanswered(thread_id)
        traceparent, tracestate = trace_context()
        hosted = await host.start(
            prompt,
            thread_id=thread_id,
            agui_run_id=agui_run_id,
            mode=mode,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        encoder = _encoder(encoder_factory, hosted, hosted.mode, wire_format)
        interrupting = _interrupting(document, hosted.mode, encoder)
        viewer = viewer_trace(
            host, hosted, "agui", mode=hosted.mode, wire_format=wire_format, after=None
        )
        response = await agui_stream(hosted, None, encoder, interrupting, viewer)
        # The caller started the run and needs its token to watch it again after a drop.
        response.headers["x-viewer-token"] = hosted.viewer_token
        return response

    async def resume_agui(
        document: dict[str, Any],
        entries: list[ResumeEntry],
        thread_id: str | None,
        agui_run_id: str | None,
    ) -> Response:
        """Answer the interrupts the thread's run stopped its last `POST /agui` stream at, then
        stream that run on from where that stream ended. Every refusal comes before anything
        is answered or streamed (but a question another surface closes meanwhile)."""
        if thread_id is None:
            raise HttpError(400, "bad_resume", "A resume names the thread it continues: threadId.")
        hosted = host.paused_on_thread(thread_id)
        run = hosted.run
        assert run is not None  # (paused_on_thread)
        encoder = _encoder(encoder_factory, hosted, hosted.mode, None)
        if not isinstance(encoder, AguiStreamEncoder):
            raise HttpError(409, "resume_unsupported", "This server's streams cannot resume.")
        plan = _resume_plan(entries, hosted, run.questions())
        answered_by = _answered_by(document)
        for entry, question, text, data in plan:
            try:
                if entry.status == "cancelled":
                    run.decline(
                        question.delegation_id,
                        question_id=question.id,
                        then=InputExpiry.RETURN,
                        surface=AnswerSurface.AGUI_RESUME,
                        answered_by=answered_by,
                    )
                else:
                    run.answer(
                        question.delegation_id,
                        text=text,
                        data=data,
                        question_id=question.id,
                        surface=AnswerSurface.AGUI_RESUME,
                        answered_by=answered_by,
                    )
            except DelegationError as exc:
                if entry.status == "cancelled" and exc.code in _NOTHING_TO_DECLINE:
                    continue  # it closed meanwhile: there is nothing left to give up
                raise answer_refusal(exc) from None
        hosted.agui_paused = False
        suspension = hosted.agui_suspensions[-1]
        resumes = len(hosted.agui_suspensions)
        new_run_id = agui_run_id or f"{hosted.agui_run_id}-resume-{resumes}"
        resumed = ResumedEncoder(encoder, suspension, new_run_id)
        interrupting = _interrupting(document, hosted.mode, encoder)
        viewer = viewer_trace(
            host, hosted, "agui", mode=hosted.mode, wire_format="agui", after=suspension.cursor
        )
        try:
            return await agui_stream(
                hosted, suspension.cursor, resumed, interrupting, viewer, opening=resumed.opening
            )
        except RunOver:
            raise HttpError(404, "no_live_run", "The run ended before its resume.") from None

    async def agui_stream(
        hosted: HostedRun,
        after: int | None,
        encoder: StreamEncoder,
        interrupting: AguiStreamEncoder | None,
        viewer: ViewerTrace | None,
        *,
        opening: Callable[[], list[Frame]] | None = None,
    ) -> Response:
        """A `POST /agui` answer: the run's stream after `after`, ending at the run's terminal
        or, when `interrupting` (the stream's AG-UI encoder) is given, at the first open
        question it shows (`AguiStreamEncoder.suspend`; the run goes on and waits for a
        resume). The client closing it early stops the run (AG-UI's way to abort). `viewer`:
        the connection's span, when traced."""
        token = object()
        suspended = False

        def at_interrupt(batch: Sequence[JournalEntry]) -> list[Frame] | None:
            nonlocal suspended
            run = hosted.run
            if interrupting is None or run is None or not interrupting.open_questions:
                return None
            still_open = {question.id for question in run.questions()}
            asked = [q for q in interrupting.open_questions if q.id in still_open]
            frames = interrupting.suspend(asked) if asked else []
            if not frames:
                return None
            hosted.agui_suspensions.append(AguiSuspension(batch[-1].cursor, tuple(asked)))
            hosted.agui_paused = suspended = True
            if viewer is not None:
                viewer.end = "interrupt"
            if hosted.agui_stream is token:
                hosted.agui_stream = None
            return frames

        stream = await open_stream(
            host,
            hosted,
            after,
            encoder,
            viewer.counting(sse_bytes) if viewer is not None else sse_bytes,
            keepalive=keepalive,
            idle=KEEPALIVE,
            preamble=retry_field,
            opening=opening,
            closing=at_interrupt if interrupting is not None else None,
        )

        async def body() -> AsyncGenerator[bytes, None]:
            finished = False
            hosted.agui_stream = token
            try:
                async for chunk in stream:
                    yield chunk
                finished = True
            finally:
                if hosted.agui_stream is token:
                    hosted.agui_stream = None
                if not finished and not suspended:
                    # The client went away: an AG-UI client's way to stop (not after the
                    # interrupt it was sent: the run waits for the resume).
                    host.stop(hosted, "The client closed the run's stream.")

        return sse_response(hosted, viewer.traced(body()) if viewer is not None else body())

    @app.post("/runs")
    async def start_run() -> Response:
        hosted = await start_hosted()
        document = {
            "run_id": hosted.run_id,
            "thread_id": hosted.thread_id,
            "agui_run_id": hosted.agui_run_id,
            "viewer_token": hosted.viewer_token,
            "mode": hosted.mode,
            "events_url": f"/runs/{hosted.run_id}/events",
            "websocket_url": f"/runs/{hosted.run_id}/ws",
        }
        return Response(json.dumps(document), status=201, content_type="application/json")

    @app.route("/runs/<run_id>/events", methods=["GET"])
    async def events(run_id: str) -> Response:
        token = _viewer_token(request.headers, request.args, query=True)
        hosted = await host.find(run_id, token)
        after = parse_cursor(request.headers.get("last-event-id") or request.args.get("after"))
        mode = _mode(request.args.get("mode"), hosted.mode)
        wire_format = _format(request.args.get("format"))
        encoder = _encoder(encoder_factory, hosted, mode, wire_format)
        viewer = None
        if request.method != "HEAD":
            viewer = viewer_trace(
                host, hosted, "sse", mode=mode, wire_format=wire_format, after=after
            )
        write = viewer.counting(sse_bytes) if viewer is not None else sse_bytes
        try:
            stream = await sse_stream(hosted, after, encoder, write)
        except RunOver:
            # 204 tells an EventSource to stop reconnecting (HTML standard, "server-sent
            # events", section 9.2.3: any status but 200 fails the connection for good).
            return Response(b"", status=204)
        if request.method == "HEAD":
            return sse_response(hosted, _empty())
        return sse_response(hosted, viewer.traced(stream) if viewer is not None else stream)

    @app.get("/runs/<run_id>/audit")
    async def audit(run_id: str) -> Response:
        """The run's audit trail: one record per delegation (every protocol id, status, error
        code, remote cancel outcome, times), as its store keeps it. Needs the viewer token."""
        hosted = await host.find(run_id, _viewer_token(request.headers, request.args, query=False))
        archive = host.engine.archive
        if archive is None:
            raise HttpError(
                404, "no_audit_trail", "This server keeps runs in memory only ([store])."
            )
        try:
            record = await archive.run(run_id)
            audits = await archive.audits(run_id)
        except OSError:
            raise store_unavailable("read") from None
        document = {
            "run_id": hosted.run_id,
            "thread_id": hosted.thread_id,
            "node": record.node if record is not None else "",
            "started_at": record.started_at if record is not None else None,
            "ended_at": record.ended_at if record is not None else None,
            "outcome": record.outcome if record is not None else None,
            "delegations": [to_jsonable(item) for item in audits],
        }
        return Response(json.dumps(document), content_type="application/json")

    @app.post("/runs/<run_id>/stop")
    async def stop(run_id: str) -> Response:
        hosted = await host.find(run_id, _viewer_token(request.headers, request.args, query=False))
        if host.runs_elsewhere(hosted):
            await host.forward(hosted, {"op": "stop", "reason": "Stopped by a viewer."})
            await host.wait_archived_end(hosted, 30)
        else:
            host.stop(hosted, "Stopped by a viewer.")
            with trio.move_on_after(30):
                await hosted.ended.wait()
        document = {"run_id": run_id, "stopped": hosted.ended.is_set()}
        return Response(json.dumps(document), content_type="application/json")

    @app.post("/runs/<run_id>/answer")
    async def answer(run_id: str) -> Response:
        """Answer a subagent's question (`subagent.input_required` on the stream):
        `{"delegationId", "questionId"?, "text"?, "data"?, "answeredBy"?, "surface"?}`. The
        first answer from any surface wins: a closed question is 409 `question_closed` (its
        `details` say how it closed and who answered), an answer that does not match the
        question's schema 422 `answer_invalid` (the question stays open)."""
        hosted = await host.find(run_id, _viewer_token(request.headers, request.args, query=False))
        body = _read_answer(await read_json())
        if host.runs_elsewhere(hosted):
            command = {"op": "answer", **body.command()}
            await host.forward(hosted, command)
            document = {"run_id": run_id, "delegation_id": body.delegation_id, "forwarded": True}
            return Response(json.dumps(document), status=202, content_type="application/json")
        if hosted.run is None or hosted.over:
            raise HttpError(409, "run_ended", "The run has ended; there is nothing to answer.")
        try:
            closed = body.give(hosted.run)
        except DelegationError as exc:
            raise answer_refusal(exc) from None
        document = {
            "run_id": run_id,
            "delegation_id": body.delegation_id,
            "question_id": closed.id,
            "answered": True,
        }
        return Response(json.dumps(document), status=202, content_type="application/json")

    @app.websocket("/runs/<run_id>/ws")
    async def ws(run_id: str) -> None:
        try:
            token = _viewer_token(websocket.headers, websocket.args, query=True)
            hosted = await host.find(run_id, token)
            after = parse_cursor(websocket.args.get("after"))
            mode = _mode(websocket.args.get("mode"), hosted.mode)
            wire_format = _format(websocket.args.get("format"))
            encoder = _encoder(encoder_factory, hosted, mode, wire_format)
            viewer = viewer_trace(
                host, hosted, "websocket", mode=mode, wire_format=wire_format, after=after
            )
            one_each = websocket_messages
            write = viewer.counting(one_each) if viewer is not None else one_each
            stream = await open_stream(host, hosted, after, encoder, write, keepalive=keepalive)
        except RunOver:
            await websocket.accept()
            await websocket.close(1000)
            return
        except Refusal as exc:
            # Refused after the handshake, so the client can read why (browsers hide the
            # status of a refused handshake); close code 4000 + the HTTP status's last digits.
            await websocket.accept()
            await websocket.send(json.dumps({"error": exc.error, "message": exc.message}))
            await websocket.close(4000 + exc.status % 1000)
            return
        await websocket.accept()
        with viewer.span() if viewer is not None else nullcontext():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_discard_messages, nursery.cancel_scope)
                async for messages in stream:
                    for message in messages:
                        await websocket.send(message)
                if viewer is not None:
                    viewer.finished()
                nursery.cancel_scope.cancel()
            if viewer is not None and viewer.end is None:
                viewer.end = "refused_messages"  # (`_discard_messages` closed it)
        await websocket.close(1000)

    @app.get("/runs/<run_id>/artifacts/<delegation_id>/<artifact_id>")
    async def artifact(run_id: str, delegation_id: str, artifact_id: str) -> Response:
        """One artifact's content for the run's viewers (`web.artifacts`): the viewer token as a
        bearer or `?token=` (a link the page opens); 401 without one."""
        token = _viewer_token(request.headers, request.args, query=True)
        if not token:
            raise HttpError(401, "unauthorized", "This route needs the run's viewer token.")
        hosted = await host.find(run_id, token)
        run = None if host.runs_elsewhere(hosted) else hosted.run
        try:
            body, headers = artifact_response_parts(
                run, delegation_id, artifact_id, max_bytes=artifact_max_bytes
            )
        except ArtifactRefused as refused:
            raise HttpError(refused.status, refused.code, refused.message) from None
        response = Response(body, status=200)
        for name, value in headers:
            response.headers[name] = value
        return response

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(json.dumps({"status": "ok"}), content_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        ok = ready()
        document = {"status": "ready" if ok else "starting", "active_runs": host.active_runs}
        return Response(
            json.dumps(document), status=200 if ok else 503, content_type="application/json"
        )

    if metrics is not None:

        @app.get("/metrics")
        async def metrics_route() -> Response:
            return metrics.response(_authorization(request.headers))

    if page is not None:

        @app.get("/")
        async def index() -> Response:
            return Response(page, content_type="text/html; charset=utf-8")

    served: Any = CountRequests(app, host)
    return RequestGuard(
        metrics.count_viewers(served) if metrics is not None else served,
        allowed_hosts=config.server.allowed_hosts,
        allowed_origins=allowed_origins,
        json_only=True,
    )


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


async def _discard_messages(scope: trio.CancelScope) -> None:
    """Read (and drop) what a WebSocket viewer sends, so nothing piles up unread: a burst of
    `WS_MESSAGE_BURST`, then one per second; a viewer that sends more is disconnected (1008).
    Messages are bounded in size by the listener."""
    allowance = float(WS_MESSAGE_BURST)
    last = trio.current_time()
    while True:
        await websocket.receive()
        now = trio.current_time()
        allowance = min(float(WS_MESSAGE_BURST), allowance + (now - last)) - 1
        last = now
        if allowance < 0:
            await websocket.close(1008, "This stream takes no messages.")
            scope.cancel()
            return


#: Wire formats a viewer may ask for with `?format=`: AG-UI (default) or the engine's envelope.
FORMATS: Final = ("agui", "engine")


def _format(value: str | None) -> str:
    if value is None:
        return FORMATS[0]
    if value not in FORMATS:
        raise HttpError(400, "bad_format", f"format must be one of {', '.join(FORMATS)}.")
    return value


def _encoder(
    factory: EncoderFactory, hosted: HostedRun, mode: str, wire_format: str | None
) -> StreamEncoder:
    if _format(wire_format) == "engine":
        return EngineEventEncoder(hosted.thread_id, hosted.run_id, mode)
    return factory(hosted.thread_id, hosted.agui_run_id, mode, hosted.shared)


def _mode(value: str | None, default: str) -> str:
    if value is None:
        return default
    if value not in MODES:
        raise HttpError(400, "bad_mode", f"mode must be one of {', '.join(MODES)}.")
    return value


#: The fields of a `RunAgentInput` the protocol requires but this server can do without: the
#: ids it makes itself when a caller sends none, and no messages (an empty prompt).
_OPTIONAL_INPUT: Final = (("threadId", "thread_id"), ("runId", "run_id"), ("messages", "messages"))
#: A run id or thread id a caller names: what a stream repeats back and a page may show.
MAX_ID_CHARS: Final = 128


def _read_run_input(
    document: Any, mode: str | None
) -> tuple[str, str | None, str | None, str | None]:
    """The parts of an AG-UI `RunAgentInput` (read with the protocol's own model,
    `ag_ui.core.RunAgentInput`) the server uses: the last user message as the prompt, `threadId`,
    `runId`, and the visibility mode (`?mode=` or `forwardedProps.mode`). `threadId`, `runId`
    and `messages` may be left out (`_OPTIONAL_INPUT`); whatever else the model refuses is a
    400 `bad_input` naming the field (`messages[0].content: ...`)."""
    if not isinstance(document, dict):
        raise HttpError(400, "bad_input", "The body must be a RunAgentInput JSON object.")
    absent = {
        alias for alias, name in _OPTIONAL_INPUT if alias not in document and name not in document
    }
    filled = {alias: [] if alias == "messages" else "-" for alias in absent}
    try:
        run_input = RunAgentInput.model_validate({**document, **filled})
    except pydantic.ValidationError as exc:
        error = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        where = _field_path(document, error["loc"])
        raise HttpError(400, "bad_input", f"{where}: {error['msg'][:200]}.") from None
    except RecursionError:
        raise HttpError(400, "bad_input", "The body is nested too deeply.") from None
    prompt = ""
    for message in reversed(run_input.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                prompt = content
            else:
                prompt = " ".join(part.text for part in content if isinstance(part, TextPart))
            break
    if len(prompt) > MAX_PROMPT_CHARS:
        raise HttpError(400, "bad_input", f"The prompt is over {MAX_PROMPT_CHARS} characters.")
    ids: list[str | None] = []
    for alias, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if alias in absent:
            ids.append(None)
        elif not value or len(value) > MAX_ID_CHARS or not value.isprintable():
            raise HttpError(
                400, "bad_input", f"{alias} must be 1 to {MAX_ID_CHARS} printable characters."
            )
        else:
            ids.append(value)
    props = run_input.forwarded_props
    if mode is None and isinstance(props, dict) and isinstance(props.get("mode"), str):
        mode = props["mode"]
    if mode is not None:
        mode = _mode(mode, mode)
    return prompt, ids[0], ids[1], mode


def _client_mode(document: dict[str, Any], default: str) -> str:
    """The mode of a `POST /agui` stream that names none (`?mode=`, `forwardedProps.mode`):
    `attributed` or `custom` by what the client declares (`adapters.agui.stream_mode`), else
    `default`; 400 `bad_capabilities` for a declaration that cannot be read."""
    props = document.get("forwardedProps", document.get("forwarded_props"))
    version = document.get("protocolVersion", document.get("protocol_version"))
    try:
        return stream_mode(props, version if isinstance(version, str) else None, default)
    except CapabilityError as exc:
        raise HttpError(400, "bad_capabilities", str(exc)) from None


#: At most this many entries in one `RunAgentInput.resume`.
MAX_RESUME_ENTRIES: Final = 64
#: Refusals that leave a `cancelled` resume entry nothing to do (its question closed already).
_NOTHING_TO_DECLINE: Final = frozenset({ErrorCode.QUESTION_CLOSED, ErrorCode.INVALID_INPUT})


def _read_resume(document: Any) -> list[ResumeEntry]:
    """The `resume` entries of a `RunAgentInput` (AG-UI 1.0, `ag_ui.core.ResumeEntry`: each
    `{interruptId, status: resolved | cancelled, payload?}`), [] for none. A resolved entry's
    `payload` is the answer: a string is its text, an object its data (checked against the
    question's `responseSchema`); a cancelled one declines the question, and its delegation
    ends `input_required` for the parent model to decide (`Run.decline(then="return")`)."""
    raw = document.get("resume") if isinstance(document, dict) else None
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_RESUME_ENTRIES:
        raise HttpError(
            400, "bad_resume", f"resume must be a list of at most {MAX_RESUME_ENTRIES} entries."
        )
    try:
        return [ResumeEntry.model_validate(item) for item in raw]
    except pydantic.ValidationError as exc:
        error = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise HttpError(400, "bad_resume", f"resume {where}: {error['msg'][:200]}.") from None


def _answer_of(entry: ResumeEntry) -> tuple[str | None, dict[str, Any] | None]:
    """(text, data) of a resolved entry's payload, or a 400."""
    payload = entry.payload
    if isinstance(payload, str):
        return payload, None
    if isinstance(payload, dict):
        return None, payload
    raise HttpError(
        400,
        "bad_resume",
        f"The payload resolving {entry.interrupt_id[:80]!r} must be a string or an object.",
    )


def _resume_plan(
    entries: Sequence[ResumeEntry], hosted: HostedRun, open_now: Sequence[Question]
) -> list[tuple[ResumeEntry, Question, str | None, dict[str, Any] | None]]:
    """What a resume asks, checked before any of it is done: (entry, its question, text,
    data), the entries for questions no longer open first (the engine refuses those without
    changing anything). 400 `bad_resume` for an entry naming no interrupt of this run's
    streams, an interrupt named twice, a payload that is no answer, or an open interrupt of
    the last suspension left unanswered (AG-UI: a resume answers every open interrupt); 422
    `answer_invalid` for an answer its question's schema refuses."""
    known = {q.id: q for suspension in hosted.agui_suspensions for q in suspension.questions}
    still_open = {question.id for question in open_now}
    named: set[str] = set()
    plan = []
    for entry in entries:
        iid = entry.interrupt_id
        if iid in named:
            raise HttpError(400, "bad_resume", f"Interrupt {iid[:80]!r} is answered twice.")
        named.add(iid)
        question = known.get(iid)
        if question is None:
            raise HttpError(
                400, "bad_resume", f"{iid[:80]!r} names no interrupt of this thread's run."
            )
        text, data = _answer_of(entry) if entry.status == "resolved" else (None, None)
        if entry.status == "resolved" and iid in still_open:
            _check_answer(question, text, data)
        plan.append((entry, question, text, data))
    unanswered = [
        q.id
        for q in hosted.agui_suspensions[-1].questions
        if q.id in still_open and q.id not in named
    ]
    if unanswered:
        raise HttpError(
            400,
            "bad_resume",
            f"A resume answers every open interrupt; unanswered: {', '.join(unanswered)[:400]}.",
        )
    plan.sort(key=lambda step: step[1].id in still_open)
    return plan


def _check_answer(question: Question, text: str | None, data: dict[str, Any] | None) -> None:
    """422 `answer_invalid` for an answer the engine would refuse for `question`, so that no
    entry of a resume is answered while another is refused."""
    try:
        check_answer(question, text, data)
    except DelegationError as exc:
        raise answer_refusal(exc) from None


def _answered_by(document: Any) -> str | None:
    """Who answers through a resume: `forwardedProps.answeredBy` (at most 200 characters)."""
    props = document.get("forwardedProps") if isinstance(document, dict) else None
    value = props.get("answeredBy") if isinstance(props, dict) else None
    return value[:200] if isinstance(value, str) and value.strip() else None


def _interrupting(document: Any, mode: str, encoder: StreamEncoder) -> AguiStreamEncoder | None:
    """The encoder of a `POST /agui` stream that ends at a question (AG-UI interrupts), None
    for one that does not. AG-UI streams in
    every mode but `custom` (whose CUSTOM `subagent.interrupt` events leave the stream open,
    answered through `POST /runs/<id>/answer`), unless the caller opts out with
    `forwardedProps.interrupts: false` (its stream then stays open at a question, as the
    `GET` streams do)."""
    if mode == "custom" or not isinstance(encoder, AguiStreamEncoder):
        return None
    props = document.get("forwardedProps") if isinstance(document, dict) else None
    if isinstance(props, dict) and props.get("interrupts") is False:
        return None
    return encoder


class ResumedEncoder:
    """The encoder of a `POST /agui` stream that resumes a run: fed the run's history up to
    the interrupt its last `POST /agui` stream ended at, then suspended there with the same
    questions, it is in the state that stream left (the encoder is deterministic); `opening`
    gives the new stream's first frames: RUN_STARTED as AG-UI run `run_id` and the suspended
    subagents announced again (`AguiStreamEncoder.resume`). Earlier interrupts of the run need
    no replaying: a suspension closes only what the next one closes anyway, and a resume opens
    again every subagent it suspended."""

    def __init__(self, encoder: AguiStreamEncoder, suspension: AguiSuspension, run_id: str):
        self.encoder = encoder
        self.suspension = suspension
        self.run_id = run_id

    def frames(self, entry: JournalEntry) -> list[Frame]:
        return self.encoder.frames(entry)

    def frames_batch(self, entries: Sequence[JournalEntry]) -> list[Frame]:
        return self.encoder.frames_batch(entries)

    def opening(self) -> list[Frame]:
        self.encoder.suspend(list(self.suspension.questions))
        return self.encoder.resume(self.run_id)


def _field_path(document: Any, loc: Sequence[int | str]) -> str:
    """A validation error's location as the field a caller wrote (`messages[0].content`): the
    steps of `loc` that are keys and indexes of `document`, without the names pydantic gives
    the branches of a union (`user`, `str`, ...); at most 120 characters."""
    path = ""
    node = document
    for step, key in enumerate(loc):
        last = step == len(loc) - 1
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            path += f"[{key}]"
            node = node[key]
        elif isinstance(key, str) and isinstance(node, dict) and (key in node or last):
            path += f".{key}" if path else key
            node = node.get(key)
    return path[:120] or "body"


#: The surfaces an HTTP answer may say it came from (the bundled page says `page`).
_HTTP_SURFACES: Final = frozenset({AnswerSurface.HTTP, AnswerSurface.PAGE})


@attrs.frozen
class AnswerBody:
    """An answer as the HTTP answer endpoint read it."""

    delegation_id: str
    text: str | None
    data: dict[str, Any] | None
    question_id: str | None = None
    answered_by: str | None = None
    surface: str = AnswerSurface.HTTP

    def command(self) -> dict[str, Any]:
        """The fields of a forwarded `answer` command (`web.cluster`)."""
        return {
            "delegation_id": self.delegation_id,
            "text": self.text,
            "data": self.data,
            "question_id": self.question_id,
            "answered_by": self.answered_by,
            "surface": self.surface,
        }

    def give(self, run: Run) -> Question:
        return run.answer(
            self.delegation_id,
            text=self.text,
            data=self.data,
            question_id=self.question_id,
            surface=self.surface,
            answered_by=self.answered_by,
        )


def answer_refusal(exc: DelegationError) -> HttpError:
    """The HTTP refusal of an answer the run refused (see `Run.answer`)."""
    status = {
        ErrorCode.QUESTION_CLOSED: 409,
        ErrorCode.ANSWER_INVALID: 422,
        ErrorCode.DELEGATION_NOT_FOUND: 404,
    }.get(exc.code, 409)
    code = exc.code if exc.code != ErrorCode.INVALID_INPUT else "not_waiting"
    return HttpError(status, code, exc.message, details=exc.metadata)


def _optional_label(document: dict[str, Any], key: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 200:
        raise HttpError(400, "bad_answer", f"{key} must be a string of at most 200 characters.")
    return value


def _read_answer(document: Any) -> AnswerBody:
    """The answer in a request body, or a 400 naming the field."""
    if not isinstance(document, dict):
        raise HttpError(400, "bad_answer", "The answer must be a JSON object.")
    fields = {"delegationId", "questionId", "text", "data", "answeredBy", "surface"}
    unknown = sorted(set(document) - fields)
    if unknown:
        raise HttpError(400, "bad_answer", f"Unknown field {unknown[0][:64]!r} in the answer.")
    delegation_id = document.get("delegationId")
    if not isinstance(delegation_id, str) or not delegation_id or len(delegation_id) > 200:
        raise HttpError(400, "bad_answer", "delegationId must be the waiting subagent's id.")
    text, data = document.get("text"), document.get("data")
    if text is not None and not isinstance(text, str):
        raise HttpError(400, "bad_answer", "text must be a string.")
    if data is not None and not isinstance(data, dict):
        raise HttpError(400, "bad_answer", "data must be a JSON object.")
    if (text is None or not text.strip()) and data is None:
        raise HttpError(400, "bad_answer", "An answer needs text (not blank) or data.")
    surface = document.get("surface", AnswerSurface.HTTP)
    if surface not in _HTTP_SURFACES:
        raise HttpError(400, "bad_answer", f"surface must be one of {sorted(_HTTP_SURFACES)}.")
    return AnswerBody(
        delegation_id=delegation_id,
        text=text,
        data=data,
        question_id=_optional_label(document, "questionId"),
        answered_by=_optional_label(document, "answeredBy"),
        surface=surface,
    )


@asynccontextmanager
async def open_host(
    config: HostConfig,
    agents: list[Any],
    parent_factory: Callable[[], ParentAgent],
    *,
    mcp_settings: Mapping[str, Any] | None = None,
    tracer_provider: TracerProvider | None = None,
) -> AsyncIterator[tuple[RunHost, Any]]:
    """The engine (keeping runs in the store `config.store` names, `web.stores`), its MCP
    endpoint and a `RunHost`, all closed (runs cancelled) on exit. `StoreOpenError` when the
    store cannot be used. `tracer_provider`: what records the engine's spans (`web.telemetry`;
    None: nothing is traced)."""
    from adapters.mcp import DelegationEndpoint

    settings = {"shortcuts": config.shortcuts, **(mcp_settings or {})}
    async with (
        open_store(config.store) as store,
        DelegationEndpoint(**settings).serve() as endpoint,
        Engine(
            agents,
            limits=config.limits,
            endpoints=endpoint,
            archive=store.archive,
            tracer_provider=tracer_provider,
        ) as engine,
        trio.open_nursery() as nursery,
    ):
        host = RunHost(
            engine,
            nursery,
            parent_factory,
            visibility=config.server.visibility,
            max_active_runs=config.server.max_active_runs,
            replay_retention=config.server.replay_retention_seconds,
            shared=store.shared,
        )
        if store.shared is not None:
            await nursery.start(run_node, host, store.shared)
        try:
            yield host, endpoint
        finally:
            nursery.cancel_scope.cancel()


class EngineEventEncoder:
    """Engine events as they are (`engine.to_json`), one frame per journal entry carrying its
    cursor: for tools and tests that want the engine's own envelope rather than AG-UI."""

    def __init__(self, thread_id: str = "", run_id: str = "", mode: str = "") -> None:
        self.thread_id = thread_id

    def frames(self, entry: JournalEntry) -> list[Frame]:
        return [(entry.cursor, to_json(entry.event).encode())]

    def frames_batch(self, entries: Sequence[JournalEntry]) -> list[Frame]:
        return [(entry.cursor, to_json(entry.event).encode()) for entry in entries]


def freeze_startup_objects() -> None:
    """Move everything alive now (modules, classes, configuration: ~130k objects once the
    protocol SDKs are imported) out of the garbage collector's reach. A server calls this once
    it is up: each full collection then walks only what runs created, not the imports (on this
    machine a full collection of the startup objects alone paused the loop ~100 ms, inside
    whatever stream or cancel cascade was running)."""
    gc.collect()
    gc.freeze()


@asynccontextmanager
async def serve_app(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ListenerLimits | None = None,
) -> AsyncIterator[str]:
    """Serve the ASGI `app` on the hardened listener (`adapters.listener.serve_listener`:
    Hypercorn's Trio worker, each connection's failure kept to itself) until the block ends;
    yields the base URL (the caller announces it)."""
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            functools.partial(serve_listener, app, host=host, port=port, limits=limits)
        )
        try:
            yield str(binds[0]).rstrip("/")
        finally:
            nursery.cancel_scope.cancel()


def force_exit(scope: trio.CancelScope, signum: int, out: TextIO) -> int:
    """A second stop signal: cancel `scope` (everything the process runs) and make sure the
    process is gone within `FORCED_EXIT_SECONDS` even if unwinding waits on a peer. Returns the
    exit status (128 + `signum`, a shell's convention for a process a signal ended)."""
    status = 128 + signum
    print("stopping now: not waiting for the runs to end", file=out, flush=True)
    scope.cancel()
    backstop = threading.Timer(FORCED_EXIT_SECONDS, _exit_now, (status, out))
    backstop.daemon = True
    backstop.start()
    return status


def _exit_now(status: int, out: TextIO) -> None:
    try:
        out.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def default_encoder_factory() -> EncoderFactory:
    """The wire format viewers get by default: AG-UI events in the run's visibility mode, the
    run's viewers sharing one `SharedEncoding`."""

    def factory(thread_id: str, run_id: str, mode: str, shared: dict[str, Any]) -> StreamEncoder:
        encoding = shared.get("agui")
        if not isinstance(encoding, SharedEncoding):
            encoding = shared["agui"] = SharedEncoding()
        return AguiStreamEncoder(thread_id, run_id, mode, shared=encoding)

    return factory
