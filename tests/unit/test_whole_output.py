"""A delegation's result keeps its whole text output, so reading it by reference returns exactly
what the remote said: every message uncut, however many, up to `max_text_chars` (past which the
delegation ends `output_too_large`), and the stores read back what they wrote."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.sqlite_archive import open_sqlite_archive
from engine import (
    DelegationIdentity,
    DelegationPolicy,
    DelegationResult,
    DelegationState,
    ErrorCode,
    Kind,
    OutputReference,
    Redactor,
    ResultMessage,
    RunRecord,
    Status,
    TargetUpdate,
    delegation_output,
    output_page,
    parent_view,
    result_from_json,
    to_json,
)
from engine._parent_view import CONTAINMENT_WINDOW, output_texts

IDENTITY = DelegationIdentity(
    run_id="run-1",
    delegation_id="del-1",
    agent_key="research",
    agent_name="Research Agent",
    protocol="inprocess",
)
REFERENCE = OutputReference(uri="subagent://runs/run-1/delegations/del-1/output", tool="read")


def _state(policy: DelegationPolicy | None = None) -> DelegationState:
    return DelegationState(
        IDENTITY, policy or DelegationPolicy(), clock=lambda: 1.0, redactor=Redactor(())
    )


def _say(state: DelegationState, message_id: str, chunks: list[str]) -> None:
    state.feed(TargetUpdate(kind=Kind.TEXT_START, message_id=message_id, role="assistant"))
    for chunk in chunks:
        state.feed(TargetUpdate(kind=Kind.TEXT_DELTA, message_id=message_id, delta=chunk))
    state.feed(TargetUpdate(kind=Kind.TEXT_END, message_id=message_id))


def _fetch(output: str, offset: int, limit: int) -> str:
    """What a parent reads by reference from `offset`, page by page, to the end."""
    text = ""
    next_offset: int | None = offset
    while next_offset is not None:
        page = output_page(output, next_offset, limit)
        text += page.text
        next_offset = page.next_offset
    return text


_chunk = st.text(st.characters(codec="utf-8"), min_size=1, max_size=3_000)


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(st.lists(_chunk, min_size=1, max_size=4), min_size=1, max_size=12),
    budget=st.integers(4_000, 9_000),
)
def test_any_messages_are_kept_whole_and_the_fetch_returns_exactly_their_text(
    messages: list[list[str]], budget: int
) -> None:
    state = _state()
    state.feed(TargetUpdate(kind=Kind.STARTED))
    # A unique tag per message keeps any one from being contained in another (said once).
    texts = [f"[{i}]" + "".join(chunks) for i, chunks in enumerate(messages)]
    for i, chunks in enumerate(messages):
        _say(state, f"m{i}", [f"[{i}]", *chunks])
    state.feed(TargetUpdate(kind=Kind.FINISHED))
    result = state.result
    assert result is not None
    assert [m.text for m in result.messages] == texts  # all of them, none cut
    output = delegation_output(result)
    assert output == "\n\n".join(text.strip() for text in texts)
    view = parent_view(result, budget=budget, reference=REFERENCE)
    assert len(view.text) <= budget
    if view.next_offset is None:
        assert view.structured["output"]["text"] == output
    else:
        assert view.structured["output"]["text"] + _fetch(output, view.next_offset, budget) == (
            output
        )


def test_a_message_longer_than_the_summary_bound_is_kept_whole_the_summary_clipped() -> None:
    answer = "word " * 3_000  # 15,000 characters, past max_summary_chars (4,000)
    state = _state()
    _say(state, "m1", [answer[:7_000], answer[7_000:]])
    state.feed(TargetUpdate(kind=Kind.FINISHED))
    result = state.result
    assert result is not None
    assert result.messages == (ResultMessage(role="assistant", text=answer),)
    assert result.summary == answer[:3_999] + "…"  # clipped as before, and marked
    assert delegation_output(result) == answer.strip()  # the clipped summary is said once


def test_more_than_five_messages_are_all_kept() -> None:
    state = _state()
    for i in range(40):
        _say(state, f"m{i}", [f"part {i} of the answer"])
    state.feed(TargetUpdate(kind=Kind.FINISHED, text="done"))
    result = state.result
    assert result is not None
    assert len(result.messages) == 40
    output = delegation_output(result)
    assert output.startswith("Summary: done\n\npart 0 of the answer\n\npart 1 ")
    assert output.endswith("part 39 of the answer")


def test_text_past_max_text_chars_fails_output_too_large_keeping_all_it_said() -> None:
    state = _state(DelegationPolicy(max_text_chars=10_000))
    state.feed(TargetUpdate(kind=Kind.STARTED))
    _say(state, "m1", ["a" * 6_000])
    _say(state, "m2", ["b" * 3_000, "c" * 2_000])  # the second chunk passes the bound
    result = state.result
    assert result is not None and result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.OUTPUT_TOO_LARGE
    # The partial result is every character that came within the bound, uncut.
    assert [m.text for m in result.messages] == ["a" * 6_000, "b" * 3_000]
    assert sum(len(m.text) for m in result.messages) <= 10_000


def _reference_texts(result: DelegationResult) -> list[str]:
    """The said-once rule compared pair by pair (what the window computes for few texts)."""
    candidates: list[tuple[str, str, bool]] = []
    if result.summary:
        norm = result.summary.strip().removesuffix("…").rstrip()
        candidates.append((norm, result.summary.strip(), True))
    for message in result.messages:
        candidates.append((message.text.strip(), message.text.strip(), False))
    kept = []
    for i, (norm, shown, is_summary) in enumerate(candidates):
        if norm and not any(
            j != i and norm in other and (len(other) > len(norm) or j > i)
            for j, (other, _, _) in enumerate(candidates)
        ):
            kept.append((shown, is_summary))
    if len(kept) > 1:
        return [f"Summary: {t}" if s else t for t, s in kept]
    return [t for t, _ in kept]


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.sampled_from(["a", "ab", "abc", "b", "bc", " ab ", "x", ""]), max_size=10),
    summary=st.none() | st.sampled_from(["ab", "abc…", "b", "zz"]),
)
def test_within_the_window_the_said_once_rule_is_the_pairwise_one(
    texts: list[str], summary: str | None
) -> None:
    result = DelegationResult(
        delegation_id="d",
        agent="a",
        remote_protocol="a2a",
        status=Status.COMPLETED,
        summary=summary,
        messages=tuple(ResultMessage(role="assistant", text=t) for t in texts),
    )
    assert output_texts(result) == _reference_texts(result)


def test_many_messages_are_said_once_in_linear_time() -> None:
    parts = [f"finding {i}: " + "detail " * 50 for i in range(20_000)]  # ~7.5 M characters
    messages = [ResultMessage(role="assistant", text=p) for p in parts]
    repeated = messages[:100]  # a remote that says some of it again, early
    final = ResultMessage(role="assistant", text="finding 19999")  # inside the last one
    result = DelegationResult(
        delegation_id="d",
        agent="a",
        remote_protocol="a2a",
        status=Status.COMPLETED,
        summary=parts[-1][:100] + "…",
        messages=(*repeated, *messages, final),
    )
    began = time.perf_counter()
    texts = output_texts(result)
    took = time.perf_counter() - began
    assert texts == [p.strip() for p in parts]  # repeats and contained texts said once
    assert took < 5, f"{took:.1f} s"


def _big_result() -> DelegationResult:
    # 4,000,000 characters (the default max_text_chars) that JSON spells in 8,000,000.
    text = "\n" * 2_000_000 + "é\t" * 1_000_000
    return DelegationResult(
        delegation_id="d1",
        agent="remote",
        remote_protocol="a2a",
        status=Status.COMPLETED,
        run_id="run-1",
        summary="s",
        messages=(ResultMessage(role="assistant", text=text),),
    )


def test_a_result_at_the_text_bound_reads_back_from_its_json() -> None:
    result = _big_result()
    document = to_json(result)
    assert len(document) > 4 * 1024 * 1024  # past what other documents may be
    assert result_from_json(document) == result
    assert result_from_json(document.encode()) == result


async def test_the_sqlite_archive_reads_back_a_result_at_the_text_bound(tmp_path: Path) -> None:
    result = _big_result()
    async with open_sqlite_archive(tmp_path / "runs.db", node="n") as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=1.0, node="n"))
        await archive.record_results("run-1", [result])
    async with open_sqlite_archive(tmp_path / "runs.db", node="n") as archive:
        assert await archive.results("run-1") == [result]


def test_containment_is_looked_for_in_the_window_equality_everywhere() -> None:
    early = [ResultMessage(role="assistant", text="early fact"), _message("same")]
    middle = [_message(f"step {i}") for i in range(CONTAINMENT_WINDOW)]
    last = [_message("same"), _message("late fact: early fact, restated")]
    result = DelegationResult(
        delegation_id="d",
        agent="a",
        remote_protocol="a2a",
        status=Status.COMPLETED,
        messages=(*early, *middle, *last),
    )
    texts = output_texts(result)
    assert texts.count("same") == 1 and texts.index("same") > texts.index("step 0")
    assert "early fact" in texts  # contained in a window text, but itself outside the window


def _message(text: str) -> ResultMessage:
    return ResultMessage(role="assistant", text=text)


def test_a_text_bound_a_store_could_not_read_back_is_refused() -> None:
    """A result keeps the whole text, so `max_text_chars` is capped where its JSON (6 characters
    per character at worst) still fits a stored result document."""
    from engine import RegistryError
    from engine._registry import MAX_TEXT_CHARS_CEILING
    from engine._wire import MAX_RESULT_DOCUMENT_CHARS

    assert 6 * MAX_TEXT_CHARS_CEILING < MAX_RESULT_DOCUMENT_CHARS
    assert DelegationPolicy(max_text_chars=MAX_TEXT_CHARS_CEILING).max_text_chars > 0
    for value in (MAX_TEXT_CHARS_CEILING + 1, -1):
        with pytest.raises(RegistryError, match="max_text_chars"):
            DelegationPolicy(max_text_chars=value)
