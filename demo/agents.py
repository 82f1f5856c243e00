"""The demo's in-process agents and its in-process parent, with no model and no API key.

`demo_agents()` are the two subagents `subagent-engine serve` offers on embedded defaults and
`demo --print` delegates to (`research` streams thinking, a tool call, text and an artifact;
`review` streams statuses and text); `scripted_parent` is `demo --print`'s parent, which calls
both at once as tool calls and answers from their results.

Human in the loop: the `review` agent asks one clarifying question (`LocalTask.ask`, surfaced to
whoever watches the run: its policy is `input_required = "surface"`) when its task asks for one,
that is when the objective or prompt it was given says "ask me", "clarify" or "question"
(`asks_for_a_question`, any case). Type "ask me which framework to review" on the page of
`subagent-engine serve` and the review card asks what to focus on, waits for the answer (at most
`REVIEW_INPUT_WAIT` seconds; unanswered, the review comes back to the parent as input_required),
and reviews that. `demo --print` cannot answer and never asks: its
objectives are fixed and ask for nothing.
"""

from __future__ import annotations

import json
import re
from typing import Final

import trio

import engine
from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    AgentSpec,
    DelegationPolicy,
    DelegationRequest,
    InputExpiry,
    InputRequiredMode,
    Kind,
    Run,
)

__all__ = [
    "REVIEW_INPUT_WAIT",
    "REVIEW_QUESTION",
    "asks_for_a_question",
    "demo_agents",
    "scripted_parent",
]

#: What the review agent asks when its task asks for a question.
REVIEW_QUESTION: Final = "Which framework or part of the design should I focus the review on?"
#: How long (s) the review agent's question waits for an answer before it expires: time for a
#: person to notice it and type; its delegations get `REVIEW_INPUT_WAIT` + 2 min in all.
REVIEW_INPUT_WAIT: Final = 300.0
#: Words in a task that ask the review agent to ask first (matched as whole words, any case).
_ASK_FIRST: Final = re.compile(r"\b(ask me|clarify|clarifying|questions?)\b", re.IGNORECASE)


def asks_for_a_question(*texts: str | None) -> bool:
    """Whether a task (its objective, its prompt...) asks the review agent to ask first: one of
    them says "ask me", "clarify" or "question", in any case."""
    return any(text and _ASK_FIRST.search(text) for text in texts)


def demo_agents(pause: float = 0.05, input_wait: float = REVIEW_INPUT_WAIT) -> list[AgentSpec]:
    """The two embedded demo subagents, both read-only (they change nothing). `pause`: seconds
    between their chunks; `input_wait`: how long the review agent's question waits."""

    async def research(task: LocalTask) -> str:
        await task.status("working", "Looking for sources")
        await task.think(
            "The objective asks for ", "streaming API shapes; ", "check the docs first."
        )
        await task.tool_call("search", {"query": task.objective}, {"hits": 3})
        words = [
            "Trio ",
            "nurseries ",
            "give ",
            "structured ",
            "cancellation; ",
            "memory ",
            "channels ",
            "carry ",
            "events.",
        ]
        message = await task.text_start()
        for word in words:
            await task.text_delta(word, message_id=message)
            await trio.sleep(pause)
        await task.text_end(message)
        await task.artifact("notes.md", data="# Notes\n- nurseries\n", mime_type="text/markdown")
        return "Trio nurseries give structured cancellation; channels carry events."

    async def review(task: LocalTask) -> str:
        await task.status("working", "Reading the design")
        await trio.sleep(pause)
        if not asks_for_a_question(task.objective, task.prompt):
            await task.say("The design ", "is sound; ", "add a replay window.")
            await task.status("working", "Writing the verdict")
            await trio.sleep(pause)
            return "Approve, with a replay window."
        reply = await task.ask(REVIEW_QUESTION)
        focus = _answer_text(reply)
        await task.status("working", f"Reviewing {focus}")
        await trio.sleep(pause)
        await task.say("Reviewed ", f"{focus}: ", "the design is sound; ", "add a replay window.")
        await task.status("working", "Writing the verdict")
        await trio.sleep(pause)
        return f"Approve {focus}, with a replay window."

    return [
        AgentSpec(
            key="research",
            display_name="Research Agent",
            description="Finds and summarizes sources.",
            target=InProcessTarget(research),
            read_only=True,  # it only reads and answers: parents may run both at once
        ),
        AgentSpec(
            key="review",
            display_name="Review Agent",
            description="Reviews a design and gives a verdict.",
            target=InProcessTarget(review),
            read_only=True,  # it only reads and answers: parents may run both at once
            # Its question goes to whoever watches the run (the page, the answer endpoint); left
            # unanswered, it expires and the review comes back to the parent as input_required.
            policy=DelegationPolicy(
                input_required=InputRequiredMode.SURFACE,
                input_wait_timeout=input_wait,
                default_timeout=input_wait + 120.0,
                on_input_expiry=InputExpiry.RETURN,
            ),
        ),
    ]


