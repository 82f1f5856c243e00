"""`subagent-engine serve` on embedded defaults, paced for a browser to watch (tests only).

    python -m tests.browser.serve_demo [--pause SECONDS] [--replay-window EVENTS] [--asking]
                                       [--side-by-side A2A_CARD_URL] [--host-token-env NAME]
                                       [--input-wait SECONDS]

The same composition as `cli.serve` (the two in-process demo agents, the scripted parent over the
real MCP endpoint, the default wire encoder, the packaged page loaded the way `serve` loads it),
except that the demo agents pause `--pause` seconds between chunks so that a run lasts long
enough to click Stop or force a reconnect in the middle of it, and `--replay-window` can shrink
the journal's replay window so that a late viewer gets a gap marker, and `--asking` swaps the
research agent for one that asks the viewer a question (`asking_agents`).

`--side-by-side CARD_URL` serves both protocols side by side instead: the parent's one `Delegate`
step calls two remote agents at once, `team`, a remote AG-UI agent, and `solo`, the remote A2A agent
whose card is at CARD_URL (the tests start `a2a-serve --parent scripted --script research`). The
AG-UI agent is this project's own bundled server (an engine as the remote of another engine), served
in this process on another ephemeral port with the scripted parent and the demo agents (paced by
`--pause`): its run's own delegations, research and review, are subagents of `team`, two levels
below the page's parent.

`--input-wait SECONDS` is how long the demo review agent's question waits for an answer (see
`demo.agents`: a prompt that says "ask me" makes it ask) before it expires.

`--host-token-env NAME` makes starting a run need the host token held in NAME, as `serve` does with
`[server] token_env`. `--port P` listens on P (default: any free port); `--state-dir DIR` keeps
runs in DIR's SQLite store, so a server started again there serves the runs of the last one.

Binds 127.0.0.1 on an ephemeral port, prints `READY <port>` once it listens, and exits when its
stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import Answer, Delegate, Say, ScriptedParent
from demo import demo_agents
from demo.agents import REVIEW_INPUT_WAIT
from engine import AgentSpec, DelegationPolicy, InputRequiredMode
from web.config import HostConfig, parse_config
from web.page import bundled_page
from web.server import ParentAgent, create_app, default_encoder_factory, open_host, serve_app

QUESTION = "Which year?"
BEFORE_ASKING = "I need one detail first."

#: `--side-by-side`: the two remote agents' names, and the parent's script calling both at once.
TEAM_NAME = "Team over AG-UI"
SOLO_NAME = "Researcher over A2A"
SIDE_BY_SIDE_SCRIPT = (
    Say(("Asking a remote AG-UI team ", "and a remote A2A researcher ", "at the same time.")),
    Delegate(
        (
            {"agent": "team", "objective": "{prompt}"},
            {"agent": "solo", "objective": "Research: {prompt}"},
        )
    ),
    Answer(),
)


def asking_agents(pause: float, input_wait: float = REVIEW_INPUT_WAIT) -> list[AgentSpec]:
    """The demo agents, the research one replaced by an agent of the same key and name that says
    something, asks `QUESTION` (surfaced to the viewer: `InputRequiredMode.SURFACE`), waits for the
    answer, then streams `Checked the sources for <answer>.` word by word, `pause` s apart."""
    research, review = demo_agents(pause=pause, input_wait=input_wait)

    async def asking(task: LocalTask) -> str:
        await task.status("working", "Looking for sources")
        await task.say(BEFORE_ASKING)
        reply = await task.ask(QUESTION)
        message = await task.text_start()
        for word in ("Checked ", "the ", "sources ", "for ", f"{reply.text}."):
            await trio.sleep(pause)
            await task.text_delta(word, message_id=message)
        await task.text_end(message)
        return f"Checked {reply.text}."

    asking_research = AgentSpec(
        key=research.key,
        display_name=research.display_name,
        description=research.description,
        target=InProcessTarget(asking),
        policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
    )
    return [asking_research, review]


@asynccontextmanager
async def inner_server(pause: float) -> AsyncIterator[str]:
    """This project's bundled server (the scripted parent, the demo agents paced by `pause`) on
    127.0.0.1: a remote AG-UI agent at `<yielded base URL>/agui`."""
    config = parse_config('[store]\nkind = "memory"\n', "<inner AG-UI server>")
    async with (
        open_host(config, demo_agents(pause=pause), ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base


def side_by_side_config(agui_url: str, card_url: str) -> str:
    """The host configuration of `--side-by-side`: an AG-UI agent and an A2A agent."""
    return f"""
