"""AG-UI chunk expansion: @ag-ui/client 1.0.0's `transformChunks`, ported sans-IO.

A producer may send TEXT_MESSAGE_CHUNK / TOOL_CALL_CHUNK / REASONING_MESSAGE_CHUNK instead of the
START / CONTENT (ARGS) / END triples; the client expands them before it verifies anything
(`HttpAgent.runAgent`: enforceEvents -> transformChunks -> verifyEvents). `ChunkExpander` does
the same expansion, event for event: `feed(event)` returns the events the client's operator emits
for it, `ChunkError` is what the operator throws. It owns the expansion only; judging the
expanded stream is `adapters.agui._checker`'s job.

What the client does (src/chunks/transform.ts, read from the package's source map):

- Pending streams live in LANES keyed by owner: a chunk's `subagentRunId` (null reads as absent),
  absent being the parent agent. A lane holds at most one pending text message, tool call or
  reasoning message, whatever its kind.
- A chunk's lane: if it names an id, the lane that already holds a pending stream of that kind
  and id (a tag naming another lane is an error), else the lane its tag names. Without an id:
  the lane its tag names; untagged, the parent's lane if that holds this kind, else the only lane
  holding this kind (two or more: "Ambiguous" error), else the parent's.
- A chunk continues the lane's pending stream if it is of the same kind and the chunk's id is
  absent or the same; repeating `role` / `name` (text) or `toolCallName` / `parentMessageId`
  (tool) with another value is an error. Otherwise the lane's pending stream is closed (its
  END, tagged like its opener) and a new one opens, which needs the id ("First ... must have a
  messageId") and for a tool call `toolCallName`; text `role` defaults to "assistant",
  reasoning's START always says role "reasoning". The START carries the chunk's `metadata`.
- A chunk with `delta` or `rawEvent` adds a CONTENT (ARGS) event: delta (or ""), the chunk's tag
  or else the opener's, its metadata and rawEvent. A continuation that would add nothing but
  carries metadata, rawEvent, `subagentRunId: null` or unknown properties adds an empty one.
  Unknown properties ride on the content event (spread first, so described fields win), else on
  the START, with a warning when the START already has that key.
- An explicit text / tool / reasoning / state / step / custom / tool-result event closes its own
  lane (its tag, null = parent) first; RUN_STARTED / RUN_FINISHED / RUN_ERROR /
  MESSAGES_SNAPSHOT close every lane, oldest first; SUBAGENT_FINISHED / SUBAGENT_ERROR close the
  lane of their `subagentRunId`; RAW, ACTIVITY_*, REASONING_ENCRYPTED_VALUE, SUBAGENT_STARTED and
  anything unknown pass untouched.
- At the end of the source it clears the lanes, and the ENDs it builds then are discarded: a
  stream that stops without a run terminal gets no synthesized END. `close()` does the same.

Values keep JavaScript's meaning: an absent key is `undefined`, JSON null is `null`, and ids,
tags and lane keys are compared with `===` (strings and numbers by value, objects by identity).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "CHUNK_FIELDS",
    "CHUNK_TYPES",
    "ChunkError",
    "ChunkExpander",
]

#: The fields @ag-ui/core 1.0.0's chunk schemas describe (`Object.keys(schema.shape)`).
CHUNK_FIELDS: Final[dict[str, frozenset[str]]] = {
    "TEXT_MESSAGE_CHUNK": frozenset(
        {"type", "timestamp", "rawEvent", "metadata", "subagentRunId"}
        | {"messageId", "role", "delta", "name"}
    ),
    "TOOL_CALL_CHUNK": frozenset(
        {"type", "timestamp", "rawEvent", "metadata", "subagentRunId"}
        | {"toolCallId", "toolCallName", "parentMessageId", "delta"}
    ),
    "REASONING_MESSAGE_CHUNK": frozenset(
        {"type", "timestamp", "rawEvent", "metadata", "subagentRunId"} | {"messageId", "delta"}
    ),
}
CHUNK_TYPES: Final = frozenset(CHUNK_FIELDS)

#: Explicit events that close the pending stream of their own lane before passing.
_CLOSE_OWN_LANE: Final = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "CUSTOM",
        "STEP_STARTED",
        "STEP_FINISHED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    }
)
#: Run-level events: every lane closes before them.
_CLOSE_ALL_LANES: Final = frozenset(
    {"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"}
)
_CLOSE_TERMINAL_LANE: Final = frozenset({"SUBAGENT_FINISHED", "SUBAGENT_ERROR"})

_WARNING_SUFFIX: Final = " Set SUPPRESS_TRANSFORMATION_WARNINGS=true to silence."


class _Undefined:
    """JavaScript's `undefined`: an absent key (JSON null is Python None)."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Final = _Undefined()


