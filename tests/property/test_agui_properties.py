"""Properties of the AG-UI encoder over random engine journals, in every visibility mode.

Each example draws a script of engine events: the parent's text, reasoning and tool calls
(some of them delegate calls), up to three delegations interleaved (text, reasoning, tool calls,
statuses, artifacts, custom payloads, input requests, drop markers, terminals), duplicates and
stray closes, unknown kinds, and a run terminal (finished, failed or cancelled) at a random
point, with events after it. The script reaches the encoder two ways:

- `direct`: as is, cursors 1..n (or with holes), so the encoder alone faces every oddity
  (no run start, events after terminals, content for ids never opened);
- `journaled`: through a real `RunJournal` (synthesized starts and terminals, rejections) whose
  store keeps a tiny replay window, read back from cursor 0 as a late viewer would: gap markers
  in place of what fell out of the window.

For every mode the stream must pass the AG-UI checker (ids strictly increasing included), end on
the terminal entry's cursor, be the same bytes when fed again, and continue byte for byte after
a replayed prefix (what the server does on reconnect). Where nothing was lost, the text each
message carried arrives whole.
"""

from __future__ import annotations

import gc
import itertools
from collections import defaultdict
from typing import Any, Final

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.agui import MODES, AguiStreamEncoder, SharedEncoding, check_frames, parse_sse
from engine import (
    ArtifactRef,
    DelegationError,
    DelegationEvent,
    JournalEntry,
    Kind,
    MemoryJournalStore,
    RunJournal,
)
from tests.helpers.agui_scenarios import SCENARIOS

RUN = "run-p"
DELEGATIONS = ("del-a", "del-b", "del-c")
CALLS = ("call-0", "call-1", "call-2")
MESSAGES = ("m0", "m1")
TERMINALS = (Kind.RUN_FINISHED, Kind.RUN_FAILED, Kind.RUN_CANCELLED)

delegation = st.sampled_from(DELEGATIONS)
call = st.sampled_from(CALLS)
message = st.sampled_from(MESSAGES)
chunk = st.sampled_from(("a", "bc", "", "é ", "\n", '"q"', "\u2028"))

parent_op = st.one_of(
    st.tuples(st.just("p-text"), st.sampled_from(("start", "delta", "delta", "end")), message),
    st.tuples(st.just("p-reason"), st.sampled_from(("start", "delta", "end")), message),
    st.tuples(st.just("p-call"), st.sampled_from(("start", "args", "end", "result")), call),
    st.tuples(st.just("p-custom"), st.just(""), st.just("")),
)
sub_op = st.one_of(
    st.tuples(st.just("s-start"), delegation, call),
    st.tuples(st.just("s-text"), delegation, st.sampled_from(("start", "delta", "delta", "end"))),
    st.tuples(st.just("s-reason"), delegation, st.sampled_from(("start", "delta", "end"))),
    st.tuples(st.just("s-tool"), delegation, st.sampled_from(("start", "args", "end", "result"))),
    st.tuples(
        st.just("s-info"),
        delegation,
        st.sampled_from(
            (
                Kind.STATUS,
                Kind.ARTIFACT,
                Kind.CUSTOM,
                Kind.INPUT_REQUIRED,
                Kind.STREAM_DROPPED,
                "subagent.future.kind",
            )
        ),
    ),
    st.tuples(
        st.just("s-end"),
        delegation,
        st.sampled_from((Kind.FINISHED, Kind.FAILED, Kind.CANCELLED, "input_required")),
    ),
)
odd_op = st.tuples(
    st.just("odd"),
    st.sampled_from(("unknown", "gap", "dropped", "run.started")),
    st.just(""),
)
ops = st.lists(
    st.one_of(parent_op, parent_op, sub_op, sub_op, sub_op, odd_op), min_size=0, max_size=60
)


