"""Fixtures shared by all tests: session servers, and a recording tracer provider."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.helpers import REPO_ROOT
from tests.helpers.peers import A2AFaultyServer
from tests.helpers.processes import ready_server

# --- the user's state directory -----------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Nothing the suite starts keeps runs in the user's state directory: a session-wide
    `$XDG_STATE_HOME` first (for session and module fixtures), each test's own below."""
    state = tempfile.mkdtemp(prefix="subagent-engine-test-state-")
    os.environ["XDG_STATE_HOME"] = state
    config.add_cleanup(lambda: shutil.rmtree(state, ignore_errors=True))


@pytest.fixture(autouse=True)
def private_state_directory(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test (and every process it starts) gets its own `$XDG_STATE_HOME`, where `serve`
    keeps runs by default: no test reads or writes the user's, nor another test's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


# --- fault-injecting a2a-sdk server (tools/peers/a2a_faulty.py) -------------------------------


@pytest.fixture(scope="session")
def a2a_server() -> Iterator[A2AFaultyServer]:
    """The fault-injecting a2a-sdk server, one process (own process group) for the session."""
    argv = [sys.executable, "-m", "tools.peers.a2a_faulty", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO_ROOT, name="a2a_faulty") as (port, pid, stderr_path):
        server = A2AFaultyServer(
            base_url=f"http://127.0.0.1:{port}", port=port, pid=pid, stderr_path=stderr_path
        )
        try:
            yield server
        finally:
            server._http.close()


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """What a traced engine recorded (the OpenTelemetry SDK's in-memory exporter)."""
    found = InMemorySpanExporter()
    yield found
    found.clear()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> TracerProvider:
    """A tracer provider recording every span, as it ends, into `span_exporter`."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    return provider
