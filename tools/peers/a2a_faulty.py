"""A fault-injecting A2A 1.0 server built on the official a2a-sdk server.

Run it in its own process (a2a-sdk 1.3.0's server needs asyncio: under hypercorn's Trio worker
every send-message call fails with "no running event loop")::

    python -m tools.peers.a2a_faulty --port 0 [--watch-stdin] [--log-level INFO]

It binds 127.0.0.1 (port 0 = ephemeral) and prints exactly one line ``READY <port>`` on
stdout once it is listening. Nothing else is ever written to stdout (logs go to stderr).
With ``--watch-stdin`` it shuts down when its stdin is closed (the pytest fixture uses this so
that even a SIGKILLed pytest leaves no server behind). SIGTERM/SIGINT: graceful stop (<= ~3 s).

One uvicorn server hosts one agent per scenario, each under its own prefix:

- card:      ``/agents/<scenario>/.well-known/agent-card.json``
- JSON-RPC:  ``/agents/<scenario>/jsonrpc``
- HTTP+JSON: ``/agents/<scenario>/rest`` (tenant form: ``/agents/<scenario>/rest/<tenant>/...``)

Both bindings are advertised in the card with absolute URLs carrying the bound port, so
``A2ACardResolver(http, "http://127.0.0.1:<port>/agents/<scenario>")`` finds the card.

Scenarios (executor behaviour), see ``SCENARIOS`` below for the one-line summaries:

- ``stream``: WORKING (status message), artifact ``assistant-output`` in 3 text chunks
  (``append`` from the 2nd, ``last_chunk`` on the 3rd), artifact ``report.md`` (text/markdown,
  one chunk), COMPLETED with status message ``done: <summary>``.
- ``nostream``: card says streaming false; SUBMITTED -> WORKING -> artifact -> COMPLETED over
  ~0.3 s (0.1 s apart) so a poller sees the changes. Streaming calls are refused by the SDK.
- ``fail``: WORKING then FAILED with a status message.
- ``reject``: REJECTED at once (with a status message).
- ``hang``: WORKING, then never finishes; its cancel confirms at once (CANCELED).
- ``drop``: WORKING + one ``assistant-output`` chunk, then the SSE response of the *first*
  SendStreamingMessage of the task is aborted (the connection is closed without the final
  chunk of the chunked body, so the client sees a transport error). The task keeps working:
  0.5 s later a 2nd chunk (``last_chunk``) and COMPLETED, so SubscribeToTask/GetTask recover
  it. SubscribeToTask streams are never cut.
- ``dropclean``: like ``drop`` but the SSE body ends *cleanly* (normal end of stream, no
  terminal state, no transport error).
- ``dup``: every status/artifact event is enqueued twice, including the terminal COMPLETED.
- ``input``: WORKING, then INPUT_REQUIRED with a question; a follow-up message with the same
  task id and context id continues: WORKING ``got: <answer>``, an ``assistant-output`` chunk
  ``got: <answer>``, COMPLETED ``got: <answer>``.
- ``auth``: every request under ``/agents/auth/`` except the card needs
  ``Authorization: Bearer test-token``; otherwise HTTP 401 (JSON body, ``WWW-Authenticate``).
  With the token it behaves like a short ``stream`` (one chunk ``authorized``).
- ``slowcancel``: like ``hang``; its executor cancel handler sleeps 3 s before writing CANCELED,
  so CancelTask answers after ~3 s.
- ``nocancel``: like ``hang``; CancelTask is refused at once with ``TaskNotCancelableError``
  (JSON-RPC code -32002 / REST 409) and the task keeps WORKING forever. (Refused in the request
  handler: an executor ``cancel()`` that raises would make the SDK mark the task FAILED.)
- ``hangcancel``: like ``hang``; the executor cancel handler never returns, so the CancelTask
  request never gets an answer (the caller's deadline must fire). The task stays WORKING.
- ``huge``: WORKING, one ``huge.txt`` artifact chunk of 5 MiB of text, COMPLETED.
- ``giant``: like ``huge`` with 50 MiB (``GIANT_BYTES``) in its one chunk, i.e. one SSE frame of
  ~50 MiB; GetTask and CancelTask answers then carry it too.
- ``early-terminal``: the stream of a new task opens with a COMPLETED status update for that
  task's own id (status message ``done: too early``) *before* the Task is announced, then the
  Task, WORKING, ``assistant-output`` in 3 chunks (``STREAM_CHUNKS``), and the real COMPLETED
  (``done: the real end``). The stored task never holds the early one.
- ``early-foreign``: the same, but the early COMPLETED names another task id (no such task).
- ``chatty``: ``CHATTY_STATUSES`` identical WORKING statuses (same message text, same timestamp:
  a state repeated, which a slow reader's buffer may fold), one ``assistant-output`` chunk
  ``chatty done.``, COMPLETED.

Recording (per scenario) at ``GET /_test/log`` (JSON), cleared by ``POST /_test/reset``::

    {"<scenario>": {"messages": [...], "cancels": [...], "subscribes": [...],
                    "get_tasks": [...], "cuts": [...], "auth_rejections": [...]}, ...}

- messages: one per executed message (``task_id``/``context_id`` as resolved by the server,
  ``client_task_id``/``client_context_id`` as sent, ``message_id``, ``text``, ``tenant``,
  ``follow_up``, ``binding``, ``authorization_present``, ``x_user_id``, ``x_tenant``,
  ``x_headers`` (all ``x-*`` headers), ``traceparent``, ``tracestate`` (W3C trace context
  headers, None when absent), ``request_metadata``, ``message_metadata``, ``time``).
  The Authorization value itself is never recorded.
- cancels: every CancelTask received (``task_id``, ``tenant``, ``metadata`` as the client sent
  it, ``sdk_metadata`` as the SDK handed it to the handler (the SDK's REST CancelTask drops the
  body, so it is ``{}`` there; the middleware keeps the body to fill ``metadata``), ``binding``,
  header fields as above, ``time``; then ``outcome`` (final state name, ``refused`` or
  ``error``), ``error`` and ``finished_at`` once answered — absent while still pending).
- subscribes / get_tasks: ``task_id``, ``tenant``, ``binding`` (subscribes), ``traceparent``,
  ``tracestate``, ``time``.
- cuts: ``task_id``, ``mode`` (``abort`` | ``clean``), ``time``.
- auth_rejections: ``method``, ``path``, ``authorization_present``, ``time``.

Times are ``time.time()`` (wall clock, comparable across processes on one machine).

SDK facts this server relies on or works around (a2a-sdk 1.3.0):

- The executor must enqueue a Task before any status update (the SDK rejects it otherwise);
  every first stream therefore starts with a ``task`` event (state SUBMITTED).
- ``dup``: the SDK forwards a second terminal event; the duplicated artifact chunk has
  ``append=false`` so the stored task holds it once (GetTask shows no doubled text).
- A follow-up stream (``input``) starts with the status update, not with a Task.
- ``early-*``: the executor cannot enqueue a status before the Task (the SDK refuses it), so the
  request handler writes the early COMPLETED into the stream itself, ahead of the SDK's events.
- An executor ``cancel()`` that raises makes the SDK mark the task FAILED, hence ``nocancel``
  refuses in the request handler instead. While a ``hangcancel`` cancel hangs, the SDK holds the
  task's lock: a second CancelTask or a SubscribeToTask for that task hangs too.
- The SDK's REST CancelTask ignores the request body (metadata); the tenant comes from the path.

``GET /_test/scenarios`` lists the scenario names.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError, TaskNotCancelableError
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from adapters.listener import listening_socket, serve_on_uvicorn
from tools.peers.children import announce_ready

AUTH_TOKEN = "test-token"
CARD_SUFFIX = "/.well-known/agent-card.json"
HUGE_BYTES = 5 * 1024 * 1024
GIANT_BYTES = 50 * 1024 * 1024
EARLY_TEXT = "done: too early"
REAL_END_TEXT = "done: the real end"
SLOW_CANCEL_S = 3.0
DROP_RECOVERY_S = 0.5
NOSTREAM_STEP_S = 0.1
STREAM_CHUNKS = ("Hello ", "from the ", "stream agent.")
REPORT_MD = "# Report\n\n- chunks: 3\n- status: ok\n"
STREAM_SUMMARY = "streamed 3 chunks and report.md"
INPUT_QUESTION = "What is your name?"
CHATTY_STATUSES = 60
CHATTY_TEXT = "chatty done."


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    streaming: bool = True


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("stream", "3 text chunks of assistant-output, report.md, COMPLETED"),
    Scenario("nostream", "card streaming=false; submitted->working->completed over ~0.3 s", False),
    Scenario("fail", "WORKING then FAILED with a status message"),
    Scenario("reject", "REJECTED at once"),
    Scenario("hang", "WORKING forever; cancel confirms at once"),
    Scenario("drop", "first stream aborted after one chunk; task completes 0.5 s later"),
    Scenario("dropclean", "first stream ends cleanly after one chunk; completes 0.5 s later"),
    Scenario("dup", "every status/artifact event twice, terminal included"),
    Scenario("input", "INPUT_REQUIRED, then continues on the answer"),
    Scenario("auth", "401 without 'Authorization: Bearer test-token' (card exempt)"),
    Scenario("slowcancel", "WORKING forever; cancel confirms after 3 s"),
    Scenario("nocancel", "WORKING forever; CancelTask refused (TaskNotCancelableError)"),
    Scenario("hangcancel", "WORKING forever; CancelTask never answers"),
    Scenario("huge", "one 5 MiB artifact chunk"),
    Scenario("giant", "one 50 MiB artifact chunk (one SSE frame)"),
    Scenario("early-terminal", "COMPLETED before its Task is announced, then the real stream"),
    Scenario("early-foreign", "COMPLETED for another task id first, then the real stream"),
    Scenario("chatty", f"{CHATTY_STATUSES} identical WORKING statuses, then one chunk"),
    Scenario("v03", "an A2A 0.3 agent (0.3 card, JSON-RPC with the SDK's 0.3 compat) that streams"),
)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


# --------------------------------------------------------------------------- recording


class Recorder:
    """What the agents saw, per scenario; served at /_test/log."""

    KINDS = ("messages", "cancels", "subscribes", "get_tasks", "cuts", "auth_rejections")

    def __init__(self) -> None:
        self.data: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.reset()

    def reset(self) -> None:
        self.data = {name: {kind: [] for kind in self.KINDS} for name in SCENARIO_NAMES}

    def add(self, scenario: str, kind: str, entry: dict[str, Any]) -> dict[str, Any]:
        entry.setdefault("time", time.time())
        self.data[scenario][kind].append(entry)
        return entry  # the caller may complete it later (cancel outcome)


def _header_fields(call_context: ServerCallContext) -> dict[str, Any]:
    headers: dict[str, str] = call_context.state.get("headers", {})
    path = str(call_context.state.get("path", ""))
    return {
        "binding": "jsonrpc" if path.endswith("/jsonrpc") else "rest",
        "authorization_present": "authorization" in headers,
        "x_user_id": headers.get("x-user-id"),
        "x_tenant": headers.get("x-tenant"),
        "x_headers": {k: v for k, v in headers.items() if k.startswith("x-")},
        **_trace_fields(call_context),
    }


def _trace_fields(call_context: ServerCallContext) -> dict[str, Any]:
    """The W3C trace context headers the request carried (None: absent)."""
    headers: dict[str, str] = call_context.state.get("headers", {})
    return {"traceparent": headers.get("traceparent"), "tracestate": headers.get("tracestate")}


def _wire_metadata(call_context: ServerCallContext) -> dict[str, Any]:
    """`metadata` of a REST CancelTask body as the client sent it ({} if none/unparsable)."""
    body = call_context.state.get("wire_body")
    if not body:
        return {}
    try:
        metadata = json.loads(body).get("metadata")
    except (ValueError, AttributeError):
        return {}
    return metadata if isinstance(metadata, dict) else {}


class _CutFlag:
    """Set by the request handler to make the middleware abort the current response."""

    def __init__(self) -> None:
        self.cut = False


class ContextBuilder(DefaultServerCallContextBuilder):
    """Default context plus the request path and this request's cut flag."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["path"] = request.url.path
        context.state["cut_flag"] = request.scope.get("faulty.cut")
        context.state["wire_body"] = request.scope.get("faulty.body")
        return context


