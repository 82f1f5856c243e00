"""The parent model's lean view of a result (`engine.parent_view`): said once, within the budget,
and whatever does not fit readable by reference, exactly."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.mcp import read_output_call, read_output_uri, render_page, render_result
from engine import (
    MIN_RESULT_CHARS,
    ArtifactRef,
    DelegationError,
    DelegationPolicy,
    DelegationResult,
    ErrorCode,
    OutputReference,
    RegistryError,
    ResultMessage,
    Status,
    delegation_output,
    output_page,
    parent_view,
)
from engine._parent_view import output_texts

REFERENCE = OutputReference(uri="subagent://runs/r/delegations/d/output", tool="read_output")


def _result(**fields: object) -> DelegationResult:
    base: dict[str, object] = {
        "delegation_id": "del-1",
        "agent": "research",
        "remote_protocol": "a2a",
        "status": Status.COMPLETED,
        "run_id": "run-1",
    }
    return DelegationResult(**{**base, **fields})  # type: ignore[arg-type]


def _json_chars(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


# -- said once ----------------------------------------------------------------------------


def test_a_summary_that_repeats_the_final_message_is_said_once() -> None:
    answer = "The answer is 42, because of the reasons listed."
    result = _result(summary=answer, messages=(ResultMessage(role="assistant", text=answer),))
    view = parent_view(result, reference=REFERENCE)
    assert view.text.count(answer) == 1
    assert view.structured["output"]["text"] == answer
    assert "summary" not in view.structured and "messages" not in view.structured


def test_a_clipped_summary_of_the_message_is_left_out() -> None:
    message = "x" * 50 + " long answer " + "y" * 50
    result = _result(
        summary=message[:40] + "…", messages=(ResultMessage(role="agent", text=message),)
    )
    assert output_texts(result) == [message]


def test_a_message_contained_in_the_summary_is_left_out() -> None:
    result = _result(
        summary="Findings: all good. Details follow.",
        messages=(ResultMessage(role="assistant", text="all good"),),
    )
    assert output_texts(result) == ["Findings: all good. Details follow."]


def test_a_distinct_summary_comes_first_marked() -> None:
    result = _result(
        summary="Short: yes.",
        messages=(ResultMessage(role="assistant", text="The long answer."),),
    )
    assert output_texts(result) == ["Summary: Short: yes.", "The long answer."]


def test_an_output_that_fits_has_no_reference_note() -> None:
    view = parent_view(_result(summary="ok"), reference=REFERENCE)
    assert view.next_offset is None and "truncated" not in view.text
    assert view.structured["output"]["truncated"] is False


# -- budget and reference -----------------------------------------------------------------


def test_the_default_budget_bounds_a_big_answer_and_names_the_rest() -> None:
    big = "\n".join(f"line {i}: " + "word " * 20 + "end" for i in range(2000))
    result = _result(messages=(ResultMessage(role="assistant", text=big),), summary=big[:3999])
    view = parent_view(result, reference=REFERENCE)
    assert len(view.text) <= 16_000 and _json_chars(view.structured) <= 16_000
    assert view.next_offset is not None and view.total == len(big)
    assert f"read_output(delegation_id='del-1', offset={view.next_offset})" in view.text
    rest = output_page(delegation_output(result), view.next_offset, 10**9).text
    assert view.structured["output"]["text"] + rest == big


def test_artifacts_are_in_structure_only_when_their_line_is_shown() -> None:
    artifacts = tuple(
        ArtifactRef(id=f"a{i}", name=f"file{i}.txt", uri=f"host://a/{i}" + "p" * 300)
        for i in range(40)
    )
    view = parent_view(
        _result(summary="done", artifacts=artifacts), budget=MIN_RESULT_CHARS, reference=REFERENCE
    )
    shown = view.structured["artifacts"]
    assert 0 < len(shown) < 40
    assert all(a["uri"] in view.text for a in shown)
    assert artifacts[len(shown)].uri not in view.text


def test_a_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        parent_view(_result(), budget=MIN_RESULT_CHARS - 1, reference=REFERENCE)
    with pytest.raises(RegistryError, match="max_result_chars"):
        DelegationPolicy(max_result_chars=100)
    assert DelegationPolicy().max_result_chars == 16_000


@pytest.mark.parametrize(
    ("offset", "limit", "field"), [(-1, 5, "offset"), (11, 5, "offset"), (0, 0, "limit")]
)
def test_output_page_refuses_bad_bounds(offset: int, limit: int, field: str) -> None:
    with pytest.raises(DelegationError) as caught:
        output_page("0123456789", offset, limit)
    assert caught.value.code == ErrorCode.INVALID_INPUT
    assert caught.value.metadata == {"field": field}


def test_output_page_at_the_end_is_empty_with_no_next() -> None:
    page = output_page("abc", 3, 10)
    assert page.text == "" and page.next_offset is None and page.total == 3


# -- the MCP reading of references ---------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "delegation_id"),
        ({"delegation_id": "has space"}, "delegation_id"),
        ({"delegation_id": "d", "offset": -1}, "offset"),
        ({"delegation_id": "d", "offset": True}, "offset"),
        ({"delegation_id": "d", "limit": 0}, "limit"),
        ({"delegation_id": "d", "extra": 1}, "extra"),
    ],
)
def test_read_output_call_refuses_bad_arguments(arguments: dict[str, object], field: str) -> None:
    with pytest.raises(DelegationError) as caught:
        read_output_call(arguments)
    assert caught.value.code == ErrorCode.INVALID_INPUT
    assert (caught.value.metadata or {}).get("field") == field


def test_output_uri_of_another_run_is_not_found() -> None:
    uri = "subagent://runs/run-2/delegations/d/output"
    with pytest.raises(DelegationError) as caught:
        read_output_uri(uri, "run-1")
    assert caught.value.code == ErrorCode.DELEGATION_NOT_FOUND
    for bad in ("file:///etc/passwd", "subagent://runs/run-1/delegations/d", "subagent://x/run-1"):
        with pytest.raises(DelegationError):
            read_output_uri(bad, "run-1")
    with pytest.raises(DelegationError) as bad_offset:
        read_output_uri("subagent://runs/run-1/delegations/d/output?offset=x", "run-1")
    assert bad_offset.value.code == ErrorCode.INVALID_INPUT
    read = read_output_uri("subagent://runs/run-1/delegations/d/output?offset=5&limit=7", "run-1")
    assert (read.delegation_id, read.offset, read.limit) == ("d", 5, 7)


def test_a_page_is_the_first_content_block_exactly() -> None:
    rendered = render_page("d", output_page("hello world", 6, 3))
    assert rendered.content[0].text == "wor"  # type: ignore[union-attr]
    assert "offset=9" in rendered.content[1].text  # type: ignore[union-attr]
    assert rendered.structured_content == {
        "delegation_id": "d",
        "text": "wor",
        "offset": 6,
        "next_offset": 9,
        "total_chars": 11,
    }


# -- properties ---------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=9000)
_short = st.text(st.characters(codec="utf-8"), min_size=1, max_size=300)
_artifact = st.builds(
    ArtifactRef,
    id=st.none() | _short,
    name=st.none() | _short,
    mime_type=st.none() | _short,
    uri=st.none() | _short,
    size_bytes=st.none() | st.integers(0, 10**12),
)
_error = st.builds(
    DelegationError,
    code=st.sampled_from([ErrorCode.REMOTE_FAILED, ErrorCode.OUTPUT_TOO_LARGE]),
    message=st.text(max_size=3000),
)


@st.composite
def _results(draw: st.DrawFn) -> DelegationResult:
    messages = tuple(
        ResultMessage(role=draw(st.sampled_from(["assistant", "user", "tool"])), text=draw(_text))
        for _ in range(draw(st.integers(0, 5)))
    )
    summary = draw(
        st.none()
        | _text
        | (st.just(messages[-1].text) if messages else st.none())
        | (st.just(messages[-1].text[:100] + "…") if messages else st.none())
    )
    return _result(
        delegation_id=draw(st.text(min_size=1, max_size=400)),
        remote_task_id=draw(st.none() | st.text(max_size=400)),
        status=draw(st.sampled_from([Status.COMPLETED, Status.FAILED])),
        summary=summary,
        messages=messages,
        artifacts=tuple(draw(st.lists(_artifact, max_size=30))),
        error=draw(st.none() | _error),
    )


@settings(max_examples=150, deadline=None)
@given(result=_results(), budget=st.integers(MIN_RESULT_CHARS, 20_000))
def test_any_view_fits_says_each_text_once_and_the_reference_gives_exactly_the_rest(
    result: DelegationResult, budget: int
) -> None:
    view = parent_view(result, budget=budget, reference=REFERENCE)
    assert len(view.text) <= budget
    assert _json_chars(view.structured) <= budget
    output = delegation_output(result)
    shown = view.structured["output"]["text"]
    assert output.startswith(shown) and len(shown) == view.shown
    assert shown in view.text  # text and structure say the same
    # No kept text is contained in another one (compared as the rule does: without the
    # `Summary: ` and `[role] ` labels the view adds).
    texts = [
        re.sub(r"^\[(user|tool)\] ", "", t.removeprefix("Summary: ")).strip()
        for t in output_texts(result)
    ]
    for i, one in enumerate(texts):
        assert not any(one in other for j, other in enumerate(texts) if j != i)
    if view.next_offset is None:
        assert shown == output
    else:
        assert f"offset={view.next_offset}" in view.text and REFERENCE.uri in view.text
        rest, offset = "", view.next_offset
        while offset is not None:
            page = output_page(output, offset, budget)
            assert len(page.text) <= budget
            rest += page.text
            offset = page.next_offset
        assert shown + rest == output


@settings(max_examples=100, deadline=None)
@given(answer=st.text(st.characters(codec="utf-8"), min_size=30, max_size=20_000))
def test_an_answer_repeated_as_summary_reaches_the_model_once(answer: str) -> None:
    result = _result(
        summary=answer if len(answer) < 4000 else answer[:3999] + "…",
        messages=(ResultMessage(role="assistant", text=answer),),
    )
    rendered = render_result(result)
    text = rendered.content[0].text  # type: ignore[union-attr]
    head = answer.strip()[:30]
    if head:
        assert text.count(head) <= 1 + answer.strip().count(head) - 1
    assert len(text) <= 16_000 and _json_chars(rendered.structured_content) <= 16_000


def test_the_host_file_sets_the_budget_per_agent_and_refuses_a_tiny_one() -> None:
    from web.config import ConfigError, parse_config

    text = """
[[agents]]
key = "research"
protocol = "a2a"
card_url = "http://127.0.0.1:9/.well-known/agent-card.json"
[agents.policy]
max_result_chars = {}
"""
    assert parse_config(text.format(8000), "h.toml").agents[0].policy.max_result_chars == 8000
    with pytest.raises(ConfigError, match=r"h.toml:7: agents\[0\].policy.max_result_chars"):
        parse_config(text.format(100), "h.toml")