[[agents]]
key = "team"
protocol = "agui"
url = {json.dumps(agui_url)}
display_name = {json.dumps(TEAM_NAME)}
description = "An engine served over AG-UI, with subagents of its own."

[[agents]]
key = "solo"
protocol = "a2a"
card_url = {json.dumps(card_url)}
display_name = {json.dumps(SOLO_NAME)}
description = "A scripted A2A agent."
"""


@asynccontextmanager
async def composition(
    pause: float,
    replay_window: int | None,
    asking: bool,
    side_by_side: str | None,
    input_wait: float = REVIEW_INPUT_WAIT,
) -> AsyncIterator[tuple[HostConfig, list[AgentSpec], Callable[[], ParentAgent]]]:
    """The page server's host configuration, agents and parent, for the options given."""
    limits = f"[limits]\nreplay_window_events = {replay_window}\n" if replay_window else ""
    if side_by_side is None:
        agents = (
            asking_agents(pause, input_wait)
            if asking
            else demo_agents(pause=pause, input_wait=input_wait)
        )
        yield parse_config(limits, "<browser tests>"), agents, ScriptedParent
        return
    async with inner_server(pause) as inner:
        config = parse_config(
            limits + side_by_side_config(f"{inner}/agui", side_by_side), "<browser tests>"
        )
        agents = config.agent_specs()
        try:
            yield config, agents, lambda: ScriptedParent(SIDE_BY_SIDE_SCRIPT)
        finally:
            for agent in agents:
                await agent.target.aclose()  # type: ignore[attr-defined]


async def serve(
    pause: float,
    replay_window: int | None,
    asking: bool,
    side_by_side: str | None,
    host_token: str | None = None,
    port: int = 0,
    input_wait: float = REVIEW_INPUT_WAIT,
) -> None:
    page = bundled_page()
    if page is None:
        raise SystemExit("web/static/index.html is not packaged with the web package")
    async with (
        composition(pause, replay_window, asking, side_by_side, input_wait) as (
            config,
            agents,
            parent,
        ),
        open_host(config, agents, parent) as (host, _),
    ):
        app = create_app(host, config, default_encoder_factory(), page=page, host_token=host_token)
        async with serve_app(app, host="127.0.0.1", port=port) as url:
            sys.stdout.write(f"READY {urlsplit(url).port}\n")
            sys.stdout.flush()
            # Until the parent closes our stdin (or dies): then every run is cancelled.
            await trio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--replay-window", type=int, default=None)
    parser.add_argument("--asking", action="store_true")
    parser.add_argument("--side-by-side", metavar="A2A_CARD_URL", default=None)
    parser.add_argument("--host-token-env", metavar="NAME", default=None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state-dir", metavar="DIR", default=None)
    parser.add_argument("--input-wait", type=float, default=REVIEW_INPUT_WAIT)
    args = parser.parse_args()
    token = os.environ[args.host_token_env] if args.host_token_env else None
    # Runs are kept as `serve` keeps them by default (SQLite in the state directory): in
    # `--state-dir` (a server started again on it finds its runs), else in a state directory
    # of this process's own, since page servers of several tests run at once.
    state = tempfile.TemporaryDirectory(prefix="serve-demo-state-")
    os.environ["XDG_STATE_HOME"] = args.state_dir or state.name
    trio.run(
        serve,
        args.pause,
        args.replay_window,
        args.asking,
        args.side_by_side,
        token,
        args.port,
        args.input_wait,
    )


if __name__ == "__main__":
    main()
