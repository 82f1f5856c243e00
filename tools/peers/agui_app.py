"""A remote AG-UI agent for the integration tests, built with the official `ag-ui-protocol` encoder.

Run it in its own process::

    python -m tools.peers.agui_app --port 0 [--watch-stdin] [--log-level INFO]

It binds 127.0.0.1 (port 0 = ephemeral) and prints exactly one line ``READY <port>`` on stdout
once it is listening (logs go to stderr). With ``--watch-stdin`` it exits when its stdin closes,
so even a SIGKILLed pytest leaves no server behind. Starlette on uvicorn (asyncio): events are
`ag_ui.core` models framed by `ag_ui.encoder.EventEncoder`; only the deliberately broken frames
are written by hand.

Routes: ``POST /agents/<scenario>`` takes a `RunAgentInput` (validated with the official model;
422 if it does not validate) and answers with the run's SSE stream; ``POST
/agents/<scenario>/stop`` stops a running run (body ``{"threadId", "runId", ...}``), ``GET
/_test/log`` returns what was recorded, ``POST /_test/reset`` forgets it. Scenarios:

- ``stream``: RUN_STARTED, a step, one text message in three deltas, CUSTOM ``progress``,
  STATE_SNAPSHOT, RUN_FINISHED with ``result`` ``"done: <objective>"``.
- ``reasoning``: a reasoning message, then a text message, RUN_FINISHED (no result).
- ``tool``: the remote's own tool call ``search`` (start, two args deltas, end, result), then
  text, RUN_FINISHED with a JSON result.
- ``chunks``: TEXT_MESSAGE_CHUNK x3 (the first names the message), TOOL_CALL_CHUNK x2, then
  RUN_FINISHED (which closes what the chunks left open).
- ``interrupt``: text ``May I delete?``, then RUN_FINISHED with an interrupt outcome naming two
  interrupts (``approve-delete``, ``confirm-scope``; the second attributed to a remote subagent).
  The resume run (``resume`` answering both ids, same thread): text ``got: <payloads>``,
  RUN_FINISHED with result ``approved``. A resume that misses an id: RUN_ERROR ``E_RESUME``.
- ``error``: RUN_STARTED, a text message, RUN_ERROR ``boom`` (code ``E_BOOM``).
- ``badjson``: RUN_STARTED, one text delta, then a frame that is not JSON, then the stream
  stays open (the client must fail on the frame, not wait for the end).
- ``early``: TEXT_MESSAGE_START before RUN_STARTED.
- ``unopened``: RUN_STARTED, then TEXT_MESSAGE_CONTENT for a message never started.
- ``noterminal``: RUN_STARTED, a text message, then the body ends.
- ``hang``: RUN_STARTED, one text delta, then waits until the client leaves or the run is
  stopped (then RUN_FINISHED ``cancelled``). Its stop endpoint confirms (200).
- ``stubborn``: like ``hang``, but its stop endpoint refuses (409) and the run goes on.
- ``subagents``: the remote's own subagent ``researcher`` (SUBAGENT_STARTED, attributed text,
  SUBAGENT_FINISHED), then the remote's own text, RUN_FINISHED.
- ``nested``: subagents two levels deep under the remote's own tool call ``task``: ``planner``
  (announced with ``parentToolCallId``) streams text, spawns ``estimator``
  (``parentSubagentRunId``), whose text, reasoning and tool call are attributed to it; both
  finish (estimator first), then the call's result, the remote's own text, RUN_FINISHED.
- ``nested_interrupt``: ``deleter`` (a subagent) asks, then ends ``suspended`` and the run ends
  with an interrupt attributed to it. The resume run announces ``deleter`` again (a
  continuation of the suspended subagent), which says ``Deleted.`` and finishes; RUN_FINISHED
  ``approved``.
- ``nested_question``: ``planner`` (a subagent) spawns ``deleter`` (``parentSubagentRunId``),
  which asks; both end ``suspended`` and the run ends with one interrupt attributed to
  ``deleter`` whose ``responseSchema`` (``NESTED_QUESTION_SCHEMA``) asks for
  ``{"approved": <boolean>}``. The resume run announces both again (continuations); ``deleter``
  says ``got: <the resume payload as JSON>`` and both finish; RUN_FINISHED with that payload as
  its result. A resume that does not answer the interrupt: RUN_ERROR ``E_RESUME``.
- ``auth``: 401 unless ``Authorization: Bearer test-token``; then like a short ``stream``.
- ``crlf``: like ``stream``, framed with CRLF line endings (legal SSE, sse-starlette's default).

Fault scenarios for the soak (`tools/soak`):

- ``drop``: RUN_STARTED, a text message's start and one delta (``DROP_TEXT``), then the
  connection is aborted mid-body (the chunked response never ends: a transport error).
- ``slow``: RUN_STARTED, one text message of ``SLOW_DELTAS`` deltas ``SLOW_STEP_S`` apart
  (``slow_text()``), RUN_FINISHED ``done: slow``.
- ``chatty``: RUN_STARTED, the ``bigtext`` message, then the remote's own subagent
  ``thinker`` reports ``CHATTY_STEPS`` identical STEP_STARTED ``think`` events in a row (one
  repeated state: what a slow reader's buffer may fold) and finishes, then the text
  ``chatty done.``, RUN_FINISHED (``chatty_text()``: the delegation's own text).
- ``bigtext``: RUN_STARTED, one text message of ``BIG_DELTAS`` deltas of ``BIG_DELTA_CHARS``
  characters (``big_text()``), RUN_FINISHED.
- ``oversized``: RUN_STARTED, a text message whose one delta frame is ``OVERSIZED_BYTES``
  (above the engine's 4 MiB frame bound), then the stream stays open until the client leaves.

Recording at ``GET /_test/log``::

    {"runs": [...], "stops": [...], "disconnects": [...], "running": [...]}

- runs: ``scenario``, ``input`` (the RunAgentInput as received, JSON), ``x_headers`` (every
  ``x-*`` header), ``traceparent`` (None when absent), ``authorization_present``, ``accept``,
  ``time``.
- stops: ``scenario``, ``body``, ``path``, ``authorization_present``, ``x_headers``,
  ``traceparent``, ``found`` (this server ran a run with that id, running or not), ``time``.
- disconnects: ``scenario``, ``run_id``, ``time`` (the client closed a stream still running).
- running: the run ids still waiting to be stopped or left (``hang``, ``stubborn``, ...).

The Authorization value itself is never recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from ag_ui.core import (
    PROTOCOL_VERSION,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adapters.listener import listening_socket, serve_on_uvicorn
from tools.peers.children import announce_ready

SCENARIOS = (
    "stream",
    "reasoning",
    "tool",
    "chunks",
    "interrupt",
    "error",
    "badjson",
    "early",
    "unopened",
    "noterminal",
    "hang",
    "stubborn",
    "subagents",
    "nested",
    "nested_interrupt",
    "nested_question",
    "auth",
    "crlf",
    "drop",
    "slow",
    "chatty",
    "bigtext",
    "oversized",
)
TOKEN = "test-token"
DROP_TEXT = "before the drop"
SLOW_DELTAS = 20
SLOW_STEP_S = 0.02
CHATTY_STEPS = 40
CHATTY_TEXT = "chatty done."
BIG_DELTAS = 256
BIG_DELTA_CHARS = 256
OVERSIZED_BYTES = 5 << 20


def slow_text() -> list[str]:
    return [f"slow {n}; " for n in range(SLOW_DELTAS)]


def big_text() -> list[str]:
    return [f"{n:04d}" + chr(ord("a") + n % 26) * (BIG_DELTA_CHARS - 4) for n in range(BIG_DELTAS)]


def chatty_text() -> str:
    return "".join(big_text()) + CHATTY_TEXT


class _Abort(Exception):
    """Raised inside a stream to abort its connection mid-body (the ``drop`` scenario)."""


INTERRUPT_IDS = ("approve-delete", "confirm-scope")
#: What the ``nested_question`` scenario's interrupt asks an answer to look like.
NESTED_QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}
NESTED_QUESTION = "Delete the three stale branches?"

log = logging.getLogger("agui_app")


class Recorder:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.stops: list[dict[str, Any]] = []
        self.disconnects: list[dict[str, Any]] = []
        #: Running runs that can be stopped: run id -> the event that stops them.
        self.running: dict[str, asyncio.Event] = {}
        #: Every run id this server ran (a stop may arrive after the client already left).
        self.known: set[str] = set()

    def snapshot(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "stops": self.stops,
            "disconnects": self.disconnects,
            "running": sorted(self.running),
        }

    def reset(self) -> None:
        self.runs.clear()
        self.stops.clear()
        self.disconnects.clear()


def _x_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower().startswith("x-")}


def _traceparent(request: Request) -> str | None:
    """The W3C `traceparent` header the request carried, if any."""
    return request.headers.get("traceparent")


def _user_text(run: RunAgentInput) -> str:
    for message in reversed(run.messages):
        if getattr(message, "role", None) == "user":
            content = getattr(message, "content", "")
            return content if isinstance(content, str) else ""
    return ""


def _text(message_id: str, *deltas: str, subagent: str | None = None) -> list[BaseEvent]:
    tag: dict[str, Any] = {"subagent_run_id": subagent} if subagent else {}
    return [
        TextMessageStartEvent(message_id=message_id, role="assistant", **tag),
        *(TextMessageContentEvent(message_id=message_id, delta=d, **tag) for d in deltas),
        TextMessageEndEvent(message_id=message_id, **tag),
    ]


class Agent:
    """The scenarios: each an async generator of SSE text for one RunAgentInput."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.encoder = EventEncoder()

    def frame(self, event: BaseEvent) -> str:
        return self.encoder.encode(event)

    async def stream(self, scenario: str, run: RunAgentInput) -> AsyncIterator[str]:
        started = RunStartedEvent(
            thread_id=run.thread_id, run_id=run.run_id, protocol_version=PROTOCOL_VERSION
        )
        finished = RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id)
        events: list[BaseEvent]
        if scenario in ("stream", "auth", "crlf"):
            objective = _user_text(run).split("\n\n", 1)[0]
            events = [
                started,
                StepStartedEvent(step_name="research"),
                *_text("m1", "Hello ", "from ", "AG-UI."),
                StepFinishedEvent(step_name="research"),
                CustomEvent(name="progress", value={"percent": 100}),
                StateSnapshotEvent(snapshot={"sources": 3}),
                RunFinishedEvent(
                    thread_id=run.thread_id, run_id=run.run_id, result=f"done: {objective}"
                ),
            ]
            for event in events:
                text = self.frame(event)
                yield text.replace("\n", "\r\n") if scenario == "crlf" else text
            return
        if scenario == "reasoning":
            events = [
                started,
                ReasoningStartEvent(message_id="r1"),
                ReasoningMessageStartEvent(message_id="r1", role="reasoning"),
                ReasoningMessageContentEvent(message_id="r1", delta="Thinking it over."),
                ReasoningMessageEndEvent(message_id="r1"),
                ReasoningEndEvent(message_id="r1"),
                *_text("m1", "Answer."),
                finished,
            ]
        elif scenario == "tool":
            events = [
                started,
                ToolCallStartEvent(tool_call_id="call-1", tool_call_name="search"),
                ToolCallArgsEvent(tool_call_id="call-1", delta='{"q": '),
                ToolCallArgsEvent(tool_call_id="call-1", delta='"agui"}'),
                ToolCallEndEvent(tool_call_id="call-1"),
                ToolCallResultEvent(message_id="res-1", tool_call_id="call-1", content="3 hits"),
                *_text("m1", "Found 3 hits."),
                RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result={"hits": 3}),
            ]
        elif scenario == "chunks":
            events = [
                started,
                TextMessageChunkEvent(message_id="m1", role="assistant", delta="Chunked "),
                TextMessageChunkEvent(delta="text "),
                TextMessageChunkEvent(delta="arrives."),
                ToolCallChunkEvent(tool_call_id="call-1", tool_call_name="lookup", delta="{}"),
                ToolCallChunkEvent(delta=""),
                finished,
            ]
        elif scenario == "interrupt":
            events = self._interrupt(run, started, finished)
        elif scenario == "error":
            events = [
                started,
                *_text("m1", "Trying..."),
                RunErrorEvent(message="boom", code="E_BOOM"),
            ]
        elif scenario == "badjson":
            yield self.frame(started)
            yield self.frame(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield self.frame(TextMessageContentEvent(message_id="m1", delta="partial"))
            yield "data: {this is not json\n\n"
            await self._wait(run, scenario)
            return
        elif scenario == "early":
            events = [TextMessageStartEvent(message_id="m1", role="assistant"), started, finished]
        elif scenario == "unopened":
            events = [started, TextMessageContentEvent(message_id="ghost", delta="boo"), finished]
        elif scenario == "noterminal":
            events = [started, *_text("m1", "Half a story")]
        elif scenario in ("hang", "stubborn"):
            yield self.frame(started)
            yield self.frame(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield self.frame(TextMessageContentEvent(message_id="m1", delta="Working on it"))
            if await self._wait(run, scenario):
                yield self.frame(TextMessageEndEvent(message_id="m1"))
                cancelled = RunFinishedCancelledOutcome()
                yield self.frame(
                    RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, outcome=cancelled)
                )
            return
        elif scenario == "subagents":
            events = [
                started,
                SubagentStartedEvent(
                    subagent_run_id="sub-1", name="researcher", description="Finds sources"
                ),
                *_text("sm1", "Three sources.", subagent="sub-1"),
                SubagentFinishedEvent(subagent_run_id="sub-1", result={"sources": 3}),
                *_text("m1", "Summary of the sources."),
                finished,
            ]
        elif scenario == "nested":
            events = [
                started,
                ToolCallStartEvent(tool_call_id="task-1", tool_call_name="task"),
                ToolCallArgsEvent(tool_call_id="task-1", delta='{"brief": "plan"}'),
                ToolCallEndEvent(tool_call_id="task-1"),
                SubagentStartedEvent(
                    subagent_run_id="planner-1",
                    name="planner",
                    description="Plans the work",
                    parent_tool_call_id="task-1",
                ),
                *_text("pm1", "Two tasks: ", "scope, then risks.", subagent="planner-1"),
                SubagentStartedEvent(
                    subagent_run_id="estimator-1",
                    name="estimator",
                    parent_subagent_run_id="planner-1",
                ),
                ReasoningStartEvent(message_id="er1", subagent_run_id="estimator-1"),
                ReasoningMessageStartEvent(
                    message_id="er1", role="reasoning", subagent_run_id="estimator-1"
                ),
                ReasoningMessageContentEvent(
                    message_id="er1", delta="Count the tasks.", subagent_run_id="estimator-1"
                ),
                ReasoningMessageEndEvent(message_id="er1", subagent_run_id="estimator-1"),
                ReasoningEndEvent(message_id="er1", subagent_run_id="estimator-1"),
                ToolCallStartEvent(
                    tool_call_id="est-call",
                    tool_call_name="clock",
                    subagent_run_id="estimator-1",
                ),
                ToolCallEndEvent(tool_call_id="est-call", subagent_run_id="estimator-1"),
                ToolCallResultEvent(
                    message_id="est-res",
                    tool_call_id="est-call",
                    content="8h",
                    subagent_run_id="estimator-1",
                ),
                *_text("em1", "About a day each.", subagent="estimator-1"),
                SubagentFinishedEvent(subagent_run_id="estimator-1", result={"days": 2}),
                SubagentFinishedEvent(subagent_run_id="planner-1", result={"tasks": 2}),
                ToolCallResultEvent(message_id="task-res", tool_call_id="task-1", content="2"),
                *_text("m1", "Planned: two tasks, two days."),
                RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result="planned"),
            ]
        elif scenario == "nested_interrupt":
            events = self._nested_interrupt(run, started)
        elif scenario == "nested_question":
            events = self._nested_question(run, started)
        elif scenario == "drop":
            yield self.frame(started)
            yield self.frame(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield self.frame(TextMessageContentEvent(message_id="m1", delta=DROP_TEXT))
            await asyncio.sleep(0.05)  # let the frames reach the client before the abort
            raise _Abort("the soak's stream drop")
        elif scenario == "slow":
            yield self.frame(started)
            yield self.frame(TextMessageStartEvent(message_id="m1", role="assistant"))
            for delta in slow_text():
                await asyncio.sleep(SLOW_STEP_S)
                yield self.frame(TextMessageContentEvent(message_id="m1", delta=delta))
            yield self.frame(TextMessageEndEvent(message_id="m1"))
            yield self.frame(
                RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result="done: slow")
            )
            return
        elif scenario == "chatty":
            events = [
                started,
                *_text("m0", *big_text()),
                SubagentStartedEvent(subagent_run_id="thinker-1", name="thinker"),
                *(
                    StepStartedEvent(step_name="think", subagent_run_id="thinker-1")
                    for _ in range(CHATTY_STEPS)
                ),
                StepFinishedEvent(step_name="think", subagent_run_id="thinker-1"),
                SubagentFinishedEvent(subagent_run_id="thinker-1"),
                *_text("m1", CHATTY_TEXT),
                finished,
            ]
        elif scenario == "bigtext":
            events = [started, *_text("m1", *big_text()), finished]
        elif scenario == "oversized":
            yield self.frame(started)
            yield self.frame(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield self.frame(TextMessageContentEvent(message_id="m1", delta="x" * OVERSIZED_BYTES))
            await self._wait(run, scenario)
            return
        else:  # pragma: no cover - routed only for known scenarios
            raise ValueError(scenario)
        for event in events:
            yield self.frame(event)
            await asyncio.sleep(0)

    def _interrupt(
        self, run: RunAgentInput, started: BaseEvent, finished: BaseEvent
    ) -> list[BaseEvent]:
        if not run.resume:
            interrupts = [
                Interrupt(id=INTERRUPT_IDS[0], reason="tool_approval", message="May I delete?"),
                Interrupt(
                    id=INTERRUPT_IDS[1],
                    reason="input",
                    message="Which scope?",
                    subagent_run_id="deleter-1",
                ),
            ]
            return [
                started,
                *_text("m1", "May I delete?"),
                RunFinishedEvent(
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                ),
            ]
        answered = {entry.interrupt_id: entry.payload for entry in run.resume}
        if set(answered) != set(INTERRUPT_IDS):
            return [started, RunErrorEvent(message="resume misses an interrupt", code="E_RESUME")]
        got = json.dumps([answered[i] for i in INTERRUPT_IDS], sort_keys=True)
        return [
            started,
            *_text("m2", f"got: {got}"),
            RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result="approved"),
        ]

    def _nested_interrupt(self, run: RunAgentInput, started: BaseEvent) -> list[BaseEvent]:
        announce = SubagentStartedEvent(subagent_run_id="deleter-1", name="deleter")
        if not run.resume:
            interrupt = Interrupt(
                id=INTERRUPT_IDS[0],
                reason="tool_approval",
                message="May I delete?",
                subagent_run_id="deleter-1",
            )
            return [
                started,
                announce,
                *_text("dm1", "This cannot be undone. May I?", subagent="deleter-1"),
                SubagentFinishedEvent(
                    subagent_run_id="deleter-1",
                    outcome=SubagentFinishedSuspendedOutcome(interrupt_ids=[INTERRUPT_IDS[0]]),
                ),
                RunFinishedEvent(
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    outcome=RunFinishedInterruptOutcome(interrupts=[interrupt]),
                ),
            ]
        return [
            started,
            announce,  # the same id again: a continuation
            *_text("dm2", "Deleted.", subagent="deleter-1"),
            SubagentFinishedEvent(subagent_run_id="deleter-1"),
            RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result="approved"),
        ]

    def _nested_question(self, run: RunAgentInput, started: BaseEvent) -> list[BaseEvent]:
        planner = SubagentStartedEvent(subagent_run_id="planner-1", name="planner")
        deleter = SubagentStartedEvent(
            subagent_run_id="deleter-1", name="deleter", parent_subagent_run_id="planner-1"
        )
        if not run.resume:
            interrupt = Interrupt(
                id=INTERRUPT_IDS[0],
                reason="input",
                message=NESTED_QUESTION,
                subagent_run_id="deleter-1",
                response_schema=NESTED_QUESTION_SCHEMA,
            )
            suspended = SubagentFinishedSuspendedOutcome(interrupt_ids=[INTERRUPT_IDS[0]])
            return [
                started,
                planner,
                deleter,
                *_text("dq1", "Three branches look stale.", subagent="deleter-1"),
                SubagentFinishedEvent(subagent_run_id="deleter-1", outcome=suspended),
                SubagentFinishedEvent(subagent_run_id="planner-1", outcome=suspended),
                RunFinishedEvent(
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    outcome=RunFinishedInterruptOutcome(interrupts=[interrupt]),
                ),
            ]
        answered = {entry.interrupt_id: entry.payload for entry in run.resume}
        if set(answered) != {INTERRUPT_IDS[0]}:
            return [started, RunErrorEvent(message="resume misses an interrupt", code="E_RESUME")]
        got = json.dumps(answered[INTERRUPT_IDS[0]], sort_keys=True)
        return [
            started,
            planner,  # continuations of the suspended subagents
            deleter,
            *_text("dq2", f"got: {got}", subagent="deleter-1"),
            SubagentFinishedEvent(subagent_run_id="deleter-1"),
            SubagentFinishedEvent(subagent_run_id="planner-1"),
            RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, result=got),
        ]

    async def _wait(self, run: RunAgentInput, scenario: str) -> bool:
        """Wait until the run is stopped (True) or the client leaves (cancelled)."""
        stop = asyncio.Event()
        self.recorder.running[run.run_id] = stop
        try:
            await asyncio.wait_for(stop.wait(), timeout=120)
            return True
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            self.recorder.disconnects.append(
                {"scenario": scenario, "run_id": run.run_id, "time": time.time()}
            )
            raise
        finally:
            self.recorder.running.pop(run.run_id, None)


