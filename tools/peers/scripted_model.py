"""A scripted model endpoint for the real Claude Code and Codex CLIs (tests only, no model).

Run it in its own process::

    python -m tools.peers.scripted_model --port 0 [--watch-stdin]

It binds 127.0.0.1, prints exactly one line ``READY <port>`` on stdout once it listens (logs go
to stderr) and, with ``--watch-stdin``, exits when its stdin closes. It speaks just enough of two
model APIs for the CLIs to run a whole turn offline:

- Anthropic Messages (Claude Code, ``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>``):
  ``POST /v1/messages`` streaming (SSE ``message_start``, ``content_block_start|delta|stop`` for
  ``thinking``, ``text`` and ``tool_use`` with ``input_json_delta``, ``message_delta`` with the
  stop reason, ``message_stop``) or not (one JSON message), and
  ``POST /v1/messages/count_tokens``.
- OpenAI Responses (Codex, a model provider with ``base_url=http://127.0.0.1:<port>/v1`` and
  ``wire_api="responses"``): ``POST /v1/responses`` streaming (SSE ``response.created``,
  ``response.output_item.added|done`` for ``reasoning``, ``message`` and ``function_call``
  items, ``response.output_text.delta``, ``response.function_call_arguments.delta``,
  ``response.completed``), and ``GET /v1/models``.

Every reply is computed from the request alone (the server keeps no conversation state):

- If the request offers a delegate tool (a tool whose name contains ``delegate_to_agent``) and
  the conversation holds fewer results of it than the prompt has ``DELEGATE:`` directives (at
  least one), the reply is a short text plus one call of that tool. A tool listed under a
  namespace (Codex lists MCP tools under ``mcp__<server>``) is called with that ``namespace``.
- Otherwise, when there was a tool result, the reply is a final text that quotes it:
  ``Delegation result: <summary>`` (the ``Summary:`` line of the result text, or its
  gist of its JSON (``adapters.parents.result_gist``: the ``summary``, or what the lean
  result's ``output.text`` concludes with), else the whole text), one line per result.
- Otherwise a short plain text (``Scripted reply.``): what the CLIs' side requests get.

With an ``ASK:`` directive the tool is ``ask_requester`` instead (a tool whose name contains
it): one call with ``{"question": <the directive's text>}``, then a final text that quotes its
result as ``Requester said: <answer>`` (the ``answer`` field when the result is JSON).

Directives are lines of the user prompt (the first user message text that is not a wrapped
``<...>`` context block the CLI added):

- ``DELEGATE: {"agent": "research", "objective": "..."}`` the arguments of one tool call; the
  n-th directive is the n-th call. Without any, one call with
  ``{"agent": "research", "objective": <the prompt without directive lines>}``.
- ``THINK: <text>`` the first reply starts with a thinking block (Anthropic, with a signature) or
  a reasoning item with a summary (OpenAI).
- ``SAY: <text>`` the text said before each tool call (default ``Delegating to <agent>.``).
- ``FINAL: <text>`` a line put before the quoted results in the final text.
- ``ASK: <question>`` ask the requester instead of delegating (see above).
- ``PARALLEL: yes`` the first tool-call reply carries every ``DELEGATE`` call at once (several
  ``tool_use`` blocks / ``function_call`` items in one reply), as a model asking for parallel
  calls does; the final text follows their results.
- ``READ_REST: yes`` (Anthropic) once every delegation has its result, when the last one names
  more output to read (``output.next_offset`` of the JSON, or ``offset=N`` in the text) and the
  request offers a tool whose name contains ``read_delegation_output``: one call of it with
  ``{"delegation_id": ..., "offset": N}``, then the final text.
- ``MODEL_ERROR: <http status>`` every model request fails with that status and an error body
  in the API's own shape (use a 4xx: the CLIs retry 5xx for a long while).

Test hooks: ``GET /_test/log`` returns ``{"requests": [...]}``, one record per request received
(``api``, ``method``, ``path``, ``query``, ``headers`` with credential values replaced by
``<redacted>``, ``body``, ``reply`` describing what was answered (``kind`` ``tool_call`` with
``tool_call_id``, ``tool_name``, ``namespace`` and ``arguments``, or ``text``; ``thinking``;
``error``), ``time``); ``POST /_test/reset`` forgets them. Any other path is recorded and gets a
404, so a test sees what else a CLI asked for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adapters.listener import listening_socket, serve_on_uvicorn
from adapters.parents import result_gist
from tools.peers.children import announce_ready

log = logging.getLogger("scripted_model")

DELEGATE_TOOL = "delegate_to_agent"
ASK_TOOL = "ask_requester"
READ_TOOL = "read_delegation_output"
DEFAULT_AGENT = "research"
PLAIN_REPLY = "Scripted reply."
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})
_DIRECTIVE = re.compile(
    r"^[ \t]*(DELEGATE|THINK|SAY|FINAL|ASK|PARALLEL|READ_REST|MODEL_ERROR):[ \t]*(.*)$", re.M
)


# --- what the prompt asks for (sans-IO) ----------------------------------------------------------


@dataclass
class Script:
    """The directives of one conversation's prompt."""

    prompt: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    think: str | None = None
    say: str | None = None
    final: str | None = None
    ask: str | None = None
    parallel: bool = False
    read_rest: bool = False
    model_error: int | None = None

    @property
    def tool(self) -> str:
        """What the name of the tool this script calls contains."""
        return ASK_TOOL if self.ask is not None else DELEGATE_TOOL


