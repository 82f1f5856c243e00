"""`ask_requester` over MCP: the official mcp client against a run's endpoint with a requester.

The endpoint is `adapters.mcp.DelegationEndpoint` on a real listener on 127.0.0.1 and the parent
side the official `mcp` client. The requester is the host's part (a2a-serve's is the A2A client,
tested in test_a2a_serve_input_required.py); here it is a small recording one, so each test
says exactly what the requester answers and when.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from adapters.mcp import ASK_TOOL, MAX_QUESTION_CHARS, RequesterError
from engine import Run
from tests.helpers.mcp_endpoint import mcp_session, open_endpoint_run


class Recorder:
    """Answers each question with `answer` (or raises `error`) once `release` is set."""

    def __init__(self, answer: str = "blue", error: RequesterError | None = None) -> None:
        self.answer = answer
        self.error = error
        self.asked: list[tuple[str, str]] = []
        self.release = trio.Event()
        self.release.set()

    async def ask(self, run: Run, question: str) -> str:
        self.asked.append((run.run_id, question))
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.answer


async def test_without_a_requester_the_tool_is_neither_listed_nor_callable() -> None:
    async with open_endpoint_run([]) as (_, _, run), mcp_session(run.endpoint) as session:
        names = [tool.name for tool in (await session.list_tools()).tools]
        result = await session.call_tool(ASK_TOOL, {"question": "Which colour?"})
    assert ASK_TOOL not in names
    assert result.is_error
    assert "There is no tool named 'ask_requester'" in result.content[0].text  # type: ignore[union-attr]


async def test_the_answer_is_the_tools_result() -> None:
    requester = Recorder("blue, please")
    async with (
        open_endpoint_run([], requester=requester) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool(ASK_TOOL, {"question": "Which colour?"})
    tool = tools[ASK_TOOL]
    assert tool.input_schema["required"] == ["question"]
    assert tool.description and "Blocks until it answers" in tool.description
    assert not result.is_error
    assert result.content[0].text == "blue, please"  # type: ignore[union-attr]
    assert result.structured_content == {"status": "answered", "answer": "blue, please"}
    assert requester.asked == [(run.run_id, "Which colour?")]


async def test_no_answer_is_an_error_result_the_model_reads() -> None:
    requester = Recorder(error=RequesterError("no_answer", "No answer came within 5 s."))
    async with (
        open_endpoint_run([], requester=requester) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool(ASK_TOOL, {"question": "Which colour?"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text == "ask_requester: no answer (no_answer): No answer came within 5 s."
    assert result.structured_content == {
        "status": "failed",
        "error": {"code": "no_answer", "message": "No answer came within 5 s."},
    }


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "question"),
        ({"question": "   "}, "question"),
        ({"question": 3}, "question"),
        ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, "question"),
        ({"question": "Which?", "to": "someone"}, "to"),
    ],
)
async def test_a_bad_question_is_refused_before_anyone_is_asked(
    arguments: dict[str, Any], field: str
) -> None:
    requester = Recorder()
    async with (
        open_endpoint_run([], requester=requester) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        result = await session.call_tool(ASK_TOOL, arguments)
    assert result.is_error
    assert result.structured_content is not None
    error = result.structured_content["error"]
    assert error["code"] == "invalid_input" and error["metadata"] == {"field": field}
    assert requester.asked == []


async def test_a_long_wait_sends_progress_heartbeats() -> None:
    requester = Recorder("ok")
    requester.release = trio.Event()
    heartbeats: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heartbeats.append(message)
        if len(heartbeats) == 2:
            requester.release.set()  # answer only once two heartbeats arrived

    on_progress: Any = progress

    async with (
        open_endpoint_run([], requester=requester, heartbeat_interval=0.05) as (_, _, run),
        mcp_session(run.endpoint) as session,
    ):
        with trio.fail_after(10):
            result = await session.call_tool(
                ASK_TOOL, {"question": "Still there?"}, progress_callback=on_progress
            )
    assert result.content[0].text == "ok"  # type: ignore[union-attr]
    assert heartbeats[:2] == ["waiting for the requester's answer"] * 2
