"""`subagent-engine a2a-serve`: a parent agent served as an A2A 1.0 agent, used by an engine.

The server runs as a child process (`python -m cli a2a-serve --watch-stdin ...`, READY line,
own process group), with the scripted parent: `--script reply` answers at once, `--script slow`
streams for about 15 s (for cancelling mid-stream). The client side is the engine's real
`A2ATarget` (adapters/a2a) and, for GetTask / SubscribeToTask / CancelTask on each binding, the
a2a-sdk client itself. What is left running is read from the server's `/healthz` (tasks and
parent run threads alive), and a SIGTERM mid-task must end the process cleanly with exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError

from adapters.a2a import A2AAgentConfig, A2ATarget, validate_card
from adapters.a2a.serving import (
    MAX_BATCHES_IN_FLIGHT,
    MAX_BODY_BYTES,
    ParentRunThread,
    serve,
)
from cli.a2a_serve import A2AServeOptions
from engine import (
    AgentSpec,
    DelegationRequest,
    Engine,
    ErrorCode,
    Kind,
    RemoteCancel,
    Status,
)
from tests.helpers import REPO_ROOT
from tests.helpers.a2a_builders import user_request
from tests.helpers.a2a_clients import sdk_client, state_of
from tests.helpers.peers import (
    CODEX_MODEL,
    MODEL_KEY_ENV,
    ScriptedModel,
    ServedAgent,
    a2a_serve_argv,
    served_agent,
)
from tests.helpers.runs import delegate_for_events
from tools.peers.children import read_ready_port, stop_process_group

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
BINDINGS = (JSONRPC, REST)
OBJECTIVE = "Summarize the design"
REPLY = f"You asked: {OBJECTIVE}. Here is the scripted answer."
SLOW_TEXT = "".join(f"chunk {i} " for i in range(300))


@pytest.fixture(scope="module")
def reply_agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "scripted", "--name", "echo", "--skill", "answer=Answers") as a:
        yield a


@pytest.fixture(scope="module")
def slow_agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "scripted", "--script", "slow") as agent:
        yield agent


def agent_spec(served: ServedAgent, *, binding: str = JSONRPC) -> AgentSpec:
    config = A2AAgentConfig(card_url=served.card_url, bindings=(binding,), prefer_own_bindings=True)
    return AgentSpec(key="served", protocol="a2a", target=A2ATarget(config))


def chunk_text(events: list[StreamResponse]) -> str:
    return "".join(
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    )


# --- the card --------------------------------------------------------------------------------


def test_the_card_validates_with_both_bindings_streaming_and_the_skills(
    reply_agent: ServedAgent,
) -> None:
    document = httpx.get(reply_agent.card_url, timeout=5).json()
    info = validate_card(document)
    assert info.name == "echo"
    assert info.streaming is True
    assert [(i.binding, i.usable) for i in info.interfaces] == [(JSONRPC, True), (REST, True)]
    assert all(i.url.startswith(reply_agent.base_url) for i in info.interfaces)
    assert [(s.id, s.name, s.description) for s in info.skills] == [("answer", "answer", "Answers")]
    assert reply_agent.health() == {
        "status": "ok",
        "parent": "scripted",
        "tasks_running": 0,
        "parent_threads": 0,
    }


# --- (a), (b): the engine delegates through its real A2A target, on each binding -------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_engine_delegates_and_sees_the_parent_stream_as_a_subagent(
    reply_agent: ServedAgent, binding: str
) -> None:
    result, events = await delegate_for_events(
        agent_spec(reply_agent, binding=binding), objective=OBJECTIVE
    )
    assert result.status == Status.COMPLETED, result
    assert result.summary == REPLY
    kinds = [e.kind for e in events]
    assert kinds[0] == Kind.STARTED and kinds[-1] == Kind.FINISHED
    assert kinds.count(Kind.FINISHED) == 1
    text = "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert text == REPLY
    assert [m.text for m in result.messages] == [REPLY]
    thoughts = [e.text for e in events if e.kind == Kind.STATUS and e.text]
    assert thoughts == ["Reading the task, then answering."]
    assert kinds.index(Kind.STATUS) < kinds.index(Kind.TEXT_DELTA) < kinds.index(Kind.FINISHED)
    assert result.remote_task_id and result.card_fingerprint
    assert (await reply_agent.idle())["parent_threads"] == 0


# --- (c): cancel through the engine ----------------------------------------------------------


async def test_cancelling_the_run_cancels_the_task_and_stops_the_parent(
    slow_agent: ServedAgent,
) -> None:
    spec = agent_spec(slow_agent)
    streamed = ""
    async with Engine([spec]) as eng:
        async with eng.open_run() as run:
            handle = run.start_delegation(DelegationRequest(agent="served", objective="x"))
            with trio.fail_after(10):
                async with run.events() as events:
                    async for entry in events:
                        if entry.event.kind == Kind.TEXT_DELTA:
                            streamed += entry.event.delta or ""
                            if "chunk 3 " in streamed:
                                break
            assert slow_agent.health()["parent_threads"] == 1
            started = time.monotonic()
            run.cancel("user pressed stop")
        result = handle.result()
        cancel_seconds = time.monotonic() - started
        assert eng.active_delegations == 0 and eng.open_runs == 0
    await spec.target.aclose()  # type: ignore[attr-defined]
    assert result.status == Status.CANCELLED, result
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert cancel_seconds < 3.0
    # At the server: the A2A task is canceled, its text cut short, and nothing runs any more.
    async with sdk_client(slow_agent, JSONRPC) as client:
        task = await client.get_task(GetTaskRequest(id=result.remote_task_id or ""))
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    assert "CancelTask" in task.status.message.parts[0].text
    served = "".join(p.text for p in task.artifacts[0].parts)
    assert served.startswith("chunk 0 chunk 1 chunk 2 chunk 3 ") and served != SLOW_TEXT
    health = await slow_agent.idle()
    assert health["tasks_running"] == 0 and health["parent_threads"] == 0


# --- (d): GetTask, SubscribeToTask, CancelTask with the SDK client, each binding -------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_get_task_after_the_end_has_the_final_state_and_subscribe_is_refused(
    reply_agent: ServedAgent, binding: str
) -> None:
    async with sdk_client(reply_agent, binding) as client:
        with trio.fail_after(10):
            events = [event async for event in client.send_message(user_request(OBJECTIVE))]
        assert [state_of(e) for e in events] == [
            "task:TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "artifact_update",
            "artifact_update",
            "TASK_STATE_COMPLETED",
        ]
        task_id = events[0].task.id
        task = await client.get_task(GetTaskRequest(id=task_id))
        # A2A 1.0 (10.4.6): SubscribeToTask on a task in a terminal state is refused.
        with pytest.raises(UnsupportedOperationError):
            async for _ in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                pass
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == REPLY
    [artifact] = task.artifacts
    assert artifact.name == "assistant-output"
    assert "".join(p.text for p in artifact.parts) == REPLY == chunk_text(events)
    assert task.history[0].parts[0].text == OBJECTIVE


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribe_mid_task_follows_it_to_the_cancel(
    slow_agent: ServedAgent, binding: str
) -> None:
    async with sdk_client(slow_agent, binding) as client:
        task_id = ""
        with trio.fail_after(10), trio.CancelScope() as scope:
            async for event in client.send_message(user_request("go slowly")):
                task_id = task_id or event.task.id
                if event.HasField("artifact_update"):
                    scope.cancel()  # leave the first stream: the task keeps running
        followed: list[StreamResponse] = []
        streaming = trio.Event()

        async def follow() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                followed.append(event)
                if event.HasField("artifact_update"):
                    streaming.set()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await streaming.wait()
                cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert state_of(followed[0]) == "task:TASK_STATE_WORKING"
    assert state_of(followed[-1]) == "TASK_STATE_CANCELED"
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    stored = "".join(p.text for p in task.artifacts[0].parts)
    assert chunk_text(followed) and stored.endswith(chunk_text(followed))
    assert (await slow_agent.idle())["parent_threads"] == 0


TOKEN_ENV = "A2A_SERVE_TEST_TOKEN"
TOKEN = "s3cret-token-of-the-test-0123"


@pytest.fixture(scope="module")
def token_agent() -> Iterator[ServedAgent]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TOKEN_ENV, TOKEN)
        with served_agent("--token-env", TOKEN_ENV) as agent:
            yield agent


async def test_with_a_token_every_call_needs_it_and_the_card_says_so(
    token_agent: ServedAgent,
) -> None:
    served = token_agent
    async with httpx.AsyncClient(timeout=5) as http:
        card = (await http.get(served.card_url)).json()
        refused = await http.get(f"{served.base_url}/a2a/rest/tasks/nope")
    spec = agent_spec(served)
    without, _ = await delegate_for_events(spec, objective=OBJECTIVE)
    config = A2AAgentConfig(
        card_url=served.card_url, auth_header=("Authorization", f"Bearer {TOKEN}")
    )
    authorized = AgentSpec(
        key="served", protocol="a2a", target=A2ATarget(config), secrets=config.secrets
    )
    result, _ = await delegate_for_events(authorized, objective=OBJECTIVE)
    assert validate_card(card).name == "subagent-engine scripted"
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert refused.status_code == 401 and refused_for(refused) == "unauthorized"
    assert without.status == Status.FAILED and without.error is not None
    assert result.status == Status.COMPLETED, result


def refused_for(response: httpx.Response) -> str:
    """Why a request was refused: the A2A routes say it in their binding's error shape (a
    JSON-RPC error's `data`, an AIP-193 error's `details`: an ErrorInfo reason), the others
    as the listener does (`{"error": reason}`)."""
    error = response.json()["error"]
    if isinstance(error, str):
        return error
    reason: str = (error.get("data") or error.get("details"))[0]["reason"]
    return reason.lower()


def get_task(served: ServedAgent, headers: Sequence[tuple[str, str]] = ()) -> httpx.Response:
    """JSON-RPC GetTask of an unknown task: 200 (a JSON-RPC error) once a request gets through."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
    return httpx.post(
        f"{served.base_url}/a2a/jsonrpc",
        json=body,
        headers=[("A2A-Version", "1.0"), *headers],
        timeout=5,
    )