class ChunkError(Exception):
    """What the client's chunk transform throws (which ends the client's run).

    `code` says which check failed: `missing_id` (a chunk that opens a stream has no id),
    `missing_name` (an opening TOOL_CALL_CHUNK has no toolCallName), `owner_conflict` (the tag
    names another lane than the one holding the id), `field_conflict` (a continuation repeats
    role / name / toolCallName / parentMessageId with another value), `ambiguous` (an untagged,
    id-less chunk while several lanes hold that kind), `not_an_object` (a null event).
    `partial` holds the events the transform had built for this event before it threw (the END of
    a lane it closed): the client discards them, but the lane is closed all the same.
    """

    def __init__(self, message: str, code: str, partial: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.partial: list[dict[str, Any]] = partial or []


class _Pending:
    __slots__ = ("fields", "kind")

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        self.kind = kind  # "text" | "tool" | "reasoning"
        self.fields = fields  # only present (non-undefined) fields

    @property
    def entity_id(self) -> Any:
        return self.fields["toolCallId" if self.kind == "tool" else "messageId"]


def _same(a: Any, b: Any) -> bool:
    """JavaScript `===` (and Map's key equality) between JSON values."""
    if a is b:
        return True
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False  # objects: identity only
    if isinstance(a, bool) or isinstance(b, bool):
        return False  # booleans are singletons: equal ones were caught by `is`
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def _js_str(value: Any) -> str:
    """JavaScript's `${value}` for a JSON value (used to spell error messages like the client)."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value) if abs(value) < 10**21 else _js_number(float(value))
    if isinstance(value, float):
        return _js_number(value)
    if isinstance(value, list):
        return ",".join("" if item is None else _js_str(item) for item in value)
    return "[object Object]"


def _js_number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)  # the shortest round-tripping digits, as JavaScript picks them
    if "e" not in text:
        return text
    exact = Decimal(text)
    if -7 < exact.adjusted() < 21:
        return format(exact, "f")
    mantissa, exponent = text.split("e")
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa.removesuffix('.0')}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def _get(event: dict[str, Any], key: str) -> Any:
    return event.get(key, UNDEFINED)


class ChunkExpander:
    """@ag-ui/client 1.0.0's `transformChunks` over one stream: `feed` each event in order.

    `feed(event)` returns the events the client emits for it (the event itself for anything that
    is not a chunk, preceded by the ENDs of the pending streams it closes), or raises
    `ChunkError` where the client throws. `warnings` collects what the client logs with
    console.warn. `close()` ends the stream the way the client's `finalize` does: the pending
    streams are dropped and nothing is emitted. After a `ChunkError` the client's run is over;
    feeding on continues from the state the transform was left in.
    """

    def __init__(self) -> None:
        # (owner, pending) in the order the lanes opened; owner UNDEFINED is the parent agent.
        # A list, not a dict: owners are compared with `===`, and may be any JSON value.
        self._lanes: list[tuple[Any, _Pending]] = []
        self.warnings: list[str] = []

    @property
    def pending(self) -> list[tuple[Any, str, Any]]:
        """(owner, kind, id) of each stream being assembled, oldest lane first."""
        return [(owner, p.kind, p.entity_id) for owner, p in self._lanes]

    def close(self) -> None:
        self._lanes.clear()

    # -- lanes -------------------------------------------------------------------------------

    def _lane(self, owner: Any) -> _Pending | None:
        for key, pending in self._lanes:
            if _same(key, owner):
                return pending
        return None

    def _set_lane(self, owner: Any, pending: _Pending) -> None:
        for i, (key, _) in enumerate(self._lanes):
            if _same(key, owner):
                self._lanes[i] = (key, pending)
                return
        self._lanes.append((owner, pending))

    def _close_lane(self, owner: Any) -> list[dict[str, Any]]:
        index = next((i for i, (key, _) in enumerate(self._lanes) if _same(key, owner)), None)
        if index is None:
            return []
        pending = self._lanes.pop(index)[1]
        end_type = {
            "text": "TEXT_MESSAGE_END",
            "tool": "TOOL_CALL_END",
            "reasoning": "REASONING_MESSAGE_END",
        }[pending.kind]
        id_key = "toolCallId" if pending.kind == "tool" else "messageId"
        event: dict[str, Any] = {"type": end_type, id_key: pending.fields[id_key]}
        if "subagentRunId" in pending.fields:
            event["subagentRunId"] = pending.fields["subagentRunId"]
        return [event]

    def _close_all_lanes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for owner in [key for key, _ in self._lanes]:
            out.extend(self._close_lane(owner))
        return out

    def _lane_holding(self, kind: str, entity_id: Any) -> tuple[bool, Any]:
        for owner, pending in self._lanes:
            if pending.kind == kind and _same(pending.entity_id, entity_id):
                return True, owner
        return False, UNDEFINED

    def _resolve_lane(
        self, kind: str, entity_id: Any, tag: Any, chunk_type: str, entity_kind: str
    ) -> Any:
        if entity_id is not UNDEFINED:
            held, holder = self._lane_holding(kind, entity_id)
            if held:
                if tag is not UNDEFINED and not _same(tag, holder):
                    opener = "(the parent agent)" if holder is UNDEFINED else _js_str(holder)
                    raise ChunkError(
                        f"Cannot continue {entity_kind} '{_js_str(entity_id)}': chunk "
                        f"subagentRunId '{_js_str(tag)}' does not match the open stream's "
                        f"subagent '{opener}'.",
                        "owner_conflict",
                    )
                return holder
            return tag
        if tag is not UNDEFINED:
            return tag
        parent = self._lane(UNDEFINED)
        if parent is not None and parent.kind == kind:
            return UNDEFINED
        candidates = [owner for owner, pending in self._lanes if pending.kind == kind]
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            id_field = "toolCallId" if kind == "tool" else "messageId"
            raise ChunkError(
                f"Ambiguous {chunk_type}: it carries neither a {id_field} nor a subagentRunId, "
                f"but {len(candidates)} lanes have an open {entity_kind}. Attribute the chunk to "
                "the subagent it belongs to.",
                "ambiguous",
            )
        return UNDEFINED

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, event: Any) -> list[Any]:
        if event is None:
            raise ChunkError("Cannot read properties of null (reading 'type')", "not_an_object")
        if not isinstance(event, dict):
            return [event]  # `event.type` is undefined: the operator's default arm
        kind = _get(event, "type")
        if not isinstance(kind, str):
            return [event]
        if kind in _CLOSE_OWN_LANE:
            owner = _get(event, "subagentRunId")
            return [*self._close_lane(UNDEFINED if owner is None else owner), event]
        if kind in _CLOSE_ALL_LANES:
            return [*self._close_all_lanes(), event]
        if kind in _CLOSE_TERMINAL_LANE:
            owner = _get(event, "subagentRunId")
            if owner is None or owner is UNDEFINED:
                return [event]
            return [*self._close_lane(owner), event]
        if kind == "TEXT_MESSAGE_CHUNK":
            return self._chunk(event, kind, "text", "messageId", "text message")
        if kind == "TOOL_CALL_CHUNK":
            return self._chunk(event, kind, "tool", "toolCallId", "tool call")
        if kind == "REASONING_MESSAGE_CHUNK":
            return self._chunk(event, kind, "reasoning", "messageId", "reasoning message")
        return [event]  # RAW, ACTIVITY_*, REASONING_ENCRYPTED_VALUE, SUBAGENT_STARTED, unknown

    def _chunk(
        self, chunk: dict[str, Any], chunk_type: str, kind: str, id_key: str, entity_kind: str
    ) -> list[Any]:
        remainder = _unrecognised(chunk, CHUNK_FIELDS[chunk_type])
        entity_id = _get(chunk, id_key)
        tag = _get(chunk, "subagentRunId")
        lane = self._resolve_lane(
            kind, entity_id, UNDEFINED if tag is None else tag, chunk_type, entity_kind
        )
        open_ = self._lane(lane)
        result: list[dict[str, Any]] = []
        carried = False

        if (
            open_ is not None
            and open_.kind == kind
            and (entity_id is UNDEFINED or _same(entity_id, open_.fields[id_key]))
        ):
            established = open_.fields[id_key]
            agreed: tuple[str, ...]
            if kind == "text":
                agreed = ("role", "name")
            elif kind == "tool":
                agreed = ("toolCallName", "parentMessageId")
            else:
                agreed = ()
            for field in agreed:
                _require_opener_agreement(
                    entity_kind, established, field, _get(chunk, field), _get(open_.fields, field)
                )
            fields = open_.fields
        else:
            result.extend(self._close_lane(lane))
            if entity_id is UNDEFINED:
                raise ChunkError(
                    f"First {chunk_type} must have a {id_key}", "missing_id", list(result)
                )
            fields = {id_key: entity_id}
            start: dict[str, Any] = {
                "type": {
                    "text": "TEXT_MESSAGE_START",
                    "tool": "TOOL_CALL_START",
                    "reasoning": "REASONING_MESSAGE_START",
                }[kind],
                id_key: entity_id,
            }
            if kind == "text":
                role = _get(chunk, "role")
                fields["role"] = "assistant" if role is UNDEFINED else role
                start["role"] = fields["role"]
                _copy_present(chunk, "name", fields, start)
            elif kind == "tool":
                name = _get(chunk, "toolCallName")
                if name is UNDEFINED:
                    raise ChunkError(
                        "First TOOL_CALL_CHUNK must have a toolCallName",
                        "missing_name",
                        list(result),
                    )
                fields["toolCallName"] = start["toolCallName"] = name
                _copy_present(chunk, "parentMessageId", fields, start)
            else:
                start["role"] = "reasoning"
            _copy_present(chunk, "subagentRunId", fields, start)
            self._set_lane(lane, _Pending(kind, fields))
            result.append(_with_metadata(start, chunk))

        content_type = {
            "text": "TEXT_MESSAGE_CONTENT",
            "tool": "TOOL_CALL_ARGS",
            "reasoning": "REASONING_MESSAGE_CONTENT",
        }[kind]
        delta = _get(chunk, "delta")
        raw = _get(chunk, "rawEvent")
        metadata = _get(chunk, "metadata")
        owner = tag if tag is not UNDEFINED else fields.get("subagentRunId", UNDEFINED)
        if delta is not UNDEFINED or raw is not UNDEFINED:
            content: dict[str, Any] = {
                **(remainder or {}),
                "type": content_type,
                id_key: fields[id_key],
                "delta": "" if delta is UNDEFINED else delta,
            }
            if owner is not UNDEFINED:
                content["subagentRunId"] = owner
            content = _with_metadata(content, chunk)
            if raw is not UNDEFINED:
                content["rawEvent"] = raw
            result.append(content)
            carried = True

        if not result and (
            metadata is not UNDEFINED
            or raw is not UNDEFINED
            or tag is None
            or remainder is not None
        ):
            empty: dict[str, Any] = {
                **(remainder or {}),
                "type": content_type,
                id_key: fields[id_key],
                "delta": "",
            }
            if metadata is not UNDEFINED:
                empty["metadata"] = metadata
            if raw is not UNDEFINED:
                empty["rawEvent"] = raw
            if owner is not UNDEFINED:
                empty["subagentRunId"] = owner
            result.append(empty)
            carried = True

        if remainder is not None and not carried and result:
            last = result[-1]
            shadowed = [key for key in remainder if key in last]
            if shadowed:
                listed = ", ".join(f"'{key}'" for key in shadowed)
                self.warnings.append(
                    f"[ag-ui][transform] A {chunk_type} carried {listed}, which the synthesized "
                    f"{last['type']} already describes. The synthesized value is kept and the "
                    "chunk's is dropped — this stage does not judge a described field, so the "
                    "producer's value cannot be substituted for its own." + _WARNING_SUFFIX
                )
            result[-1] = {**remainder, **last}
        return result


def _unrecognised(chunk: dict[str, Any], described: frozenset[str]) -> dict[str, Any] | None:
    remainder: dict[str, Any] | None = None
    for key, value in chunk.items():
        if key in described:
            continue
        if remainder is None:
            remainder = {}
        # `remainder["__proto__"] = value` sets a JavaScript object's prototype (or does
        # nothing): the key never becomes a property, so it is not carried anywhere.
        if key != "__proto__":
            remainder[key] = value
    return remainder


def _copy_present(chunk: dict[str, Any], key: str, *targets: dict[str, Any]) -> None:
    if key in chunk:
        for target in targets:
            target[key] = chunk[key]


def _with_metadata(event: dict[str, Any], chunk: dict[str, Any]) -> dict[str, Any]:
    if "metadata" in chunk:
        event["metadata"] = chunk["metadata"]
    return event


def _require_opener_agreement(
    entity_kind: str, entity_id: Any, field: str, incoming: Any, established: Any
) -> None:
    if incoming is not UNDEFINED and not _same(incoming, established):
        was = "(absent)" if established is UNDEFINED else f"'{_js_str(established)}'"
        raise ChunkError(
            f"Cannot continue {entity_kind} '{_js_str(entity_id)}': chunk {field} "
            f"'{_js_str(incoming)}' does not match the open stream's {field} {was}.",
            "field_conflict",
        )
