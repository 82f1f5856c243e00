"""`python -m demo.remote --script KEY ...`: a built-in remote agent of `subagent-engine demo`.

The same A2A agent as `subagent-engine a2a-serve --parent scripted --script KEY` (the same
server, `adapters.a2a.serving.serve`, and a task engine whose MCP endpoint offers
`ask_requester`), except that each task's scripted parent picks its script by the task: one
whose text asks for a question (`demo.agents.asks_for_a_question`: "ask me", "clarify",
"question") plays `SCRIPTS[KEY + ASKING_VARIANT]` when there is one (`review-ask`: the A2A task
turns input-required with its question, and the follow-up message's answer is what it
reviews); any other plays `SCRIPTS[KEY]`. So on the demo's page, "ask me which framework to
review" gets a question from the remote review agent, and every other prompt plays as before.

Options: `--script KEY` (a key of `demo.scripts.SCRIPTS`), `--name`, `--description`, `--skill
NAME=DESCRIPTION` (repeatable), `--host` (default 127.0.0.1), `--port` (default 0: any free
port), `--watch-stdin`, `--token-env NAME`, `--ask-timeout SECONDS`; as for `a2a-serve`. It
prints `READY <port>` once it listens. `--log-format text|json` (`web.logs`) is the demo's: its
warnings on stderr are written like the demo's own lines, its token redacted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from adapters.a2a.serving import Listening, ServedParent, serve
from adapters.listener import is_loopback
from adapters.mcp import DelegationEndpoint, Requester
from adapters.parents import SCRIPTED, ScriptedParent
from demo.agents import asks_for_a_question
from demo.scripts import ASKING_VARIANT, SCRIPTS
from engine import Engine, Run
from web.logs import LOG_FORMATS, configure_logging

__all__ = ["PromptedScript", "main", "served_agent"]

DEFAULT_DESCRIPTION: Final = (
    "a scripted agent (no model), served over A2A by subagent-engine; streams its progress and "
    "answer."
)


class PromptedScript:
    """A task's parent: `SCRIPTS[key]`, or its asking variant for a task that asks a question."""

    def __init__(self, key: str) -> None:
        if key not in SCRIPTS:
            raise ValueError(f"unknown script {key!r}; use one of {tuple(SCRIPTS)}")
        self.key = key
        self.name = SCRIPTED

    def script_for(self, prompt: str) -> str:
        """The key of the script a task with this text plays."""
        asking = self.key + ASKING_VARIANT
        return asking if asking in SCRIPTS and asks_for_a_question(prompt) else self.key

    async def run(self, run: Run, prompt: str) -> list[dict[str, Any]]:
        return await ScriptedParent(SCRIPTS[self.script_for(prompt)], name=SCRIPTED).run(
            run, prompt
        )


@asynccontextmanager
async def _open_engine(requester: Requester) -> AsyncIterator[Engine]:
    """A task's engine: no agents of its own, and the run's MCP endpoint, whose
    `ask_requester` asks the task's client (`requester`, through input-required)."""
    async with (
        DelegationEndpoint(requester=requester).serve() as endpoints,
        Engine([], endpoints=endpoints) as eng,
    ):
        yield eng


def served_agent(argv: Sequence[str] | None = None) -> ServedParent:
    """The served agent the command line describes (exit 2 with usage for a bad one)."""
    return _served(_arguments(argv))


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo.remote", description=__doc__)
    parser.add_argument("--script", required=True, choices=sorted(SCRIPTS))
    parser.add_argument("--name", default="subagent-engine scripted")
    parser.add_argument("--description", default=DEFAULT_DESCRIPTION)
    parser.add_argument("--skill", action="append", default=[])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--watch-stdin", action="store_true")
    parser.add_argument("--token-env")
    parser.add_argument("--ask-timeout", type=float, default=600.0)
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text")
    args = parser.parse_args(argv)
    token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and not token:
        parser.error(f"{args.token_env} (--token-env) is not set")
    if args.ask_timeout <= 0:
        parser.error("--ask-timeout must be positive")
    if token is None and not is_loopback(args.host):
        # As `a2a-serve`: beyond this machine, whoever reaches the port would drive the agent.
        parser.error(f"listening on {args.host} reaches beyond this machine: pass --token-env")
    args.token = token
    return args


def _served(args: argparse.Namespace) -> ServedParent:
    token: str | None = args.token
    key: str = args.script
    return ServedParent(
        name=args.name,
        description=args.description,
        label=SCRIPTED,
        make_parent=lambda: PromptedScript(key),
        open_engine=_open_engine,
        skills=tuple(
            (name.strip(), description.strip())
            for name, _, description in (skill.partition("=") for skill in args.skill)
        ),
        ask_timeout=args.ask_timeout,
        listening=Listening(
            host=args.host, port=args.port, watch_stdin=args.watch_stdin, token=token
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until stdin closes (`--watch-stdin`) or SIGINT/SIGTERM; 0 after a clean stop."""
    args = _arguments(argv)
    served = _served(args)
    configure_logging(args.log_format, "WARNING", secrets=[args.token or ""])
    # uvicorn re-raises the SIGTERM/SIGINT it stopped on once it has shut down; with these
    # handlers in place that ends in a clean exit 0 rather than death by the signal.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(serve(served, sys.stdout))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _stopped(signum: int, frame: Any) -> None:
    """A stop signal that arrived when uvicorn was not listening for it (after its shutdown)."""


if __name__ == "__main__":
    sys.exit(main())
