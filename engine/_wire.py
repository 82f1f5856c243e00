"""The JSON shape of events and results: snake_case keys, absent values omitted.

This module owns the one cattrs converter of the engine. Models stay free of serialization
details; every adapter that writes or reads engine JSON goes through `to_jsonable`/`to_json` and
the `*_from_json` readers here. Readers are strict about types and raise `WireError` (never a bare
cattrs or JSON exception) for anything malformed, so a hostile or buggy peer cannot crash a reader.
Fields this version does not know are kept in `extra` on read and written back on write. What a
reader gives is valid Unicode: a document that spells an unpaired surrogate (JSON's `\\ud800`,
RFC 8259 section 8.2) is read with U+FFFD in its place, so `to_json(...).encode()` of anything a
reader accepted cannot raise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from engine._events import DelegationEvent, DropReport
from engine._questions import Question
from engine._redact import valid_value
from engine._results import (
    ArtifactRef,
    DelegationError,
    DelegationResult,
    InputArtifact,
    ResultMessage,
)

__all__ = [
    "WireError",
    "converter",
    "event_from_json",
    "event_from_jsonable",
    "result_from_json",
    "result_from_jsonable",
    "to_json",
    "to_jsonable",
]

T = TypeVar("T")

#: Documents larger than this are refused before parsing.
MAX_DOCUMENT_BYTES: Final = 4 * 1024 * 1024
#: A result document's bound: a result keeps its delegation's whole text output (up to
#: `DelegationPolicy.max_text_chars`, 4,000,000 characters by default), and JSON may spell one
#: character in up to 6 (`\u0000`), so a store must read back what it wrote up to this size.
MAX_RESULT_DOCUMENT_CHARS: Final = 64 * 1024 * 1024

#: A surrogate in a document: escaped, or as the character (bytes: its UTF-8 form, which
#: `json.loads` decodes with `surrogatepass`). Only documents with one are walked to repair it.
#: In text the two spellings are looked for apart: a literal `\\u` is found fast, and only
#: text that is not ASCII can hold the character.
_ESCAPED_SURROGATE_IN_TEXT: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_CHARACTER: Final = re.compile("[\ud800-\udfff]")
_SURROGATE_IN_BYTES: Final = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class WireError(ValueError):
    """A document is not a valid engine event or result; `path` says where, when known."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


converter: Final = cattrs.Converter(forbid_extra_keys=False)


def _strict(tp: type, name: str) -> Any:
    def structure(value: Any, _: Any) -> Any:
        # bool is an int in Python; a JSON `true` is not a sequence number.
        if type(value) is bool and tp is not bool:
            raise WireError(f"expected {name}, got a boolean")
        if tp is float and type(value) is int:
            return float(value)
        if not isinstance(value, tp):
            raise WireError(f"expected {name}, got {type(value).__name__}")
        return value

    return structure


for _tp, _name in (
    (str, "a string"),
    (int, "an integer"),
    (bool, "a boolean"),
    (float, "a number"),
):
    converter.register_structure_hook(_tp, _strict(_tp, _name))


def _json_object(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WireError("expected a JSON object")
    return value


_JSON_OBJECT: Final = dict[str, Any]
converter.register_structure_hook_func(lambda tp: tp == _JSON_OBJECT, _json_object)
converter.register_structure_hook_func(lambda tp: tp is Any, lambda value, _: value)


def _with_extra(cls: type[T], *, keep_extra: bool) -> None:
    """Omit defaults on write; on read keep unknown fields in `extra` when the class has one."""
    field_names = {a.name for a in attrs.fields(cls)}  # type: ignore[arg-type]
    unstructure = make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)
    structure = make_dict_structure_fn(cls, converter)

    def write(obj: T) -> dict[str, Any]:
        out = unstructure(obj)
        extra = out.pop("extra", None)
        if extra:
            for key, value in extra.items():
                out.setdefault(key, value)
        return out

    def read(value: Any, _: Any) -> T:
        if not isinstance(value, dict):
            raise WireError(f"expected a JSON object for {cls.__name__}")
        # `extra` is the engine's own bag, never a wire field: a peer's "extra" is unknown too.
        known = {k: v for k, v in value.items() if k in field_names and k != "extra"}
        if keep_extra:
            unknown = {k: v for k, v in value.items() if k not in field_names or k == "extra"}
            if unknown:
                known["extra"] = unknown
        return structure(known, cls)

    converter.register_unstructure_hook(cls, write)
    converter.register_structure_hook(cls, read)


