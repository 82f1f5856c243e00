"""Waiting for new journal entries of many runs on one connection: `JournalFollower`.

Each `wait` registers a small waiter (its stream, the cursor it waits after, its deadline);
one follower task does a single blocking XREAD over every stream being waited on (XREAD takes
many streams, each after its own id), on a connection of its own, and wakes the waiters of the
streams that got entries. So any number of idle viewers hold one connection, not one each, and
never wait for a connection of the archive's pool.

A waiter that arrives needing what the XREAD in flight does not cover (another stream, an
older cursor, an earlier deadline) ends that XREAD early with CLIENT UNBLOCK (sent on another
connection), and the next one covers it. Each XREAD blocks until the earliest waiter's
deadline at most, so every round is an answer from Redis: a waiter whose deadline passed
returns False once Redis answered since it began, and raises `ArchiveUnavailableError` when
Redis gave no answer within its `within` plus the call timeout (Redis down or frozen).

The follower task runs while there are waiters and ends when there are none (the next waiter
starts it again). Cancelling a `wait` removes its waiter; the follower goes on for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Final

import coredis
import trio
from coredis.tokens import PureToken

from adapters.redis_archive._errors import ArchiveError, ArchiveUnavailableError

__all__ = ["JournalFollower"]

#: The shortest block of a round: waiters whose deadlines fall this close together are answered
#: by one round (seconds).
_SHORTEST_BLOCK: Final = 0.05
#: The longest block of a round (seconds), whatever the deadlines.
_LONGEST_BLOCK: Final = 60.0
#: How soon an unblock that reached the follower's connection before its XREAD is sent again.
_UNBLOCK_AGAIN: Final = 0.01


class _Waiter:
    __slots__ = ("after", "answered", "deadline", "error", "event", "found", "stream")

    def __init__(self, stream: str, after: int, deadline: float) -> None:
        self.stream = stream
        self.after = after
        self.deadline = deadline
        self.event = trio.Event()
        #: Redis answered a round of the follower since this waiter began.
        self.answered = False
        self.found = False
        self.error: ArchiveError | None = None


class JournalFollower:
    """The waiters on one archive's journal streams and the task that follows them (see the
    module docstring)."""

    def __init__(
        self,
        *,
        follower: coredis.Redis[str],
        client: coredis.Redis[str],
        nursery: trio.Nursery,
        bounded: Callable[[str, float], AbstractContextManager[None]],
        timeout: float,
    ) -> None:
        self._follower = follower  # one connection: the follower's XREADs
        self._client = client  # the archive's pool: CLIENT UNBLOCK
        self._nursery = nursery
        self._bounded = bounded
        self.timeout = timeout
        self._waiters: set[_Waiter] = set()
        self._running = False
        #: The round in flight: the streams it covers (after which cursor), when it ends, the
        #: follower connection's client id once known, and whether it must end early.
        self._covered: dict[str, int] = {}
        self._round_ends = 0.0
        self._client_id: int | None = None
        self._stale = False
        self._unblocking = False

    def waiting(self) -> int:
        """How many waiters there are now."""
        return len(self._waiters)

    async def wait(self, stream: str, after: int, within: float, what: str) -> bool:
        """True once `stream` holds an entry after cursor `after`, False when `within` seconds
        passed first (and Redis answered meanwhile); `ArchiveUnavailableError` if Redis did
        not answer within `within` plus the call timeout."""
        waiter = _Waiter(stream, after, trio.current_time() + within)
        self._waiters.add(waiter)
        try:
            self._arrive(waiter)
            with trio.move_on_at(waiter.deadline):
                await waiter.event.wait()
            if not waiter.event.is_set() and not waiter.answered:
                # No answer yet: the round in flight ends by this deadline; give it the call
                # timeout to answer before calling Redis unavailable.
                with trio.move_on_after(self.timeout):
                    await waiter.event.wait()
                if not waiter.event.is_set() and not waiter.answered:
                    raise ArchiveUnavailableError(
                        f"{what}: no answer from Redis within {within + self.timeout:g} s"
                    )
            if waiter.error is not None:
                raise ArchiveUnavailableError(f"{what}: {waiter.error}") from waiter.error
            return waiter.found
        finally:
            self._waiters.discard(waiter)

    def _arrive(self, waiter: _Waiter) -> None:
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._follow, name="redis journal follower")
            return
        covered = self._covered.get(waiter.stream)
        if (
            covered is None
            or waiter.after < covered
            or waiter.deadline < self._round_ends - _SHORTEST_BLOCK
        ):
            self._stale = True
            if not self._unblocking:
                self._unblocking = True
                self._nursery.start_soon(self._unblock, name="redis journal follower unblock")

    async def _follow(self) -> None:
        try:
            while self._waiters:
                await self._round()
        except Exception as exc:
            error = exc if isinstance(exc, ArchiveError) else ArchiveError(repr(exc))
            for waiter in self._waiters:
                waiter.error = error
                waiter.event.set()
        finally:
            self._running = False
            self._covered = {}

    async def _round(self) -> None:
        now = trio.current_time()
        covered: dict[str, int] = {}
        for waiter in self._waiters:
            covered[waiter.stream] = min(covered.get(waiter.stream, waiter.after), waiter.after)
        earliest = min(waiter.deadline for waiter in self._waiters)
        block = min(max(earliest - now, _SHORTEST_BLOCK), _LONGEST_BLOCK)
        self._covered, self._round_ends = covered, now + block
        self._stale, self._client_id = False, None
        found: Any = None
        with self._bounded("following journals", block + self.timeout):
            self._client_id = await self._follower.client_id()
            if not self._stale:
                found = await self._follower.xread(
                    {stream: f"{after}-0" for stream, after in covered.items()},
                    count=1,
                    block=max(1, round(block * 1000)),
                )
        self._client_id = None
        first_new = dict(_first_cursors(found))
        now = trio.current_time()
        for waiter in self._waiters:
            waiter.answered = True
            cursor = first_new.get(waiter.stream)
            if cursor is not None and waiter.after < cursor:
                waiter.found = True
                waiter.event.set()
            elif waiter.deadline <= now:
                waiter.event.set()

    async def _unblock(self) -> None:
        """End the XREAD in flight early (it returns as if it timed out)."""
        try:
            while self._stale and self._running:
                client_id = self._client_id
                if client_id is not None:
                    with self._bounded("waking the journal follower", self.timeout):
                        if await self._client.client_unblock(client_id, PureToken.TIMEOUT):
                            return
                # Not blocked yet (its XREAD is on the way): try again in a moment.
                await trio.sleep(_UNBLOCK_AGAIN)
        except ArchiveError:
            return  # the follower's own call fails and tells its waiters
        finally:
            self._unblocking = False


def _first_cursors(found: Any) -> Iterator[tuple[str, int]]:
    """(stream, cursor of its first new entry) of an XREAD reply."""
    for stream, entries in (found or {}).items():
        if entries:
            identifier = str(entries[0].identifier)
            cursor = identifier.partition("-")[0]
            if cursor.isdigit():
                yield str(stream), int(cursor)
