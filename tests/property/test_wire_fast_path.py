"""Reading an event directly gives exactly what the converter gives, for every input.

`engine._wire` reads the shape `to_json` writes without cattrs and leaves anything else to the
converter. These properties hold the public readers to the converter alone (`_wire._read`):
the same values of the same types (1.0 is not 1, -0.0 is not 0.0), the same objects passed
through where the converter passes them (`args`, `result`, `raw`, metadata), or both refusing
with `WireError`. Inputs: every event the engine can write, those documents mutated field by
field, random JSON documents built from the event's vocabulary, and Python values no JSON
parser gives (subclasses of str and dict, tuples, NaN, integers beyond a float's range). The
text layer (one shared decoder, the surrogate hint looked for in two steps) is held to
`json.loads` and to the single pattern it replaces.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import attrs
import hypothesis
import pytest
from hypothesis import strategies as st

from engine import (
    ArtifactRef,
    DelegationError,
    DelegationEvent,
    DropReport,
    WireError,
    _wire,
    event_from_json,
    event_from_jsonable,
    to_json,
    to_jsonable,
)
from engine.testing._store_kit import _events

# -- comparing outcomes ------------------------------------------------------------------------


def _typed(value: Any) -> Any:
    """`value` as nested tuples that tell types apart (and NaN equal to itself)."""
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return (type(value), tuple(_typed(getattr(value, f.name)) for f in fields))
    if isinstance(value, dict):
        return (type(value), tuple((_typed(k), _typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_typed(item) for item in value))
    if isinstance(value, float):
        return (float, repr(value))
    return (type(value), value)


#: Where the converter hands on an object of the document itself (or builds a new one).
_PASSED_ON: Final = (
    ("args",),
    ("result",),
    ("raw",),
    ("artifact", "metadata"),
    ("error", "metadata"),
    ("dropped", "kinds"),
)


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    return value


def _outcome(read: Any, value: Any) -> Any:
    try:
        event = read(value)
    except WireError:
        return "refused"
    shared = tuple(
        _at(event, path) is _at(value, path) and _at(value, path) is not None for path in _PASSED_ON
    )
    return (_typed(event), shared)


def _converter(value: Any) -> DelegationEvent:
    return _wire._read(value, DelegationEvent)


def _assert_read_alike(value: Any) -> None:
    assert _outcome(event_from_jsonable, value) == _outcome(_converter, value)


# -- strategies --------------------------------------------------------------------------------

_scalars: Final = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_json_values: Final = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_json_objects: Final = st.dictionaries(st.text(max_size=6), _json_values, max_size=3)
_maybe_text: Final = st.none() | st.text(max_size=12)
_maybe_int: Final = st.none() | st.integers(-(2**40), 2**40)

_artifacts: Final = st.builds(
    ArtifactRef,
    id=_maybe_text,
    name=_maybe_text,
    description=_maybe_text,
    mime_type=_maybe_text,
    uri=_maybe_text,
    size_bytes=_maybe_int,
    metadata=st.none() | _json_objects,
)
_errors: Final = st.builds(
    DelegationError,
    code=st.sampled_from(["remote_timeout", "remote_failed", "x.unknown", ""]),
    message=st.text(max_size=12),
    retryable=st.none() | st.booleans(),
    remote_status=_maybe_text,
    metadata=st.none() | _json_objects,
)
_drop_reports: Final = st.builds(
    DropReport,
    reason=st.text(max_size=12),
    count=st.integers(0, 2**40),
    bytes=st.integers(0, 2**40),
    kinds=st.none() | st.dictionaries(st.text(max_size=12), st.integers(0, 100), max_size=3),
    first_cursor=_maybe_int,
    last_cursor=_maybe_int,
)

_TEXT_FIELDS: Final = sorted(_wire._EVENT_TEXTS - {"kind", "run_id"})

#: Every field of an event, each with a value of its type (or its default).
_full_events: Final = st.builds(
    DelegationEvent,
    kind=st.text(max_size=24),
    run_id=st.text(max_size=12),
    sequence=st.integers(-(2**70), 2**70),
    time=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
    args=_json_values,
    result=_json_values,
    artifact=st.none() | _artifacts,
    error=st.none() | _errors,
    dropped=st.none() | _drop_reports,
    synthesized=st.booleans(),
    depth=_maybe_int,
    raw=st.none() | _json_objects,
    extra=st.none() | st.just({"newer_field": [1, "two"]}),
    **{name: _maybe_text for name in _TEXT_FIELDS},
)


@st.composite
def _written_events(draw: st.DrawFn) -> DelegationEvent:
    if draw(st.booleans()):
        return draw(_full_events)
    return draw(_events(draw))


class _Text(str):
    pass


class _Object(dict):  # type: ignore[type-arg]
    pass


#: Values no JSON parser gives, for callers of `event_from_jsonable`.
_odd_values: Final = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        -0.0,
        10**400,
        True,
        (),
        ("a",),
        b"x",
        _Text("text"),
        _Object(code="c"),
        _Object(),
        {1: "non-string key"},
        {"code": _Text("c"), "message": "m"},
    ]
)

_FIELD_NAMES: Final = [f.name for f in attrs.fields(DelegationEvent)]
_NESTED_NAMES: Final = sorted(
    {f.name for cls in (ArtifactRef, DelegationError, DropReport) for f in attrs.fields(cls)}
)
_keys: Final = st.sampled_from([*_FIELD_NAMES, *_NESTED_NAMES]) | st.text(max_size=6)
_values: Final = _json_values | _odd_values
_nested_documents: Final = st.dictionaries(_keys, _values, max_size=6)
_documents: Final = st.dictionaries(_keys, _values | _nested_documents, max_size=10)
#: A valid start (`kind` and `run_id`), then known fields holding anything.
_started_documents: Final = st.builds(
    lambda kind, run_id, more: {"kind": kind, "run_id": run_id, **more},
    st.text(max_size=4),
    st.text(max_size=4),
    st.dictionaries(st.sampled_from(_FIELD_NAMES), _values | _nested_documents, max_size=4),
)


@st.composite
def _mutated(draw: st.DrawFn) -> Any:
    """What `to_json` writes for an event, with fields dropped, replaced or added, at the top
    or inside a nested model."""
    document = to_jsonable(draw(_written_events()))
    for _ in range(draw(st.integers(1, 4))):
        target = document
        nested = [k for k in ("artifact", "error", "dropped") if isinstance(document.get(k), dict)]
        inside: bool = draw(st.booleans())
        if nested and inside:
            target = document[draw(st.sampled_from(nested))]
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop" and target:
            del target[draw(st.sampled_from(sorted(target)))]
        elif action == "replace" and target:
            target[draw(st.sampled_from(sorted(target)))] = draw(_values | _nested_documents)
        else:
            target[draw(_keys)] = draw(_values | _nested_documents)
    return document


# -- properties --------------------------------------------------------------------------------


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(event=_written_events())
def test_every_event_the_engine_writes_is_read_directly_as_the_converter_reads_it(
    event: DelegationEvent,
) -> None:
    document = to_jsonable(event)
    direct = _wire._event_directly(document)
    if event.extra:  # fields this version does not know: the converter keeps them in `extra`
        assert direct is None
    else:
        assert direct is not None
        assert _typed(direct) == _typed(_converter(document))
    _assert_read_alike(document)
    text = to_json(event)
    assert _typed(event_from_json(text)) == _typed(_converter(_wire._parse(text)))
    assert _typed(event_from_json(text.encode())) == _typed(event_from_json(text))


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(document=_mutated())
def test_a_written_event_changed_anywhere_is_read_as_the_converter_reads_it(document: Any) -> None:
    _assert_read_alike(document)


@hypothesis.settings(max_examples=600, deadline=None)
@hypothesis.given(value=_started_documents | _documents | _values)
def test_any_document_is_read_as_the_converter_reads_it(value: Any) -> None:
    _assert_read_alike(value)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return
    try:
        expected = _typed(_converter(_wire._parse(text)))
    except WireError:
        expected = "refused"
    try:
        read = _typed(event_from_json(text))
    except WireError:
        read = "refused"
    assert read == expected


@pytest.mark.parametrize(
    "document",
    [
        {"kind": "k", "run_id": "r", "time": 3},  # an integer time is read as a float
        {"kind": "k", "run_id": "r", "time": 10**400},  # ... unless it has none
        {"kind": "k", "run_id": "r", "time": True},
        {"kind": "k", "run_id": "r", "sequence": 1.0},
        {"kind": "k", "run_id": "r", "sequence": True},
        {"kind": "k", "run_id": "r", "depth": False},
        {"kind": "k", "run_id": "r", "synthesized": 1},
        {"kind": "k", "run_id": "r", "synthesized": None},
        {"kind": "k", "run_id": "r", "delta": 1},
        {"kind": "k", "run_id": "r", "artifact": None, "error": None, "dropped": None},
        {"kind": "k", "run_id": "r", "extra": {"a": 1}},
        {"kind": "k", "run_id": "r", "newer": 1},
        {"kind": "k"},
        {"kind": None, "run_id": "r"},
        {"kind": "k", "run_id": "r", "error": {"message": "no code"}},
        {"kind": "k", "run_id": "r", "error": {"code": "c", "metadata": {}}},
        {"kind": "k", "run_id": "r", "error": {"code": "c", "retryable": 1}},
        {"kind": "k", "run_id": "r", "error": {"code": "c", 1: "x"}},
        {"kind": "k", "run_id": "r", "error": {"code": "c", "unknown": object()}},
        {"kind": "k", "run_id": "r", "artifact": {"size_bytes": True, "x": 1}},
        {"kind": "k", "run_id": "r", "artifact": {"uri": "u", "unknown": 1}},
        {"kind": "k", "run_id": "r", "dropped": {"count": 1}},
        {"kind": "k", "run_id": "r", "dropped": {"reason": "r", "kinds": {"a": True}}},
        {"kind": "k", "run_id": "r", "dropped": {"reason": "r", "kinds": {"a": 1}, "z": 0}},
        {"kind": "k", "run_id": "r", "raw": {"a": 1}, "args": ("tuple",)},
        {"kind": "k", "run_id": "r", "raw": _Object(a=1)},
        {"kind": _Text("k"), "run_id": "r"},
        _Object(kind="k", run_id="r"),
        [("kind", "k")],
        None,
    ],
)
def test_edge_documents_are_read_as_the_converter_reads_them(document: Any) -> None:
    _assert_read_alike(document)


# -- the text layer ----------------------------------------------------------------------------

_OLD_HINT: Final = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_any_text: Final = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
_json_ish_text: Final = st.lists(
    st.sampled_from(["\\u", "\\ud8", "\\uD9", "\\udc00", "\\ue000", "\ud800", "\udfff", "é", "a"])
    | _any_text,
    max_size=6,
).map("".join)


@hypothesis.settings(max_examples=500, deadline=None)
@hypothesis.given(text=_json_ish_text)
def test_the_surrogate_hint_finds_what_the_single_pattern_finds(text: str) -> None:
    assert _wire._spells_a_surrogate(text) == (_OLD_HINT.search(text) is not None)


def _loads_outcome(loads: Any, text: Any) -> Any:
    try:
        return ("value", _typed(loads(text)))
    except Exception as exc:  # the same exception, with the same message
        return (type(exc), str(exc))


def _json_loads(text: Any) -> Any:
    return json.loads(text, parse_constant=_wire._no_constant, parse_float=_wire._finite_float)


_encodings: Final = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"])


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    value=_json_values | _documents.filter(lambda d: _can_dump(d)),
    bom=st.booleans(),
    encoding=_encodings,
    junk=st.sampled_from(["", "x", "NaN", "1e999", ",", "\ud800"]),
)
def test_the_shared_decoder_reads_as_json_loads_does(
    value: Any, bom: bool, encoding: str, junk: str
) -> None:
    text = ("\ufeff" if bom else "") + json.dumps(value, ensure_ascii=False) + junk
    inputs: list[Any] = [text, text.encode("utf-8", "surrogatepass")]
    try:
        inputs.append(text.encode(encoding))
    except UnicodeEncodeError:
        pass
    inputs.append(bytearray(inputs[1]))
    for document in inputs:
        assert _loads_outcome(_wire._loads, document) == _loads_outcome(_json_loads, document)


def _can_dump(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return False
    return not any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(value))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]
