"""Claude Code as a run's parent agent: its stream-json output as parent events.

`ClaudeStreamParser` is sans-IO: one line of `claude -p --output-format stream-json --verbose
[--include-partial-messages]` in, the run's parent events out. It never raises on what the CLI
prints: a line that is not JSON, not an object, or of a type this version does not know becomes a
`claude.raw` custom event. Lines, as Claude Code 2.1.x writes them:

- `system` `init`: tools and MCP server status -> a `claude.init` custom event; the run's MCP
  server `failed` (a wrong token), `needs-auth` or missing is `fatal` (the CLI would go on
  without the delegation tool), `pending` a `claude.warning`. `system` `api_retry` (a model
  request failed and is retried: `attempt`, `max_retries`, `error`) -> the run's status
  (`parent.status`, counted until the model answers again). Other `system` lines ->
  `claude.system` (the per-delta `thinking_tokens` estimates are dropped).
- `stream_event` (with `--include-partial-messages`): the Messages API stream. Content blocks
  by index: `text` -> text start/delta/end, `thinking` -> reasoning start/delta/end, `tool_use`
  -> tool call start (with the block's `toolu_...` id, the id Claude Code also sends as
  `_meta["claudecode/toolUseId"]`, so delegations sit under their call), argument deltas
  (`input_json_delta`), end.
- `assistant`: a complete message, one or all of its blocks. When its message was streamed, the
  blocks already streamed are not repeated (a tool_use by id; a text or thinking block whose
  streamed text it extends, the missing suffix given as a delta); anything else is published
  whole. Claude Code writes a block's `assistant` line before the block's `content_block_stop`.
- `user`: `tool_result` blocks -> tool call results (the MCP structured content when the line
  carries it in `tool_use_result`).
- `tool_progress`: a call still running. Claude Code writes one for a tool call that has waited
  30 s and every 30 s after (a heartbeat: `tool_use_id` `<call id>-heartbeat-<n>`,
  `parent_tool_use_id` the call, `tool_name`, `elapsed_time_seconds`, `heartbeat: true`) and
  for some tools' own progress (`tool_use_id` the call). -> a `tool_call.progress` custom event
  naming the parent's call (`tool_call_id`, `tool_name`, `elapsed_seconds`), which the page
  shows on the call. A call of Claude's own subagent is named by `parent_tool_use_id` only:
  its progress is that of the parent's call running the subagent. Progress of a call that
  already has its result, or of no call this parser saw, is dropped.
- `result`: the final text, usage, `is_error` -> a `claude.result` custom event and the verdict.

Lines of Claude Code's own subagents (`parent_tool_use_id` set) become `claude.sidechain` custom
events: they are not the parent's words. `ClaudeCodeParent` is the I/O side: it runs the CLI
through `adapters.parents._process` with the run's MCP endpoint, the token in the environment.

Backgrounded MCP calls: Claude Code 2.1.x can move an MCP call that runs longer than
`CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS` (default 120 s) to the background. Under `-p` with stdin
closed (how this adapter runs it) that happens only when its environment also sets
`CLAUDE_AUTO_BACKGROUND_TASKS`. The call's `tool_result` is then a placeholder ("... was moved to
the background as task <id> and keeps running"), the model answers without the delegation's
result, and the MCP request stays open: a result that arrives before the CLI gives up on its
background tasks (measured: ~5 s after its `result` line) starts a follow-up turn carrying it
(`system` `task_notification`, a second `init` and `result`); a later one is lost, the CLI
cancelling the call. Delegations are long by nature, so `claude_command` sets the threshold to
`ClaudeCodeConfig.auto_background_ms`, 0 by default: never background, the result always
arrives as the call's own `tool_result`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from typing import Any, Final

import attrs

from adapters.parents._kinds import CLAUDE_CODE
from adapters.parents._process import (
    TOKEN_ENV,
    CliConfig,
    CliParent,
    JsonLinesParser,
    ParentEvent,
    ParentOutcome,
    Verdict,
    child_environment,
    clip,
    drive_parent,
)
from engine import Kind, Run

__all__ = ["ClaudeCodeConfig", "ClaudeCodeParent", "ClaudeStreamParser", "claude_command"]

PREFIX: Final = "claude"
#: The custom event of a parent tool call still running (CLI-neutral: the page draws it).
TOOL_CALL_PROGRESS: Final = "tool_call.progress"
_HEARTBEAT_SUFFIX: Final = re.compile(r"-heartbeat-\d{1,12}$")
#: The model name of the assistant message Claude Code writes itself when the API failed.
_SYNTHETIC_MODEL: Final = "<synthetic>"
#: How many streamed messages and tool calls the parser remembers for de-duplication.
_REMEMBERED: Final = 512
_TEXT: Final = {
    "text": (Kind.PARENT_TEXT_START, Kind.PARENT_TEXT_DELTA, Kind.PARENT_TEXT_END, "text"),
    "thinking": (
        Kind.PARENT_REASONING_START,
        Kind.PARENT_REASONING_DELTA,
        Kind.PARENT_REASONING_END,
        "thinking",
    ),
}
_DELTA_FIELD: Final = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking")}
_TOOL_BLOCKS: Final = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_QUIET_SYSTEM: Final = frozenset({"thinking_tokens"})
_INIT_FIELDS: Final = (
    "session_id",
    "model",
    "claude_code_version",
    "cwd",
    "permissionMode",
    "apiKeySource",
    "mcp_servers",
)
_RESULT_FIELDS: Final = (
    "subtype",
    "is_error",
    "num_turns",
    "duration_ms",
    "duration_api_ms",
    "total_cost_usd",
    "stop_reason",
    "terminal_reason",
    "usage",
    "permission_denials",
    "errors",
    "session_id",
)


#: What a `result` line's subtype says went wrong. `success` with `is_error` is a run that ended
#: on an error the CLI reports in `result` (an API error, a refused request).
_FAILURES: Final = {
    "success": "ended on an error",
    "error_during_execution": "stopped during execution",
    "error_max_turns": "reached its turn limit",
    "error_max_budget_usd": "reached its budget limit",
    "error_max_structured_output_retries": "gave up producing its structured output",
}


def _failure(subtype: str) -> str:
    known = _FAILURES.get(subtype)
    return known if known is not None else f"failed ({clip(subtype, 80)})"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _small(value: Any, limit: int = 4000) -> Any:
    """`value` if its JSON is small, else a clipped string of it (custom events stay small)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return clip(repr(value), limit)
    return value if len(text) <= limit else clip(text, limit)


