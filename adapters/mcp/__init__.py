"""`delegate_to_agent` (and `ask_requester`, when the host can reach whoever sent the run its
task) over MCP: a run-scoped Streamable-HTTP endpoint (`DelegationEndpoint`)
on the official `mcp` server, the sans-IO tool contract it speaks (`adapters.mcp._tools`), and
the parent side (`connect`: an official mcp client session with readable refusals)."""

from adapters.mcp._client import EndpointRefused, connect
from adapters.mcp._endpoint import DelegationEndpoint, EndpointSettings, Requester, RequesterError
from adapters.mcp._tools import (
    ASK_TOOL,
    GENERIC_TOOL,
    MAX_QUESTION_CHARS,
    AgentSummary,
    ToolCall,
    list_tools,
    parent_tool_call_id,
    read_call,
    render_error,
    render_result,
    shortcut_tool_name,
)

__all__ = [
    "ASK_TOOL",
    "GENERIC_TOOL",
    "MAX_QUESTION_CHARS",
    "AgentSummary",
    "DelegationEndpoint",
    "EndpointRefused",
    "EndpointSettings",
    "Requester",
    "RequesterError",
    "ToolCall",
    "connect",
    "list_tools",
    "parent_tool_call_id",
    "read_call",
    "read_question",
    "render_answer",
    "render_error",
    "render_result",
    "shortcut_tool_name",
]