def test_the_bearer_scheme_is_case_insensitive_and_a_second_authorization_is_refused(
    token_agent: ServedAgent,
) -> None:
    """RFC 9110 section 11.1: the scheme is case-insensitive. Two Authorization headers are
    refused outright: a proxy in front could check one and this server read the other."""
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert get_task(token_agent, [("Authorization", f"{scheme} {TOKEN}")]).status_code == 200
    right, wrong = ("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer not-the-token")
    for pair in ((wrong, right), (right, wrong)):
        twice = get_task(token_agent, pair)
        assert twice.status_code == 400, twice.text
        assert refused_for(twice) == "duplicate_header"
    for headers in ([], [wrong], [("Authorization", f"Basic {TOKEN}")]):
        refused = get_task(token_agent, headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.headers["www-authenticate"].startswith("Bearer ")
        assert refused_for(refused) in ("unauthorized", "bad_authorization")


def test_a_host_name_it_does_not_answer_to_is_refused_everywhere(reply_agent: ServedAgent) -> None:
    """A page whose DNS name was rebound to 127.0.0.1 reaches the port but sends its own name
    as Host (RFC 9110 section 7.2): 421 on every route, the open card and /healthz included."""
    rebound = {"Host": f"rebound.example:{reply_agent.port}"}
    for path in ("/healthz", "/.well-known/agent-card.json", "/a2a/rest/tasks/nope"):
        response = httpx.get(f"{reply_agent.base_url}{path}", headers=rebound, timeout=5)
        assert response.status_code == 421, (path, response.text)
        assert refused_for(response) == "unknown_host"
    posted = get_task(reply_agent, list(rebound.items()))
    assert posted.status_code == 421
    for host in (f"localhost:{reply_agent.port}", f"127.0.0.1:{reply_agent.port}"):
        assert get_task(reply_agent, [("Host", host)]).status_code == 200


def test_a_web_page_cannot_post_to_it_cross_site(reply_agent: ServedAgent) -> None:
    """No web origin may call it (403), and a body that is not JSON is refused (415): a browser
    sends text/plain bodies to any site without asking first."""
    foreign = get_task(reply_agent, [("Origin", "http://attacker.example")])
    assert foreign.status_code == 403 and refused_for(foreign) == "forbidden_origin"
    assert get_task(reply_agent, [("Origin", "null")]).status_code == 403
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}'
    plain = httpx.post(
        f"{reply_agent.base_url}/a2a/jsonrpc",
        content=body,
        headers={"Content-Type": "text/plain", "A2A-Version": "1.0"},
        timeout=5,
    )
    assert plain.status_code == 415 and refused_for(plain) == "content_type_not_supported"
    answered = get_task(reply_agent)
    assert answered.status_code == 200
    assert answered.headers["x-frame-options"] == "DENY"
    assert answered.headers["x-content-type-options"] == "nosniff"