@st.composite
def scripts(draw: st.DrawFn) -> list[DelegationEvent]:
    body = draw(ops)
    events = [_event(op, i, draw(chunk)) for i, op in enumerate(body)]
    if draw(st.booleans()):
        events.insert(0, DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN))
    terminal = DelegationEvent(kind=draw(st.sampled_from(TERMINALS)), run_id=RUN, text="why")
    at = draw(st.integers(min_value=0, max_value=len(events)))
    events.insert(at, terminal)
    return events


def _event(op: tuple[str, str, str], sequence: int, text: str) -> DelegationEvent:
    kind, a, b = op
    if kind == "p-text":
        k = {"start": Kind.PARENT_TEXT_START, "delta": Kind.PARENT_TEXT_DELTA}.get(
            a, Kind.PARENT_TEXT_END
        )
        return DelegationEvent(kind=k, run_id=RUN, message_id=f"p-{b}", delta=text, role="user")
    if kind == "p-reason":
        k = {"start": Kind.PARENT_REASONING_START, "delta": Kind.PARENT_REASONING_DELTA}.get(
            a, Kind.PARENT_REASONING_END
        )
        return DelegationEvent(kind=k, run_id=RUN, message_id=f"pr-{b}", delta=text)
    if kind == "p-call":
        k = {
            "start": Kind.PARENT_TOOL_CALL_START,
            "args": Kind.PARENT_TOOL_CALL_ARGS,
            "end": Kind.PARENT_TOOL_CALL_END,
        }.get(a, Kind.PARENT_TOOL_CALL_RESULT)
        return DelegationEvent(
            kind=k,
            run_id=RUN,
            tool_call_id=b,
            tool_name="delegate_to_agent",
            args={"agent": "x", "objective": text} if k == Kind.PARENT_TOOL_CALL_ARGS else None,
            result={"status": "completed"} if k == Kind.PARENT_TOOL_CALL_RESULT else None,
        )
    if kind == "p-custom":
        return DelegationEvent(kind=Kind.PARENT_CUSTOM, run_id=RUN, name="note", raw={"value": 1})
    if kind == "odd":
        if a == "gap":
            return DelegationEvent(kind=Kind.GAP, run_id=RUN)
        if a == "dropped":
            return DelegationEvent(kind=Kind.DROPPED, run_id=RUN)
        if a == "run.started":
            return DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN)
        return DelegationEvent(kind="future.kind", run_id=RUN, text=text)
    did = a
    identity: dict[str, Any] = {
        "delegation_id": did,
        "parent_tool_call_id": CALLS[DELEGATIONS.index(did)],
        "agent_key": did.removeprefix("del-"),
        "agent_name": f"Agent {did}",
        "protocol": "a2a",
        "sequence": sequence,
    }
    if kind == "s-start":
        identity["parent_tool_call_id"] = b
        return DelegationEvent(kind=Kind.STARTED, run_id=RUN, status="working", **identity)
    if kind in ("s-text", "s-reason"):
        kinds = (
            (Kind.TEXT_START, Kind.TEXT_DELTA, Kind.TEXT_END)
            if kind == "s-text"
            else (Kind.REASONING_START, Kind.REASONING_DELTA, Kind.REASONING_END)
        )
        k = kinds[("start", "delta", "end").index(b)]
        return DelegationEvent(kind=k, run_id=RUN, message_id="m1", delta=text, **identity)
    if kind == "s-tool":
        k = {
            "start": Kind.TOOL_CALL_START,
            "args": Kind.TOOL_CALL_ARGS,
            "end": Kind.TOOL_CALL_END,
        }.get(b, Kind.TOOL_CALL_RESULT)
        return DelegationEvent(
            kind=k,
            run_id=RUN,
            tool_call_id="t1",
            tool_name="search",
            delta=text if k == Kind.TOOL_CALL_ARGS else None,
            result=text if k == Kind.TOOL_CALL_RESULT else None,
            **identity,
        )
    if kind == "s-info":
        return DelegationEvent(
            kind=b,
            run_id=RUN,
            status="working",
            text=text,
            name="progress",
            artifact=ArtifactRef(id="a", uri="host://a") if b == Kind.ARTIFACT else None,
            **identity,
        )
    error = DelegationError(code="remote_failed", message="no")
    if b == "input_required":
        return DelegationEvent(kind=Kind.FINISHED, run_id=RUN, status="input_required", **identity)
    return DelegationEvent(
        kind=b, run_id=RUN, error=None if b == Kind.FINISHED else error, **identity
    )


