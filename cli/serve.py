"""`subagent-engine serve`: the bundled server on the host's configuration or embedded defaults.

This module owns starting the server process: read and validate the TOML configuration (every
mistake reported with file, line and field before anything listens), build the agents and the
parent, open the engine with its MCP endpoint (which prepares every agent first: one that cannot
work as configured, such as a malformed agent card, is refused like a configuration mistake,
exit code 2, before anything listens), and serve the Quart-Trio app on Hypercorn's Trio
worker until interrupted. With no file it serves the embedded defaults: the two in-process demo
agents and the scripted parent, so it runs with no API keys. `[parent] kind = "claude-code"` or
`"codex"` runs that CLI as each run's parent (found on PATH, or `binary`), against
`model_endpoint` with `model`.

Stopping (SIGINT, SIGTERM): the server drains before its listener closes (`RunHost.drain`): new
runs are refused (503 `shutting_down`), every live run is cancelled (reason `shutdown`, its remote
tasks cancelled, its end recorded in the run store, so a restart has nothing to recover) and its
terminal reaches every connected viewer, all within `[server] shutdown_grace_seconds`; then the
process exits 0. A second signal during the drain exits at once (`force_exit`: everything is
cancelled and the process exits 128 + the signal's number within `FORCED_EXIT_SECONDS`); the runs
still live are then ended `interrupted` at the next start, as after a crash.

Listening beyond loopback (`--host 0.0.0.0`, a LAN address) exposes starting runs, and with a CLI
parent running its commands, to every machine that can reach the port: `serve` then refuses to
start without a host token (`[server] token_env` or `--token-env NAME`), which every `POST /runs`
and `POST /agui` must carry as `Authorization: Bearer <token>`.

Log lines go to stderr as `[logging]` (or `--log-format`, `--access-log`) says (`web.logs`): one
per run's and delegation's start and end, one per request with the access log on, never a
configured credential or the host token.

With `[telemetry] enabled = true` the engine's spans go to an OTLP/HTTP collector
(`web.telemetry.open_tracing`) for the process's life; the spans still batched when it stops are
sent before it exits. A `headers_env` variable that is unset or unreadable is refused at start
like the other credentials (exit code 2, the variable named, never its value), and its value is
one of the secrets no log line shows.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import attrs
import trio

from adapters.listener import is_loopback
from adapters.parents import ParentAgent
from cli._terminal import alone
from demo.agents import demo_agents
from engine import AgentSpec, TargetPrepareError
from web.config import ConfigError, HostConfig, load_config, parse_config
from web.logs import AccessLog, configure_logging
from web.metrics import Metrics, metrics_app
from web.page import bundled_page
from web.server import (
    RunHost,
    create_app,
    default_encoder_factory,
    force_exit,
    freeze_startup_objects,
    open_host,
    serve_app,
)
from web.stores import StoreOpenError, describe_store
from web.telemetry import collector_headers, open_tracing, telemetry_problem

__all__ = ["drain_on_signal", "serve_main"]


def _parent_factory(config: HostConfig) -> Callable[[], ParentAgent]:
    return config.parent_factory()


async def drain_on_signal(
    signals: AsyncIterator[int],
    run_host: RunHost,
    grace: float,
    out: TextIO,
    on_second: Callable[[int], None],
) -> None:
    """Wait for a stop signal, then drain `run_host` (`RunHost.drain`, at most `grace` seconds);
    a signal during the drain calls `on_second(signum)` (which should `force_exit`)."""
    async for _ in signals:
        break
    print(
        f"stopping: ending every run (at most {grace:g} s; a second Ctrl-C stops at once)",
        file=out,
        flush=True,
    )
    async with trio.open_nursery() as nursery:

        async def second_signal() -> None:
            async for signum in signals:
                on_second(signum)
                return

        nursery.start_soon(second_signal)
        drained = await run_host.drain(grace)
        nursery.cancel_scope.cancel()
    if not drained:
        print(f"stopping: runs or viewers still busy after {grace:g} s were cut", file=out)
    out.flush()


async def _serve(
    config: HostConfig, host_token: str | None, out: TextIO, metrics_token: str | None = None
) -> int:
    """Serve until a stop signal; the exit status (0, or `force_exit`'s after a second one).
    `metrics_token`: the bearer token `/metrics` needs, when `[metrics]` is enabled."""
    agents = config.agent_specs() if config.agents else demo_agents()
    parent = _parent_factory(config)
    forced = 0
    with trio.CancelScope() as everything:

        def on_second(signum: int) -> None:
            nonlocal forced
            forced = force_exit(everything, signum, out)

        async with (
            open_tracing(config.telemetry) as tracer_provider,
            open_host(config, agents, parent, tracer_provider=tracer_provider) as (
                run_host,
                endpoint,
            ),
            contextlib.AsyncExitStack() as stack,
        ):
            metrics = None
            if config.metrics.enabled:
                metrics = Metrics(run_host.engine, token=metrics_token)
            own = config.metrics.address if metrics is not None else None
            app: Any = create_app(
                run_host,
                config,
                default_encoder_factory(),
                page=bundled_page(),
                host_token=host_token,
                metrics=metrics if own is None else None,
            )
            metrics_url = None
            if metrics is not None and own is not None:
                app = metrics.count_viewers(app)  # the route is on the listener of its own
                scrape = metrics_app(metrics, allowed_hosts=config.server.allowed_hosts)
                metrics_url = await stack.enter_async_context(
                    serve_app(scrape, host=own[0], port=own[1])
                )
            served: Any = AccessLog(app) if config.logging.access_log else app
            bind_host, bind_port = config.server.host, config.server.port
            async with serve_app(served, host=bind_host, port=bind_port) as url:
                keys = ", ".join(spec.key for spec in agents) or "none"
                _announce(config, url, keys, endpoint.base_url, run_host, out, metrics_url)
                freeze_startup_objects()
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    grace = config.server.shutdown_grace_seconds
                    await drain_on_signal(signals, run_host, grace, out, on_second)
    return forced


def _announce(
    config: HostConfig,
    url: str,
    keys: str,
    mcp_url: str,
    run_host: RunHost,
    out: TextIO,
    metrics_url: str | None = None,
) -> None:
    print(f"subagent-engine serving on {url} (config: {config.source})", file=out)
    print(f"  agents: {keys}; parent: {config.parent.kind}; MCP: {mcp_url}", file=out)
    recovered = run_host.engine.recovered
    if recovered:
        print(
            f"  ended {len(recovered)} run(s) a stopped process left live "
            f"({', '.join(r.run_id for r in recovered[:5])}"
            f"{', ...' if len(recovered) > 5 else ''})",
            file=out,
        )
    print(f"  runs kept in: {describe_store(config.store)}", file=out)
    if config.metrics.enabled:
        guard = f"token in ${config.metrics.token_env}" if config.metrics.token_env else "no token"
        print(f"  metrics: {metrics_url or url}/metrics ({guard})", file=out)
    telemetry = config.telemetry
    if telemetry.enabled:
        collector = urllib.parse.urlsplit(telemetry.endpoint)._replace(query="", fragment="")
        print(
            f"  traces: OTLP/HTTP to {collector.geturl()} "
            f"(sample ratio {telemetry.sample_ratio:g})",
            file=out,
        )
    if config.server.token_env:
        print(
            f"  starting runs needs the host token in ${config.server.token_env}; "
            f"the page asks for it once (or open {url}/#host_token=<token>)",
            file=out,
        )
    out.flush()


def serve_main(
    config_path: str | None,
    *,
    host: str | None = None,
    port: int | None = None,
    token_env: str | None = None,
    log_format: str | None = None,
    access_log: bool | None = None,
) -> int:
    try:
        config = load_config(config_path) if config_path else parse_config("", "<embedded>")
        server = config.server
        config = attrs.evolve(
            config,
            server=attrs.evolve(
                server,
                host=host or server.host,
                port=server.port if port is None else port,
                token_env=token_env or server.token_env,
            ),
            logging=attrs.evolve(
                config.logging,
                format=log_format or config.logging.format,
                access_log=config.logging.access_log if access_log is None else access_log,
            ),
        )
        _parent_factory(config)
        config.check_parent()  # its API key variable set, its model endpoint answering
        # Credentials are checked before anything listens.
        checked = config.agent_specs() if config.agents else []
        host_token = check_exposure(config)
        metrics_token = config.metrics_token()
        collector_problem = telemetry_problem(config.telemetry)
        if collector_problem is not None:
            raise ConfigError(config.source, None, "", collector_problem)
    except ConfigError as exc:
        print(f"subagent-engine serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(
        config.logging.format,
        config.logging.level,
        secrets=[*_secrets(config, host_token, checked), *filter(None, [metrics_token])],
    )
    try:
        status = trio.run(_serve, config, host_token, sys.stdout, metrics_token)
    except BaseException as exc:
        refused = alone(exc)
        if isinstance(refused, StoreOpenError):
            print(f"subagent-engine serve: {refused}", file=sys.stderr)
            return 2
        if not isinstance(refused, TargetPrepareError):
            raise
        # The engine prepared its agents before anything listened, and one cannot work as
        # configured (a malformed agent card, say): a configuration mistake like the others.
        for key, error in refused.failures.items():
            problem = config.agent_error(key, f"cannot be used: {error}")
            print(f"subagent-engine serve: {problem}", file=sys.stderr)
        return 2
    return status


def _secrets(config: HostConfig, host_token: str | None, agents: list[AgentSpec]) -> list[str]:
    """What no log line may show: the host token, every agent's credentials, the parent's key,
    the trace collector's headers (the variable's value and each header's decoded value)."""
    found = [host_token or ""]
    found += [secret for spec in agents for secret in spec.all_secrets]
    if config.parent.api_key_env:
        found.append(os.environ.get(config.parent.api_key_env, ""))
    if config.telemetry.enabled and config.telemetry.headers_env:
        headers = os.environ.get(config.telemetry.headers_env, "")
        found.append(headers)
        found += collector_headers(headers).values()  # (read at start: `telemetry_problem`)
    return [secret for secret in found if secret]


def check_exposure(config: HostConfig) -> str | None:
    """The host token, read now (`ConfigError` if it is configured but not set); a
    `ConfigError` too when the server would listen beyond loopback without one."""
    token = config.host_token()
    if token is None and not is_loopback(config.server.host):
        raise ConfigError(
            config.source,
            None,
            "server.token_env",
            f"listening on {config.server.host} lets every machine that reaches the port start "
            'runs; set a host token ([server] token_env = "NAME" or --token-env NAME, the '
            "variable holding at least 16 random characters) or listen on 127.0.0.1",
        )
    return token
