"""`closing_abandoned_generators` closes what a stack of async generators leaves suspended.

The stack stands for an SDK's stream: each layer iterates the one beneath without closing it, as
the a2a-sdk client's layers do. Each test checks that the innermost layer's cleanup ran before the
block ended, which is what keeps it from the garbage collector (and its `ResourceWarning`), and
that a generator some running task may still iterate is left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

import pytest
import trio
import trio.testing

from adapters._asyncgens import CLOSE_TIMEOUT, closing_abandoned_generators


class Unreadable(Exception):
    pass


def stack(closed: list[str], *, raise_at: int | None = None) -> AsyncGenerator[int, None]:
    """Three layers (source, parser, client); the parser raises at item `raise_at`."""

    async def source() -> AsyncGenerator[int, None]:
        try:
            for item in range(10):
                yield item
        finally:
            closed.append("source")

    async def parser() -> AsyncGenerator[int, None]:
        async for item in source():  # never closed by this layer
            if item == raise_at:
                raise Unreadable(item)
            yield item

    async def client() -> AsyncGenerator[int, None]:
        async for item in parser():
            yield item

    return client()


async def test_a_layer_that_raises_leaves_nothing_beneath_it_open() -> None:
    closed: list[str] = []

    async def read_all() -> None:
        async with closing_abandoned_generators():
            async for _ in stack(closed, raise_at=2):
                pass

    with pytest.raises(Unreadable):
        await read_all()
    assert closed == ["source"]


async def test_a_reader_that_stops_early_closes_every_layer() -> None:
    closed: list[str] = []
    async with closing_abandoned_generators():
        async for item in stack(closed):
            if item == 1:
                break
        assert closed == []  # the loop alone closes nothing beneath the outermost layer
    assert closed == ["source"]


async def test_a_cancelled_block_still_closes_within_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    closed: list[str] = []

    async def slow_source() -> AsyncGenerator[int, None]:
        try:
            yield 1
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)  # a close that takes time, as an HTTP response's may
            closed.append("source")

    async def client() -> AsyncGenerator[int, None]:
        async for item in slow_source():
            yield item

    with trio.CancelScope() as scope:
        async with closing_abandoned_generators():
            async for _ in client():
                scope.cancel()
                await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert closed == ["source"]


async def test_a_close_that_hangs_is_given_up_after_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hanging() -> AsyncGenerator[int, None]:
        try:
            yield 1
        finally:
            await trio.sleep_forever()  # shielded by the block's close: only the bound ends it

    start = trio.current_time()
    async with closing_abandoned_generators():
        async for _ in hanging():
            break
    assert trio.current_time() - start == pytest.approx(CLOSE_TIMEOUT)


async def test_what_a_task_started_inside_the_block_left_is_closed_once_it_ended() -> None:
    closed: list[str] = []

    async def reader() -> None:
        with contextlib.suppress(Unreadable):
            async for _ in stack(closed, raise_at=1):
                pass

    async with closing_abandoned_generators():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
        assert closed == []
    assert closed == ["source"]


async def test_a_running_tasks_generators_are_left_alone() -> None:
    closed: list[str] = []
    started = trio.Event()
    release = trio.Event()

    async def source() -> AsyncGenerator[int, None]:
        try:
            yield 1
            yield 2
        finally:
            closed.append("source")

    async def other_task() -> None:
        generator = source()
        await generator.__anext__()
        started.set()
        await release.wait()
        assert await generator.__anext__() == 2  # still open: the block did not close it
        await generator.aclose()

    async with trio.open_nursery() as nursery:
        async with closing_abandoned_generators():
            nursery.start_soon(other_task)
            await started.wait()
        assert closed == []
        release.set()
    assert closed == ["source"]
