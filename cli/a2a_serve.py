"""`subagent-engine a2a-serve`: a parent agent (scripted, Claude Code, Codex) as an A2A agent.

This module owns the command: its options, the host configuration it reads (`[parent]` model
settings, the `[[agents]]` the served parent may delegate to, `[server] allowed_hosts`), the
token check, and the parent and engine each task gets. The A2A server itself is
`adapters.a2a.serving` (routes, threads, cancellation, shutdown: see there).

    subagent-engine a2a-serve --parent codex --config host.toml --port 8100
    READY 8100
    card: http://127.0.0.1:8100/.well-known/agent-card.json

A CLI parent is checked before anything listens (exit 2, naming the field): the variable
`[parent] api_key_env` names must be set and `model_endpoint` must answer HTTP
(`HostConfig.check_parent`), so a dead model endpoint is a start-up error, not a task that fails
minutes later.

Questions. The served parent may ask whoever sent the task (`ask_requester`, `--ask-timeout`);
so may the agents it delegates to: an agent whose `[agents.policy]` says
`input_required = "surface"` makes its delegation wait for an answer, and the task turns
`input-required` with the question and its lineage until a follow-up message answers it (see
`adapters.a2a.serving`, "Nested questions").

`--parent conformance` serves no parent but the A2A conformance suite's scripted agent
(`adapters.a2a.conformance`) through the same server, for `./dev tck` (tools/conformance).

Traces. `[telemetry]` in the configuration makes one OTLP/HTTP tracer provider for the process
(`web.telemetry`), given to every task's engine: a task's run continues the trace of the A2A
request that sent it (its `traceparent` header), and its delegations are beneath it. A
`headers_env` that is not set or not readable is a start-up error (exit 2, naming the variable,
never its value).

Who may call. It listens on 127.0.0.1 unless told otherwise. With `--token-env NAME` (at least
`MIN_HOST_TOKEN_CHARS` characters) every call but the card's and /healthz needs
`Authorization: Bearer $NAME`; an address beyond loopback without one is refused at start (exit
2), because the served parent runs model-directed commands for whoever reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from adapters.a2a.conformance import CONFORMANCE, conformance_agent
from adapters.a2a.serving import Listening, ServedParent, serve
from adapters.listener import is_loopback
from adapters.parents import (
    CLAUDE_CODE,
    CODEX,
    SCRIPTED,
    Ask,
    Delegate,
    ScriptedParent,
    parent_kind,
)
from demo.scripts import SCRIPTS
from engine import Engine
from web.config import (
    ConfigError,
    HostConfig,
    load_config,
    parse_config,
    weak_token,
)
from web.telemetry import process_tracing, telemetry_problem

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from adapters.mcp import Requester
    from adapters.parents import ParentAgent

__all__ = [
    "A2AServeOptions",
    "a2a_serve_main",
    "open_engine",
    "parent_factory",
    "serve",
    "serve_until_stopped",
]


@attrs.frozen(kw_only=True)
class A2AServeOptions:
    """What `a2a-serve` serves and how. `config` gives the CLI parents' model settings
    (`[parent]`), the agents the served parent may delegate to (`[[agents]]`) and the limits."""

    #: A parent kind (`adapters.parents.PARENT_KINDS`); an alias (`claude`) is read as its kind.
    parent: str = attrs.field(default=SCRIPTED, converter=parent_kind)
    config: HostConfig = attrs.field(factory=lambda: HostConfig(source="<embedded>"))
    name: str | None = None
    description: str | None = None
    #: (name, description) per advertised skill; none: one skill named after the parent.
    skills: tuple[tuple[str, str], ...] = ()
    script: str = "reply"
    #: The CLI binary (a path or a name on PATH); None: the adapter's default.
    binary: str | None = None
    cancel_grace: float = 4.0
    #: How long one `ask_requester` question waits for its answer (the follow-up message).
    ask_timeout: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: Where it listens and who may call (`[server] allowed_hosts` is added from `config`).
    listening: Listening = attrs.field(factory=lambda: Listening())
    #: The process's one tracer provider (`[telemetry]`), given to every task's engine; None:
    #: not traced.
    tracer_provider: TracerProvider | None = None

    @property
    def agent_name(self) -> str:
        return self.name or f"subagent-engine {self.parent}"

    @property
    def agent_description(self) -> str:
        if self.description:
            return self.description
        what = {
            SCRIPTED: "a scripted agent (no model)",
            CLAUDE_CODE: "Claude Code",
            CODEX: "Codex",
        }[self.parent]
        return f"{what}, served over A2A by subagent-engine; streams its progress and answer."

    def served(self) -> ServedParent:
        """What the A2A server serves: this parent, its engine and its card's words."""
        return ServedParent(
            name=self.agent_name,
            description=self.agent_description,
            label=self.parent,
            make_parent=parent_factory(self),
            open_engine=partial(open_engine, self),
            skills=self.skills,
            cancel_grace=self.cancel_grace,
            ask_timeout=self.ask_timeout,
            listening=attrs.evolve(
                self.listening,
                allowed_hosts=(*self.listening.allowed_hosts, *self.config.server.allowed_hosts),
            ),
        )

    @property
    def needs_endpoint(self) -> bool:
        """Whether each run needs its MCP endpoint: a CLI parent is always configured with one,
        the scripted parent only for a script that delegates or asks."""
        if self.parent != SCRIPTED:
            return True
        return any(isinstance(step, Delegate | Ask) for step in SCRIPTS[self.script])


