"""What the Redis run archive keeps, and where: key names, encodings and the journal window.

Sans-IO: nothing here talks to Redis. It owns the data layout under a namespace `{ns}`:

- `{ns}:meta`: hash, `name` (`FORMAT_NAME`) and `version` (`ARCHIVE_FORMAT_VERSION`): whose
  keys these are, and in which format (`check_meta`).
- `{ns}:run:{<run id>}`: hash, the run's record (`record`: JSON, `node`, `outcome`,
  `ended_at`, `v`) and its journal's state: `head` (newest cursor), `first` (cursor of the
  replay window's oldest entry), `wbytes` (the window's weight), `retained` (entries kept before
  the window) and `open` (what `LifecycleRetention` has open, JSON).
- `{ns}:run:{<run id>}:journal`: stream, one entry per journal entry with the explicit id
  `<cursor>-0` (so a read after a cursor is an exact range) and the fields `v` (format
  version), `w` (weight), `k` (1: kept when it leaves the window) and `e` (the event's JSON).
  It holds the window and, before it, the entries retained beyond it; a hole in the cursors
  before the window is a stretch the archive no longer holds (a gap marker for readers).
- `{ns}:run:{<run id>}:results` and `:audits`: hashes, delegation id -> result or audit JSON,
  each with a sorted set (`:results:order`, `:audits:order`) giving the delegations' order.
- `{ns}:live` and `{ns}:live:<node>`: sorted sets of the live runs (of all nodes, of one),
  scored by opening order (`{ns}:opened` counts the runs opened).
- `{ns}:lease:<node>`: a node's lease, a string that expires unless renewed;
  `{ns}:claim:<node>`: which survivor ends a lost node's runs (expiring too);
  `{ns}:commands:<node>`: a list, the JSON commands other nodes queued for it, oldest first.

The run id sits in a hash tag (`{...}`), so one run's keys share a cluster slot.

`JournalWindow` decides what an append keeps, evicts and retains with the store contract's own
pieces (`RetentionPolicy`, `LifecycleRetention`). Whether an entry is retained once it leaves
the window depends only on the entries before it (`LifecycleRetention` is fed every entry that
leaves, in cursor order, and entries leave in cursor order), so the window decides it when the
entry is appended and stores it with the entry (`k`); `open` is then what is open as of the
newest entry. Another process continuing the run loads that state and decides identically.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from adapters.redis_archive._errors import ArchiveDataError, ArchiveOpenError
from engine import (
    ARCHIVE_FORMAT_VERSION,
    DelegationAudit,
    JournalEntry,
    LifecycleRetention,
    RetentionPolicy,
    RunRecord,
    WireError,
    event_from_json,
    to_json,
)

__all__ = [
    "FORMAT_NAME",
    "AppendPlan",
    "KeySpace",
    "JournalWindow",
    "check_meta",
    "decode_audit",
    "decode_entry",
    "decode_record",
    "encode_audit",
    "encode_entry",
    "encode_record",
    "entry_id",
    "glob_escape",
]

#: The `name` of `{ns}:meta`: these keys are a subagent-engine run archive.
FORMAT_NAME: Final = "subagent-engine/run-archive"
VERSION_TEXT: Final = str(ARCHIVE_FORMAT_VERSION)


def glob_escape(text: str) -> str:
    """`text` as a literal in a Redis glob pattern (SCAN MATCH)."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


