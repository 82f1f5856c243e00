"""Fuzz harness: the `delegate_to_agent` input validator, `engine._tool_input.parse_tool_input`.

Any bytes go in. The one expected refusal is `DelegationError(code="invalid_input",
retryable=False, metadata={"field": str})`; any other exception is a bug. So is an accepted input
that breaks the contract (an agent that is not a registry key, a blank objective, a bound
exceeded, an artifact with neither uri nor name), and so is a difference between the bytes, text
and decoded-mapping forms of the same input, which must be judged alike.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fuzz._harness import instrumented_imports

with instrumented_imports("engine"):
    from engine._results import DelegationError, ErrorCode
    from engine._tool_input import (
        MAX_INPUT_ARTIFACTS,
        MAX_OBJECTIVE_CHARS,
        MAX_TEXT_CHARS,
        MAX_URI_CHARS,
        ToolInput,
        is_agent_key,
        parse_tool_input,
    )

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_INT_BOUNDS: Final = {
    "timeout_seconds": (1, 86400),
    "max_artifacts": (0, 1000),
    "history_length": (0, 10000),
}

SEEDS: list[bytes] = [
    b'{"agent":"research","objective":"Find the current A2A Go SDK streaming API shape."}',
    json.dumps(
        {
            "agent": "research",
            "objective": "Find the current A2A Go SDK streaming API shape.",
            "input": {
                "prompt": "Research official examples and summarize exact APIs.",
                "context": "We are designing agent-adaptor A2A delegation.",
                "artifacts": [
                    {
                        "name": "current-design.md",
                        "uri": "host://artifact/current-design.md",
                        "mime_type": "text/markdown",
                    }
                ],
            },
            "constraints": {
                "timeout_seconds": 180,
                "stream": True,
                "max_artifacts": 10,
                "history_length": 5,
            },
        }
    ).encode(),
    b'{"agent":"code-review.v2","objective":"x","input":null,"constraints":null}',
    b'{"agent":"a","objective":"x","input":{"artifacts":[{"name":"n"},{"uri":"s3://b/k"}]}}',
    b'{"agent":"a","objective":"x","constraints":{"timeout_seconds":true}}',
    b'{"agent":"a","objective":"x","endpoint_url":"https://evil.example/a2a"}',
    b'{"agent":"a","objective":"x","input":{"artifacts":[{"uri":"https://u:p@h/x"}]}}',
    b'{"agent":"a","objective":"x","agent":"b"}',
    b'{"agent":"a","objective":"\\ud800"}',
    b'{"agent":"R\\u00e9search","objective":" "}',
    b"[]",
    b"",
]

DICTIONARY: list[bytes] = [
    b'"agent"',
    b'"objective"',
    b'"input"',
    b'"constraints"',
    b'"prompt"',
    b'"context"',
    b'"artifacts"',
    b'"name"',
    b'"uri"',
    b'"mime_type"',
    b'"timeout_seconds"',
    b'"stream"',
    b'"max_artifacts"',
    b'"history_length"',
    b'"endpoint_url"',
    b'"api_key"',
    b'"url"',
    b'"research"',
    b'"host://artifact/a.md"',
    b'"https://user:pass@host/"',
    b'"text/markdown"',
    b"86400",
    b"86401",
    b"10000",
    b"30.0",
]


def fuzz_one_input(data: bytes) -> None:
    outcome = _judge(data)
    if isinstance(outcome, ToolInput):
        _check_contract(outcome)

    # The same input as text must be judged exactly alike (only bytes can be bad UTF-8).
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    if _judge(text) != outcome:
        raise AssertionError(f"bytes and text disagree: {outcome!r} vs {_judge(text)!r}")

    # An accepted input, decoded by someone else first (an MCP SDK), must be accepted alike.
    if isinstance(outcome, ToolInput):
        decoded = json.loads(text)
        if _judge(decoded) != outcome:
            raise AssertionError(f"bytes and mapping disagree: {outcome!r} vs {_judge(decoded)!r}")


def _judge(raw: Any) -> ToolInput | tuple[str, str]:
    """The ToolInput, or the refusal as (field, message); anything else propagates as a bug."""
    try:
        return parse_tool_input(raw)
    except DelegationError as err:
        metadata = err.metadata or {}
        field = metadata.get("field")
        if (
            err.code != ErrorCode.INVALID_INPUT
            or err.retryable is not False
            or set(metadata) != {"field"}
            or not isinstance(field, str)
            or not err.message
            or len(err.message) > 400
        ):
            raise AssertionError(f"malformed refusal: {err!r}") from err
        return field, err.message


def _check_contract(parsed: ToolInput) -> None:
    problems = []
    if not is_agent_key(parsed.agent):
        problems.append("agent is not a registry key")
    if not parsed.objective.strip() or len(parsed.objective) > MAX_OBJECTIVE_CHARS:
        problems.append("objective blank or too long")
    for text in (parsed.prompt, parsed.context):
        if text is not None and len(text) > MAX_TEXT_CHARS:
            problems.append("prompt or context too long")
    if len(parsed.artifacts) > MAX_INPUT_ARTIFACTS:
        problems.append("too many artifacts")
    for artifact in parsed.artifacts:
        if artifact.uri is None and artifact.name is None:
            problems.append("artifact with neither uri nor name")
        if artifact.uri is not None and (
            len(artifact.uri) > MAX_URI_CHARS or "@" in _authority(artifact.uri)
        ):
            problems.append("artifact uri too long or with credentials")
    for name, (low, high) in _INT_BOUNDS.items():
        value = getattr(parsed, name)
        if value is not None and (type(value) is not int or not low <= value <= high):
            problems.append(f"{name} out of bounds")
    if parsed.stream is not None and type(parsed.stream) is not bool:
        problems.append("stream is not a boolean")
    if problems:
        raise AssertionError(
            f"accepted input breaks the contract ({'; '.join(problems)}): {parsed!r}"
        )


def _authority(uri: str) -> str:
    """The authority of `scheme://authority/...`, or '' (a deliberately simple second opinion)."""
    _, sep, rest = uri.partition("://")
    return rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0] if sep else ""
