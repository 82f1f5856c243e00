"""Reading captured AG-UI SSE text back into events: `parse_sse`.

This module owns the reading side of our SSE framing (the writing side is
`adapters.agui._framing.sse_bytes`): blocks separated by a blank line, `id: <cursor>` and
`data: <json>` lines, `:` comments (keep-alives) ignored. It is sans-IO and strict where a
browser client is: CR line endings (@ag-ui/client 1.0.0 splits frames only on LF LF), data that
is not a JSON object, NaN/Infinity tokens (`JSON.parse` refuses them) and numbers out of a
double's range, an id that is not a cursor
and an id without data are `SseError`s naming the line, never another exception. It does not
judge the events themselves; `adapters.agui._checker` does.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["SseError", "parse_sse"]

#: Longest cursor accepted (the server refuses longer ones too).
_MAX_ID_DIGITS: Final = 18


class SseError(ValueError):
    """Captured SSE text that cannot be read; `line` is 1-based (0: the input as a whole)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.reason = message


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a number no JSON writer sends back as written
        raise ValueError(f"number {text[:32]} is out of range")
    return value


def parse_sse(text: str | bytes) -> list[tuple[int | None, dict[str, Any]]]:
    """`(id, event)` for every event in `text`, in order; `id` is None where no `id:` was sent.

    The last block may end at the end of the input without its blank line (a capture cut right
    after the final event is still read).
    """
    if isinstance(text, str):
        source = text
    else:
        try:
            source = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SseError(f"not UTF-8 (byte {exc.start})") from None
    if "\r" in source:
        where = source.count("\n", 0, source.index("\r")) + 1
        raise SseError("CR line ending: frame with LF only", where)
    out: list[tuple[int | None, dict[str, Any]]] = []
    cursor: int | None = None
    data: list[str] = []
    block_line = 0
    for number, line in enumerate(source.split("\n"), start=1):
        if not line:
            if data or cursor is not None:
                out.append(_dispatch(cursor, data, block_line))
            cursor, data, block_line = None, [], 0
            continue
        if block_line == 0:
            block_line = number
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "id":
            if cursor is not None:
                raise SseError("two id lines in one event", number)
            if not value.isascii() or not value.isdigit() or len(value) > _MAX_ID_DIGITS:
                raise SseError(
                    f"id {value[:40]!r} is not a cursor (a non-negative integer)", number
                )
            cursor = int(value)
        # `event:`, `retry:` and unknown fields are ignored, as the SSE specification says.
    if data or cursor is not None:
        out.append(_dispatch(cursor, data, block_line))
    return out


def _dispatch(cursor: int | None, data: list[str], line: int) -> tuple[int | None, dict[str, Any]]:
    if not data:
        raise SseError("an id without data", line)
    try:
        event = json.loads(
            "\n".join(data), parse_constant=_refuse_constant, parse_float=_finite_float
        )
    except (ValueError, RecursionError) as exc:
        raise SseError(f"data is not JSON: {str(exc)[:120]}", line) from None
    if not isinstance(event, dict):
        raise SseError(f"data is a JSON {type(event).__name__}, not an object", line)
    return cursor, event