def test_the_cards_host_and_the_configured_hosts_are_answered(tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text('[server]\nallowed_hosts = ["Agents.Internal"]\n')
    public = "https://a2a.example:9443"
    with served_agent("--config", str(config), "--public-url", public) as served:
        card = httpx.get(served.card_url, timeout=5).json()
        statuses = {
            host: httpx.get(
                f"{served.base_url}/healthz", headers={"Host": host}, timeout=5
            ).status_code
            for host in ("a2a.example:9443", "agents.internal", "elsewhere.example")
        }
    assert card["supportedInterfaces"][0]["url"] == f"{public}/a2a/jsonrpc"
    assert statuses == {"a2a.example:9443": 200, "agents.internal": 200, "elsewhere.example": 421}


def a2a_serve_exit(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `a2a-serve ARGS` with stdin closed: one that starts exits 0 at once (it watches
    stdin); one refused at start exits 2."""
    return subprocess.run(
        a2a_serve_argv(*args),
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_listening_beyond_loopback_needs_a_token_and_a_token_needs_16_characters() -> None:
    tokenless = a2a_serve_exit("--host", "0.0.0.0")
    assert tokenless.returncode == 2, tokenless
    assert tokenless.stdout == ""  # it never listened
    assert (
        "subagent-engine a2a-serve: listening on 0.0.0.0 reaches beyond this machine: pass "
        "--token-env NAME" in tokenless.stderr
    )
    assert "commands its model asks for" in tokenless.stderr
    short = a2a_serve_exit("--token-env", TOKEN_ENV, env={TOKEN_ENV: "fifteen-chars-x"})
    assert short.returncode == 2, short
    assert (
        f"subagent-engine a2a-serve: the token in {TOKEN_ENV} (--token-env) must be at least "
        "16 characters" in short.stderr
    )
    spaced = a2a_serve_exit("--token-env", TOKEN_ENV, env={TOKEN_ENV: "sixteen chars, and more"})
    assert spaced.returncode == 2 and "must be at least 16 characters" in spaced.stderr
    # On loopback no token is needed; beyond it, a good one will do.
    assert a2a_serve_exit("--host", "localhost").returncode == 0
    with_token = a2a_serve_exit(
        "--host", "0.0.0.0", "--token-env", TOKEN_ENV, env={TOKEN_ENV: TOKEN}
    )
    assert with_token.returncode == 0 and with_token.stdout.startswith("READY "), with_token


@pytest.mark.parametrize("path", ["/a2a/jsonrpc", "/a2a/rest/message:send"])
def test_a_deeply_nested_body_is_refused_with_400(reply_agent: ServedAgent, path: str) -> None:
    """100,000 levels of `[` overflow Python's JSON parser; the SDK answered that on JSON-RPC as
    an internal error (-32603, with a traceback in the log)."""
    for body in (b"[" * 100_000, b'{"a":' * 40 + b"1" + b"}" * 40):
        response = httpx.post(
            f"{reply_agent.base_url}{path}",
            content=body,
            headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
            timeout=10,
        )
        assert response.status_code == 400, response.text
        assert refused_for(response) == "too_deep"
    assert reply_agent.health()["status"] == "ok"


def read_response_head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def test_a_body_over_the_limit_is_refused_without_reading_it(reply_agent: ServedAgent) -> None:
    """A declared Content-Length over `MAX_BODY_BYTES` is refused before a body byte is sent; a
    chunked body is refused as soon as it passes the limit, long before it ends."""
    head = (
        f"POST /a2a/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{reply_agent.port}\r\n"
        "Content-Type: application/json\r\n"
    )
    with socket.create_connection(("127.0.0.1", reply_agent.port), timeout=10) as sock:
        sock.sendall(f"{head}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        declared = read_response_head(sock)
    assert declared.startswith(b"HTTP/1.1 413 "), declared
    assert b"connection: close" in declared.lower()

    piece = 256 * 1024
    chunk = f"{piece:x}\r\n".encode() + b" " * piece + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", reply_agent.port), timeout=10) as sock:
        sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        # Never the last chunk: the body is bounded only by the server refusing it.
        while sent < 16 * MAX_BODY_BYTES:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break  # the server closed after answering: its answer is still to be read
            sent += piece
        streamed = read_response_head(sock)
    assert streamed.startswith(b"HTTP/1.1 413 "), (sent, streamed)
    assert reply_agent.health()["status"] == "ok"


@asynccontextmanager
async def serving_in_process() -> AsyncIterator[int]:
    """`serve()` (the scripted parent) in this process's asyncio loop; yields its port."""
    out = io.StringIO()
    serving = asyncio.create_task(serve(A2AServeOptions().served(), out))
    try:
        async with asyncio.timeout(20):
            while not out.getvalue().startswith("READY "):
                if serving.done():
                    await serving
                await asyncio.sleep(0.01)  # polled: serve() only writes its READY line
        yield int(out.getvalue().split()[1])
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


def test_accepted_connections_send_without_waiting_for_acks() -> None:
    """The server's side of each accepted connection has Nagle's algorithm off (TCP_NODELAY):
    uvicorn writes a response's head and body separately, and with Nagle on the body waits for
    the client's delayed ACK of the head, about 40 ms per response on a kept-alive connection.
    `serve()` runs in this process, so its accepted socket can be found among ours."""

    async def main() -> int:
        async with serving_in_process() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                client = writer.get_extra_info("socket")
                return server_side_nodelay(local=client.getpeername(), peer=client.getsockname())
            finally:
                writer.close()
                await writer.wait_closed()

    assert asyncio.run(main()) == 1


def server_side_nodelay(*, local: Any, peer: Any) -> int:
    """TCP_NODELAY of this process's socket connected from `local` to `peer`."""
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:
            continue  # the listing's own descriptor, closed by now
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)  # not a socket
            continue
        with sock:
            if sock.type != socket.SOCK_STREAM or sock.family != socket.AF_INET:
                continue
            with contextlib.suppress(OSError):
                if sock.getsockname() == local and sock.getpeername() == peer:
                    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    raise AssertionError(f"no socket from {local} to {peer} in this process")


# --- failures and stopping -------------------------------------------------------------------


async def test_a_parent_that_cannot_start_fails_the_task_with_its_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-codex")
    with served_agent("--parent", "codex", "--binary", missing) as served:
        result, events = await delegate_for_events(agent_spec(served), objective=OBJECTIVE)
        health = await served.idle()
    assert result.status == Status.FAILED, result
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_FAILED
    assert "Codex could not be started" in result.error.message
    assert events[-1].kind == Kind.FAILED
    assert health["parent_threads"] == 0


def test_sigterm_mid_task_stops_the_parent_and_exits_0() -> None:
    with tempfile.NamedTemporaryFile(prefix="a2a-serve-", suffix=".stderr") as stderr:
        proc = subprocess.Popen(
            a2a_serve_argv("--parent", "scripted", "--script", "slow"),
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            port = read_ready_port(proc, 20.0)
            served = ServedAgent(port=port, pid=proc.pid, stderr_path=stderr.name)
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendStreamingMessage",
                "params": {
                    "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}
                },
            }
            url = f"{served.base_url}/a2a/jsonrpc"
            headers = {"A2A-Version": "1.0"}
            with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as response:
                for line in response.iter_lines():
                    if "artifactUpdate" in line:
                        break  # the parent streams; leave the stream open to the end
                assert served.health()["parent_threads"] == 1
                os.kill(proc.pid, signal.SIGTERM)
                code = proc.wait(timeout=20)
            served._http.close()
        finally:
            stop_process_group(proc, 5.0)
        log = served.stderr()
    assert code == 0, log
    assert "Traceback" not in log and "did not stop" not in log, log


# --- Codex served over A2A (the pinned binary, against the scripted model endpoint) -----------


@pytest.fixture(scope="module")
def codex_binary(cli_bin: Path) -> Path:
    return cli_bin / "codex"


@pytest.fixture(scope="module")
def model_url(scripted_model: ScriptedModel) -> str:
    return scripted_model.base_url


@contextmanager
def served_codex(
    tmp_path: Path, codex_binary: Path, model_url: str, research_card_url: str
) -> Iterator[ServedAgent]:
    """`a2a-serve --parent codex` whose Codex may delegate to `research` (an A2A agent)."""
    config = tmp_path / "host.toml"
    config.write_text(
        "[parent]\n"
        'kind = "codex"\n'
        f'model_endpoint = "{model_url}/v1"\n'
        f'model = "{CODEX_MODEL}"\n'
        f'api_key_env = "{MODEL_KEY_ENV}"\n'
        "[[agents]]\n"
        'key = "research"\n'
        'protocol = "a2a"\n'
        f'card_url = "{research_card_url}"\n'
    )
    with served_agent("--config", str(config), "--binary", str(codex_binary)) as served:
        yield served


async def test_codex_served_over_a2a_delegates_itself_and_answers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    codex_binary: Path,
    model_url: str,
    a2a_server: Any,
) -> None:
    """engine -> A2A -> a2a-serve -> Codex -> MCP -> its engine -> A2A `stream` agent, and back."""
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")
    research = a2a_server.card_url("stream")
    with served_codex(tmp_path, codex_binary, model_url, research) as served:
        spec = agent_spec(served)
        result, events = await delegate_for_events(spec, objective=OBJECTIVE)
        health = await served.idle()
    card = spec.target.card_info  # type: ignore[attr-defined]
    assert card.name == "subagent-engine codex" and card.streaming
    assert result.status == Status.COMPLETED, result
    # Codex's final text quotes the result of its own delegation (the `stream` agent's summary).
    assert result.summary is not None
    assert result.summary.startswith("Delegation result: done: streamed 3 chunks"), result.summary
    text = "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert text.endswith(result.summary)
    statuses = [e for e in events if e.kind == Kind.STATUS and e.text]
    calls = [s for s in statuses if s.text.startswith("Calling mcp__subagents__delegate_to_agent")]
    returned = [s for s in statuses if "delegate_to_agent returned" in (s.text or "")]
    assert len(calls) == 1 and len(returned) == 1
    [call] = calls[0].raw["status_data"]
    assert call["args"]["agent"] == "research"
    [call_result] = returned[0].raw["status_data"]
    assert call_result["result"]["status"] == "completed"
    assert health["parent_threads"] == 0


