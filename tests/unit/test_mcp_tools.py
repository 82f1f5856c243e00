"""The MCP tool contract without sockets: tool list, call reading, result rendering, settings,
and the endpoint's per-call work (progress heartbeats, run context) on a mock clock."""

from __future__ import annotations

from typing import Any

import attrs
import mcp_types as types
import pytest
import trio
import trio.testing

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import (
    AgentSummary,
    DelegationEndpoint,
    EndpointSettings,
    list_tools,
    parent_tool_call_id,
    read_call,
    render_error,
    render_result,
)
from engine import (
    AgentSpec,
    ArtifactRef,
    DelegationError,
    DelegationRequest,
    DelegationResult,
    Engine,
    ErrorCode,
    Status,
)

AGENTS = [
    AgentSummary("research", "Research", "Finds sources", ("search", "cite")),
    AgentSummary("review", "review"),
]


def test_generic_tool_lists_agents_and_limits_the_agent_key() -> None:
    tools = list_tools(AGENTS)
    assert [t.name for t in tools] == ["delegate_to_agent", "read_delegation_output"]
    description = tools[0].description or ""
    assert "- research (Research): Finds sources. Skills: search, cite." in description
    assert "- review\n" in description + "\n"
    assert "never pass URLs" in description
    assert tools[0].input_schema["properties"]["agent"]["enum"] == ["research", "review"]


def test_description_is_bounded_per_agent() -> None:
    many_skills = tuple(f"skill{i}" for i in range(20))
    agent = AgentSummary("big", "big", "word " * 500, many_skills)
    description = list_tools([agent])[0].description or ""
    line = next(line for line in description.splitlines() if line.startswith("- big"))
    assert len(line) < 900
    assert "and 12 more." in line


def test_no_agents_offers_no_delegation_tool() -> None:
    assert list_tools([], shortcuts={"research"}) == []
    assert [t.name for t in list_tools([], shortcuts={"research"}, ask=True)] == ["ask_requester"]


def _read_only(tool: types.Tool) -> bool | None:
    return tool.annotations.read_only_hint if tool.annotations is not None else None


@pytest.mark.parametrize(
    ("read_only", "generic"),
    [((True, True), True), ((True, False), False), ((False, False), False)],
)
def test_the_generic_tool_is_read_only_when_every_agent_is(
    read_only: tuple[bool, bool], generic: bool
) -> None:
    agents = [
        attrs.evolve(agent, read_only=flag) for agent, flag in zip(AGENTS, read_only, strict=True)
    ]
    tools = {t.name: t for t in list_tools(agents, shortcuts={"research", "review"}, ask=True)}
    assert _read_only(tools["delegate_to_agent"]) is generic
    # Each shortcut reaches one agent: its own declaration decides.
    assert _read_only(tools["delegate_to_research"]) is read_only[0]
    assert _read_only(tools["delegate_to_review"]) is read_only[1]
    assert _read_only(tools["ask_requester"]) is False


def test_shortcuts_only_for_registered_agents_and_without_agent_field() -> None:
    tools = list_tools(AGENTS, shortcuts={"review", "unknown"})
    assert [t.name for t in tools] == [
        "delegate_to_agent",
        "delegate_to_review",
        "read_delegation_output",
    ]
    schema = tools[1].input_schema
    assert "agent" not in schema["properties"]
    assert schema["required"] == ["objective"]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"claudecode/toolUseId": "toolu_01", "progress_token": 1}, "toolu_01"),
        ({"callId": "call_9", "threadId": "t"}, "call_9"),
        ({"claudecode/toolUseId": "toolu_a", "callId": "call_b"}, "toolu_a"),
        ({"callId": ""}, None),
        ({"callId": "has space"}, None),
        ({"callId": "x" * 257}, None),
        ({"callId": 7}, None),
        ({}, None),
        (None, None),
        ("toolu", None),
    ],
)
def test_parent_tool_call_id_from_meta(meta: Any, expected: str | None) -> None:
    assert parent_tool_call_id(meta) == expected


def test_read_call_builds_the_request_with_strong_correlation() -> None:
    call = read_call(
        "delegate_to_agent",
        {"agent": "research", "objective": "x", "constraints": {"timeout_seconds": 30}},
        {"claudecode/toolUseId": "toolu_1"},
    )
    assert call.correlation == "strong"
    assert call.request.agent == "research"
    assert call.request.timeout_seconds == 30
    assert call.request.parent_tool_call_id == "toolu_1"
    assert read_call("delegate_to_agent", {"agent": "a", "objective": "x"}, None).correlation == (
        "none"
    )


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("delegate_to_agent", None, "agent"),
        ("delegate_to_agent", {"agent": "a", "objective": "x", "token": "t"}, "token"),
        ("delegate_to_review", {"objective": "x", "agent": "review"}, "agent"),
        ("delegate_to_other", {"objective": "x"}, "name"),
        ("Bash", {}, "name"),
    ],
)
def test_read_call_refusals_name_the_field(
    name: str, arguments: dict[str, Any] | None, field: str
) -> None:
    with pytest.raises(DelegationError) as caught:
        read_call(name, arguments, None, shortcuts={"review"})
    assert caught.value.code == ErrorCode.INVALID_INPUT
    assert caught.value.metadata == {"field": field}


def test_shortcut_fixes_the_agent() -> None:
    call = read_call("delegate_to_review", {"objective": "x"}, None, shortcuts={"review"})
    assert call.request.agent == "review"


