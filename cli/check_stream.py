"""`subagent-engine check-stream FILE`: is a captured AG-UI SSE stream one a consumer accepts?

This module owns the command's I/O only: read the capture (a file, or `-` for stdin), hand it to
`adapters.agui.parse_sse` and `check_frames`, print the outcome. Exit status: 0 and
`ok: N events` for a clean stream; 1 with one line per violation; 2 when the input cannot be
read or is not SSE (the line that is wrong is named).
"""

from __future__ import annotations

import sys
from typing import BinaryIO, TextIO

from adapters.agui import SseError, check_frames, parse_sse

__all__ = ["check_stream_main"]


def check_stream_main(
    path: str,
    *,
    stdin: BinaryIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if path == "-":
            data = (stdin or sys.stdin.buffer).read()
        else:
            with open(path, "rb") as file:
                data = file.read()
    except OSError as exc:
        print(f"check-stream: cannot read {path}: {exc.strerror or exc}", file=err)
        return 2
    try:
        frames = parse_sse(data)
    except SseError as exc:
        print(f"check-stream: {path}: not an SSE stream: {exc}", file=err)
        return 2
    violations = check_frames(frames)
    if violations:
        for violation in violations:
            print(violation, file=out)
        print(f"{len(violations)} violation(s) in {len(frames)} events", file=out)
        return 1
    print(f"ok: {len(frames)} events", file=out)
    return 0
