"""The encoder's output on the wire: the same frames as SSE blocks or as WebSocket messages.

A stream is translated once (`AguiStreamEncoder.frames`, or the engine's envelope): into
frames, each one event as it goes out, `(cursor, json)`: the cursor its `id:` carries (None: it
carries none) and its JSON, UTF-8, as the encoder wrote it (compact, so on one line). This module
owns only how frames are written for a transport, and decides nothing about them:

- `sse_bytes(frames)`: `id: <cursor>` (when there is one) and `data: <json>`, a blank line after
  each, LF only (what `adapters.agui._sse.parse_sse` reads back).
- `websocket_messages(frames)`: one text message per frame, `{"id":<cursor or null>,"data":<json>}`.

Both run on every viewer's stream: they only join bytes, nothing is parsed or encoded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeAlias

__all__ = ["KEEPALIVE", "Frame", "sse_bytes", "websocket_messages"]

#: One event on its way out: (the cursor its `id:` carries, or None; its JSON as UTF-8 bytes).
Frame: TypeAlias = tuple[int | None, bytes]

#: An SSE comment: what a stream writes when the run is idle, so that proxies keep it open.
KEEPALIVE: Final = b": keepalive\n\n"


def sse_bytes(frames: Sequence[Frame]) -> bytes:
    """The SSE blocks of `frames`, in order (one body write)."""
    if len(frames) == 1:  # most writes of a live stream: one event
        cursor, data = frames[0]
        if cursor is None:
            return b"data: %s\n\n" % data
        return b"id: %d\ndata: %s\n\n" % (cursor, data)
    return b"".join(
        [
            b"data: %s\n\n" % data if cursor is None else b"id: %d\ndata: %s\n\n" % (cursor, data)
            for cursor, data in frames
        ]
    )


def websocket_messages(frames: Sequence[Frame]) -> list[str]:
    """One WebSocket text message per frame: `{"id":<cursor or null>,"data":<the event>}`."""
    return [
        f'{{"id":{"null" if cursor is None else format(cursor, "d")},"data":{data.decode()}}}'
        for cursor, data in frames
    ]