def read_script(prompt: str) -> Script:
    """The directives in `prompt`; a malformed DELEGATE object is passed on as a string."""
    script = Script()
    for match in _DIRECTIVE.finditer(prompt):
        name, value = match.group(1), match.group(2).strip()
        if name == "DELEGATE":
            try:
                arguments, _ = json.JSONDecoder().raw_decode(value)
            except ValueError:
                arguments = {"agent": DEFAULT_AGENT, "objective": value}
            script.calls.append(arguments if isinstance(arguments, dict) else {"value": arguments})
        elif name == "THINK":
            script.think = value
        elif name == "SAY":
            script.say = value
        elif name == "FINAL":
            script.final = value
        elif name == "ASK":
            script.ask = value
        elif name == "PARALLEL":
            script.parallel = value.lower() in ("yes", "true", "1")
        elif name == "READ_REST":
            script.read_rest = value.lower() in ("yes", "true", "1")
        elif name == "MODEL_ERROR":
            script.model_error = int(value)
    script.prompt = _DIRECTIVE.sub("", prompt).strip()
    if script.ask is not None:
        script.calls = [{"question": script.ask}]
    elif not script.calls:
        script.calls.append({"agent": DEFAULT_AGENT, "objective": script.prompt or "no prompt"})
    return script


def _is_context_block(text: str) -> bool:
    """A block the CLI wraps around context it adds (`<system-reminder>...`)."""
    stripped = text.strip()
    return stripped.startswith("<") and stripped.endswith(">")


def _first_prompt(texts: Iterator[str]) -> str:
    for text in texts:
        if text.strip() and not _is_context_block(text):
            return text
    return ""


def quote_result(text: str) -> str:
    """What the final answer quotes of one tool result: its summary when there is one."""
    # Claude Code hands the model the structured result as JSON; Codex prefixes it with
    # "Wall time: ...\nOutput:\n".
    start = text.find("{")
    try:
        document, _ = json.JSONDecoder().raw_decode(text, start) if start >= 0 else (None, 0)
    except ValueError:
        document = None
    if isinstance(document, dict) and ("summary" in document or "output" in document):
        return result_gist(document)
    for line in text.splitlines():
        if line.startswith("Summary: "):
            return line.removeprefix("Summary: ")
    return text.strip()


def quote_answer(text: str) -> str:
    """What the final answer quotes of an `ask_requester` result: the answer itself."""
    start = text.find("{")
    try:
        document, _ = json.JSONDecoder().raw_decode(text, start) if start >= 0 else (None, 0)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("answer"), str):
        return str(document["answer"])
    _, marker, output = text.partition("Output:\n")  # Codex's prefix
    return (output if marker else text).strip()


def rest_to_read(text: str) -> dict[str, Any] | None:
    """The arguments that read on from a delegation result that did not show all its output."""
    start = text.find("{")
    try:
        document, _ = json.JSONDecoder().raw_decode(text, start) if start >= 0 else (None, 0)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("output"), dict):
        offset = document["output"].get("next_offset")
        if isinstance(offset, int):
            return {"delegation_id": document.get("delegation_id"), "offset": offset}
        return None
    found = re.search(r"delegation_id='([^']*)', offset=(\d+)", text)
    return {"delegation_id": found[1], "offset": int(found[2])} if found else None