def build_app() -> Starlette:
    recorder = Recorder()
    agent = Agent(recorder)

    async def run_agent(request: Request) -> Response:
        scenario = request.path_params["scenario"]
        if scenario not in SCENARIOS:
            return JSONResponse({"error": f"unknown scenario {scenario!r}"}, status_code=404)
        authorization = request.headers.get("authorization")
        if scenario == "auth" and authorization != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        try:
            document = await request.json()
            run = RunAgentInput.model_validate(document)
        except (ValueError, ValidationError) as exc:
            return JSONResponse({"error": str(exc)[:500]}, status_code=422)
        recorder.known.add(run.run_id)
        recorder.runs.append(
            {
                "scenario": scenario,
                "input": document,
                "x_headers": _x_headers(request),
                "traceparent": _traceparent(request),
                "authorization_present": authorization is not None,
                "accept": request.headers.get("accept"),
                "time": time.time(),
            }
        )
        return StreamingResponse(
            agent.stream(scenario, run), media_type=agent.encoder.get_content_type()
        )

    async def stop(request: Request) -> Response:
        scenario = request.path_params["scenario"]
        try:
            body = await request.json()
        except ValueError:
            body = None
        run_id = body.get("runId") if isinstance(body, dict) else None
        found = isinstance(run_id, str) and run_id in recorder.known
        recorder.stops.append(
            {
                "scenario": scenario,
                "body": body,
                "path": request.url.path,
                "authorization_present": request.headers.get("authorization") is not None,
                "x_headers": _x_headers(request),
                "traceparent": _traceparent(request),
                "found": found,
                "time": time.time(),
            }
        )
        if scenario == "stubborn":
            return JSONResponse({"stopped": False, "error": "not stoppable"}, status_code=409)
        if isinstance(run_id, str) and run_id in recorder.running:
            recorder.running[run_id].set()
        return JSONResponse({"stopped": True, "found": found})

    async def get_log(request: Request) -> Response:
        return JSONResponse(recorder.snapshot())

    async def reset(request: Request) -> Response:
        recorder.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/agents/{scenario}", run_agent, methods=["POST"]),
            Route("/agents/{scenario}/stop", stop, methods=["POST"]),
            Route("/_test/log", get_log, methods=["GET"]),
            Route("/_test/reset", reset, methods=["POST"]),
        ]
    )


async def serve(host: str, port: int, *, watch_stdin: bool = False) -> None:
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(),
        log_config=None,
        access_log=False,
        http="h11",
        ws="none",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    with sock:
        await serve_on_uvicorn(
            config, sock, ready=announce_ready(bound_port), watch_stdin=watch_stdin
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(args.host, args.port, watch_stdin=args.watch_stdin))


if __name__ == "__main__":
    main()
