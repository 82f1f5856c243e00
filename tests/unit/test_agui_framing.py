"""One pipeline from journal to wire: entries are translated once into frames, which are written
as SSE (`sse_bytes`) or as WebSocket messages (`websocket_messages`).

The WebSocket messages must be exactly what the server sent before it had frames, when it cut
its own SSE bytes back into blocks (`tests.helpers.wire.messages_from_sse` is that code, kept as
the reference), and the SSE bytes exactly what `feed` / `feed_batch` and `frame_events` write.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.agui import (
    KEEPALIVE,
    MODES,
    AguiStreamEncoder,
    Frame,
    SharedEncoding,
    frame_events,
    parse_sse,
    sse_bytes,
    websocket_messages,
)
from engine import JournalEntry, to_json
from tests.helpers.agui_scenarios import RUN, SCENARIOS, THREAD
from tests.helpers.wire import messages_from_sse
from web.server import EngineEventEncoder

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_FRAMES = st.lists(
    st.tuples(
        st.none() | st.integers(min_value=0, max_value=2**53),
        st.dictionaries(st.text(), _JSON, max_size=4).map(
            lambda event: json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode(
                "utf-8", "surrogatepass"
            )
        ),
    ),
    max_size=6,
)


@given(_FRAMES)
def test_websocket_messages_are_what_the_sse_stream_was_cut_into(frames: list[Frame]) -> None:
    try:
        for _, data in frames:
            data.decode()
    except UnicodeDecodeError:
        return  # the encoder never writes a lone surrogate raw (it escapes it)
    assert websocket_messages(frames) == messages_from_sse(sse_bytes(frames))
    assert [json.loads(message) for message in websocket_messages(frames)] == [
        {"id": cursor, "data": json.loads(data)} for cursor, data in frames
    ]
    assert parse_sse(sse_bytes(frames)) == [(cursor, json.loads(data)) for cursor, data in frames]


def test_sse_blocks_and_the_keepalive_comment() -> None:
    assert sse_bytes([]) == b""
    assert sse_bytes([(None, b"{}")]) == b"data: {}\n\n"
    assert sse_bytes([(7, b'{"a":1}')]) == b'id: 7\ndata: {"a":1}\n\n'
    assert sse_bytes([(None, b"{}"), (3, b"[]")]) == b"data: {}\n\nid: 3\ndata: []\n\n"
    assert websocket_messages([(None, b"{}"), (3, b'{"b":"\xc3\xa9"}')]) == [
        '{"id":null,"data":{}}',
        '{"id":3,"data":{"b":"é"}}',
    ]
    assert messages_from_sse(KEEPALIVE) == [] and parse_sse(KEEPALIVE) == []


def _batches(entries: list[JournalEntry], size: int) -> list[list[JournalEntry]]:
    return [entries[i : i + size] for i in range(0, len(entries), size)]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_the_encoders_frames_are_its_sse_and_its_websocket_messages(
    scenario: str, mode: str, size: int
) -> None:
    """Translated once: the frames give `feed_batch`'s bytes as SSE, and as WebSocket messages
    what the server made of those bytes; `frame_events` of the translated events agrees."""
    entries = SCENARIOS[scenario]()
    by_frames = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    by_bytes = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    for batch in _batches(entries, size):
        frames = by_frames.frames_batch(batch)
        written = by_bytes.feed_batch(batch)
        assert sse_bytes(frames) == written
        assert websocket_messages(frames) == messages_from_sse(written)
    single = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    events = AguiStreamEncoder(THREAD, RUN, mode, strict=True)
    last = 0
    for entry in entries:
        translated = events.translate(entry)
        cursor = entry.cursor if translated and entry.cursor > last else None
        last = cursor or last
        assert single.feed(entry) == frame_events(translated, cursor)


def test_viewers_sharing_an_encoding_get_the_same_frames() -> None:
    entries = SCENARIOS["two_concurrent"]()
    shared = SharedEncoding()
    viewers = [AguiStreamEncoder(THREAD, RUN, "attributed", shared=shared) for _ in range(3)]
    alone = AguiStreamEncoder(THREAD, RUN, "attributed")
    expected = [alone.frames(entry) for entry in entries]
    for viewer in viewers:
        assert [viewer.frames(entry) for entry in entries] == expected
    assert shared.hits > 0


def test_the_engine_envelope_is_one_frame_per_entry() -> None:
    entries = SCENARIOS["happy_path"]()
    encoder = EngineEventEncoder(THREAD, RUN, "attributed")
    frames = encoder.frames_batch(entries)
    assert frames == [encoder.frames(entry)[0] for entry in entries]
    assert frames == [(entry.cursor, to_json(entry.event).encode()) for entry in entries]
    expected: list[Any] = [
        {"id": entry.cursor, "data": json.loads(to_json(entry.event))} for entry in entries
    ]
    assert [json.loads(message) for message in websocket_messages(frames)] == expected
    assert websocket_messages(frames) == messages_from_sse(sse_bytes(frames))
