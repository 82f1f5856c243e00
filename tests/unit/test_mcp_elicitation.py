"""The sans-IO part of asking through MCP elicitation (`adapters.mcp._elicitation`): which
schemas a form can carry, how a question is asked, how an accepted form is read, and the
2026-07-28 round state."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from adapters.mcp._elicitation import (
    ANSWER_FIELD,
    MAX_MESSAGE_CHARS,
    RoundState,
    can_elicit,
    elicit_request,
    plan_elicitation,
    read_elicited,
    read_state,
    requested_schema,
    write_state,
)
from engine import DelegationError, ErrorCode, Question, QuestionReason


def question(**fields: Any) -> Question:
    base: dict[str, Any] = {
        "id": "del-1-input-4",
        "run_id": "run-1",
        "delegation_id": "del-1",
        "agent_key": "research",
        "agent_name": "Research",
        "text": "Which year?",
    }
    return Question(**{**base, **fields})


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


# -- requested_schema --------------------------------------------------------------------


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "string", "title": "Name", "minLength": 1, "maxLength": 40},
        {"type": "string", "format": "email"},
        {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
        {"type": "number", "description": "Ratio"},
        {"type": "boolean", "default": False},
        {"type": "string", "enum": ["a", "b"]},
        {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"]},
        {"type": "string", "oneOf": [{"const": "a", "title": "A"}]},
        {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 2},
        {"type": "array", "items": {"anyOf": [{"const": "x", "title": "X"}]}},
    ],
)
def test_a_flat_schema_of_primitives_is_carried_as_is(prop: dict[str, Any]) -> None:
    schema = {**obj(value=prop), "required": ["value"]}
    assert requested_schema(schema) == schema


def test_keywords_a_form_cannot_show_are_left_out_of_it() -> None:
    schema = obj(code={"type": "string", "pattern": "^[A-Z]+$", "maxLength": 5})
    assert requested_schema(schema) == obj(code={"type": "string", "maxLength": 5})


def test_an_unknown_string_format_is_left_out() -> None:
    assert requested_schema(obj(x={"type": "string", "format": "ipv4"})) == obj(
        x={"type": "string"}
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "object"},
        obj(),
        obj(nested=obj(x={"type": "string"})),
        obj(many={"type": ["string", "null"]}),
        obj(tags={"type": "array", "items": {"type": "string"}}),
        obj(choice={"type": "string", "enum": [1, 2]}),
        obj(choice={"type": "string", "oneOf": [{"const": "a"}]}),
        {**obj(x={"type": "string"}), "required": ["y"]},
        {**obj(x={"type": "string"}), "allOf": [{"required": ["x"]}]},
        {**obj(x={"type": "string"}), "$defs": {"y": {"type": "string"}}},
        obj(x={"$ref": "#/$defs/y"}),
        [],
        None,
    ],
)
def test_anything_else_is_no_form(schema: Any) -> None:
    assert requested_schema(schema) is None


# -- plan_elicitation --------------------------------------------------------------------


def test_a_question_with_a_flat_schema_is_a_form_of_that_schema() -> None:
    schema = {**obj(year={"type": "integer"}), "required": ["year"]}
    plan = plan_elicitation(question(response_schema=schema))
    assert plan is not None
    assert (plan.mode, plan.schema, plan.answer_field) == ("form", schema, None)
    assert plan.message == "Research asks: Which year?"


def test_a_question_without_schema_asks_for_one_text_answer() -> None:
    plan = plan_elicitation(question())
    assert plan is not None
    assert plan.answer_field == ANSWER_FIELD and not plan.json_answer
    assert plan.schema == {
        "type": "object",
        "properties": {ANSWER_FIELD: {"type": "string", "title": "Answer", "minLength": 1}},
        "required": [ANSWER_FIELD],
    }


def test_an_object_schema_no_form_can_carry_asks_for_json_and_quotes_it() -> None:
    schema = obj(where=obj(city={"type": "string"}))
    plan = plan_elicitation(question(response_schema=schema))
    assert plan is not None and plan.json_answer
    assert "Answer with a JSON object matching this schema" in plan.message
    assert '"city"' in plan.message


def test_a_retry_says_why_the_last_answer_did_not_fit_first() -> None:
    plan = plan_elicitation(question(), retry_reason="1800 is less than the minimum of 1900")
    assert plan is not None
    assert plan.message.startswith("Your answer did not fit: 1800 is less than")
    assert plan.message.endswith("Research asks: Which year?")


def test_a_long_question_is_clipped() -> None:
    plan = plan_elicitation(question(text="x" * (3 * MAX_MESSAGE_CHARS)))
    assert plan is not None
    assert len(plan.message) < MAX_MESSAGE_CHARS + 100
    assert plan.message.endswith("…")


def test_a_question_of_an_unnamed_agent_still_says_who_asks() -> None:
    plan = plan_elicitation(question(agent_name="", agent_key=""))
    assert plan is not None and plan.message.startswith("A remote agent asks: ")


def test_a_sign_in_question_is_url_mode_never_a_form() -> None:
    url = "https://login.example/authorize?x=1"
    plan = plan_elicitation(question(reason=QuestionReason.AUTH, auth_url=url))
    assert plan is not None
    assert (plan.mode, plan.url, plan.schema) == ("url", url, None)


@pytest.mark.parametrize(
    "url", [None, "", "javascript:alert(1)", "file:///etc/passwd", "https://", "http//x"]
)
def test_a_sign_in_question_without_a_web_address_cannot_be_asked(url: str | None) -> None:
    assert plan_elicitation(question(reason=QuestionReason.AUTH, auth_url=url)) is None


def test_elicit_request_of_each_mode() -> None:
    form = plan_elicitation(question())
    url = plan_elicitation(question(reason=QuestionReason.AUTH, auth_url="https://a.example/"))
    assert form is not None and url is not None
    as_form = elicit_request(form).params
    assert isinstance(as_form, types.ElicitRequestFormParams)
    assert as_form.requested_schema == form.schema
    as_url = elicit_request(url).params
    assert isinstance(as_url, types.ElicitRequestURLParams)
    assert (as_url.url, as_url.elicitation_id) == ("https://a.example/", None)


# -- read_elicited -----------------------------------------------------------------------


def test_a_form_of_the_questions_schema_is_data() -> None:
    plan = plan_elicitation(question(response_schema=obj(year={"type": "integer"})))
    assert plan is not None
    answer = read_elicited(plan, {"year": 2026, "unset": None})
    assert (answer.text, answer.data) == (None, {"year": 2026})


def test_the_one_text_answer_is_text() -> None:
    plan = plan_elicitation(question())
    assert plan is not None
    assert read_elicited(plan, {ANSWER_FIELD: "soon"}).text == "soon"


def test_a_json_answer_is_data() -> None:
    plan = plan_elicitation(question(response_schema=obj(w=obj(c={"type": "string"}))))
    assert plan is not None
    assert read_elicited(plan, {ANSWER_FIELD: '{"w": {"c": "Oslo"}}'}).data == {"w": {"c": "Oslo"}}


@pytest.mark.parametrize(
    ("schema", "content"),
    [
        (obj(year={"type": "integer"}), None),
        (obj(year={"type": "integer"}), {}),
        (obj(year={"type": "integer"}), {"year": None}),
        (None, {}),
        (None, {ANSWER_FIELD: "   "}),
        (None, {ANSWER_FIELD: 5}),
        (obj(w=obj(c={"type": "string"})), {ANSWER_FIELD: "not json"}),
        (obj(w=obj(c={"type": "string"})), {ANSWER_FIELD: "[1, 2]"}),
    ],
)
def test_a_form_without_what_it_asked_for_does_not_fit(schema: Any, content: Any) -> None:
    plan = plan_elicitation(question(response_schema=schema))
    assert plan is not None
    with pytest.raises(DelegationError) as refused:
        read_elicited(plan, content)
    assert refused.value.code == ErrorCode.ANSWER_INVALID
    assert refused.value.metadata is not None
    assert refused.value.metadata["question_id"] == "del-1-input-4"


# -- can_elicit --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elicitation", "form", "url"),
    [
        (None, False, False),
        (types.ElicitationCapability(), True, False),  # declared before URL mode existed
        (types.ElicitationCapability(form=types.FormElicitationCapability()), True, False),
        (types.ElicitationCapability(url=types.UrlElicitationCapability()), False, True),
        (
            types.ElicitationCapability(
                form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
            ),
            True,
            True,
        ),
    ],
)
def test_what_a_client_can_be_asked(elicitation: Any, form: bool, url: bool) -> None:
    capabilities = types.ClientCapabilities(elicitation=elicitation)
    assert (can_elicit(capabilities, "form"), can_elicit(capabilities, "url")) == (form, url)
    assert not can_elicit(None, "form")


# -- the round state ---------------------------------------------------------------------


def test_the_round_state_reads_back() -> None:
    state = RoundState(run_id="run-1", delegation_id="del-1", question_id="q", ticket="t")
    assert read_state(write_state(state)) == state


@pytest.mark.parametrize(
    "text",
    [
        None,
        5,
        "",
        "not json",
        "[]",
        '{"v": 2, "run": "r", "delegation": "d", "question": "q", "ticket": "t"}',
        '{"v": 1, "run": "r", "delegation": "d", "question": "q"}',
        '{"v": 1, "run": "", "delegation": "d", "question": "q", "ticket": "t"}',
        '{"v": 1, "run": 1, "delegation": "d", "question": "q", "ticket": "t"}',
        "x" * 5000,
    ],
)
def test_a_state_it_did_not_write_is_refused(text: Any) -> None:
    with pytest.raises(DelegationError) as refused:
        read_state(text)
    assert refused.value.code == ErrorCode.INVALID_INPUT
