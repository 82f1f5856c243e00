"""The A2A benchmark (`python -m tools.bench a2a`): one remote stream and a cancel cascade.

This module owns two measurements of the engine against a remote A2A agent, each printed beside
what this machine does without the engine in the same run:

- Stream throughput: one task streaming N `assistant-output` text chunks, consumed by a raw httpx
  reader (the wire's ceiling), by a bare a2a-sdk client, and through the engine (`run.delegate`
  to an `A2ATarget`). The goal is the engine at >= 0.8x of the bare client.
- Cancel cascade: a run with many delegations WORKING on a remote that never finishes, then
  `run.cancel()`; the figure is the time until the last `CancelTask` reaches the remote (goal:
  p99 < 100 ms), beside the same number of `cancel_task` calls made concurrently by a bare client.

The remote is written here, not borrowed from the SDK: the SDK's reference server streams only
~750-2,000 chunks/s (a2a-sdk 1.3.0 on 2 cores: its in-memory task store copies the task on every
update), far below either client, so it would measure itself. It is a raw
HTTP/1.1 JSON-RPC server (one request per connection, like `tools/peers/raw_a2a.py`), whose
stream bodies are encoded once and written with one `send_all`. It runs in its own process
(`python -m tools.bench.a2a --serve`, started and always stopped by `bench_a2a`), as a real remote
would: in the measuring process it competed with the engine for a core, and on a small machine
the cancel cascade mostly measured that. The remote stamps each CancelTask arrival with
`time.monotonic()` (CLOCK_MONOTONIC on Linux, one clock for every process) and hands the stamps
over on `GET /_cancels` (`POST /_forget` clears them); the measuring side compares them with its
own `time.monotonic()`. The remote holds no engine rules and the engine is driven only through
its public surface; nothing here may change engine behaviour to look faster.

Tracing: both engine measurements are made with tracing off (the default engine), on (the
server's OTLP/HTTP provider exporting to a receiver in its own process) and off again (the noise
two identical sides show), in a rotation, and printed side by side with what tracing on costs
(`tools.bench.tracing`); the remote counts the requests that carried a `traceparent`, so the
report shows that only "on" sent one. The other rows are tracing off.

Method: cards are fetched and clients built before the clock starts; each figure is the median
(stream) or a percentile (cancel) of `repeat` runs, with the garbage collector emptied before
each run; every wait has a deadline, so a broken engine shows as a failed check, never a hang.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing, contextmanager
from functools import partial
from importlib.metadata import version
from typing import Any, Final, TextIO

import attrs
import httpx
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import AgentCard, CancelTaskRequest, Message, Part, Role, SendMessageRequest
from opentelemetry import trace

from adapters.a2a import A2AAgentConfig, A2ATarget
from engine import (
    AgentSpec,
    DelegationHandle,
    DelegationRequest,
    Engine,
    EngineLimits,
    Kind,
    RemoteCancel,
    Status,
)
from tools.bench.journal import percentile
from tools.bench.tracing import (
    OFF,
    OFF_MEANS,
    ON,
    ON_MEANS,
    SIDES,
    OtlpSink,
    SideRow,
    SinkFailed,
    goal_line,
    otlp_sink,
    print_sides,
    rotation,
    side_tracing,
    sink_line,
    warm,
)
from tools.peers.children import read_ready_port, stop_process_group
from tools.peers.raw_http import read_request, respond_json

__all__ = ["bench_a2a"]

#: The design goals this benchmark checks.
GOAL_STREAM_RATIO: Final = 0.8
GOAL_CANCEL_P99_MS: Final = 100.0

#: Deadlines: a measurement that takes longer than this failed (the default run takes ~1 s each).
STREAM_DEADLINE: Final = 60.0
WORKING_DEADLINE: Final = 30.0
CANCEL_DEADLINE: Final = 30.0
#: Chunks of the warm-up stream run once through each client before any clock starts.
WARMUP_EVENTS: Final = 200
#: The remote process must print `READY <port>` within this; it is stopped within STOP_DEADLINE.
READY_DEADLINE: Final = 30.0
STOP_DEADLINE: Final = 5.0

_WORKING_KINDS: Final = frozenset({Kind.STARTED, Kind.STATUS})
_DELTA_CHARS: Final = 20  # a typical model delta
_TEXT_ARTIFACT: Final = "assistant-output"
_RPC_ID: Final = b'"__rpc_id__"'  # the request id: the only per-request part of a stream
_WORKING: Final = {"state": "TASK_STATE_WORKING"}
_SSE_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\n"
    b"connection: close\r\n\r\n"
)


def _delta(n: int) -> str:
    # Distinct on purpose: an appended chunk equal to the one before it is a duplicate and is
    # dropped by the engine's mapping, which would make the engine look faster than it is.
    return f"chunk {n:07d} text, "


def _sse(rpc_result: dict[str, Any]) -> bytes:
    payload = {"jsonrpc": "2.0", "id": "__rpc_id__", "result": rpc_result}
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _firehose_pieces(events: int, task_id: str) -> list[bytes]:
    """One streaming answer, pre-encoded: a WORKING Task, `events` appended text chunks (the last
    with lastChunk), COMPLETED. Split around the request id so each request only joins."""
    context_id = f"ctx-{task_id}"
    frames = [_sse({"task": {"id": task_id, "contextId": context_id, "status": _WORKING}})]
    for n in range(events):
        chunk = {
            "taskId": task_id,
            "contextId": context_id,
            "artifact": {
                "artifactId": f"{task_id}-output",
                "name": _TEXT_ARTIFACT,
                "parts": [{"text": _delta(n)}],
            },
            "append": True,
            "lastChunk": n == events - 1,
        }
        frames.append(_sse({"artifactUpdate": chunk}))
    status = {"state": "TASK_STATE_COMPLETED"}
    frames.append(
        _sse({"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}})
    )
    return b"".join(frames).split(_RPC_ID)


# -- the remote ------------------------------------------------------------------------------


@attrs.define
class _Remote:
    """The benchmark's A2A agents on one port: `/<agent>/.well-known/agent-card.json`.

    `firehose` and `warmup` answer SendStreamingMessage with a pre-encoded stream; `hang`
    answers with a WORKING Task and keeps the stream open until the client closes it. Every
    CancelTask is answered CANCELED and its arrival recorded (`time.monotonic()`, comparable
    across processes); `GET /_cancels` returns the record, `POST /_forget` clears it. Every
    JSON-RPC request is counted, and those carrying a W3C `traceparent` header; `POST
    /_traceparents` returns both counts and clears them.
    Runs in its own process (`_serve_main`); the measuring side holds a `_RemoteProcess`.
    """

    streams: dict[str, list[bytes]]
    port: int = 0
    tasks_started: int = 0
    cancel_arrivals: list[float] = attrs.field(factory=list)
    cancelled_ids: list[str] = attrs.field(factory=list)
    rpc_requests: int = 0
    traced_requests: int = 0  # of them, those with a traceparent header

    def card_url(self, agent: str) -> str:
        return f"http://127.0.0.1:{self.port}/{agent}/.well-known/agent-card.json"

    def rpc_url(self, agent: str) -> str:
        return f"http://127.0.0.1:{self.port}/{agent}/jsonrpc"

    def card(self, agent: str) -> dict[str, Any]:
        return {
            "name": agent,
            "description": f"subagent-engine bench agent {agent!r}",
            "version": "1.0",
            "supportedInterfaces": [
                {
                    "url": self.rpc_url(agent),
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0",
                }
            ],
            "capabilities": {"streaming": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": agent, "name": agent, "description": agent, "tags": ["bench"]}],
        }

    def forget_cancels(self) -> None:
        self.cancel_arrivals.clear()
        self.cancelled_ids.clear()

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                method, path, headers, body = await read_request(stream)
            except (EOFError, ValueError, trio.BrokenResourceError):
                return
            arrived = time.monotonic()
            agent = path.strip("/").split("/", 1)[0]
            if method == "GET" and path.endswith("agent-card.json"):
                await respond_json(stream, self.card(agent))
                return
            if method == "GET" and path == "/_cancels":
                record = {"arrivals": self.cancel_arrivals, "ids": self.cancelled_ids}
                await respond_json(stream, record)
                return
            if method == "POST" and path == "/_forget":
                self.forget_cancels()
                await respond_json(stream, {"forgotten": True})
                return
            if method == "POST" and path == "/_traceparents":
                counts = {"requests": self.rpc_requests, "traced": self.traced_requests}
                self.rpc_requests = self.traced_requests = 0
                await respond_json(stream, counts)
                return
            self.rpc_requests += 1
            self.traced_requests += "traceparent" in headers
            request = json.loads(body or b"{}")
            rpc_id = request.get("id")
            name = request.get("method")
            try:
                if name == "SendStreamingMessage" and agent in self.streams:
                    self.tasks_started += 1
                    await stream.send_all(
                        _SSE_HEAD + json.dumps(rpc_id).encode().join(self.streams[agent])
                    )
                elif name == "SendStreamingMessage" and agent == "hang":
                    await self._hang(stream, rpc_id)
                elif name == "CancelTask":
                    self.cancel_arrivals.append(arrived)
                    task_id = str(request.get("params", {}).get("id", ""))
                    self.cancelled_ids.append(task_id)
                    task = {
                        "id": task_id,
                        "contextId": f"ctx-{task_id}",
                        "status": {"state": "TASK_STATE_CANCELED"},
                    }
                    await respond_json(stream, {"jsonrpc": "2.0", "id": rpc_id, "result": task})
                else:
                    error = {"code": -32001, "message": "Task not found"}
                    await respond_json(stream, {"jsonrpc": "2.0", "id": rpc_id, "error": error})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the client went away mid-answer (a cancelled stream)

    async def _hang(self, stream: trio.SocketStream, rpc_id: Any) -> None:
        self.tasks_started += 1
        task_id = f"hang-{self.tasks_started}"
        frame = {"task": {"id": task_id, "contextId": f"ctx-{task_id}", "status": _WORKING}}
        await stream.send_all(_SSE_HEAD + _sse(frame).replace(_RPC_ID, json.dumps(rpc_id).encode()))
        while await stream.receive_some(4096):  # until the client closes the stream
            pass


async def _serve(remote: _Remote, port: int = 0, *, task_status: trio.TaskStatus[None]) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    remote.port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started()
        await trio.serve_listeners(remote.handle, listeners, handler_nursery=nursery)


def _streams(events: int) -> dict[str, list[bytes]]:
    return {
        "firehose": _firehose_pieces(events, "firehose-task"),
        "warmup": _firehose_pieces(min(events, WARMUP_EVENTS), "warmup-task"),
    }


async def _serve_until_stdin_closes(remote: _Remote, port: int) -> None:
    """Serve, print `READY <port>`, and stop when stdin closes (the measuring process left)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(_serve, remote, port)
        print(f"READY {remote.port}", flush=True)
        async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
            while await stdin.receive_some(4096):
                pass
        nursery.cancel_scope.cancel()


