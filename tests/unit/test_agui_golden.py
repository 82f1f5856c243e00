"""Golden AG-UI streams: the happy path and its variants, in every visibility mode.

Each scenario (tests/helpers/agui_scenarios.py) is fed to `AguiStreamEncoder` in each mode; the
events must equal the golden file `tests/golden/agui/<scenario>.json` exactly (every field), pass
the AG-UI checker, and be what `ag-ui-protocol`'s own models and `EventEncoder` write for the same
event. `UPDATE_GOLDEN=1 pytest tests/unit/test_agui_golden.py` rewrites the files; review the diff.
The happy path's shape is also spelled out here, so the files cannot drift from it unseen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

from adapters.agui import MODES, AguiStreamEncoder, check_events, check_frames, parse_sse
from engine import JournalEntry
from tests.helpers.agui_scenarios import RUN, SCENARIOS, THREAD, happy_path

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "agui"


def encode(entries: list[JournalEntry], mode: str) -> list[dict[str, Any]]:
    encoder = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    return [event for entry in entries for event in encoder.translate(entry)]


def shape(events: list[dict[str, Any]]) -> list[str]:
    """Type, plus the CUSTOM name: the sequence a viewer reads."""
    return [f"CUSTOM({e['name']})" if e["type"] == "CUSTOM" else e["type"] for e in events]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_streams(scenario: str) -> None:
    got = {mode: encode(SCENARIOS[scenario](), mode) for mode in MODES}
    path = GOLDEN / f"{scenario}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(path.read_text())
    for mode in MODES:
        assert got[mode] == expected[mode], f"{scenario} in mode {mode}"
        assert check_events(got[mode]) == [], f"{scenario} in mode {mode}"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
def test_every_event_is_what_ag_ui_protocol_writes(scenario: str, mode: str) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    encoder = EventEncoder()
    for event in encode(SCENARIOS[scenario](), mode):
        model = adapter.validate_python(event)
        assert json.loads(encoder.encode(model).removeprefix("data: ")) == event
        assert all("_" not in key for key in event)  # camelCase on the wire


def test_happy_path_attributed_is_agents_as_tools() -> None:
    events = encode(happy_path(), "attributed")
    assert shape(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",  # the call closes, then the subagent it spawned runs
        "SUBAGENT_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "CUSTOM(subagent.artifact)",
        "TEXT_MESSAGE_END",
        "SUBAGENT_FINISHED",
        "TOOL_CALL_RESULT",  # then the call's result
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    started = events[4]
    assert started == {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": "del-1",
        "name": "Research Agent",
        "parentToolCallId": "call-1",
        "metadata": {
            "agentKey": "research",
            "protocol": "a2a",
            "remoteTaskId": "task-del-1",
            "remoteContextId": "ctx-del-1",
        },
    }
    # Everything between the lifecycle events is the subagent's, and says so.
    assert all(e.get("subagentRunId") == "del-1" for e in events[5:9])
    assert events[9] == {
        "type": "SUBAGENT_FINISHED",
        "subagentRunId": "del-1",
        "result": "Found two examples.",
        "outcome": {"type": "success"},
    }
    assert all("subagentRunId" not in e for e in events[10:])


def test_in_custom_mode_the_subagent_group_sits_between_the_call_and_its_result() -> None:
    events = encode(happy_path(), "custom")
    assert shape(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "CUSTOM(subagent.started)",
        "CUSTOM(subagent.text.start)",
        "CUSTOM(subagent.text.delta)",
        "CUSTOM(subagent.artifact)",
        "CUSTOM(subagent.text.end)",
        "CUSTOM(subagent.finished)",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    # subagent.started's value fields, exactly.
    assert events[6]["value"] == {
        "runId": RUN,
        "parentToolCallId": "call-1",
        "delegationId": "del-1",
        "agentKey": "research",
        "agentName": "Research Agent",
        "protocol": "a2a",
        "remoteTaskId": "task-del-1",
        "remoteContextId": "ctx-del-1",
        "messageId": "m1",
        "delta": "Searching official examples...",
    }
    assert events[7]["value"]["artifact"] == {
        "id": "a-1",
        "name": "notes.md",
        "uri": "host://del-1/notes.md",
    }
    assert all("subagentRunId" not in e for e in events)


def test_happy_path_inline_and_hidden() -> None:
    inline = encode(happy_path(), "inline")
    assert shape(inline) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TEXT_MESSAGE_START",  # the subagent's text, as the parent's
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert all("subagentRunId" not in e for e in inline)
    hidden = encode(happy_path(), "hidden")
    assert shape(hidden) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]


def test_failure_cancel_and_input_required_end_the_subagent_as_they_should() -> None:
    failed = encode(SCENARIOS["delegation_failure"](), "attributed")
    assert {"type": "SUBAGENT_ERROR", "subagentRunId": "del-1"}.items() <= failed[6].items()
    assert failed[6]["code"] == "remote_failed"

    cancelled = encode(SCENARIOS["cancelled"](), "attributed")
    assert shape(cancelled)[-3:] == ["TEXT_MESSAGE_END", "SUBAGENT_ERROR", "RUN_FINISHED"]
    assert cancelled[-2]["code"] == "run_closed"
    assert cancelled[-1] == {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": RUN,
        "outcome": {"type": "cancelled"},
        "metadata": {"reason": "Stopped by a viewer."},
    }

    paused = encode(SCENARIOS["input_required"](), "attributed")
    suspended = [e for e in paused if e["type"] == "SUBAGENT_FINISHED"]
    assert suspended == [
        {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": "del-1",
            "outcome": {"type": "suspended", "interruptIds": ["del-1-input-4"]},
        }
    ]
    question = next(e for e in paused if e.get("name") == "subagent.input_required")
    assert question["value"]["text"] == "Approve?"
    assert question["value"]["interruptId"] == "del-1-input-4"

    # Answered within the run: the subagent waits open (announced once per run, as
    # @ag-ui/client requires), then goes on and finishes.
    resumed = encode(SCENARIOS["input_answered"](), "attributed")
    assert shape(resumed)[4:8] == [
        "SUBAGENT_STARTED",
        "CUSTOM(subagent.input_required)",
        "CUSTOM(subagent.status)",
        "TEXT_MESSAGE_START",
    ]
    lifecycle = [
        (e["type"], e.get("outcome", {}).get("type"))
        for e in resumed
        if e["type"].startswith("SUBAGENT_")
    ]
    assert lifecycle == [("SUBAGENT_STARTED", None), ("SUBAGENT_FINISHED", "success")]


def test_two_concurrent_delegations_never_share_an_id() -> None:
    events = encode(SCENARIOS["two_concurrent"](), "attributed")
    starts = [e for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert [(e["messageId"], e["subagentRunId"]) for e in starts] == [
        ("del-1:m1", "del-1"),
        ("del-2:m1", "del-2"),
    ]
    contents = {e["messageId"]: e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"}
    assert contents == {"del-1:m1": "GDP is ", "del-2:m1": "Population is "}


@pytest.mark.parametrize("mode", MODES)
def test_sse_framing_puts_the_cursor_on_each_entrys_last_event(mode: str) -> None:
    entries = SCENARIOS["cancelled"]()
    encoder = AguiStreamEncoder(THREAD, RUN, mode)
    chunks = [encoder.feed(entry) for entry in entries]
    body = b"".join(chunks)
    assert b"\r" not in body and b"null" not in body
    for entry, chunk in zip(entries, chunks, strict=True):
        if chunk:
            blocks = chunk.split(b"\n\n")[:-1]
            assert blocks[-1].startswith(b"id: %d\n" % entry.cursor)
            assert not any(b"id: " in block for block in blocks[:-1])
    frames = parse_sse(body)
    assert check_frames(frames) == []
    assert [event for _, event in frames] == encode(entries, mode)
