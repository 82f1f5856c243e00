"""What `subagent-engine run` and `subagent-engine watch` share at the terminal: the exit
statuses that say how a run ended, the screen the tree of `cli._tree` is drawn on (redrawn in
place on a terminal, plain appended lines otherwise) and the text that follows the tree.

Exit status (`EXIT_*`): 0 the run finished and every subagent with it; 1 the run failed, or it
finished but a subagent failed; 2 the command line or the configuration is wrong; 3 the run was
cancelled by something other than this terminal; 130 Ctrl-C (or SIGTERM) interrupted it.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping
from typing import Final, TextIO

import attrs

from cli._tree import FAILED, RunTree, cut_to_width, redraw
from engine import Kind

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_FINISHED",
    "EXIT_INTERRUPTED",
    "PLAIN_WIDTH",
    "REDRAW_INTERVAL",
    "Screen",
    "alone",
    "ending",
    "exit_status",
    "open_screen",
]

EXIT_FINISHED: Final = 0
EXIT_FAILED: Final = 1
EXIT_CONFIG: Final = 2
EXIT_CANCELLED: Final = 3
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
#: Seconds between redraws of a terminal (the elapsed times move even without events).
REDRAW_INTERVAL: Final = 0.1

#: The width plain lines are cut to when stdout is not a terminal and COLUMNS is unset.
PLAIN_WIDTH: Final = 200


@attrs.define
class Screen:
    """Where the tree goes: redrawn in place (`live`) or appended to as plain notes. A closed
    stdout (a pipe whose reader left) ends the drawing, not the run."""

    out: TextIO
    live: bool
    colour: bool
    height: int = 0  # lines of the frame drawn last (live)
    closed: bool = False

    def size(self) -> os.terminal_size:
        return shutil.get_terminal_size((PLAIN_WIDTH, 24))

    def write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except OSError:  # BrokenPipeError and the like: nobody reads any more
            self.closed = True

    def draw(self, tree: RunTree, now: float) -> None:
        size = self.size()
        lines = tree.frame(now, size.columns - 1, colour=self.colour, height=max(1, size.lines - 1))
        self.write(redraw(self.height, lines))
        self.height = len(lines)

    def notes(self, notes: list[str]) -> None:
        if notes:
            width = self.size().columns
            self.write("".join(f"{cut_to_width(note, width)}\n" for note in notes))


def exit_status(tree: RunTree, interrupted: bool) -> int:
    """The exit status of a run that ended as `tree` shows (`interrupted`: by this terminal)."""
    if tree.outcome == Kind.RUN_FAILED:
        return EXIT_FAILED
    if tree.outcome == Kind.RUN_FINISHED:
        # A parent may answer after a subagent failed; the status still says one did.
        failed = any(node.status == FAILED for node in tree.subagents())
        return EXIT_FAILED if failed else EXIT_FINISHED
    return EXIT_INTERRUPTED if interrupted else EXIT_CANCELLED


def ending(tree: RunTree) -> str:
    """What follows the tree: the result text, or how the run ended and why."""
    if tree.outcome == Kind.RUN_FINISHED:
        return f"\n{tree.result_text}\n" if tree.result_text else "\n(the run finished)\n"
    how = "failed" if tree.outcome == Kind.RUN_FAILED else "was cancelled"
    why = f": {tree.error}" if tree.error else ""
    return f"\nThe run {how}{why}\n"


def open_screen(out: TextIO, environ: Mapping[str, str], force_tty: bool | None) -> Screen:
    """The screen for `out`: redrawn in place on a terminal (`force_tty` overrides the check),
    plain appended lines otherwise, and when `NO_COLOR` is set and not empty (no-color.org) or
    `TERM=dumb`. A live screen hides the cursor while the tree is redrawn."""
    tty = out.isatty() if force_tty is None else force_tty
    plain = not tty or bool(environ.get("NO_COLOR")) or environ.get("TERM") == "dumb"
    screen = Screen(out=out, live=not plain, colour=not plain)
    if screen.live:
        screen.write("\x1b[?25l")
    return screen


def alone(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (what Trio's nurseries wrap an
    error in), else `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