def _serve_main(argv: Sequence[str]) -> int:
    """`python -m tools.bench.a2a --serve [--port P] [--events N]`: the remote's own process."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.a2a",
        description="the remote of `python -m tools.bench a2a`, in its own process",
    )
    parser.add_argument("--serve", action="store_true", help="run the remote (required)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    parser.add_argument("--events", type=int, default=20_000, help="chunks in the firehose")
    args = parser.parse_args(argv)
    if not args.serve or args.events < 1:
        parser.error(
            "run as --serve with --events >= 1; the benchmark is `python -m tools.bench a2a`"
        )
    trio.run(_serve_until_stdin_closes, _Remote(streams=_streams(args.events)), args.port)
    return 0


# -- the remote, seen from the measuring process ---------------------------------------------


class _RemoteFailed(Exception):
    """The remote process did not start."""


@attrs.frozen
class _RemoteProcess:
    """The measuring side's handle on the remote running in its own process."""

    port: int
    pid: int

    def card_url(self, agent: str) -> str:
        return f"http://127.0.0.1:{self.port}/{agent}/.well-known/agent-card.json"

    def rpc_url(self, agent: str) -> str:
        return f"http://127.0.0.1:{self.port}/{agent}/jsonrpc"

    async def forget_cancels(self) -> None:
        async with _http() as http:
            (await http.post(f"http://127.0.0.1:{self.port}/_forget")).raise_for_status()

    async def cancels(self) -> tuple[list[float], list[str]]:
        """(arrival stamps in `time.monotonic()` seconds, task ids) of the CancelTasks so far."""
        async with _http() as http:
            response = await http.get(f"http://127.0.0.1:{self.port}/_cancels")
            response.raise_for_status()
            record = response.json()
        return [float(t) for t in record["arrivals"]], [str(i) for i in record["ids"]]

    async def traceparents(self) -> tuple[int, int]:
        """(JSON-RPC requests, of them with a `traceparent`) since the last call."""
        async with _http() as http:
            response = await http.post(f"http://127.0.0.1:{self.port}/_traceparents")
            response.raise_for_status()
            counts = response.json()
        return int(counts["requests"]), int(counts["traced"])


