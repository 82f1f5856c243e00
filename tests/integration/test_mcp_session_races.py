"""A session ended while one of its requests is handled, on the MCP endpoint.

The Codex CLI, on SIGINT with a `delegate_to_agent` call in flight, sends
`notifications/cancelled` for the call and DELETEs its session at almost the same moment. The
official `mcp` transport answers the notification with 202 before it hands it to the session; a
DELETE that terminates the session in between made the hand-off raise `anyio.ClosedResourceError`,
which the SDK logged as an error and answered with a second (500) response that Hypercorn refused
with `UnexpectedMessageError` (another traceback). Any request can meet such a teardown; one whose
response has not started must get 404 (the MCP spec's answer for a terminated session), not the
500 Hypercorn sends for an app that gave no answer, nor no answer at all.

Each race is forced once, deterministically (the hand-off is held until the teardown happened,
through a gate on the SDK's stream), and then run loose, many times in both orders, as a real
client does it. Always: every response is 2xx or 404 with a JSON (or SSE, or empty) body, the
delegations end cancelled, nothing is logged at ERROR or with a traceback, no task is left behind.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import pytest
import trio
from mcp.shared._context_streams import ContextSendStream

from adapters.inprocess import LocalTask
from engine import Kind, Run, Status
from tests.helpers.agents import local_agent
from tests.helpers.mcp_endpoint import RawMCP, call_args, open_endpoint_run

ITERATIONS = 50
CANCEL = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}


class _Agent:
    """An in-process agent whose every delegation blocks until it is cancelled."""

    def __init__(self) -> None:
        self.started: dict[str, trio.Event] = {}

    async def __call__(self, task: LocalTask) -> str:
        self.started.setdefault(task.objective, trio.Event()).set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_started(self, objective: str) -> None:
        with trio.fail_after(10):
            await self.started.setdefault(objective, trio.Event()).wait()


def _live_tasks() -> set[trio.lowlevel.Task]:
    tasks: set[trio.lowlevel.Task] = set()
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is not None and task not in tasks:
            tasks.add(task)
            pending.extend(t for n in task.child_nurseries for t in n.child_tasks)
    return tasks


@contextmanager
def _no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    loud = [  # the records at ERROR, and any record with a traceback
        f"{r.name} {r.levelname}: {r.getMessage()} ({r.exc_info[1]!r})"
        if r.exc_info
        else f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or (r.exc_info and r.levelno >= logging.WARNING)
    ]
    assert not loud, f"{len(loud)} records logged loudly, the first: {loud[:2]}"


def _check_response(response: httpx.Response, what: str) -> None:
    """2xx or 404 with a JSON (an SSE stream for a call; nothing for a 202) body, never 500."""
    assert response.status_code != 500, (what, response.content)
    assert response.is_success or response.status_code == 404, (what, response.status_code)
    body = response.content
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data: "):
                json.loads(line.removeprefix("data: "))
    elif body:
        json.loads(body)


async def _open_call(http: httpx.AsyncClient, run: Run, agent: _Agent, objective: str) -> Any:
    """A session for one `delegate_to_agent` call that blocks: returns the session, the call
    (to start in a nursery) and a function that waits for the call's response (its SSE stream
    ends with the session)."""
    assert run.endpoint is not None
    raw = RawMCP(run.endpoint, http)
    await raw.open()
    done = trio.Event()
    responses: list[httpx.Response] = []

    async def call() -> None:
        async with http.stream(
            "POST",
            raw.endpoint.url,
            json=raw.call_body(call_args(objective=objective)),
            headers=raw.headers(),
        ) as response:
            await response.aread()
        responses.append(response)
        done.set()

    async def finished() -> httpx.Response:
        with trio.fail_after(10):
            await done.wait()
        return responses[0]

    return raw, call, finished


async def _wait_all_cancelled(run: Run, count: int) -> None:
    """Until `count` delegations of the run have ended; they must all have been cancelled."""
    ended = 0
    with trio.fail_after(20):
        async with run.events() as subscription:
            async for entry in subscription:
                ended += entry.event.kind in Kind.DELEGATION_TERMINALS
                if ended == count:
                    break
    assert [record.status for record in run.delegations()] == [Status.CANCELLED] * count


@contextmanager
def _gate_hand_off(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    hold: Callable[[ContextSendStream[Any]], Awaitable[None]],
) -> Iterator[None]:
    """Runs `hold` just before the transport hands the first message with `method` (client to
    server) to its session: the window in which a teardown makes the hand-off raise."""
    original = ContextSendStream.send
    held = False

    async def send(self: ContextSendStream[Any], item: Any) -> None:
        nonlocal held
        if not held and getattr(getattr(item, "message", None), "method", None) == method:
            held = True
            await hold(self)
        await original(self, item)

    monkeypatch.setattr(ContextSendStream, "send", send)
    yield


async def test_a_cancel_handed_over_after_the_session_was_deleted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The exact interleaving: the notification got its 202, then the DELETE terminated the
    # session, then the notification was handed to the (closed) session.
    reached, deleted = trio.Event(), trio.Event()

    async def hold(_: ContextSendStream[Any]) -> None:
        reached.set()
        await deleted.wait()

    agent = _Agent()
    before = _live_tasks()
    with _no_errors_logged(caplog), _gate_hand_off(monkeypatch, "notifications/cancelled", hold):
        async with open_endpoint_run([local_agent(fn=agent)]) as (endpoint, _, run):
            async with httpx.AsyncClient(timeout=10.0) as http, trio.open_nursery() as nursery:
                raw, call, finished = await _open_call(http, run, agent, "forced")
                nursery.start_soon(call)
                await agent.wait_started("forced")
                cancelled: list[httpx.Response] = []

                async def cancel() -> None:
                    cancelled.append(
                        await http.post(raw.endpoint.url, json=CANCEL, headers=raw.headers())
                    )

                nursery.start_soon(cancel)
                with trio.fail_after(10):
                    await reached.wait()
                deleted_response = await http.delete(raw.endpoint.url, headers=raw.headers())
                deleted.set()
                call_response = await finished()
            assert deleted_response.status_code == 200
            assert cancelled[0].status_code == 202  # it had gone out before the teardown
            for what, response in (("cancel", cancelled[0]), ("call", call_response)):
                _check_response(response, what)
            await _wait_all_cancelled(run, 1)
        assert endpoint.calls_in_flight == 0
    assert _live_tasks() <= before


@pytest.mark.parametrize("started", [False, True], ids=["not-started", "started"])
async def test_a_request_whose_session_ends_as_it_is_handed_over(
    started: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The session's streams close just as a request (here a ping) is handed over: before its
    # response started it gets 404 (without an answer Hypercorn would have sent a 500, or
    # nothing at all); after, its SSE stream ends, empty but complete.
    headers_received = trio.Event()

    async def hold(stream: ContextSendStream[Any]) -> None:
        if started:
            with trio.fail_after(10):
                await headers_received.wait()
        stream.close()
        raise anyio.ClosedResourceError

    agent = _Agent()
    before = _live_tasks()
    with _no_errors_logged(caplog), _gate_hand_off(monkeypatch, "ping", hold):
        async with open_endpoint_run([local_agent(fn=agent)]) as (endpoint, _, run):
            async with httpx.AsyncClient(timeout=10.0) as http, trio.open_nursery() as nursery:
                raw, call, finished = await _open_call(http, run, agent, "ping")
                nursery.start_soon(call)
                await agent.wait_started("ping")
                ping = {"jsonrpc": "2.0", "id": 99, "method": "ping"}
                async with http.stream(
                    "POST", raw.endpoint.url, json=ping, headers=raw.headers()
                ) as response:
                    headers_received.set()
                    await response.aread()
                call_response = await finished()
            if started:
                assert response.status_code == 200
                assert response.content == b""
            else:
                assert response.status_code == 404
                assert response.json()["error"] == "session_ended"
                assert "session" in response.json()["message"]
            for what, checked in (("ping", response), ("call", call_response)):
                _check_response(checked, what)
            await _wait_all_cancelled(run, 1)
        assert endpoint.calls_in_flight == 0
    assert _live_tasks() <= before


async def _race(
    http: httpx.AsyncClient, run: Run, agent: _Agent, objective: str, first: str, offset: float
) -> dict[str, httpx.Response]:
    """One call blocked in flight, then its cancellation and its session's DELETE at once:
    `first` is sent first, the other `offset` seconds later. Returns the three responses."""
    raw, call, finished = await _open_call(http, run, agent, objective)
    responses: dict[str, httpx.Response] = {}

    async def cancel() -> None:
        responses["cancel"] = await http.post(raw.endpoint.url, json=CANCEL, headers=raw.headers())

    async def delete() -> None:
        responses["delete"] = await http.delete(raw.endpoint.url, headers=raw.headers())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await agent.wait_started(objective)
        one, other = (cancel, delete) if first == "cancel" else (delete, cancel)
        nursery.start_soon(one)
        await trio.sleep(offset)
        nursery.start_soon(other)
    responses["call"] = await finished()
    return responses


@pytest.mark.parametrize("first", ["cancel", "delete"])
async def test_cancel_and_delete_at_once_never_answer_500_nor_log_errors(
    first: str, caplog: pytest.LogCaptureFixture
) -> None:
    agent = _Agent()
    before = _live_tasks()
    with _no_errors_logged(caplog):
        async with open_endpoint_run([local_agent(fn=agent)]) as (endpoint, _, run):
            async with httpx.AsyncClient(timeout=10.0) as http:
                for i in range(ITERATIONS):
                    # A spread of offsets, from the same scheduling step to a few 100 µs.
                    responses = await _race(http, run, agent, f"call {i}", first, (i % 5) * 1e-4)
                    for what, response in responses.items():
                        _check_response(response, f"{what} #{i}")
                    assert responses["delete"].status_code == 200
            await _wait_all_cancelled(run, ITERATIONS)
        assert endpoint.calls_in_flight == 0
    assert _live_tasks() <= before
