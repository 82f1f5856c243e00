"""Fuzz harness: the engine's JSON readers and writer, `engine._wire`.

Any bytes go to `event_from_json` and to `result_from_json`. `WireError` is the one expected
refusal; any other exception is a bug. When a reader accepts a document, what it read must
survive a round trip: `to_json` must write it as standard JSON (no NaN or Infinity, which a
browser's `JSON.parse` refuses) that encodes as UTF-8 (a document spelling a lone surrogate,
escaped or as its UTF-8 form, is read with U+FFFD in its place), the same reader must accept
that text, and the value read back must equal the first one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fuzz._harness import instrumented_imports

with instrumented_imports("engine", "cattrs"):
    from engine._wire import WireError, event_from_json, result_from_json, to_json

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

SEEDS: list[bytes] = [
    # Events.
    b'{"kind":"subagent.started","run_id":"run-1"}',
    b'{"kind":"subagent.text.delta","run_id":"run-1","sequence":3,"time":1.5,'
    b'"delegation_id":"del-1","agent_key":"research","protocol":"a2a",'
    b'"message_id":"m-1","delta":"Hel"}',
    b'{"kind":"subagent.artifact","run_id":"r","delegation_id":"d","artifact":'
    b'{"id":"a-1","name":"notes.md","mime_type":"text/markdown",'
    b'"uri":"host://delegations/d/artifacts/notes.md","size_bytes":12,"metadata":{"k":1}}}',
    b'{"kind":"subagent.failed","run_id":"r","error":{"code":"remote_timeout",'
    b'"message":"Remote task did not finish before timeout.","retryable":true,'
    b'"remote_status":"working","metadata":{"after_s":180}}}',
    b'{"kind":"stream.dropped","run_id":"r","dropped":{"reason":"status_folded","count":4,'
    b'"bytes":120,"kinds":{"subagent.status":4},"first_cursor":7,"last_cursor":10}}',
    b'{"kind":"subagent.tool_call.result","run_id":"r","tool_call_id":"t","tool_name":"search",'
    b'"args":{"q":[1,2,null]},"result":"ok","synthesized":true,"raw":{"x":{}}}',
    b'{"kind":"custom.kind","run_id":"r","newer_field":{"a":[1]},"extra":{"b":2}}',
    # Results.
    b'{"delegation_id":"del-1","agent":"research","remote_protocol":"a2a","status":"completed"}',
    b'{"delegation_id":"del-1","agent":"research","remote_protocol":"a2a","status":"completed",'
    b'"run_id":"r","parent_tool_call_id":"toolu_1","remote_task_id":"task-1",'
    b'"remote_context_id":"ctx-1","summary":"Official a2a-go exposes...",'
    b'"artifacts":[{"id":"a","name":"a2a-sdk-notes.md","mime_type":"text/markdown",'
    b'"uri":"host://delegations/del-1/artifacts/a2a-sdk-notes.md"}],'
    b'"messages":[{"role":"assistant","text":"..."}],"remote_cancel":"not_needed",'
    b'"card_fingerprint":"sha256:ab","raw_task":{"provider":"a2a","task_id":"task-1"},'
    b'"metadata":{"n":1}}',
    b'{"delegation_id":"d","agent":"a","remote_protocol":"agui","status":"failed",'
    b'"error":{"code":"remote_timeout","message":"m","retryable":true,"remote_status":"working"}}',
    # Lone surrogates: escaped, in a key, in nested values, as (surrogatepass) UTF-8 bytes,
    # and a valid pair spelled as two escapes.
    b'{"kind":"subagent.text.delta","run_id":"r","delta":"a\\ud800b","message_id":"\\udc00"}',
    b'{"kind":"k","run_id":"r","raw":{"\\ud800":["\\udfff",{"x":"\\uD83D"}]},"extra":1}',
    b'{"kind":"k","run_id":"\xed\xa0\x80"}',
    b'{"kind":"k","run_id":"r","delta":"\\ud83d\\ude00"}',
    b'{"delegation_id":"d","agent":"a","remote_protocol":"p","status":"failed",'
    b'"summary":"\\ud800","error":{"code":"c","message":"\\udbff"}}',
    # Malformed.
    b'{"kind":1,"run_id":"r"}',
    b'{"kind":"k","run_id":"r","sequence":true}',
    b"[]",
    b"",
]

DICTIONARY: list[bytes] = [
    b'"kind"',
    b'"run_id"',
    b'"sequence"',
    b'"time"',
    b'"delegation_id"',
    b'"artifact"',
    b'"error"',
    b'"dropped"',
    b'"extra"',
    b'"args"',
    b'"result"',
    b'"raw"',
    b'"metadata"',
    b'"code"',
    b'"message"',
    b'"retryable"',
    b'"agent"',
    b'"remote_protocol"',
    b'"status"',
    b'"artifacts"',
    b'"messages"',
    b'"role"',
    b'"text"',
    b'"size_bytes"',
    b'"kinds"',
    b"1e999",
    b'"\\ud800"',
    b'"\\udfff"',
    b"\\uD83D\\uDE00",
    b"\xed\xa0\x80",
    b"NaN",
    b"-0.0",
]


def fuzz_one_input(data: bytes) -> None:
    for read in (event_from_json, result_from_json):
        _round_trip(read, data)


def _round_trip(read: Callable[[str | bytes], Any], data: bytes) -> None:
    try:
        first = read(data)
    except WireError:
        return
    text = to_json(first)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AssertionError(f"to_json wrote text that cannot be UTF-8: {text!r}") from exc
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise AssertionError(f"to_json wrote something that is not JSON: {text!r}") from exc
    try:
        second = read(text)
    except WireError as exc:
        raise AssertionError(f"{read.__name__} refuses what to_json wrote: {text!r}") from exc
    if second != first:
        raise AssertionError(
            f"{read.__name__} round trip changed the value:\n  first:  {first!r}\n"
            f"  second: {second!r}\n  written: {text!r}"
        )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
