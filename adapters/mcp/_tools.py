"""The `delegate_to_agent` tool contract over MCP, sans-IO.

This module owns what the MCP endpoint says and reads, with no I/O of its own: the tool list
(the generic `delegate_to_agent` and the host's named shortcuts `delegate_to_<key>`, each
described with the registered agents' descriptions and skills so a model knows what it may
call; none of them when no agent is registered; each annotated `readOnlyHint` exactly when
every agent it reaches is declared read-only), the reading of one `tools/call` (name,
arguments and `_meta`) into a `DelegationRequest` or a typed refusal, and the rendering of a
`DelegationResult` as the tool result the parent model sees: the structured result as
`structuredContent` plus a short text rendering, `isError` for anything but a completed
delegation.

`ask_requester` is the one tool that is not a delegation: a run whose host can reach whoever sent
it its task (`subagent-engine a2a-serve`: the A2A client) offers it, so the parent model can ask
that sender a question and get its answer as the tool's result (`ask_requester_tool`,
`read_question`, `render_answer`). Without such a host it is not listed, and a call is refused.

Arguments are validated by the engine's `parse_tool_input` (the one validator of the tool
contract, also fuzzed), so an unknown field, an `endpoint_url`, an oversized body or an out of
range bound is refused before any outbound request, with the field it concerns.

The parent tool-call id (strong correlation, see `engine._correlation`) comes from the call's
`_meta` (https://modelcontextprotocol.io/specification/2025-06-18/basic, "General fields"):
`claudecode/toolUseId` (Claude Code) or `callId` (Codex). Ids are bounded and must be printable;
anything else is ignored rather than trusted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import mcp_types as types

from engine import (
    TOOL_INPUT_SCHEMA,
    DelegationError,
    DelegationRequest,
    DelegationResult,
    ErrorCode,
    Status,
    parse_tool_input,
    to_jsonable,
    tool_input_schema,
)

__all__ = [
    "ASK_TOOL",
    "GENERIC_TOOL",
    "MAX_QUESTION_CHARS",
    "AgentSummary",
    "ToolCall",
    "list_tools",
    "parent_tool_call_id",
    "ask_requester_tool",
    "read_call",
    "read_question",
    "render_answer",
    "render_error",
    "render_result",
    "shortcut_tool_name",
]

GENERIC_TOOL: Final = "delegate_to_agent"
#: The tool that asks whoever sent the run its task (offered only when a host can reach them).
ASK_TOOL: Final = "ask_requester"
#: The longest question `ask_requester` takes (a question, not a document).
MAX_QUESTION_CHARS: Final = 8000
SHORTCUT_PREFIX: Final = "delegate_to_"
#: `_meta` keys that carry the parent's own tool-call id, in order of preference.
TOOL_CALL_ID_META_KEYS: Final = ("claudecode/toolUseId", "callId")
MAX_TOOL_CALL_ID_CHARS: Final = 256
_PRINTABLE_ID: Final = re.compile(r"[\x21-\x7e]{1,256}")
#: Bounds of what one agent contributes to a tool description.
MAX_DESCRIPTION_CHARS: Final = 300
MAX_SKILLS_LISTED: Final = 8
#: How much of the result's summary the text rendering repeats (all of it is in structuredContent).
MAX_TEXT_SUMMARY_CHARS: Final = 4000


@attrs.frozen
class AgentSummary:
    """What a model is told about one registered agent."""

    key: str
    name: str
    description: str = ""
    skills: tuple[str, ...] = ()
    protocol: str = ""
    #: Why the agent cannot be called right now (e.g. its card was rejected), or "".
    unavailable: str = ""
    #: The host declared that delegating to it changes nothing (`AgentSpec.read_only`).
    read_only: bool = False


@attrs.frozen
class ToolCall:
    """One validated `tools/call`: the request to delegate and where its tool-call id came from
    (`strong` when `_meta` carried it, else `none`: the endpoint then correlates by run)."""

    request: DelegationRequest
    correlation: str


def shortcut_tool_name(agent_key: str) -> str:
    return f"{SHORTCUT_PREFIX}{agent_key}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _agent_line(agent: AgentSummary) -> str:
    line = f"- {agent.key}"
    if agent.name and agent.name != agent.key:
        line += f" ({_clip(agent.name, 80)})"
    if agent.description:
        description = _clip(agent.description, MAX_DESCRIPTION_CHARS)
        line += f": {description}" + ("" if description[-1] in ".!?…" else ".")
    if agent.skills:
        skills = ", ".join(_clip(s, 60) for s in agent.skills[:MAX_SKILLS_LISTED])
        more = len(agent.skills) - MAX_SKILLS_LISTED
        line += f" Skills: {skills}" + (f" and {more} more." if more > 0 else ".")
    if agent.unavailable:
        line += f" Unavailable right now ({_clip(agent.unavailable, 120)}): calls will fail."
    return line


def _generic_description(agents: Sequence[AgentSummary]) -> str:
    lines = [
        "Delegate a bounded task to a host-registered remote agent and wait for its structured "
        "result (ids, status, summary, artifact references, or a structured error). Name the "
        "agent by its key; never pass URLs or credentials. The agent does not see this "
        "conversation: put what it needs in objective, input.prompt and input.context.",
    ]
    lines.append("Agents you may call:")
    lines.extend(_agent_line(agent) for agent in agents)
    return "\n".join(lines)


def _shortcut_schema() -> dict[str, Any]:
    schema = copy.deepcopy(TOOL_INPUT_SCHEMA)
    del schema["properties"]["agent"]
    schema["required"] = [name for name in schema["required"] if name != "agent"]
    return schema


def list_tools(
    agents: Iterable[AgentSummary], shortcuts: Collection[str] = (), *, ask: bool = False
) -> list[types.Tool]:
    """The tools of one run's endpoint: `delegate_to_agent` (its `agent` limited to the
    registered keys), then one `delegate_to_<key>` per registered agent named in `shortcuts`,
    then `ask_requester` if `ask`. Without agents there is nothing to delegate to, so no
    delegation tool is listed (a model offered one would call it only to be refused).

    `readOnlyHint` (the MCP tool annotation parents read to decide whether two calls of one
    turn may run at the same time) is true for `delegate_to_agent` only when every agent it
    can reach is read-only, and for a shortcut when its own agent is."""
    agents = list(agents)
    if not agents:
        return [ask_requester_tool()] if ask else []
    tools = [
        types.Tool(
            name=GENERIC_TOOL,
            description=_generic_description(agents),
            input_schema=tool_input_schema([a.key for a in agents]),
            annotations=types.ToolAnnotations(
                title="Delegate to a remote agent",
                read_only_hint=all(a.read_only for a in agents),
                open_world_hint=True,
            ),
        )
    ]
    for agent in agents:
        if agent.key not in shortcuts:
            continue
        description = f"Delegate a bounded task to the agent {agent.key!r} and wait for its "
        description += "structured result. " + _agent_line(agent)[2:]
        tools.append(
            types.Tool(
                name=shortcut_tool_name(agent.key),
                description=description,
                input_schema=_shortcut_schema(),
                annotations=types.ToolAnnotations(
                    title=f"Delegate to {agent.name or agent.key}",
                    read_only_hint=agent.read_only,
                    open_world_hint=True,
                ),
            )
        )
    if ask:
        tools.append(ask_requester_tool())
    return tools


def ask_requester_tool() -> types.Tool:
    """The `ask_requester` tool: one string argument, the question."""
    return types.Tool(
        name=ASK_TOOL,
        description=(
            "Ask the agent that sent you this task a question (missing information, a choice "
            "only they can make, a confirmation) and wait for its answer, which is this tool's "
            "result. Blocks until it answers or a time limit passes (then the result is an "
            "error: go on without the answer or end saying what you need). Ask only what you "
            "cannot find out yourself; one question per call."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUESTION_CHARS,
                    "description": "The question, complete in itself: the sender sees only it.",
                }
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            title="Ask the requester", read_only_hint=False, open_world_hint=True
        ),
    )


def read_question(arguments: Mapping[str, Any] | None) -> str:
    """The question of one `ask_requester` call. Raises `DelegationError` (`invalid_input`,
    with `metadata.field`) for anything but `{"question": <non-blank text up to
    MAX_QUESTION_CHARS>}`."""
    if not isinstance(arguments, Mapping):
        raise _invalid("The tool arguments must be a JSON object.")
    unknown = sorted(str(key)[:40] for key in arguments if key != "question")
    if unknown:
        raise _invalid(f"{ASK_TOOL} takes only 'question' (got {unknown[0]!r}).", unknown[0])
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise _invalid(f"{ASK_TOOL} needs 'question': the text to ask.", "question")
    if len(question) > MAX_QUESTION_CHARS:
        raise _invalid(
            f"The question is over {MAX_QUESTION_CHARS} characters; ask something shorter.",
            "question",
        )
    return question


def render_answer(answer: str) -> types.CallToolResult:
    """The tool result of an answered `ask_requester`: the answer's text, as the model reads it."""
    return types.CallToolResult(
        content=[types.TextContent(text=answer)],
        structured_content={"status": "answered", "answer": answer},
        is_error=False,
    )