async def test_cancelling_a_served_codex_stops_the_cli_and_its_own_delegation(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    codex_binary: Path,
    model_url: str,
    a2a_server: Any,
) -> None:
    """Codex blocks in a delegation to the `hang` agent; cancelling the outer run cancels the
    served task (CancelTask), which stops Codex, and its delegation's remote task is cancelled."""
    monkeypatch.setenv(MODEL_KEY_ENV, "sk-scripted-not-a-key")
    hangs_before = len(a2a_server.entries("hang", "messages"))
    with served_codex(tmp_path, codex_binary, model_url, a2a_server.card_url("hang")) as served:
        spec = agent_spec(served)
        async with Engine([spec]) as eng:
            async with eng.open_run() as run:
                handle = run.start_delegation(DelegationRequest(agent="served", objective="x"))
                with trio.fail_after(30):
                    async with run.events() as events:
                        async for entry in events:
                            text = entry.event.text or ""
                            if entry.event.kind == Kind.STATUS and text.startswith("Calling"):
                                break
                # Codex's call is now blocked on the hanging agent.
                with trio.fail_after(10):
                    # Another process's log: polled.
                    while len(a2a_server.entries("hang", "messages")) == hangs_before:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                run.cancel("user pressed stop")
            result = handle.result()
        await spec.target.aclose()  # type: ignore[attr-defined]
        health = await served.idle()
        async with sdk_client(served, JSONRPC) as client:
            task = await client.get_task(GetTaskRequest(id=result.remote_task_id or ""))
    assert result.status == Status.CANCELLED, result
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    assert "still stopping" not in task.status.message.parts[0].text  # Codex stopped in time
    assert health == {**health, "tasks_running": 0, "parent_threads": 0}
    hang_task = a2a_server.entries("hang", "messages")[hangs_before]["task_id"]
    [cancel] = a2a_server.entries("hang", "cancels", hang_task)
    assert cancel["outcome"] == "TASK_STATE_CANCELED"


