"""`subagent-engine serve` on embedded defaults, paced for a browser to watch (tests only).

    python -m tests.browser.serve_demo [--pause SECONDS] [--replay-window EVENTS] [--asking]

The same composition as `web.serve` (the two in-process demo agents, the scripted parent over the
real MCP endpoint, the default wire encoder, the packaged page loaded the way `serve` loads it),
except that the demo agents pause `--pause` seconds between chunks so that a run lasts long
enough to click Stop or force a reconnect in the middle of it, and `--replay-window` can shrink
the journal's replay window so that a late viewer gets a gap marker, and `--asking` swaps the
research agent for one that asks the viewer a question (`asking_agents`). Binds 127.0.0.1 on an
ephemeral port, prints `READY <port>` once it listens, and exits when its stdin closes.
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit

import trio

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from engine import AgentSpec, DelegationPolicy, InputRequiredMode
from web.config import parse_config
from web.demo import demo_agents
from web.serve import _page
from web.server import create_app, default_encoder_factory, open_host, serve_app

QUESTION = "Which year?"
BEFORE_ASKING = "I need one detail first."


def asking_agents(pause: float) -> list[AgentSpec]:
    """The demo agents, the research one replaced by an agent of the same key and name that says
    something, asks `QUESTION` (surfaced to the viewer: `InputRequiredMode.SURFACE`), waits for the
    answer, then streams `Checked the sources for <answer>.` word by word, `pause` s apart."""
    research, review = demo_agents(pause=pause)

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


async def serve(pause: float, replay_window: int | None, asking: bool) -> None:
    page = _page()
    if page is None:
        raise SystemExit("web/static/index.html is not packaged with the web package")
    limits = f"[limits]\nreplay_window_events = {replay_window}\n" if replay_window else ""
    config = parse_config(limits, "<browser tests>")
    agents = asking_agents(pause) if asking else demo_agents(pause=pause)
    async with open_host(config, agents, ScriptedParent) as (host, _):
        app = create_app(host, config, default_encoder_factory(), page=page)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            sys.stdout.write(f"READY {urlsplit(url).port}\n")
            sys.stdout.flush()
            # Until the parent closes our stdin (or dies): then every run is cancelled.
            await trio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--replay-window", type=int, default=None)
    parser.add_argument("--asking", action="store_true")
    args = parser.parse_args()
    trio.run(serve, args.pause, args.replay_window, args.asking)


if __name__ == "__main__":
    main()
