"""A delegation's question put to the parent's user through MCP elicitation, end to end.

The endpoint is `adapters.mcp.DelegationEndpoint` on a real listener on 127.0.0.1; the parent
is the official mcp client with an elicitation callback, in both protocol generations: a
session (`ClientSession`, `elicitation/create` on the call's stream) and the stateless
2026-07-28 version (`mcp.Client`, whose `call_tool` answers an `InputRequiredResult` and retries
with `inputResponses` and the sealed `requestState`). The remote is an in-process agent whose
`LocalTask.ask()` returns the answer it got, so what reached the remote is in its result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from adapters._asyncgens import closing_abandoned_generators
from adapters.inprocess import InProcessTarget, LocalTask
from adapters.mcp import DelegationEndpoint, connect
from engine import (
    AgentSpec,
    AnswerSurface,
    DelegationPolicy,
    Engine,
    ErrorCode,
    Kind,
    Question,
    QuestionOutcome,
    Run,
    Status,
)
from tests.helpers.mcp_endpoint import call_args, journal_events

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

YEAR_SCHEMA = {
    "type": "object",
    "properties": {"year": {"type": "integer", "minimum": 1900, "maximum": 2100}},
    "required": ["year"],
}
SIGN_IN = "https://sign-in.example/authorize?state=abc"
CLIENT = types.Implementation(name="test-parent", version="1.0")

Callback = Callable[[Any, Any], Awaitable[Any]]


def asking_agent(
    *, schema: dict[str, Any] | None = YEAR_SCHEMA, auth_url: str | None = None, **policy: Any
) -> AgentSpec:
    """An in-process agent that asks one question and returns what it was answered."""

    async def ask(task: LocalTask) -> str:
        answer = await task.ask(
            "Which year should the report cover?", schema=schema, auth_url=auth_url
        )
        got = json.dumps(answer.data, sort_keys=True) if answer.data else answer.text
        return f"The remote got: {got}"

    fields: dict[str, Any] = {"input_required": "surface", "elicitation": "ask", **policy}
    return AgentSpec(
        key="research",
        display_name="Research",
        target=InProcessTarget(ask),
        policy=DelegationPolicy(**fields),
    )


@asynccontextmanager
async def endpoint_run(
    agent: AgentSpec, **settings: Any
) -> AsyncIterator[tuple[DelegationEndpoint, Engine, Run]]:
    async with (
        DelegationEndpoint(**settings).serve() as endpoint,
        Engine([agent], endpoints=endpoint) as eng,
        eng.open_run() as run,
    ):
        yield endpoint, eng, run


class Parent:
    """The parent's MCP client, in either protocol generation, with one `call` method."""

    def __init__(self, call: Callable[..., Awaitable[types.CallToolResult]], raw: Any) -> None:
        self.call = call
        self.raw = raw


@asynccontextmanager
async def session_parent(run: Run, callback: Callback | None) -> AsyncIterator[Parent]:
    assert run.endpoint is not None
    async with connect(
        run.endpoint, read_timeout=60.0, elicitation_callback=callback, client_info=CLIENT
    ) as session:
        yield Parent(session.call_tool, session)


