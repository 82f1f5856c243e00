"""A delegation's question put to the parent's user through MCP elicitation, sans-IO.

This module owns what the endpoint asks and how it reads what comes back, with no I/O of its
own: which questions can be asked this way and how (`plan_elicitation`: form mode with a
requested schema, or URL mode for an `auth_required` question with a sign-in address, so that
credentials never pass through the MCP client or its model), the flat schema a form may carry
(`requested_schema`), reading an accepted form into the engine's answer (`read_elicited`), and
the round-trip state of the stateless protocol version (`RoundState`, which the endpoint also
seals: see `adapters.mcp._endpoint`).

Elicitation is specified at https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation:
a form's `requestedSchema` is an object of top-level primitive properties (string with optional
`format` email / uri / date / date-time and length bounds; number or integer with bounds;
boolean; single-select enums as `enum` or `oneOf` of `const`/`title`; multi-select as an
`array` of such items). A question whose response schema is not of that shape gets one required
string property `answer` instead (the user is told to write JSON when the schema wants an
object); either way the answer is checked against the question's own schema by the engine
(`Run.answer`), and a mismatch is asked again with the reason, a bounded number of times
(`MAX_ASKS`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import mcp_types as types

from engine import DelegationError, ErrorCode, Question, QuestionReason

__all__ = [
    "ANSWER_FIELD",
    "ELICITATION_KEY",
    "MAX_ASKS",
    "ElicitedAnswer",
    "ElicitationPlan",
    "RoundState",
    "can_elicit",
    "elicit_request",
    "plan_elicitation",
    "read_elicited",
    "read_state",
    "requested_schema",
    "write_state",
]

#: How many times one question is put to the user when the answers do not match its schema.
MAX_ASKS: Final = 3
#: The one property of a form whose question has no schema that fits a form.
ANSWER_FIELD: Final = "answer"
#: The key of the elicitation among an `InputRequiredResult`'s input requests (2026-07-28).
ELICITATION_KEY: Final = "question"
#: Longest message shown to the user (the remote's question is clipped to fit).
MAX_MESSAGE_CHARS: Final = 4000
#: Longest schema quoted in the message when the answer must be written as JSON.
MAX_QUOTED_SCHEMA_CHARS: Final = 1500
#: Longest request state read back (it names a run, a delegation, a question and a ticket).
MAX_STATE_CHARS: Final = 2048

FORM: Final = "form"
URL: Final = "url"

_STRING_FORMATS: Final = frozenset({"email", "uri", "date", "date-time"})
_ANNOTATIONS: Final = ("title", "description")
_TOP_LEVEL_KEYS: Final = frozenset(
    {"type", "properties", "required", "title", "description", "additionalProperties", "$schema"}
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _labels(source: Mapping[str, Any]) -> dict[str, Any]:
    return {k: source[k] for k in _ANNOTATIONS if isinstance(source.get(k), str)}


def _strings(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)


def _titled_options(options: Any) -> list[dict[str, str]] | None:
    if not isinstance(options, list) or not options:
        return None
    out = []
    for option in options:
        if not (
            isinstance(option, Mapping)
            and isinstance(option.get("const"), str)
            and isinstance(option.get("title"), str)
        ):
            return None
        out.append({"const": option["const"], "title": option["title"]})
    return out


def _primitive(prop: Any) -> dict[str, Any] | None:
    """The form property for one JSON Schema property, or None if a form cannot show it.
    Keywords a form has no use for (`pattern`, `multipleOf`...) are left out of the form;
    the engine still checks the answer against them."""
    if not isinstance(prop, Mapping):
        return None
    kind = prop.get("type")
    out: dict[str, Any] = {"type": kind, **_labels(prop)}
    if kind == "string":
        if "enum" in prop:
            if not _strings(prop["enum"]):
                return None
            out["enum"] = list(prop["enum"])
            if _strings(prop.get("enumNames")) and len(prop["enumNames"]) == len(prop["enum"]):
                out["enumNames"] = list(prop["enumNames"])
        elif "oneOf" in prop:
            options = _titled_options(prop["oneOf"])
            if options is None:
                return None
            out["oneOf"] = options
        else:
            if prop.get("format") in _STRING_FORMATS:
                out["format"] = prop["format"]
            for bound in ("minLength", "maxLength"):
                if _is_int(prop.get(bound)):
                    out[bound] = prop[bound]
        if isinstance(prop.get("default"), str):
            out["default"] = prop["default"]
        return out
    if kind in ("number", "integer"):
        for bound in ("minimum", "maximum"):
            if _is_number(prop.get(bound)):
                out[bound] = prop[bound]
        if _is_number(prop.get("default")):
            out["default"] = prop["default"]
        return out
    if kind == "boolean":
        if isinstance(prop.get("default"), bool):
            out["default"] = prop["default"]
        return out
    if kind == "array":
        items = prop.get("items")
        if not isinstance(items, Mapping):
            return None
        if items.get("type") == "string" and _strings(items.get("enum")):
            out["items"] = {"type": "string", "enum": list(items["enum"])}
        else:
            options = _titled_options(items.get("anyOf"))
            if options is None:
                return None
            out["items"] = {"anyOf": options}
        for bound in ("minItems", "maxItems"):
            if _is_int(prop.get(bound)):
                out[bound] = prop[bound]
        if _strings(prop.get("default")):
            out["default"] = list(prop["default"])
        return out
    return None


def requested_schema(schema: Any) -> dict[str, Any] | None:
    """The form schema for a question's response schema when a form can carry it (an object of
    top-level primitive properties, see the module docs), else None."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    if set(schema) - _TOP_LEVEL_KEYS:
        return None  # combinators, nested definitions...: not a flat form
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    form: dict[str, Any] = {}
    for name, prop in properties.items():
        field = _primitive(prop)
        if not isinstance(name, str) or field is None:
            return None
        form[name] = field
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in form for r in required):
        return None
    out: dict[str, Any] = {"type": "object", "properties": form}
    if required:
        out["required"] = list(required)
    return out


