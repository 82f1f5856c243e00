"""Property: a configured secret never reaches a journaled event, a viewer or a result.

Hypothesis writes random update scripts for an in-process agent and embeds the agent's secret in
random string fields. The scripts run through the real actor tree (`engine.open_run`), and every
journal entry and every recorded result is serialized with `engine.to_json` and searched.

A second property splits a text holding the secret into deltas at random places (a message's
text, its reasoning, or a tool call's streamed arguments): what is journaled, concatenated, must
be the text with the secret redacted, and the secret must be in no journaled delta, no run of
adjacent ones (what the lanes merge them into) and no AG-UI stream written in one batch (what the
encoder merges them into). A third draws several, overlapping secrets and checks the state
machine alone, where examples are cheap.

Secrets are drawn from uppercase letters and filler text from a disjoint alphabet, so any
occurrence in the output can only come from a secret the engine let through (not from filler,
ids, JSON keys, or the `[REDACTED]` marker itself).
"""

from __future__ import annotations

import re
import string
from typing import Any

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
import engine._redact
from adapters.agui import AguiStreamEncoder
from adapters.inprocess import InProcessTarget, LocalTask
from engine import (
    REDACTED,
    AgentSpec,
    ArtifactRef,
    DelegationError,
    DelegationRequest,
    ErrorCode,
    Kind,
    Status,
    TargetUpdate,
)

SECRET_ALPHABET = string.ascii_uppercase
FILLER_ALPHABET = string.ascii_lowercase + string.digits + " .,:/-_=?"

filler = st.text(FILLER_ALPHABET, max_size=10)
secrets = st.text(SECRET_ALPHABET, min_size=6, max_size=16).filter(lambda s: s not in REDACTED)

STEP_KINDS = (
    "status",
    "started",
    "text_start",
    "text_delta",
    "text_end",
    "reasoning_delta",
    "tool_args",
    "tool_result",
    "custom",
    "artifact",
    "input_required",
)
ENDINGS = (
    "return",
    "return_none",
    "raise_delegation_error",
    "raise_runtime_error",
    "emit_finished",
    "emit_failed",
    "emit_cancelled",
)


@attrs.frozen
class Scenario:
    secret: str
    updates: tuple[TargetUpdate, ...]
    ending: str
    ending_text: str
    placed: int  # how many fields carry the secret


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    secret = draw(secrets)
    placed = 0

    def field() -> str:
        nonlocal placed
        before, after = draw(filler), draw(filler)
        if draw(st.booleans()):
            placed += 1
            return before + secret + after
        return before + after

    def raw() -> dict[str, Any]:
        return {field(): [field(), {"nested": field()}]}

    message_ids = st.sampled_from(["m1", "m2", None])
    updates: list[TargetUpdate] = []
    for kind in draw(st.lists(st.sampled_from(STEP_KINDS), max_size=12)):
        with_raw = raw() if draw(st.booleans()) else None
        if kind == "status":
            update = TargetUpdate(
                kind=Kind.STATUS,
                status=draw(st.sampled_from(["working", "submitted"])),
                text=field(),
                raw=with_raw,
            )
        elif kind == "started":
            update = TargetUpdate(kind=Kind.STARTED, status="working", text=field(), raw=with_raw)
        elif kind == "text_start":
            update = TargetUpdate(kind=Kind.TEXT_START, message_id=draw(message_ids))
        elif kind == "text_delta":
            update = TargetUpdate(
                kind=Kind.TEXT_DELTA, message_id=draw(message_ids), delta=field(), raw=with_raw
            )
        elif kind == "text_end":
            update = TargetUpdate(kind=Kind.TEXT_END, message_id=draw(message_ids))
        elif kind == "reasoning_delta":
            update = TargetUpdate(kind=Kind.REASONING_DELTA, message_id="r1", delta=field())
        elif kind == "tool_args":
            update = TargetUpdate(
                kind=Kind.TOOL_CALL_ARGS, tool_call_id="t1", args={"query": field()}
            )
        elif kind == "tool_result":
            update = TargetUpdate(
                kind=Kind.TOOL_CALL_RESULT, tool_call_id="t1", result=[field(), 1]
            )
        elif kind == "custom":
            update = TargetUpdate(kind=Kind.CUSTOM, name=field(), raw=raw())
        elif kind == "artifact":
            artifact_id = draw(st.sampled_from(["a1", "a2", "a3"]))
            update = TargetUpdate(
                kind=Kind.ARTIFACT,
                artifact=ArtifactRef(
                    id=artifact_id,
                    name=field(),
                    description=field(),
                    uri="https://files.example/" + field(),
                ),
                artifact_bytes=draw(st.integers(0, 64)),
                artifact_append=draw(st.booleans()),
                remote_artifact_id=artifact_id,
                raw=with_raw,
            )
        else:
            update = TargetUpdate(
                kind=Kind.INPUT_REQUIRED, status="input_required", text=field(), raw=with_raw
            )
        updates.append(update)
    ending = draw(st.sampled_from(ENDINGS))
    return Scenario(secret, tuple(updates), ending, field(), placed)