@asynccontextmanager
async def stateless_parent(run: Run, callback: Callback | None) -> AsyncIterator[Parent]:
    assert run.endpoint is not None
    async with (
        closing_abandoned_generators(),
        httpx2.AsyncClient(
            headers=dict(run.endpoint.headers), timeout=httpx2.Timeout(30.0, read=60.0)
        ) as http,
        Client(
            streamable_http_client(run.endpoint.url, http_client=http),
            mode="2026-07-28",
            elicitation_callback=callback,
            client_info=CLIENT,
        ) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        yield Parent(client.call_tool, client)


PARENTS = {"session": session_parent, "stateless": stateless_parent}


@pytest.fixture(params=sorted(PARENTS))
def parent(request: pytest.FixtureRequest) -> Any:
    return PARENTS[request.param]


def closed_questions(events: list[Any]) -> list[Question]:
    return [e.question for e in events if e.kind == Kind.INPUT_CLOSED]


def said(structured: dict[str, Any]) -> str:
    """Everything a result's structured content says, its strings unescaped."""
    return " ".join(_strings(structured))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def asked_question(run: Run) -> Question:
    """The first question the run's journal shows (bounded by the caller)."""
    async with run.events() as subscription:
        async for entry in subscription:
            if entry.event.kind == Kind.INPUT_REQUIRED and entry.event.question is not None:
                return entry.event.question
    raise AssertionError("the run ended without a question")


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded by the caller) until `condition` holds. Only for what nothing signals: a
    decline under `wait`, or a sign-in page the user agreed to visit, changes no question
    and journals nothing, so the endpoint's count is all there is to see."""
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.005)


# -- accepted ----------------------------------------------------------------------------


async def test_an_accepted_form_answers_the_remote(parent: Any) -> None:
    asked: list[Any] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"year": 2026})

    async with endpoint_run(asking_agent()) as (endpoint, eng, run):
        async with parent(run, answer) as client:
            with trio.fail_after(30):
                result = await client.call("delegate_to_agent", call_args())
        events = await journal_events(eng, run.run_id)
    assert result.structured_content["status"] == Status.COMPLETED, result
    assert 'The remote got: {"year": 2026}' in said(result.structured_content)
    [params] = asked
    assert params.mode == "form"
    assert params.message == "Research asks: Which year should the report cover?"
    assert params.requested_schema == YEAR_SCHEMA
    [closed] = closed_questions(events)
    assert closed.outcome == QuestionOutcome.ANSWERED
    assert closed.surface == AnswerSurface.MCP_ELICITATION
    assert closed.answered_by == "test-parent"
    assert (endpoint.elicitations_sent, endpoint.elicitations_answered) == (1, 1)


async def test_a_question_without_schema_is_asked_as_one_text_answer(parent: Any) -> None:
    asked: list[Any] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "the last one"})

    async with (
        endpoint_run(asking_agent(schema=None)) as (_, _, run),
        parent(run, answer) as client,
    ):
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
    assert "The remote got: the last one" in said(result.structured_content)
    assert asked[0].requested_schema["required"] == ["answer"]
    assert asked[0].requested_schema["properties"]["answer"]["type"] == "string"


async def test_a_shortcut_tool_asks_too(parent: Any) -> None:
    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"year": 2027})

    async with (
        endpoint_run(asking_agent(), shortcuts={"research"}) as (_, _, run),
        parent(run, answer) as client,
    ):
        with trio.fail_after(30):
            result = await client.call("delegate_to_research", {"objective": "Pick a year."})
    assert 'The remote got: {"year": 2027}' in said(result.structured_content)


