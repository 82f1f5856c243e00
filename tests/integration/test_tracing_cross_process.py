"""One trace across processes: `serve` delegates over A2A to `a2a-serve`, whose parent delegates
to an a2a-sdk agent, and both services export their spans over OTLP/HTTP to one receiver.

All real parts, each in its own process on 127.0.0.1: `subagent-engine serve` (its scripted
parent delegates to `research` and `review`), `a2a-serve` with a scripted parent that delegates
its task to every agent of its host (`tools/peers/a2a_serve_delegating.py`, the real a2a-serve
server and engine wiring), and the a2a-sdk agent of `tools/peers/a2a_faulty.py`. The receiver
is `tests.helpers.otlp`. The trace the request to `serve` names runs through all of them:
a2a-serve's run span is the child of serve's `a2a start` client span (the W3C `traceparent`
header of that call, https://www.w3.org/TR/trace-context/), and the inner delegation and its
remote call are beneath it. Also: a2a-serve refuses a `[telemetry]` collector headers variable
it cannot use, naming the variable and never its value.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers import REPO_ROOT, processes
from tests.helpers.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.helpers.peers import A2AFaultyServer, ServedAgent
from tests.helpers.processes import ready_server

TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "10f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER_SPAN}-01"
OUTER, INNER = "serve-under-test", "a2a-serve-under-test"
SECRET = "s3cr3t-collector-key-7Hx4"

RUN_INPUT = {
    "threadId": "thread-cross-process",
    "messages": [{"id": "u1", "role": "user", "content": "Summarise Trio."}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


def telemetry(receiver: OtlpReceiver, service: str) -> str:
    return (
        f'[telemetry]\nenabled = true\nendpoint = "{receiver.endpoint}"\n'
        f'service_name = "{service}"\n'
    )


def a2a_entry(key: str, card_url: str) -> str:
    return f'[[agents]]\nkey = "{key}"\nprotocol = "a2a"\ncard_url = "{card_url}"\n'


@contextmanager
def delegating_a2a_serve(config: Path, toml: str) -> Iterator[ServedAgent]:
    """`a2a-serve` (a scripted parent delegating each task to every agent of `toml`)."""
    config.write_text(toml)
    argv = [sys.executable, "-m", "tools.peers.a2a_serve_delegating"]
    argv += ["--config", str(config), "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="a2a_serve_delegating") as (port, pid, stderr):
        agent = ServedAgent(port=port, pid=pid, stderr_path=stderr)
        try:
            yield agent
        finally:
            agent._http.close()


@contextmanager
def serve_process(config: Path, toml: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`subagent-engine serve --config config` and its base URL; stopped with SIGINT after."""
    config.write_text(toml)
    stderr_path = config.with_suffix(".stderr")
    with processes.serve_process("--config", str(config), stderr=stderr_path) as (
        proc,
        url,
        _,
    ):
        yield url, proc
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, stderr_path.read_text()


def one(spans: list[ReceivedSpan], service: str, name: str) -> ReceivedSpan:
    found = [span for span in spans if span.service == service and span.name == name]
    assert len(found) == 1, (service, name, [(s.service, s.name) for s in spans])
    return found[0]


def ancestors(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """`span`'s parents up to the root, nearest first (only those received)."""
    by_id = {s.span_id: s for s in spans}
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def test_one_trace_runs_from_serve_through_a2a_serve_to_the_inner_agent(
    tmp_path: Path, a2a_server: A2AFaultyServer
) -> None:
    with otlp_receiver() as receiver:
        inner_toml = a2a_entry("inner", a2a_server.card_url("stream"))
        inner_toml += telemetry(receiver, INNER)
        with delegating_a2a_serve(tmp_path / "a2a-serve.toml", inner_toml) as served:
            outer_toml = '[server]\nport = 0\n\n[store]\nkind = "memory"\n\n'
            outer_toml += telemetry(receiver, OUTER)
            outer_toml += a2a_entry("research", served.card_url)
            outer_toml += a2a_entry("review", a2a_server.card_url("stream"))
            with serve_process(tmp_path / "serve.toml", outer_toml) as (url, _):
                with httpx.Client(timeout=120) as http:
                    answer = http.post(
                        f"{url}/agui", json=RUN_INPUT, headers={"traceparent": TRACEPARENT}
                    )
                assert answer.status_code == 200, answer.text
                assert b"RUN_FINISHED" in answer.content, answer.text[-2000:]

                def arrived(spans: list[ReceivedSpan]) -> bool:
                    names = {(span.service, span.name) for span in spans}
                    return {
                        (OUTER, "subagent.run"),
                        (OUTER, "subagent.delegation research"),
                        (INNER, "subagent.run"),
                        (INNER, "subagent.delegation inner"),
                        (INNER, "a2a start"),
                    } <= names

                # Both processes export in batches (every 5 s) while they run.
                spans = receiver.wait_for(arrived, within=30, what="both services' spans")

    outer_run = one(spans, OUTER, "subagent.run")
    assert (outer_run.trace_id, outer_run.parent_span_id) == (TRACE, CALLER_SPAN)
    research = one(spans, OUTER, "subagent.delegation research")
    outer_starts = [
        s
        for s in spans
        if s.service == OUTER and s.name == "a2a start" and s.parent_span_id == research.span_id
    ]
    assert len(outer_starts) == 1, [(s.name, s.parent_span_id) for s in spans]
    outer_start = outer_starts[0]
    assert outer_start.kind == "client"

    # a2a-serve's run continues the outer call: same trace, its parent the outer client span.
    inner_run = one(spans, INNER, "subagent.run")
    assert inner_run.trace_id == TRACE
    assert inner_run.parent_span_id == outer_start.span_id
    assert inner_run.kind == "server"
    inner_delegation = one(spans, INNER, "subagent.delegation inner")
    inner_start = one(spans, INNER, "a2a start")
    assert inner_start.parent_span_id == inner_delegation.span_id
    assert inner_run in ancestors(inner_delegation, spans)
    # ... and so the whole chain, from the innermost remote call up to the caller's span.
    chain = [(s.service, s.name) for s in ancestors(inner_start, spans)]
    assert chain == [
        (INNER, "subagent.delegation inner"),
        (INNER, "tools/call delegate_to_agent"),
        (INNER, "subagent.run"),
        (OUTER, "a2a start"),
        (OUTER, "subagent.delegation research"),
        (OUTER, "tools/call delegate_to_agent"),
        (OUTER, "subagent.run"),
    ], chain
    assert {s.trace_id for s in spans if s.service in (OUTER, INNER)} == {TRACE}
    # The innermost agent was sent the inner call's traceparent.
    task_id = inner_start.attributes["subagent.remote_task_id"]
    [message] = a2a_server.entries("stream", "messages", task_id)
    assert message["traceparent"].split("-")[1:3] == [TRACE, inner_start.span_id]