def direct(events: list[DelegationEvent], stride: int) -> list[JournalEntry]:
    return [JournalEntry(event, 1 + i * stride) for i, event in enumerate(events)]


def journaled(events: list[DelegationEvent], window: int) -> list[JournalEntry]:
    async def run() -> list[JournalEntry]:
        store = MemoryJournalStore(RUN, max_events=window)
        journal = RunJournal(RUN, store=store)
        for event in events:
            if not journal.ended:
                await journal.append_entries([JournalEntry(event)])
        return await store.read_after(0, journal.head + 1)

    return trio.run(run)


def stream(entries: list[JournalEntry], mode: str) -> list[bytes]:
    encoder = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
    return [encoder.feed(entry) for entry in entries]


def assert_conforms(entries: list[JournalEntry], mode: str) -> None:
    chunks = stream(entries, mode)
    frames = parse_sse(b"".join(chunks))
    violations = check_frames(frames)
    assert not violations, "\n".join(str(v) for v in violations)
    cursors = {entry.cursor for entry in entries}
    assert all(cursor in cursors for cursor, _ in frames if cursor is not None)
    terminal = next(e for e in entries if e.event.kind in Kind.RUN_TERMINALS)
    assert frames[-1][0] == terminal.cursor
    assert frames[-1][1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    # Deterministic: a second encoder writes the same bytes.
    assert stream(entries, mode) == chunks


@settings(max_examples=150, deadline=None)
@given(scripts(), st.sampled_from((1, 1, 3)))
def test_any_script_fed_directly_gives_a_valid_stream(
    events: list[DelegationEvent], stride: int
) -> None:
    entries = direct(events, stride)
    for mode in MODES:
        assert_conforms(entries, mode)


@settings(max_examples=100, deadline=None)
@given(scripts(), st.sampled_from((4, 16, 10_000)))
def test_a_late_viewer_of_a_journaled_run_gets_a_valid_stream(
    events: list[DelegationEvent], window: int
) -> None:
    entries = journaled(events, window)
    for mode in MODES:
        assert_conforms(entries, mode)


@settings(max_examples=100, deadline=None)
@given(scripts(), st.data())
def test_replaying_a_prefix_then_continuing_gives_the_same_bytes(
    events: list[DelegationEvent], data: st.DataObject
) -> None:
    entries = journaled(events, 10_000)
    cut = data.draw(st.integers(min_value=0, max_value=len(entries)))
    for mode in MODES:
        whole = stream(entries, mode)
        encoder = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
        for entry in entries[:cut]:
            encoder.feed(entry)  # what the server does on reconnect, bytes discarded
        assert [encoder.feed(entry) for entry in entries[cut:]] == whole[cut:]


def journaled_live(
    events: list[DelegationEvent], window: int
) -> tuple[list[JournalEntry], MemoryJournalStore]:
    """Every entry the journal accepted (what a live viewer reads) and the store afterwards,
    whose tiny window has long moved past most of them."""

    async def run() -> list[JournalEntry]:
        journal = RunJournal(RUN, store=store)
        accepted: list[JournalEntry] = []
        for event in events:
            if not journal.ended:
                accepted += await journal.append_entries([JournalEntry(event)])
        return accepted

    store = MemoryJournalStore(RUN, max_events=window)
    return trio.run(run), store


@settings(max_examples=150, deadline=None)
@given(scripts(), st.sampled_from((1, 4, 16)), st.data())
def test_a_viewer_resuming_after_the_window_moved_on_gets_a_valid_stream(
    events: list[DelegationEvent], window: int, data: st.DataObject
) -> None:
    """A viewer read the run live up to a cursor, then resumed there (Last-Event-ID) after the
    window moved on: the server rebuilds its encoder from what the store still holds up to that
    cursor and streams the rest, gap markers included. Spliced at the cut, the viewer's stream
    passes the checker: nothing it had open is opened again, nothing is left open (the soak once
    found the store keeping too little to rebuild what the viewer had open)."""
    live, store = journaled_live(events, window)
    cut = data.draw(st.sampled_from([entry.cursor for entry in live]))
    for mode in MODES:
        violations = _resumed_violations(live, store, cut, mode)
        assert not violations, f"{mode}, cut at {cut}:\n" + "\n".join(map(str, violations))


def _resumed_violations(
    live: list[JournalEntry], store: MemoryJournalStore, cut: int, mode: str
) -> list[Any]:
    """The checker's verdict on a viewer's stream read live up to `cut`, then resumed there
    from `store` as the server resumes a viewer (`web.server.open_stream`)."""
    viewer = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
    first = b"".join(viewer.feed(entry) for entry in live if entry.cursor <= cut)
    resumed = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
    for entry in store.read_after_nowait(0, cut):
        if entry.cursor > cut:  # a gap marker standing for cursors past the cut
            break
        resumed.feed(entry)
    second = b"".join(resumed.feed(entry) for entry in store.read_after_nowait(cut, len(live)))
    return check_frames(parse_sse(first) + parse_sse(second))


def _filler(count: int) -> list[DelegationEvent]:
    """Parent text that pushes everything before it out of a tiny window."""
    return [
        DelegationEvent(kind=Kind.PARENT_TEXT_DELTA, run_id=RUN, message_id="filler", delta="x")
        for _ in range(count)
    ]


_DELEGATION: Final = {"run_id": RUN, "delegation_id": "d1", "agent_key": "a"}
#: Runs where one kind of lifecycle entry must outlive the window for a resume at `cut` (the
#: viewer saw it) to be spliced soundly: (name, events, cut).
_LIFECYCLE_CASES: Final = [
    (
        "a message's end the viewer saw",
        [
            DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
            DelegationEvent(kind=Kind.PARENT_TEXT_START, run_id=RUN, message_id="m1"),
            DelegationEvent(kind=Kind.PARENT_TEXT_DELTA, run_id=RUN, message_id="m1", delta="a"),
            DelegationEvent(kind=Kind.PARENT_TEXT_END, run_id=RUN, message_id="m1"),
            *_filler(10),
            DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN),
        ],
        5,
    ),
    (
        "a tool call's end the viewer saw, its result after the cut",
        [
            DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
            DelegationEvent(
                kind=Kind.PARENT_TOOL_CALL_START, run_id=RUN, tool_call_id="c1", tool_name="t"
            ),
            DelegationEvent(
                kind=Kind.PARENT_TOOL_CALL_ARGS, run_id=RUN, tool_call_id="c1", delta="{}"
            ),
            DelegationEvent(kind=Kind.PARENT_TOOL_CALL_END, run_id=RUN, tool_call_id="c1"),
            *_filler(10),
            DelegationEvent(kind=Kind.PARENT_TOOL_CALL_RESULT, run_id=RUN, tool_call_id="c1"),
            DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN),
        ],
        8,
    ),
    (
        "a message an empty delta did not open",
        [
            DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
            DelegationEvent(kind=Kind.PARENT_REASONING_DELTA, run_id=RUN, message_id="r", delta=""),
            *_filler(4),
            DelegationEvent(
                kind=Kind.PARENT_REASONING_DELTA, run_id=RUN, message_id="r", delta="a"
            ),
            *_filler(10),
            DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN),
        ],
        8,
    ),
    (
        "a nested subagent its first status opened",
        [
            DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
            DelegationEvent(kind=Kind.STARTED, **_DELEGATION),
            DelegationEvent(kind=Kind.STATUS, status="working", nested_id="d1/n1", **_DELEGATION),
            *_filler(10),
            DelegationEvent(
                kind=Kind.TEXT_DELTA, message_id="m", delta="b", nested_id="d1/n1", **_DELEGATION
            ),
            DelegationEvent(kind=Kind.RUN_FINISHED, run_id=RUN),
        ],
        8,
    ),
]


