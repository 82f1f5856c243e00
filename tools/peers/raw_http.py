"""Just enough HTTP/1.1 for the in-process A2A servers of the benchmarks and tests.

One request per connection (`connection: close`), Content-Length bodies, no chunked uploads.
It exists so a remote can be measured or scripted without an SDK server in the way; it is not
a web server and nothing user-facing uses it.
"""

from __future__ import annotations

import json
from typing import Any

import trio

__all__ = ["read_request", "respond_json"]


async def read_request(stream: trio.SocketStream) -> tuple[str, str, dict[str, str], bytes]:
    """(method, path, lower-cased headers, body) of one request; EOFError if the peer left."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError
        body += chunk
    return method, path, headers, body


async def respond_json(stream: trio.SocketStream, payload: Any, status: str = "200 OK") -> None:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode() + body)