#: Where `python -m tools.bench.a2a` resolves: the checkout holding the `tools` folder.
_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextmanager
def _remote_process(events: int) -> Iterator[_RemoteProcess]:
    """Start the remote in its own process and session; always stop it (stdin closed, SIGTERM
    to its process group, SIGKILL if it is still there after STOP_DEADLINE)."""
    command = [sys.executable, "-m", "tools.bench.a2a", "--serve", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--events", str(events)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=_ROOT,
        start_new_session=True,
    )
    try:
        try:
            port = read_ready_port(proc, READY_DEADLINE)
        except (TimeoutError, RuntimeError) as exc:
            raise _RemoteFailed(f"the remote process did not start: {exc}") from None
        yield _RemoteProcess(port=port, pid=proc.pid)
    finally:
        stop_process_group(proc, STOP_DEADLINE)


# -- stream throughput -----------------------------------------------------------------------


@attrs.frozen
class _EngineStream:
    seconds: float
    status: str
    entries: int  # journal entries of the run, lifecycle included
    deltas: int  # text-delta entries
    text_complete: bool  # the deltas carry exactly the text the remote sent
    gaps: int


def _message() -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="stream")]
        )
    )


def _http(connections: int = 100) -> httpx.AsyncClient:
    # The timeouts of an A2ATarget's own client; only the pool size may be raised.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(30.0, read=None),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=20),
        follow_redirects=False,
    )


