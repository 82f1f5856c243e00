"""What the pinned agent CLIs do with an elicitation in their non-interactive modes.

Claude Code (`claude -p`, 2.1.332) and Codex (`codex exec`, 0.171.0) run as the parent of a run
(configured as a host would, from host TOML), against the scripted model on loopback; the model
makes each call `delegate_to_agent`, whose in-process agent asks one question with
`elicitation = "ask"` (a form, or a sign-in address: URL mode). Measured here: both declare
elicitation (form and URL modes), and neither has anyone to ask: Claude Code speaks the
stateless 2026-07-28 version and retries the call at once with the elicitation `cancel`led;
Codex speaks a session-based version and answers `elicitation/create` with `decline` at once;
both alike in either mode. So the agent's `on_elicitation_declined` decides,
at once: `return` hands the question to the parent model as an `input_required` result, `wait`
keeps the call blocked until another surface (here the page) answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import DelegationEndpoint
from engine import (
    AgentSpec,
    AnswerSurface,
    DelegationPolicy,
    Engine,
    Kind,
    QuestionOutcome,
)
from tests.helpers.peers import CODEX_MODEL, MODEL_KEY_ENV, ScriptedModel
from web.config import parse_config

KINDS = {"claude": "claude-code", "codex": "codex"}
SIGN_IN = "https://sign-in.example/authorize"
#: What each CLI does with an elicitation it cannot show anyone, and the name it gives.
MEASURED = {
    "claude": {"action": "cancel", "client": "claude-code", "stateless": True},
    "codex": {"action": "decline", "client": "codex-mcp-client", "stateless": False},
}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLIs inherit HOME: a throwaway one, and the model key the config names."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")


def host_toml(cli: str, bin_dir: Path, model_url: str) -> str:
    endpoint = model_url if cli == "claude" else f"{model_url}/v1"
    name = CODEX_MODEL if cli == "codex" else "claude-scripted"
    return (
        "[parent]\n"
        f'kind = "{KINDS[cli]}"\n'
        f'binary = "{bin_dir / cli}"\n'
        f'model_endpoint = "{endpoint}"\n'
        f'model = "{name}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "tool_timeout = 120\n"
    )


def asking_agent(then: str, mode: str, got: list[Any]) -> AgentSpec:
    async def ask(task: LocalTask) -> str:
        if mode == "url":
            answer = await task.ask("Sign in to the wiki.", auth_url=SIGN_IN)
        else:
            answer = await task.ask(
                "Which year should the report cover?",
                schema={"type": "object", "properties": {"year": {"type": "integer"}}},
            )
        got.append(answer.data)
        return f"Covered {answer.data}"

    policy = DelegationPolicy(
        input_required="surface", elicitation="ask", on_elicitation_declined=then
    )
    return AgentSpec(key="research", target=InProcessTarget(ask), policy=policy)


@pytest.mark.parametrize("mode", ["form", "url"])
@pytest.mark.parametrize("then", ["return", "wait"])
@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_a_cli_parent_without_a_user_turns_the_elicitation_down_at_once(
    cli: str, then: str, mode: str, cli_bin: Path, model: ScriptedModel, cli_env: None
) -> None:
    measured = MEASURED[cli]
    config = parse_config(host_toml(cli, cli_bin, model.base_url), "host.toml")
    prompt = "DELEGATE: " + json.dumps({"agent": "research", "objective": "Pick a year."})
    got: list[Any] = []
    outcome: list[Any] = []
    ended = trio.Event()
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine([asking_agent(then, mode, got)], endpoints=endpoint) as eng,
        eng.open_run() as run,
        trio.open_nursery() as nursery,
    ):

        async def parent() -> None:
            outcome.append(await config.parent_factory()().run(run, prompt))
            ended.set()

        nursery.start_soon(parent)
        with trio.fail_after(100):
            if then == "wait":
                # Nothing is journaled when a decline leaves the question open: the endpoint's
                # count is what there is to see.
                while endpoint.elicitations_declined == 0:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                [question] = run.questions()  # still open for another surface
                run.answer(question.delegation_id, data={"year": 2031}, surface=AnswerSurface.PAGE)
            await ended.wait()
        events = [e.event for e in await run.journal.store.read_after(0, run.journal.head)]
    assert endpoint.elicitations_sent == 1
    assert endpoint.elicitations_declined_by == {measured["action"]: 1}
    assert endpoint.rounds_resumed == (1 if measured["stateless"] else 0)
    [closed] = [e.question for e in events if e.kind == Kind.INPUT_CLOSED]
    [result] = [e for e in events if e.kind == Kind.PARENT_TOOL_CALL_RESULT]
    if then == "return":
        assert (closed.outcome, closed.surface, closed.answered_by) == (
            QuestionOutcome.DECLINED,
            AnswerSurface.MCP_ELICITATION,
            measured["client"],
        )
        assert got == []
        assert "input_required" in json.dumps(result.result or result.text or "")
    else:
        assert (closed.outcome, closed.surface) == (QuestionOutcome.ANSWERED, AnswerSurface.PAGE)
        assert got == [{"year": 2031}]
    assert outcome[0].exit_code == 0
