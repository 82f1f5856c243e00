"""Text that is not valid Unicode, end to end: a run through `engine.open_run` whose agent and
parent send lone surrogates (what `json.loads` makes of the JSON string "\\ud800") must finish
normally, and every journal entry must encode: as the engine's own JSON (`?format=engine` writes
`engine.to_json(event).encode()`), as AG-UI in every mode, entry by entry and in batches, and
the results as the parent's tool result.
"""

from __future__ import annotations

import json

import trio

import engine
from adapters.agui import MODES, AguiStreamEncoder, check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from adapters.parents._scripted import Say, Think
from engine import AgentSpec, DelegationRequest, Kind, Status

LONE = "\ud800"


async def agent(task: LocalTask) -> str:
    await task.status("working", f"reading {LONE}")
    await task.say(f"bad {LONE} text", "\udfff", "\ud83d")
    await task.think(f"why {LONE}")
    await task.tool_call(f"search{LONE}", {f"q{LONE}": [f"x{LONE}", 1]}, result=[LONE])
    await task.artifact(f"notes{LONE}.md", data=f"content {LONE}")
    return f"done {LONE}"


async def run_with_lone_surrogates() -> tuple[list[engine.JournalEntry], engine.DelegationResult]:
    agents = [AgentSpec(key="research", target=InProcessTarget(agent))]
    async with engine.open_run(agents, metadata={"user": LONE}) as run:
        parent = ScriptedParent([Say(("You asked: ", "{prompt}")), Think(("hm", LONE))])
        await parent.run(run, f"a prompt {LONE}")
        await run.emit(Kind.PARENT_CUSTOM, name=f"note{LONE}", raw={LONE: LONE})
        result = await run.delegate(DelegationRequest(agent="research", objective="look"))
        await run.finish(f"finished {LONE}")
    entries = []
    async with run.events() as events:
        async for entry in events:
            entries.append(entry)
    return entries, result


async def test_a_run_fed_lone_surrogates_finishes_and_every_encoder_writes_it() -> None:
    entries, result = await run_with_lone_surrogates()
    assert entries[-1].event.kind == Kind.RUN_FINISHED
    assert result.status == Status.COMPLETED
    assert result.summary == "done \ufffd"

    for entry in entries:
        engine.to_json(entry.event).encode("utf-8")  # what `?format=engine` writes
    json.dumps(engine.to_jsonable(result), ensure_ascii=False).encode("utf-8")
    text = "".join(e.event.delta or "" for e in entries if e.event.kind == Kind.TEXT_DELTA)
    assert text == "bad \ufffd text\ufffd\ufffd"
    assert LONE not in repr([engine.to_jsonable(e.event) for e in entries])

    for mode in MODES:
        single = AguiStreamEncoder("t", entries[0].event.run_id, mode, strict=True)
        stream = b"".join(single.feed(entry) for entry in entries)
        batched = AguiStreamEncoder("t", entries[0].event.run_id, mode, strict=True)
        stream_batched = batched.feed_batch(entries)
        for written in (stream, stream_batched):
            written.decode("utf-8")
            assert b"\\ud8" not in written  # nothing left to escape
            frames = parse_sse(written)
            assert check_frames(frames) == [], mode
            assert frames[-1][1]["type"] == "RUN_FINISHED"


async def test_a_lone_surrogate_in_a_parent_event_does_not_break_later_writes() -> None:
    """The journal a reconnecting `?format=engine` viewer replays: every entry encodes, also
    the ones after the bad one."""
    async with engine.open_run() as run:
        await run.emit(Kind.PARENT_TEXT_START, message_id="p1", role="assistant")
        await run.emit(Kind.PARENT_TEXT_DELTA, message_id="p1", delta=LONE)
        await run.emit(Kind.PARENT_TEXT_DELTA, message_id="p1", delta="after")
        await run.emit(Kind.PARENT_TEXT_END, message_id="p1")
    with trio.fail_after(5):
        async with run.events(after=2) as events:
            written = [engine.to_json(entry.event).encode() async for entry in events]
    read = [json.loads(line) for line in written]
    assert "".join(event.get("delta", "") for event in read) == "\ufffdafter"  # maybe merged
    assert read[-1]["kind"] == Kind.RUN_FINISHED
