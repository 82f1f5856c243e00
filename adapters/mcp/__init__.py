"""`delegate_to_agent` over MCP: a run-scoped Streamable-HTTP endpoint (`DelegationEndpoint`)
on the official `mcp` server, the sans-IO tool contract it speaks (`adapters.mcp._tools`), and
the parent side (`connect`: an official mcp client session with readable refusals)."""

from adapters.mcp._client import EndpointRefused, connect
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
    "EndpointRefused",
    "EndpointSettings",
    "ToolCall",
    "connect",
    "list_tools",
    "parent_tool_call_id",
    "read_call",
    "render_error",
    "render_result",
    "shortcut_tool_name",
]