def final_text(script: Script, results: list[str]) -> str:
    lines = [script.final] if script.final else []
    if script.ask is not None:
        lines += [f"Requester said: {quote_answer(result)}" for result in results]
    else:
        lines += [f"Delegation result: {quote_result(result)}" for result in results]
    return "\n".join(lines) or PLAIN_REPLY


@dataclass
class Turn:
    """What one model reply holds, in order: thinking, text, then a tool call (and, with
    `PARALLEL`, the `more_calls` of the same tool: (tool call id, arguments) each)."""

    thinking: str | None = None
    text: str = ""
    tool_name: str | None = None
    namespace: str | None = None
    arguments: dict[str, Any] | None = None
    tool_call_id: str | None = None
    more_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def calls(self) -> list[tuple[str | None, dict[str, Any] | None]]:
        """Every tool call of the reply, in order: (id, arguments)."""
        if self.tool_name is None:
            return []
        return [(self.tool_call_id, self.arguments), *self.more_calls]

    def record(self) -> dict[str, Any]:
        if self.tool_name is None:
            return {"kind": "text", "text": self.text, "thinking": self.thinking}
        return {
            "kind": "tool_call",
            "text": self.text,
            "thinking": self.thinking,
            "tool_name": self.tool_name,
            "namespace": self.namespace,
            "tool_call_id": self.tool_call_id,
            "arguments": self.arguments,
            "more_calls": [{"tool_call_id": i, "arguments": a} for i, a in self.more_calls],
        }


def plan_turn(
    script: Script, tool: tuple[str, str | None] | None, results: list[str], id_prefix: str
) -> Turn:
    """The reply to a request offering `tool` (name, namespace) after `results` of it."""
    think = script.think if not results else None
    if tool is None or len(results) >= len(script.calls):
        if tool is None and not results:
            return Turn(text=PLAIN_REPLY)
        return Turn(text=final_text(script, results))
    arguments = script.calls[len(results)]
    agent = arguments.get("agent", "the agent")
    said = "Asking the requester." if script.ask is not None else f"Delegating to {agent}."
    more_calls = []
    if script.parallel and not results:
        more_calls = [(f"{id_prefix}{secrets.token_hex(12)}", a) for a in script.calls[1:]]
    return Turn(
        more_calls=more_calls,
        thinking=think,
        text=script.say or said,
        tool_name=tool[0],
        namespace=tool[1],
        arguments=arguments,
        tool_call_id=f"{id_prefix}{secrets.token_hex(12)}",
    )


# --- Anthropic Messages --------------------------------------------------------------------------


def _anthropic_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                yield str(block.get("text", ""))


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content)


def anthropic_turn(body: dict[str, Any]) -> tuple[Script, Turn]:
    messages = body.get("messages") or []
    user_texts = (
        text
        for message in messages
        if message.get("role") == "user"
        for text in _anthropic_texts(message.get("content"))
    )
    script = read_script(_first_prompt(user_texts))
    tool = next(
        (
            (str(t["name"]), None)
            for t in body.get("tools") or []
            if isinstance(t, dict) and script.tool in str(t.get("name", ""))
        ),
        None,
    )
    delegate_ids = {
        block.get("id")
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict)
        and block.get("type") == "tool_use"
        and script.tool in str(block.get("name", ""))
    }
    results = [
        _tool_result_text(block.get("content"))
        for message in messages
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict)
        and block.get("type") == "tool_result"
        and block.get("tool_use_id") in delegate_ids
    ]
    read_tool = next(
        (
            str(t["name"])
            for t in body.get("tools") or []
            if isinstance(t, dict) and READ_TOOL in str(t.get("name", ""))
        ),
        None,
    )
    read_called = any(
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("name") == read_tool
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
    )
    if script.read_rest and read_tool and not read_called and len(results) >= len(script.calls):
        arguments = rest_to_read(results[-1]) if results else None
        if arguments is not None:
            return script, Turn(
                text="Reading the rest.",
                tool_name=read_tool,
                arguments=arguments,
                tool_call_id=f"toolu_{secrets.token_hex(12)}",
            )
    return script, plan_turn(script, tool, results, "toolu_")


