"""`subagent-engine run`: one run in the terminal, its subagents drawn live as a tree.

This module owns the terminal side of a one-shot run: read the host configuration like `serve`
(the same checks, exit 2 before anything starts), start the engine, its MCP endpoint and the
parent (`--parent` overrides `[parent] kind`; a CLI parent takes its model settings from
`[parent]`), run the prompt once and draw its events with `cli._tree.RunTree`. The tree's
model and lines are that module's; here is only the I/O: on a terminal (stdout a TTY, or
`force_tty`) the tree is redrawn in place about ten times a second with
ANSI cursor movement and colours; otherwise (a pipe, a file, `NO_COLOR` set and not empty,
`TERM=dumb`) each change is one appended plain line, with no escape sequence at all. Then the
run's result text (or its error), and an exit status saying how the run ended.

Runs are kept in memory only (a one-shot run leaves nothing in `[store]`). With no `[[agents]]`
it delegates to the two in-process demo agents, as `serve` does.

Exit status (`EXIT_*`): 0 the run finished and every subagent with it; 1 the run failed (its
error is printed), or it finished but a subagent failed (the answer is printed); 2 the command
line or the configuration is wrong, or the run could not start; 3 the run was cancelled by
something other than this terminal; 130 Ctrl-C (or SIGTERM) interrupted it: the run was
cancelled, its remote tasks too, and its end drawn before the command exits. A second Ctrl-C
exits at once (`web.server.force_exit`, 128 + the signal).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from typing import Final, TextIO

import attrs
import trio

from adapters.parents import parent_kind, parent_kinds_text
from cli._terminal import (
    EXIT_CANCELLED,
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_INTERRUPTED,
    REDRAW_INTERVAL,
    Screen,
    alone,
    ending,
    exit_status,
    open_screen,
)
from cli._tree import RunTree
from demo.agents import demo_agents
from engine import TargetPrepareError
from web.config import ConfigError, HostConfig, StoreEntry, load_config, parse_config
from web.server import HttpError, force_exit, open_host

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_FINISHED",
    "EXIT_INTERRUPTED",
    "run_main",
]

#: The reason a run interrupted from the terminal is cancelled with.
INTERRUPTED_REASON: Final = "Interrupted from the terminal (Ctrl-C)."
#: How long the run gets to end after Ctrl-C before the command stops waiting for it.
CANCEL_GRACE: Final = 10.0

_PROG: Final = "subagent-engine run"


def _load(config_path: str | None, parent: str | None) -> HostConfig:
    config = load_config(config_path) if config_path else parse_config("", "<embedded>")
    if parent is not None:
        try:
            kind = parent_kind(parent)
        except ValueError:
            raise ConfigError(
                "--parent", None, "--parent", f"{parent!r}: use one of {parent_kinds_text()}"
            ) from None
        config = attrs.evolve(config, parent=attrs.evolve(config.parent, kind=kind))
    return attrs.evolve(config, store=StoreEntry())


async def _run_once(config: HostConfig, prompt: str, screen: Screen, err: TextIO) -> int:
    agents = config.agent_specs() if config.agents else demo_agents()
    parent_factory = config.parent_factory()
    tree = RunTree(f"parent ({config.parent.kind})", now=trio.current_time())
    interrupted = False
    forced = 0
    with (
        trio.CancelScope() as everything,
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
    ):
        async with open_host(config, agents, parent_factory) as (host, _):
            try:
                hosted = await host.start(prompt, thread_id=None, agui_run_id=None, mode=None)
            except HttpError as exc:
                print(f"{_PROG}: the run could not start: {exc}", file=err)
                return EXIT_CONFIG
            run = hosted.run
            assert run is not None  # `start` raised otherwise
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    nonlocal interrupted, forced
                    async for signum in signals:
                        if interrupted:  # a second signal: stop waiting for the run
                            forced = force_exit(everything, signum, err)
                            return
                        interrupted = True
                        print(f"{_PROG}: cancelling the run", file=err, flush=True)
                        host.stop(hosted, INTERRUPTED_REASON)

                async def tick() -> None:
                    while True:
                        screen.draw(tree, trio.current_time())
                        await trio.sleep(REDRAW_INTERVAL)

                nursery.start_soon(watch_signals)
                if screen.live:
                    nursery.start_soon(tick)
                async with run.events() as events:
                    async for entry in events:
                        notes = tree.apply(entry.event, trio.current_time())
                        if not screen.live:
                            screen.notes(notes)
                if screen.live:
                    screen.draw(tree, trio.current_time())
                nursery.cancel_scope.cancel()
            with trio.move_on_after(CANCEL_GRACE):
                await hosted.ended.wait()
    if forced:
        return forced
    screen.write(ending(tree))
    return exit_status(tree, interrupted)


def run_main(
    prompt: str,
    *,
    config_path: str | None = None,
    parent: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    force_tty: bool | None = None,
) -> int:
    """`subagent-engine run`: the exit status (see the module's docstring)."""
    out = out or sys.stdout
    err = err or sys.stderr
    env = os.environ if environ is None else environ
    if not prompt.strip():
        print(f"{_PROG}: the prompt is empty", file=err)
        return EXIT_CONFIG
    try:
        config = _load(config_path, parent)
        config.parent_factory()  # the CLI found
        config.check_parent()  # its key variable set, its model endpoint answering
        if config.agents:
            config.agent_specs()  # credentials set
    except ConfigError as exc:
        print(f"{_PROG}: {exc}", file=err)
        return EXIT_CONFIG
    screen = open_screen(out, env, force_tty)
    try:
        return trio.run(_run_once, config, prompt, screen, err)
    except BaseException as exc:
        refused = alone(exc)
        if isinstance(refused, TargetPrepareError):
            for key, error in refused.failures.items():
                print(f"{_PROG}: {config.agent_error(key, f'cannot be used: {error}')}", file=err)
            return EXIT_CONFIG
        raise
    finally:
        if screen.live:
            screen.write("\x1b[?25h")