@attrs.frozen
class KeySpace:
    """The key names of one namespace (see the module docstring)."""

    namespace: str = attrs.field()

    @namespace.validator
    def _check(self, _: Any, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError("the namespace must be a non-empty string")
        if any(char in value for char in "{}") or any(char.isspace() for char in value):
            raise ValueError(f"the namespace {value!r} may not hold braces or white space")

    @property
    def meta(self) -> str:
        return f"{self.namespace}:meta"

    @property
    def pattern(self) -> str:
        """A SCAN pattern for every key of the namespace."""
        return glob_escape(self.namespace) + ":*"

    @property
    def opened(self) -> str:
        return f"{self.namespace}:opened"

    def live(self, node: str | None = None) -> str:
        return f"{self.namespace}:live" if node is None else f"{self.namespace}:live:{node}"

    def lease(self, node: str) -> str:
        return f"{self.namespace}:lease:{node}"

    def claim(self, node: str) -> str:
        return f"{self.namespace}:claim:{node}"

    def commands(self, node: str) -> str:
        return f"{self.namespace}:commands:{node}"

    def run(self, run_id: str) -> str:
        return f"{self.namespace}:run:{{{run_id}}}"

    def journal(self, run_id: str) -> str:
        return self.run(run_id) + ":journal"

    def results(self, run_id: str) -> tuple[str, str]:
        """The results hash and its order."""
        key = self.run(run_id) + ":results"
        return key, key + ":order"

    def audits(self, run_id: str) -> tuple[str, str]:
        """The audits hash and its order."""
        key = self.run(run_id) + ":audits"
        return key, key + ":order"


def check_meta(meta: Mapping[str, str], namespace_has_keys: bool) -> bool:
    """Whether the namespace may be used, from its `{ns}:meta` hash (empty: none) and whether
    it holds any key. True: it is ours, in our format; False: it is empty (write the marker).
    Raises `ArchiveOpenError` for anything else."""
    if not meta:
        if namespace_has_keys:
            raise ArchiveOpenError(
                "the namespace holds keys but no run archive marker: refusing to use it"
            )
        return False
    name, version = meta.get("name"), meta.get("version")
    if name != FORMAT_NAME:
        raise ArchiveOpenError(f"the namespace belongs to {name!r}, not to {FORMAT_NAME!r}")
    if version is None or not version.isdigit():
        raise ArchiveOpenError(f"the run archive marker has no valid version ({version!r})")
    if int(version) > ARCHIVE_FORMAT_VERSION:
        raise ArchiveOpenError(
            f"the run archive is in format {version}, newer than this code's "
            f"{ARCHIVE_FORMAT_VERSION}: upgrade subagent-engine to read it"
        )
    if int(version) < ARCHIVE_FORMAT_VERSION:
        raise ArchiveOpenError(
            f"the run archive is in format {version}, older than this code's "
            f"{ARCHIVE_FORMAT_VERSION}, which cannot convert it"
        )
    return True


# -- journal entries ---------------------------------------------------------------------------


def entry_id(cursor: int) -> str:
    """The stream id of the entry with `cursor`."""
    return f"{cursor}-0"


def encode_entry(entry: JournalEntry, keep: bool) -> tuple[str, str, str, str]:
    """(stream id, weight, keep flag, event JSON) of an entry to append."""
    return entry_id(entry.cursor), str(entry.weight), "1" if keep else "0", to_json(entry.event)


def _cursor_of(identifier: str) -> int:
    cursor, _, sequence = identifier.partition("-")
    if sequence != "0" or not cursor.isdigit():
        raise ArchiveDataError(f"journal entry id {identifier!r} is not <cursor>-0")
    return int(cursor)


def _weight(text: str | None, identifier: str) -> int:
    if text is None or not text.isdigit():
        raise ArchiveDataError(f"journal entry {identifier} has no valid weight ({text!r})")
    return int(text)


def decode_entry(identifier: str, fields: Mapping[str, str]) -> JournalEntry:
    """The journal entry of a stream entry; `ArchiveDataError` if it is not one we wrote."""
    version = fields.get("v")
    if version != VERSION_TEXT:
        raise ArchiveDataError(
            f"journal entry {identifier} is in format {version!r}, not {VERSION_TEXT}"
        )
    text = fields.get("e")
    if text is None:
        raise ArchiveDataError(f"journal entry {identifier} has no event")
    try:
        event = event_from_json(text)
    except WireError as exc:
        raise ArchiveDataError(f"journal entry {identifier}: {exc}") from None
    return JournalEntry(event, _cursor_of(identifier), _weight(fields.get("w"), identifier))


# -- the replay window -------------------------------------------------------------------------


@attrs.frozen
class AppendPlan:
    """What one append writes: `entries` (id, weight, keep, event JSON) to add, the cursors
    to delete (entries that left the window and are not retained, appended earlier),
    `overflow` (how many of the oldest retained entries to drop) and the journal's new state
    (hash fields)."""

    entries: tuple[tuple[str, str, str, str], ...]
    deletes: tuple[str, ...]
    overflow: int
    state: Mapping[str, str]


class JournalWindow:
    """One run's journal state: its head, its window (cursor, weight, kept when it leaves) and
    what is retained before it. See the module docstring."""

    __slots__ = ("first", "head", "retained", "retention", "window", "window_bytes")

    def __init__(
        self,
        *,
        head: int = 0,
        first: int = 1,
        window: Iterable[tuple[int, int, bool]] = (),
        window_bytes: int = 0,
        retained: int = 0,
        open_things: Iterable[Any] = (),
    ) -> None:
        self.head = head
        self.first = first
        self.window: deque[tuple[int, int, bool]] = deque(window)
        self.window_bytes = window_bytes
        self.retained = retained
        self.retention = LifecycleRetention(open_things)

    @classmethod
    def load(
        cls, state: Sequence[str | None], window: Iterable[tuple[str, Mapping[str, str]]]
    ) -> JournalWindow:
        """The window from its hash fields (`STATE_FIELDS`, in order) and the stream entries
        from its first cursor on; `ArchiveDataError` if they disagree."""
        head_text, first_text, bytes_text, retained_text, open_text = state
        try:
            head = int(head_text or 0)
            first = int(first_text or head + 1)
            window_bytes = int(bytes_text or 0)
            retained = int(retained_text or 0)
            things = [tuple(thing) for thing in json.loads(open_text or "[]")]
        except (ValueError, TypeError) as exc:
            raise ArchiveDataError(f"the journal's state is malformed: {exc}") from None
        entries = [
            (_cursor_of(identifier), _weight(fields.get("w"), identifier), fields.get("k") == "1")
            for identifier, fields in window
        ]
        if [cursor for cursor, _, _ in entries] != list(range(first, head + 1)) or sum(
            weight for _, weight, _ in entries
        ) != window_bytes:
            raise ArchiveDataError(
                f"the journal's window ({first}..{head}, {window_bytes} bytes) disagrees "
                f"with its stream ({len(entries)} entries)"
            )
        return cls(
            head=head,
            first=first,
            window=entries,
            window_bytes=window_bytes,
            retained=retained,
            open_things=things,
        )

    def plan(self, entries: Sequence[JournalEntry], policy: RetentionPolicy) -> AppendPlan:
        """Take `entries` (continuing the head) in and decide what leaves the window. Changes
        this state: a caller that fails to write the plan must load the state again."""
        for index, entry in enumerate(entries):
            if entry.cursor != self.head + 1 + index:
                raise ValueError(
                    f"entry {index} of the batch has cursor {entry.cursor}, "
                    f"expected {self.head + 1 + index} (the journal's head is {self.head})"
                )
        retains = self.retention.retains
        window = self.window
        added: dict[int, tuple[str, str, str, str]] = {}
        for entry in entries:
            keep = retains(entry.event)
            window.append((entry.cursor, entry.weight, keep))
            self.window_bytes += entry.weight
            added[entry.cursor] = encode_entry(entry, keep)
        if entries:
            self.head = entries[-1].cursor
        deletes: list[str] = []
        if policy.exceeded(len(window), self.window_bytes):
            count, evicted_bytes = policy.evictions(
                len(window), self.window_bytes, (weight for _, weight, _ in window)
            )
            for _ in range(count):
                cursor, _, keep = window.popleft()
                if keep:
                    self.retained += 1
                elif added.pop(cursor, None) is None:  # never written: nothing to delete
                    deletes.append(entry_id(cursor))
            self.window_bytes -= evicted_bytes
            self.first = window[0][0]
        overflow = policy.retained_overflow(self.retained)
        self.retained -= overflow
        return AppendPlan(
            entries=tuple(added.values()),
            deletes=tuple(deletes),
            overflow=overflow,
            state={
                "head": str(self.head),
                "first": str(self.first),
                "wbytes": str(self.window_bytes),
                "retained": str(self.retained),
                "open": json.dumps(sorted(self.retention.open_things, key=repr)),
                "v": VERSION_TEXT,
            },
        )


#: The journal's state fields of the run hash, in the order `JournalWindow.load` takes them.
STATE_FIELDS: Final = ("head", "first", "wbytes", "retained", "open")


# -- records, results and audits ---------------------------------------------------------------


def _json_text(value: Any, what: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON: {exc}") from None


def encode_record(record: RunRecord) -> dict[str, str]:
    """The run hash fields of a new run's record (the outcome is written when it ends)."""
    document = {
        "run_id": record.run_id,
        "started_at": record.started_at,
        "thread_id": record.thread_id,
        "node": record.node,
        "metadata": dict(record.metadata),
        "attributes": dict(record.attributes),
    }
    return {
        "record": _json_text(document, "the run record"),
        "node": record.node,
        "v": VERSION_TEXT,
    }


def _optional(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise ArchiveDataError(f"{name} is {type(value).__name__}, not {kind}")
    return value


def _document(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ArchiveDataError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ArchiveDataError(f"{what} is not a JSON object")
    return data


def _finite(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ArchiveDataError(f"{what} is not a number ({text!r})") from None
    if not math.isfinite(value):
        raise ArchiveDataError(f"{what} is not finite ({text!r})")
    return value


def decode_record(
    record_text: str, outcome: str | None, ended_at: str | None, version: str | None
) -> RunRecord:
    """The record of a run hash's fields; `ArchiveDataError` if malformed."""
    if version != VERSION_TEXT:
        raise ArchiveDataError(f"run record in format {version!r}, not {VERSION_TEXT}")
    data = _document(record_text, "the run record")
    metadata = _optional(data, "metadata", dict) or {}
    attributes = _optional(data, "attributes", dict) or {}
    if not all(isinstance(v, str) for v in attributes.values()):
        raise ArchiveDataError("run record attributes must be strings")
    run_id = data.get("run_id")
    started_at = _optional(data, "started_at", (int, float))
    if not isinstance(run_id, str) or started_at is None:
        raise ArchiveDataError("run record without run_id or started_at")
    return RunRecord(
        run_id=run_id,
        started_at=float(started_at),
        thread_id=_optional(data, "thread_id", str),
        node=_optional(data, "node", str) or "",
        metadata=metadata,
        attributes=attributes,
        ended_at=_finite(ended_at, "ended_at"),
        outcome=outcome,
    )


_AUDIT_TIMES: Final = ("started_at", "ended_at")


def encode_audit(audit: DelegationAudit) -> str:
    return _json_text(attrs.asdict(audit), "the audit record")


def decode_audit(text: str) -> DelegationAudit:
    data = _document(text, "an audit record")
    values: dict[str, Any] = {}
    for field in attrs.fields(DelegationAudit):
        if field.name in _AUDIT_TIMES:
            values[field.name] = _optional(data, field.name, (int, float))
        else:
            values[field.name] = _optional(data, field.name, str)
    for name in ("run_id", "delegation_id", "status"):
        if values[name] is None:
            raise ArchiveDataError(f"an audit record without {name}")
    return DelegationAudit(**values)