def _write_error(err: DelegationError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": err.code, "message": err.message, "retryable": err.retryable}
    if err.remote_status is not None:
        out["remote_status"] = err.remote_status
    if err.metadata:
        out["metadata"] = err.metadata
    return out


def _read_error(value: Any, _: Any) -> DelegationError:
    data = _json_object(value, None)
    retryable = data.get("retryable")
    if retryable is not None and type(retryable) is not bool:
        raise WireError("expected a boolean", path="error.retryable")
    metadata = data.get("metadata")
    return DelegationError(
        code=converter.structure(data.get("code"), str),
        message=converter.structure(data.get("message", ""), str),
        retryable=retryable,
        remote_status=converter.structure(data.get("remote_status"), str | None),  # type: ignore[arg-type]
        metadata=None if metadata is None else (_json_object(metadata, None) or None),
    )


converter.register_unstructure_hook(DelegationError, _write_error)
converter.register_structure_hook(DelegationError, _read_error)


for _cls in (ArtifactRef, InputArtifact, ResultMessage, DropReport, Question):
    _with_extra(_cls, keep_extra=False)
_with_extra(DelegationEvent, keep_extra=True)
_with_extra(DelegationResult, keep_extra=False)


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values (dicts, lists, strings, numbers) for an event, result or error."""
    return converter.unstructure(obj)


def to_json(obj: Any) -> str:
    """Compact JSON text for an event, result or error."""
    return json.dumps(to_jsonable(obj), separators=(",", ":"), ensure_ascii=False)


def _read(value: Any, cls: type[T]) -> T:
    try:
        return converter.structure(value, cls)
    except WireError:
        raise
    except Exception as exc:  # cattrs groups, TypeError, KeyError... all mean "malformed"
        raise WireError(f"malformed {cls.__name__}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # NaN and Infinity (or 1e999) would be written back as tokens a browser cannot parse.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]} is out of range")
    return value


#: `json.loads(text, parse_constant=..., parse_float=...)` makes a decoder per call; this one
#: is made once (decoding keeps no state between documents).
_DECODER: Final = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _loads(text: str | bytes) -> Any:
    """What `json.loads` with `_DECODER`'s hooks gives, for the same input."""
    if type(text) is str and not text.startswith("\ufeff"):
        return _DECODER.decode(text)
    if type(text) is bytes:
        return _DECODER.decode(text.decode(json.detect_encoding(text), "surrogatepass"))
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def _spells_a_surrogate(text: str | bytes) -> bool:
    if isinstance(text, str):
        return ("\\u" in text and _ESCAPED_SURROGATE_IN_TEXT.search(text) is not None) or (
            not text.isascii() and _SURROGATE_CHARACTER.search(text) is not None
        )
    return _SURROGATE_IN_BYTES.search(text) is not None


def _parse(text: str | bytes, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    if len(text) > limit:
        raise WireError(f"document larger than {limit} bytes")
    try:
        value = _loads(text)
        if _spells_a_surrogate(text):
            value = valid_value(value)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from exc
    return value


# -- events read directly ----------------------------------------------------------------------
#
# Reading an event through the converter costs several times what parsing its JSON does, and a
# resuming viewer reads a whole run. So the shape `to_json` writes (every field one this version
# knows, holding a value of its exact type) is read here field by field. Whatever else a document
# holds (an unknown field or `extra`, a value of another type, a missing `kind`, a subclass of
# dict or str from a caller of `event_from_jsonable`) makes these readers give None, never
# raise, and the document goes to the converter, which reads it or says why not. Each reader
# gives exactly what the converter would: the same values of the same types, mutable values
# (`args`, `result`, `raw`, metadata) the very objects the document holds.

#: `str | None` fields, and `kind` and `run_id` (required strings, checked apart).
_EVENT_TEXTS: Final = frozenset(
    {
        "kind",
        "run_id",
        "parent_tool_call_id",
        "delegation_id",
        "agent_key",
        "agent_name",
        "protocol",
        "remote_task_id",
        "remote_context_id",
        "remote_message_id",
        "remote_artifact_id",
        "remote_tool_call_id",
        "card_fingerprint",
        "message_id",
        "tool_call_id",
        "name",
        "role",
        "delta",
        "text",
        "tool_name",
        "status",
        "nested_id",
        "nested_parent_id",
        "remote_subagent_id",
    }
)
#: Fields of type `Any`: taken as they are.
_EVENT_ANYTHING: Final = frozenset({"args", "result"})
_ARTIFACT_TEXTS: Final = frozenset({"id", "name", "description", "mime_type", "uri"})


def _plain_object(value: Any) -> bool:
    """A dict with string keys, as `_json_object` wants one (exact types only)."""
    return type(value) is dict and all(type(key) is str for key in value)


def _artifact_directly(value: Any) -> ArtifactRef | None:
    if type(value) is not dict:
        return None
    fields: dict[str, Any] = {}
    for key, item in value.items():
        if key in _ARTIFACT_TEXTS:
            if item is not None and type(item) is not str:
                return None
        elif key == "size_bytes":
            if item is not None and type(item) is not int:
                return None
        elif key == "metadata":
            if item is not None and not _plain_object(item):
                return None
        else:
            continue  # the converter drops a field an artifact does not have
        fields[key] = item
    return ArtifactRef(**fields)


def _error_directly(value: Any) -> DelegationError | None:
    if not _plain_object(value):
        return None
    code = value.get("code")
    message = value.get("message", "")
    retryable = value.get("retryable")
    remote_status = value.get("remote_status")
    metadata = value.get("metadata")
    if (
        type(code) is not str
        or type(message) is not str
        or (retryable is not None and type(retryable) is not bool)
        or (remote_status is not None and type(remote_status) is not str)
        or (metadata is not None and not _plain_object(metadata))
    ):
        return None
    return DelegationError(
        code=code,
        message=message,
        retryable=retryable,
        remote_status=remote_status,
        metadata=metadata or None,
    )


def _drop_report_directly(value: Any) -> DropReport | None:
    if type(value) is not dict or type(value.get("reason")) is not str:
        return None
    fields: dict[str, Any] = {}
    for key, item in value.items():
        if key in ("count", "bytes"):
            if type(item) is not int:
                return None
        elif key in ("first_cursor", "last_cursor"):
            if item is not None and type(item) is not int:
                return None
        elif key == "kinds":
            if item is not None:
                if type(item) is not dict or not all(
                    type(kind) is str and type(count) is int for kind, count in item.items()
                ):
                    return None
                item = dict(item)  # the converter builds a new mapping
        elif key != "reason":
            continue  # the converter drops a field a drop report does not have
        fields[key] = item
    return DropReport(**fields)


#: Fields holding a nested model (or None), and the direct reader of each.
_EVENT_NESTED: Final[dict[str, Callable[[Any], Any]]] = {
    "artifact": _artifact_directly,
    "error": _error_directly,
    "dropped": _drop_report_directly,
}


def _event_directly(value: Any) -> DelegationEvent | None:
    """The event the converter would read from `value`, or None to leave it to the converter."""
    if type(value) is not dict or type(value.get("kind")) is not str:
        return None
    if type(value.get("run_id")) is not str:
        return None
    converted: dict[str, Any] = {}
    for key, item in value.items():
        if key in _EVENT_TEXTS:
            if item is not None and type(item) is not str:
                return None
        elif key in _EVENT_ANYTHING:
            pass
        elif key == "sequence":
            if type(item) is not int:
                return None
        elif key == "time":
            if type(item) is not float:
                if type(item) is not int:
                    return None
                try:
                    converted[key] = float(item)
                except OverflowError:
                    return None
        elif key == "synthesized":
            if type(item) is not bool:
                return None
        elif key == "depth":
            if item is not None and type(item) is not int:
                return None
        elif key == "raw":
            if item is not None and not _plain_object(item):
                return None
        elif key in _EVENT_NESTED:
            if item is not None:
                nested = _EVENT_NESTED[key](item)
                if nested is None:
                    return None
                converted[key] = nested
        else:  # `extra` or a field this version does not know
            return None
    return DelegationEvent(**(value | converted if converted else value))


def event_from_jsonable(value: Any) -> DelegationEvent:
    event = _event_directly(value)
    if event is not None:
        return event
    return _read(value, DelegationEvent)


def event_from_json(text: str | bytes) -> DelegationEvent:
    return event_from_jsonable(_parse(text))


def result_from_jsonable(value: Any) -> DelegationResult:
    return _read(value, DelegationResult)


def result_from_json(text: str | bytes) -> DelegationResult:
    """A result written by `to_json` (up to `MAX_RESULT_DOCUMENT_CHARS`)."""
    return result_from_jsonable(_parse(text, MAX_RESULT_DOCUMENT_CHARS))