# --- the thread bridge itself, in process ------------------------------------------------------


class ChattyParent:
    """Emits many text deltas as fast as it can, then returns."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def run(self, run: Any, prompt: str) -> None:
        await run.emit(Kind.PARENT_TEXT_START, message_id="m", role="assistant")
        for i in range(self.count):
            await run.emit(Kind.PARENT_TEXT_DELTA, message_id="m", delta=f"{i},")
        await run.emit(Kind.PARENT_TEXT_END, message_id="m")


async def _drain(thread: ParentRunThread, slow: float) -> tuple[list[Any], int]:
    """Read the thread's batches as the executor does; (events, most batches ever queued)."""
    events: list[Any] = []
    most = 0
    thread.start()
    while True:
        most = max(most, thread._inbox.qsize())
        item = await thread.receive()
        if not isinstance(item, list):
            break
        events.extend(item)
        await asyncio.sleep(slow)  # a slow consumer: the Trio side must wait for credits
        thread.ack()
    await thread.join()
    return events, most


def _bridge(parent: Any) -> ParentRunThread:
    return ParentRunThread(
        name="a2a-serve-task-test",
        options=A2AServeOptions().served(),
        parent=parent,
        prompt="p",
        metadata={},
        loop=asyncio.get_running_loop(),
    )


