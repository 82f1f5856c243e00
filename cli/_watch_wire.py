"""What `subagent-engine watch` reads: the URL a user gives and the run's stream (sans-IO).

This module owns two translations and no I/O. `watch_target` turns the URL a user copies (a
run's events URL, its run URL, or the page's hand-over link `/#run=<id>&token=<token>`) into the
events URL to open and the viewer token it carried; `EngineStream` turns the bytes of
`GET /runs/<id>/events?format=engine` (SSE,
https://html.spec.whatwg.org/multipage/server-sent-events.html, one engine event per frame
with its cursor as `id:`) into `(cursor, DelegationEvent)` pairs for `cli._tree.RunTree`.

The stream is a stranger's: a line longer than `max_line_bytes` (unread data included), bytes
that are not UTF-8, an `id:` that is not a cursor, a cursor that goes back, and data that is not
an engine event (`engine.event_from_json`) are `StreamError`s saying which, never another
exception. Comments, `event:` and unknown fields are ignored, as the SSE standard says.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

import attrs

from engine import DelegationEvent, WireError, event_from_json

__all__ = ["MAX_LINE_BYTES", "BadUrl", "EngineStream", "StreamError", "WatchTarget", "watch_target"]

#: The longest line a stream may send: one engine event's document (the engine reads at most
#: 4 MiB of one) and its `data: ` prefix.
MAX_LINE_BYTES: Final = 4 * 1024 * 1024 + 64
#: Longest cursor accepted (the server refuses longer ones too).
_MAX_CURSOR_DIGITS: Final = 18
#: The `retry:` a server may ask for is honoured up to this many milliseconds.
MAX_RETRY_MS: Final = 30_000
#: A run id as a URL path segment (the server's are `run-<random>`).
_RUN_ID: Final = re.compile(r"[A-Za-z0-9._~-]{1,200}")


class BadUrl(ValueError):
    """A URL `watch` cannot watch; the message says what it takes."""


class StreamError(ValueError):
    """A stream that cannot be read; the message says why."""


@attrs.frozen
class WatchTarget:
    """The run to watch: its events URL (no token, no query) and the token the URL carried."""

    events_url: str
    run_id: str
    token: str | None


def watch_target(url: str) -> WatchTarget:
    """The events URL behind what a user copied:

    - `http://host/runs/<id>/events` (what `POST /runs` answers as `events_url`),
    - `http://host/runs/<id>` (the run), or
    - `http://host/#run=<id>&token=<token>` (the page's hand-over link).

    Any prefix before `/runs/` is kept (a server behind a proxy path). A `token` in the query or
    the fragment is returned apart; other query parameters are dropped (`watch` asks for the
    engine's format itself)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError as exc:
        raise BadUrl(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadUrl("give an http:// or https:// URL of a run (…/runs/<id>/events)")
    query = urllib.parse.parse_qs(parts.query)
    fragment = urllib.parse.parse_qs(parts.fragment)
    path = parts.path.rstrip("/")
    match = re.fullmatch(r"(.*)/runs/([^/]+)(/events)?", path)
    if match is not None:
        prefix, run_id = match.group(1), urllib.parse.unquote(match.group(2))
    elif "run" in fragment:
        prefix, run_id = path, fragment["run"][0]
    else:
        raise BadUrl(
            "the URL names no run: give its events URL (…/runs/<id>/events), its run URL "
            "(…/runs/<id>) or the page's link (…/#run=<id>&token=<token>)"
        )
    if not _RUN_ID.fullmatch(run_id):
        raise BadUrl("the run id in the URL is not one a server gives")
    tokens = query.get("token") or fragment.get("token") or [""]
    events = urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, f"{prefix}/runs/{urllib.parse.quote(run_id)}/events", "", "")
    )
    return WatchTarget(events_url=events, run_id=run_id, token=tokens[0] or None)


class EngineStream:
    """Reads an engine-format SSE stream fed in pieces (see the module's docstring)."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        #: The cursor of the last event read (what a reconnect sends as Last-Event-ID).
        self.cursor: int | None = None
        #: The reconnection delay the server asked for (`retry:`), in milliseconds.
        self.retry_ms: int | None = None
        self._buffer = bytearray()
        self._data: list[str] = []
        self._id: int | None = None

    def feed(self, chunk: bytes) -> list[tuple[int | None, DelegationEvent]]:
        """The events completed by `chunk`, in order."""
        self._buffer += chunk
        out: list[tuple[int | None, DelegationEvent]] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > self.max_line_bytes:
                    raise StreamError(f"a line of the stream is over {self.max_line_bytes} bytes")
                return out
            if end > self.max_line_bytes:
                raise StreamError(f"a line of the stream is over {self.max_line_bytes} bytes")
            raw = bytes(self._buffer[:end]).removesuffix(b"\r")
            del self._buffer[: end + 1]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StreamError("the stream is not UTF-8") from None
            event = self._line(line)
            if event is not None:
                out.append(event)

    def end(self) -> None:
        """The connection ended: whatever was not dispatched is dropped (the SSE rule)."""
        self._buffer.clear()
        self._data = []
        self._id = None

    def _line(self, line: str) -> tuple[int | None, DelegationEvent] | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            if sum(len(part) + 1 for part in self._data) > self.max_line_bytes:
                raise StreamError(f"an event of the stream is over {self.max_line_bytes} bytes")
        elif name == "id":
            if not value.isdigit() or not value.isascii() or len(value) > _MAX_CURSOR_DIGITS:
                raise StreamError(f"an event id is not a cursor: {value[:40]!r}")
            self._id = int(value)
        elif name == "retry" and value.isdigit() and value.isascii() and len(value) < 10:
            self.retry_ms = min(int(value), MAX_RETRY_MS)
        return None

    def _dispatch(self) -> tuple[int | None, DelegationEvent] | None:
        data, cursor = self._data, self._id
        self._data, self._id = [], None
        if not data:
            return None
        try:
            event = event_from_json("\n".join(data))
        except WireError as exc:
            where = f"event {cursor}" if cursor is not None else "an event"
            raise StreamError(f"{where} is not an engine event: {str(exc)[:200]}") from None
        if cursor is not None:
            if self.cursor is not None and cursor <= self.cursor:
                raise StreamError(f"event id {cursor} does not follow {self.cursor}")
            self.cursor = cursor
        return cursor, event
