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

Results are lean (`engine.parent_view`): the output is said once and the text and the
`structuredContent` each stay within the agent's `DelegationPolicy.max_result_chars`
(16,000 characters by default, well under the ~25k-token cap Claude Code puts on one MCP tool
result). What does not fit is named, never dropped: the result says the offset to read from and
the two ways to read it, the `read_delegation_output` tool (listed with the delegation tools) and
the resource `subagent://runs/<run id>/delegations/<delegation id>/output` (`?offset=N&limit=M`).
Both serve only the run's own finished delegations, at most the budget per read.

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
from urllib.parse import parse_qs, quote, unquote, urlsplit

import attrs
import mcp_types as types

from engine import (
    DEFAULT_MAX_RESULT_CHARS,
    TOOL_INPUT_SCHEMA,
    DelegationError,
    DelegationRequest,
    DelegationResult,
    ErrorCode,
    OutputPage,
    OutputReference,
    Status,
    parent_view,
    parse_tool_input,
    to_jsonable,
    tool_input_schema,
)

__all__ = [
    "ASK_TOOL",
    "GENERIC_TOOL",
    "MAX_QUESTION_CHARS",
    "OUTPUT_URI_SCHEME",
    "READ_OUTPUT_TOOL",
    "AgentSummary",
    "OutputRead",
    "ToolCall",
    "list_tools",
    "output_reference",
    "output_uri",
    "parent_tool_call_id",
    "ask_requester_tool",
    "read_call",
    "read_output_call",
    "read_output_tool",
    "read_output_uri",
    "read_question",
    "render_answer",
    "render_error",
    "render_page",
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
#: The tool that reads more of a delegation's output than its result showed.
READ_OUTPUT_TOOL: Final = "read_delegation_output"
#: The URI scheme of delegation outputs on a run's endpoint (`output_uri`).
OUTPUT_URI_SCHEME: Final = "subagent"


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
    then `read_delegation_output` (more of a result that did not fit), then `ask_requester`
    if `ask`. Without agents there is nothing to delegate to, so no delegation tool is listed
    (a model offered one would call it only to be refused).

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
    tools.append(read_output_tool())
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


def output_uri(run_id: str, delegation_id: str) -> str:
    """The resource URI of a delegation's whole output on its run's endpoint."""
    run, delegation = quote(run_id, safe=""), quote(delegation_id, safe="")
    return f"{OUTPUT_URI_SCHEME}://runs/{run}/delegations/{delegation}/output"


def output_reference(result: DelegationResult) -> OutputReference:
    """Where the parent model reads the rest of `result`'s output: its resource and tool."""
    return OutputReference(
        uri=output_uri(result.run_id or "", result.delegation_id), tool=READ_OUTPUT_TOOL
    )


def render_result(
    result: DelegationResult, *, budget: int = DEFAULT_MAX_RESULT_CHARS
) -> types.CallToolResult:
    """The tool result for a delegation's end: the lean view (`engine.parent_view`): the
    output said once, text and `structuredContent` each within `budget` characters, and what
    did not fit named by reference (`read_delegation_output`, the output resource). Anything
    but `completed` is an error result (`isError`) that still carries the ids."""
    view = parent_view(result, budget=budget, reference=output_reference(result))
    return types.CallToolResult(
        content=[types.TextContent(text=view.text)],
        structured_content=view.structured,
        is_error=result.status != Status.COMPLETED,
    )


def read_output_tool() -> types.Tool:
    """The `read_delegation_output` tool: a page of a finished delegation's whole output."""
    return types.Tool(
        name=READ_OUTPUT_TOOL,
        description=(
            "Read more of a finished delegation's output when its result says it was truncated: "
            "pass the delegation_id and the offset the result names; the answer is that part "
            "of the output, and says the next offset if more remains. Only this run's "
            "delegations can be read."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "delegation_id": {"type": "string", "minLength": 1, "maxLength": 256},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "At most this many characters (the host bounds it too).",
                },
            },
            "required": ["delegation_id"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            title="Read a delegation's output", read_only_hint=True, open_world_hint=False
        ),
    )


@attrs.frozen
class OutputRead:
    """One request for a page of a delegation's output (from the tool or the resource)."""

    delegation_id: str
    offset: int = 0
    limit: int | None = None


def _non_negative_int(value: Any, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _invalid(f"{field} must be an integer of at least {minimum}.", field)
    return value


def read_output_call(arguments: Mapping[str, Any] | None) -> OutputRead:
    """The arguments of one `read_delegation_output` call. Raises `DelegationError`
    (`invalid_input`, with `metadata.field`) for anything the tool's schema refuses."""
    if not isinstance(arguments, Mapping):
        raise _invalid("The tool arguments must be a JSON object.")
    unknown = sorted(
        str(k)[:40] for k in arguments if k not in ("delegation_id", "offset", "limit")
    )
    if unknown:
        raise _invalid(f"{READ_OUTPUT_TOOL} does not take {unknown[0]!r}.", unknown[0])
    delegation_id = arguments.get("delegation_id")
    if not isinstance(delegation_id, str) or not _PRINTABLE_ID.fullmatch(delegation_id):
        raise _invalid("delegation_id must be the id a delegation result named.", "delegation_id")
    offset = _non_negative_int(arguments.get("offset", 0), "offset", 0)
    limit = arguments.get("limit")
    return OutputRead(
        delegation_id=delegation_id,
        offset=offset,
        limit=None if limit is None else _non_negative_int(limit, "limit", 1),
    )


def read_output_uri(uri: str, run_id: str) -> OutputRead:
    """The request a resource URI makes (`output_uri`, optionally `?offset=N&limit=M`).
    Raises `DelegationError`: `delegation_not_found` for a URI of another run or no output
    URI at all, `invalid_input` for a bad offset or limit."""
    parsed = urlsplit(uri)
    parts = parsed.path.split("/")
    if (
        parsed.scheme != OUTPUT_URI_SCHEME
        or parsed.netloc != "runs"
        or len(parts) != 5
        or parts[0] != ""
        or parts[2] != "delegations"
        or parts[4] != "output"
        or unquote(parts[1]) != run_id
    ):
        raise DelegationError(
            code=ErrorCode.DELEGATION_NOT_FOUND,
            message="This endpoint serves only its own run's delegation outputs "
            f"({output_uri(run_id, '<delegation id>')}).",
        )
    query: dict[str, Any] = {}
    for key, values in parse_qs(parsed.query, keep_blank_values=True).items():
        if key not in ("offset", "limit") or len(values) != 1 or not values[0].isdigit():
            raise _invalid(
                f"The output URI takes offset and limit as integers ({key[:40]!r}).", key[:40]
            )
        query[key] = int(values[0])
    return read_output_call({"delegation_id": unquote(parts[3]), **query})


def render_page(delegation_id: str, page: OutputPage) -> types.CallToolResult:
    """The tool result of `read_delegation_output`: the page's text exactly as its first
    content block, then (when more remains) a second block naming the next offset."""
    content: list[types.ContentBlock] = [types.TextContent(text=page.text)]
    if page.next_offset is not None:
        content.append(
            types.TextContent(
                text=f"[{page.total - page.next_offset} more characters: call "
                f"{READ_OUTPUT_TOOL}(delegation_id={delegation_id!r}, offset={page.next_offset}).]"
            )
        )
    return types.CallToolResult(
        content=content,
        structured_content={
            "delegation_id": delegation_id,
            "text": page.text,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "total_chars": page.total,
        },
        is_error=False,
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
