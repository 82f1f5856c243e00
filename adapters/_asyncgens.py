"""Closing the async generators an SDK's stream leaves suspended, here and now (adapters only).

The a2a-sdk client streams through a stack of async generators (its client, its transport, its
SSE reader, then httpx's and httpcore's byte streams), and no layer closes the one beneath it.
When a layer raises (an unreadable event, an error answer where a stream was expected) or the
reader stops early and closes the outermost, each generator beneath is left suspended at its
`yield`; Python finalizes such a generator when it is garbage collected (PEP 525,
https://peps.python.org/pep-0525/#finalization), which under Trio means a `ResourceWarning` and a
close in a system task at some later moment, the HTTP response held open until then.

`closing_abandoned_generators()` closes them when the block ends instead. Inside it, every async
generator the current task iterates for the first time is remembered (through the interpreter's
`firstiter` hook, `sys.set_asyncgen_hooks`, which then calls the hook it wraps: Trio's); on
leaving, those not exhausted are closed, innermost first, in a shielded scope bounded by
`CLOSE_TIMEOUT`: a cancelled delegation still releases its connection, and never waits longer
than that for it. The hook is installed once per event loop and does nothing outside a block.
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

#: The task a block runs in, and the generators it first iterated inside the block.
_collecting: ContextVar[tuple[trio.lowlevel.Task, list[_Generator]] | None] = ContextVar(
    "_collecting", default=None
)


class _RememberingFirstIter:
    """A `firstiter` hook: remembers the generator for the block of the task iterating it, then
    calls the hook it replaced."""

    def __init__(self, wrapped: Callable[[_Generator], object] | None) -> None:
        self.wrapped = wrapped

    def __call__(self, generator: _Generator) -> None:
        collecting = _collecting.get()
        if collecting is not None:
            task, generators = collecting
            # Tasks spawned inside the block inherit the variable; their generators are theirs.
            if trio.lowlevel.current_task() is task:
                generators.append(generator)
        if self.wrapped is not None:
            self.wrapped(generator)


def _install_hook() -> None:
    # Trio installs its hooks when a run starts and puts the previous ones back when it ends,
    # taking this wrapper with them: each run gets its own.
    firstiter = sys.get_asyncgen_hooks().firstiter
    if not isinstance(firstiter, _RememberingFirstIter):
        sys.set_asyncgen_hooks(firstiter=_RememberingFirstIter(firstiter))


@contextlib.asynccontextmanager
async def closing_abandoned_generators() -> AsyncIterator[None]:
    """Close, when the block ends, every async generator this task first iterated inside it and
    left unexhausted (innermost first; shielded, within `CLOSE_TIMEOUT`)."""
    _install_hook()
    generators: list[_Generator] = []
    token = _collecting.set((trio.lowlevel.current_task(), generators))
    try:
        yield
    finally:
        _collecting.reset(token)
        # Innermost first: a layer is iterated for the first time after the layer above it. A
        # finished generator has no frame left.
        left = [g for g in reversed(generators) if getattr(g, "ag_frame", None) is not None]
        generators.clear()
        if left:
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                for generator in left:
                    # What a layer raises while it closes is the SDK's own cleanup failing; the
                    # block's outcome is already decided.
                    with contextlib.suppress(Exception):
                        await generator.aclose()
