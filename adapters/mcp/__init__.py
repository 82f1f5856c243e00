"""`delegate_to_agent` (and `ask_requester`, when the host can reach whoever sent the run its
task) over MCP, with lean results whose overflow is read back by reference
(`read_delegation_output`, the output resource): a run-scoped Streamable-HTTP endpoint
(`DelegationEndpoint`) on the official `mcp` server, the sans-IO tool contract it speaks
(`adapters.mcp._tools`), and the parent side (`connect`: an official mcp client session with
readable refusals). A delegation's question can be put to the parent's user through MCP
elicitation (`adapters.mcp._elicitation`, both protocol generations)."""

from adapters.mcp._client import EndpointRefused, connect
from adapters.mcp._endpoint import DelegationEndpoint, EndpointSettings, Requester, RequesterError
from adapters.mcp._tools import (
    ASK_TOOL,
    GENERIC_TOOL,
    MAX_QUESTION_CHARS,
    OUTPUT_URI_SCHEME,
    READ_OUTPUT_TOOL,
    AgentSummary,
    OutputRead,
    ToolCall,
    list_tools,
    output_uri,
    parent_tool_call_id,
    read_call,
    read_output_call,
    read_output_uri,
    read_question,
    render_answer,
    render_error,
    render_page,
    render_result,
    shortcut_tool_name,
)

__all__ = [
    "ASK_TOOL",
    "GENERIC_TOOL",
    "MAX_QUESTION_CHARS",
    "OUTPUT_URI_SCHEME",
    "READ_OUTPUT_TOOL",
    "AgentSummary",
    "DelegationEndpoint",
    "EndpointRefused",
    "EndpointSettings",
    "OutputRead",
    "Requester",
    "RequesterError",
    "ToolCall",
    "connect",
    "list_tools",
    "output_uri",
    "parent_tool_call_id",
    "read_call",
    "read_output_call",
    "read_output_uri",
    "read_question",
    "render_answer",
    "render_error",
    "render_page",
    "render_result",
    "shortcut_tool_name",
]
