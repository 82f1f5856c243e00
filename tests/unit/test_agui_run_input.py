"""The server reads a `RunAgentInput` (`POST /agui`, `POST /runs`) with the protocol's own model,
`ag_ui.core.RunAgentInput`, and keeps what it uses: the prompt, the ids, the visibility mode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.server import MAX_PROMPT_CHARS, HttpError, _read_run_input


def user(content: Any, id: str = "u") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": content}


def test_the_prompt_is_the_last_user_messages_text() -> None:
    messages = [
        user("first"),
        {"id": "a", "role": "assistant", "content": "an answer"},
        user(
            [
                {"type": "text", "text": "look at"},
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
                {"type": "text", "text": "this"},
            ],
            id="u2",
        ),
        {"id": "t", "role": "tool", "content": "42", "toolCallId": "c"},
    ]
    prompt, thread_id, run_id, mode = _read_run_input({"messages": messages}, None)
    assert (prompt, thread_id, run_id, mode) == ("look at this", None, None, None)


def test_what_the_server_makes_itself_may_be_left_out() -> None:
    assert _read_run_input({}, None) == ("", None, None, None)
    assert _read_run_input({"threadId": "t", "runId": "r", "messages": []}, None) == (
        "",
        "t",
        "r",
        None,
    )


def test_the_mode_comes_from_the_query_else_forwarded_props() -> None:
    body = {"messages": [user("hi")], "forwardedProps": {"mode": "custom"}}
    assert _read_run_input(body, None)[3] == "custom"
    assert _read_run_input(body, "hidden")[3] == "hidden"
    assert _read_run_input({**body, "forwardedProps": "custom"}, None)[3] is None
    with pytest.raises(HttpError) as refused:
        _read_run_input({**body, "forwardedProps": {"mode": "loud"}}, None)
    assert refused.value.error == "bad_mode"


def test_a_prompt_over_the_limit_is_refused() -> None:
    with pytest.raises(HttpError, match="over 65536 characters"):
        _read_run_input({"messages": [user("x" * (MAX_PROMPT_CHARS + 1))]}, None)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["messages", "role", "content", "id", "type", "text", "threadId"])
                | st.text(max_size=4),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_any_json_body_is_read_or_refused_with_a_400(document: Any) -> None:
    refusal = None
    try:
        _read_run_input(document, None)
    except HttpError as exc:
        refusal = exc
    if refusal is not None:
        assert refusal.status == 400 and refusal.error in ("bad_input", "bad_mode")
        assert refusal.message and len(refusal.message) < 400
