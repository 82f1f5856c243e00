"""`a2a-serve` whose scripted parent delegates to every agent of its host (tests only).

Run it in its own process::

    python -m tools.peers.a2a_serve_delegating --config host.toml --port 0 [--watch-stdin]

It is `subagent-engine a2a-serve --parent scripted --config host.toml` (`cli.a2a_serve`: the
same options, engine, MCP endpoint, A2A server and card) with one difference: each task's
scripted parent calls `delegate_to_agent` once for every `[[agents]]` entry of the host, all at
once, with the task's text as the objective, then answers with one line per result
(`adapters.parents.ScriptedParent`'s `Answer`). The demo's scripts (`--script`) never delegate
to the host's agents; this lets a test put a real engine run, with delegations of its own
(questions included), behind a real a2a-serve. It binds 127.0.0.1, prints `READY <port>` then
the card's URL, and with `--watch-stdin` exits when its stdin closes.
"""

from __future__ import annotations

import argparse
import sys

import attrs

from adapters.a2a.serving import Listening
from adapters.parents import Answer, Delegate, Say, ScriptedParent
from cli.a2a_serve import A2AServeOptions, serve_until_stopped
from web.config import load_config
from web.telemetry import process_tracing

__all__ = ["delegating_script", "main"]


def delegating_script(agent_keys: list[str]) -> tuple[Say | Delegate | Answer, ...]:
    """Say what it does, delegate the task to every agent at once, answer with the results."""
    calls = tuple({"agent": key, "objective": "{prompt}"} for key in agent_keys)
    return (Say(("Asking ", ", ".join(agent_keys), ".")), Delegate(calls), Answer())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.peers.a2a_serve_delegating")
    parser.add_argument("--config", required=True, help="the host TOML ([[agents]])")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--watch-stdin", action="store_true")
    parser.add_argument("--ask-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    keys = [agent.key for agent in config.agents]
    if not keys:
        print("the host configures no [[agents]] to delegate to", file=sys.stderr)
        return 2
    options = A2AServeOptions(
        parent="scripted",
        config=config,
        name="delegating scripted parent",
        ask_timeout=args.ask_timeout,
        listening=Listening(port=args.port, watch_stdin=args.watch_stdin),
    )
    script = delegating_script(keys)
    with process_tracing(config.telemetry) as provider:  # the host's [telemetry], if any
        options = attrs.evolve(options, tracer_provider=provider)
        served = attrs.evolve(options.served(), make_parent=lambda: ScriptedParent(script))
        return serve_until_stopped(served, None)


if __name__ == "__main__":
    sys.exit(main())