@pytest.mark.parametrize(
    ("name", "events", "cut"), _LIFECYCLE_CASES, ids=[c[0] for c in _LIFECYCLE_CASES]
)
def test_what_a_resumed_viewer_had_open_outlives_the_window(
    name: str, events: list[DelegationEvent], cut: int
) -> None:
    live, store = journaled_live(events, 4)
    assert store.first_cursor > cut  # the cut is out of the window: a gap resume
    for mode in MODES:
        violations = _resumed_violations(live, store, cut, mode)
        assert not violations, f"{name}, {mode}:\n" + "\n".join(map(str, violations))


@settings(max_examples=100, deadline=None)
@given(scripts())
def test_every_delta_arrives_whole_where_nothing_was_lost(events: list[DelegationEvent]) -> None:
    entries = journaled(events, 10_000)
    sent: dict[tuple[str | None, str], str] = defaultdict(str)
    for entry in entries:
        event = entry.event
        if event.kind in (Kind.TEXT_DELTA, Kind.PARENT_TEXT_DELTA) and event.delta:
            did = event.delegation_id
            wire = f"{did}:{event.message_id}" if did else str(event.message_id)
            sent[(did, wire)] += event.delta
    frames = parse_sse(b"".join(stream(entries, "attributed")))
    got: dict[tuple[str | None, str], str] = defaultdict(str)
    for _, frame in frames:
        if frame["type"] == "TEXT_MESSAGE_CONTENT":
            got[(frame.get("subagentRunId"), frame["messageId"])] += frame["delta"]
    assert got == sent


