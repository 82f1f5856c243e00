"""What a viewer's WebSocket messages were when the server made them from its own SSE bytes.

Before the stream had frames (`adapters.agui.Frame`), the `/runs/<id>/ws` route cut each write of
SSE bytes back into blocks and sent one message per block. `messages_from_sse` is that code, kept
as the reference the frames' `websocket_messages` must equal to the byte.
"""

from __future__ import annotations

__all__ = ["messages_from_sse"]


def messages_from_sse(chunk: bytes) -> list[str]:
    """SSE bytes -> one WebSocket text message per event: `{"id": cursor, "data": <event>}`."""
    frames = []
    for block in chunk.split(b"\n\n"):
        if not block or block.startswith(b":"):
            continue
        cursor = None
        data = []
        for line in block.split(b"\n"):
            if line.startswith(b"id: "):
                cursor = int(line[4:])
            elif line.startswith(b"data: "):
                data.append(line[6:])
        if data:
            number = "null" if cursor is None else str(cursor)
            payload = b"\n".join(data).decode()
            frames.append(f'{{"id":{number},"data":{payload}}}')
    return frames
