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
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from engine._events import DelegationEvent, DropReport
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

#: A surrogate in a document: escaped, or as the character (bytes: its UTF-8 form, which
#: `json.loads` decodes with `surrogatepass`). Only documents with one are walked to repair it.
_SURROGATE_IN_TEXT: Final = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
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


for _cls in (ArtifactRef, InputArtifact, ResultMessage, DropReport):
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


def _parse(text: str | bytes) -> Any:
    if len(text) > MAX_DOCUMENT_BYTES:
        raise WireError(f"document larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
        hint = _SURROGATE_IN_TEXT if isinstance(text, str) else _SURROGATE_IN_BYTES
        if hint.search(text):  # type: ignore[arg-type]
            value = valid_value(value)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from exc
    return value


def event_from_jsonable(value: Any) -> DelegationEvent:
    return _read(value, DelegationEvent)


def event_from_json(text: str | bytes) -> DelegationEvent:
    return event_from_jsonable(_parse(text))


def result_from_jsonable(value: Any) -> DelegationResult:
    return _read(value, DelegationResult)


def result_from_json(text: str | bytes) -> DelegationResult:
    return result_from_jsonable(_parse(text))