def parent_tool_call_id(meta: Mapping[str, Any] | None) -> str | None:
    """The parent's own tool-call id from a call's `_meta`, if one is there and well formed."""
    if not isinstance(meta, Mapping):
        return None
    for key in TOOL_CALL_ID_META_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and _PRINTABLE_ID.fullmatch(value):
            return value
    return None


def _invalid(message: str, field: str | None = None) -> DelegationError:
    return DelegationError(
        code=ErrorCode.INVALID_INPUT,
        message=message,
        retryable=False,
        metadata={"field": field} if field else None,
    )


def read_call(
    name: str,
    arguments: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
    *,
    shortcuts: Collection[str] = (),
) -> ToolCall:
    """Read one `tools/call` into a request. Raises `DelegationError` (`invalid_input`, with
    `metadata.field`) for an unknown tool or arguments the contract refuses."""
    if not isinstance(arguments, Mapping):
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, Mapping):
            raise _invalid("The tool arguments must be a JSON object.")
    if name == GENERIC_TOOL:
        tool_input = parse_tool_input(arguments)
    elif name.startswith(SHORTCUT_PREFIX) and name[len(SHORTCUT_PREFIX) :] in shortcuts:
        if "agent" in arguments:
            raise _invalid(
                f"{name} always delegates to {name[len(SHORTCUT_PREFIX) :]!r}; "
                "do not pass 'agent' (use delegate_to_agent to choose one).",
                "agent",
            )
        tool_input = parse_tool_input({"agent": name[len(SHORTCUT_PREFIX) :], **arguments})
    else:
        raise _invalid(f"There is no tool named {name[:80]!r} here; use {GENERIC_TOOL}.", "name")
    tool_call_id = parent_tool_call_id(meta)
    request = DelegationRequest.from_tool_input(tool_input, parent_tool_call_id=tool_call_id)
    return ToolCall(request=request, correlation="strong" if tool_call_id else "none")


