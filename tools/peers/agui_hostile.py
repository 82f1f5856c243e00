"""A hostile remote AG-UI agent: raw HTTP on 127.0.0.1, scenarios writing exact bytes (tests only).

It runs inside the test's own Trio loop (`await nursery.start(serve_hostile_agui)`) and speaks
just enough HTTP/1.1 (one request per connection, `connection: close`) to take a `RunAgentInput`
at ``POST /agents/<scenario>`` and a stop at ``POST /agents/<scenario>/stop``. Where the official
encoder (`tools.peers.agui_app`) can only write valid events, each scenario here writes the bytes
a broken or hostile remote would: terminals before the run started, every frame twice, one frame
of 50 MiB, 200,000 one-character deltas, a stream that never ends, a body cut inside a frame,
a frame that is not JSON, terminals naming another run, a compressed body. It records what the
engine sent (`runs`, `stops`) and how far each stream got before the engine left it (`left`), so
tests can assert that the engine stopped reading and stopped the remote run.

Scenarios (``<scenario>`` in the URL; ``R`` is the requested run id, ``T`` its thread):

- ``ok``: a well-behaved run: RUN_STARTED, the text ``fine``, RUN_FINISHED.
- ``finished_first`` / ``error_first``: RUN_FINISHED (or RUN_ERROR ``E_EARLY``) before
  RUN_STARTED, then a whole run; the stream stays open until the engine leaves.
- ``twice``: every frame written twice in a row: RUN_STARTED, TEXT_MESSAGE_START, the deltas
  ``Hel`` and ``lo``, TEXT_MESSAGE_END, RUN_FINISHED ``done``.
- ``huge``: RUN_STARTED, TEXT_MESSAGE_START, then one TEXT_MESSAGE_CONTENT frame of
  `HUGE_FRAME_BYTES` on one `data:` line (a delta of 4-byte characters, U+1F600), written in
  64 KiB pieces, then RUN_FINISHED.
- ``many``: RUN_STARTED, one text message of `MANY_DELTAS` one-character deltas
  (`many_text()`), RUN_FINISHED; frames are written 1,000 to a send.
- ``keepalive`` / ``silent``: RUN_STARTED, then a `: keepalive` comment every 20 ms (or nothing)
  until the engine leaves.
- ``cut_chunked`` / ``cut_close``: RUN_STARTED, TEXT_MESSAGE_START, the first half of a
  TEXT_MESSAGE_CONTENT frame, then the connection closes: inside an HTTP chunk (a transport
  error), or at the end of a body delimited by the connection's close (a clean end of body).
- ``notjson``: RUN_STARTED, then one frame of `NOT_JSON_BYTES` bytes of HTML; the stream stays
  open.
- ``foreign_run``: RUN_STARTED naming a run id of the remote's own (``remote-minted``, not
  ``R``), a text message, RUN_FINISHED for that run.
- ``foreign_finish`` / ``foreign_thread``: RUN_STARTED for ``R``, text, then RUN_FINISHED naming
  another run (or another thread); the stream stays open.
- ``gzip``: a gzip-compressed stream (``content-encoding: gzip``) although the engine asked for
  identity.
- ``error_body``: HTTP 500 with a body of `HUGE_FRAME_BYTES` bytes.

Every stop endpoint answers 200 with a body of `HUGE_FRAME_BYTES` bytes (announced by its
`content-length`), which an engine must not read.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from tools.peers.raw_http import read_request

__all__ = [
    "HUGE_FRAME_BYTES",
    "MANY_DELTAS",
    "NOT_JSON_BYTES",
    "HostileAgui",
    "many_text",
    "serve_hostile_agui",
]

#: The one oversized frame, and the stop endpoint's and error answer's body.
HUGE_FRAME_BYTES: Final = 50 << 20
MANY_DELTAS: Final = 200_000
NOT_JSON_BYTES: Final = 100 << 10
_PIECE: Final = 64 << 10
_KEEPALIVE_S: Final = 0.02

Send = Callable[[bytes], Awaitable[None]]


def many_text() -> str:
    """The text of the ``many`` scenario: `MANY_DELTAS` characters, one per delta (seeded, so
    a reordered or lost delta shows)."""
    rng = random.Random(20261204)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(rng.choice(alphabet) for _ in range(MANY_DELTAS))


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


@attrs.define
class HostileAgui:
    """The server's address and what it saw."""

    port: int = 0
    #: (scenario, RunAgentInput) of every run requested.
    runs: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    #: (scenario, body) of every stop.
    stops: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    #: Requested run id (``stop:<run id>`` for a stop's answer) -> bytes of the body written
    #: before the engine left it.
    left: dict[str, int] = attrs.field(factory=dict)
    #: Lower-cased headers of every run request.
    headers: list[dict[str, str]] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def record_left(self, key: str, written: int) -> None:
        self.left[key] = written
        self._changed.set()
        self._changed = trio.Event()

    async def wait_left(self, key: str) -> int:
        """How far the body `key` names got, once the engine left it (the remote notices a
        close on its next write)."""
        while key not in self.left:
            await self._changed.wait()
        return self.left[key]

    def url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.port}/agents/{scenario}"

    def stop_url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.port}/agents/{scenario}/stop"

    def stops_of(self, run_id: str | None) -> list[dict[str, Any]]:
        return [body for _, body in self.stops if body.get("runId") == run_id]


