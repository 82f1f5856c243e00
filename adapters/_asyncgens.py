"""Closing the async generators an SDK's stream leaves suspended, here and now (adapters only).

The a2a-sdk client streams through a stack of async generators (its client, its transport, its
SSE reader, then httpx's and httpcore's byte streams), and no layer closes the one beneath it;
the mcp client's transport reads its SSE streams through httpx2's the same way, in tasks of its
own. When a layer raises (an unreadable event, an error answer where a stream was expected) or
the reader stops early and closes the outermost, each generator beneath is left suspended at its
`yield`; Python finalizes such a generator when it is garbage collected (PEP 525,
https://peps.python.org/pep-0525/#finalization), which under Trio means a `ResourceWarning` and a
close in a system task at some later moment, the HTTP response held open until then.

`closing_abandoned_generators()` closes them when the block ends instead. Inside it, every async
generator that the block's task, or a task it started inside the block, iterates for the first
time is remembered (through the interpreter's `firstiter` hook, `sys.set_asyncgen_hooks`, which
then calls the hook it wraps: Trio's). On leaving, those not exhausted are closed, innermost
first, in a shielded scope bounded by `CLOSE_TIMEOUT`: a cancelled delegation still releases its
connection, and never waits longer than that for it. A generator of a task still running is left
alone (that task may iterate it again). The hook is installed once per Trio run and does nothing
outside a block.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Final

import trio

__all__ = ["CLOSE_TIMEOUT", "closing_abandoned_generators"]

#: Seconds the closes at the end of a block may take together; what is still open by then is
#: left to the garbage collector.
CLOSE_TIMEOUT: Final = 2.0

_Generator = AsyncGenerator[Any, Any]


class _Block:
    """One block: its task, and each generator first iterated inside it with the task that did."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.started: list[tuple[trio.lowlevel.Task, _Generator]] = []

    def owns(self, task: trio.lowlevel.Task) -> bool:
        """Whether `task` is the block's task or descends from it."""
        current: trio.lowlevel.Task | None = task
        while current is not None:
            if current is self.task:
                return True
            nursery = current.parent_nursery
            current = nursery.parent_task if nursery is not None else None
        return False


#: The innermost block of the running task (tasks started inside a block inherit it).
_block: ContextVar[_Block | None] = ContextVar("_block", default=None)


class _RememberingFirstIter:
    """A `firstiter` hook: tells the running task's block about the generator, then calls the
    hook it replaced."""

    def __init__(self, wrapped: Callable[[_Generator], object] | None) -> None:
        self.wrapped = wrapped

    def __call__(self, generator: _Generator) -> None:
        block = _block.get()
        if block is not None:
            task = trio.lowlevel.current_task()
            # A task started elsewhere inherits the variable too, if it was started from within.
            if block.owns(task):
                block.started.append((task, generator))
        if self.wrapped is not None:
            self.wrapped(generator)


def _install_hook() -> None:
    # Trio installs its hooks when a run starts and puts the previous ones back when it ends,
    # taking this wrapper with them: each run gets its own.
    firstiter = sys.get_asyncgen_hooks().firstiter
    if not isinstance(firstiter, _RememberingFirstIter):
        sys.set_asyncgen_hooks(firstiter=_RememberingFirstIter(firstiter))


def _ended(task: trio.lowlevel.Task) -> bool:
    # A finished coroutine has no frame left; an unknown kind of coroutine counts as running.
    return getattr(task.coro, "cr_frame", True) is None


def _abandoned(block: _Block) -> list[_Generator]:
    """The block's unexhausted generators nobody can iterate any more, innermost first (a layer
    is iterated for the first time after the layer above it)."""
    return [
        generator
        for task, generator in reversed(block.started)
        if getattr(generator, "ag_frame", None) is not None  # a finished one has no frame
        and (task is block.task or _ended(task))
    ]


@contextlib.asynccontextmanager
async def closing_abandoned_generators() -> AsyncIterator[None]:
    """Close, when the block ends, the async generators iterated first inside it (by this task
    or a task started inside it that has ended) and left unexhausted; innermost first, shielded,
    within `CLOSE_TIMEOUT`."""
    _install_hook()
    block = _Block(trio.lowlevel.current_task())
    token = _block.set(block)
    try:
        yield
    finally:
        _block.reset(token)
        left = _abandoned(block)
        block.started.clear()
        if left:
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                for generator in left:
                    # What a layer raises while it closes is the SDK's own cleanup failing; the
                    # block's outcome is already decided.
                    with contextlib.suppress(Exception):
                        await generator.aclose()