@settings(max_examples=150, deadline=None)
@given(
    scripts(),
    st.sampled_from((1, 1, 3)),
    st.sampled_from(("", '"\\\n\t\u2028\x01', "é😀", "\ud800")),
)
def test_the_fast_text_delta_path_writes_the_generic_paths_bytes(
    events: list[DelegationEvent], stride: int, decoration: str
) -> None:
    """`feed` writes text deltas into open messages without building their dicts; what it writes
    must be exactly what `frame_events(translate(...))` writes, escaping included."""
    events = [
        attrs.evolve(event, delta=event.delta + decoration) if event.delta else event
        for event in events
    ]
    entries = direct(events, stride)
    for mode in MODES:
        fast = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
        generic = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
        generic._fast_delta = lambda event: None  # type: ignore[method-assign]
        assert [fast.feed(e) for e in entries] == [generic.feed(e) for e in entries]
        assert fast.dropped == generic.dropped


def test_the_fast_path_is_taken_for_a_delta_into_an_open_message() -> None:
    """The property above compares the two paths; this makes sure it compares something."""
    started = DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN)
    start = _event(("p-text", "start", "1"), 1, "")
    delta = _event(("p-text", "delta", "1"), 2, 'say "hi"')
    encoder = AguiStreamEncoder("thread-p", RUN, "attributed", strict=True)
    for entry in direct([started, start], 1):
        encoder.feed(entry)
    assert encoder._fast_delta(delta) == (
        b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"p-1","delta":"say \\"hi\\""}'
    )


