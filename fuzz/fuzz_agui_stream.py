"""Fuzz harness: the AG-UI output adapter, `adapters.agui` (SSE reader, checker, encoder).

Any bytes are used twice:

- as captured SSE: `parse_sse` may refuse them only with `SseError`; what it reads goes through
  `check_frames`, which must return `Violation`s (indexes inside the stream), never raise; and
  the events it read, framed again with `frame_events`, must read back identical (the writer
  and the reader agree on framing, ids and JSON).
- as a program of engine events (two bytes per event: which event, then which delegation, tool
  call, message and text; the first 512 bytes): the journal entries it spells, closed by a run
  terminal, go through `AguiStreamEncoder` in every visibility mode. Whatever the order
  (content for ids never opened, duplicates, events after terminals, unknown kinds), each stream
  must pass the checker, end on the terminal's cursor, and give the same bytes on a second pass
  and after a replayed prefix; written in batches (`feed_batch`, cut where the bytes say) it
  must still pass, end on the same cursor and carry the same text per message. Input requests
  carry engine questions (and `subagent.input_closed` closes them): in every mode but `custom`,
  a stream suspended at the questions open where the bytes say (`suspend`), resumed (`resume`)
  and fed the rest must still pass as two runs, and a fresh encoder fed the same prefix must
  suspend and resume with the same bytes (what a resumed `POST /agui` stream relies on).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from adapters.agui import (
        MODES,
        AguiStreamEncoder,
        SseError,
        Violation,
        check_frames,
        frame_events,
        parse_sse,
        sse_bytes,
    )
    from engine import (
        ArtifactRef,
        DelegationError,
        DelegationEvent,
        JournalEntry,
        Kind,
        Question,
    )

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input", "program"]

RUN: Final = "run-f"
_DELEGATIONS: Final = ("del-a", "del-b", "del-c")
_CALLS: Final = ("call-0", "call-1", "call-2")
_MESSAGES: Final = ("m0", "m1")
#: Longer programs find nothing shorter ones do not, and cost executions.
_MAX_PROGRAM_BYTES: Final = 512
_CHUNKS: Final = ("a", "", "é", "\n", '"', "\u2028", "\ud800", "x" * 40)

#: (kind, is it a delegation's) for each op byte modulo the table's length.
_OPS: Final = (
    (Kind.PARENT_TEXT_START, False),
    (Kind.PARENT_TEXT_DELTA, False),
    (Kind.PARENT_TEXT_END, False),
    (Kind.PARENT_REASONING_START, False),
    (Kind.PARENT_REASONING_DELTA, False),
    (Kind.PARENT_REASONING_END, False),
    (Kind.PARENT_TOOL_CALL_START, False),
    (Kind.PARENT_TOOL_CALL_ARGS, False),
    (Kind.PARENT_TOOL_CALL_END, False),
    (Kind.PARENT_TOOL_CALL_RESULT, False),
    (Kind.PARENT_CUSTOM, False),
    (Kind.GAP, False),
    (Kind.DROPPED, False),
    (Kind.RUN_STARTED, False),
    ("future.kind", False),
    (Kind.STARTED, True),
    (Kind.TEXT_START, True),
    (Kind.TEXT_DELTA, True),
    (Kind.TEXT_END, True),
    (Kind.REASONING_START, True),
    (Kind.REASONING_DELTA, True),
    (Kind.REASONING_END, True),
    (Kind.TOOL_CALL_START, True),
    (Kind.TOOL_CALL_ARGS, True),
    (Kind.TOOL_CALL_END, True),
    (Kind.TOOL_CALL_RESULT, True),
    (Kind.STATUS, True),
    (Kind.ARTIFACT, True),
    (Kind.CUSTOM, True),
    (Kind.INPUT_REQUIRED, True),
    (Kind.STREAM_DROPPED, True),
    ("subagent.future.kind", True),
    (Kind.FINISHED, True),
    (Kind.FAILED, True),
    (Kind.CANCELLED, True),
    (Kind.RUN_CANCELLED, False),
    (Kind.INPUT_CLOSED, True),
)

SEEDS: list[bytes] = [
    # SSE captures.
    b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
    b'id: 2\ndata: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n',
    b": keepalive\n\nid: 1\ndata: {}\n\n",
    b'data: {"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant",'
    b'"subagentRunId":"s"}\n\n',
    b'data: {"type":"CUSTOM","name":"subagent.started","value":{"delegationId":"d"}}\n\n',
    b"data: {\xff}\n\n",
    b"data: {}\r\n\r\n",
    # Programs: a delegation as a tool, text and an artifact, then a cancel.
    bytes([6, 0, 7, 0, 8, 0, 15, 0, 16, 0, 17, 0, 27, 0, 18, 0, 32, 0, 9, 0, 35, 0]),
    bytes([15, 1, 15, 2, 17, 1, 17, 2, 29, 1, 34, 2, 13, 0, 0, 0, 1, 0]),
    bytes(range(0, 72)),
    # A delegation asks (a question), is suspended where the last byte says, then answered.
    bytes([6, 0, 7, 0, 8, 0, 15, 0, 16, 0, 17, 0, 29, 0, 36, 0, 17, 0, 32, 0, 9, 0, 15, 9]),
]

DICTIONARY: list[bytes] = [
    b"data: ",
    b"id: ",
    b"\n\n",
    b'"type"',
    b'"RUN_STARTED"',
    b'"RUN_FINISHED"',
    b'"TEXT_MESSAGE_START"',
    b'"SUBAGENT_STARTED"',
    b'"subagentRunId"',
    b'"messageId"',
    b'"toolCallId"',
    b'"CUSTOM"',
    b'"subagent.started"',
    b'"delegationId"',
]


def fuzz_one_input(data: bytes) -> None:
    _read_as_sse(data)
    _encode_as_program(data)


def _read_as_sse(data: bytes) -> None:
    try:
        frames = parse_sse(data)
    except SseError:
        return
    violations = check_frames(frames)
    for violation in violations:
        if not isinstance(violation, Violation) or not 0 <= violation.index <= len(frames):
            raise AssertionError(f"checker reported {violation!r} for {len(frames)} events")
    framed = b"".join(frame_events([event], cursor) for cursor, event in frames)
    try:
        again = parse_sse(framed)
    except SseError as exc:
        raise AssertionError(f"parse_sse refuses what frame_events wrote: {framed!r}") from exc
    if again != frames:
        raise AssertionError(f"round trip changed the events:\n  {frames!r}\n  {again!r}")


def program(data: bytes) -> list[JournalEntry]:
    """The journal entries two bytes per event spell, closed by a run terminal."""
    data = data[:_MAX_PROGRAM_BYTES]
    pairs = zip(data[::2], data[1::2], strict=False)  # an odd last byte is ignored
    asked: dict[str, Question] = {}  # each delegation's last question
    events = [_event(op, arg, i, asked) for i, (op, arg) in enumerate(pairs)]
    events.append(DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN))
    return [JournalEntry(event, cursor) for cursor, event in enumerate(events, start=1)]


def _event(op: int, arg: int, sequence: int, asked: dict[str, Question]) -> DelegationEvent:
    kind, of_delegation = _OPS[op % len(_OPS)]
    text = _CHUNKS[(arg >> 5) % len(_CHUNKS)]
    fields: dict[str, Any] = {
        "message_id": _MESSAGES[(arg >> 4) % 2],
        "tool_call_id": _CALLS[(arg >> 2) % 3],
        "tool_name": "delegate_to_agent",
        "delta": text,
        "text": text,
        "sequence": sequence,
    }
    if of_delegation:
        did = _DELEGATIONS[arg % 3]
        fields.update(
            delegation_id=did,
            parent_tool_call_id=_CALLS[(arg >> 2) % 3],
            agent_key=did,
            agent_name=did.upper(),
            status="input_required" if arg & 0x80 else "working",
        )
    if kind == Kind.ARTIFACT:
        fields["artifact"] = ArtifactRef(id="a", uri="host://a")
    if kind == Kind.INPUT_REQUIRED and of_delegation:
        did = fields["delegation_id"]
        asked[did] = fields["question"] = Question(
            id=f"{did}-input-{sequence}",
            run_id=RUN,
            delegation_id=did,
            text=text,
            response_schema={"type": "boolean"} if arg & 0x40 else None,
            expires_at=None if arg & 0x20 else 1e9 + arg,
            lineage=(did,),
        )
    if kind == Kind.INPUT_CLOSED and of_delegation:
        did = fields["delegation_id"]
        last = asked.get(did) or Question(id=f"{did}-input-x", run_id=RUN, delegation_id=did)
        fields["question"] = attrs.evolve(last, outcome="answered", closed_at=2e9)
    if kind in (Kind.FAILED, Kind.CANCELLED):
        fields["error"] = DelegationError(code="remote_failed", message=text)
    if kind in (Kind.PARENT_TOOL_CALL_ARGS, Kind.PARENT_TOOL_CALL_RESULT):
        fields["args"] = {"n": arg, "t": text}
        fields["result"] = [arg, text] if arg & 1 else None
    return DelegationEvent(kind=kind, run_id=RUN, **fields)


def _encode_as_program(data: bytes) -> None:
    entries = program(data)
    cut = data[0] % (len(entries) + 1) if data else 0
    terminal = next(e.cursor for e in entries if e.event.kind in Kind.RUN_TERMINALS)
    for mode in MODES:
        chunks = _stream(entries, mode)
        frames = parse_sse(b"".join(chunks))
        violations = check_frames(frames)
        if violations:
            listed = "\n  ".join(str(v) for v in violations[:5])
            raise AssertionError(f"not a valid AG-UI stream in mode {mode}:\n  {listed}")
        if frames[-1][0] != terminal:
            raise AssertionError(f"mode {mode}: the stream does not end on the terminal's cursor")
        if _stream(entries, mode) != chunks:
            raise AssertionError(f"mode {mode}: a second pass wrote other bytes")
        encoder = AguiStreamEncoder("t", RUN, mode, strict=True)
        for entry in entries[:cut]:
            encoder.feed(entry)
        if [encoder.feed(entry) for entry in entries[cut:]] != chunks[cut:]:
            raise AssertionError(f"mode {mode}: continuing after a replayed prefix differs")
        _check_batched(entries, mode, frames, data)
        if mode != "custom":
            _check_suspended(entries, mode, data[-1] % (len(entries) + 1) if data else 0)


def _check_suspended(entries: list[JournalEntry], mode: str, cut: int) -> None:
    """Suspend at the questions open after `cut` entries, resume, feed the rest: two valid
    runs; a fresh encoder fed the prefix suspends and resumes with the same bytes."""
    live = AguiStreamEncoder("t", RUN, mode, strict=True)
    head = [live.feed(entry) for entry in entries[:cut]]
    questions = live.open_questions
    if not questions:
        return
    suspension = sse_bytes(live.suspend(questions))
    replayed = AguiStreamEncoder("t", RUN, mode, strict=True)
    for entry in entries[:cut]:
        replayed.frames(entry)
    if sse_bytes(replayed.suspend(questions)) != suspension:
        raise AssertionError(f"mode {mode}: a replayed encoder suspends differently")
    opening = sse_bytes(live.resume("run-g"))
    if sse_bytes(replayed.resume("run-g")) != opening:
        raise AssertionError(f"mode {mode}: a replayed encoder resumes differently")
    rest = [live.feed(entry) for entry in entries[cut:]]
    frames = parse_sse(b"".join(head) + suspension + opening + b"".join(rest))
    violations = check_frames(frames)
    if violations:
        listed = "\n  ".join(str(v) for v in violations[:5])
        raise AssertionError(f"mode {mode}: suspended and resumed, not valid:\n  {listed}")


def _check_batched(entries: list[JournalEntry], mode: str, frames: list[Any], data: bytes) -> None:
    """`feed_batch` over batches cut where the data's bytes say: a valid stream ending on the
    same cursor, with the same text per message as writing entry by entry."""
    batched = AguiStreamEncoder("t", RUN, mode, strict=True)
    chunks, start = [], 0
    for i, byte in enumerate(data[1:], start=1):
        if byte % 3 == 0 and start < i <= len(entries):
            chunks.append(batched.feed_batch(entries[start:i]))
            start = i
    chunks.append(batched.feed_batch(entries[start:]) if start < len(entries) else b"")
    merged = parse_sse(b"".join(chunks))
    if check_frames(merged) or merged[-1][0] != frames[-1][0]:
        raise AssertionError(f"mode {mode}: feed_batch wrote an invalid stream")
    if _texts(merged) != _texts(frames):
        raise AssertionError(f"mode {mode}: feed_batch changed a message's text")


def _texts(frames: list[Any]) -> dict[tuple[Any, Any], str]:
    texts: dict[tuple[Any, Any], str] = {}
    for _, event in frames:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            key = (event["messageId"], event.get("subagentRunId"))
            texts[key] = texts.get(key, "") + event["delta"]
    return texts


def _stream(entries: list[JournalEntry], mode: str) -> list[bytes]:
    encoder = AguiStreamEncoder("t", RUN, mode, strict=True)
    return [encoder.feed(entry) for entry in entries]