def _result(**fields: Any) -> DelegationResult:
    base: dict[str, Any] = {
        "delegation_id": "del-1",
        "agent": "research",
        "remote_protocol": "a2a",
        "status": Status.COMPLETED,
        "remote_task_id": "task-1",
        "summary": "It works.",
    }
    return DelegationResult(**{**base, **fields})


def test_completed_result_renders_structured_and_concise() -> None:
    result = _result(
        artifacts=(
            ArtifactRef(
                id="a1", name="notes.md", mime_type="text/markdown", uri="host://d/notes.md"
            ),
        )
    )
    rendered = render_result(result)
    assert not rendered.is_error
    assert rendered.structured_content["artifacts"][0]["uri"] == "host://d/notes.md"
    text = rendered.content[0].text  # type: ignore[union-attr]
    assert text.splitlines() == [
        "Delegation del-1 to 'research' (a2a): completed.",
        "Remote task: task-1.",
        "",
        "It works.",
        "",
        "Artifacts:",
        "- notes.md (text/markdown) at host://d/notes.md",
    ]
    assert rendered.structured_content["output"]["text"] in text


def test_failed_result_is_an_error_with_code_and_cancel_outcome() -> None:
    error = DelegationError(
        code=ErrorCode.REMOTE_TIMEOUT, message="too slow", remote_status="working"
    )
    rendered = render_result(
        _result(status=Status.FAILED, error=error, remote_cancel="pending", summary=None)
    )
    assert rendered.is_error
    assert rendered.structured_content["error"]["code"] == ErrorCode.REMOTE_TIMEOUT
    text = rendered.content[0].text  # type: ignore[union-attr]
    assert "Error remote_timeout: too slow It may be retried." in text
    assert "Remote cancel: pending." in text


def test_long_output_is_cut_at_the_budget_and_named_by_reference() -> None:
    rendered = render_result(_result(summary="word " * 2000, run_id="run-1"), budget=4000)
    text = rendered.content[0].text  # type: ignore[union-attr]
    output = rendered.structured_content["output"]
    assert len(text) <= 4000 and output["truncated"] and output["total_chars"] == 9999
    assert f"read_delegation_output(delegation_id='del-1', offset={output['next_offset']})" in text
    assert "subagent://runs/run-1/delegations/del-1/output" in text


def test_refusal_renders_as_structured_error() -> None:
    error = DelegationError(
        code=ErrorCode.INVALID_INPUT, message="nope", retryable=False, metadata={"field": "x"}
    )
    rendered = render_error(error, tool="delegate_to_agent")
    assert rendered.is_error
    assert rendered.structured_content == {
        "status": "failed",
        "error": {
            "code": "invalid_input",
            "message": "nope",
            "retryable": False,
            "metadata": {"field": "x"},
        },
    }
    assert rendered.content[0].text == (  # type: ignore[union-attr]
        "delegate_to_agent refused: invalid_input (field x): nope"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"correlation": "strong"}, "correlation"),
        ({"heartbeat_interval": 11.0}, "at most 10"),
        ({"progress_interval": 0}, "positive"),
        ({"host": "0.0.0.0"}, "loopback"),
        ({"max_body_bytes": 0}, "positive"),
    ],
)
def test_bad_settings_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EndpointSettings(**fields)


def test_overrides_apply_over_settings() -> None:
    endpoint = DelegationEndpoint(EndpointSettings(server_name="x"), heartbeat_interval=2.0)
    assert endpoint.settings.server_name == "x"
    assert endpoint.settings.heartbeat_interval == 2.0


# -- the endpoint's per-call work, on a mock clock ------------------------------------------


@attrs.define
class _FakeSession:
    clock: list[float] = attrs.field(factory=list)
    progress: list[tuple[float, str | None]] = attrs.field(factory=list)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        self.clock.append(trio.current_time())
        self.progress.append((progress, message))


@attrs.define
class _FakeRequest:
    scope: dict[str, Any]


@attrs.define
class _FakeContext:
    session: _FakeSession
    request: _FakeRequest | None


async def test_heartbeats_keep_a_silent_call_alive(autojump_clock: trio.testing.MockClock) -> None:
    async def silent(task: LocalTask) -> str:
        await task.status("working", "thinking hard")
        await trio.sleep(60)
        return "done"

    endpoint = DelegationEndpoint(heartbeat_interval=5.0, progress_interval=1.0)
    spec = AgentSpec(key="slow", target=InProcessTarget(silent))
    session = _FakeSession()
    async with Engine([spec]) as eng, eng.open_run() as run:
        start = trio.current_time()
        after = run.journal.head
        handle = run.start_delegation(DelegationRequest(agent="slow", objective="x"))
        async with trio.open_nursery() as nursery:
            context = _FakeContext(session=session, request=None)
            nursery.start_soon(endpoint._report_progress, context, run, handle.delegation_id, after)
            await handle.wait()
            nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in zip([start, *session.clock], session.clock, strict=False)]
    assert len(session.progress) >= 11  # 60 s of silence, at least one per 5 s
    assert max(gaps) <= 5.0 + 1e-9
    assert session.progress[0][1] == "slow: working"
    values = [v for v, _ in session.progress]
    assert values == sorted(set(values))


async def test_a_call_without_run_context_is_a_configuration_error() -> None:
    endpoint = DelegationEndpoint()
    params = types.CallToolRequestParams(
        name="delegate_to_agent", arguments={"agent": "a", "objective": "x"}
    )
    for context in (
        _FakeContext(session=_FakeSession(), request=None),
        _FakeContext(session=_FakeSession(), request=_FakeRequest(scope={})),
    ):
        result = await endpoint._call_tool(context, params)
        assert result.is_error
        assert result.structured_content["error"]["code"] == ErrorCode.CONFIGURATION_ERROR
