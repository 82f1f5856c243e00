"""`delegate_to_agent` over MCP: a run-scoped Streamable-HTTP endpoint (`DelegationEndpoint`)
on the official `mcp` server, and the sans-IO tool contract it speaks (`adapters.mcp._tools`)."""

from adapters.mcp._endpoint import DelegationEndpoint, EndpointSettings
from adapters.mcp._tools import (
    GENERIC_TOOL,
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
    "GENERIC_TOOL",
    "AgentSummary",
    "DelegationEndpoint",
    "EndpointSettings",
    "ToolCall",
    "list_tools",
    "parent_tool_call_id",
    "read_call",
    "render_error",
    "render_result",
    "shortcut_tool_name",
]
