"""The server's AG-UI streams, held to the official verifier (@ag-ui/client 1.0.0, on Node).

One real server (the scripted parent delegating over the real MCP endpoint to the in-process demo
agents, the default encoder) runs a run per visibility mode through both routes a client uses:
`POST /agui` (a RunAgentInput, the stream in the answer) and `POST /runs` then
`GET /runs/<id>/events`.
Two more streams: a viewer that reconnects mid-run with Last-Event-ID (what it saw before the cut
plus what it got after must be one valid run), and a run stopped while its subagents work. The
encoder's golden streams (tests/golden/agui: cancellation, failure, input requests, concurrent
delegations, each in every mode) are verified too. Every captured stream goes through
tests/agui_verify/verify.mjs: the client's own transport parsing, schema enforcement, chunk
expansion and `verifyEvents`, plus two rules that verifier leaves out (a stream ends with
RUN_FINISHED or RUN_ERROR; a subagentRunId tag names a live subagent). One live `POST /agui` is also
read by Node's own fetch. On top of the verifier, each mode's shape is checked against its rules:
lifecycle events and tags only when attributed, `subagent.*` CUSTOM events in custom mode, nothing
of a subagent when hidden.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from adapters.agui import MODES
from adapters.parents import ScriptedParent
from demo import demo_agents
from tests.helpers.node_packages import ensure_npm_packages, run_node_json_lines
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

VERIFY_DIR = Path(__file__).resolve().parents[1] / "agui_verify"
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "agui"
GOLDENS = sorted(GOLDEN_DIR.glob("*.json"))
VERIFY_TIMEOUT = 60.0
DEMO_PAUSE = 0.05  # the research agent streams for ~0.5 s: time to stop it mid-run
SUBAGENT_TYPES = {"SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"}
RESEARCH_TEXT = "Trio nurseries give structured cancellation; memory channels carry events."


def run_input(mode: str) -> dict[str, Any]:
    return {
        "threadId": f"thread-{mode}",
        "messages": [{"id": "u1", "role": "user", "content": "How does Trio stream events?"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {"mode": mode},
    }


def parse_sse(body: bytes) -> list[dict[str, Any]]:
    events = []
    for block in body.decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


async def _capture_all(base: str, out: Path) -> dict[str, Path]:
    """Every stream of this module, captured to files: name -> path."""
    captures: dict[str, bytes] = {}

    async with httpx.AsyncClient(timeout=30) as http:

        async def via_agui(mode: str) -> None:
            async with http.stream("POST", f"{base}/agui", json=run_input(mode)) as response:
                assert response.status_code == 200, await response.aread()
                captures[f"agui-{mode}"] = await response.aread()

        async def via_events(mode: str) -> None:
            started = (await http.post(f"{base}/runs", json=run_input(mode))).json()
            url = f"{base}{started['events_url']}?token={started['viewer_token']}"
            async with http.stream("GET", url) as response:
                assert response.status_code == 200, await response.aread()
                captures[f"events-{mode}"] = await response.aread()

        async def reconnected() -> None:
            started = (await http.post(f"{base}/runs", json=run_input("attributed"))).json()
            url = f"{base}{started['events_url']}"
            auth = {"authorization": f"Bearer {started['viewer_token']}"}
            whole = (await http.get(url, headers=auth)).content
            blocks = whole.split(b"\n\n")
            # Cut after the first id at or past a third of the stream, as a dropped viewer would.
            cut_at = next(
                i
                for i, block in enumerate(blocks)
                if i >= len(blocks) // 3 and block.startswith(b"id: ")
            )
            cursor = blocks[cut_at].split(b"\n", 1)[0][4:].decode()
            seen = b"\n\n".join(blocks[: cut_at + 1]) + b"\n\n"
            rest = (await http.get(url, headers={**auth, "last-event-id": cursor})).content
            captures["events-attributed-reconnected"] = seen + rest

        async def stopped() -> None:
            started = (await http.post(f"{base}/runs", json=run_input("attributed"))).json()
            url = f"{base}{started['events_url']}"
            auth = {"authorization": f"Bearer {started['viewer_token']}"}
            body = b""
            stop = partial(http.post, f"{base}/runs/{started['run_id']}/stop", headers=auth)
            async with http.stream("GET", url, headers=auth) as response:
                async for chunk in response.aiter_bytes():
                    if b'"SUBAGENT_STARTED"' not in body and b'"SUBAGENT_STARTED"' in body + chunk:
                        nursery.start_soon(stop)  # as soon as a subagent works
                    body += chunk
            captures["events-attributed-stopped"] = body

        async with trio.open_nursery() as nursery:
            for mode in MODES:
                nursery.start_soon(via_agui, mode)
                nursery.start_soon(via_events, mode)
            nursery.start_soon(reconnected)
            nursery.start_soon(stopped)

    paths = {}
    for name, body in captures.items():
        paths[name] = out / f"{name}.sse"
        paths[name].write_bytes(body)
    return paths


async def _serve_and_verify(out: Path, node: str) -> dict[str, Any]:
    config = parse_config("", "test.toml")
    agents = demo_agents(pause=DEMO_PAUSE)
    async with (
        open_host(config, agents, ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        paths = await _capture_all(base, out)
        files, _ = await trio.to_thread.run_sync(
            lambda: run_node_json_lines(
                node,
                VERIFY_DIR / "verify.mjs",
                [str(path) for path in paths.values()],
                timeout=VERIFY_TIMEOUT,
            )
        )
        body = json.dumps(run_input("attributed"))
        live, _ = await trio.to_thread.run_sync(
            lambda: run_node_json_lines(
                node,
                VERIFY_DIR / "verify.mjs",
                ["--body", body, f"{base}/agui"],
                timeout=VERIFY_TIMEOUT,
            )
        )
    by_path = {result["source"]: result for result in files}
    results = {name: by_path[str(path)] for name, path in paths.items()}
    results["live-agui-attributed"] = live[0]
    return {"results": results, "bodies": {n: p.read_bytes() for n, p in paths.items()}}


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    node = ensure_npm_packages(VERIFY_DIR)
    out = tmp_path_factory.mktemp("agui-streams")
    result: dict[str, Any] = trio.run(_serve_and_verify, out, node)
    return result


def accepted(verified: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The stream's events, after asserting the official verifier accepted it."""
    result = verified["results"][name]
    assert result["ok"], (
        f"@ag-ui/client rejected {name} at its {result['stage']} stage: {result['error']}\n"
        f"event: {json.dumps(result['event'])}\n"
        f"after {result['events']} events: {result['types'][-8:]}"
    )
    # What the client logged: unknown events it dropped, unknown fields it stripped.
    assert result["warnings"] == [], result["warnings"]
    body = verified["bodies"].get(name)
    if body is None:
        return []
    assert b"\r" not in body  # @ag-ui/client splits frames on LF only
    events = parse_sse(body)
    assert [event["type"] for event in events] == result["types"]
    return events


