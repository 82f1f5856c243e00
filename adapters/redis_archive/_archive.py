"""The Redis run archive: `engine.RunArchive` on Redis Streams, with coredis under Trio.

This module moves bytes: `_layout` decides what is kept where (and how a journal's window
evicts and retains), `_scripts` holds the atomic writes. Every call to Redis is bounded by the
archive's `timeout`; a Redis that refuses, resets or does not answer in time surfaces as
`ArchiveUnavailableError`, and the next call connects again (coredis's pool reconnects).

Reads fail at once: a viewer gets a clear error, not a hang. Writes that lose nothing when
repeated (journal appends, results, a run's end) ride out an outage instead: the same write is
sent again, with backoff, until Redis takes it, or until Redis has been unavailable for
`outage_budget` seconds, or until the bytes of the journal batches waiting this way would pass
`max_buffer_bytes`; then the write raises `ArchiveUnavailableError`. A waiting append holds its
run's writer, so the engine's run waits behind its bounded mailbox: memory stays bounded and
nothing is dropped. An append sent again continues the same expected head, and the append
script recognises a batch that already landed (its reply lost with the connection), so a retry
never writes an entry twice.

Cancelling a call cancels its wait; a write already sent may still land, so after a failed or
cancelled append the journal's state is read back from Redis before the next one.

Writes of one run (journal appends, results) go through one lock per run in this process, so
the audit records they fold are written in the order they were folded. A run's cached state
(its window, its audit trail) is dropped when the run is closed, or when a write failed.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final, TypeVar, cast

import anyio
import attrs
import coredis
import coredis.exceptions
import trio
from coredis.response.types import StreamEntry
from coredis.tokens import PureToken

from adapters.redis_archive import _scripts
from adapters.redis_archive._errors import (
    ArchiveConflictError,
    ArchiveDataError,
    ArchiveError,
    ArchiveUnavailableError,
)
from adapters.redis_archive._follower import JournalFollower
from adapters.redis_archive._layout import (
    FORMAT_NAME,
    STATE_FIELDS,
    VERSION_TEXT,
    JournalWindow,
    KeySpace,
    check_meta,
    decode_audit,
    decode_entry,
    decode_record,
    encode_audit,
    encode_record,
    entry_id,
)
from engine import (
    DelegationAudit,
    DelegationAudits,
    DelegationResult,
    JournalEntry,
    JournalStore,
    RetentionPolicy,
    RunRecord,
    WireError,
    replay_before_window,
    result_from_json,
    to_json,
)

__all__ = ["OutageStatistics", "RedisJournalStore", "RedisRunArchive", "open_redis_archive"]

log = logging.getLogger(__name__)

_Record = TypeVar("_Record")
_Result = TypeVar("_Result")

#: The first wait before a write Redis failed is sent again; each next wait doubles, up to the
#: longest.
_FIRST_RETRY_DELAY: Final = 0.05
_LONGEST_RETRY_DELAY: Final = 1.0

#: Keys SCAN looks at per call when checking that a namespace without a marker is empty.
_SCAN_COUNT: Final = 1000

#: What a connection that broke looks like, from coredis, the socket or anyio's streams.
_UNAVAILABLE: Final = (
    coredis.exceptions.ConnectionError,
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


@attrs.frozen
class OutageStatistics:
    """How the archive's writes rode out Redis outages, since it was opened."""

    #: Writes sent again after Redis failed them.
    retries: int
    #: Appends sent again whose batch Redis already held (the reply was lost, not the write).
    landed_before: int
    #: Writes that raised `ArchiveUnavailableError` after waiting as long as they may.
    given_up: int
    #: The weight of the journal batches waiting for Redis now.
    waiting_bytes: int


class _RunState:
    """This process's cache of one run's write state (see the module docstring)."""

    __slots__ = ("audits", "lock", "window")

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.window: JournalWindow | None = None
        self.audits: DelegationAudits | None = None


