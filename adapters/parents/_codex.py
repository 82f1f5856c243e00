"""Codex as a run's parent agent: its `codex exec --json` JSONL as parent events.

`CodexJsonlParser` is sans-IO: one JSONL line in, the run's parent events out, never an
exception (a line that is not JSON, not an object or of an unknown type becomes a `codex.raw`
custom event). The lines (codex-rs `exec/src/exec_events.rs`, 0.171):

- `thread.started` (thread id), `turn.started`, `turn.completed` (usage), `turn.failed`
  (error; the verdict fails with it) -> `codex.thread` / `codex.turn` custom events; `error` (a
  stream error, often followed by a retry) -> `codex.error` and the run's status
  (`parent.status`). `Reconnecting... <why>` errors are retries of the model request: counted,
  and past `max_retries` the parser calls the run `fatal` (Codex 0.171 retries a refused
  connection forever, "waiting for network", whatever its provider's `request_max_retries`).
- `item.started | item.updated | item.completed` with an item `{id, type, ...}`:
  `agent_message` -> text start/delta/end and `reasoning` -> reasoning start/delta/end (message
  id = item id; updates give what the text grew by); `mcp_tool_call` -> tool call start, args
  (the whole arguments object), end when it starts, result when it completes (the MCP structured
  content, else its text, else the error); `command_execution` likewise (tool `command_execution`,
  args `{command}`, result `{exit_code, status, output}`); `error` -> `codex.warning`; the other
  known item types (`file_change`, `web_search`, `todo_list`, `plan`, `collab_tool_call`) ->
  `codex.<type>` custom events.

Parent tool-call ids. Codex numbers its JSONL items itself (`item_3`) and does not print the
model's `call_id`, which is what it sends to the MCP endpoint as `_meta.callId`. `CodexParent`
therefore declares `run.parent_call_ids = "parent"`: the MCP endpoint pairs each delegation with
the `delegate_to_*` call this parser published with the same arguments (waiting a moment for
Codex to print it), so the delegation's events carry the item id the stream shows and each
subagent sits under its call; the model's `call_id` is kept on `subagent.started` and in the
result's metadata (`model_tool_call_id`).

`CodexParent` is the I/O side: `codex exec` with `CODEX_HOME` in a per-run temporary folder and
everything else as `-c` overrides; the MCP token reaches Codex through `bearer_token_env_var`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from adapters.parents._kinds import CODEX
from adapters.parents._process import (
    STATUS_EVENT,
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

__all__ = [
    "CodexConfig",
    "CodexJsonlParser",
    "CodexParent",
    "codex_command",
    "toml_value",
]

PREFIX: Final = "codex"
_REMEMBERED: Final = 1024
_TEXT_ITEMS: Final = {
    "agent_message": (Kind.PARENT_TEXT_START, Kind.PARENT_TEXT_DELTA, Kind.PARENT_TEXT_END),
    "reasoning": (
        Kind.PARENT_REASONING_START,
        Kind.PARENT_REASONING_DELTA,
        Kind.PARENT_REASONING_END,
    ),
}
_CUSTOM_ITEMS: Final = frozenset(
    {"file_change", "web_search", "todo_list", "plan", "collab_tool_call"}
)
_OUTPUT_CLIP: Final = 8000
#: How Codex's `error` lines begin while it retries a model request.
_RETRY_PREFIX: Final = "Reconnecting..."
_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _small(value: Any, limit: int = 4000) -> Any:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return clip(repr(value), limit)
    return value if len(text) <= limit else clip(text, limit)


class _Item:
    __slots__ = ("closed", "id", "kind", "started", "text")

    def __init__(self, kind: str, event_id: str) -> None:
        self.kind = kind
        self.id = event_id  # the message / tool call id its events carry
        self.text = ""
        self.started = False
        self.closed = False


class CodexJsonlParser(JsonLinesParser):
    """`codex exec --json` lines -> parent events. Sans-IO; see the module docs."""

    prefix = PREFIX

    def __init__(self, *, max_retries: int | None = None) -> None:
        super().__init__(max_retries=max_retries)
        self.thread_id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.turn_completed = False
        self.turn_failure: str | None = None
        self.last_error: str | None = None
        self.final_text: str | None = None
        self._items: OrderedDict[str, _Item] = OrderedDict()
        self._incarnations: dict[str, int] = {}  # item ids reused for another item type

    @property
    def fatal(self) -> str | None:
        # Codex ends its process itself after a failed turn, not while it retries its model.
        return self.retry_failure

    def _object(self, obj: dict[str, Any], line: str) -> list[ParentEvent]:
        kind = obj.get("type")
        if kind in ("item.started", "item.updated", "item.completed"):
            item = obj.get("item")
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                return self._raw("bad_item", line)
            return self._item(kind.rsplit(".", 1)[1], item, line)
        if kind == "thread.started":
            self.thread_id = _str(obj.get("thread_id")) or self.thread_id
            return [self._custom("thread", {"thread_id": self.thread_id})]
        if kind == "turn.started":
            return [self._custom("turn", {"state": "started"})]
        if kind == "turn.completed":
            out = self._close_items()
            self.turn_completed = True
            usage = obj.get("usage")
            self.usage = usage if isinstance(usage, dict) else None
            out.append(self._custom("turn", {"state": "completed", "usage": _small(usage)}))
            return out
        if kind == "turn.failed":
            out = self._close_items()
            message = _str(_dict(obj.get("error")).get("message")) or "the turn failed"
            self.turn_failure = message
            out.append(self._custom("turn", {"state": "failed", "error": clip(message)}))
            return out
        if kind == "error":
            message = _str(obj.get("message")) or clip(line)
            self.last_error = message
            event = self._custom("error", {"message": clip(message)})
            if message.startswith(_RETRY_PREFIX):
                return [event, self._retrying(message)]
            status = {"text": clip(message, 500), "source": PREFIX}
            return [event, ParentEvent(Kind.PARENT_CUSTOM, {"name": STATUS_EVENT, "raw": status})]
        if kind in ("item.plan.delta", "request_user_input"):
            fields = {k: _small(v, 2000) for k, v in obj.items() if k != "type"}
            return [self._custom(kind.replace("item.", ""), fields)]
        return self._raw("unknown_type", line, type=_small(kind, 100))

    def close(self) -> list[ParentEvent]:
        return self._close_items()

    def verdict(self) -> Verdict:
        if self.turn_failure is not None:
            return Verdict(
                ok=False,
                text=self.final_text,
                error=f"Codex reported a failed turn: {clip(self.turn_failure, 1000)}",
                usage=self.usage,
                session_id=self.thread_id,
            )
        if not self.turn_completed:
            error = "Codex ended without completing its turn"
            if self.last_error:
                error += f" (last error: {clip(self.last_error, 1000)})"
            return Verdict(ok=False, error=error, session_id=self.thread_id)
        return Verdict(ok=True, text=self.final_text, usage=self.usage, session_id=self.thread_id)

    # -- helpers ----------------------------------------------------------------------------

    def _close_items(self) -> list[ParentEvent]:
        out: list[ParentEvent] = []
        for item in self._items.values():
            self._close(item, out)
        return out

    def _close(self, item: _Item, out: list[ParentEvent]) -> None:
        if item.started and not item.closed and item.kind in _TEXT_ITEMS:
            item.closed = True
            out.append(ParentEvent(_TEXT_ITEMS[item.kind][2], {"message_id": item.id}))

    def _state(self, item_id: str, kind: str, out: list[ParentEvent]) -> _Item:
        item = self._items.get(item_id)
        if item is not None and item.kind == kind:
            return item
        event_id = item_id
        if item is not None:  # the id now names another item: end the old one, rename the new
            self._close(item, out)
            n = self._incarnations[item_id] = self._incarnations.get(item_id, 1) + 1
            event_id = f"{item_id}~{n}"
        item = self._items[item_id] = _Item(kind, event_id)
        while len(self._items) > _REMEMBERED:
            self._items.popitem(last=False)
        return item

    def _item(self, phase: str, item: dict[str, Any], line: str) -> list[ParentEvent]:
        item_id: str = item["id"]
        kind = _str(item.get("type"))
        if kind != "error":
            self._answered()  # an item of the turn: the model answered
        if kind in _TEXT_ITEMS:
            return self._text(phase, item_id, kind, _str(item.get("text")) or "")
        if kind == "mcp_tool_call":
            server = _str(item.get("server")) or "mcp"
            tool = _str(item.get("tool")) or "tool"
            arguments = item.get("arguments")
            return self._tool(phase, item_id, kind, f"mcp__{server}__{tool}", arguments, item)
        if kind == "command_execution":
            arguments = {"command": item.get("command")}
            return self._tool(phase, item_id, kind, "command_execution", arguments, item)
        if kind == "error":
            message = _str(item.get("message")) or ""
            return [self._custom("warning", {"message": clip(message), "item_id": item_id})]
        if kind in _CUSTOM_ITEMS:
            raw = {"phase": phase, "item": _small(item)}
            return [self._custom(kind, raw)]
        return self._raw("unknown_item_type", line, type=_small(kind, 100))

    def _text(self, phase: str, item_id: str, kind: str, text: str) -> list[ParentEvent]:
        start, delta, end = _TEXT_ITEMS[kind]
        out: list[ParentEvent] = []
        state = self._state(item_id, kind, out)
        if state.closed:
            return out  # a repeated completion
        message_id = state.id
        if not state.started:
            state.started = True
            out.append(ParentEvent(start, {"message_id": message_id, "role": "assistant"}))
        # A rewritten text (not an extension) is given whole: what was shown cannot be taken back.
        grown = text[len(state.text) :] if text.startswith(state.text) else text
        if grown:
            out.append(ParentEvent(delta, {"message_id": message_id, "delta": grown}))
        state.text = text
        if phase == "completed":
            state.closed = True
            out.append(ParentEvent(end, {"message_id": message_id}))
            if kind == "agent_message":
                self.final_text = text
        return out

    def _tool(
        self,
        phase: str,
        item_id: str,
        kind: str,
        name: str,
        arguments: Any,
        item: dict[str, Any],
    ) -> list[ParentEvent]:
        out: list[ParentEvent] = []
        state = self._state(item_id, kind, out)
        if state.closed:
            return out
        item_id = state.id
        if not state.started:
            state.started = True
            out.append(
                ParentEvent(
                    Kind.PARENT_TOOL_CALL_START, {"tool_call_id": item_id, "tool_name": name}
                )
            )
            if arguments is not None:
                out.append(
                    ParentEvent(
                        Kind.PARENT_TOOL_CALL_ARGS, {"tool_call_id": item_id, "args": arguments}
                    )
                )
            out.append(ParentEvent(Kind.PARENT_TOOL_CALL_END, {"tool_call_id": item_id}))
        if phase != "completed":
            return out
        state.closed = True
        status = _str(item.get("status"))
        fields: dict[str, Any] = {"tool_call_id": item_id}
        if kind == "command_execution":
            output = _str(item.get("aggregated_output")) or ""
            fields["result"] = {
                "exit_code": item.get("exit_code"),
                "status": status,
                "output": clip(output, _OUTPUT_CLIP),
            }
        else:
            result = _dict(item.get("result"))
            error = _str(_dict(item.get("error")).get("message"))
            if result.get("structured_content") is not None:
                fields["result"] = result["structured_content"]
            elif result:
                fields["result"] = _content_text(result.get("content"))
            else:
                fields["result"] = {"error": error or "the tool call failed"}
        if status == "failed" or (kind == "mcp_tool_call" and item.get("error")):
            fields["extra"] = {"is_error": True}
        out.append(ParentEvent(Kind.PARENT_TOOL_CALL_RESULT, fields))
        return out


def _content_text(content: Any) -> Any:
    if isinstance(content, list):
        texts = [_str(b.get("text")) for b in content if isinstance(b, dict)]
        if texts and len(texts) == len(content) and all(t is not None for t in texts):
            return "".join(t or "" for t in texts)
    return content


# -- the CLI parent ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CodexConfig(CliConfig):
    """Codex as a parent (see `CliConfig`). With `base_url` set, a model provider named
    `provider` is defined for it (`wire_api`, the API key read by Codex from the variable
    `api_key_env`); without, Codex's configured default applies."""

    binary: str = "codex"
    api_key_env: str | None = "OPENAI_API_KEY"
    provider: str = "subagent_engine"
    wire_api: str = "responses"


