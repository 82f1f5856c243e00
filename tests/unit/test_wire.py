"""The JSON shape owned by `engine._wire`: snake_case, omissions, strict readers."""

from __future__ import annotations

import json

import pytest

from engine import (
    ArtifactRef,
    DelegationError,
    DelegationEvent,
    DelegationResult,
    DropReport,
    ErrorCode,
    Kind,
    ResultMessage,
    WireError,
    event_from_json,
    result_from_json,
    to_json,
    to_jsonable,
)


def test_result_has_the_tool_contract_shape() -> None:
    result = DelegationResult(
        delegation_id="del-1",
        agent="research",
        remote_protocol="a2a",
        status="completed",
        remote_task_id="task-1",
        remote_context_id="ctx-1",
        summary="Official a2a-go exposes...",
        artifacts=(
            ArtifactRef(
                id="artifact-1",
                name="notes.md",
                mime_type="text/markdown",
                uri="host://delegations/del-1/artifacts/notes.md",
            ),
        ),
        messages=(ResultMessage(role="assistant", text="..."),),
        raw_task={"provider": "a2a", "task_id": "task-1"},
    )
    assert to_jsonable(result) == {
        "delegation_id": "del-1",
        "agent": "research",
        "remote_protocol": "a2a",
        "status": "completed",
        "remote_task_id": "task-1",
        "remote_context_id": "ctx-1",
        "summary": "Official a2a-go exposes...",
        "artifacts": [
            {
                "id": "artifact-1",
                "name": "notes.md",
                "mime_type": "text/markdown",
                "uri": "host://delegations/del-1/artifacts/notes.md",
            }
        ],
        "messages": [{"role": "assistant", "text": "..."}],
        "raw_task": {"provider": "a2a", "task_id": "task-1"},
    }
    assert result_from_json(to_json(result)) == result


def test_failed_result_carries_a_structured_error() -> None:
    result = DelegationResult(
        delegation_id="del-1",
        agent="research",
        remote_protocol="a2a",
        status="failed",
        error=DelegationError(
            code=ErrorCode.REMOTE_TIMEOUT,
            message="Remote task did not finish before timeout.",
            remote_status="working",
        ),
    )
    data = to_jsonable(result)
    assert data["error"] == {
        "code": "remote_timeout",
        "message": "Remote task did not finish before timeout.",
        "retryable": True,
        "remote_status": "working",
    }


def test_unknown_kinds_and_fields_round_trip() -> None:
    text = '{"kind":"subagent.hologram","run_id":"r","sequence":3,"new_field":{"a":[1,2]}}'
    event = event_from_json(text)
    assert event.kind == "subagent.hologram"
    assert event.extra == {"new_field": {"a": [1, 2]}}
    assert json.loads(to_json(event)) == json.loads(text)


def test_event_round_trip_with_nested_models() -> None:
    event = DelegationEvent(
        kind=Kind.STREAM_DROPPED,
        run_id="r",
        delegation_id="d",
        sequence=9,
        time=1.5,
        dropped=DropReport(reason="status_folded", count=2, kinds={Kind.STATUS: 2}),
        artifact=ArtifactRef(id="a", size_bytes=10),
        error=DelegationError(code="x", message="y", metadata={"k": 1}),
    )
    assert event_from_json(to_json(event)) == event


@pytest.mark.parametrize(
    "document",
    [
        "",
        "[]",
        '{"kind": "x"}',
        '{"kind": 1, "run_id": "r"}',
        '{"kind": "x", "run_id": "r", "sequence": true}',
        '{"kind": "x", "run_id": "r", "sequence": "3"}',
        '{"kind": "x", "run_id": "r", "time": NaN}',
        '{"kind": "x", "run_id": "r", "artifact": []}',
        '{"kind": "x", "run_id": "r", "error": {"code": "c", "retryable": "no"}}',
        '{"kind": "x", "run_id": "r", "raw": [1]}',
        "[" * 100_000,
    ],
)
def test_malformed_documents_are_typed_errors(document: str) -> None:
    with pytest.raises(WireError):
        event_from_json(document)


@pytest.mark.parametrize(
    "document",
    [
        b'{"kind":"k","run_id":"r","delta":"a\\ud800","raw":{"\\udc00":["\\udbff"]}}',
        '{"kind":"k","run_id":"r","delta":"a\ud800","raw":{"\udc00":["\udbff"]}}',
        b'{"kind":"k","run_id":"r","delta":"a\xed\xa0\x80","raw":{"\xed\xb0\x80":["\\udbff"]}}',
    ],
    ids=["escaped", "str holding surrogates", "surrogates as UTF-8 bytes"],
)
def test_lone_surrogates_are_read_as_replacement_characters(document: str | bytes) -> None:
    event = event_from_json(document)
    assert (event.delta, event.raw) == ("a\ufffd", {"\ufffd": ["\ufffd"]})
    assert event_from_json(to_json(event).encode("utf-8")) == event
    assert event_from_json('{"kind":"k","run_id":"\\ud83d\\ude00"}').run_id == "😀"
    result = result_from_json(
        b'{"delegation_id":"d","agent":"a","remote_protocol":"p","status":"failed",'
        b'"summary":"\\ud800","error":{"code":"c","message":"\\udbff"}}'
    )
    assert result.error is not None
    assert (result.summary, result.error.message) == ("\ufffd", "\ufffd")


def test_oversized_documents_are_refused_before_parsing() -> None:
    with pytest.raises(WireError, match="larger than"):
        event_from_json("x" * (4 * 1024 * 1024 + 1))
    # A result keeps its delegation's whole text output: its own, larger bound.
    with pytest.raises(WireError, match="larger than"):
        result_from_json("x" * (64 * 1024 * 1024 + 1))