class RedisRunArchive:
    """`engine.SharedRunArchive` in Redis (see the package docstring): the run archive of
    every node sharing the Redis, their leases and their command queues. Made by
    `open_redis_archive`, usable while it is open."""

    def __init__(
        self,
        client: coredis.Redis[str],
        keys: KeySpace,
        *,
        node: str,
        timeout: float,
        lease_seconds: float,
        max_commands: int,
        outage_budget: float = 30.0,
        max_buffer_bytes: int = 64 << 20,
    ) -> None:
        self.node = node
        self.keys = keys
        self.timeout = timeout
        #: How long writes wait for a Redis that is unavailable before they fail.
        self.outage_budget = outage_budget
        #: How many bytes of journal batches may wait for Redis at once (their weights).
        self.max_buffer_bytes = max_buffer_bytes
        #: When the current outage began (Trio's clock): the first failure since the last
        #: call that Redis answered. None while Redis answers.
        self._outage_since: float | None = None
        self._waiting_bytes = 0
        self._retries = self._landed_before = self._given_up = 0
        #: How long this node's lease lasts unless renewed.
        self.lease_seconds = lease_seconds
        #: How many commands a node's queue keeps (the oldest are dropped first).
        self.max_commands = max_commands
        self._client = client
        self._runs: dict[str, _RunState] = {}
        self._append = client.register_script(_scripts.APPEND)
        self._record_results = client.register_script(_scripts.RECORD_RESULTS)
        self._open_run = client.register_script(_scripts.OPEN_RUN)
        self._claim = client.register_script(_scripts.CLAIM_NAMESPACE)
        self._queue_command = client.register_script(_scripts.QUEUE_COMMAND)
        self._renew_lease = client.register_script(_scripts.RENEW_LEASE)
        self._claim_node = client.register_script(_scripts.CLAIM_NODE)
        #: Set by `open_redis_archive`: the waiters of `wait_entries` and their follower.
        self.follower: JournalFollower | None = None

    # -- calls to Redis ------------------------------------------------------------------

    @contextmanager
    def _bounded(self, what: str, timeout: float | None = None) -> Iterator[None]:
        """Run a call to Redis within the timeout, its failures as `ArchiveError`s."""
        limit = self.timeout if timeout is None else timeout
        try:
            with trio.fail_after(limit):
                yield
            self._outage_since = None
        except ArchiveError:
            raise
        except trio.TooSlowError:
            raise ArchiveUnavailableError(
                f"{what}: no answer from Redis within {limit:g} s"
            ) from None
        except _UNAVAILABLE as exc:
            raise ArchiveUnavailableError(f"{what}: Redis is unavailable: {exc}") from exc
        except coredis.exceptions.RedisError as exc:
            raise ArchiveError(f"{what}: Redis answered an error: {exc}") from exc

    async def _riding_out(
        self, what: str, weight: int, write: Callable[[], Awaitable[_Result]]
    ) -> _Result:
        """`write()` (one call to Redis, safe to repeat), sent again with backoff while Redis
        is unavailable (see the module docstring). `weight`: what the write holds in memory
        while it waits, counted against `max_buffer_bytes`. Raises `ArchiveUnavailableError`
        once it may wait no longer."""
        delay = _FIRST_RETRY_DELAY
        limit = self.timeout
        waiting = False
        try:
            while True:
                tried_at = trio.current_time()
                try:
                    with self._bounded(what, limit):
                        return await write()
                except ArchiveUnavailableError as exc:
                    failure = exc
                cause = str(failure).removeprefix(f"{what}: ")
                now = trio.current_time()
                if self._outage_since is None:
                    self._outage_since = tried_at
                if not waiting:
                    if self._waiting_bytes + weight > self.max_buffer_bytes:
                        self._given_up += 1
                        raise ArchiveUnavailableError(
                            f"{what}: Redis is unavailable and the writes waiting for it hold "
                            f"{self._waiting_bytes} bytes; {weight} more would pass "
                            f"max_buffer_bytes ({self.max_buffer_bytes}): {cause}"
                        ) from failure
                    waiting = True
                    self._waiting_bytes += weight
                give_up_at = self._outage_since + self.outage_budget
                if now >= give_up_at:
                    self._given_up += 1
                    raise ArchiveUnavailableError(
                        f"{what}: Redis has been unavailable for {now - self._outage_since:.1f} "
                        f"s, longer than the outage budget ({self.outage_budget:g} s): {cause}"
                    ) from failure
                await trio.sleep(min(delay, give_up_at - now))
                delay = min(2 * delay, _LONGEST_RETRY_DELAY)
                # The last try ends with the budget (but is given a moment if the budget ran
                # out while sleeping: Redis may be back).
                limit = min(self.timeout, max(give_up_at - trio.current_time(), delay))
                self._retries += 1
        finally:
            if waiting:
                self._waiting_bytes -= weight

    def statistics(self) -> OutageStatistics:
        """How writes rode out outages so far (see `OutageStatistics`)."""
        return OutageStatistics(
            retries=self._retries,
            landed_before=self._landed_before,
            given_up=self._given_up,
            waiting_bytes=self._waiting_bytes,
        )

    async def _check_namespace(self) -> None:
        """Refuse a namespace that is not ours; mark an empty one as ours.

        Race-free against nodes opening the same empty namespace at once: the scan for other
        keys ignores the marker itself, and when it finds keys the marker is read again (a node
        that claimed the namespace meanwhile wrote it before any other key, and every write
        script writes it too), so a namespace is refused only if it holds keys and still no
        marker."""
        keys = self.keys
        with self._bounded("opening the archive"):
            meta = await self._client.hgetall(keys.meta)
            if not meta:
                if await self._any_key_but_meta():
                    meta = await self._client.hgetall(keys.meta)
                else:
                    claimed: Any = await self._claim(
                        keys=[keys.meta], args=[FORMAT_NAME, VERSION_TEXT]
                    )
                    meta = _pairs(claimed)
        check_meta(meta, namespace_has_keys=True)

    async def _any_key_but_meta(self) -> bool:
        cursor = 0
        while True:
            cursor, found = await self._client.scan(
                cursor, match=self.keys.pattern, count=_SCAN_COUNT
            )
            if any(key != self.keys.meta for key in found):
                return True
            if cursor == 0:
                return False

    def _state(self, run_id: str) -> _RunState:
        state = self._runs.get(run_id)
        if state is None:
            state = self._runs[run_id] = _RunState()
        return state

    async def _load_audits(self, run_id: str, state: _RunState) -> DelegationAudits:
        if state.audits is None:
            records = await self._read_ordered(self.keys.audits(run_id), decode_audit)
            record = await self.run(run_id)
            thread_id = record.thread_id if record is not None else None
            state.audits = DelegationAudits(run_id, thread_id, records=records)
        return state.audits

    async def _load_window(self, run_id: str, state: _RunState) -> JournalWindow:
        if state.window is None:
            fields = await self._client.hmget(self.keys.run(run_id), list(STATE_FIELDS))
            first = fields[1] if fields[1] is not None else "1"
            if not first.isdigit():
                raise ArchiveDataError(f"run {run_id}: malformed window start {first!r}")
            entries = await self._client.xrange(
                self.keys.journal(run_id), entry_id(int(first)), "+"
            )
            state.window = JournalWindow.load(list(fields), _stream_entries(entries))
        return state.window

    async def _read_ordered(
        self, keys: tuple[str, str], decode: Callable[[str], _Record]
    ) -> list[_Record]:
        hash_key, order_key = keys
        async with self._client.pipeline(transaction=True) as pipe:
            order = pipe.zrange(order_key, 0, -1)
            values = pipe.hgetall(hash_key)
        by_id = await values
        return [decode(by_id[name]) for name in await order if name in by_id]

    # -- the journal -----------------------------------------------------------------------

    def journal_store(self, run_id: str, policy: RetentionPolicy) -> JournalStore:
        return RedisJournalStore(self, run_id, policy)

    async def _append_entries(
        self, run_id: str, entries: Sequence[JournalEntry], policy: RetentionPolicy
    ) -> None:
        if not entries:
            return
        state = self._state(run_id)
        planned: list[list[str | int]] = []  # the script's arguments, once planned

        async def write() -> None:
            # Planned once: the same batch, continuing the same head, is sent on every try.
            if not planned:
                planned.append(await self._plan_append(run_id, state, entries, policy))
            await self._send_append(run_id, planned[0])

        async with state.lock:
            weight = sum(entry.weight for entry in entries)
            try:
                await self._riding_out(f"appending to run {run_id}", weight, write)
            except BaseException:
                # What reached Redis is unknown: read the state back before the next write.
                state.window = state.audits = None
                raise

    async def _plan_append(
        self,
        run_id: str,
        state: _RunState,
        entries: Sequence[JournalEntry],
        policy: RetentionPolicy,
    ) -> list[str | int]:
        """The APPEND script's arguments for `entries`; moves the cached window past them."""
        window = await self._load_window(run_id, state)
        audits = await self._load_audits(run_id, state)
        previous_head = window.head
        try:
            plan = window.plan(entries, policy)
        except ValueError as exc:
            raise ArchiveConflictError(f"run {run_id}: {exc}") from None
        changed = audits.fold(entries)
        args: list[str | int] = [
            str(previous_head),
            VERSION_TEXT,
            len(plan.entries),
            len(plan.deletes),
            plan.overflow,
            len(changed),
            len(plan.state),
        ]
        for fields in plan.entries:
            args.extend(fields)
        args.extend(plan.deletes)
        for audit in changed:
            args += [audit.delegation_id, encode_audit(audit)]
        for name, value in plan.state.items():
            args += [name, value]
        return args

    async def _send_append(self, run_id: str, args: list[str | int]) -> None:
        audits_key, audits_order = self.keys.audits(run_id)
        keys = [
            self.keys.run(run_id),
            self.keys.journal(run_id),
            audits_key,
            audits_order,
            self.keys.meta,
        ]
        try:
            written: Any = await self._append(keys=keys, args=args)
        except coredis.exceptions.ResponseError as exc:
            if str(exc).startswith("CONFLICT"):
                raise ArchiveConflictError(f"run {run_id}: {exc}") from None
            raise
        if written == 0:
            self._landed_before += 1

    async def _read_after(self, run_id: str, after: int, max_entries: int) -> list[JournalEntry]:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be an integer >= 0, got {after!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        with self._bounded(f"reading run {run_id}"):
            # One snapshot: the window's first cursor and the entries after `after` (each item
            # of the answer, gap or entry, takes at least one of them).
            async with self._client.pipeline(transaction=True) as pipe:
                first = pipe.hget(self.keys.run(run_id), "first")
                found = pipe.xrange(
                    self.keys.journal(run_id), entry_id(after + 1), "+", count=max_entries
                )
            first_text, stream_entries = await first, await found
        try:
            window_first = int(first_text) if first_text is not None else 1
        except ValueError:
            raise ArchiveDataError(f"run {run_id}: malformed window start {first_text!r}") from None
        entries = [decode_entry(*entry) for entry in _stream_entries(stream_entries)]
        before = [entry for entry in entries if entry.cursor < window_first]
        out = replay_before_window(run_id, after, window_first, before, max_entries)
        out.extend(
            [entry for entry in entries if entry.cursor >= window_first][
                : max(0, max_entries - len(out))
            ]
        )
        return out

    async def wait_entries(self, run_id: str, after: int, within: float) -> bool:
        """Wait until the run's journal holds an entry with a cursor above `after`, at most
        `within` seconds (Redis wakes it, nothing polls). True once there is one, False when
        `within` passed first. For viewers of a run another node writes: any number of them
        share one blocking XREAD on one connection (`JournalFollower`), so idle viewers never
        wait for the pool. `ArchiveUnavailableError` if Redis gave no answer meanwhile."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be an integer >= 0, got {after!r}")
        _milliseconds(within, "within")
        if self.follower is None:
            raise RuntimeError("the archive is not open (use open_redis_archive)")
        return await self.follower.wait(
            self.keys.journal(run_id), after, within, f"waiting on run {run_id}"
        )

    # -- nodes sharing the archive -----------------------------------------------------------

    async def renew_lease(self) -> None:
        """Take or renew this node's lease: it lasts `lease_seconds` from now."""
        with self._bounded("renewing the lease"):
            await self._renew_lease(
                keys=[self.keys.lease(self.node), self.keys.meta],
                args=[_milliseconds(self.lease_seconds, "lease")],
            )

    async def drop_lease(self) -> None:
        """Give the lease up at once (a clean shutdown: survivors need not wait it out)."""
        with self._bounded("dropping the lease"):
            await self._client.delete([self.keys.lease(self.node)])

    async def lost_nodes(self) -> list[str]:
        """The nodes other than this one that own live runs and hold no lease, sorted."""
        with self._bounded("looking for lost nodes"):
            run_ids = await self._client.zrange(self.keys.live(), 0, -1)
            if not run_ids:
                return []
            async with self._client.pipeline(transaction=False) as pipe:
                owners = [pipe.hget(self.keys.run(run_id), "node") for run_id in run_ids]
            nodes = sorted({node for node in [await o for o in owners] if node is not None})
            nodes = [node for node in nodes if node != self.node]
            if not nodes:
                return []
            async with self._client.pipeline(transaction=False) as pipe:
                leases = [pipe.exists([self.keys.lease(node)]) for node in nodes]
            held = [await lease for lease in leases]
        return [node for node, count in zip(nodes, held, strict=True) if count == 0]

    async def claim_node(self, node: str, hold: float) -> bool:
        """Take the right to end `node`'s runs for at least `hold` seconds (one survivor gets
        it; the claim then expires, so a survivor that died meanwhile does not block the
        others forever); False if another node holds it."""
        hold_ms = _milliseconds(hold, "hold")
        with self._bounded(f"claiming node {node}"):
            taken: Any = await self._claim_node(
                keys=[self.keys.claim(node), self.keys.meta], args=[self.node, hold_ms]
            )
        return bool(taken)

    async def send_command(self, node: str, command: Mapping[str, Any]) -> None:
        """Queue a JSON object for `node`; past `max_commands` queued, the oldest are dropped."""
        if not isinstance(command, Mapping):
            raise TypeError(f"a command is a mapping, not {type(command).__name__}")
        text = _json_command(command)
        with self._bounded(f"sending a command to node {node}"):
            await self._queue_command(
                keys=[self.keys.commands(node), self.keys.meta], args=[text, self.max_commands]
            )

    async def next_commands(self, within: float) -> list[dict[str, Any]]:
        """This node's queued commands, oldest first, waiting at most `within` seconds for
        one (BLMPOP: each is taken off the queue, so delivered once). A queued value that is
        not a JSON object is logged and dropped."""
        block = _milliseconds(within, "within") / 1000
        with self._bounded("reading this node's commands", timeout=within + self.timeout):
            popped = await self._client.blmpop(
                [self.keys.commands(self.node)],
                block,
                PureToken.LEFT,
                count=self.max_commands,
            )
        if not popped:
            return []
        commands: list[dict[str, Any]] = []
        for text in popped[1]:
            try:
                command = json.loads(text)
            except ValueError:
                command = None
            if isinstance(command, dict):
                commands.append(command)
            else:
                log.warning("dropped a queued command that is not a JSON object: %.200r", text)
        return commands

    # -- runs, results, audits ------------------------------------------------------------

    async def open_run(self, record: RunRecord) -> None:
        keys = self.keys
        fields = encode_record(record)
        args: list[str] = [record.run_id]
        for name, value in fields.items():
            args += [name, value]
        with self._bounded(f"opening run {record.run_id}"):
            try:
                await self._open_run(
                    keys=[
                        keys.run(record.run_id),
                        keys.live(),
                        keys.live(record.node),
                        keys.opened,
                        keys.meta,
                    ],
                    args=args,
                )
            except coredis.exceptions.ResponseError as exc:
                if str(exc).startswith("EXISTS"):
                    raise ValueError(f"run {record.run_id!r} is already archived") from None
                raise

    async def record_results(self, run_id: str, results: Sequence[DelegationResult]) -> None:
        if not results:
            return
        state = self._state(run_id)
        planned: list[list[str | int]] = []  # the script's arguments, once planned

        async def write() -> None:
            if not planned:
                audits = await self._load_audits(run_id, state)
                latest = {result.delegation_id: result for result in results}
                changed = {r.delegation_id: audits.with_result(r) for r in results}
                args: list[str | int] = [len(latest)]
                for delegation_id, result in latest.items():
                    args += [delegation_id, to_json(result)]
                for delegation_id, audit in changed.items():
                    args += [delegation_id, encode_audit(audit)]
                planned.append(args)
            await self._record_results(
                keys=[*self.keys.results(run_id), *self.keys.audits(run_id), self.keys.meta],
                args=planned[0],
            )

        async with state.lock:
            try:
                await self._riding_out(f"recording results of run {run_id}", 0, write)
            except BaseException:
                state.audits = None
                raise

    async def close_run(self, run_id: str, outcome: str, ended_at: float) -> None:
        run_key = self.keys.run(run_id)

        async def write() -> None:
            exists, node = await self._client.hmget(run_key, ["record", "node"])
            if exists is None:
                return
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(run_key, {"outcome": outcome, "ended_at": repr(float(ended_at))})
                pipe.zrem(self.keys.live(), [run_id])
                pipe.zrem(self.keys.live(node or ""), [run_id])
                # The marker, if a Redis restarted empty lost it (see `_scripts`).
                pipe.hsetnx(self.keys.meta, "name", FORMAT_NAME)
                pipe.hsetnx(self.keys.meta, "version", VERSION_TEXT)

        await self._riding_out(f"closing run {run_id}", 0, write)
        self._runs.pop(run_id, None)

    async def run(self, run_id: str) -> RunRecord | None:
        with self._bounded(f"reading run {run_id}"):
            fields = await self._client.hmget(
                self.keys.run(run_id), ["record", "outcome", "ended_at", "v"]
            )
        record, outcome, ended_at, version = fields
        if record is None:
            return None
        return decode_record(record, outcome, ended_at, version)

    async def head(self, run_id: str) -> int:
        with self._bounded(f"reading run {run_id}"):
            head = await self._client.hget(self.keys.run(run_id), "head")
        if head is None:
            return 0
        if not head.isdigit():
            raise ArchiveDataError(f"run {run_id}: malformed head {head!r}")
        return int(head)

    async def results(self, run_id: str) -> list[DelegationResult]:
        with self._bounded(f"reading results of run {run_id}"):
            return await self._read_ordered(self.keys.results(run_id), _decode_result)

    async def audits(self, run_id: str) -> list[DelegationAudit]:
        with self._bounded(f"reading audits of run {run_id}"):
            return await self._read_ordered(self.keys.audits(run_id), decode_audit)

    async def live_runs(self, node: str | None = None) -> list[RunRecord]:
        with self._bounded("listing live runs"):
            run_ids = await self._client.zrange(self.keys.live(node), 0, -1)
            if not run_ids:
                return []
            async with self._client.pipeline(transaction=False) as pipe:
                pending = [
                    pipe.hmget(self.keys.run(run_id), ["record", "outcome", "ended_at", "v"])
                    for run_id in run_ids
                ]
            rows = [await fields for fields in pending]
        return [
            decode_record(record, outcome, ended_at, version)
            for record, outcome, ended_at, version in rows
            if record is not None and outcome is None
        ]


class RedisJournalStore:
    """One run's `engine.JournalStore` in a `RedisRunArchive` (see `_layout` for how the
    stream holds the window and what is retained before it). Appends also fold the run's
    audit trail, in the same atomic write."""

    def __init__(self, archive: RedisRunArchive, run_id: str, policy: RetentionPolicy) -> None:
        self.archive = archive
        self.run_id = run_id
        self.policy = policy

    async def append(self, entries: Sequence[JournalEntry]) -> None:
        await self.archive._append_entries(self.run_id, entries, self.policy)

    async def read_after(self, cursor: int, max_entries: int) -> list[JournalEntry]:
        return await self.archive._read_after(self.run_id, cursor, max_entries)


def _stream_entries(entries: Iterable[StreamEntry]) -> Iterator[tuple[str, Mapping[str, str]]]:
    """(id, fields) of stream entries (the client decodes replies to `str`)."""
    for entry in entries:
        yield cast(str, entry.identifier), cast(Mapping[str, str], entry.field_values)


def _milliseconds(seconds: float, name: str) -> int:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return max(1, math.ceil(seconds * 1000))


def _json_command(command: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(command), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a command must be JSON: {exc}") from None


def _only(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception at the bottom of nested single-exception groups, if that is all."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


def _pairs(reply: Any) -> dict[str, str]:
    """A hash from a script's flat HGETALL reply."""
    if isinstance(reply, Mapping):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply or ())
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _decode_result(text: str) -> DelegationResult:
    try:
        return result_from_json(text)
    except WireError as exc:
        raise ArchiveDataError(f"a delegation result: {exc}") from None


@asynccontextmanager
async def open_redis_archive(
    url: str,
    *,
    node: str = "",
    namespace: str = "subagent-engine",
    call_timeout: float = 5.0,
    lease_seconds: float = 15.0,
    max_commands: int = 1000,
    max_connections: int = 64,
    outage_budget: float = 30.0,
    max_buffer_bytes: int = 64 << 20,
) -> AsyncIterator[RedisRunArchive]:
    """Open the run archive kept in the Redis at `url` (`redis://host:port/db`), under the key
    prefix `namespace`, as `node`; closes its connections on exit.

    `call_timeout`: the longest any call waits for Redis (connecting included), in seconds.
    `lease_seconds`: how long this node's lease lasts unless renewed (`renew_lease`).
    `max_commands`: how many commands a node's queue keeps. `max_connections`: the connection
    pool's bound (`next_commands` holds one while it waits; all `wait_entries` share one
    connection of their own, beside the pool).
    `outage_budget`: how long, in seconds, journal appends, results and run ends wait for a
    Redis that is unavailable, sent again with backoff, before they raise
    `ArchiveUnavailableError` (an `engine.StoreUnavailableError`: the engine ends the run,
    typed). `max_buffer_bytes`: how many bytes of journal batches (their entries' weights) may
    wait so at once; an append that would pass it fails at once. Reads never wait: they raise
    `ArchiveUnavailableError` after one try.

    On opening, a namespace that holds keys without this archive's marker, or a marker of
    another owner or format version, raises `ArchiveOpenError` and nothing is written; a Redis
    that does not answer raises `ArchiveUnavailableError`.
    """
    keys = KeySpace(namespace)
    if not isinstance(node, str):
        raise TypeError(f"node must be a string, got {type(node).__name__}")
    _milliseconds(call_timeout, "call_timeout")
    _milliseconds(lease_seconds, "lease_seconds")
    if isinstance(max_commands, bool) or not isinstance(max_commands, int) or max_commands < 1:
        raise ValueError(f"max_commands must be an integer >= 1, got {max_commands!r}")
    _milliseconds(outage_budget, "outage_budget")
    if (
        isinstance(max_buffer_bytes, bool)
        or not isinstance(max_buffer_bytes, int)
        or max_buffer_bytes < 0
    ):
        raise ValueError(f"max_buffer_bytes must be an integer >= 0, got {max_buffer_bytes!r}")
    scheme = url.partition("://")[0].lower() if isinstance(url, str) else ""
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"not a Redis URL (redis://, rediss:// or unix://): {url!r}")
    try:
        client: coredis.Redis[str] = coredis.Redis.from_url(
            url,
            decode_responses=True,
            connect_timeout=call_timeout,
            max_connections=max_connections,
        )
        follower: coredis.Redis[str] = coredis.Redis.from_url(
            url, decode_responses=True, connect_timeout=call_timeout, max_connections=1
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a Redis URL: {url!r} ({exc})") from None
    raised: BaseException | None = None
    try:
        async with client, follower, trio.open_nursery() as nursery:
            try:
                archive = RedisRunArchive(
                    client,
                    keys,
                    node=node,
                    timeout=call_timeout,
                    lease_seconds=lease_seconds,
                    max_commands=max_commands,
                    outage_budget=outage_budget,
                    max_buffer_bytes=max_buffer_bytes,
                )
                archive.follower = JournalFollower(
                    follower=follower,
                    client=client,
                    nursery=nursery,
                    bounded=archive._bounded,
                    timeout=call_timeout,
                )
                await archive._check_namespace()
                yield archive
            except BaseException as exc:
                raised = exc
                raise
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The pool's task group wraps what left its block: give the block's own exception back.
        if raised is not None and _only(group) is raised:
            raise raised from None
        raise
