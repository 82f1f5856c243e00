"""Fuzz harness: one MCP `tools/call` as the endpoint reads it, `adapters.mcp._tools.read_call`.

Any bytes go in. A JSON object with `name`, `arguments` and `_meta` is a whole call; anything
else is the arguments of a `delegate_to_agent` call. The one expected refusal is
`DelegationError(code="invalid_input")` naming a field; any other exception is a bug. So is an
accepted call that breaks the contract: a shortcut that delegates to another agent than its
own, a parent tool-call id that is not exactly the well-formed one in `_meta`, a correlation
that does not say where the id came from. Every refusal must render as an `isError` tool result
that repeats the code, and every accepted request's result must render too.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from adapters.mcp._tools import (
        GENERIC_TOOL,
        TOOL_CALL_ID_META_KEYS,
        ToolCall,
        read_call,
        render_error,
        render_result,
    )
    from engine._results import DelegationError, DelegationResult, ErrorCode

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

SHORTCUTS: Final = frozenset({"review", "code-review.v2"})

SEEDS: list[bytes] = [
    b'{"agent":"research","objective":"Find the API shape."}',
    json.dumps(
        {
            "name": "delegate_to_agent",
            "arguments": {"agent": "research", "objective": "x"},
            "_meta": {"claudecode/toolUseId": "toolu_01", "progressToken": 3},
        }
    ).encode(),
    json.dumps(
        {
            "name": "delegate_to_review",
            "arguments": {"objective": "x", "constraints": {"timeout_seconds": 30}},
            "_meta": {"callId": "call_1", "threadId": "t", "itemId": "i"},
        }
    ).encode(),
    json.dumps(
        {"name": "delegate_to_review", "arguments": {"objective": "x", "agent": "other"}}
    ).encode(),
    json.dumps({"name": "delegate_to_nobody", "arguments": {"objective": "x"}}).encode(),
    json.dumps(
        {"name": "delegate_to_agent", "arguments": None, "_meta": {"callId": "bad id\n"}}
    ).encode(),
    json.dumps(
        {"name": "delegate_to_agent", "arguments": [1], "_meta": {"callId": "x" * 300}}
    ).encode(),
    b'{"agent":"a","objective":"x","endpoint_url":"https://evil.example/a2a"}',
    b"[]",
    b"",
]

DICTIONARY: list[bytes] = [
    b'"name"',
    b'"arguments"',
    b'"_meta"',
    b'"claudecode/toolUseId"',
    b'"callId"',
    b'"progressToken"',
    b'"delegate_to_agent"',
    b'"delegate_to_review"',
    b'"delegate_to_"',
    b'"agent"',
    b'"objective"',
    b'"constraints"',
    b'"endpoint_url"',
]


def _call_of(data: bytes) -> tuple[Any, Any, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return GENERIC_TOOL, data, None
    if isinstance(value, dict) and "name" in value:
        return value.get("name"), value.get("arguments"), value.get("_meta")
    return GENERIC_TOOL, value, None


def _expected_tool_call_id(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return None
    for key in TOOL_CALL_ID_META_KEYS:
        value = meta.get(key)
        if (
            isinstance(value, str)
            and 1 <= len(value) <= 256
            and all("!" <= c <= "~" for c in value)
        ):
            return value
    return None


def fuzz_one_input(data: bytes) -> None:
    name, arguments, meta = _call_of(data)
    if not isinstance(name, str):
        name = str(name)
    try:
        call = read_call(name, arguments, meta, shortcuts=SHORTCUTS)
    except DelegationError as err:
        if err.code != ErrorCode.INVALID_INPUT or not err.message:
            raise AssertionError(f"malformed refusal: {err!r}") from err
        rendered = render_error(err, tool=name)
        if not rendered.is_error or err.code not in rendered.content[0].text:  # type: ignore[union-attr]
            raise AssertionError(f"refusal rendered wrongly: {rendered!r}") from err
        return
    _check(call, name, meta)


def _check(call: ToolCall, name: str, meta: Any) -> None:
    request = call.request
    if name != GENERIC_TOOL:
        key = name.removeprefix("delegate_to_")
        if key not in SHORTCUTS or request.agent != key:
            raise AssertionError(f"{name} delegated to {request.agent!r}")
    expected = _expected_tool_call_id(meta)
    if request.parent_tool_call_id != expected:
        raise AssertionError(f"tool-call id {request.parent_tool_call_id!r}, want {expected!r}")
    if call.correlation != ("strong" if expected else "none"):
        raise AssertionError(f"correlation {call.correlation!r} for id {expected!r}")
    result = DelegationResult(
        delegation_id="del-1",
        agent=request.agent,
        remote_protocol="a2a",
        status="completed",
        parent_tool_call_id=request.parent_tool_call_id,
        summary=request.objective,
    )
    rendered = render_result(result)
    if rendered.is_error or rendered.structured_content["agent"] != request.agent:
        raise AssertionError(f"result rendered wrongly: {rendered!r}")