def _cascade_pool(delegations: int) -> int:
    """A pool that holds every open stream and every CancelTask at once (httpx default: 100)."""
    return max(100, 2 * delegations + 8)


async def _fetch_card(http: httpx.AsyncClient, remote: _RemoteProcess, agent: str) -> AgentCard:
    base = f"http://127.0.0.1:{remote.port}"
    path = remote.card_url(agent).removeprefix(base)
    return await A2ACardResolver(http, base, agent_card_path=path).get_agent_card()


async def _raw_reader_once(remote: _RemoteProcess, agent: str) -> tuple[float, int]:
    """The wire's ceiling: httpx `aiter_lines`, counting `data:` lines, nothing parsed."""
    request = {"jsonrpc": "2.0", "id": "raw", "method": "SendStreamingMessage", "params": {}}
    async with _http() as http:
        count = 0
        start = time.perf_counter()
        async with http.stream("POST", remote.rpc_url(agent), json=request) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    count += 1
        return time.perf_counter() - start, count


async def _bare_once(card: AgentCard) -> tuple[float, int]:
    """A bare a2a-sdk streaming client counting the `StreamResponse` items it yields."""
    async with _http() as http:
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        request = _message()
        count = 0
        start = time.perf_counter()
        async with aclosing(client.send_message(request)) as stream:  # type: ignore[type-var]
            async for _ in stream:
                count += 1
        seconds = time.perf_counter() - start
        await client.close()
        return seconds, count


async def _engine_once(
    remote: _RemoteProcess,
    agent: str,
    events: int,
    tracer_provider: trace.TracerProvider | None = None,
) -> _EngineStream:
    """One `run.delegate` to an A2ATarget on the stream; clock from the call to its result."""
    target = A2ATarget(A2AAgentConfig(card_url=remote.card_url(agent)))
    spec = AgentSpec(key="firehose", display_name="Firehose", protocol="a2a", target=target)
    # A replay window that holds the whole run, so the journal can be read back afterwards.
    window = events + 1_000
    limits = EngineLimits(
        replay_window_events=window, replay_window_bytes=max(8 << 20, window << 9)
    )
    try:
        await target.prepare()  # the card fetch stays outside the clock, as for the bare client
        async with Engine([spec], limits=limits, tracer_provider=tracer_provider) as eng:
            async with eng.open_run() as run:
                start = time.perf_counter()
                result = await run.delegate(DelegationRequest(agent="firehose", objective="go"))
                seconds = time.perf_counter() - start
            journal = eng.journal(run.run_id)
            assert journal is not None
            # Read the store, not a subscription: a reader's buffer would merge the deltas again.
            stored = await journal.store.read_after(0, journal.head)
            entries = journal.statistics().appended
            text = [e.event.delta or "" for e in stored if e.event.kind == Kind.TEXT_DELTA]
            gaps = sum(e.event.kind == Kind.GAP for e in stored)
    finally:
        await target.aclose()
    expected = "".join(_delta(n) for n in range(events))
    return _EngineStream(
        seconds=seconds,
        status=result.status,
        entries=entries,
        deltas=len(text),
        text_complete="".join(text) == expected,
        gaps=gaps,
    )


# -- cancel cascade --------------------------------------------------------------------------


@attrs.frozen
class _CancelRun:
    to_last_cancel: float  # seconds from run.cancel() to the last CancelTask arrival
    arrivals: tuple[float, ...]  # seconds from run.cancel() to each arrival
    to_closed: float  # seconds from run.cancel() until the run's context exited
    working: int  # delegations seen WORKING before the cancel
    cancels_received: int  # distinct remote tasks a CancelTask named
    confirmed: int  # results `cancelled` with remote_cancel `confirmed`


