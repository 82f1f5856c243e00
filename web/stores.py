"""Opening the run store a host configured (`[store]`): SQLite, Redis, or none (memory).

This module owns turning a `StoreEntry` into the `engine.RunArchive` the server's engine keeps
runs in, open for the server's lifetime: the SQLite file (`adapters.sqlite_archive`, the
default of `serve`), a shared Redis (`adapters.redis_archive`, for several nodes), or nothing
(memory: runs live and die with the process). A store that cannot be opened (a corrupt or
foreign file, one another process holds, a Redis key space holding other data, an unreachable
Redis) is a `StoreOpenError` naming it and why, raised before anything listens.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import cast

import attrs

from engine import RunArchive, SharedRunArchive
from web.config import StoreEntry

__all__ = ["OpenStore", "StoreOpenError", "describe_store", "node_name", "open_store"]


@attrs.frozen
class OpenStore:
    """An open run store: the archive the engine keeps runs in (None: memory), and the same
    archive as one shared with other nodes (None unless Redis)."""

    archive: RunArchive | None = None
    shared: SharedRunArchive | None = None


class StoreOpenError(Exception):
    """The configured run store cannot be used; the message says which and why."""


def node_name(entry: StoreEntry) -> str:
    """This process's node name among the nodes sharing a Redis store: `[store] node`, else
    `<host name>-<pid>`. A single-node store (SQLite) has none."""
    if entry.kind != "redis":
        return ""
    return entry.node or f"{socket.gethostname()}-{os.getpid()}"


def describe_store(entry: StoreEntry, environ: Mapping[str, str] | None = None) -> str:
    """One line for the start-up banner: where runs are kept."""
    if entry.kind == "sqlite":
        return f"sqlite {entry.sqlite_path(environ)}"
    if entry.kind == "redis":
        where = entry.url if entry.url else f"${entry.url_env}"
        return f"redis {where} (namespace {entry.namespace}, node {node_name(entry)})"
    return "memory (runs end with the process)"


@asynccontextmanager
async def open_store(
    entry: StoreEntry, environ: Mapping[str, str] | None = None
) -> AsyncIterator[OpenStore]:
    """The store `entry` configures, open until the block ends."""
    if entry.kind == "memory":
        yield OpenStore()
        return
    if entry.kind == "sqlite":
        from adapters.sqlite_archive import ArchiveOpenError, open_sqlite_archive

        path = entry.sqlite_path(environ)
        try:
            cm = open_sqlite_archive(path)
            archive = await cm.__aenter__()
        except ArchiveOpenError as exc:
            raise StoreOpenError(f"the run store {path} cannot be used: {exc}") from exc
        except OSError as exc:
            raise StoreOpenError(f"the run store {path} cannot be opened: {exc}") from exc
        try:
            yield OpenStore(archive)
        finally:
            await cm.__aexit__(None, None, None)
        return
    url = entry.redis_url(environ)
    if url is None:
        raise StoreOpenError(f"[store] url_env: ${entry.url_env} is not set")
    try:
        from adapters.redis_archive import ArchiveOpenError as RedisOpenError
        from adapters.redis_archive import open_redis_archive
    except ImportError as exc:  # coredis is the `redis` extra
        raise StoreOpenError(
            "[store] kind = 'redis' needs coredis: pip install 'subagent-engine[redis]'"
        ) from exc
    shown = entry.url if entry.url else f"${entry.url_env}"
    try:
        rcm = open_redis_archive(
            url,
            node=node_name(entry),
            namespace=entry.namespace,
            lease_seconds=entry.lease_seconds,
            outage_budget=entry.outage_seconds,
        )
        redis_archive = await rcm.__aenter__()
    except RedisOpenError as exc:
        raise StoreOpenError(f"the Redis run store at {shown} cannot be used: {exc}") from exc
    except OSError as exc:
        raise StoreOpenError(f"the Redis run store at {shown} cannot be reached: {exc}") from exc
    try:
        shared = cast(SharedRunArchive, redis_archive)
        yield OpenStore(shared, shared)
    finally:
        await rcm.__aexit__(None, None, None)