def toml_value(value: Any) -> str:
    """`value` as a TOML value for a `-c key=value` override (inline tables for mappings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = []
        for char in value:
            if char in ('"', "\\"):
                escaped.append("\\" + char)
            elif ord(char) < 0x20 or ord(char) == 0x7F:
                escaped.append(f"\\u{ord(char):04x}")
            else:
                escaped.append(char)
        return '"' + "".join(escaped) + '"'
    if isinstance(value, Mapping):
        items = ", ".join(f"{toml_key(k)}={toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_value(key)


def codex_command(
    config: CodexConfig, prompt: str, *, url: str, server_name: str, workdir: str
) -> list[str]:
    """The `codex exec` command line for one run (no credential in it: the MCP token and the
    API key are read by Codex from environment variables it is told the names of)."""
    argv = [
        config.binary,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "-C",
        workdir,
    ]
    if config.base_url:
        provider: dict[str, Any] = {
            "name": config.provider,
            "base_url": config.base_url,
            "wire_api": config.wire_api,
        }
        if config.api_key_env:
            provider["env_key"] = config.api_key_env
        # Codex's own retry bounds (provider settings of codex-rs `ModelProviderInfo`).
        provider["request_max_retries"] = config.max_retries
        provider["stream_max_retries"] = config.max_retries
        provider["stream_idle_timeout_ms"] = max(1, round(config.request_timeout * 1000))
        argv += ["-c", f"model_providers.{toml_key(config.provider)}={toml_value(provider)}"]
        argv += ["-c", f"model_provider={toml_value(config.provider)}"]
    server = {
        "url": url,
        "bearer_token_env_var": TOKEN_ENV,
        "default_tools_approval_mode": "approve",  # else refused under approval policy never
        "required": True,  # an endpoint Codex cannot reach fails the run at once
        "tool_timeout_sec": float(config.tool_timeout),
    }
    argv += ["-c", f"mcp_servers.{toml_key(server_name)}={toml_value(server)}"]
    if config.model:
        argv += ["-m", config.model]
    return [*argv, *config.extra_args, "--", prompt]


class CodexParent(CliParent):
    """Runs `codex exec --json` as the parent of one run; `run(run, prompt)` returns when it
    ended. The run ends with the CLI, as for `ClaudeCodeParent`."""

    name = CODEX

    label = "Codex"
    config: CodexConfig

    def __init__(self, config: CodexConfig | None = None) -> None:
        super().__init__(config or CodexConfig())

    async def run(self, run: Run, prompt: str) -> ParentOutcome:
        endpoint = self._endpoint(run)
        config = self.config
        scratch, home, workdir = _scratch_folders(config)
        try:
            argv = codex_command(
                config, prompt, url=endpoint.url, server_name=endpoint.server_name, workdir=workdir
            )
            extra = {"CODEX_HOME": str(home), TOKEN_ENV: endpoint.token}
            secrets = [endpoint.token]
            if config.api_key_env and os.environ.get(config.api_key_env):
                extra[config.api_key_env] = os.environ[config.api_key_env]
                secrets.append(os.environ[config.api_key_env])
            run.parent_call_ids = "parent"  # item_N, not the model's call_id: see the docs
            return await drive_parent(
                run,
                label="Codex",
                argv=argv,
                env=child_environment(config, extra),
                cwd=workdir,
                config=config,
                parser=CodexJsonlParser(max_retries=config.max_retries),
                secrets=secrets,
                on_process=self._started,
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _scratch_folders(config: CodexConfig) -> tuple[Path, Path, str]:
    """A per-run folder holding an empty `CODEX_HOME` and (without `workdir`) the workspace."""
    scratch = Path(tempfile.mkdtemp(prefix="subagent-engine-codex-"))
    home = scratch / "codex-home"
    home.mkdir()
    workdir = config.workdir or str(scratch / "work")
    Path(workdir).mkdir(exist_ok=True)
    return scratch, home, workdir
