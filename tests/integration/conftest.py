"""Fixtures for the integration tests: real A2A servers in their own processes, the pinned
agent CLIs (tests/cli_agents) and the scripted model they talk to."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from tests.helpers.node_packages import ensure_npm_packages
from tests.helpers.peers import A2A_JS_DIR, CLI_DIR, A2AJsServer, ScriptedModel
from tests.helpers.processes import ready_server


@pytest.fixture(autouse=True)
def _collect_what_the_test_dropped() -> Iterator[None]:
    """Collect garbage after each test: what a test left to the collector (a client's socket,
    a stream) is then reported under that test, not under whichever test runs next."""
    yield
    gc.collect()


# --- @a2a-js/sdk server (tools/peers/a2a_js) -------------------------------------------------


@pytest.fixture(scope="session")
def a2a_js_server() -> Iterator[A2AJsServer]:
    """One `node server.mjs` for the session, serving the stream / fail / hang agents."""
    node = ensure_npm_packages(A2A_JS_DIR)  # fails, naming what to install, without Node.js
    argv = [node, "server.mjs", "--host", "127.0.0.1", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=A2A_JS_DIR, name="a2a-js server") as (port, pid, _):
        server = A2AJsServer(base_url=f"http://127.0.0.1:{port}", pid=pid)
        try:
            yield server
        finally:
            server._http.close()


# --- the agent CLIs and their scripted model (tests/cli_agents, tools/peers/scripted_model) --


@pytest.fixture(scope="module")
def cli_bin() -> Path:
    """tests/cli_agents/node_modules/.bin with the pinned CLIs (`npm ci` when stale)."""
    ensure_npm_packages(CLI_DIR)  # fails, naming what to install, without Node.js and npm
    return CLI_DIR / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    argv = [sys.executable, "-m", "tools.peers.scripted_model", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="scripted_model") as (port, _, _):
        model = ScriptedModel(base_url=f"http://127.0.0.1:{port}")
        try:
            yield model
        finally:
            model._http.close()


@pytest.fixture
def model(scripted_model: ScriptedModel) -> ScriptedModel:
    scripted_model.reset()
    return scripted_model