async def _forever(stream: trio.SocketStream, send: Send, keepalive: bool) -> None:
    """Until the engine leaves: keep-alives every 20 ms, or silence (then its close is seen)."""
    if keepalive:
        while True:
            await send(b": keepalive\n\n")
            await trio.sleep(_KEEPALIVE_S)
    while await stream.receive_some(1024):
        pass
    raise trio.BrokenResourceError  # the engine closed the connection


async def _play(
    scenario: str, run_id: str, thread_id: str, stream: trio.SocketStream, send: Send
) -> None:
    started = {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
    finished = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    message = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
    end = {"type": "TEXT_MESSAGE_END", "messageId": "m"}

    def delta(text: str) -> dict[str, Any]:
        return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": text}

    if scenario == "ok":
        await send(b"".join(map(_frame, [started, message, delta("fine"), end, finished])))
    elif scenario in ("finished_first", "error_first"):
        early = (
            finished
            if scenario == "finished_first"
            else {
                "type": "RUN_ERROR",
                "message": "refused before starting",
                "code": "E_EARLY",
            }
        )
        await send(b"".join(map(_frame, [early, started, message, delta("late"), end, finished])))
        await _forever(stream, send, keepalive=False)
    elif scenario == "twice":
        events = [started, message, delta("Hel"), delta("lo"), end, {**finished, "result": "done"}]
        for event in events:
            await send(_frame(event) * 2)
    elif scenario == "huge":
        await send(_frame(started) + _frame(message))
        await send(b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"')
        piece = "\U0001f600".encode() * (_PIECE // 4)  # 4 bytes a character: bytes, not chars
        for _ in range(HUGE_FRAME_BYTES // _PIECE):
            await send(piece)
        await send(b'"}\n\n' + _frame(end) + _frame(finished))
    elif scenario == "many":
        await send(_frame(started) + _frame(message))
        text = many_text()
        for start in range(0, len(text), 1000):
            await send(b"".join(_frame(delta(c)) for c in text[start : start + 1000]))
        await send(_frame(end) + _frame({**finished, "result": "many done"}))
    elif scenario in ("keepalive", "silent"):
        await send(_frame(started))
        await _forever(stream, send, keepalive=scenario == "keepalive")
    elif scenario in ("cut_chunked", "cut_close"):
        whole = _frame(delta("never whole"))
        await send(_frame(started) + _frame(message) + whole[: len(whole) // 2])
    elif scenario == "notjson":
        html = b"<html><body>" + b"<p>not an event</p>" * (NOT_JSON_BYTES // 19) + b"</body>"
        await send(_frame(started) + b"data: " + html[:NOT_JSON_BYTES] + b"\n\n")
        await _forever(stream, send, keepalive=False)
    elif scenario == "foreign_run":
        theirs = {"threadId": thread_id, "runId": "remote-minted"}
        await send(
            b"".join(
                map(
                    _frame,
                    [
                        {**started, **theirs},
                        message,
                        delta("mine"),
                        end,
                        {**finished, **theirs, "result": "minted"},
                    ],
                )
            )
        )
    elif scenario in ("foreign_finish", "foreign_thread"):
        other = (
            {"runId": "another-run"}
            if scenario == "foreign_finish"
            else {"threadId": "another-thread"}
        )
        await send(b"".join(map(_frame, [started, message, delta("so far"), end])))
        await send(_frame({**finished, **other}))
        await _forever(stream, send, keepalive=False)
    elif scenario == "gzip":
        await send(gzip.compress(b"".join(map(_frame, [started, message, delta("z"), end]))))
    else:
        raise ValueError(f"unknown scenario {scenario!r}")


def _head(scenario: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "content-type: text/event-stream", "connection: close"]
    if scenario != "cut_close":  # cut_close: the body ends when the connection does
        lines.append("transfer-encoding: chunked")
    if scenario == "gzip":
        lines.append("content-encoding: gzip")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _answer_huge(
    server: HostileAgui, key: str, stream: trio.SocketStream, status: str
) -> None:
    """A `content-length` answer of `HUGE_FRAME_BYTES` bytes, written while the reader reads;
    how far it got before the reader left goes to `server.left[key]`."""
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain\r\n"
        f"content-length: {HUGE_FRAME_BYTES}\r\nconnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode())
    piece = b"e" * _PIECE
    written = 0
    try:
        for _ in range(HUGE_FRAME_BYTES // _PIECE):
            await stream.send_all(piece)
            written += len(piece)
    finally:
        server.record_left(key, written)


def _handler(server: HostileAgui) -> Callable[[trio.SocketStream], Awaitable[None]]:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                method, path, headers, body = await read_request(stream)
            except (EOFError, ValueError, trio.BrokenResourceError):
                return
            parts = path.strip("/").split("/")
            scenario = parts[1] if len(parts) > 1 else ""
            try:
                if method == "POST" and len(parts) == 3 and parts[2] == "stop":
                    stop = json.loads(body or b"{}")
                    server.stops.append((scenario, stop))
                    await _answer_huge(server, f"stop:{stop.get('runId')}", stream, "200 OK")
                    return
                run_input = json.loads(body or b"{}")
                server.runs.append((scenario, run_input))
                server.headers.append(headers)
                if scenario == "error_body":
                    key = str(run_input.get("runId"))
                    await _answer_huge(server, key, stream, "500 Internal Server Error")
                    return
                await _stream(server, scenario, run_input, stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    return handle


async def _stream(
    server: HostileAgui, scenario: str, run_input: dict[str, Any], stream: trio.SocketStream
) -> None:
    run_id, thread_id = str(run_input.get("runId")), str(run_input.get("threadId"))
    chunked = scenario != "cut_close"
    written = 0

    async def send(data: bytes) -> None:
        nonlocal written
        try:
            if chunked:
                await stream.send_all(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            server.record_left(run_id, written)
            raise
        written += len(data)

    await stream.send_all(_head(scenario))
    await _play(scenario, run_id, thread_id, stream, send)
    if scenario == "cut_chunked":
        # A chunk announced longer than what follows, then the close: the body never ends.
        await stream.send_all(b"400\r\n" + b"data: {")
        return
    if chunked:
        await stream.send_all(b"0\r\n\r\n")


async def serve_hostile_agui(
    *, task_status: trio.TaskStatus[HostileAgui] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve until cancelled; `task_status` gets the `HostileAgui` (its port set)."""
    server = HostileAgui()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    server.port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, _handler(server), listeners)
        task_status.started(server)
