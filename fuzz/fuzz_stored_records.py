"""Fuzz harness: the readers of what the run stores keep, and the audit fold.

What a store reads back was written by us, but a file or a Redis key space can be damaged,
half-written, or another program's: every reader must refuse what it does not recognise with
its typed error, never with anything else. The first input byte picks a reader; the rest is
its input (JSON for the structured ones):

- `adapters.sqlite_archive`'s file header check (the first 100 bytes of a database file):
  `ArchiveOpenError` or accepted;
- `adapters.redis_archive`'s decoders of a stored journal entry (stream id and fields), run
  record and audit record, and its namespace marker check: `ArchiveDataError` /
  `ArchiveOpenError` or accepted. An accepted entry keeps the cursor of its id; an accepted
  audit record survives a round trip through its encoder;
- `engine.DelegationAudits.fold` over the events of a JSON list (read with `event_from_jsonable`):
  it never raises, reports each changed record once, keeps each record's delegation id, and a
  record never leaves a terminal status once it reached one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fuzz._harness import instrumented_imports

with instrumented_imports("engine", "adapters"):
    from adapters.redis_archive._errors import ArchiveDataError
    from adapters.redis_archive._errors import ArchiveOpenError as RedisOpenError
    from adapters.redis_archive._layout import (
        check_meta,
        decode_audit,
        decode_entry,
        decode_record,
        encode_audit,
    )
    from adapters.sqlite_archive._file import ArchiveOpenError as SqliteOpenError
    from adapters.sqlite_archive._file import _check_header
    from engine import DelegationAudits, JournalEntry, Status, WireError, event_from_jsonable

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_SQLITE_HEADER = b"SQLite format 3\x00" + bytes(44) + (1).to_bytes(4, "big") + bytes(4)
_OURS = _SQLITE_HEADER + (0x53455241).to_bytes(4, "big") + bytes(28)

SEEDS: list[bytes] = [
    b"\x00" + _OURS,
    b"\x00" + _SQLITE_HEADER + bytes(32),
    b"\x00not a database",
    b'\x01{"id":"3-0","fields":{"v":"1","w":"120","e":"{\\"kind\\":\\"run.started\\",'
    b'\\"run_id\\":\\"r\\"}"}}',
    b'\x01{"id":"3-1","fields":{"v":"1","w":"x","e":"{}"}}',
    b'\x02{"record":"{\\"run_id\\":\\"r\\",\\"started_at\\":1.5,\\"attributes\\":{\\"m\\":\\"a\\"}}",'
    b'"outcome":"run.finished","ended_at":"2.5","version":"1"}',
    b'\x02{"record":"[]","outcome":null,"ended_at":"nan","version":"1"}',
    b'\x03{"run_id":"r","delegation_id":"d","status":"completed","started_at":1,'
    b'"remote_task_id":"t"}',
    b"\x03{}",
    b'\x04{"meta":{"name":"subagent-engine-run-archive","version":"1"},"keys":true}',
    b'\x04{"meta":{},"keys":true}',
    b'\x05[{"kind":"subagent.started","run_id":"r","delegation_id":"d","agent_key":"a",'
    b'"time":1},{"kind":"subagent.status","run_id":"r","delegation_id":"d",'
    b'"remote_task_id":"t","time":2},{"kind":"subagent.finished","run_id":"r",'
    b'"delegation_id":"d","time":3},{"kind":"subagent.failed","run_id":"r",'
    b'"delegation_id":"d","error":{"code":"x","message":"m"}}]',
]

DICTIONARY: list[bytes] = [
    b'"v":"1"',
    b'"w":"',
    b'"e":"',
    b'"delegation_id"',
    b'"remote_task_id"',
    b'"subagent.finished"',
    b'"subagent.cancelled"',
    b'"nested_id"',
    b"SQLite format 3\x00",
]


def _json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def fuzz_one_input(data: bytes) -> None:
    if not data:
        return
    choice, rest = data[0] % 6, data[1:]
    if choice == 0:
        try:
            _check_header(Path("fuzzed.sqlite3"), rest[:100])
        except SqliteOpenError:
            return
        return
    document = _json(rest)
    if not isinstance(document, (dict, list)):
        return
    if choice == 5:
        _fold(document)
        return
    if not isinstance(document, dict):
        return
    if choice == 1:
        identifier = _text(document.get("id")) or ""
        try:
            entry = decode_entry(identifier, _strings(document.get("fields")))
        except ArchiveDataError:
            return
        assert f"{entry.cursor}-0" == identifier
    elif choice == 2:
        try:
            record = decode_record(
                _text(document.get("record")) or "",
                _text(document.get("outcome")),
                _text(document.get("ended_at")),
                _text(document.get("version")),
            )
        except ArchiveDataError:
            return
        assert all(isinstance(v, str) for v in record.attributes.values())
    elif choice == 3:
        try:
            audit = decode_audit(json.dumps(document))
        except ArchiveDataError:
            return
        assert decode_audit(encode_audit(audit)) == audit
    elif choice == 4:
        try:
            check_meta(_strings(document.get("meta")), bool(document.get("keys")))
        except RedisOpenError:
            return


def _fold(document: Any) -> None:
    if not isinstance(document, list):
        return
    entries = []
    for index, item in enumerate(document[:200], 1):
        try:
            event = event_from_jsonable(item)
        except WireError:
            continue
        entries.append(JournalEntry(event, index))
    audits = DelegationAudits("r", "th")
    ended: set[str] = set()
    for entry in entries:
        changed = audits.fold([entry])
        ids = [record.delegation_id for record in changed]
        assert len(ids) == len(set(ids))
        for record in changed:
            assert audits.records[record.delegation_id] is record
        for delegation_id in ended:
            assert audits.records[delegation_id].status != Status.RUNNING
        ended |= {d for d, r in audits.records.items() if r.ended}