ROUTES = ("agui", "events")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", ROUTES)
def test_the_official_verifier_accepts_every_mode_on_every_route(
    verified: dict[str, Any], route: str, mode: str
) -> None:
    events = accepted(verified, f"{route}-{mode}")
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1].get("outcome", {"type": "success"}) == {"type": "success"}
    check_mode_shape(mode, events)


def check_mode_shape(mode: str, events: list[dict[str, Any]]) -> None:
    """The visibility modes, on the demo run (two delegations, each under a delegate call)."""
    kinds = [event["type"] for event in events]
    tagged = [event for event in events if "subagentRunId" in event]
    delegate_calls = [
        event["toolCallId"]
        for event in events
        if event["type"] == "TOOL_CALL_START" and event["toolCallName"] == "delegate_to_agent"
    ]
    assert len(delegate_calls) == 2
    results = {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert set(delegate_calls) <= results  # the parent's results are kept in every mode
    texts = messages(events)
    customs = [e for e in events if e["type"] == "CUSTOM" and e["name"].startswith("subagent.")]
    if mode == "attributed":
        started = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
        assert sorted(e["parentToolCallId"] for e in started) == sorted(delegate_calls)
        assert kinds.count("SUBAGENT_FINISHED") == 2
        assert tagged and all(
            e["subagentRunId"] in {s["subagentRunId"] for s in started} for e in tagged
        )
        for announce in started:  # agents as tools: call end, subagent, then the call's result
            call, sub = announce["parentToolCallId"], announce["subagentRunId"]
            end = index_of(events, "TOOL_CALL_END", toolCallId=call)
            begin = events.index(announce)
            finish = index_of(events, "SUBAGENT_FINISHED", subagentRunId=sub)
            result = index_of(events, "TOOL_CALL_RESULT", toolCallId=call)
            assert end < begin < finish < result
        assert RESEARCH_TEXT in messages(tagged).values()
        return
    assert not SUBAGENT_TYPES & set(kinds)
    assert tagged == []
    if mode == "custom":
        assert {
            e["value"]["parentToolCallId"] for e in customs if e["name"] == "subagent.started"
        } == set(delegate_calls)
        assert all("delegationId" in e["value"] for e in customs)
        assert RESEARCH_TEXT not in texts.values()
    elif mode == "inline":
        assert customs == []
        assert RESEARCH_TEXT in texts.values()  # the subagent's words, as the parent's
    else:
        assert customs == []
        assert RESEARCH_TEXT not in texts.values()
        assert kinds.count("TEXT_MESSAGE_END") == 2  # the parent's own two messages


def index_of(events: list[dict[str, Any]], kind: str, **fields: str) -> int:
    return next(
        i
        for i, event in enumerate(events)
        if event["type"] == kind and all(event.get(k) == v for k, v in fields.items())
    )


def messages(events: list[dict[str, Any]]) -> dict[str, str]:
    """Text message id -> its reassembled text."""
    out: dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            out[event["messageId"]] = out.get(event["messageId"], "") + event["delta"]
    return out


def test_a_reconnect_continues_one_valid_run(verified: dict[str, Any]) -> None:
    events = accepted(verified, "events-attributed-reconnected")
    assert [e["type"] for e in events].count("RUN_STARTED") == 1
    assert events[-1]["type"] == "RUN_FINISHED"


def test_a_stopped_run_is_a_valid_cancelled_run(verified: dict[str, Any]) -> None:
    events = accepted(verified, "events-attributed-stopped")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    errors = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert errors, "a subagent working when the run stopped ends with SUBAGENT_ERROR"


def test_a_live_post_read_by_node_fetch_is_accepted(verified: dict[str, Any]) -> None:
    result = verified["results"]["live-agui-attributed"]
    accepted(verified, "live-agui-attributed")
    assert result["types"][0] == "RUN_STARTED" and result["types"][-1] == "RUN_FINISHED"
    assert "SUBAGENT_STARTED" in result["types"]


@pytest.fixture(scope="module")
def verified_goldens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every golden stream (file x mode) framed as the server frames it, through verify.mjs."""
    node = ensure_npm_packages(VERIFY_DIR)
    out = tmp_path_factory.mktemp("agui-goldens")
    paths = {}
    for golden in GOLDENS:
        for mode, events in json.loads(golden.read_text()).items():
            frames = [
                f"id: {cursor}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
                for cursor, event in enumerate(events, 1)
            ]
            paths[f"{golden.stem}-{mode}"] = out / f"{golden.stem}-{mode}.sse"
            paths[f"{golden.stem}-{mode}"].write_text("".join(frames))
    if not paths:
        return {}
    results, _ = run_node_json_lines(
        node, VERIFY_DIR / "verify.mjs", [str(p) for p in paths.values()], timeout=VERIFY_TIMEOUT
    )
    by_path = {result["source"]: result for result in results}
    return {name: by_path[str(path)] for name, path in paths.items()}


@pytest.mark.parametrize("golden", GOLDENS, ids=[golden.stem for golden in GOLDENS])
def test_the_official_verifier_accepts_every_golden_stream(
    verified_goldens: dict[str, dict[str, Any]], golden: Path
) -> None:
    modes = json.loads(golden.read_text())
    for mode in modes:
        result = verified_goldens[f"{golden.stem}-{mode}"]
        assert result["ok"], (
            f"@ag-ui/client rejected golden {golden.stem} ({mode}) at its {result['stage']} "
            f"stage: {result['error']}\nevent: {json.dumps(result['event'])}"
        )
        assert result["warnings"] == [], result["warnings"]
