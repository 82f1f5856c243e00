"""A hostile remote AG-UI agent, in memory: the sans-IO mapper (`adapters.agui._remote`) and, under
a mock clock, the target's session (`adapters.agui._target`) over an httpx mock transport.

The same cases run end to end against a raw server on 127.0.0.1 in
`tests/integration/test_agui_hostile.py`; here each rule is pinned where it lives.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import AguiAgentConfig, AguiRemoteMapper, AguiTarget, RemoteSseDecoder
from engine import (
    AgentSpec,
    DelegationError,
    DelegationIdentity,
    DelegationPolicy,
    DelegationRequest,
    DelegationState,
    Engine,
    ErrorCode,
    Kind,
    RemoteCancel,
    Status,
    TargetUpdate,
)

STARTED = {"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1"}
FINISHED = {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"}
START = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
END = {"type": "TEXT_MESSAGE_END", "messageId": "m"}
IDENTITY = DelegationIdentity(
    run_id="run", delegation_id="del", agent_key="agent", agent_name="Agent", protocol="agui"
)


def delta(text: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": text}


def sse(*events: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def fed(body: bytes, *, piece: int = 1 << 16, **options: Any) -> tuple[AguiRemoteMapper, list[Any]]:
    """`body` fed in pieces of `piece` bytes, then the end."""
    mapper = AguiRemoteMapper(**options)
    out: list[TargetUpdate] = []
    for start in range(0, len(body), piece):
        out += mapper.feed(body[start : start + piece])
    out += mapper.end()
    return mapper, out


def terminals(updates: list[TargetUpdate]) -> list[str]:
    """The terminals the engine's own state machine makes of `updates` (at most one)."""
    state = DelegationState(IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    events = [event for update in updates for event in state.feed(update)]
    return [e.kind for e in events if e.kind in Kind.DELEGATION_TERMINALS]


def text(updates: list[TargetUpdate]) -> str:
    return "".join(u.delta or "" for u in updates if u.kind == Kind.TEXT_DELTA)


# -- a. a terminal before RUN_STARTED -------------------------------------------------------------


def test_run_finished_before_run_started_is_malformed_and_nothing_after_it_counts() -> None:
    mapper, updates = fed(sse(FINISHED, STARTED, START, delta("late"), END, FINISHED))
    assert updates == []
    assert mapper.error is not None and mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert "'RUN_FINISHED' before RUN_STARTED" in mapper.error.message
    assert mapper.terminal is None  # the remote may still run: the session stops it


def test_run_error_before_run_started_is_the_one_terminal() -> None:
    early = {"type": "RUN_ERROR", "message": "no capacity", "code": "E_BUSY"}
    mapper, updates = fed(sse(early, STARTED, START, delta("late"), END, FINISHED))
    assert [u.kind for u in updates] == [Kind.FAILED]
    assert mapper.error is None and mapper.terminal == "failed"
    (failed,) = updates
    assert failed.error is not None and failed.error.message == "no capacity"
    assert failed.error.metadata == {"remote_code": "E_BUSY", "before_run_started": True}
    assert terminals(updates) == [Kind.FAILED]


# -- b. duplicated frames -------------------------------------------------------------------------


def test_every_frame_twice_keeps_one_lifecycle_and_the_text_the_remote_sent() -> None:
    events = [STARTED, START, delta("Hel"), delta("lo"), END, {**FINISHED, "result": "done"}]
    mapper, updates = fed(b"".join(sse(e) * 2 for e in events))
    assert mapper.error is None and mapper.terminal == "finished"
    assert [u.kind for u in updates] == [
        Kind.STARTED,
        Kind.TEXT_START,
        *[Kind.TEXT_DELTA] * 4,
        Kind.TEXT_END,
        Kind.FINISHED,
    ]
    assert text(updates) == "HelHellolo"
    assert mapper.ignored["duplicate"] == 3  # RUN_STARTED, TEXT_MESSAGE_START, TEXT_MESSAGE_END
    assert terminals(updates) == [Kind.FINISHED]


@pytest.mark.parametrize(
    "twice",
    [
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s", "name": "helper"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
    ],
)
def test_a_repeated_opening_event_is_one_opening(twice: dict[str, Any]) -> None:
    mapper, updates = fed(sse(STARTED, twice, twice, FINISHED))
    assert mapper.error is None and mapper.ignored["duplicate"] == 1
    assert len(updates) == len({u.kind for u in updates})  # nothing twice


def test_run_started_again_for_the_same_run_is_news_of_nothing() -> None:
    mapper, updates = fed(sse(STARTED, START, delta("a"), STARTED, delta("b"), END, FINISHED))
    assert mapper.error is None and mapper.ignored["duplicate"] == 1
    assert text(updates) == "ab"
    assert terminals(updates) == [Kind.FINISHED]


def test_a_repeat_after_something_else_is_not_a_retransmission() -> None:
    mapper, _ = fed(sse(STARTED, START, delta("a"), START, END, FINISHED))
    assert mapper.error is not None and "already open" in mapper.error.message


# -- c. frames bounded by bytes -------------------------------------------------------------------


@pytest.mark.parametrize("where", ["one line", "many data lines"])
def test_frames_are_bounded_by_bytes_not_characters(where: str) -> None:
    limit = 1 << 12
    wide = "\U0001f600" * (limit // 4 + 1)  # limit + 4 bytes, a quarter as many characters
    if where == "one line":
        body = b'data: {"d":"' + wide.encode() + b'"}\n\n'
    else:
        body = b"".join(b"data: " + ch.encode() + b"\n" for ch in wide) + b"\n"
    decoder = RemoteSseDecoder(max_frame_bytes=limit)
    with pytest.raises(DelegationError) as caught:
        list(decoder.feed(body))
    assert caught.value.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert f"longer than {limit} bytes" in caught.value.message


def test_a_frame_of_exactly_the_limit_is_read() -> None:
    limit = 1 << 12
    value = b'{"type":"CUSTOM","name":"n","value":"' + b"\xc3\xa9" * 10 + b'"}'
    value = value[:-2] + b"x" * (limit - len(value) - 1) + b'"}'
    assert len(value) + 1 == limit  # the value and its LF
    (event,) = RemoteSseDecoder(max_frame_bytes=limit).feed(b"data: " + value + b"\n\n")
    assert event["value"].startswith("é" * 10)


def test_an_oversized_line_is_refused_as_soon_as_its_bytes_pass_the_limit() -> None:
    limit = 1 << 16
    decoder = RemoteSseDecoder(max_frame_bytes=limit)
    list(decoder.feed(sse(STARTED) + b'data: {"d":"'))

    def read_until_refused() -> int:
        read = 0
        try:
            while read < 4 * limit:
                list(decoder.feed(b"x" * 1024))
                read += 1024
        except DelegationError:
            return read
        return read

    assert limit - 1024 <= read_until_refused() <= limit  # not a piece more than the limit


def test_a_long_line_in_small_pieces_is_scanned_once() -> None:
    # 4 MiB in 1 KiB pieces: rescanning what came before on every piece would be ~8 GB of work.
    decoder = RemoteSseDecoder(max_frame_bytes=8 << 20)
    began = time.perf_counter()
    list(decoder.feed(b'data: {"type":"CUSTOM","name":"n","value":"'))
    for _ in range(4096):
        list(decoder.feed(b"x" * 1024))
    (event,) = decoder.feed(b'"}\n\n')
    assert len(event["value"]) == 4 << 20
    assert time.perf_counter() - began < 2.0  # ~0.05 s here; quadratic: minutes


# -- d. many small deltas -------------------------------------------------------------------------


def test_20k_one_character_deltas_map_complete_and_in_order() -> None:
    rng = random.Random(7)  # repeats included: a repeated delta is text too
    letters = "".join(rng.choice("abc") for _ in range(20_000))
    body = sse(STARTED, START, *map(delta, letters), END, FINISHED)
    mapper, updates = fed(body, piece=4096)
    assert mapper.error is None
    assert text(updates) == letters


# -- f. a body cut inside a frame -----------------------------------------------------------------


def test_a_body_ending_inside_a_frame_is_stream_interrupted_not_a_half_event() -> None:
    whole = sse(delta("never whole"))
    mapper, updates = fed(sse(STARTED, START) + whole[: len(whole) // 2])
    assert [u.kind for u in updates] == [Kind.STARTED, Kind.TEXT_START]
    assert mapper.error is not None and mapper.error.code == ErrorCode.STREAM_INTERRUPTED
    assert "in the middle of a frame" in mapper.error.message


def test_a_whole_last_frame_without_its_blank_line_still_counts() -> None:
    mapper, updates = fed(sse(STARTED) + b"data: " + json.dumps(FINISHED).encode())
    assert mapper.error is None and updates[-1].kind == Kind.FINISHED


# -- g. a frame that is not JSON ------------------------------------------------------------------


def test_a_frame_that_is_not_json_is_named_in_a_bounded_message() -> None:
    mapper, updates = fed(sse(STARTED) + b"data: <html>" + b"x" * (100 << 10) + b"\n\n")
    assert [u.kind for u in updates] == [Kind.STARTED]
    assert mapper.error is not None and mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert "data is not JSON: Expecting value" in mapper.error.message
    assert len(mapper.error.message) < 300


# -- h. events of another run ---------------------------------------------------------------------


def test_the_remotes_own_run_id_is_the_remote_task_id() -> None:
    minted = {"runId": "remote-minted"}
    mapper, updates = fed(sse({**STARTED, **minted}, {**FINISHED, **minted}))
    assert mapper.error is None and mapper.task_id == "remote-minted"
    assert updates[0].remote_task_id == "remote-minted"


@pytest.mark.parametrize(
    ("terminal", "words"),
    [
        ({**FINISHED, "runId": "r-other"}, "RUN_FINISHED names runId 'r-other'"),
        ({**FINISHED, "threadId": "t-other"}, "RUN_FINISHED names threadId 't-other'"),
        ({"type": "RUN_ERROR", "message": "x", "runId": "r-other"}, "RUN_ERROR names runId"),
        ({**STARTED, "runId": "r-other"}, "a second RUN_STARTED (run 'r-other')"),
    ],
)
def test_a_terminal_or_start_of_another_run_is_malformed(
    terminal: dict[str, Any], words: str
) -> None:
    mapper, updates = fed(sse(STARTED, START, delta("so far"), terminal, FINISHED))
    assert mapper.error is not None and mapper.error.code == ErrorCode.MALFORMED_REMOTE_PAYLOAD
    assert words in mapper.error.message
    assert text(updates) == "so far" and terminals(updates) == []


def test_run_error_without_ids_is_still_our_runs_failure() -> None:
    mapper, updates = fed(sse(STARTED, {"type": "RUN_ERROR", "message": "boom"}))
    assert mapper.error is None and updates[-1].kind == Kind.FAILED


# -- e. a stream that never ends, under a mock clock ----------------------------------------------


class EndlessRemote:
    """An httpx mock transport: RUN_STARTED, then keep-alives every second (or nothing) forever;
    stops are recorded and confirmed."""

    def __init__(self, *, keepalive: bool) -> None:
        self.keepalive = keepalive
        self.stops: list[dict[str, Any]] = []
        self.closed = trio.Event()

    async def body(self) -> AsyncIterator[bytes]:
        try:
            yield sse(STARTED)
            while True:
                await trio.sleep(1.0) if self.keepalive else await trio.sleep_forever()
                yield b": keepalive\n\n"
        finally:
            self.closed.set()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stop"):
            self.stops.append(json.loads(request.content))
            return httpx.Response(200, json={})
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, content=self.body())

    def agent(self) -> AgentSpec:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self.handle))
        config = AguiAgentConfig(url="http://agent.test/run", stop_url="http://agent.test/stop")
        return AgentSpec(
            key="endless",
            protocol="agui",
            target=AguiTarget(config, http=http),
            policy=DelegationPolicy(cancel_retry_window=0.0, max_timeout=3600.0),
        )


@pytest.mark.parametrize("keepalive", [True, False])
async def test_an_endless_stream_ends_at_the_timeout_and_the_remote_is_stopped(
    autojump_clock: trio.abc.Clock, keepalive: bool
) -> None:
    remote = EndlessRemote(keepalive=keepalive)
    async with Engine([remote.agent()]) as eng, eng.open_run() as run:
        began = trio.current_time()
        result = await run.delegate(
            DelegationRequest(agent="endless", objective="x", timeout_seconds=300)
        )
        took = trio.current_time() - began
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert 300 <= took < 310
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    (stop,) = remote.stops
    assert stop["runId"] == "r-1" and stop["threadId"] == "t-1"
    assert remote.closed.is_set()  # the stream was closed, not left to the garbage collector


async def test_a_user_stop_ends_an_endless_stream_at_once(autojump_clock: trio.abc.Clock) -> None:
    remote = EndlessRemote(keepalive=True)
    async with Engine([remote.agent()]) as eng, eng.open_run() as run:
        handle = run.start_delegation(
            DelegationRequest(agent="endless", objective="x", timeout_seconds=300)
        )
        async with run.events() as events:
            async for entry in events:
                if entry.event.kind == Kind.STARTED:
                    break
        began = trio.current_time()
        handle.cancel("user pressed stop")
        with trio.fail_after(60):
            result = await handle.wait()
        took = trio.current_time() - began
    assert result.status == Status.CANCELLED
    assert took < 1.0  # no keep-alive, no timeout waited for
    assert result.remote_cancel == RemoteCancel.CONFIRMED and len(remote.stops) == 1
    assert remote.closed.is_set()


@pytest.mark.parametrize("kind", [{}, [], None, 5])
def test_an_event_whose_type_is_not_a_string_is_malformed_even_when_repeated(kind: Any) -> None:
    mapper, updates = fed(sse(STARTED, {"type": kind}, {"type": kind}))
    assert [u.kind for u in updates] == [Kind.STARTED]
    assert mapper.error is not None and "no string `type`" in mapper.error.message