def _anthropic_blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking is not None:
        signature = secrets.token_urlsafe(24)
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": signature})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for call_id, arguments in turn.calls():
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": turn.tool_name, "input": arguments}
        )
    return blocks


def _usage(body: dict[str, Any]) -> dict[str, int]:
    return {"input_tokens": max(1, len(json.dumps(body)) // 4)}


def anthropic_message(body: dict[str, Any], turn: Turn) -> dict[str, Any]:
    return {
        "id": f"msg_{secrets.token_hex(12)}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": _anthropic_blocks(turn),
        "stop_reason": "tool_use" if turn.tool_name else "end_turn",
        "stop_sequence": None,
        "usage": {
            **_usage(body),
            "output_tokens": max(1, len(turn.text) // 4),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def anthropic_events(body: dict[str, Any], turn: Turn) -> Iterator[tuple[str, dict[str, Any]]]:
    message = anthropic_message(body, turn)
    content, usage = message["content"], message["usage"]
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
    )
    for index, block in enumerate(content):
        if block["type"] == "thinking":
            start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        else:
            start = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(json.dumps(block["input"]), 24)
            ]
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


# --- OpenAI Responses ----------------------------------------------------------------------------


def _find_openai_tool(
    tools: Any, namespace: str | None = None, word: str = DELEGATE_TOOL
) -> tuple[str, str | None] | None:
    """The (name, namespace) of the tool whose name contains `word` (the delegate tool),
    looking inside namespace entries too."""
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        nested = tool.get("tools")
        if isinstance(nested, list):
            space = str(tool.get("name") or tool.get("namespace") or "")
            found = _find_openai_tool(nested, space, word)
            if found is not None:
                return found
            continue
        name = str(tool.get("name", ""))
        if word in name:
            return name, tool.get("namespace") or namespace
    return None


def _openai_texts(items: list[Any]) -> Iterator[str]:
    for item in items:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("input_text", "text"):
                    yield str(part.get("text", ""))


def _openai_output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and "content" in output:
        return _openai_output_text(output["content"])
    if isinstance(output, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in output
        )
    return json.dumps(output)


def openai_turn(body: dict[str, Any]) -> tuple[Script, Turn]:
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    script = read_script(_first_prompt(_openai_texts(items)))
    tool = _find_openai_tool(body.get("tools"), word=script.tool)
    delegate_ids = {
        item.get("call_id")
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "function_call"
        and script.tool in str(item.get("name", ""))
    }
    results = [
        _openai_output_text(item.get("output"))
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") in delegate_ids
    ]
    return script, plan_turn(script, tool, results, "call_")


def openai_items(turn: Turn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.thinking is not None:
        items.append(
            {
                "id": f"rs_{secrets.token_hex(12)}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": turn.thinking}],
            }
        )
    if turn.text:
        items.append(
            {
                "id": f"msg_{secrets.token_hex(12)}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    for call_id, arguments in turn.calls():
        call: dict[str, Any] = {
            "id": f"fc_{secrets.token_hex(12)}",
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": turn.tool_name,
            "arguments": json.dumps(arguments),
        }
        if turn.namespace:
            call["namespace"] = turn.namespace
        items.append(call)
    return items


def openai_events(body: dict[str, Any], turn: Turn) -> Iterator[tuple[str, dict[str, Any]]]:
    response: dict[str, Any] = {
        "id": f"resp_{secrets.token_hex(12)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": body.get("model", "scripted"),
        "output": [],
    }
    sequence = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(sequence), **fields}

    yield event("response.created", response=response)
    yield event("response.in_progress", response=response)
    items = openai_items(turn)
    for index, item in enumerate(items):
        ids = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            yield event(
                "response.output_item.added", output_index=index, item={**item, "summary": []}
            )
            text = item["summary"][0]["text"]
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            yield event("response.reasoning_summary_part.added", **ids, summary_index=0, part=part)
            for chunk in _chunks(text):
                yield event(
                    "response.reasoning_summary_text.delta", **ids, summary_index=0, delta=chunk
                )
            yield event("response.reasoning_summary_text.done", **ids, summary_index=0, text=text)
            part = {"type": "summary_text", "text": text}
            yield event("response.reasoning_summary_part.done", **ids, summary_index=0, part=part)
        elif item["type"] == "message":
            added = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=index, item=added)
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", **ids, content_index=0, part=part)
            for chunk in _chunks(text):
                yield event("response.output_text.delta", **ids, content_index=0, delta=chunk)
            yield event("response.output_text.done", **ids, content_index=0, text=text)
            part = item["content"][0]
            yield event("response.content_part.done", **ids, content_index=0, part=part)
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=index, item=added)
            for chunk in _chunks(item["arguments"], 24):
                yield event("response.function_call_arguments.delta", **ids, delta=chunk)
            yield event("response.function_call_arguments.done", **ids, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    input_tokens = _usage(body)["input_tokens"]
    output_tokens = max(1, len(turn.text) // 4)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    completed = {**response, "status": "completed", "output": items, "usage": usage}
    yield event("response.completed", response=completed)


# --- HTTP ----------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def record(self, request: Request, api: str | None) -> tuple[dict[str, Any], Any]:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {
            name: ("<redacted>" if name.lower() in _CREDENTIAL_HEADERS else value)
            for name, value in request.headers.items()
        }
        entry: dict[str, Any] = {
            "api": api,
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": headers,
            "body": body,
            "reply": None,
            "time": time.time(),
        }
        self.requests.append(entry)
        log.info("%s %s", request.method, request.url.path)
        return entry, body


def _sse(events: Iterator[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    async def stream() -> AsyncIterator[bytes]:
        for kind, data in events:
            yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
            await asyncio.sleep(0)

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )


def build_app() -> Starlette:
    recorder = Recorder()

    async def messages(request: Request) -> Response:
        entry, body = await recorder.record(request, "anthropic")
        if not isinstance(body, dict):
            return JSONResponse(_anthropic_error("invalid_request_error", "not JSON"), 400)
        script, turn = anthropic_turn(body)
        if script.model_error is not None:
            entry["reply"] = {"kind": "error", "status": script.model_error}
            error = _anthropic_error("invalid_request_error", "scripted model error")
            return JSONResponse(error, script.model_error)
        entry["reply"] = turn.record()
        if body.get("stream"):
            return _sse(anthropic_events(body, turn))
        return JSONResponse(anthropic_message(body, turn))

    async def count_tokens(request: Request) -> Response:
        entry, body = await recorder.record(request, "anthropic")
        usage = _usage(body if isinstance(body, dict) else {})
        entry["reply"] = {"kind": "count_tokens", **usage}
        return JSONResponse(usage)

    async def responses(request: Request) -> Response:
        entry, body = await recorder.record(request, "openai")
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "not JSON", "type": "invalid_request"}}, 400)
        script, turn = openai_turn(body)
        if script.model_error is not None:
            entry["reply"] = {"kind": "error", "status": script.model_error}
            error = {
                "error": {
                    "message": "scripted model error",
                    "type": "invalid_request_error",
                    "code": None,
                    "param": None,
                }
            }
            return JSONResponse(error, script.model_error)
        entry["reply"] = turn.record()
        if body.get("stream") is False:
            items = openai_items(turn)
            return JSONResponse({"id": "resp_x", "status": "completed", "output": items})
        return _sse(openai_events(body, turn))

    async def models(request: Request) -> Response:
        entry, _ = await recorder.record(request, "openai")
        entry["reply"] = {"kind": "models"}
        return JSONResponse({"object": "list", "data": [], "models": []})

    async def test_log(request: Request) -> Response:
        return JSONResponse({"requests": recorder.requests})

    async def test_reset(request: Request) -> Response:
        recorder.requests.clear()
        return JSONResponse({"ok": True})

    async def other(request: Request) -> Response:
        entry, _ = await recorder.record(request, None)
        entry["reply"] = {"kind": "not_found"}
        return JSONResponse({"error": {"message": f"no route {request.url.path}"}}, 404)

    any_method = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/_test/log", test_log, methods=["GET"]),
            Route("/_test/reset", test_reset, methods=["POST"]),
            Route("/{path:path}", other, methods=any_method),
        ]
    )


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


async def serve(host: str, port: int, *, watch_stdin: bool = False) -> None:
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(), log_config=None, access_log=False, http="h11", ws="none", lifespan="off"
    )
    with sock:
        await serve_on_uvicorn(
            config, sock, ready=announce_ready(bound_port), watch_stdin=watch_stdin
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr)
    asyncio.run(serve(args.host, args.port, watch_stdin=args.watch_stdin))


if __name__ == "__main__":
    main()