async def test_an_agent_without_elicitation_is_never_asked_through_the_client(
    parent: Any,
) -> None:
    asked: list[Any] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"year": 2027})

    agent = asking_agent(elicitation="off")
    async with (
        endpoint_run(agent) as (endpoint, _, run),
        parent(run, answer) as client,
        trio.open_nursery() as nursery,
    ):
        results: list[types.CallToolResult] = []
        returned = trio.Event()

        async def call() -> None:
            results.append(await client.call("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(30):
            question = await asked_question(run)
            run.answer(question.delegation_id, data={"year": 1990})
            await returned.wait()
    assert 'The remote got: {"year": 1990}' in said(results[0].structured_content)
    assert asked == []
    assert endpoint.elicitations_sent == 0


# -- declined, or no elicitation at all ------------------------------------------------------


async def decline(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


@pytest.mark.parametrize("callback", [decline, None], ids=["declined", "no-elicitation"])
async def test_declined_fails_the_delegation_under_fail(parent: Any, callback: Any) -> None:
    agent = asking_agent(on_elicitation_declined="fail")
    async with endpoint_run(agent) as (endpoint, eng, run), parent(run, callback) as client:
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
        events = await journal_events(eng, run.run_id)
    assert result.is_error
    assert result.structured_content["status"] == Status.FAILED
    assert result.structured_content["error"]["code"] == ErrorCode.INPUT_REQUIRED
    [closed] = closed_questions(events)
    assert (closed.outcome, closed.surface) == (
        QuestionOutcome.DECLINED,
        AnswerSurface.MCP_ELICITATION,
    )
    assert endpoint.elicitations_declined_by == {"decline" if callback else "unsupported": 1}
    assert endpoint.elicitations_sent == (1 if callback else 0)


@pytest.mark.parametrize("callback", [decline, None], ids=["declined", "no-elicitation"])
async def test_declined_returns_input_required_under_return(parent: Any, callback: Any) -> None:
    agent = asking_agent(on_elicitation_declined="return")
    async with endpoint_run(agent) as (_, _, run), parent(run, callback) as client:
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
    assert result.structured_content["status"] == Status.INPUT_REQUIRED
    assert "Which year" in said(result.structured_content)


@pytest.mark.parametrize("callback", [decline, None], ids=["declined", "no-elicitation"])
async def test_declined_waits_for_another_surface_under_wait(parent: Any, callback: Any) -> None:
    agent = asking_agent(on_elicitation_declined="wait")
    results: list[types.CallToolResult] = []
    async with (
        endpoint_run(agent) as (endpoint, eng, run),
        parent(run, callback) as client,
        trio.open_nursery() as nursery,
    ):
        returned = trio.Event()

        async def call() -> None:
            results.append(await client.call("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(30):
            await until(lambda: endpoint.elicitations_declined == 1)
            [question] = run.questions()  # still open: the page may answer it
            run.answer(
                question.delegation_id,
                data={"year": 1999},
                surface=AnswerSurface.PAGE,
                answered_by="alice",
            )
            await returned.wait()
        events = await journal_events(eng, run.run_id)
    assert results[0].structured_content["status"] == Status.COMPLETED
    assert 'The remote got: {"year": 1999}' in said(results[0].structured_content)
    [closed] = closed_questions(events)
    assert (closed.surface, closed.answered_by) == (AnswerSurface.PAGE, "alice")


async def test_an_elicitation_the_client_fails_goes_to_the_policy() -> None:
    """Session-based: the client answers `elicitation/create` with a JSON-RPC error; the call
    carries on and the policy decides (here: fail)."""

    async def fails(ctx: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-32603, message="the form could not be shown")

    agent = asking_agent(on_elicitation_declined="fail")
    async with endpoint_run(agent) as (endpoint, _, run), session_parent(run, fails) as client:
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
    assert result.structured_content["error"]["code"] == ErrorCode.INPUT_REQUIRED
    assert endpoint.elicitations_declined_by == {"failed": 1}


# -- answered elsewhere first -----------------------------------------------------------------


async def test_answered_elsewhere_cancels_the_pending_elicitation() -> None:
    """Session-based: the question closes on the page while the user still looks at the form;
    the endpoint cancels the elicitation request (`notifications/cancelled`) and the call
    returns what the page answered."""
    asked, cancelled = trio.Event(), trio.Event()

    async def hold(ctx: Any, params: Any) -> types.ElicitResult:
        asked.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    async with (
        endpoint_run(asking_agent()) as (endpoint, _, run),
        session_parent(run, hold) as client,
        trio.open_nursery() as nursery,
    ):
        results: list[types.CallToolResult] = []

        returned = trio.Event()

        async def call() -> None:
            results.append(await client.call("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(30):
            await asked.wait()
            [question] = run.questions()
            run.answer(question.delegation_id, data={"year": 1999}, surface=AnswerSurface.PAGE)
            await cancelled.wait()
            await returned.wait()
    assert 'The remote got: {"year": 1999}' in said(results[0].structured_content)
    assert endpoint.elicitations_withdrawn == 1
    assert endpoint.elicitations_answered == 0


async def test_a_question_that_expires_withdraws_its_elicitation() -> None:
    cancelled = trio.Event()

    async def hold(ctx: Any, params: Any) -> types.ElicitResult:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    agent = asking_agent(input_wait_timeout=0.5)
    async with endpoint_run(agent) as (endpoint, eng, run), session_parent(run, hold) as client:
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
            await cancelled.wait()
        events = await journal_events(eng, run.run_id)
    assert result.structured_content["error"]["code"] == ErrorCode.INPUT_REQUIRED
    [closed] = closed_questions(events)
    assert closed.outcome == QuestionOutcome.EXPIRED
    assert endpoint.elicitations_withdrawn == 1


async def test_an_answer_after_the_question_closed_elsewhere_is_late_and_harmless(
    parent: Any,
) -> None:
    """The user answers the form after the page did: the answer gets `question_closed`, the
    call carries on and returns the page's answer. (Session-based, the elicitation was
    cancelled meanwhile and the late reply is the client's to drop; this callback ignores the
    cancel, as a slow client would.)"""
    asked, go_on = trio.Event(), trio.Event()

    async def late(ctx: Any, params: Any) -> types.ElicitResult:
        asked.set()
        with trio.CancelScope(shield=True):
            await go_on.wait()
        return types.ElicitResult(action="accept", content={"year": 2026})

    async with (
        endpoint_run(asking_agent()) as (endpoint, _, run),
        parent(run, late) as client,
        trio.open_nursery() as nursery,
    ):
        results: list[types.CallToolResult] = []

        returned = trio.Event()

        async def call() -> None:
            results.append(await client.call("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(30):
            await asked.wait()
            [question] = run.questions()
            run.answer(question.delegation_id, data={"year": 1999}, surface=AnswerSurface.PAGE)
            go_on.set()
            await returned.wait()
    assert results[0].structured_content["status"] == Status.COMPLETED
    assert 'The remote got: {"year": 1999}' in said(results[0].structured_content)
    assert endpoint.elicitations_answered == 0
    # Either the endpoint withdrew the elicitation before the reply came, or the reply came
    # first and was refused as late; never both, never neither.
    assert endpoint.elicitations_withdrawn + endpoint.elicitation_answers_late == 1


# -- answers that do not fit ---------------------------------------------------------------


async def test_an_answer_that_does_not_match_the_schema_is_asked_again(parent: Any) -> None:
    asked: list[Any] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        year = 1800 if len(asked) == 1 else 2020  # the first is below the schema's minimum
        return types.ElicitResult(action="accept", content={"year": year})

    async with (
        endpoint_run(asking_agent()) as (endpoint, _, run),
        parent(run, answer) as client,
    ):
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
    assert 'The remote got: {"year": 2020}' in said(result.structured_content)
    assert len(asked) == 2
    assert asked[1].message.startswith("Your answer did not fit: ")
    assert "1900" in asked[1].message  # the reason names the bound
    assert endpoint.elicitation_answers_invalid == 1


async def test_answers_that_never_fit_end_as_declined(parent: Any) -> None:
    asked: list[Any] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"year": 1800})

    agent = asking_agent(on_elicitation_declined="fail")
    async with endpoint_run(agent) as (endpoint, _, run), parent(run, answer) as client:
        with trio.fail_after(30):
            result = await client.call("delegate_to_agent", call_args())
    assert result.structured_content["error"]["code"] == ErrorCode.INPUT_REQUIRED
    assert len(asked) == 3  # MAX_ASKS
    assert endpoint.elicitation_answers_invalid == 3
    assert endpoint.elicitations_declined_by == {"no_fitting_answer": 1}


# -- credentials: URL mode -------------------------------------------------------------------


async def test_an_auth_question_is_asked_in_url_mode_and_answered_by_the_page(
    parent: Any,
) -> None:
    """An `auth_required` question with a sign-in address is never a form: the client is sent
    to the address (URL mode) and the answer arrives from another surface."""
    asked: list[Any] = []
    accepted = trio.Event()

    async def consent(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        accepted.set()
        return types.ElicitResult(action="accept")

    agent = asking_agent(schema=None, auth_url=SIGN_IN)
    async with (
        endpoint_run(agent) as (_, eng, run),
        parent(run, consent) as client,
        trio.open_nursery() as nursery,
    ):
        results: list[types.CallToolResult] = []

        returned = trio.Event()

        async def call() -> None:
            results.append(await client.call("delegate_to_agent", call_args()))
            returned.set()

        nursery.start_soon(call)
        with trio.fail_after(30):
            await accepted.wait()
            [question] = run.questions()
            run.answer(question.delegation_id, text="signed in", surface=AnswerSurface.HTTP)
            await returned.wait()
        events = await journal_events(eng, run.run_id)
    [params] = asked
    assert params.mode == "url"
    assert params.url == SIGN_IN
    assert "Research asks: Which year" in params.message
    assert "The remote got: signed in" in said(results[0].structured_content)
    [closed] = closed_questions(events)
    assert closed.surface == AnswerSurface.HTTP


async def test_a_session_is_told_when_the_sign_in_completed() -> None:
    """Session-based URL mode: once the question the user was sent to sign in for closes, the
    client gets `notifications/elicitation/complete` with the elicitation's id."""
    completed: list[str] = []
    told, released = trio.Event(), trio.Event()

    async def consent(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept")

    async def notices(message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)
            told.set()

    async def sign_in(task: LocalTask) -> str:
        answer = await task.ask("Sign in to the wiki.", auth_url=SIGN_IN)
        await released.wait()  # the call stays open until the test saw the notification
        return f"The remote got: {answer.text}"

    agent = AgentSpec(
        key="research",
        target=InProcessTarget(sign_in),
        policy=DelegationPolicy(input_required="surface", elicitation="ask"),
    )
    async with endpoint_run(agent) as (endpoint, _, run):
        assert run.endpoint is not None
        async with (
            connect(
                run.endpoint,
                read_timeout=60.0,
                elicitation_callback=consent,
                message_handler=notices,
            ) as session,
            trio.open_nursery() as nursery,
        ):
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await session.call_tool("delegate_to_agent", call_args()))

            nursery.start_soon(call)
            with trio.fail_after(30):
                question = await asked_question(run)
                await until(lambda: endpoint.elicitations_consented == 1)
                run.answer(question.delegation_id, text="signed in", surface=AnswerSurface.HTTP)
                await told.wait()
                released.set()
    assert completed == [question.id]
    assert "The remote got: signed in" in said(results[0].structured_content)


# -- the stateless round trip's state ------------------------------------------------------


async def first_round(client: Client) -> types.InputRequiredResult:
    first = await client.session.call_tool(
        "delegate_to_agent", call_args(), allow_input_required=True
    )
    assert isinstance(first, types.InputRequiredResult), first
    assert first.request_state and first.input_requests
    return first


def accept(year: int) -> dict[str, types.InputResponse]:
    return {"question": types.ElicitResult(action="accept", content={"year": year})}


async def test_a_forged_or_altered_request_state_is_refused() -> None:
    async with (
        endpoint_run(asking_agent()) as (_, _, run),
        stateless_parent(run, decline) as parent,
    ):
        client = parent.raw
        with trio.fail_after(30):
            first = await first_round(client)
            state = first.request_state
            forged = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
            for bad in (forged, "v1.made-up", json.dumps({"run": run.run_id})):
                with pytest.raises(MCPError) as refused:
                    await client.session.call_tool(
                        "delegate_to_agent",
                        call_args(),
                        input_responses=accept(2026),
                        request_state=bad,
                        allow_input_required=True,
                    )
                assert refused.value.error.data["reason"] == "invalid_request_state"
            # Bound to the call: the same state with other arguments is refused too.
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "delegate_to_agent",
                    call_args(objective="Something else."),
                    input_responses=accept(2026),
                    request_state=state,
                    allow_input_required=True,
                )
            assert refused.value.error.data["reason"] == "invalid_request_state"
            # The question is still open: the genuine retry answers it.
            result = await client.session.call_tool(
                "delegate_to_agent",
                call_args(),
                input_responses=accept(2026),
                request_state=state,
                allow_input_required=True,
            )
    assert 'The remote got: {"year": 2026}' in said(result.structured_content)


async def test_a_retry_without_the_elicitations_response_counts_as_declined() -> None:
    agent = asking_agent(on_elicitation_declined="fail")
    async with (
        endpoint_run(agent) as (endpoint, _, run),
        stateless_parent(run, decline) as parent,
    ):
        with trio.fail_after(30):
            first = await first_round(parent.raw)
            result = await parent.raw.session.call_tool(
                "delegate_to_agent",
                call_args(),
                input_responses={},
                request_state=first.request_state,
                allow_input_required=True,
            )
    assert result.structured_content["error"]["code"] == ErrorCode.INPUT_REQUIRED
    assert endpoint.elicitations_declined_by == {"missing": 1}


async def test_a_request_state_used_once_is_stale() -> None:
    async with (
        endpoint_run(asking_agent()) as (_, _, run),
        stateless_parent(run, decline) as parent,
    ):
        client = parent.raw
        with trio.fail_after(30):
            first = await first_round(client)
            retry = {
                "input_responses": accept(2026),
                "request_state": first.request_state,
                "allow_input_required": True,
            }
            done = await client.session.call_tool("delegate_to_agent", call_args(), **retry)
            assert done.structured_content["status"] == Status.COMPLETED
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("delegate_to_agent", call_args(), **retry)
    assert refused.value.error.data == {
        "code": ErrorCode.INVALID_INPUT,
        "reason": "stale_request_state",
    }


async def test_another_runs_request_state_is_refused() -> None:
    async with (
        DelegationEndpoint().serve() as endpoint,
        Engine([asking_agent()], endpoints=endpoint) as eng,
        eng.open_run() as run,
        eng.open_run() as other,
        stateless_parent(run, decline) as parent,
        stateless_parent(other, decline) as intruder,
    ):
        with trio.fail_after(30):
            first = await first_round(parent.raw)
            with pytest.raises(MCPError) as refused:
                await intruder.raw.session.call_tool(
                    "delegate_to_agent",
                    call_args(),
                    input_responses=accept(2026),
                    request_state=first.request_state,
                    allow_input_required=True,
                )
    assert refused.value.error.data["reason"] == "invalid_request_state"


async def test_the_delegation_keeps_running_across_the_round_trip() -> None:
    """Between the `InputRequiredResult` and the retry no call is open, yet the delegation is
    still there, waiting for the answer (not cancelled with the first call)."""
    async with (
        endpoint_run(asking_agent()) as (endpoint, _, run),
        stateless_parent(run, decline) as parent,
    ):
        with trio.fail_after(30):
            first = await first_round(parent.raw)
            assert endpoint.calls_in_flight == 0
            [question] = run.questions()
            [running] = run.delegations()
            assert running.status == Status.RUNNING
            result = await parent.raw.session.call_tool(
                "delegate_to_agent",
                call_args(),
                input_responses=accept(2030),
                request_state=first.request_state,
                allow_input_required=True,
            )
    assert question.delegation_id == running.delegation_id
    assert 'The remote got: {"year": 2030}' in said(result.structured_content)