# --------------------------------------------------------------------------- executor


def _agent_message(context: RequestContext, text: str) -> Message:
    return Message(
        role=Role.ROLE_AGENT,
        message_id=str(uuid.uuid4()),
        task_id=context.task_id or "",
        context_id=context.context_id or "",
        parts=[Part(text=text)],
    )


def _status(context: RequestContext, state: int, text: str | None = None) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    status.timestamp.GetCurrentTime()
    if text is not None:
        status.message.CopyFrom(_agent_message(context, text))
    return TaskStatusUpdateEvent(
        task_id=context.task_id or "", context_id=context.context_id or "", status=status
    )


def _chunk(
    context: RequestContext,
    artifact_id: str,
    name: str,
    text: str,
    *,
    append: bool = False,
    last_chunk: bool = False,
    media_type: str = "text/plain",
) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=context.task_id or "",
        context_id=context.context_id or "",
        artifact=Artifact(
            artifact_id=artifact_id,
            name=name,
            parts=[Part(text=text, media_type=media_type)],
        ),
        append=append,
        last_chunk=last_chunk,
    )


class FaultyExecutor(AgentExecutor):
    def __init__(self, scenario: str, recorder: Recorder) -> None:
        self.scenario = scenario
        self.recorder = recorder

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        self._record_message(context)
        times = 2 if self.scenario == "dup" else 1

        async def emit(event: Event) -> None:
            for _ in range(times):
                await event_queue.enqueue_event(event)

        if context.current_task is None:
            # The SDK wants a Task before any status update.
            task = Task(
                id=context.task_id or "",
                context_id=context.context_id or "",
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            )
            task.status.timestamp.GetCurrentTime()
            if context.message is not None:
                task.history.append(context.message)
            await event_queue.enqueue_event(task)
        behaviour = getattr(self, "_run_" + self.scenario.replace("-", "_"))
        await behaviour(context, emit)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if self.scenario == "slowcancel":
            await asyncio.sleep(SLOW_CANCEL_S)
        elif self.scenario == "hangcancel":
            await asyncio.Event().wait()
        await event_queue.enqueue_event(
            _status(context, TaskState.TASK_STATE_CANCELED, f"cancelled ({self.scenario})")
        )

    def _record_message(self, context: RequestContext) -> None:
        message = context.message or Message()
        # The SDK writes the ids it resolved into the message; the handler kept the originals.
        sent_task_id, sent_context_id = context.call_context.state.get("sent_ids", ("", ""))
        self.recorder.add(
            self.scenario,
            "messages",
            {
                "task_id": context.task_id,
                "context_id": context.context_id,
                "client_task_id": sent_task_id,
                "client_context_id": sent_context_id,
                "message_id": message.message_id,
                "text": context.get_user_input(),
                "tenant": context.tenant,
                "follow_up": context.current_task is not None,
                "request_metadata": context.metadata,
                "message_metadata": MessageToDict(message.metadata),
                **_header_fields(context.call_context),
            },
        )

    # One coroutine per scenario: (context, emit) -> None.

    async def _run_stream(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        out = str(uuid.uuid4())
        for i, text in enumerate(STREAM_CHUNKS):
            last = i == len(STREAM_CHUNKS) - 1
            await emit(
                _chunk(context, out, "assistant-output", text, append=i > 0, last_chunk=last)
            )
        await emit(
            _chunk(
                context,
                str(uuid.uuid4()),
                "report.md",
                REPORT_MD,
                last_chunk=True,
                media_type="text/markdown",
            )
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, f"done: {STREAM_SUMMARY}"))

    async def _run_nostream(self, context: RequestContext, emit: _Emit) -> None:
        await asyncio.sleep(NOSTREAM_STEP_S)
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await asyncio.sleep(NOSTREAM_STEP_S)
        await emit(
            _chunk(context, str(uuid.uuid4()), "assistant-output", "polled result", last_chunk=True)
        )
        await asyncio.sleep(NOSTREAM_STEP_S)
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: polled result"))

    async def _run_fail(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await emit(_status(context, TaskState.TASK_STATE_FAILED, "failed: simulated failure"))

    async def _run_reject(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_REJECTED, "rejected: not my job"))

    async def _run_hang(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working forever"))
        await asyncio.Event().wait()  # until the SDK cancels this coroutine

    _run_slowcancel = _run_hang
    _run_nocancel = _run_hang
    _run_hangcancel = _run_hang

    async def _run_drop(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        out = str(uuid.uuid4())
        await emit(_chunk(context, out, "assistant-output", "before the drop, "))
        await asyncio.sleep(DROP_RECOVERY_S)
        await emit(
            _chunk(
                context, out, "assistant-output", "after the drop.", append=True, last_chunk=True
            )
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: survived the drop"))

    _run_dropclean = _run_drop
    _run_v03 = _run_stream

    async def _run_dup(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await emit(
            _chunk(context, str(uuid.uuid4()), "assistant-output", "said twice", last_chunk=True)
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: said twice"))

    async def _run_input(self, context: RequestContext, emit: _Emit) -> None:
        current = context.current_task
        if current is None or current.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
            await emit(_status(context, TaskState.TASK_STATE_INPUT_REQUIRED, INPUT_QUESTION))
            return  # the SDK calls execute() again on the follow-up message
        text = f"got: {context.get_user_input()}"
        await emit(_status(context, TaskState.TASK_STATE_WORKING, text))
        await emit(_chunk(context, str(uuid.uuid4()), "assistant-output", text, last_chunk=True))
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, text))

    async def _run_auth(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await emit(
            _chunk(context, str(uuid.uuid4()), "assistant-output", "authorized", last_chunk=True)
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: authorized"))

    async def _run_huge(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await emit(
            _chunk(context, str(uuid.uuid4()), "huge.txt", "x" * HUGE_BYTES, last_chunk=True)
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: 5 MiB"))

    async def _run_giant(self, context: RequestContext, emit: _Emit) -> None:
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        await emit(
            _chunk(context, str(uuid.uuid4()), "giant.txt", "x" * GIANT_BYTES, last_chunk=True)
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: 50 MiB"))

    async def _run_early_terminal(self, context: RequestContext, emit: _Emit) -> None:
        # The early COMPLETED is written by the request handler (`_early_terminal`).
        await emit(_status(context, TaskState.TASK_STATE_WORKING, "working on it"))
        out = str(uuid.uuid4())
        for i, text in enumerate(STREAM_CHUNKS):
            last = i == len(STREAM_CHUNKS) - 1
            await emit(
                _chunk(context, out, "assistant-output", text, append=i > 0, last_chunk=last)
            )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, REAL_END_TEXT))

    _run_early_foreign = _run_early_terminal

    async def _run_chatty(self, context: RequestContext, emit: _Emit) -> None:
        repeated = _status(context, TaskState.TASK_STATE_WORKING, "thinking")
        for _ in range(CHATTY_STATUSES):
            await emit(repeated)  # the same event: same message id, same timestamp
        await emit(
            _chunk(context, str(uuid.uuid4()), "assistant-output", CHATTY_TEXT, last_chunk=True)
        )
        await emit(_status(context, TaskState.TASK_STATE_COMPLETED, "done: chatty"))


_Emit = Callable[[Event], Awaitable[None]]


# --------------------------------------------------------------------------- request handler


class RecordingHandler(DefaultRequestHandler):
    """The SDK's default handler, plus recording, stream cuts and a refusing cancel."""

    def __init__(self, *, scenario: str, recorder: Recorder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.recorder = recorder
        self._cut_tasks: set[str] = set()

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        sdk_metadata = MessageToDict(params.metadata)
        entry = self.recorder.add(
            self.scenario,
            "cancels",
            {
                "task_id": params.id,
                "tenant": params.tenant or context.tenant,
                "metadata": sdk_metadata or _wire_metadata(context),
                "sdk_metadata": sdk_metadata,
                **_header_fields(context),
            },
        )
        try:
            if self.scenario == "nocancel":
                entry["outcome"] = "refused"
                raise TaskNotCancelableError(message="this agent never cancels")
            task: Task | None = await super().on_cancel_task(params, context)
        except A2AError as e:
            entry.setdefault("outcome", "error")
            entry["error"] = type(e).__name__
            raise
        finally:
            entry["finished_at"] = time.time()
        if task is not None:
            entry["outcome"] = TaskState.Name(task.status.state)
        return task

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        self.recorder.add(
            self.scenario,
            "get_tasks",
            {
                "task_id": params.id,
                "tenant": params.tenant or context.tenant,
                **_trace_fields(context),
            },
        )
        task: Task | None = await super().on_get_task(params, context)
        return task

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        self.recorder.add(
            self.scenario,
            "subscribes",
            {
                "task_id": params.id,
                "tenant": params.tenant or context.tenant,
                "binding": _header_fields(context)["binding"],
                **_trace_fields(context),
            },
        )
        async with contextlib.aclosing(super().on_subscribe_to_task(params, context)) as events:
            async for event in events:
                yield event

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        context.state["sent_ids"] = (params.message.task_id, params.message.context_id)
        result: Message | Task = await super().on_message_send(params, context)
        return result

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        context.state["sent_ids"] = (params.message.task_id, params.message.context_id)
        early = self.scenario.startswith("early-") and not params.message.task_id
        async with contextlib.aclosing(super().on_message_send_stream(params, context)) as events:
            async for event in events:
                if early and isinstance(event, Task):
                    early = False
                    yield _early_terminal(event, foreign=self.scenario == "early-foreign")
                yield event
                if (
                    self.scenario in ("drop", "dropclean")
                    and isinstance(event, TaskArtifactUpdateEvent)
                    and event.task_id not in self._cut_tasks
                ):
                    self._cut_tasks.add(event.task_id)
                    mode = "clean"
                    flag = context.state.get("cut_flag")
                    if self.scenario == "drop" and isinstance(flag, _CutFlag):
                        flag.cut = True
                        mode = "abort"
                    self.recorder.add(
                        self.scenario, "cuts", {"task_id": event.task_id, "mode": mode}
                    )
                    return  # ends this subscription; the task itself keeps running


def _early_terminal(task: Task, *, foreign: bool) -> TaskStatusUpdateEvent:
    """A COMPLETED status for `task` (or, `foreign`, for a task that does not exist), to be
    sent before `task` itself is announced."""
    task_id = str(uuid.uuid4()) if foreign else task.id
    status = TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
    status.timestamp.GetCurrentTime()
    status.message.CopyFrom(
        Message(
            role=Role.ROLE_AGENT,
            message_id=str(uuid.uuid4()),
            task_id=task_id,
            context_id=task.context_id,
            parts=[Part(text=EARLY_TEXT)],
        )
    )
    return TaskStatusUpdateEvent(task_id=task_id, context_id=task.context_id, status=status)


# --------------------------------------------------------------------------- ASGI wiring


class FaultMiddleware:
    """Bearer check for the ``auth`` agent; aborts a response whose cut flag was set.

    Aborting: the final (``more_body=False``) body message is swallowed, so the app returns
    without completing the response and uvicorn closes the connection; the client sees a
    chunked body that never ends properly (httpx ``RemoteProtocolError``).
    """

    def __init__(self, app: ASGIApp, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith("/agents/auth/") and not path.endswith(CARD_SUFFIX):
            headers = dict(scope.get("headers", []))
            if headers.get(b"authorization") != f"Bearer {AUTH_TOKEN}".encode():
                self.recorder.add(
                    "auth",
                    "auth_rejections",
                    {
                        "method": scope.get("method"),
                        "path": path,
                        "authorization_present": b"authorization" in headers,
                    },
                )
                response = JSONResponse(
                    {"error": "unauthorized"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="a2a-faulty"'},
                )
                await response(scope, receive, send)
                return
        flag = _CutFlag()
        scope["faulty.cut"] = flag
        if scope.get("method") == "POST" and "/rest/" in path and path.endswith(":cancel"):
            # The SDK's REST CancelTask ignores the body (metadata is lost): keep it for the log.
            receive = await self._buffer_body(scope, receive)

        async def guarded_send(message: ASGIMessage) -> None:
            if (
                flag.cut
                and message["type"] == "http.response.body"
                and not message.get("more_body", False)
            ):
                return  # never complete the response: the connection gets closed
            await send(message)

        await self.app(scope, receive, guarded_send)

    @staticmethod
    async def _buffer_body(scope: Scope, receive: Receive) -> Receive:
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
        scope["faulty.body"] = body
        replayed = False

        async def replay() -> ASGIMessage:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay


def _card(scenario: Scenario, base_url: str) -> AgentCard:
    agent_url = f"{base_url}/agents/{scenario.name}"
    card = AgentCard(
        name=f"faulty-{scenario.name}",
        description=f"Fault-injecting test agent: {scenario.summary}",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"{agent_url}/jsonrpc", protocol_binding="JSONRPC", protocol_version="1.0"
            ),
            AgentInterface(
                url=f"{agent_url}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=AgentCapabilities(streaming=scenario.streaming, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "text/markdown"],
        skills=[
            AgentSkill(
                id=scenario.name,
                name=scenario.name,
                description=scenario.summary,
                tags=["test", "fault-injection"],
            )
        ],
    )
    if scenario.name == "auth":
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card


def _v03_card_route(base_url: str) -> Any:
    """The `v03` agent's card in the A2A 0.3 shape (url + preferredTransport, no interfaces)."""
    document = {
        "name": "faulty-v03",
        "description": "A2A 0.3 test agent",
        "version": "1.0.0",
        "protocolVersion": "0.3.0",
        "url": f"{base_url}/agents/v03/jsonrpc",
        "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "v03", "name": "v03", "description": "0.3 agent", "tags": ["test"]}],
    }

    async def card(request: Request) -> Response:
        return JSONResponse(document)

    return card


def build_app(base_url: str) -> ASGIApp:
    recorder = Recorder()
    builder = ContextBuilder()
    handlers: list[RecordingHandler] = []
    routes: list[BaseRoute] = []

    async def get_log(request: Request) -> Response:
        return Response(json.dumps(recorder.data), media_type="application/json")

    async def reset(request: Request) -> Response:
        recorder.reset()
        return JSONResponse({"ok": True})

    async def scenarios(request: Request) -> Response:
        return JSONResponse({s.name: s.summary for s in SCENARIOS})

    routes += [
        Route("/_test/log", get_log, methods=["GET"]),
        Route("/_test/reset", reset, methods=["POST"]),
        Route("/_test/scenarios", scenarios, methods=["GET"]),
    ]
    for scenario in SCENARIOS:
        card = _card(scenario, base_url)
        handler = RecordingHandler(
            scenario=scenario.name,
            recorder=recorder,
            agent_executor=FaultyExecutor(scenario.name, recorder),
            task_store=InMemoryTaskStore(),
            agent_card=card,
        )
        handlers.append(handler)
        prefix = f"/agents/{scenario.name}"
        if scenario.name == "v03":
            routes.append(Route(prefix + CARD_SUFFIX, _v03_card_route(base_url), methods=["GET"]))
        else:
            routes += create_agent_card_routes(card, card_url=prefix + CARD_SUFFIX)
        routes += create_jsonrpc_routes(
            handler,
            rpc_url=prefix + "/jsonrpc",
            context_builder=builder,
            enable_v0_3_compat=scenario.name == "v03",
        )
        # Mounted (not path_prefix=): the SDK's tenant mount is then /rest/{tenant}/..., which
        # is where the SDK's REST client puts the tenant.
        routes.append(
            Mount(prefix + "/rest", routes=create_rest_routes(handler, context_builder=builder))
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        # Drain the SDK's active tasks; bounded, since a hung cancel() holds a task's lock.
        closing = asyncio.gather(*(h.aclose() for h in handlers), return_exceptions=True)
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(closing, timeout=0.5)

    return FaultMiddleware(Starlette(routes=routes, lifespan=lifespan), recorder)


async def serve(host: str, port: int, *, watch_stdin: bool = False) -> None:
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    app = build_app(f"http://{host}:{bound_port}")
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        http="h11",
        ws="none",
        lifespan="on",
        timeout_graceful_shutdown=1,  # only hung CancelTask requests are left by then
    )
    with sock:
        await serve_on_uvicorn(
            config, sock, ready=announce_ready(bound_port), watch_stdin=watch_stdin
        )


class _QuietShutdown(logging.Filter):
    """Drop the tracebacks of requests that uvicorn cancels at shutdown (hung cancels)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, asyncio.CancelledError)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--watch-stdin",
        action="store_true",
        help="exit when stdin is closed (so a killed parent leaves no server behind)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("uvicorn.error").addFilter(_QuietShutdown())
    asyncio.run(serve(args.host, args.port, watch_stdin=args.watch_stdin))


if __name__ == "__main__":
    main()
