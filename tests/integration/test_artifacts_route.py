"""`GET /runs/<id>/artifacts/<delegation>/<artifact>` on a real Hypercorn listener (httpx).

The run is the scripted parent delegating over the real MCP endpoint to in-process agents: the
demo's research agent writes `notes.md` (text/markdown), and a third agent (`pages`) writes an
HTML page and a larger text file. The artifact ids come from the run's own stream
(`subagent.artifact`), as the page reads them. Checked: the content and its headers (type,
disposition, nosniff, a sandboxing CSP), the viewer token as a bearer or `?token=`, 401 without
a token, 404 for a wrong token, an unknown or traversing id and another run's artifact, 413 above
the server's bound.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from adapters.inprocess import InProcessTarget, LocalTask
from adapters.parents import Delegate, ScriptedParent
from demo import demo_agents
from engine import AgentSpec
from web.artifacts import valid_id
from web.config import parse_config
from web.server import create_app, default_encoder_factory, open_host, serve_app

PAGE = "<html><body><script>alert(1)</script></body></html>"
BIG = "x" * 4096
NOTES = "# Notes\n- nurseries\n"


async def pages(task: LocalTask) -> str:
    await task.artifact("page.html", data=PAGE, mime_type="text/html")
    await task.artifact("big.txt", data=BIG, mime_type="text/plain")
    await task.artifact("odd", data=b"\x00\x01", mime_type="not a type")
    return "Wrote the pages."


def parent_factory() -> ScriptedParent:
    return ScriptedParent(
        script=(
            Delegate(
                calls=(
                    {"agent": "research", "objective": "Research."},
                    {"agent": "pages", "objective": "Write pages."},
                )
            ),
        )
    )


RUN_INPUT = {
    "messages": [{"id": "u1", "role": "user", "content": "Write it down."}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


@asynccontextmanager
async def server(**app_options: Any) -> AsyncIterator[str]:
    config = parse_config("", "test.toml")
    agents = [*demo_agents(pause=0), AgentSpec(key="pages", target=InProcessTarget(pages))]
    async with open_host(config, agents, parent_factory) as (host, _):
        app = create_app(host, config, default_encoder_factory(), **app_options)
        async with serve_app(app) as base_url:
            yield base_url


async def finished_run(http: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """A run played to its end: its ids, token and artifacts by name ({url, delegation, id})."""
    started = (await http.post(f"{base}/runs", json=RUN_INPUT)).json()
    token = started["viewer_token"]
    stream = await http.get(f"{base}{started['events_url']}", params={"token": token})
    artifacts = {}
    for line in stream.text.splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line.removeprefix("data: "))
        if event.get("type") == "CUSTOM" and event.get("name") == "subagent.artifact":
            value = event["value"]
            artifact = value["artifact"]
            artifacts[artifact["name"]] = {
                "delegation": value["delegationId"],
                "id": artifact["id"],
                "url": f"{base}/runs/{started['run_id']}/artifacts/"
                f"{value['delegationId']}/{artifact['id']}",
            }
    assert '"RUN_FINISHED"' in stream.text
    return {"run_id": started["run_id"], "token": token, "artifacts": artifacts}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_an_artifact_is_served_to_its_run_s_viewer() -> None:
    async with server() as base, httpx.AsyncClient(timeout=30) as http:
        run = await finished_run(http, base)
        notes = run["artifacts"]["notes.md"]
        response = await http.get(notes["url"], headers=bearer(run["token"]))
        assert response.status_code == 200
        assert response.text == NOTES
        assert response.headers["content-type"] == "text/markdown; charset=utf-8"
        assert response.headers["content-disposition"] == (
            "inline; filename=\"notes.md\"; filename*=UTF-8''notes.md"
        )
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"
        by_query = await http.get(notes["url"], params={"token": run["token"]})
        assert by_query.status_code == 200 and by_query.text == NOTES


async def test_what_a_browser_could_render_is_an_attachment_in_a_sandbox() -> None:
    async with server() as base, httpx.AsyncClient(timeout=30) as http:
        run = await finished_run(http, base)
        page = await http.get(run["artifacts"]["page.html"]["url"], headers=bearer(run["token"]))
        assert page.status_code == 200 and page.text == PAGE
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-disposition"].startswith("attachment;")
        assert page.headers["content-security-policy"] == "default-src 'none'; sandbox"
        odd = await http.get(run["artifacts"]["odd"]["url"], headers=bearer(run["token"]))
        assert odd.headers["content-type"] == "application/octet-stream"
        assert odd.content == b"\x00\x01"


async def test_no_token_is_401_and_a_wrong_one_404() -> None:
    async with server() as base, httpx.AsyncClient(timeout=30) as http:
        run = await finished_run(http, base)
        url = run["artifacts"]["notes.md"]["url"]
        missing = await http.get(url)
        assert missing.status_code == 401
        assert missing.json()["error"] == "unauthorized"
        # A wrong token is an unknown run, as on every run route: run ids cannot be probed.
        wrong = await http.get(url, headers=bearer("not-the-token"))
        assert wrong.status_code == 404 and wrong.json()["error"] == "unknown_run"
        other = await finished_run(http, base)
        crossed = await http.get(url, headers=bearer(other["token"]))
        assert crossed.status_code == 404


async def test_unknown_and_traversing_ids_are_404() -> None:
    async with server() as base, httpx.AsyncClient(timeout=30) as http:
        run = await finished_run(http, base)
        notes = run["artifacts"]["notes.md"]
        prefix = f"{base}/runs/{run['run_id']}/artifacts"
        for path in (
            f"{notes['delegation']}/no-such-artifact",
            f"del-nobody/{notes['id']}",
            f"{notes['delegation']}/..",
            f"{notes['delegation']}/%2e%2e",
            f"{notes['delegation']}/..%2F..%2Fetc%2Fpasswd",
            f"..%2F{notes['delegation']}/{notes['id']}",
            f"{notes['delegation']}/{'a' * 300}",
        ):
            response = await http.get(f"{prefix}/{path}", headers=bearer(run["token"]))
            assert response.status_code == 404, path
        assert not valid_id("..") and not valid_id("a/b") and not valid_id("")
        assert valid_id(notes["id"])


async def test_an_artifact_above_the_bound_is_413() -> None:
    async with (
        server(artifact_max_bytes=len(BIG) - 1) as base,
        httpx.AsyncClient(timeout=30) as http,
    ):
        run = await finished_run(http, base)
        big = await http.get(run["artifacts"]["big.txt"]["url"], headers=bearer(run["token"]))
        assert big.status_code == 413
        assert big.json()["error"] == "artifact_too_large"
        small = await http.get(run["artifacts"]["notes.md"]["url"], headers=bearer(run["token"]))
        assert small.status_code == 200