async def _engine_cancel_once(
    remote: _RemoteProcess, delegations: int, tracer_provider: trace.TracerProvider | None = None
) -> _CancelRun:
    """`delegations` delegations WORKING on `hang`, then `run.cancel()`. The target keeps its
    own HTTP pools (what a host's `A2ATarget(config)` gets): their shape is part of what a
    cascade costs."""
    target = A2ATarget(A2AAgentConfig(card_url=remote.card_url("hang")))
    spec = AgentSpec(key="hang", display_name="Never finishes", protocol="a2a", target=target)
    limits = EngineLimits(
        max_concurrent_per_run=max(8, delegations),
        max_concurrent_global=max(256, delegations),
    )
    await remote.forget_cancels()
    working: set[str] = set()
    handles: list[DelegationHandle] = []
    cancelled_at = math.inf
    try:
        await target.prepare()
        async with Engine([spec], limits=limits, tracer_provider=tracer_provider) as eng:
            async with eng.open_run() as run:
                with trio.move_on_after(WORKING_DEADLINE):
                    async with run.events() as events:
                        handles += [
                            run.start_delegation(
                                DelegationRequest(agent="hang", objective=f"wait {n}")
                            )
                            for n in range(delegations)
                        ]
                        async for entry in events:
                            event = entry.event
                            # The remote's WORKING Task arrives as the start (or a status).
                            if event.status == "working" and event.kind in _WORKING_KINDS:
                                working.add(event.delegation_id or "")
                                if len(working) >= delegations:
                                    break
                cancelled_at = time.monotonic()  # the remote stamps arrivals on this clock
                run.cancel("bench a2a: cancel cascade")
            closed_at = time.monotonic()
    finally:
        await target.aclose()
    stamps, cancelled_ids = await remote.cancels()
    arrivals = tuple(sorted(t - cancelled_at for t in stamps))
    confirmed = 0
    for handle in handles:
        result = handle.result()
        confirmed += (
            result.status == Status.CANCELLED and result.remote_cancel == RemoteCancel.CONFIRMED
        )
    return _CancelRun(
        to_last_cancel=arrivals[-1] if arrivals else math.inf,
        arrivals=arrivals,
        to_closed=closed_at - cancelled_at,
        working=len(working),
        cancels_received=len(set(cancelled_ids)),
        confirmed=confirmed,
    )


#: The cascade's floors, cheapest first: what `count` concurrent CancelTask requests to the
#: remote process cost with raw sockets, with httpx, and with the bare a2a-sdk client.
_FLOORS: Final = ("raw sockets", "raw httpx POST", "bare a2a-sdk cancel_task")