@settings(max_examples=100, deadline=None)
@given(scripts(), st.data())
def test_viewers_sharing_an_encoding_write_what_each_would_write_alone(
    events: list[DelegationEvent], data: st.DataObject
) -> None:
    """Viewers of one run share a `SharedEncoding` (the server gives each run one): whatever
    their modes, their starting cursors and the order they are fed in, each writes the bytes it
    would write alone, including viewers whose entries were merged (new event objects) and a
    cache small enough to evict."""
    entries = journaled(events, 10_000)
    capacity = data.draw(st.sampled_from((1, 4, 2048)))
    shared = SharedEncoding(capacity)
    viewers = []
    for _ in range(data.draw(st.integers(min_value=2, max_value=4))):
        mode = data.draw(st.sampled_from(MODES))
        cut = data.draw(st.integers(min_value=0, max_value=len(entries)))
        mine = list(entries)
        if data.draw(st.booleans()):  # this viewer's copy of the events: never shared
            mine = [JournalEntry(attrs.evolve(e.event), e.cursor) for e in entries]
        encoder = AguiStreamEncoder("thread-p", RUN, mode, strict=True, shared=shared)
        for entry in mine[:cut]:
            encoder.feed(entry)
        viewers.append((encoder, mine, cut, [], stream(mine, mode)[cut:]))
    order = data.draw(st.randoms(use_true_random=False))  # who reads next
    while busy := [v for v in viewers if len(v[3]) < len(v[1]) - v[2]]:
        encoder, mine, cut, out, _ = order.choice(busy)
        out.append(encoder.feed(mine[cut + len(out)]))
    for _, _, _, out, alone in viewers:
        assert out == alone


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_viewers_in_every_mode_share_one_encoding_of_the_golden_runs(scenario: str) -> None:
    """The golden runs (subagent text into open messages, which attributed and inline viewers
    write differently) read by two viewers per mode, entry by entry in turn, all sharing one
    encoding: each writes what it writes alone."""
    entries = SCENARIOS[scenario]()
    shared = SharedEncoding()
    viewers = [
        (mode, AguiStreamEncoder("thread-p", RUN, mode, strict=True, shared=shared))
        for mode in MODES
        for _ in range(2)
    ]
    outs: list[list[bytes]] = [[] for _ in viewers]
    for entry in entries:
        for (_, encoder), out in zip(viewers, outs, strict=True):
            out.append(encoder.feed(entry))
    assert outs == [stream(entries, mode) for mode, _ in viewers]
    assert shared.hits > 0


def test_viewers_of_one_run_encode_a_text_delta_once() -> None:
    """The property above shows sharing changes no byte; this shows it shares something."""
    script = [
        DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
        _event(("p-text", "start", "1"), 1, ""),
        *(_event(("p-text", "delta", "1"), 2 + i, f"piece {i} ") for i in range(10)),
    ]
    entries = direct(script, 1)
    shared = SharedEncoding()
    encoders = [
        AguiStreamEncoder("thread-p", RUN, "attributed", strict=True, shared=shared)
        for _ in range(3)
    ]
    outs = [[encoder.feed(entry) for entry in entries] for encoder in encoders]
    assert outs[0] == outs[1] == outs[2] == stream(entries, "attributed")
    assert (shared.misses, shared.hits) == (10, 20)
    # A viewer alone keeps nothing: the others gone, its lookups are skipped.
    del encoders[1:], outs
    gc.collect()
    assert shared.viewers == 1
    more = JournalEntry(_event(("p-text", "delta", "1"), 99, "more"), 100)
    assert encoders[0].feed(more).startswith(b"id: 100\ndata: {")
    assert (shared.misses, shared.hits) == (10, 20)


delta_op = st.one_of(
    st.tuples(st.just("p-text"), st.just("delta"), message),
    st.tuples(st.just("s-text"), delegation, st.just("delta")),
)
_OPENING: Final = (
    ("p-text", "start", "m0"),
    ("p-text", "start", "m1"),
    ("s-start", "del-a", "call-0"),
    ("s-text", "del-a", "start"),
    ("s-start", "del-b", "call-1"),
    ("s-text", "del-b", "start"),
)


@st.composite
def streaming_scripts(draw: st.DrawFn) -> list[DelegationEvent]:
    """Scripts that are mostly text deltas into open messages, interleaved across messages
    and subagents, with anything else now and then: what a busy run looks like."""
    body = draw(
        st.lists(st.one_of(delta_op, delta_op, delta_op, delta_op, parent_op, sub_op), max_size=80)
    )
    ops = [*_OPENING, *body]
    events = [DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN)]
    events += [_event(op, i, draw(chunk)) for i, op in enumerate(ops)]
    events.append(DelegationEvent(kind=draw(st.sampled_from(TERMINALS)), run_id=RUN, text="why"))
    return events


