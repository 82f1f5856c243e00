"""`POST /agui` gives each client the subagent events it declares it reads, on a real server.

The bundled server (the scripted parent delegating over the real MCP endpoint to the in-process
demo agents) on 127.0.0.1; clients are httpx and the official @ag-ui/client 1.0.0 verifier
(tests/agui_verify/verify.mjs, on Node), which reads every captured stream with the client's own
transport, schema and `verifyEvents`. A client declaring
`forwardedProps.capabilities.multiAgent.subagents: false` gets no SUBAGENT_* event (their facts
come as CUSTOM `subagent.*` events) and one declaring `true`, or `protocolVersion: "1.0"`, gets
them, whatever the server's configured mode between those two; `?mode=` still wins; an
unreadable declaration is a 400 `bad_capabilities` before any run starts.
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

from adapters.agui import check_frames, parse_sse
from adapters.parents import ScriptedParent
from demo import demo_agents
from tests.helpers.node_packages import ensure_npm_packages, run_node_json_lines
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

VERIFY = Path(__file__).resolve().parents[1] / "agui_verify" / "verify.mjs"
SUBAGENT_TYPES = {"SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"}
CUSTOM_CONFIG = '[server]\nvisibility = "custom"\n'


def run_input(**extra: Any) -> dict[str, Any]:
    return {
        "threadId": "thread-caps",
        "messages": [{"id": "u1", "role": "user", "content": "How does Trio stream events?"}],
        **extra,
    }


def declaring(subagents: Any, **extra: Any) -> dict[str, Any]:
    props = {"capabilities": {"multiAgent": {"subagents": subagents}}}
    return run_input(forwardedProps=props, **extra)


@asynccontextmanager
async def server(config_text: str = "") -> AsyncIterator[tuple[str, Any]]:
    config = parse_config(config_text, "test.toml")
    async with (
        open_host(config, demo_agents(pause=0), ScriptedParent) as (host, _),
        serve_app(create_app(host, config, default_encoder_factory())) as base,
    ):
        yield base, host


async def post_agui(base: str, body: dict[str, Any], query: str = "") -> bytes:
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{base}/agui{query}", json=body) as response,
    ):
        assert response.status_code == 200, await response.aread()
        return await response.aread()


def kinds(body: bytes) -> list[str]:
    frames = parse_sse(body)
    assert not check_frames(frames)
    return [event["type"] for _, event in frames]


def custom_names(body: bytes) -> set[str]:
    return {e["name"] for _, e in parse_sse(body) if e["type"] == "CUSTOM"}


# (name, server config, body, query, expects SUBAGENT_* events)
CASES: list[tuple[str, str, dict[str, Any], str, bool]] = [
    ("declares-none-default", "", run_input(), "", True),
    ("declares-none-custom-server", CUSTOM_CONFIG, run_input(), "", False),
    ("declares-false", "", declaring(False), "", False),
    ("declares-false-v1", "", declaring(False, protocolVersion="1.0"), "", False),
    ("declares-true-custom-server", CUSTOM_CONFIG, declaring(True), "", True),
    ("protocol-1.0-custom-server", CUSTOM_CONFIG, run_input(protocolVersion="1.0"), "", True),
    ("protocol-0.9", "", run_input(protocolVersion="0.9"), "", False),
    ("query-mode-wins", "", declaring(False), "?mode=attributed", True),
    ("props-mode-wins", CUSTOM_CONFIG, run_input(forwardedProps={"mode": "custom"}), "", False),
]


async def _capture(out: Path) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for config_text in sorted({case[1] for case in CASES}):
        async with server(config_text) as (base, _):
            for name, config, body, query, _subagents in CASES:
                if config == config_text:
                    paths[name] = out / f"{name}.sse"
                    paths[name].write_bytes(await post_agui(base, body, query))
    return paths


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, dict[str, Any]]]:
    node = ensure_npm_packages(VERIFY.parent)
    paths = trio.run(_capture, tmp_path_factory.mktemp("agui-capabilities"))
    results, _ = run_node_json_lines(node, VERIFY, [str(p) for p in paths.values()], timeout=60)
    by_source = {result["source"]: result for result in results}
    return {name: (path.read_bytes(), by_source[str(path)]) for name, path in paths.items()}


@pytest.mark.parametrize(("name", "subagents"), [(case[0], case[4]) for case in CASES])
def test_each_client_gets_the_subagent_events_it_declares(
    verified: dict[str, tuple[bytes, dict[str, Any]]], name: str, subagents: bool
) -> None:
    body, result = verified[name]
    assert result["ok"], (result["stage"], result["error"], result["event"])
    assert result["warnings"] == []
    seen = kinds(body)
    assert seen == result["types"]
    assert seen[0] == "RUN_STARTED" and seen[-1] == "RUN_FINISHED"
    if subagents:
        assert seen.count("SUBAGENT_STARTED") == 2 and seen.count("SUBAGENT_FINISHED") == 2
    else:
        assert not SUBAGENT_TYPES & set(seen)
        assert {"subagent.started", "subagent.finished"} <= custom_names(body)


def test_a_live_client_declaring_no_subagents_reads_the_stream_whole() -> None:
    """The official client itself POSTs (Node's fetch), declaring it reads no SUBAGENT_*."""
    node = ensure_npm_packages(VERIFY.parent)

    async def main() -> dict[str, Any]:
        async with server() as (base, _):
            body = json.dumps(declaring(False, protocolVersion="1.0"))
            args = ["--body", body, f"{base}/agui"]
            results, _ = await trio.to_thread.run_sync(
                lambda: run_node_json_lines(node, VERIFY, args, timeout=60)
            )
            return results[0]

    result = trio.run(main)
    assert result["ok"], (result["stage"], result["error"])
    assert result["types"][-1] == "RUN_FINISHED"
    assert not SUBAGENT_TYPES & set(result["types"])
    assert "CUSTOM" in result["types"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (run_input(forwardedProps={"capabilities": "all"}), "forwardedProps.capabilities"),
        (
            run_input(forwardedProps={"capabilities": {"multiAgent": ["research"]}}),
            "forwardedProps.capabilities.multiAgent",
        ),
        (declaring("yes"), "forwardedProps.capabilities.multiAgent.subagents"),
        (declaring([{"name": "research"}]), "forwardedProps.capabilities.multiAgent.subagents"),
        (run_input(protocolVersion="latest"), "protocolVersion"),
    ],
)
async def test_an_unreadable_declaration_is_refused_before_a_run_starts(
    body: dict[str, Any], field: str
) -> None:
    async with server() as (base, host), httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{base}/agui", json=body)
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/json"
        refusal = response.json()
        assert refusal["error"] == "bad_capabilities"
        assert refusal["message"].startswith(f"{field}: ")
        assert host.active_runs == 0


async def test_an_explicit_mode_is_not_second_guessed_by_a_bad_declaration() -> None:
    """`?mode=` names the mode, so a declaration is not read at all."""
    async with server() as (base, _):
        body = await post_agui(base, declaring("yes"), "?mode=custom")
    assert not SUBAGENT_TYPES & set(kinds(body))