async def _cancel_floor_once(
    remote: _RemoteProcess, card: AgentCard, count: int, floor: str
) -> tuple[float, int]:
    """`count` concurrent CancelTask requests sent the `floor` way; seconds from the first send
    to the last arrival, and how many arrived."""
    url = remote.rpc_url("hang")
    payloads = [
        json.dumps(
            {"jsonrpc": "2.0", "id": n, "method": "CancelTask", "params": {"id": f"floor-{n}"}}
        ).encode()
        for n in range(count)
    ]
    async with _http(connections=_cascade_pool(count)) as http:
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        requests = [CancelTaskRequest(id=f"floor-{n}") for n in range(count)]

        async def raw_socket(body: bytes) -> None:
            head = (
                f"POST /hang/jsonrpc HTTP/1.1\r\nhost: 127.0.0.1:{remote.port}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            )
            async with await trio.open_tcp_stream("127.0.0.1", remote.port) as stream:
                await stream.send_all(head.encode() + body)
                while await stream.receive_some(65536):  # until the server closes
                    pass

        async def raw_httpx(body: bytes) -> None:
            await http.post(url, content=body, headers={"content-type": "application/json"})

        calls: list[Callable[[], Awaitable[object]]]
        if floor == "raw sockets":
            calls = [partial(raw_socket, body) for body in payloads]
        elif floor == "raw httpx POST":
            calls = [partial(raw_httpx, body) for body in payloads]
        else:
            calls = [partial(client.cancel_task, request) for request in requests]
        await remote.forget_cancels()
        start = time.monotonic()  # the remote stamps arrivals on this clock
        async with trio.open_nursery() as nursery:
            for call in calls:
                nursery.start_soon(call)
        await client.close()
    arrivals, _ = await remote.cancels()
    return (max(arrivals) - start if arrivals else math.inf), len(arrivals)


# -- the run ---------------------------------------------------------------------------------


def _by_side() -> dict[str, list[Any]]:
    return {side: [] for side in SIDES}


@attrs.define
class _Figures:
    raw: list[tuple[float, int]] = attrs.field(factory=list)
    bare: list[tuple[float, int]] = attrs.field(factory=list)
    #: The engine's figures per tracing side (`tools.bench.tracing.SIDES`).
    engine: dict[str, list[_EngineStream]] = attrs.field(factory=_by_side)
    floors: dict[str, list[tuple[float, int]]] = attrs.field(
        factory=lambda: {floor: [] for floor in _FLOORS}
    )
    cancels: dict[str, list[_CancelRun]] = attrs.field(factory=_by_side)
    #: Per side, (JSON-RPC requests the remote got from the engine, of them with a traceparent).
    traceparents: dict[str, list[int]] = attrs.field(
        factory=lambda: {side: [0, 0] for side in SIDES}
    )
    problems: list[str] = attrs.field(factory=list)


async def _measure(
    remote: _RemoteProcess, events: int, delegations: int, repeat: int, sink: OtlpSink
) -> _Figures:
    figures = _Figures()

    async def engine_side(
        side: str, measure: Callable[[trace.TracerProvider | None], Awaitable[Any]]
    ) -> Any:
        """`measure` with tracing as `side` has it (the provider flushed after the clock),
        counting the remote's requests and those that carried a traceparent."""
        await remote.traceparents()  # what came before is not this side's
        async with side_tracing(side, sink) as provider:
            outcome = await measure(provider)
        requests, traced = await remote.traceparents()
        figures.traceparents[side][0] += requests
        figures.traceparents[side][1] += traced
        return outcome

    async def timed(label: str, deadline: float, measure: Callable[[], Awaitable[Any]]) -> Any:
        gc.collect()
        with trio.move_on_after(deadline):
            return await measure()
        figures.problems.append(f"FAILED {label}: no answer within {deadline:g} s")
        return None

    async with _http() as http:
        cards = {a: await _fetch_card(http, remote, a) for a in ("firehose", "warmup", "hang")}
    # Warm-up: imports, protobuf descriptors and code paths, once per client, unclocked.
    await _raw_reader_once(remote, "warmup")
    await _bare_once(cards["warmup"])
    for side in (OFF, ON):
        async with side_tracing(side, sink) as provider:
            await _engine_once(remote, "warmup", min(events, WARMUP_EVENTS), provider)

    for index in range(repeat):
        for label, into, measure in (
            ("raw reader", figures.raw, lambda: _raw_reader_once(remote, "firehose")),
            ("bare client", figures.bare, lambda: _bare_once(cards["firehose"])),
        ):
            outcome = await timed(label, STREAM_DEADLINE, measure)
            if outcome is not None:
                into.append(outcome)
        for side in rotation(index):
            outcome = await timed(
                f"engine stream (tracing {side})",
                STREAM_DEADLINE,
                partial(engine_side, side, partial(_engine_once, remote, "firehose", events)),
            )
            if outcome is not None:
                figures.engine[side].append(outcome)
    for index in range(repeat):
        for floor in _FLOORS:
            outcome = await timed(
                floor,
                CANCEL_DEADLINE,
                partial(_cancel_floor_once, remote, cards["hang"], delegations, floor),
            )
            if outcome is not None:
                figures.floors[floor].append(outcome)
        for side in rotation(index):
            outcome = await timed(
                f"cancel cascade (tracing {side})",
                WORKING_DEADLINE + CANCEL_DEADLINE,
                partial(engine_side, side, partial(_engine_cancel_once, remote, delegations)),
            )
            if outcome is not None:
                figures.cancels[side].append(outcome)
    return figures


# -- report ----------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if math.isfinite(seconds) else "-"


def _stream_rate(runs: Sequence[tuple[float, int]]) -> tuple[int, float, float]:
    """(items of the last run, median seconds, items/s at the median)."""
    if not runs:
        return 0, math.nan, math.nan
    seconds = statistics.median(s for s, _ in runs)
    items = runs[-1][1]
    return items, seconds, items / seconds


def _print_stream(figures: _Figures, events: int, repeat: int, out: TextIO) -> float:
    expected = events + 2  # the Task, the chunks, COMPLETED
    print(
        f"stream throughput: 1 remote task streaming {events:,} appended {_TEXT_ARTIFACT!r} "
        f"chunks of {_DELTA_CHARS} chars, plus its Task and COMPLETED: {expected:,} items",
        file=out,
    )
    header = f"{'measurement':<44} {'items':>8} {'median s':>9} {'events/s':>10} {'vs bare':>8}"
    print(header, file=out)
    print("-" * len(header), file=out)
    _, _, bare_rate = _stream_rate(figures.bare)
    engine_runs = [(r.seconds, expected) for r in figures.engine[OFF]]
    rows = [
        ("raw httpx reader (aiter_lines, no parsing)", figures.raw),
        ("bare a2a-sdk client (send_message)", figures.bare),
        ("engine (run.delegate -> A2ATarget)", engine_runs),
    ]
    for label, runs in rows:
        items, seconds, rate = _stream_rate(runs)
        print(
            f"{label:<44} {items:>8,} {seconds:>9.3f} {rate:>10,.0f} {rate / bare_rate:>7.2f}x",
            file=out,
        )
    for label, runs in rows[:2]:
        if runs and runs[-1][1] != expected:
            figures.problems.append(f"LOST {label}: {runs[-1][1]:,} items, expected {expected:,}")
    ratio = _stream_rate(engine_runs)[2] / bare_rate
    if figures.engine[OFF]:
        last = figures.engine[OFF][-1]
        merged = "" if last.deltas == events else " (adjacent deltas merged under back-pressure)"
        print(
            f"engine journal (last run): {last.entries:,} entries, of which {last.deltas:,} "
            f"text deltas for {events:,} remote chunks{merged}; text "
            f"{'complete' if last.text_complete else 'INCOMPLETE'}",
            file=out,
        )
    for side, side_runs in figures.engine.items():
        for n, run in enumerate(side_runs, 1):
            if run.status != Status.COMPLETED:
                figures.problems.append(
                    f"FAILED engine stream run {n} (tracing {side}): result {run.status}"
                )
            if not run.text_complete or run.gaps:
                figures.problems.append(
                    f"LOST engine stream run {n} (tracing {side}): the journal's text deltas do "
                    f"not add up to the remote's text ({run.gaps} gap markers)"
                )
    verdict = "MET" if ratio >= GOAL_STREAM_RATIO else "NOT MET"
    print(
        f"goal: engine >= {GOAL_STREAM_RATIO}x of the bare client: {verdict} "
        f"(ratio {ratio:.2f}, medians of {repeat}; tracing off, on: the tracing table below)",
        file=out,
    )
    return ratio


def _print_cancel(figures: _Figures, delegations: int, repeat: int, out: TextIO) -> float:
    print(
        f"cancel cascade: {delegations} concurrent delegations WORKING on a remote that never "
        "finishes, then run.cancel(); engine times from that call, floors from the first send "
        f"of {delegations} concurrent CancelTask requests to the last arrival",
        file=out,
    )
    header = f"{'measurement':<44} {'samples':>8} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}"
    print(header, file=out)
    print("-" * len(header), file=out)
    runs = figures.cancels[OFF]
    rows = [(f"floor: {floor}", [s for s, _ in figures.floors[floor]]) for floor in _FLOORS]
    rows += [
        ("engine: run.cancel() -> last CancelTask", [r.to_last_cancel for r in runs]),
        ("engine: run.cancel() -> each CancelTask", [a for r in runs for a in r.arrivals]),
        ("engine: run.cancel() -> run closed", [r.to_closed for r in runs]),
    ]
    for label, values in rows:
        print(
            f"{label:<44} {len(values):>8,} {_ms(percentile(values, 0.5)):>9} "
            f"{_ms(percentile(values, 0.99)):>9} {_ms(max(values, default=math.inf)):>9}",
            file=out,
        )
    total = delegations * len(runs)
    confirmed = sum(r.confirmed for r in runs)
    received = sum(r.cancels_received for r in runs)
    print(
        f"outcomes over {len(runs)} run(s): {confirmed:,}/{total:,} delegations cancelled with "
        f"remote_cancel=confirmed; {received:,}/{total:,} remote tasks named by a CancelTask",
        file=out,
    )
    for side, side_runs in figures.cancels.items():
        for n, run in enumerate(side_runs, 1):
            if run.working < delegations:
                figures.problems.append(
                    f"FAILED cancel run {n} (tracing {side}): only {run.working}/{delegations} "
                    f"delegations WORKING within {WORKING_DEADLINE:g} s"
                )
            if run.confirmed < delegations or run.cancels_received < delegations:
                figures.problems.append(
                    f"FAILED cancel run {n} (tracing {side}): {run.confirmed}/{delegations} "
                    f"confirmed, {run.cancels_received}/{delegations} CancelTask received"
                )
    for floor, floor_runs in figures.floors.items():
        for n, (_, received_floor) in enumerate(floor_runs, 1):
            if received_floor < delegations:
                figures.problems.append(
                    f"FAILED {floor} run {n}: {received_floor}/{delegations} CancelTask received"
                )
    p99 = percentile([r.to_last_cancel for r in runs], 0.99)
    verdict = "MET" if p99 < GOAL_CANCEL_P99_MS / 1000 else "NOT MET"
    print(
        f"goal: run.cancel() -> last CancelTask p99 < {GOAL_CANCEL_P99_MS:g} ms: {verdict} "
        f"(p99 {_ms(p99)} ms over {len(runs)} of {repeat} run(s); tracing off)",
        file=out,
    )
    return p99


def _print_tracing(figures: _Figures, events: int, repeat: int, out: TextIO) -> None:
    """The engine's figures with tracing off, on and off again, side by side."""
    expected = events + 2

    def median_ms(values: Sequence[float]) -> float:
        return statistics.median(values) * 1000 if values else math.nan

    stream = SideRow(
        "stream, events/s (median)",
        {
            side: _stream_rate([(r.seconds, expected) for r in runs])[2]
            for side, runs in figures.engine.items()
        },
        higher_is_better=True,
    )
    cascade = SideRow(
        "cancel: run.cancel() -> last CancelTask, ms (median)",
        {
            side: median_ms([r.to_last_cancel for r in runs])
            for side, runs in figures.cancels.items()
        },
        higher_is_better=False,
        digits=1,
    )
    each = SideRow(
        "cancel: run.cancel() -> each CancelTask, p99 ms",
        {
            side: percentile([a for r in runs for a in r.arrivals], 0.99) * 1000
            for side, runs in figures.cancels.items()
        },
        higher_is_better=False,
        digits=1,
    )
    closed = SideRow(
        "cancel: run.cancel() -> run closed, ms (median)",
        {side: median_ms([r.to_closed for r in runs]) for side, runs in figures.cancels.items()},
        higher_is_better=False,
        digits=1,
    )
    print_sides(
        f"tracing off vs on ({repeat} run(s) per side, interleaved)",
        [stream, cascade, each, closed],
        out,
    )
    print(goal_line(stream, "stream throughput"), file=out)
    print(goal_line(cascade, "cancel-cascade speed"), file=out)
    sent = ", ".join(
        f"{side} {traced:,} of {requests:,}"
        for side, (requests, traced) in figures.traceparents.items()
    )
    print(f"JSON-RPC requests from the engine that carried a traceparent: {sent}", file=out)
    print(ON_MEANS, file=out)
    print(OFF_MEANS, file=out)
    for side, (requests, traced) in figures.traceparents.items():
        if requests == 0:
            figures.problems.append(f"FAILED tracing {side}: the remote got no request")
        elif side == ON and traced != requests:
            figures.problems.append(
                f"FAILED tracing on: {requests - traced} of {requests} requests had no traceparent"
            )
        elif side != ON and traced:
            figures.problems.append(f"FAILED tracing {side}: {traced} requests had a traceparent")


def bench_a2a(*, events: int, delegations: int, repeat: int, out: TextIO | None = None) -> int:
    """Measure and print the engine's A2A stream throughput and cancel cascade beside a bare
    a2a-sdk client on the same remote, which runs in its own process. Each engine figure is
    measured with tracing off, on (exporting over OTLP/HTTP to a receiver this call starts) and
    off again, interleaved (`tools.bench.tracing`), and printed side by side.

    Returns 0; 1 if a measurement did not complete (an item, a delta or a CancelTask lost, a
    delegation not confirmed cancelled, a deadline passed); 2 for arguments out of range.
    A missed goal is printed as NOT MET and does not change the exit code.
    """
    out = out or sys.stdout
    if events < 1 or delegations < 1 or repeat < 1:
        print("--events, --delegations and --repeat must be at least 1", file=out)
        return 2
    print(
        f"subagent-engine bench a2a: Python {platform.python_version()}, trio {trio.__version__}, "
        f"a2a-sdk {version('a2a-sdk')}, httpx {httpx.__version__}, "
        f"os.cpu_count()={os.cpu_count()}, {repeat} run(s) per figure",
        file=out,
    )
    started = time.perf_counter()
    try:
        with otlp_sink() as sink, _remote_process(events) as remote:
            print(
                "remote: a raw JSON-RPC A2A server in a separate process (python -m "
                f"tools.bench.a2a --serve, pid {remote.pid}, 127.0.0.1:{remote.port}, one request "
                "per connection), stream bodies encoded once and written with one send_all; "
                "CancelTask arrivals stamped there with time.monotonic(), the clock of "
                "run.cancel() here",
                file=out,
            )
            print(
                f"httpx: one pool per client, max_connections {_cascade_pool(delegations)} for "
                "the cascade (every stream plus every CancelTask), 100 otherwise",
                file=out,
            )
            print(file=out, flush=True)
            warm(sink)
            before = sink.stats()
            figures = trio.run(_measure, remote, events, delegations, repeat, sink)
            exported = sink.stats() - before
    except (_RemoteFailed, SinkFailed) as failure:
        print(f"!! FAILED remote: {failure}", file=out, flush=True)
        return 1
    _print_stream(figures, events, repeat, out)
    print(file=out)
    _print_cancel(figures, delegations, repeat, out)
    print(file=out)
    _print_tracing(figures, events, repeat, out)
    print(sink_line(sink, exported), file=out)
    if exported.spans < 1 or exported.refused:
        figures.problems.append(
            "FAILED tracing on: the OTLP receiver got no spans or refused an export"
        )
    print(file=out)
    for problem in figures.problems:
        print(f"!! {problem}", file=out)
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"max RSS of this process: {max_rss_kib / 1024:.1f} MiB (the remote process's not "
        f"included); wall time {time.perf_counter() - started:.1f} s",
        file=out,
        flush=True,
    )
    return 1 if figures.problems else 0


if __name__ == "__main__":
    sys.exit(_serve_main(sys.argv[1:]))
