"""The built-in scripted parent: a parent agent with no model, for the embedded defaults and tests.

It follows a small script of steps: say text, think, call `delegate_to_agent` (one call or
several at once) through the run's real MCP endpoint with the official `mcp` client, and answer
with what the delegations returned; or ask whoever sent the run its task a question
(`ask_requester`, offered when the run's host can reach them) and answer with their reply.
Every step is published to the run as the parent's own events (text, reasoning, tool call
start/args/end/result), exactly as a CLI parent's adapter would publish them, and each tool
call passes its id in `_meta` (`callId`, as Codex does), so the delegation's events carry the
parent tool-call id (strong correlation).

The model-free parent is what `subagent-engine serve` and `./dev run` use when no model is
configured, so the whole path (parent -> MCP -> engine -> remote -> journal -> viewers) runs on
a machine with no API keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import attrs
import trio

from adapters.mcp import ASK_TOOL, connect
from adapters.parents._kinds import SCRIPTED
from engine import Kind, Run

__all__ = ["DEFAULT_SCRIPT", "Answer", "Ask", "Delegate", "Say", "ScriptedParent", "Think"]


@attrs.frozen
class Say:
    """Stream one assistant message; `{prompt}` is replaced by the user's prompt. `pause`:
    seconds to wait before each chunk after the first (a slow parent, for tests and demos)."""

    chunks: tuple[str, ...]
    pause: float = 0.0


@attrs.frozen
class Think:
    """Stream one reasoning message, like `Say`."""

    chunks: tuple[str, ...]
    pause: float = 0.0


@attrs.frozen
class Delegate:
    """Call `delegate_to_agent` once per argument set, all at once, and wait for every result."""

    calls: tuple[Mapping[str, Any], ...]
    tool: str = "delegate_to_agent"


@attrs.frozen
class Ask:
    """Call `ask_requester` with `question`, then say `reply` with `{answer}` replaced by the
    answer (or, when none came, by what the tool said instead)."""

    question: str
    reply: str = "You answered: {answer}"


@attrs.frozen
class Answer:
    """The closing message: `intro` then one line per delegation result of the run so far."""

    intro: str = "Here is what the specialists found:"


Step = Say | Think | Delegate | Ask | Answer

DEFAULT_SCRIPT: tuple[Step, ...] = (
    Say(("You asked: ", "{prompt}", ". I'll ask two specialists ", "at the same time.")),
    Think(("Research first, ", "then a review, ", "in parallel.")),
    Delegate(
        (
            {"agent": "research", "objective": "Research: {prompt}"},
            {"agent": "review", "objective": "Review the plan for: {prompt}"},
        )
    ),
    Answer(),
)


class ScriptedParent:
    """Runs a script as the parent of one run. `run(run, prompt)` returns when the script ends."""

    def __init__(self, script: Sequence[Step] = DEFAULT_SCRIPT, *, name: str = SCRIPTED) -> None:
        self.script = tuple(script)
        self.name = name

    async def run(self, run: Run, prompt: str) -> list[dict[str, Any]]:
        """Play the script in `run`; returns the structured results of its tool calls.

        Only a script with a `Delegate` or `Ask` step needs the run's MCP endpoint (and connects
        to it).
        """
        delegates = any(isinstance(step, Delegate | Ask) for step in self.script)
        if delegates and run.endpoint is None:
            raise RuntimeError(
                "the scripted parent calls its tools over MCP: open the run on an Engine "
                "with an endpoint provider (adapters.mcp.DelegationEndpoint)"
            )
        ids = itertools.count(1)
        results: list[dict[str, Any]] = []
        session_cm: AbstractAsyncContextManager[Any] = (
            connect(run.endpoint) if delegates and run.endpoint is not None else nullcontext()
        )
        async with session_cm as session:
            for step in self.script:
                if isinstance(step, Say):
                    await _message(run, f"msg-{next(ids)}", Kind.PARENT_TEXT_START, step, prompt)
                elif isinstance(step, Think):
                    await _message(
                        run, f"think-{next(ids)}", Kind.PARENT_REASONING_START, step, prompt
                    )
                elif isinstance(step, Delegate):
                    results.extend(await _delegate(run, session, step, prompt, ids))
                elif isinstance(step, Ask):
                    said = await _ask(run, session, step, prompt, f"call-{next(ids)}")
                    text = step.reply.replace("{prompt}", prompt).replace("{answer}", said)
                    # "{prompt}" stays as it is: the answer is the requester's text, not a template.
                    reply = Say((text,))
                    await _message(
                        run, f"msg-{next(ids)}", Kind.PARENT_TEXT_START, reply, "{prompt}"
                    )
                else:
                    answer = Say((_answer(step, results),))
                    await _message(run, f"msg-{next(ids)}", Kind.PARENT_TEXT_START, answer, "")
        return results


def _answer(step: Answer, results: Sequence[Mapping[str, Any]]) -> str:
    lines = [step.intro]
    for result in results:
        error = result.get("error") or {}
        outcome = result_gist(result) or error.get("message", "")
        lines.append(f"- {result.get('agent')}: {result.get('status')}: {outcome}")
    return "\n".join(lines)


def result_gist(result: Mapping[str, Any]) -> str:
    """What a delegation came back with, in a few words, from the result a parent's tool call
    gets: a full result's `summary`; else, of the lean result's `output.text` (the answer said
    once), its `Summary:` paragraph, or else its last paragraph that is not the artifact list
    (the remote's last message, which is what a summary usually repeats)."""
    summary = result.get("summary")
    if isinstance(summary, str) and summary:
        return summary
    output = result.get("output")
    text = output.get("text") if isinstance(output, Mapping) else None
    if not isinstance(text, str):
        return ""
    paragraphs = [part.strip() for part in text.split("\n\n") if part.strip()]
    for paragraph in paragraphs:
        if paragraph.startswith("Summary: "):
            return paragraph.removeprefix("Summary: ")
    answer = [part for part in paragraphs if not part.startswith("Artifacts:")]
    return answer[-1] if answer else ""


_KINDS = {
    Kind.PARENT_TEXT_START: (Kind.PARENT_TEXT_DELTA, Kind.PARENT_TEXT_END),
    Kind.PARENT_REASONING_START: (Kind.PARENT_REASONING_DELTA, Kind.PARENT_REASONING_END),
}


async def _message(run: Run, message_id: str, start: str, step: Say | Think, prompt: str) -> None:
    delta, end = _KINDS[start]
    await run.emit(start, message_id=message_id, role="assistant")
    said = ""
    for index, chunk in enumerate(step.chunks):
        if index and step.pause > 0:
            await trio.sleep(step.pause)
        text = chunk.replace("{prompt}", prompt)
        # A prompt that ends its own sentence ("...events?") takes no second stop after it.
        if said.endswith((".", "?", "!")) and text.startswith("."):
            text = text[1:]
        said = text or said
        await run.emit(delta, message_id=message_id, delta=text)
    await run.emit(end, message_id=message_id)


def _fill(value: Any, prompt: str) -> Any:
    if isinstance(value, str):
        return value.replace("{prompt}", prompt)
    if isinstance(value, Mapping):
        return {k: _fill(v, prompt) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fill(v, prompt) for v in value]
    return value


async def _delegate(
    run: Run, session: Any, step: Delegate, prompt: str, ids: itertools.count[int]
) -> list[dict[str, Any]]:
    calls = [(f"call-{next(ids)}", _fill(arguments, prompt)) for arguments in step.calls]
    for call_id, arguments in calls:
        await run.emit(Kind.PARENT_TOOL_CALL_START, tool_call_id=call_id, tool_name=step.tool)
        await run.emit(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call_id, args=arguments)
        await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=call_id)
    results: dict[str, dict[str, Any]] = {}

    async def call(call_id: str, arguments: dict[str, Any]) -> None:
        result = await session.call_tool(step.tool, arguments, meta={"callId": call_id})
        structured = result.structured_content
        if not isinstance(structured, dict):
            text = " ".join(getattr(block, "text", "") for block in result.content)
            structured = {"status": "failed", "error": {"message": text}}
        results[call_id] = structured
        await run.emit(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id=call_id, result=structured)

    async with trio.open_nursery() as nursery:
        for call_id, arguments in calls:
            nursery.start_soon(call, call_id, arguments)
    return [results[call_id] for call_id, _ in calls]


async def _ask(run: Run, session: Any, step: Ask, prompt: str, call_id: str) -> str:
    """Ask the question through `ask_requester`; the answer, or what the tool said instead."""
    arguments = {"question": step.question.replace("{prompt}", prompt)}
    await run.emit(Kind.PARENT_TOOL_CALL_START, tool_call_id=call_id, tool_name=ASK_TOOL)
    await run.emit(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call_id, args=arguments)
    await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=call_id)
    result = await session.call_tool(ASK_TOOL, arguments, meta={"callId": call_id})
    text = " ".join(getattr(block, "text", "") for block in result.content)
    structured = result.structured_content
    if not isinstance(structured, dict):
        structured = {"status": "failed" if result.is_error else "answered", "text": text}
    await run.emit(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id=call_id, result=structured)
    return text