def make_agent(scenario: Scenario) -> Any:
    async def agent(task: LocalTask) -> str | None:
        for update in scenario.updates:
            await task._emit(update)
        ending, text = scenario.ending, scenario.ending_text
        if ending == "return":
            return text
        if ending == "raise_delegation_error":
            raise DelegationError(code=ErrorCode.AUTH_REQUIRED, message=text)
        if ending == "raise_runtime_error":
            raise RuntimeError(text)
        if ending == "emit_finished":
            await task._emit(TargetUpdate(kind=Kind.FINISHED, text=text))
        elif ending == "emit_failed":
            await task._emit(
                TargetUpdate(
                    kind=Kind.FAILED,
                    error=DelegationError(code=ErrorCode.REMOTE_FAILED, message=text),
                )
            )
        elif ending == "emit_cancelled":
            await task._emit(TargetUpdate(kind=Kind.CANCELLED, text=text))
        return None

    return agent


async def drive(scenario: Scenario) -> tuple[list[engine.JournalEntry], list[Any]]:
    spec = AgentSpec(
        key="agent", target=InProcessTarget(make_agent(scenario)), secrets=(scenario.secret,)
    )
    async with engine.open_run([spec], clock=lambda: 0.0) as run:
        returned = await run.delegate(DelegationRequest(agent="agent", objective="do it"))
    entries = []
    async with run.events() as events:
        async for entry in events:
            entries.append(entry)
    return entries, [returned, *run.delegations()]


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_secret_never_reaches_journal_or_results(scenario: Scenario) -> None:
    entries, results = trio.run(drive, scenario)
    secret = scenario.secret

    kinds = [e.event.kind for e in entries]
    assert kinds[0] == Kind.RUN_STARTED
    assert kinds[-1] == Kind.RUN_FINISHED
    terminals = [k for k in kinds if k in Kind.DELEGATION_TERMINALS]
    assert len(terminals) == 1
    assert results[0].status in Status.TERMINAL
    assert results[0] == results[1]

    leaks = []
    for entry in entries:
        text = engine.to_json(entry.event)
        if secret in text:
            leaks.append(text)
    for result in results:
        text = engine.to_json(result)
        if secret in text:
            leaks.append(text)
    assert leaks == []


# -- a secret split across deltas ---------------------------------------------------------------

#: Where a text is streamed: (delta kind, end kind, the field that groups its deltas).
STREAMS = {
    "text": (Kind.TEXT_DELTA, Kind.TEXT_END, "message_id"),
    "reasoning": (Kind.REASONING_DELTA, Kind.REASONING_END, "message_id"),
    "tool_args": (Kind.TOOL_CALL_ARGS, Kind.TOOL_CALL_END, "tool_call_id"),
}
WORD = "[A-Za-z0-9_]"  # what a token boundary looks at, for ASCII text


def redacted(text: str, secret: str) -> str:
    """The text with the secret redacted, written independently of `engine._redact`: a long
    secret wherever it occurs, a short one only as a token of its own."""
    if len(secret) >= engine._redact.SHORT_SECRET_CHARS:
        return text.replace(secret, REDACTED)
    return re.sub(f"(?<!{WORD}){secret}(?!{WORD})", REDACTED, text)


@attrs.frozen
class Split:
    secret: str
    text: str
    pieces: tuple[str, ...]
    stream: str
    ending: str  # how the stream ends: its own end, the delegation's end, or the agent's crash