def _result_value(content: Any) -> Any:
    """A tool_result's content: its text when it is all text, else as it came."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [_str(b.get("text")) for b in content if isinstance(b, dict)]
        if texts and len(texts) == len(content) and all(t is not None for t in texts):
            return "".join(t or "" for t in texts)
    return content


class _Block:
    """One content block of a message: a text or thinking message, a tool call, or other."""

    __slots__ = ("confirmed", "id", "kind", "open", "text")

    def __init__(self, kind: str, block_id: str) -> None:
        self.kind = kind  # "text", "thinking", "tool" or "other"
        self.id = block_id  # message id of a text/thinking block, tool call id of a tool call
        self.text = ""
        self.open = True
        self.confirmed = False  # a full `assistant` line repeated it


class ClaudeStreamParser(JsonLinesParser):
    """Claude Code stream-json lines -> parent events. Sans-IO; see the module docs.

    `server_name` is the run's MCP server as named in `--mcp-config`: its status in the init
    line decides `fatal`.
    """

    prefix = PREFIX

    def __init__(self, server_name: str | None = None) -> None:
        super().__init__()
        self.server_name = server_name
        self.session_id: str | None = None
        self.model: str | None = None
        self.mcp_servers: dict[str, str] = {}
        self.result: dict[str, Any] | None = None
        self._fatal: str | None = None
        self._message: str | None = None  # the message being streamed
        self._blocks: dict[int, _Block] = {}  # its content blocks by index
        self._streamed: OrderedDict[str, list[_Block]] = OrderedDict()
        self._tools: OrderedDict[str, _Block] = OrderedDict()  # tool calls by id
        self._results: OrderedDict[str, None] = OrderedDict()  # tool calls with a result
        self._full_blocks: dict[str, int] = {}  # message id -> blocks seen in full lines
        self._ids: OrderedDict[str, None] = OrderedDict()  # message ids given out
        self._anonymous = 0

    # -- the parser interface ---------------------------------------------------------------

    @property
    def fatal(self) -> str | None:
        return self._fatal

    def _object(self, obj: dict[str, Any], line: str) -> list[ParentEvent]:
        kind = obj.get("type")
        if obj.get("parent_tool_use_id") and kind in ("assistant", "user", "stream_event"):
            return self._sidechain(obj, kind)
        if kind == "stream_event":
            self._answered()
            return self._stream_event(obj, line)
        if kind == "assistant":
            if _dict(obj.get("message")).get("model") != _SYNTHETIC_MODEL:
                self._answered()  # not the CLI's own stand-in for an answer that never came
            return self._assistant(obj)
        if kind == "user":
            return self._user(obj)
        if kind == "result":
            return self._result(obj)
        if kind == "tool_progress":
            return self._tool_progress(obj)
        if kind == "system":
            return self._system(obj)
        return self._raw("unknown_type", line, type=_small(kind, 100))

    def close(self) -> list[ParentEvent]:
        out: list[ParentEvent] = []
        self._close_message(out)
        for block in self._tools.values():
            if block.open:
                block.open = False
                out.append(ParentEvent(Kind.PARENT_TOOL_CALL_END, {"tool_call_id": block.id}))
        return out

    def verdict(self) -> Verdict:
        result = self.result
        if result is None:
            return Verdict(ok=False, error="Claude Code ended without a result line")
        text = _str(result.get("result"))
        usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
        session = _str(result.get("session_id")) or self.session_id
        subtype = _str(result.get("subtype")) or "unknown"
        if result.get("is_error") is True or subtype != "success":
            error = f"Claude Code {_failure(subtype)}"
            detail = text or "; ".join(str(e) for e in result.get("errors") or [])
            if detail:
                error += f": {clip(detail, 1000)}"
            return Verdict(ok=False, text=text, error=error, usage=usage, session_id=session)
        return Verdict(ok=True, text=text, usage=usage, session_id=session)

    # -- line types -------------------------------------------------------------------------

    def _system(self, obj: dict[str, Any]) -> list[ParentEvent]:
        subtype = _str(obj.get("subtype"))
        if subtype in _QUIET_SYSTEM:
            return []
        if subtype == "api_retry":  # a model request failed and is retried
            attempt, limit = obj.get("attempt"), obj.get("max_retries")
            error = _str(obj.get("error")) or "unknown"
            status = obj.get("error_status")
            why = f"HTTP {status}" if isinstance(status, int) else error
            return [
                self._retrying(
                    f"Retrying the model request ({why})",
                    attempt=attempt if isinstance(attempt, int) else None,
                    max_retries=limit if isinstance(limit, int) else None,
                )
            ]
        if subtype != "init":
            fields = {k: _small(v, 1000) for k, v in obj.items() if k not in ("type", "uuid")}
            return [self._custom("system", fields)]
        self.session_id = _str(obj.get("session_id")) or self.session_id
        self.model = _str(obj.get("model")) or self.model
        servers = obj.get("mcp_servers")
        for server in servers if isinstance(servers, list) else []:
            if isinstance(server, dict) and isinstance(server.get("name"), str):
                self.mcp_servers[server["name"]] = str(server.get("status"))
        raw: dict[str, Any] = {k: _small(obj[k], 2000) for k in _INIT_FIELDS if k in obj}
        tools = obj.get("tools")
        if isinstance(tools, list):
            raw["tools"] = len(tools)
            raw["mcp_tools"] = [t for t in tools if isinstance(t, str) and t.startswith("mcp__")][
                :50
            ]
        out = [self._custom("init", raw)]
        name = self.server_name
        if name is not None and self._fatal is None:
            status = self.mcp_servers.get(name)
            state = f"status {status!r}" if status is not None else "not listed"
            message = (
                f"Claude Code could not use the run's MCP endpoint (server {name!r}: {state}), "
                "so it cannot call delegate_to_agent"
            )
            if status == "pending":  # still connecting: it may yet work
                out.append(self._custom("warning", {"message": message}))
            elif status != "connected":
                self._fatal = message
                out.append(self._custom("warning", {"message": message}))
        return out

    def _sidechain(self, obj: dict[str, Any], kind: Any) -> list[ParentEvent]:
        if kind == "stream_event":
            return []  # the complete `assistant` line of the sidechain follows
        message = _dict(obj.get("message"))
        raw = {
            "parent_tool_use_id": _small(obj.get("parent_tool_use_id"), 200),
            "type": kind,
            "content": _small(message.get("content"), 4000),
        }
        return [self._custom("sidechain", raw)]

    def _tool_progress(self, obj: dict[str, Any]) -> list[ParentEvent]:
        own = _str(obj.get("tool_use_id")) or ""
        candidates = (_HEARTBEAT_SUFFIX.sub("", own), own, _str(obj.get("parent_tool_use_id")))
        call = next((c for c in candidates if c and c in self._tools), None)
        if call is None or call in self._results:
            return []
        fields: dict[str, Any] = {"tool_call_id": call}
        name = _str(obj.get("tool_name"))
        if name:
            fields["tool_name"] = clip(name, 200)
        elapsed = _int(obj.get("elapsed_time_seconds"))  # whole seconds (Math.floor)
        if elapsed is not None and 0 <= elapsed < 10**9:
            fields["elapsed_seconds"] = elapsed
        if obj.get("heartbeat") is True:
            fields["heartbeat"] = True
        return [ParentEvent(Kind.PARENT_CUSTOM, {"name": TOOL_CALL_PROGRESS, "raw": fields})]

    def _result(self, obj: dict[str, Any]) -> list[ParentEvent]:
        out: list[ParentEvent] = []
        self._close_message(out)
        self.result = obj
        raw: dict[str, Any] = {k: _small(obj[k], 2000) for k in _RESULT_FIELDS if k in obj}
        out.append(self._custom("result", raw))
        return out

    # -- streamed messages ------------------------------------------------------------------

    def _stream_event(self, obj: dict[str, Any], line: str) -> list[ParentEvent]:
        event = obj.get("event")
        if not isinstance(event, dict):
            return self._raw("bad_stream_event", line)
        kind = event.get("type")
        out: list[ParentEvent] = []
        if kind == "message_start":
            self._close_message(out)
            message = _dict(event.get("message"))
            message_id = _str(message.get("id")) or self._anonymous_id()
            self._message = message_id
            self._streamed[message_id] = []
            while len(self._streamed) > _REMEMBERED:
                self._streamed.popitem(last=False)
        elif kind == "content_block_start":
            index = _int(event.get("index"))
            block = _dict(event.get("content_block"))
            if index is not None:
                self._start_block(out, index, block)
        elif kind == "content_block_delta":
            index = _int(event.get("index"))
            delta = _dict(event.get("delta"))
            if index is not None:
                self._delta(out, index, delta)
        elif kind == "content_block_stop":
            index = _int(event.get("index"))
            stopped = self._blocks.pop(index, None) if index is not None else None
            if stopped is not None:
                self._end_block(out, stopped)
        elif kind == "message_stop":
            self._close_message(out)
        elif kind == "error":
            out.append(self._custom("stream_error", {"error": _small(event.get("error"))}))
        elif kind not in ("message_delta", "ping"):
            return self._raw("unknown_stream_event", line, type=_small(kind, 100))
        return out

    def _anonymous_id(self) -> str:
        self._anonymous += 1
        return f"claude-msg-{self._anonymous}"

    def _unique(self, candidate: str) -> str:
        message_id, n = candidate, 1
        while message_id in self._ids:
            n += 1
            message_id = f"{candidate}.{n}"
        self._ids[message_id] = None
        while len(self._ids) > 4 * _REMEMBERED:
            self._ids.popitem(last=False)
        return message_id

    def _start_block(self, out: list[ParentEvent], index: int, content: dict[str, Any]) -> None:
        old = self._blocks.pop(index, None)
        if old is not None:
            self._end_block(out, old)
        if self._message is None:  # a block without message_start: open an anonymous message
            self._message = self._anonymous_id()
            self._streamed[self._message] = []
        kind = _str(content.get("type")) or "unknown"
        if kind in _TEXT:
            start, delta_kind, _, field = _TEXT[kind]
            block = _Block(kind, self._unique(f"{self._message}:{index}"))
            out.append(ParentEvent(start, {"message_id": block.id, "role": "assistant"}))
            text = _str(content.get(field))
            if text:
                block.text = text
                out.append(ParentEvent(delta_kind, {"message_id": block.id, "delta": text}))
        elif kind in _TOOL_BLOCKS:
            tool_id = _str(content.get("id")) or self._unique(f"{self._message}:{index}:tool")
            if tool_id in self._tools:  # the same call started twice: keep the first
                block = _Block("other", tool_id)
            else:
                block = _Block("tool", tool_id)
                self._remember_tool(block)
                name = _str(content.get("name")) or kind
                out.append(
                    ParentEvent(
                        Kind.PARENT_TOOL_CALL_START, {"tool_call_id": tool_id, "tool_name": name}
                    )
                )
                initial = content.get("input")
                if initial:  # the API starts `input` as {} and streams it as JSON text
                    text = json.dumps(initial, ensure_ascii=False, default=str)
                    block.text = text
                    out.append(
                        ParentEvent(
                            Kind.PARENT_TOOL_CALL_ARGS, {"tool_call_id": tool_id, "delta": text}
                        )
                    )
        else:
            block = _Block("other", "")  # images, server tool results: nothing to show
        self._blocks[index] = block
        self._streamed[self._message].append(block)

    def _delta(self, out: list[ParentEvent], index: int, delta: dict[str, Any]) -> None:
        kind = _str(delta.get("type"))
        block = self._blocks.get(index)
        if kind in _DELTA_FIELD:
            block_kind, field = _DELTA_FIELD[kind]
            text = _str(delta.get(field))
            if block is None:  # a delta without its block's start: start it now
                self._start_block(out, index, {"type": block_kind})
                block = self._blocks[index]
            if text and block.kind == block_kind and block.open:
                block.text += text
                delta_kind = _TEXT[block_kind][1]
                out.append(ParentEvent(delta_kind, {"message_id": block.id, "delta": text}))
        elif kind == "input_json_delta":
            text = _str(delta.get("partial_json"))
            if block is not None and block.kind == "tool" and block.open and text:
                block.text += text
                out.append(
                    ParentEvent(
                        Kind.PARENT_TOOL_CALL_ARGS, {"tool_call_id": block.id, "delta": text}
                    )
                )
        # signature_delta, citations_delta and unknown deltas carry nothing to show

    def _end_block(self, out: list[ParentEvent], block: _Block) -> None:
        if not block.open:
            return
        block.open = False
        if block.kind in _TEXT:
            out.append(ParentEvent(_TEXT[block.kind][2], {"message_id": block.id}))
        elif block.kind == "tool":
            out.append(ParentEvent(Kind.PARENT_TOOL_CALL_END, {"tool_call_id": block.id}))

    def _close_message(self, out: list[ParentEvent]) -> None:
        for index in sorted(self._blocks):
            self._end_block(out, self._blocks[index])
        self._blocks.clear()
        self._message = None

    def _remember_tool(self, block: _Block) -> None:
        self._tools[block.id] = block
        while len(self._tools) > _REMEMBERED:
            self._tools.popitem(last=False)

    # -- complete messages ------------------------------------------------------------------

    def _assistant(self, obj: dict[str, Any]) -> list[ParentEvent]:
        message = _dict(obj.get("message"))
        content = message.get("content")
        message_id = _str(message.get("id")) or self._anonymous_id()
        out: list[ParentEvent] = []
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return out
        streamed = self._streamed.get(message_id)
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = _str(block.get("type")) or ""
            if kind in _TOOL_BLOCKS:
                self._full_tool(out, message_id, block)
            elif kind in _TEXT:
                text = _str(block.get(_TEXT[kind][3])) or ""
                if streamed is None or not self._confirm(out, streamed, kind, text):
                    self._full_text(out, message_id, kind, text)
            # redacted_thinking, images and server tool results have nothing to show
        return out

    def _confirm(
        self, out: list[ParentEvent], streamed: list[_Block], kind: str, text: str
    ) -> bool:
        """Whether a full block repeats a streamed one (giving what the stream missed)."""
        for block in streamed:
            if block.kind != kind or block.confirmed or not text.startswith(block.text):
                continue
            block.confirmed = True
            missing = text[len(block.text) :]
            if missing and block.open:
                block.text = text
                out.append(ParentEvent(_TEXT[kind][1], {"message_id": block.id, "delta": missing}))
            return True
        return False

    def _full_text(self, out: list[ParentEvent], message_id: str, kind: str, text: str) -> None:
        n = self._full_blocks.get(message_id, 0)
        self._full_blocks[message_id] = n + 1
        while len(self._full_blocks) > _REMEMBERED:
            del self._full_blocks[next(iter(self._full_blocks))]
        start, delta, end, _ = _TEXT[kind]
        block_id = self._unique(f"{message_id}:{n}")
        out.append(ParentEvent(start, {"message_id": block_id, "role": "assistant"}))
        if text:
            out.append(ParentEvent(delta, {"message_id": block_id, "delta": text}))
        out.append(ParentEvent(end, {"message_id": block_id}))

    def _full_tool(self, out: list[ParentEvent], message_id: str, block: dict[str, Any]) -> None:
        tool_id = _str(block.get("id"))
        if tool_id is None:
            n = self._full_blocks.get(message_id, 0)
            self._full_blocks[message_id] = n + 1
            tool_id = self._unique(f"{message_id}:{n}:tool")
        if tool_id in self._tools:
            return  # streamed already, or a repeated line
        call = _Block("tool", tool_id)
        call.open = False
        self._remember_tool(call)
        name = _str(block.get("name")) or _str(block.get("type")) or "tool"
        out.append(
            ParentEvent(Kind.PARENT_TOOL_CALL_START, {"tool_call_id": tool_id, "tool_name": name})
        )
        arguments = block.get("input")
        if arguments is not None:
            out.append(
                ParentEvent(
                    Kind.PARENT_TOOL_CALL_ARGS, {"tool_call_id": tool_id, "args": arguments}
                )
            )
        out.append(ParentEvent(Kind.PARENT_TOOL_CALL_END, {"tool_call_id": tool_id}))

    def _user(self, obj: dict[str, Any]) -> list[ParentEvent]:
        content = _dict(obj.get("message")).get("content")
        if not isinstance(content, list):
            return []  # the prompt echoed back (--replay-user-messages): nothing new
        results = [
            b
            for b in content
            if isinstance(b, dict)
            and b.get("type") == "tool_result"
            and isinstance(b.get("tool_use_id"), str)
        ]
        # `tool_use_result` describes the line's one tool result (with the MCP structured
        # content, the engine's result shape); with several results it cannot be attributed.
        structured = _dict(obj.get("tool_use_result")).get("structuredContent")
        out: list[ParentEvent] = []
        for block in results:
            tool_id = block["tool_use_id"]
            if tool_id in self._results:
                continue
            self._results[tool_id] = None
            while len(self._results) > _REMEMBERED:
                self._results.popitem(last=False)
            call = self._tools.get(tool_id)
            if call is not None and call.open:
                self._end_block(out, call)
            value = structured if structured is not None and len(results) == 1 else None
            if value is None:
                value = _result_value(block.get("content"))
            fields: dict[str, Any] = {"tool_call_id": tool_id, "result": value}
            if block.get("is_error") is True:
                fields["extra"] = {"is_error": True}
            out.append(ParentEvent(Kind.PARENT_TOOL_CALL_RESULT, fields))
        return out


# -- the CLI parent ---------------------------------------------------------------------------


def _milliseconds(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be whole milliseconds (an int), not {value!r}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, not {value}")


@attrs.frozen(kw_only=True)
class ClaudeCodeConfig(CliConfig):
    """Claude Code as a parent (see `CliConfig`). `api_key_env` names the host variable whose
    value becomes `ANTHROPIC_API_KEY` (unset: the CLI's own login applies); `base_url` becomes
    `ANTHROPIC_BASE_URL`. `partial_messages` streams text as it is generated.
    `auto_background_ms` becomes `CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS` (over any value in `env`):
    after how long Claude Code may move a delegation to the background (see the module docs);
    0, the default, never."""

    binary: str = "claude"
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    partial_messages: bool = True
    auto_background_ms: int = attrs.field(default=0, validator=_milliseconds)


def claude_command(
    config: ClaudeCodeConfig, prompt: str, *, url: str, server_name: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and the CLI-specific environment for one run (no credential in
    the command line: the MCP header reads the token from `TOKEN_ENV`)."""
    timeout_ms = max(1, round(config.tool_timeout * 1000))
    mcp_config = {
        "mcpServers": {
            server_name: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
                "timeout": timeout_ms,
            }
        }
    }
    argv = [config.binary, "-p", "--output-format", "stream-json", "--verbose"]
    if config.partial_messages:
        argv.append("--include-partial-messages")
    if config.model:
        argv += ["--model", config.model]
    argv += [
        "--mcp-config",
        json.dumps(mcp_config, separators=(",", ":")),
        "--strict-mcp-config",
        "--allowedTools",
        f"mcp__{server_name}",  # every tool of the run's server (delegate_to_agent, shortcuts)
        *config.extra_args,
        "--",  # `--allowedTools` takes several values: the prompt must not become one
        prompt,
    ]
    env = {
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "false",  # 2.1.332 hides MCP tools behind ToolSearch otherwise
        "MCP_TOOL_TIMEOUT": str(timeout_ms),
        # 0: a delegation is never moved to the background, where its result may be lost.
        "CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS": str(config.auto_background_ms),
        # Bounds on the model requests (read by Claude Code 2.1.x from its environment).
        "CLAUDE_CODE_MAX_RETRIES": str(config.max_retries),
        "API_TIMEOUT_MS": str(max(1, round(config.request_timeout * 1000))),
    }
    if config.base_url:
        env["ANTHROPIC_BASE_URL"] = config.base_url
    return argv, env