# -- results ------------------------------------------------------------------------------


def _result_text(result: DelegationResult) -> str:
    head = f"Delegation {result.delegation_id} to {result.agent!r} ({result.remote_protocol})"
    head += f": {result.status}."
    lines = [head]
    if result.remote_task_id:
        lines.append(f"Remote task: {result.remote_task_id}.")
    if result.error is not None:
        error = result.error
        retry = " It may be retried." if error.retryable else ""
        lines.append(f"Error {error.code}: {_clip(error.message, 600)}{retry}")
        if result.remote_cancel and result.remote_cancel != "not_needed":
            lines.append(f"Remote cancel: {result.remote_cancel}.")
    if result.summary:
        lines.append(f"Summary: {_clip(result.summary, MAX_TEXT_SUMMARY_CHARS)}")
    for artifact in result.artifacts:
        label = artifact.name or artifact.id or "artifact"
        where = f" at {artifact.uri}" if artifact.uri else ""
        kind = f" ({artifact.mime_type})" if artifact.mime_type else ""
        lines.append(f"Artifact: {label}{kind}{where}")
    return "\n".join(lines)


def render_result(result: DelegationResult) -> types.CallToolResult:
    """The tool result for a delegation's end: structured result plus a concise rendering.
    Anything but `completed` is an error result (`isError`) that still carries the ids."""
    structured = to_jsonable(result)
    return types.CallToolResult(
        content=[types.TextContent(text=_result_text(result))],
        structured_content=structured,
        is_error=result.status != Status.COMPLETED,
    )


def render_error(error: DelegationError, *, tool: str = GENERIC_TOOL) -> types.CallToolResult:
    """A structured tool error for a call refused before any delegation started."""
    structured: dict[str, Any] = {"status": Status.FAILED, "error": to_jsonable(error)}
    field = (error.metadata or {}).get("field")
    where = f" (field {field})" if field else ""
    return types.CallToolResult(
        content=[types.TextContent(text=f"{tool} refused: {error.code}{where}: {error.message}")],
        structured_content=structured,
        is_error=True,
    )