@attrs.frozen(kw_only=True)
class ElicitationPlan:
    """How one question is put to the user: `mode` (`form` or `url`), the `message`, and for a
    form its `schema` and how the answer is read (`answer_field`: the single string property
    of a question whose schema a form cannot carry; `json_answer`: that string is JSON of an
    object the question's schema describes); for URL mode the `url`."""

    question: Question
    mode: str
    message: str
    schema: dict[str, Any] | None = None
    answer_field: str | None = None
    json_answer: bool = False
    url: str | None = None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _message(question: Question, tail: str = "", retry_reason: str | None = None) -> str:
    who = question.agent_name or question.agent_key or "A remote agent"
    head = f"Your answer did not fit: {_clip(retry_reason, 400)}\n\n" if retry_reason else ""
    body = _clip(question.text.strip() or "(the agent gave no details)", MAX_MESSAGE_CHARS)
    return _clip(f"{head}{who} asks: {body}{tail}", MAX_MESSAGE_CHARS + 600)


def _web_url(url: str | None) -> str | None:
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def plan_elicitation(
    question: Question, *, retry_reason: str | None = None
) -> ElicitationPlan | None:
    """How to ask `question`, or None when elicitation cannot ask it: an `auth_required`
    question without an http(s) sign-in address (credentials are never asked for in a form).
    `retry_reason` (why the last answer did not fit) is put before the question."""
    if question.reason == QuestionReason.AUTH:
        url = _web_url(question.auth_url)
        if url is None:
            return None
        tail = "\n\nSign in at the address given; nothing you enter there passes through here."
        return ElicitationPlan(
            question=question,
            mode=URL,
            message=_message(question, tail, retry_reason),
            url=url,
        )
    schema = question.response_schema
    form = requested_schema(schema) if schema is not None else None
    if form is not None:
        return ElicitationPlan(
            question=question,
            mode=FORM,
            message=_message(question, "", retry_reason),
            schema=form,
        )
    json_answer = isinstance(schema, Mapping) and schema.get("type") == "object"
    field: dict[str, Any] = {"type": "string", "title": "Answer", "minLength": 1}
    tail = ""
    if json_answer:
        quoted = _clip(json.dumps(schema, separators=(",", ":")), MAX_QUOTED_SCHEMA_CHARS)
        tail = f"\n\nAnswer with a JSON object matching this schema: {quoted}"
        field["description"] = "A JSON object"
    return ElicitationPlan(
        question=question,
        mode=FORM,
        message=_message(question, tail, retry_reason),
        schema={"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]},
        answer_field=ANSWER_FIELD,
        json_answer=json_answer,
    )


@attrs.frozen
class ElicitedAnswer:
    """An accepted form, as `Run.answer` takes it."""

    text: str | None = None
    data: dict[str, Any] | None = None


def _not_fitting(plan: ElicitationPlan, reason: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.ANSWER_INVALID,
        message=reason,
        metadata={"question_id": plan.question.id, "reason": reason, "path": ""},
    )


def read_elicited(plan: ElicitationPlan, content: Mapping[str, Any] | None) -> ElicitedAnswer:
    """The answer an accepted form gives. Raises `DelegationError` `answer_invalid` when the
    form came back without what it asked for (the caller asks again)."""
    if not isinstance(content, Mapping):
        raise _not_fitting(plan, "The form came back empty.")
    if plan.answer_field is None:
        data = {str(k): v for k, v in content.items() if v is not None}
        if not data:
            raise _not_fitting(plan, "The form came back empty.")
        return ElicitedAnswer(data=data)
    text = content.get(plan.answer_field)
    if not isinstance(text, str) or not text.strip():
        raise _not_fitting(plan, f"The form needs '{plan.answer_field}' (text).")
    if plan.json_answer:
        try:
            data = json.loads(text)
        except ValueError:
            raise _not_fitting(plan, "The answer must be a JSON object.") from None
        if not isinstance(data, dict):
            raise _not_fitting(plan, "The answer must be a JSON object.")
        return ElicitedAnswer(data=data)
    return ElicitedAnswer(text=text)


def can_elicit(capabilities: types.ClientCapabilities | None, mode: str) -> bool:
    """Whether a client that declared `capabilities` takes an elicitation in `mode`. An empty
    `elicitation` capability means form mode (clients from before URL mode declare it so)."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    if mode == URL:
        return elicitation.url is not None
    return elicitation.form is not None or elicitation.url is None


def elicit_request(plan: ElicitationPlan) -> types.ElicitRequest:
    """The `elicitation/create` request of a plan, as embedded in an `InputRequiredResult`
    (2026-07-28, where URL mode has no elicitation id)."""
    if plan.mode == URL:
        assert plan.url is not None
        return types.ElicitRequest(
            params=types.ElicitRequestURLParams(message=plan.message, url=plan.url)
        )
    assert plan.schema is not None
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=plan.message, requested_schema=plan.schema)
    )


# -- the stateless round trip --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RoundState:
    """What a retried `tools/call` names (2026-07-28 `requestState`): the run, the delegation,
    the question it answers and the endpoint's one-time `ticket` for that round."""

    run_id: str
    delegation_id: str
    question_id: str
    ticket: str


def write_state(state: RoundState) -> str:
    return json.dumps(
        {
            "v": 1,
            "run": state.run_id,
            "delegation": state.delegation_id,
            "question": state.question_id,
            "ticket": state.ticket,
        },
        separators=(",", ":"),
    )


def read_state(text: Any) -> RoundState:
    """The round a `requestState` names. Raises `DelegationError` `invalid_input` for anything
    `write_state` did not write."""
    fields = ("run", "delegation", "question", "ticket")
    try:
        if not isinstance(text, str) or len(text) > MAX_STATE_CHARS:
            raise ValueError
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("v") != 1:
            raise ValueError
        values = [document[name] for name in fields]
        if not all(isinstance(v, str) and v for v in values):
            raise ValueError
    except (ValueError, KeyError):
        raise DelegationError(
            code=ErrorCode.INVALID_INPUT,
            message="The requestState is not one this endpoint wrote.",
            metadata={"field": "requestState"},
        ) from None
    run_id, delegation_id, question_id, ticket = values
    return RoundState(
        run_id=run_id, delegation_id=delegation_id, question_id=question_id, ticket=ticket
    )