class ClaudeCodeParent(CliParent):
    """Runs `claude -p` as the parent of one run; `run(run, prompt)` returns when it ended.

    The run ends with the CLI: finished with Claude's final text, or failed (see
    `adapters.parents._process.drive_parent`); cancelling `run()` stops the CLI and cancels the
    run. Returns a `ParentOutcome`; raises `ParentProcessError` when the CLI failed.
    """

    name = CLAUDE_CODE

    label = "Claude Code"
    config: ClaudeCodeConfig

    def __init__(self, config: ClaudeCodeConfig | None = None) -> None:
        super().__init__(config or ClaudeCodeConfig())

    async def run(self, run: Run, prompt: str) -> ParentOutcome:
        endpoint = self._endpoint(run)
        config = self.config
        argv, extra = claude_command(
            config, prompt, url=endpoint.url, server_name=endpoint.server_name
        )
        secrets = [endpoint.token]
        extra[TOKEN_ENV] = endpoint.token
        if config.api_key_env:
            api_key = os.environ.get(config.api_key_env)
            if api_key:
                extra["ANTHROPIC_API_KEY"] = api_key
                secrets.append(api_key)
        scratch = None if config.workdir else tempfile.mkdtemp(prefix="subagent-engine-claude-")
        try:
            return await drive_parent(
                run,
                label="Claude Code",
                argv=argv,
                env=child_environment(config, extra),
                cwd=config.workdir or scratch,
                config=config,
                parser=ClaudeStreamParser(endpoint.server_name),
                secrets=secrets,
                on_process=self._started,
            )
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
