"""A raw A2A JSON-RPC server for wire cases the SDK server cannot produce (tests only).

It runs inside the test's own Trio loop (`await nursery.start(serve_raw_a2a, scenario)`), speaks
just enough HTTP/1.1 (one request per connection) to serve an agent card and answer the JSON-RPC
methods a delegation uses, and streams whatever frames the test scripted: valid `StreamResponse`
JSON, bad JSON, terminals before any task, events of another task... It records every request so
tests can assert what the engine sent (e.g. that CancelTask arrived, with its tenant).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import trio

from tools.peers.raw_http import read_request, respond_json

Frame = str | dict[str, Any]


@attrs.define
class RawScenario:
    """What the raw server answers. `stream` and `subscribe` are SSE frames: a dict is wrapped
    as a JSON-RPC result, a str is sent verbatim as the `data:` payload (bad JSON included)."""

    stream: list[Frame] = attrs.field(factory=list)
    subscribe: list[Frame] | None = None
    get_task: dict[str, Any] | None = None
    cancel_state: str = "TASK_STATE_CANCELED"
    #: Refuse SendStreamingMessage (JSON-RPC UnsupportedOperation) although the card streams;
    #: SendMessage then answers `send_result`.
    refuse_streaming: bool = False
    send_result: dict[str, Any] | None = None
    streaming: bool = True
    #: A card document to serve instead of the valid one (malformed-card tests).
    card_override: dict[str, Any] | None = None
    #: Where the card says the JSON-RPC interface is (default: this server).
    interface_url: str | None = None
    requests: list[dict[str, Any]] = attrs.field(factory=list)
    #: Lower-cased request headers of every request, card fetches included.
    headers: list[dict[str, str]] = attrs.field(factory=list)
    port: int = 0

    @property
    def card_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/agent-card.json"

    def card(self) -> dict[str, Any]:
        if self.card_override is not None:
            return self.card_override
        return {
            "name": "raw",
            "description": "A raw test agent",
            "version": "1.0",
            "supportedInterfaces": [
                {
                    "url": self.interface_url or f"http://127.0.0.1:{self.port}/jsonrpc",
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0",
                }
            ],
            "capabilities": {"streaming": self.streaming},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "raw", "name": "raw", "description": "raw", "tags": ["raw"]}],
        }

    def methods(self) -> list[str]:
        return [r.get("method", "") for r in self.requests]


def task_frame(task_id: str, state: str, context_id: str = "ctx-raw") -> dict[str, Any]:
    return {"task": {"id": task_id, "contextId": context_id, "status": {"state": state}}}


def status_frame(task_id: str, state: str, text: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if text is not None:
        status["message"] = {
            "messageId": f"m-{state}",
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
        }
    return {"statusUpdate": {"taskId": task_id, "contextId": "ctx-raw", "status": status}}


async def _respond_sse(stream: trio.SocketStream, rpc_id: Any, frames: list[Frame]) -> None:
    head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    await stream.send_all(head.encode())
    for frame in frames:
        payload = (
            frame
            if isinstance(frame, str)
            else json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": frame})
        )
        await stream.send_all(f"data: {payload}\n\n".encode())


def _handler(scenario: RawScenario) -> Callable[[trio.SocketStream], Any]:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await answer(stream)
            except trio.BrokenResourceError:
                # The client hung up mid-answer (as one refusing an oversized body does): its
                # choice, not a failure of this server.
                return

    async def answer(stream: trio.SocketStream) -> None:
        try:
            method, path, headers, body = await read_request(stream)
        except (EOFError, ValueError, trio.BrokenResourceError):
            return
        scenario.headers.append(headers)
        if method == "GET" and path.endswith("agent-card.json"):
            await respond_json(stream, scenario.card())
            return
        request = json.loads(body or b"{}")
        scenario.requests.append(request)
        rpc_id = request.get("id")
        name = request.get("method")
        if name == "SendStreamingMessage" and scenario.refuse_streaming:
            error = {"code": -32004, "message": "Streaming is not supported"}
            await respond_json(stream, {"jsonrpc": "2.0", "id": rpc_id, "error": error})
        elif name == "SendMessage" and scenario.send_result is not None:
            reply = {"jsonrpc": "2.0", "id": rpc_id, "result": scenario.send_result}
            await respond_json(stream, reply)
        elif name in ("SendStreamingMessage", "SendMessage"):
            await _respond_sse(stream, rpc_id, scenario.stream)
        elif name == "SubscribeToTask" and scenario.subscribe is not None:
            await _respond_sse(stream, rpc_id, scenario.subscribe)
        elif name == "GetTask" and scenario.get_task is not None:
            await respond_json(
                stream, {"jsonrpc": "2.0", "id": rpc_id, "result": scenario.get_task}
            )
        elif name == "CancelTask":
            task_id = request.get("params", {}).get("id", "")
            result = {
                "id": task_id,
                "contextId": "ctx-raw",
                "status": {"state": scenario.cancel_state},
            }
            await respond_json(stream, {"jsonrpc": "2.0", "id": rpc_id, "result": result})
        else:
            error = {"code": -32001, "message": "Task not found"}
            await respond_json(stream, {"jsonrpc": "2.0", "id": rpc_id, "error": error})

    return handle


async def serve_raw_a2a(
    scenario: RawScenario, *, task_status: trio.TaskStatus[RawScenario] = trio.TASK_STATUS_IGNORED
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    scenario.port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started(scenario)
        await trio.serve_listeners(_handler(scenario), listeners, handler_nursery=nursery)