def _answer_text(reply: engine.Answer) -> str:
    """The answer as one line of text (an answer may come as data only)."""
    if reply.text and reply.text.strip():
        return " ".join(reply.text.split())
    return json.dumps(dict(reply.data or {}), sort_keys=True)


async def _say(run: Run, message_id: str, *chunks: str) -> None:
    await run.emit(Kind.PARENT_TEXT_START, message_id=message_id, role="assistant")
    for chunk in chunks:
        await run.emit(Kind.PARENT_TEXT_DELTA, message_id=message_id, delta=chunk)
    await run.emit(Kind.PARENT_TEXT_END, message_id=message_id)


async def scripted_parent(run: Run, prompt: str | None = None) -> list[engine.DelegationResult]:
    """Say, call two delegations concurrently as tool calls, use the results, answer.

    With a `prompt` (the user's), both delegations get it (as `objective` and `prompt`, like the
    bundled scripted parent's default script: "Research: <prompt>", "Review the plan for:
    <prompt>"), so a prompt that asks for a question makes the review agent ask it; someone must
    then answer through `Run.answer` (or it expires after `REVIEW_INPUT_WAIT`). Without one (`demo
    --print`), the objectives are fixed and nothing asks."""
    await _say(run, "parent-1", "I'll ask two specialists ", "at the same time.")
    if prompt is None:
        objectives = ("How does Trio stream events?", "Review the engine design.")
    else:
        objectives = (f"Research: {prompt}", f"Review the plan for: {prompt}")
    calls = [
        ("call-research", DelegationRequest(agent="research", objective=objectives[0])),
        ("call-review", DelegationRequest(agent="review", objective=objectives[1])),
    ]
    handles = []
    for call_id, request in calls:
        args = {"agent": request.agent, "objective": request.objective}
        await run.emit(
            Kind.PARENT_TOOL_CALL_START, tool_call_id=call_id, tool_name="delegate_to_agent"
        )
        await run.emit(Kind.PARENT_TOOL_CALL_ARGS, tool_call_id=call_id, args=args)
        await run.emit(Kind.PARENT_TOOL_CALL_END, tool_call_id=call_id)
        request = DelegationRequest(
            agent=request.agent,
            objective=request.objective,
            prompt=prompt,
            parent_tool_call_id=call_id,
        )
        handles.append((call_id, run.start_delegation(request)))
    results = []
    for call_id, handle in handles:
        result = await handle.wait()
        results.append(result)
        await run.emit(
            Kind.PARENT_TOOL_CALL_RESULT,
            tool_call_id=call_id,
            result=engine.to_jsonable(result),
        )
    # Each summary is a sentence of its own: "research: ... events. review: ..." (never ".;").
    summaries = " ".join(f"{r.agent}: {_sentence(r.summary)}" for r in results)
    await _say(run, "parent-2", "Both specialists answered. ", summaries)
    return results


def _sentence(text: str | None) -> str:
    """`text` ending with one full stop (or its own ? or !)."""
    text = (text or "").strip()
    return text if text.endswith((".", "?", "!")) else f"{text}."