@st.composite
def splits(draw: st.DrawFn) -> Split:
    secret = draw(
        st.text(SECRET_ALPHABET, min_size=1, max_size=16).filter(lambda s: s not in REDACTED)
    )
    parts = draw(st.lists(st.one_of(st.just(secret), filler), min_size=1, max_size=6))
    text = "".join([*parts, secret] if secret not in parts else parts)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return Split(
        secret,
        text,
        tuple(piece for piece in pieces if piece),
        draw(st.sampled_from(sorted(STREAMS))),
        draw(st.sampled_from(("end", "finish", "crash"))),
    )


def split_agent(split: Split) -> Any:
    kind, end, group = STREAMS[split.stream]

    async def agent(task: LocalTask) -> str:
        await task._emit(TargetUpdate(kind=Kind.STATUS, status="working"))
        if split.stream == "tool_args":
            await task._emit(TargetUpdate(kind=Kind.TOOL_CALL_START, tool_call_id="t1"))
        for piece in split.pieces:
            await task._emit(
                TargetUpdate(
                    kind=kind, delta=piece, **{group: "m1" if group == "message_id" else "t1"}
                )
            )
        if split.ending == "end":
            await task._emit(
                TargetUpdate(kind=end, **{group: "m1" if group == "message_id" else "t1"})
            )
        elif split.ending == "crash":
            raise RuntimeError("the agent crashed")
        return "done"

    return agent


async def drive_split(split: Split) -> list[engine.JournalEntry]:
    spec = AgentSpec(
        key="agent", target=InProcessTarget(split_agent(split)), secrets=(split.secret,)
    )
    async with engine.open_run([spec], clock=lambda: 0.0) as run:
        await run.delegate(DelegationRequest(agent="agent", objective="do it"))
    async with run.events() as events:
        return [entry async for entry in events]


@settings(max_examples=150, deadline=None)
@given(splits())
def test_a_secret_split_across_deltas_reaches_no_viewer(split: Split) -> None:
    entries = trio.run(drive_split, split)
    kind = STREAMS[split.stream][0]
    journaled = [e.event.delta for e in entries if e.event.kind == kind and e.event.delta]
    shown = "".join(journaled)
    assert shown == redacted(split.text, split.secret)
    if len(split.secret) >= engine._redact.SHORT_SECRET_CHARS:
        for start in range(len(journaled)):
            for end in range(start + 1, len(journaled) + 1):
                assert split.secret not in "".join(journaled[start:end])
    else:  # a short one counts only as a token of its own, in its context: the whole text
        assert not re.search(f"(?<!{WORD}){split.secret}(?!{WORD})", shown)
    assert entries[-1].event.kind == Kind.RUN_FINISHED
    # One batch: the encoder writes a message's deltas as one event.
    for mode in ("attributed", "inline"):
        written = AguiStreamEncoder("t", entries[0].event.run_id, mode).feed_batch(entries)
        if len(split.secret) >= engine._redact.SHORT_SECRET_CHARS:
            assert split.secret.encode() not in written


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text("ABC-", min_size=1, max_size=9), min_size=1, max_size=4), st.data())
def test_overlapping_secrets_split_anywhere_are_redacted_as_one_text(
    secrets: list[str], data: st.DataObject
) -> None:
    from engine import DelegationIdentity, DelegationPolicy, DelegationState, Redactor

    secrets = [s for s in secrets if s not in REDACTED]
    redactor = Redactor(secrets)
    words = st.sampled_from([*secrets, "A", "B", "-", " ", "x", "AB", "BCA-"] if secrets else "x")
    text = "".join(data.draw(st.lists(words, max_size=12)))
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    identity = DelegationIdentity(
        run_id="r", delegation_id="d", agent_key="a", agent_name="A", protocol="p"
    )
    state = DelegationState(identity, DelegationPolicy(), clock=lambda: 0.0, redactor=redactor)
    events = [
        e
        for p in pieces
        for e in state.feed(TargetUpdate(kind=Kind.TEXT_DELTA, message_id="m", delta=p))
    ]
    events += state.feed(TargetUpdate(kind=Kind.FINISHED))
    journaled = [e.delta for e in events if e.kind == Kind.TEXT_DELTA and e.delta]
    assert all(journaled)
    assert "".join(journaled) == redactor.text(text)
    long_ones = [s for s in secrets if len(s) >= engine._redact.SHORT_SECRET_CHARS]
    for start in range(len(journaled)):
        merged = "".join(journaled[start:])
        for secret in long_ones:
            assert secret not in merged