def test_the_thread_bridge_keeps_every_delta_in_order_with_bounded_batches_in_flight() -> None:
    count = 3000

    async def main() -> tuple[list[Any], int, bool]:
        thread = _bridge(ChattyParent(count))
        events, most = await _drain(thread, slow=0.002)
        return events, most, thread.alive

    events, most, alive = asyncio.run(main())
    text = "".join(e.delta for e in events if e.kind == Kind.PARENT_TEXT_DELTA)
    assert text == "".join(f"{i}," for i in range(count))
    assert events[0].kind == Kind.RUN_STARTED and events[-1].kind == Kind.RUN_FINISHED
    assert most <= MAX_BATCHES_IN_FLIGHT + 1  # + the end marker
    assert not alive


def test_a_cancel_before_the_thread_runs_cancels_the_run_at_once() -> None:
    async def main() -> list[Any]:
        thread = _bridge(ChattyParent(10**9))
        thread.cancel("cancelled early")
        events, _ = await _drain(thread, slow=0)
        return events

    events = asyncio.run(main())
    assert events[-1].kind == Kind.RUN_CANCELLED and events[-1].text == "cancelled early"


def test_text_that_is_not_valid_unicode_reaches_the_sdk_repaired(reply_agent: ServedAgent) -> None:
    """A lone surrogate escape (which the SDK echoes back in what it answers, and no UTF-8
    encoder can write) or invalid UTF-8 in a body is answered, not failed: the SDK reads the
    checked document, its text repaired with U+FFFD."""
    message = b'{"messageId": "m-%s", "role": "ROLE_USER", "parts": [{"text": "%s"}]%s}'
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    bodies = {
        "/a2a/rest/message:send": (
            b'{"message": ' + message % (b"1", b"x", b', "metadata": "\\ud800"') + b"}",
            b'{"message": ' + message % (b"2", b"\xff", b"") + b"}",
        ),
        "/a2a/jsonrpc": (
            b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
            + message % (b"3", b"\\udc00 hi", b"")
            + b"}}",
            b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\xff"}}',
        ),
    }
    for path, cases in bodies.items():
        for body in cases:
            response = httpx.post(
                f"{reply_agent.base_url}{path}", content=body, headers=headers, timeout=30
            )
            assert response.status_code < 500, (body, response.text)
            response.content.decode("utf-8")
            if path == "/a2a/jsonrpc":
                error = response.json().get("error") or {}
                assert error.get("code") != -32603, (body, response.text)  # internal error
    assert reply_agent.health()["status"] == "ok"


