"""Fuzz harness: what the engine reads of a remote's trace context, and the collector headers.

Any bytes become a `traceparent` and a `tracestate` (split at the first newline) for
`engine.parent_context`, which must never raise: a header that does not parse is ignored (W3C
Trace Context, https://www.w3.org/TR/trace-context/#processing-model, section 4.3). When it
accepts one, the parent it gives must be a valid, remote span context whose trace and span ids
are the ones the header spelled, and writing it back out must give a version-00 `traceparent`
carrying those same ids. The same bytes, as text, go to `web.telemetry.collector_headers`, whose
one refusal is `ValueError`, whose message must be its fixed words and a position, never
anything it read (the values are a collector's credentials).
"""

from __future__ import annotations

import re

from opentelemetry import trace

from fuzz._harness import instrumented_imports

with instrumented_imports("engine", "web", "opentelemetry"):
    from engine._tracing import MAX_TRACEPARENT, _headers_of, parent_context
    from web.telemetry import collector_headers

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

_PARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_REFUSAL = re.compile(r"pair [0-9]+ is not name=value")

SEEDS: list[bytes] = [
    b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\n",
    b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future-part\nk=v",
    b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
    b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    b"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
    b"\xff\xfe-not-utf8\n\x00",
    b"authorization=Bearer%20secret,x-api-key=abc",
    b"=novalue,name=",
    b"",
]

DICTIONARY: list[bytes] = [
    b"00-",
    b"-01",
    b"-00",
    b"0af7651916cd43dd8448eb211c80319c",
    b"b7ad6b7169203331",
    b"\n",
    b"=",
    b",",
    b"%20",
]


def fuzz_one_input(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    traceparent, _, tracestate = text.partition("\n")
    found = parent_context(traceparent, tracestate)
    if found is not None:
        context = trace.get_current_span(found).get_span_context()
        assert context.is_valid and context.is_remote
        spelled = _PARENT.match(traceparent.strip())
        assert spelled is not None, f"accepted a traceparent of no known shape: {traceparent!r}"
        assert len(traceparent) <= MAX_TRACEPARENT
        assert format(context.trace_id, "032x") == spelled.group(1)
        assert format(context.span_id, "016x") == spelled.group(2)
        written = _headers_of(trace.NonRecordingSpan(context))["traceparent"]
        assert written.startswith(f"00-{spelled.group(1)}-{spelled.group(2)}-")
    try:
        headers = collector_headers(text)
    except ValueError as exc:
        refusal = str(exc)
    else:
        for name in headers:
            assert name and name == name.lower() and name.isascii()
        return
    # The refusal is its fixed words and a position, nothing read from the input.
    assert _REFUSAL.fullmatch(refusal), "a collector header's value leaked into an error"
