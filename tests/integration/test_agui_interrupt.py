"""AG-UI interrupts on `POST /agui`, against the real server on 127.0.0.1.

A subagent's question ends the `POST /agui` stream the AG-UI 1.0 way (the asking subagent
SUBAGENT_FINISHED `suspended` naming its interrupt, RUN_FINISHED with an `interrupt` outcome)
while the engine's run waits; a new `POST /agui` on the same thread with `resume` answers it and
the same run streams on: a new RUN_STARTED, the same subagent announced again, the answer
reaching the in-process agent (`LocalTask.ask`), the parent's tool call getting the result. Every
stream (interrupted, resumed, and the two one after the other) passes the official verifier
(@ag-ui/client 1.0.0, tests/agui_verify/verify.mjs) and the encoder's checker. Bad resumes are
refused with JSON 4xx before anything is answered or streamed. In `custom` mode the stream stays
open with a CUSTOM `subagent.interrupt` and the answer goes through `POST /runs/<id>/answer`.
The parent is the scripted parent (research and review at once) over the real MCP endpoint.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import AguiAgentConfig, AguiTarget, check_events, check_frames, parse_sse
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import ScriptedParent
from engine import (
    AgentSpec,
    Answer,
    DelegationPolicy,
    DelegationRequest,
    Engine,
    InputRequiredMode,
    Kind,
    Status,
)
from tests.helpers.node_packages import ensure_npm_packages, run_node_json_lines
from web.config import parse_config
from web.server import RunHost, create_app, default_encoder_factory, open_host, serve_app

VERIFY_DIR = Path(__file__).resolve().parents[1] / "agui_verify"
SCHEMA = {"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}
TIMEOUT = 30


class Asker:
    """The research agent: says something, asks for a year (with a schema), may wait for
    `proceed`, then uses the answer."""

    def __init__(self, *, hold: bool = False) -> None:
        self.answers: list[Answer] = []
        self.proceed = trio.Event()
        if not hold:
            self.proceed.set()

    async def __call__(self, task: LocalTask) -> str:
        await task.say("Looking for the year.")
        reply = await task.ask("Which year?", schema=SCHEMA)
        self.answers.append(reply)
        await self.proceed.wait()
        year = (reply.data or {}).get("year", reply.text)
        await task.say(f"Found {year}.")
        return f"Checked {year}."


async def reviewed(task: LocalTask) -> str:
    return "Reviewed."


@asynccontextmanager
async def server(asker: Asker) -> AsyncIterator[tuple[str, RunHost]]:
    agents = [
        AgentSpec(
            key="research",
            target=InProcessTarget(asker),
            policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
        ),
        AgentSpec(key="review", target=InProcessTarget(reviewed)),
    ]
    config = parse_config("", "test.toml")
    async with (
        open_host(config, agents, ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base, host


def run_input(thread: str, run: str, **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "messages": [{"id": "u1", "role": "user", "content": "When did it start?"}],
        **extra,
    }


async def post_stream(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    """A `POST /agui` read to its end (its bytes in `.content`)."""
    with trio.fail_after(TIMEOUT):
        async with http.stream("POST", url, json=body) as response:
            await response.aread()
    return response


def events_of(body: bytes) -> list[dict[str, Any]]:
    frames = parse_sse(body)
    violations = check_frames(frames)
    assert not violations, "\n".join(str(v) for v in violations)
    return [event for _, event in frames]


def only(events: list[dict[str, Any]], kind: str, **fields: Any) -> list[dict[str, Any]]:
    return [
        e for e in events if e["type"] == kind and all(e.get(k) == v for k, v in fields.items())
    ]


def verify(tmp_path: Path, streams: dict[str, bytes]) -> None:
    """Every stream through the official @ag-ui/client 1.0.0 pipeline (verify.mjs)."""
    node = ensure_npm_packages(VERIFY_DIR)
    paths = {}
    for name, body in streams.items():
        paths[name] = tmp_path / f"{name}.sse"
        paths[name].write_bytes(body)
    results, _ = run_node_json_lines(
        node, VERIFY_DIR / "verify.mjs", [str(p) for p in paths.values()], timeout=60
    )
    by_source = {result["source"]: result for result in results}
    for name, path in paths.items():
        result = by_source[str(path)]
        assert result["ok"], (name, result["stage"], result["error"], result["event"])
        assert result["warnings"] == [], (name, result["warnings"])


async def test_a_question_interrupts_the_stream_and_a_resume_continues_the_same_run(
    tmp_path: Path,
) -> None:
    asker = Asker()
    async with server(asker) as (base, host), httpx.AsyncClient(timeout=TIMEOUT) as http:
        url = f"{base}/agui"
        first = await post_stream(http, url, run_input("thread-hitl", "agui-1"))
        assert first.status_code == 200, first.content
        interrupted = events_of(first.content)
        run_id = first.headers["x-run-id"]

        # The stream ended at the question; the engine's run waits.
        finished = interrupted[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["runId"] == "agui-1"
        [interrupt] = finished["outcome"]["interrupts"]
        research = only(interrupted, "SUBAGENT_STARTED", name="research")[0]
        delegation = research["subagentRunId"]
        assert interrupt["subagentRunId"] == delegation
        assert interrupt["id"].startswith(f"{delegation}-input-")
        assert interrupt["reason"] == "input_required"
        assert interrupt["message"] == "Which year?"
        assert interrupt["responseSchema"] == SCHEMA
        assert interrupt["expiresAt"].endswith("Z")
        assert only(interrupted, "SUBAGENT_FINISHED", subagentRunId=delegation) == [
            {
                "type": "SUBAGENT_FINISHED",
                "subagentRunId": delegation,
                "outcome": {"type": "suspended", "interruptIds": [interrupt["id"]]},
            }
        ]
        call = research["parentToolCallId"]
        assert only(interrupted, "TOOL_CALL_RESULT", toolCallId=call) == []
        hosted = host.local_run(run_id)
        assert hosted is not None and hosted.run is not None and not hosted.over
        assert [q.id for q in hosted.run.questions()] == [interrupt["id"]]

        # A new run on the thread must answer it first.
        pending = await http.post(url, json=run_input("thread-hitl", "agui-x"))
        assert pending.status_code == 409 and pending.json()["error"] == "interrupt_pending"

        # The resume answers it and the same run goes on.
        resume = run_input(
            "thread-hitl",
            "agui-2",
            resume=[
                {"interruptId": interrupt["id"], "status": "resolved", "payload": {"year": 1999}}
            ],
            forwardedProps={"answeredBy": "ada"},
        )
        second = await post_stream(http, url, resume)
        assert second.status_code == 200, second.content
        assert second.headers["x-run-id"] == run_id
        resumed = [event for _, event in parse_sse(second.content)]
        assert resumed[0] == {"type": "RUN_STARTED", "threadId": "thread-hitl", "runId": "agui-2"}
        assert resumed[1]["type"] == "SUBAGENT_STARTED"
        assert resumed[1]["subagentRunId"] == delegation  # a continuation, not a new subagent
        assert resumed[1]["parentToolCallId"] == call
        [closed] = only(resumed, "CUSTOM", name="subagent.input_closed")
        question = closed["value"]["question"]
        assert question["outcome"] == "answered"
        assert (question["surface"], question["answeredBy"]) == ("agui_resume", "ada")
        [done] = only(resumed, "SUBAGENT_FINISHED", subagentRunId=delegation)
        assert done["result"] == "Checked 1999."
        [result] = only(resumed, "TOOL_CALL_RESULT", toolCallId=call)
        assert "Checked 1999." in result["content"]
        kinds = [e["type"] for e in resumed]
        assert kinds.index("SUBAGENT_FINISHED") < kinds.index("TOOL_CALL_RESULT")
        assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["runId"] == "agui-2"
        assert resumed[-1].get("outcome", {"type": "success"}) == {"type": "success"}
        assert [(a.text, a.data) for a in asker.answers] == [(None, {"year": 1999})]
        assert check_events(interrupted + resumed) == []

        # The thread's run is over: nothing is left to resume.
        again = await http.post(url, json=resume)
        assert again.status_code == 404 and again.json()["error"] == "no_live_run"

    await trio.to_thread.run_sync(
        verify,
        tmp_path,
        {
            "interrupted": first.content,
            "resumed": second.content,
            "both": first.content + second.content,
        },
    )


async def test_bad_resumes_are_refused_before_anything_is_answered() -> None:
    asker = Asker()
    async with server(asker) as (base, host), httpx.AsyncClient(timeout=TIMEOUT) as http:
        url = f"{base}/agui"
        first = await post_stream(http, url, run_input("thread-bad", "agui-1"))
        [interrupt] = events_of(first.content)[-1]["outcome"]["interrupts"]
        iid = interrupt["id"]

        def entry(**fields: Any) -> dict[str, Any]:
            return {"interruptId": iid, "status": "resolved", **fields}

        refusals = [
            ({"resume": [entry(interruptId="nope", payload="x")]}, 400, "bad_resume"),
            (
                {"resume": [entry(payload={"year": 1}), entry(payload={"year": 2})]},
                400,
                "bad_resume",
            ),
            ({"resume": [entry(payload=1999)]}, 400, "bad_resume"),
            ({"resume": [entry(payload={"year": "soon"})]}, 422, "answer_invalid"),
            ({"resume": [entry(payload="   ")]}, 422, "answer_invalid"),
            ({"resume": [{"interruptId": iid, "status": "maybe"}]}, 400, "bad_input"),
            ({"resume": "yes"}, 400, "bad_input"),
        ]
        for extra, status, error in refusals:
            response = await http.post(url, json=run_input("thread-bad", "agui-2", **extra))
            assert (response.status_code, response.json()["error"]) == (status, error), extra
        invalid = await http.post(
            url, json=run_input("thread-bad", "r", resume=[entry(payload={"year": "soon"})])
        )
        assert invalid.json()["details"]["question_id"] == iid
        no_thread = {"messages": [], "resume": [entry(payload={"year": 1})]}
        response = await http.post(url, json=no_thread)
        assert (response.status_code, response.json()["error"]) == (400, "bad_resume")
        response = await http.post(
            url, json=run_input("thread-none", "r", resume=[entry(payload={"year": 1})])
        )
        assert (response.status_code, response.json()["error"]) == (404, "no_live_run")
        # Nothing was answered: the question is open, the agent still waits.
        hosted = host.local_run(first.headers["x-run-id"])
        assert hosted is not None and hosted.run is not None
        assert [q.id for q in hosted.run.questions()] == [iid]
        assert asker.answers == []

        # Answered elsewhere meanwhile: resolving it is 409 question_closed (who answered it
        # in `details`); cancelling it is accepted (nothing is left to give up).
        token = first.headers["x-viewer-token"]
        answered = await http.post(
            f"{base}/runs/{hosted.run_id}/answer",
            json={"delegationId": interrupt["subagentRunId"], "data": {"year": 2001}},
            headers={"authorization": f"Bearer {token}"},
        )
        assert answered.status_code == 202, answered.text
        closed = await http.post(
            url, json=run_input("thread-bad", "r", resume=[entry(payload={"year": 1})])
        )
        assert (closed.status_code, closed.json()["error"]) == (409, "question_closed")
        assert closed.json()["details"]["surface"] == "http"
        cancelled = run_input(
            "thread-bad", "agui-3", resume=[{"interruptId": iid, "status": "cancelled"}]
        )
        second = await post_stream(http, url, cancelled)
        assert second.status_code == 200, second.content
        resumed = [event for _, event in parse_sse(second.content)]
        assert only(resumed, "SUBAGENT_FINISHED", result="Checked 2001.")
        assert check_events(events_of(first.content) + resumed) == []


async def test_a_resume_while_a_stream_of_the_thread_is_live_is_refused() -> None:
    asker = Asker(hold=True)
    async with server(asker) as (base, _), httpx.AsyncClient(timeout=TIMEOUT) as http:
        url = f"{base}/agui"
        first = await post_stream(http, url, run_input("thread-live", "agui-1"))
        [interrupt] = events_of(first.content)[-1]["outcome"]["interrupts"]
        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"year": 7}}
        body = b""
        with trio.fail_after(TIMEOUT):
            async with http.stream(
                "POST", url, json=run_input("thread-live", "agui-2", resume=[answer])
            ) as response:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if b"subagent.input_closed" in body and not asker.proceed.is_set():
                        twice = await http.post(
                            url, json=run_input("thread-live", "agui-3", resume=[answer])
                        )
                        assert twice.status_code == 409
                        assert twice.json()["error"] == "stream_live"
                        asker.proceed.set()
        resumed = [event for _, event in parse_sse(body)]
        assert only(resumed, "SUBAGENT_FINISHED", result="Checked 7.")
        assert check_events(events_of(first.content) + resumed) == []


@pytest.mark.parametrize("mode", ["inline", "hidden"])
async def test_inline_and_hidden_streams_interrupt_without_subagents(
    mode: str, tmp_path: Path
) -> None:
    asker = Asker()
    async with server(asker) as (base, _), httpx.AsyncClient(timeout=TIMEOUT) as http:
        url = f"{base}/agui"
        props = {"mode": mode}
        first = await post_stream(
            http, url, run_input(f"thread-{mode}", "agui-1", forwardedProps=props)
        )
        interrupted = events_of(first.content)
        assert only(interrupted, "SUBAGENT_STARTED") == []
        [interrupt] = interrupted[-1]["outcome"]["interrupts"]
        assert "subagentRunId" not in interrupt and interrupt["message"] == "Which year?"
        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"year": 3}}
        second = await post_stream(
            http, url, run_input(f"thread-{mode}", "agui-2", resume=[answer], forwardedProps=props)
        )
        resumed = [event for _, event in parse_sse(second.content)]
        assert resumed[0]["type"] == "RUN_STARTED" and resumed[-1]["type"] == "RUN_FINISHED"
        assert only(resumed, "SUBAGENT_STARTED") == []
        assert check_events(interrupted + resumed) == []
        assert [a.data for a in asker.answers] == [{"year": 3}]
    await trio.to_thread.run_sync(
        verify, tmp_path, {"interrupted": first.content, "resumed": second.content}
    )


async def test_a_custom_stream_shows_the_interrupt_and_stays_open_for_an_http_answer() -> None:
    asker = Asker()
    async with server(asker) as (base, _), httpx.AsyncClient(timeout=TIMEOUT) as http:
        body = b""
        carriers: list[dict[str, Any]] = []
        with trio.fail_after(TIMEOUT):
            async with http.stream(
                "POST",
                f"{base}/agui",
                json=run_input("thread-custom", "agui-1", forwardedProps={"mode": "custom"}),
            ) as response:
                token = response.headers["x-viewer-token"]
                run_id = response.headers["x-run-id"]
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if carriers or b"subagent.interrupt" not in body:
                        continue
                    carriers = only(
                        [e for _, e in parse_sse(body.rsplit(b"\n\n", 1)[0] + b"\n\n")],
                        "CUSTOM",
                        name="subagent.interrupt",
                    )
                    [interrupt] = carriers[0]["value"]["interrupts"]
                    answered = await http.post(
                        f"{base}/runs/{run_id}/answer",
                        json={
                            "delegationId": carriers[0]["value"]["delegationId"],
                            "questionId": interrupt["id"],
                            "data": {"year": 1901},
                        },
                        headers={"authorization": f"Bearer {token}"},
                    )
                    assert answered.status_code == 202, answered.text
        events = events_of(body)
        assert carriers, "no subagent.interrupt event"
        assert events[-1]["type"] == "RUN_FINISHED" and "outcome" not in events[-1]
        assert [a.data for a in asker.answers] == [{"year": 1901}]


async def test_a_client_may_keep_its_stream_open_at_a_question() -> None:
    """`forwardedProps.interrupts: false`: the stream stays open (answered over HTTP)."""
    asker = Asker()
    async with server(asker) as (base, _), httpx.AsyncClient(timeout=TIMEOUT) as http:
        body = b""
        with trio.fail_after(TIMEOUT):
            async with http.stream(
                "POST",
                f"{base}/agui",
                json=run_input("thread-open", "agui-1", forwardedProps={"interrupts": False}),
            ) as response:
                token, run_id = response.headers["x-viewer-token"], response.headers["x-run-id"]
                answered = False
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if not answered and b"subagent.input_required" in body:
                        answered = True
                        reply = await http.post(
                            f"{base}/runs/{run_id}/answer",
                            json={"delegationId": _delegation(body), "data": {"year": 5}},
                            headers={"authorization": f"Bearer {token}"},
                        )
                        assert reply.status_code == 202, reply.text
        events = events_of(body)
        assert all(e.get("outcome", {}).get("type") != "interrupt" for e in events)
        assert only(events, "SUBAGENT_FINISHED", result="Checked 5.")


def _delegation(body: bytes) -> str:
    for _, event in parse_sse(body.rsplit(b"\n\n", 1)[0] + b"\n\n"):
        if event["type"] == "CUSTOM" and event["name"] == "subagent.input_required":
            return str(event["subagentRunId"])
    raise AssertionError(json.dumps(body.decode()[-400:]))


async def test_a_run_that_asks_twice_is_interrupted_and_resumed_twice(tmp_path: Path) -> None:
    """The second resumed stream replays through the first interrupt and its resume."""
    answers: list[Answer] = []

    async def twice(task: LocalTask) -> str:
        await task.say("First question.")
        first = await task.ask("Which year?", schema=SCHEMA)
        answers.append(first)
        await task.say("Second question.")
        second = await task.ask("Which month?")
        answers.append(second)
        return f"Checked {second.text} {(first.data or {}).get('year')}."

    agents = [
        AgentSpec(
            key="research",
            target=InProcessTarget(twice),
            policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
        ),
        AgentSpec(key="review", target=InProcessTarget(reviewed)),
    ]
    config = parse_config("", "test.toml")
    async with (
        open_host(config, agents, ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
        httpx.AsyncClient(timeout=TIMEOUT) as http,
    ):
        url = f"{base}/agui"
        bodies = [(await post_stream(http, url, run_input("thread-2x", "agui-1"))).content]
        for run, payload in (("agui-2", {"year": 1999}), ("agui-3", "May")):
            # (A resumed stream alone may answer a call of the run it continues: checked below
            # as one sequence of runs.)
            [interrupt] = parse_sse(bodies[-1])[-1][1]["outcome"]["interrupts"]
            entry = {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}
            response = await post_stream(http, url, run_input("thread-2x", run, resume=[entry]))
            assert response.status_code == 200, response.content
            bodies.append(response.content)
        streams = [[event for _, event in parse_sse(body)] for body in bodies]
        first_id = streams[0][-1]["outcome"]["interrupts"][0]["id"]
        second_id = streams[1][-1]["outcome"]["interrupts"][0]["id"]
        assert first_id != second_id
        assert streams[1][-1]["outcome"]["interrupts"][0]["message"] == "Which month?"
        assert [s[0]["runId"] for s in streams] == ["agui-1", "agui-2", "agui-3"]
        research = only(streams[0], "SUBAGENT_STARTED", name="research")[0]["subagentRunId"]
        for stream in streams[1:]:
            assert (
                stream[1]["type"] == "SUBAGENT_STARTED" and stream[1]["subagentRunId"] == research
            )
        assert only(streams[2], "SUBAGENT_FINISHED", result="Checked May 1999.")
        assert streams[2][-1].get("outcome", {"type": "success"}) == {"type": "success"}
        assert [(a.text, a.data) for a in answers] == [(None, {"year": 1999}), ("May", None)]
        assert check_events([event for stream in streams for event in stream]) == []
    await trio.to_thread.run_sync(
        verify,
        tmp_path,
        {**{f"stream-{i}": body for i, body in enumerate(bodies)}, "all": b"".join(bodies)},
    )


async def test_another_engine_answers_through_its_ag_ui_target() -> None:
    """This server as the remote AG-UI agent of an outer engine (`AguiTarget`, a client that
    resumes): the inner subagent's question becomes the outer delegation's question (with its
    schema), the outer answer goes down as a resume and the inner run goes on."""
    asker = Asker()
    async with server(asker) as (base, _):
        agent = AgentSpec(
            key="inner",
            protocol="agui",
            target=AguiTarget(AguiAgentConfig(url=f"{base}/agui")),
            policy=DelegationPolicy(input_required=InputRequiredMode.SURFACE),
        )
        async with Engine([agent]) as outer, outer.open_run() as run:
            request = DelegationRequest(agent="inner", objective="When did it start?")
            handle = run.start_delegation(request)
            with trio.fail_after(TIMEOUT):
                async with run.events() as events:
                    async for entry in events:
                        question = entry.event.question
                        if entry.event.kind == Kind.INPUT_REQUIRED and question is not None:
                            break
            assert question.text == "Which year?"
            assert question.response_schema == SCHEMA
            run.answer(handle.delegation_id, data={"year": 1999}, question_id=question.id)
            with trio.fail_after(TIMEOUT):
                result = await handle.wait()
        await agent.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.COMPLETED, result
    assert [(a.text, a.data) for a in asker.answers] == [(None, {"year": 1999})]