def _batches(entries: list[JournalEntry], data: st.DataObject) -> list[list[JournalEntry]]:
    cuts = sorted(data.draw(st.sets(st.integers(min_value=1, max_value=max(1, len(entries) - 1)))))
    bounds = [0, *[c for c in cuts if c < len(entries)], len(entries)]
    return [entries[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _collapsed(frames: list[tuple[int | None, dict[str, Any]]]) -> list[Any]:
    """Events with each maximal run of TEXT_MESSAGE_CONTENT folded into one entry per message
    (first-appearance order): what merging deltas may change, taken out."""
    out: list[Any] = []
    run: dict[tuple[Any, Any], str] = {}
    for _, event in frames:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            key = (event["messageId"], event.get("subagentRunId"))
            run[key] = run.get(key, "") + event["delta"]
            continue
        if run:
            out.append(list(run.items()))
            run = {}
        out.append(event)
    if run:
        out.append(list(run.items()))
    return out


@settings(max_examples=150, deadline=None)
@given(st.one_of(scripts(), streaming_scripts()), st.sampled_from((4, 16, 10_000)), st.data())
def test_a_batch_written_at_once_is_the_same_stream_with_deltas_merged(
    events: list[DelegationEvent], window: int, data: st.DataObject
) -> None:
    """`feed_batch` (what the server writes per ready batch) against `feed` per entry, for any
    split into batches: the same events in the same order once runs of deltas are folded, the
    same text per message, strictly increasing ids ending on the same cursor, a valid stream;
    and the encoder is left in the same state (the next entries give the same bytes)."""
    entries = journaled(events, window)
    batches = _batches(entries, data)
    for mode in MODES:
        single = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
        batched = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
        one_by_one = b"".join(single.feed(e) for e in entries)
        at_once = b"".join(batched.feed_batch(batch) for batch in batches)
        frames, merged = parse_sse(one_by_one), parse_sse(at_once)
        assert _collapsed(merged) == _collapsed(frames)
        assert not check_frames(merged)
        ids = [cursor for cursor, _ in merged if cursor is not None]
        assert ids == sorted(set(ids))
        assert ids[-1:] == [c for c, _ in frames if c is not None][-1:]
        assert batched.dropped == single.dropped
        if len(entries) > 1 and data.draw(st.booleans()):
            cut = data.draw(st.integers(min_value=1, max_value=len(entries) - 1))
            head_single = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
            head_batched = AguiStreamEncoder("thread-p", RUN, mode, strict=True)
            for entry in entries[:cut]:
                head_single.feed(entry)
            for batch in _batches(entries[:cut], data):
                head_batched.feed_batch(batch)
            rest = entries[cut:]
            assert [head_batched.feed(e) for e in rest] == [head_single.feed(e) for e in rest]


def test_a_batch_of_interleaved_deltas_becomes_one_content_event_per_message() -> None:
    """The property above allows merging; this shows it happens, in message order, with the
    batch's last cursor."""
    script = [
        DelegationEvent(kind=Kind.RUN_STARTED, run_id=RUN),
        _event(("p-text", "start", "1"), 1, ""),
        _event(("p-text", "start", "2"), 2, ""),
        *(_event(("p-text", "delta", "12"[i % 2]), 3 + i, f"{i} ") for i in range(6)),
    ]
    entries = direct(script, 1)
    encoder = AguiStreamEncoder("thread-p", RUN, "attributed", strict=True)
    encoder.feed_batch(entries[:3])
    body = encoder.feed_batch(entries[3:])
    assert body == (
        b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"p-1","delta":"0 2 4 "}\n\n'
        b'id: 9\ndata: {"type":"TEXT_MESSAGE_CONTENT","messageId":"p-2","delta":"1 3 5 "}\n\n'
    )