def test_a_peer_that_never_finishes_a_request_head_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn arms its keep-alive timer only after an answer and cancels it on any byte: a
    peer that sends nothing, half a head, or a head a byte at a time held its connection
    forever. Every head now has `HEAD_TIMEOUT` seconds, from the connection's start or its
    last answer."""
    monkeypatch.setattr("adapters.a2a.serving.HEAD_TIMEOUT", 0.3)

    async def closed_after(port: int, first: bytes, drip: bytes = b"") -> float:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        begun = time.monotonic()
        try:
            writer.write(first)
            async with asyncio.timeout(10):  # a safety net: the server closes within 0.3 s
                while True:
                    if drip:
                        writer.write(drip)
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.05):
                                if await reader.read(65536) == b"":
                                    break
                    elif await reader.read(65536) == b"":
                        break
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return time.monotonic() - begun

    async def main() -> list[float]:
        async with serving_in_process() as port:
            host = f"Host: 127.0.0.1:{port}\r\n".encode()
            return [
                await closed_after(port, b""),
                await closed_after(port, b"GET /healthz HT"),
                await closed_after(port, b"GET /healthz HTTP/1.1\r\n", drip=b"X"),
                # An answered request, then nothing: the next head has its deadline too.
                await closed_after(port, b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n"),
            ]

    waits = asyncio.run(main())
    assert all(wait < 5 for wait in waits), waits


def test_finished_tasks_leave_nothing_behind_in_the_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each task's run thread holds its whole run; the executor forgets it once it ended (it
    was forgotten only when someone read /healthz)."""
    import adapters.a2a.serving as a2a_serve

    executors: list[a2a_serve.ParentAgentExecutor] = []

    class Recorded(a2a_serve.ParentAgentExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            executors.append(self)
            self.executed = 0
            self.all_executed = asyncio.Event()

        async def execute(self, *args: Any, **kwargs: Any) -> None:
            try:
                await super().execute(*args, **kwargs)
            finally:
                self.executed += 1
                if self.executed == 5:
                    self.all_executed.set()

    monkeypatch.setattr(a2a_serve, "ParentAgentExecutor", Recorded)

    async def main() -> None:
        async with serving_in_process() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                for n in range(5):
                    body = json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": n,
                            "method": "SendMessage",
                            "params": {
                                "message": {
                                    "messageId": f"m-{n}",
                                    "role": "ROLE_USER",
                                    "parts": [{"text": "hi"}],
                                }
                            },
                        }
                    ).encode()
                    writer.write(
                        f"POST /a2a/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    head = await reader.readuntil(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 200 "), head
                    length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                    answer = json.loads(await reader.readexactly(length))
                    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            finally:
                writer.close()
                await writer.wait_closed()
            (executor,) = executors
            async with asyncio.timeout(10):
                await executor.all_executed.wait()
            assert executor._threads == set()  # all five stayed, holding their runs

    asyncio.run(main())


def test_a_body_that_never_arrives_is_answered_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("adapters.a2a.serving.BODY_TIMEOUT", 0.3)

    async def main() -> bytes:
        async with serving_in_process() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(
                    f"POST /a2a/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
                )
                async with asyncio.timeout(10):
                    return await reader.read(4096)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"BODY_TIMEOUT" in answer


def test_a_refused_request_costs_the_log_one_short_line_at_most(
    reply_agent: ServedAgent,
) -> None:
    """The SDK logged each invalid JSON-RPC request at error level with a traceback and the
    whole document (189 KB for one of 20,000 keys): the caller wrote the log."""
    junk = json.dumps({f"k{n}": n for n in range(20_000)}).encode()
    before = Path(reply_agent.stderr_path).stat().st_size
    for _ in range(5):
        response = httpx.post(
            f"{reply_agent.base_url}/a2a/jsonrpc",
            content=junk,
            headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
            timeout=10,
        )
        assert response.status_code == 200 and response.json()["error"]["code"] != -32603
    assert reply_agent.health()["status"] == "ok"
    written = Path(reply_agent.stderr_path).read_bytes()[before:]
    assert len(written) < 5 * 2_100, written[:500]
    assert b"Traceback" not in written