def parent_factory(options: A2AServeOptions) -> Callable[[], ParentAgent]:
    """A new parent adapter per task (CLI adapters keep per-run state). ValueError if its
    adapter is not available."""
    if options.parent == SCRIPTED:
        script = SCRIPTS[options.script]
        return lambda: ScriptedParent(script, name=SCRIPTED)
    configured = options.config.parent
    binary = options.binary or configured.binary
    entry = attrs.evolve(configured, kind=options.parent, binary=binary)
    # The same settings as `serve` ([parent] in the host TOML); a missing binary fails the task
    # with the CLI adapter's reason rather than the server's start.
    return entry.cli_parent()[1]


@asynccontextmanager
async def open_engine(options: A2AServeOptions, requester: Requester) -> AsyncIterator[Engine]:
    """The task's engine: the host's agents (built in this Trio loop: their HTTP clients belong
    to it) and, when the parent needs one, its MCP endpoint, which offers `ask_requester` (the
    task's `requester`: the A2A client, through input-required); all closed on exit."""
    config = options.config
    agents = config.agent_specs() if config.agents else []
    async with AsyncExitStack() as stack:
        endpoints = None
        if options.needs_endpoint or agents:
            from adapters.mcp import DelegationEndpoint

            endpoint = DelegationEndpoint(shortcuts=config.shortcuts, requester=requester)
            endpoints = await stack.enter_async_context(endpoint.serve())
        # The engine prepares the agents' targets as it opens and closes them as it exits.
        async with Engine(
            agents,
            limits=config.limits,
            endpoints=endpoints,
            tracer_provider=options.tracer_provider,
        ) as eng:
            yield eng


