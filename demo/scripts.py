"""The scripted agents' scripts: what `a2a-serve --script NAME` serves with no model.

`research` and `review` are the two remote agents of `subagent-engine demo`, paced so a person
can follow them on the page; `review-ask` is what the demo's review remote plays instead of
`review` for a task that asks for a question (`ASKING_VARIANT`, see `demo.remote`): it asks
which framework to focus on and reviews that. `reply` answers at once, `slow` streams for about
15 s (for cancelling mid-stream) and `ask` asks the task's sender one question (`ask_requester`:
the A2A task turns input-required) and answers with their reply. A script is a tuple of the scripted
parent's steps (`adapters.parents.Say`, `Think`, `Delegate`, `Ask`); `{prompt}` in a chunk
becomes the task's text.
"""

from __future__ import annotations

from typing import Final

from adapters.parents import Ask, Delegate, Say, Think

__all__ = ["ASKING_VARIANT", "PACE", "SCRIPTS"]

#: Seconds between the chunks of the demo scripts (a pace a person can follow).
PACE: Final = 0.4
#: `SCRIPTS[key + ASKING_VARIANT]`: what a demo remote plays for a task that asks for a question.
ASKING_VARIANT: Final = "-ask"
#: By name (`--script`): no model; only those with an `Ask` step need the run's MCP endpoint.
SCRIPTS: Final[dict[str, tuple[Say | Think | Delegate | Ask, ...]]] = {
    "reply": (
        Think(("Reading the task, ", "then answering.")),
        Say(("You asked: ", "{prompt}", ". ", "Here is the scripted answer.")),
    ),
    # A long, slow answer (about 15 s): for cancelling mid-stream.
    "slow": (
        Think(("Taking my time.",)),
        Say(tuple(f"chunk {i} " for i in range(300)), pause=0.05),
    ),
    # One question to the task's sender, then an answer that uses their reply.
    "ask": (
        Think(("The task leaves one thing open: ", "I'll ask.")),
        Ask(
            "Which format should the answer to '{prompt}' take?",
            reply="Answering '{prompt}' as you asked: {answer}.",
        ),
    ),
    # The two remotes of `subagent-engine demo`, at a human pace.
    "research": (
        Think(("Task: {prompt}. ", "Looking for sources first.")),
        Say(
            (
                "Sources: ",
                "the Trio docs, ",
                "the A2A 1.0 specification, ",
                "the AG-UI event reference.",
            ),
            pause=PACE,
        ),
        Think(("Three sources; ", "summarizing them.")),
        Say(
            (
                "Trio nurseries ",
                "give structured cancellation; ",
                "A2A streams ",
                "status and artifact updates; ",
                "AG-UI shows them ",
                "as a nested subagent.",
            ),
            pause=PACE,
        ),
    ),
    "review": (
        Think(("Task: {prompt}. ", "Checking it against the design rules.")),
        Say(
            (
                "Cancellation cascades: ",
                "ok. ",
                "Replay after a reconnect: ",
                "ok. ",
                "Secrets stay redacted: ",
                "ok.",
            ),
            pause=PACE,
        ),
        Think(("Writing the verdict.",)),
        Say(
            ("Verdict: ", "approve, ", "with a replay window ", "sized for slow viewers."),
            pause=PACE,
        ),
    ),
    # `review` for a task that asks for a question: ask it, then review what the answer names.
    "review-ask": (
        Think(("Task: {prompt}. ", "It asks me to ask first.")),
        Ask(
            "Which framework or part of the design should I focus the review on?",
            reply=(
                "Reviewed {answer}: cancellation cascades, replay after a reconnect and "
                "redaction all hold. Verdict: approve {answer}, with a replay window sized for "
                "slow viewers."
            ),
        ),
    ),
}