def a2a_serve_main(
    *,
    parent: str | None,
    config_path: str | None = None,
    host: str | None = None,
    port: int | None = None,
    name: str | None = None,
    description: str | None = None,
    skills: Sequence[str] = (),
    script: str = "reply",
    binary: str | None = None,
    public_url: str | None = None,
    cancel_grace: float = 4.0,
    ask_timeout: float = 600.0,
    watch_stdin: bool = False,
    token_env: str | None = None,
    out: TextIO | None = None,
) -> int:
    """`subagent-engine a2a-serve`: 0 after a clean stop, 2 on a configuration error."""
    try:
        config = load_config(config_path) if config_path else parse_config("", "<embedded>")
        if config.agents:
            config.agent_specs()  # credentials are checked before anything listens
    except ConfigError as exc:
        print(f"subagent-engine a2a-serve: {exc}", file=sys.stderr)
        return 2
    problem = telemetry_problem(config.telemetry)  # names the variable, never its value
    if problem is not None:
        print(f"subagent-engine a2a-serve: {problem}", file=sys.stderr)
        return 2
    host = host or config.server.host
    token = os.environ.get(token_env) if token_env else None
    problem = _token_problem(token_env, token, host)
    if problem is not None:
        print(f"subagent-engine a2a-serve: {problem}", file=sys.stderr)
        return 2
    listening = Listening(
        host=host,
        port=port if port is not None else 0,
        public_url=public_url,
        watch_stdin=watch_stdin,
        token=token,
    )
    if parent == CONFORMANCE:
        try:
            import uvicorn
        except ImportError as exc:
            print(f"subagent-engine a2a-serve needs uvicorn: {exc}", file=sys.stderr)
            return 2
        listening = attrs.evolve(listening, allowed_hosts=config.server.allowed_hosts)
        return serve_until_stopped(conformance_agent(listening, name=name), out)
    try:
        options = A2AServeOptions(  # ValueError for an unknown parent kind
            parent=parent or config.parent.kind,
            config=config,
            name=name,
            description=description,
            skills=tuple(_skill(text) for text in skills),
            script=script,
            binary=binary,
            cancel_grace=cancel_grace,
            ask_timeout=ask_timeout,
            listening=listening,
        )
        if options.script not in SCRIPTS:
            raise ValueError(f"unknown script {options.script!r}; use one of {tuple(SCRIPTS)}")
        parent_factory(options)
        config.check_parent(options.parent)  # its API key variable set, its model answering
        import uvicorn  # noqa: F401
        from a2a.server.routes import create_jsonrpc_routes  # noqa: F401
    except ImportError as exc:
        print(
            f"subagent-engine a2a-serve needs the A2A server packages "
            f"(pip install 'a2a-sdk[http-server]' uvicorn): {exc}",
            file=sys.stderr,
        )
        return 2
    except (ValueError, ConfigError) as exc:
        print(f"subagent-engine a2a-serve: {exc}", file=sys.stderr)
        return 2
    # One provider for the process: its export thread serves every task's engine.
    with process_tracing(config.telemetry) as provider:
        options = attrs.evolve(options, tracer_provider=provider)
        return serve_until_stopped(options.served(), out)


def serve_until_stopped(served: ServedParent, out: TextIO | None) -> int:
    """Serve `served` until a stop signal (or stdin closed with `watch_stdin`): 0."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    # uvicorn re-raises the SIGTERM/SIGINT it stopped on once it has shut down; with these
    # handlers in place that ends in a clean exit 0 rather than death by the signal.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(serve(served, out or sys.stdout))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _token_problem(token_env: str | None, token: str | None, host: str) -> str | None:
    """Why `--token-env` (the variable's name, its value) cannot serve on `host`, if it cannot:
    beyond loopback a token is required, and a token must be one a client can present."""
    if not token_env:
        if is_loopback(host):
            return None
        return (
            f"listening on {host} reaches beyond this machine: pass --token-env NAME (every call "
            "but the card's then needs 'Authorization: Bearer <the value of NAME>'); without a "
            "token, anyone who reaches the port runs the served parent, and a CLI parent runs "
            "the commands its model asks for"
        )
    if not token:
        return f"{token_env} (--token-env) is not set"
    weak = weak_token(token)
    return f"the token in {token_env} (--token-env) {weak}" if weak else None


def _stopped(signum: int, frame: Any) -> None:
    """A stop signal that arrived when uvicorn was not listening for it (after its shutdown)."""


def _skill(text: str) -> tuple[str, str]:
    name, _, description = text.partition("=")
    return name.strip(), description.strip()
