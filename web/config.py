"""The host's configuration file (TOML): agents, parent, server, visibility, limits.

This module owns reading one TOML file into a validated `HostConfig`, with every mistake
reported as a `ConfigError` that names the file, the line and the field (`agents.toml:14:
agents[1].policy.default_timeout: must be positive`), so a host fixes its file without reading
code. Everything is checked at start, before anything listens: unknown keys (a typo must not be
ignored silently), types, ranges, the engine's own validators (agent keys, policy bounds), and
credentials, which are named by environment variable (`token_env`) and never written in the file;
a variable that is not set is an error at start, not at the first delegation.

    [server]                      # all optional
    port = 8080
    visibility = "attributed"     # attributed | custom | inline | hidden
    cors_origins = []             # closed by default
    reconnect_ms = 1000           # SSE `retry:`: a browser's wait before it reconnects
    token_env = "HOST_TOKEN"      # starting a run needs this bearer token (required beyond
                                  # loopback)
    allowed_hosts = []            # host names served beyond IP literals and localhost
    max_active_runs = 32          # more at once get 429 with Retry-After
    replay_retention_seconds = 60  # a finished run's replay is kept at least this long
    shutdown_grace_seconds = 5    # Ctrl-C/SIGTERM: how long live runs get to end

    [store]                       # where runs are kept (see `StoreEntry`)
    kind = "sqlite"               # sqlite (the default) | memory | redis
    path = "runs.sqlite3"         # sqlite: default $XDG_STATE_HOME/subagent-engine/runs.sqlite3
    # redis: url = "redis://127.0.0.1:6379/0" (or url_env = "REDIS_URL"),
    # namespace = "subagent-engine", node = "node-1", lease_seconds = 10, outage_seconds = 30

    [logging]                     # all optional: lines on stderr
    format = "text"               # text | json (JSON Lines)
    level = "INFO"                # DEBUG | INFO | WARNING | ERROR (the run lines are INFO)
    access_log = false            # one line per HTTP request (never its query or headers)

    [metrics]                     # all optional: Prometheus text at /metrics (`web.metrics`)
    enabled = false               # off: /metrics answers 404 and nothing is exported
    token_env = "METRICS_TOKEN"   # a scrape needs this bearer token (required beyond loopback)
    listen = "127.0.0.1:9464"     # a listener of their own (default: the server's)

    [telemetry]                   # all optional: traces over OTLP/HTTP (`web.telemetry`)
    enabled = false               # off: no span is made and no traceparent is sent
    endpoint = "http://127.0.0.1:4318/v1/traces"  # the collector's OTLP/HTTP traces URL
    headers_env = "OTLP_HEADERS"  # a variable holding the collector's headers: "name=value,..."
    service_name = "subagent-engine"
    sample_ratio = 1.0            # share of new traces kept (a remote parent's choice is followed)

    [parent]
    kind = "scripted"             # scripted | claude-code (or its alias claude) | codex
    # for the CLIs: binary = "claude", model_endpoint = "http://127.0.0.1:8001",
    # model = "...", api_key_env = "ANTHROPIC_API_KEY", args = [...], tool_timeout = 600,
    # max_retries = 2 (model request retries), request_timeout_seconds = 120 (one model
    # request), run_deadline_seconds = 3600 (a whole run; default: none),
    # model_silence_seconds = 390 (no output, no tool call in flight; default
    # (max_retries + 1) * request_timeout_seconds + 30; 0: never),
    # claude-code only: auto_background_ms = 0 (when Claude may background a call; 0: never)

    [[agents]]
    key = "research"
    protocol = "a2a"
    card_url = "https://agents.example/research/.well-known/agent-card.json"
    auth = { token_env = "RESEARCH_TOKEN" }   # header "Authorization", scheme "Bearer"
    shortcut = true               # also expose delegate_to_research
    read_only = true              # changes nothing: parents may run such delegations at once
    [agents.policy]
    default_timeout = 300
    max_result_chars = 16000      # what the parent model reads of one result; the rest by reference

    [[agents]]                    # a remote AG-UI agent: same keys, `url` instead of `card_url`
    key = "writer"
    protocol = "agui"
    url = "https://agents.example/writer/run"       # RunAgentInput is POSTed here
    stop_url = "https://agents.example/writer/stop" # optional: how a run is cancelled
    auth = { token_env = "WRITER_TOKEN" }           # sent to the url's origin only

`load_config(path)` reads a file; `parse_config(text, source)` reads a string. Line numbers come
from a small scan of the text (tomllib gives none): the line of the deepest table or key that
names the field, else of its nearest enclosing table.

Which protocols an agent may speak, the settings each takes and how its target is built are not
written here: each remote adapter declares them (`adapters.agent_protocols.AgentProtocol`) and
`register_protocol` adds the declaration; A2A and AG-UI are registered below.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from adapters import a2a, agui
from adapters.agent_protocols import AgentProtocol, AgentSettings, parse_byte_size
from adapters.agui import DEFAULT_MODE, MODES
from adapters.listener import is_bearer_credential, is_loopback
from adapters.parents import (
    CLAUDE_CODE,
    CLI_PARENT_KINDS,
    SCRIPTED,
    ClaudeCodeConfig,
    ClaudeCodeParent,
    CodexConfig,
    CodexParent,
    ScriptedParent,
    parent_kind,
    parent_kinds_text,
    probe_model_endpoint,
)
from engine import (
    AGENT_KEY_PATTERN,
    AgentSpec,
    DelegationPolicy,
    EngineLimits,
    RegistryError,
    is_agent_key,
)
from web.logs import LOG_FORMATS, LOG_LEVELS

__all__ = [
    "AgentEntry",
    "AuthEntry",
    "ConfigError",
    "HostConfig",
    "LoggingEntry",
    "MetricsEntry",
    "TelemetryEntry",
    "ParentEntry",
    "ServerEntry",
    "load_config",
    "api_key_problem",
    "parse_config",
    "register_protocol",
]

#: The protocol of an agent whose entry names none.
DEFAULT_PROTOCOL: Final = "a2a"
#: The shortest host token accepted: a guessable token is no token.
MIN_HOST_TOKEN_CHARS: Final = 16


def weak_token(value: str) -> str | None:
    """Why `value` cannot be a token that guards a listener (too short, or not something a
    client can send as a bearer credential), or None when it can."""
    if len(value) >= MIN_HOST_TOKEN_CHARS and is_bearer_credential(value):
        return None
    return (
        f"must be at least {MIN_HOST_TOKEN_CHARS} characters of A-Z a-z 0-9 - . _ ~ + / "
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    )


#: The protocols agents may speak, by name (`register_protocol`).
_PROTOCOLS: dict[str, AgentProtocol[Any]] = {}


def register_protocol(protocol: AgentProtocol[Any]) -> None:
    """Let agents of the configuration speak `protocol` (`protocol = "<name>"` in their entry).
    Register before reading a configuration; a name or a setting another protocol already
    declares is a `ValueError` (an agent's settings must say which protocol they belong to)."""
    if protocol.name in _PROTOCOLS:
        raise ValueError(f"protocol {protocol.name!r} is already registered")
    clash = set(protocol.settings) & (_protocol_settings() | _COMMON_AGENT_SETTINGS)
    if clash:
        raise ValueError(f"protocol {protocol.name!r} declares settings taken: {sorted(clash)}")
    _PROTOCOLS[protocol.name] = protocol


def _protocol_settings() -> set[str]:
    return {setting for protocol in _PROTOCOLS.values() for setting in protocol.settings}


#: What every agent entry may say, whatever its protocol.
_COMMON_AGENT_SETTINGS: Final = frozenset(
    {
        "key",
        "protocol",
        "display_name",
        "description",
        "skills",
        "tenant",
        "auth",
        "trusted_origins",
        "forward_identity",
        "max_frame_bytes",
        "shortcut",
        "read_only",
        "policy",
    }
)


#: Seconds the start-up check waits for a CLI parent's model endpoint to answer.
PROBE_TIMEOUT: Final = 5.0


def api_key_problem(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the model API key variable `name` cannot be used (it is not set, or empty), if it
    cannot; `environ` defaults to os.environ. The one check `serve`, `a2a-serve` and `demo` make."""
    if (os.environ if environ is None else environ).get(name):
        return None
    return f"the variable {name} is not set"


class ConfigError(Exception):
    """A mistake in the host's configuration, located: `file:line: field: message`."""

    def __init__(self, source: str, line: int | None, field: str, message: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        self.source = source
        self.line = line
        self.field = field
        self.message = message


@attrs.frozen
class AuthEntry:
    """A credential sent to the agent's own origin: `header: scheme <value of token_env>`."""

    token_env: str
    header: str = "Authorization"
    scheme: str = "Bearer"


@attrs.frozen
class AgentEntry:
    key: str
    protocol: str
    #: The settings of its protocol (e.g. `card_url`; `url`, `stop_url`), as given.
    settings: Mapping[str, str] = attrs.field(factory=dict)
    display_name: str = ""
    description: str = ""
    skills: tuple[str, ...] = ()
    tenant: str | None = None
    auth: AuthEntry | None = None
    trusted_origins: tuple[str, ...] = ()
    forward_identity: bool = False
    #: The most bytes one frame or body from the agent may hold (None: its protocol's default).
    max_frame_bytes: int | None = None
    shortcut: bool = False
    #: See `AgentSpec.read_only`.
    read_only: bool = False
    policy: DelegationPolicy = attrs.field(factory=DelegationPolicy)

    def agent_settings(self, auth_header: tuple[str, str] | None = None) -> AgentSettings:
        """What its protocol's adapter builds the agent from (`AgentProtocol.configure`)."""
        return AgentSettings(
            settings=self.settings,
            tenant=self.tenant,
            auth_header=auth_header,
            trusted_origins=self.trusted_origins,
            forward_identity=self.forward_identity,
            max_frame_bytes=self.max_frame_bytes,
        )


@attrs.frozen
class ServerEntry:
    host: str = "127.0.0.1"
    port: int = 8080
    visibility: str = DEFAULT_MODE  # one of `adapters.agui.MODES`
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1 << 20
    keepalive_seconds: float = 15.0
    #: The SSE `retry:` field each stream opens with: how long a browser's EventSource waits
    #: before it reconnects after a dropped connection (its own default is about 3 s).
    reconnect_ms: int = 1000
    #: The variable holding the host token that starting a run needs (`Authorization: Bearer`);
    #: None: no token (refused when listening beyond loopback).
    token_env: str | None = None
    #: Host names the server answers to beyond IP literals and `localhost` (DNS rebinding:
    #: a page whose name resolves to this machine still sends its own name); "*": any.
    allowed_hosts: tuple[str, ...] = ()
    #: Runs at once; more get 429 with `Retry-After`.
    max_active_runs: int = 32
    #: A finished run's replay stays available at least this long: a new run that would push
    #: it out of the engine's retained runs is refused (429) instead. 0: count only.
    replay_retention_seconds: float = 60.0
    #: On SIGINT/SIGTERM: how long the server drains (runs end with a journaled terminal that
    #: reaches their viewers) before it closes the listener anyway.
    shutdown_grace_seconds: float = 5.0


@attrs.frozen
class LoggingEntry:
    """`[logging]`: how the process writes its log lines (`web.logs.configure_logging`)."""

    format: str = "text"  # one of `web.logs.LOG_FORMATS`
    level: str = "INFO"  # one of `web.logs.LOG_LEVELS`
    #: One line per HTTP request (`web.logs.AccessLog`).
    access_log: bool = False


@attrs.frozen
class MetricsEntry:
    """`[metrics]`: the Prometheus endpoint `/metrics` on the server's listener (`web.metrics`)."""

    enabled: bool = False
    #: The variable holding the bearer token a scrape needs; None: none (loopback only).
    token_env: str | None = None
    #: `host:port` of a listener serving only `/metrics`; None: the server's own listener.
    listen: str | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """`listen` as (host, port), or None."""
        if self.listen is None:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


#: Where `[telemetry]` sends spans unless told otherwise: a collector on this machine, at the
#: OTLP/HTTP default port and path (https://opentelemetry.io/docs/specs/otlp/#otlphttp-request).
DEFAULT_OTLP_ENDPOINT: Final = "http://127.0.0.1:4318/v1/traces"


@attrs.frozen
class TelemetryEntry:
    """`[telemetry]`: OpenTelemetry traces exported over OTLP/HTTP (`web.telemetry`)."""

    enabled: bool = False
    #: The collector's OTLP/HTTP traces URL (https://opentelemetry.io/docs/specs/otlp/#otlphttp).
    endpoint: str = "http://127.0.0.1:4318/v1/traces"  # DEFAULT_OTLP_ENDPOINT
    #: The variable holding headers for the collector (`name=value,...`, e.g. its API key).
    headers_env: str | None = None
    #: The `service.name` resource attribute of every span.
    service_name: str = "subagent-engine"
    #: The share of new traces recorded (0..1); a remote parent's sampling decision is followed.
    sample_ratio: float = 1.0


#: Where runs are kept: `StoreEntry.kind`.
STORE_KINDS: Final = ("sqlite", "memory", "redis")


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where `serve` keeps runs when `[store] path` is not given: the user's state directory
    (`$XDG_STATE_HOME`, else `~/.local/state`, per the XDG Base Directory specification,
    https://specifications.freedesktop.org/basedir-spec/latest/), `subagent-engine/runs.sqlite3`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "subagent-engine" / "runs.sqlite3"


@attrs.frozen
class StoreEntry:
    """Where the server keeps runs (their journals, results and audit trail).

    `sqlite` (what a configuration file or the embedded defaults get): one file, `path`, that
    survives restarts; runs left live by a process that died are ended when the server starts
    again. `memory`: nothing survives the process (what a `HostConfig` built in code gets).
    `redis`: several server nodes share one Redis (`url`, or `url_env` naming the variable
    that holds it when it carries a password), keys under `namespace`; each node has a `node`
    name and holds a lease of `lease_seconds`. While Redis is unavailable, journal writes are
    sent again for up to `outage_seconds`; past that the runs writing fail (`store_unavailable`).
    """

    kind: str = "memory"
    path: str | None = None
    url: str | None = None
    url_env: str | None = None
    namespace: str = "subagent-engine"
    node: str | None = None
    lease_seconds: float = 10.0
    outage_seconds: float = 30.0

    def sqlite_path(self, environ: Mapping[str, str] | None = None) -> Path:
        """The SQLite file: `path` (a `~` expanded), else `default_store_path()`."""
        if self.path:
            return Path(self.path).expanduser()
        return default_store_path(environ)

    def redis_url(self, environ: Mapping[str, str] | None = None) -> str | None:
        if self.url_env:
            return (os.environ if environ is None else environ).get(self.url_env) or None
        return self.url


@attrs.frozen
class ParentEntry:
    #: One of `adapters.parents.PARENT_KINDS`; an alias (`claude`) is read as its kind.
    kind: str = attrs.field(default=SCRIPTED, converter=parent_kind)
    model_endpoint: str | None = None
    model: str | None = None
    args: tuple[str, ...] = ()
    api_key_env: str | None = None
    binary: str | None = None  # the CLI (a path, or a name on PATH); default: claude / codex
    tool_timeout: float | None = None  # seconds the CLI waits for one delegate_to_agent call
    #: How often the CLI retries a failed model request (None: the adapter's default).
    max_retries: int | None = None
    #: Seconds one model request may go without an answer (None: the adapter's default).
    request_timeout_seconds: float | None = None
    #: Seconds a whole run may take before its CLI is stopped (None: no deadline).
    run_deadline_seconds: float | None = None
    #: Seconds the CLI may print nothing with no tool call in flight (None: the adapter's
    #: default from the retry bounds; 0: no limit).
    model_silence_seconds: float | None = None
    #: Claude Code only: milliseconds after which it may move an MCP call to the background
    #: (None: the adapter's default, 0, never).
    auto_background_ms: int | None = None

    def cli_parent(self) -> tuple[Any, Callable[[], Any]]:
        """For a CLI kind: (its `ClaudeCodeConfig` / `CodexConfig`, a factory of its parent
        adapter). Whether the binary exists is the caller's to check (see
        `HostConfig.parent_factory`)."""
        if self.kind not in CLI_PARENT_KINDS:
            raise ValueError(f"{self.kind!r} is not a CLI parent")
        config_class: Any = ClaudeCodeConfig if self.kind == CLAUDE_CODE else CodexConfig
        options: dict[str, Any] = {"base_url": self.model_endpoint, "model": self.model}
        options["extra_args"] = self.args
        if self.binary is not None:
            options["binary"] = self.binary
        if self.api_key_env is not None:
            options["api_key_env"] = self.api_key_env
        if self.tool_timeout is not None:
            options["tool_timeout"] = self.tool_timeout
        if self.max_retries is not None:
            options["max_retries"] = self.max_retries
        if self.request_timeout_seconds is not None:
            options["request_timeout"] = self.request_timeout_seconds
        options["run_deadline"] = self.run_deadline_seconds
        if self.model_silence_seconds is not None:
            options["model_silence"] = self.model_silence_seconds
        if self.auto_background_ms is not None:
            options["auto_background_ms"] = self.auto_background_ms
        config = config_class(**options)
        parent_class: Any = ClaudeCodeParent if self.kind == CLAUDE_CODE else CodexParent
        return config, lambda: parent_class(config)


@attrs.frozen
class HostConfig:
    """A validated host configuration. `source` is where it came from (a path or `<embedded>`)."""

    source: str
    server: ServerEntry = attrs.field(factory=ServerEntry)
    parent: ParentEntry = attrs.field(factory=ParentEntry)
    agents: tuple[AgentEntry, ...] = ()
    limits: EngineLimits = attrs.field(factory=EngineLimits)
    store: StoreEntry = attrs.field(factory=StoreEntry)
    logging: LoggingEntry = attrs.field(factory=LoggingEntry)
    metrics: MetricsEntry = attrs.field(factory=MetricsEntry)
    telemetry: TelemetryEntry = attrs.field(factory=TelemetryEntry)
    _lines: Mapping[tuple[Any, ...], int] = attrs.field(factory=dict, repr=False, eq=False)

    @property
    def shortcuts(self) -> frozenset[str]:
        return frozenset(agent.key for agent in self.agents if agent.shortcut)

    def parent_factory(self) -> Callable[[], Any]:
        """A factory of the configured parent agent (`ScriptedParent`, `ClaudeCodeParent`,
        `CodexParent`); a CLI that cannot be found is a `ConfigError` naming `parent.binary`."""
        entry = self.parent
        if entry.kind == SCRIPTED:
            return ScriptedParent
        config, factory = entry.cli_parent()
        if shutil.which(config.binary) is None:
            path = ("parent", "binary") if entry.binary else ("parent", "kind")
            raise ConfigError(
                self.source,
                _line_of(self._lines, path),
                _dotted(path),
                f"the {entry.kind} CLI {config.binary!r} is not an executable on PATH "
                f"(install it, or set parent.binary to its path)",
            )
        return factory

    def check_parent(
        self,
        kind: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        probe_timeout: float | None = None,
    ) -> None:
        """What a CLI parent needs from the host, checked before anything listens (`kind`: the
        parent kind served, default `[parent] kind`; nothing to check for the scripted parent):
        the variable `api_key_env` set, and `model_endpoint` answering HTTP within
        `probe_timeout` seconds (default `PROBE_TIMEOUT`; `adapters.parents.probe_model_endpoint`:
        blocking, so call it before the event loop). `ConfigError` naming the field otherwise."""
        entry = self.parent
        if (kind or entry.kind) not in CLI_PARENT_KINDS:
            return
        if entry.api_key_env is not None:
            problem = api_key_problem(entry.api_key_env, environ)
            if problem is not None:
                path = ("parent", "api_key_env")
                raise ConfigError(
                    self.source,
                    _line_of(self._lines, path),
                    _dotted(path),
                    f"{problem}: the CLI would reach its model without a key",
                )
        if entry.model_endpoint is not None:
            timeout = PROBE_TIMEOUT if probe_timeout is None else probe_timeout
            problem = probe_model_endpoint(entry.model_endpoint, timeout=timeout)
            if problem is not None:
                path = ("parent", "model_endpoint")
                raise ConfigError(
                    self.source,
                    _line_of(self._lines, path),
                    _dotted(path),
                    f"{problem}; a CLI parent could not get a single answer from its model",
                )

    def host_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The host token (`[server] token_env`), read from `environ` (default: os.environ);
        None when none is configured. `ConfigError` for a variable that is not set or too
        short to be a credential."""
        name = self.server.token_env
        if name is None:
            return None
        value = (os.environ if environ is None else environ).get(name, "")
        path = ("server", "token_env")
        if not value:
            problem = f"the environment variable {name!r} is not set"
        elif weak := weak_token(value):
            problem = f"the host token in {name!r} {weak}"
        else:
            return value
        raise ConfigError(self.source, _line_of(self._lines, path), _dotted(path), problem)

    def metrics_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The bearer token `/metrics` needs (`[metrics] token_env`, read from `environ`,
        default os.environ); None without one. `ConfigError` for a variable that is not set or
        too weak, and for metrics enabled without a token on a listener beyond loopback (every
        machine that reaches the port would read them)."""
        entry = self.metrics
        if not entry.enabled:
            return None
        path = ("metrics", "token_env")
        if entry.token_env is None:
            host = entry.address[0] if entry.address is not None else self.server.host
            if is_loopback(host):
                return None
            path = ("metrics", "listen" if entry.address is not None else "enabled")
            problem = (
                f"metrics on a listener beyond loopback ({host}) need a token: "
                'set [metrics] token_env = "NAME" (the variable holding at least '
                f"{MIN_HOST_TOKEN_CHARS} random characters) or listen on 127.0.0.1"
            )
        else:
            value = (os.environ if environ is None else environ).get(entry.token_env, "")
            if not value:
                problem = f"the environment variable {entry.token_env!r} is not set"
            elif weak := weak_token(value):
                problem = f"the metrics token in {entry.token_env!r} {weak}"
            else:
                return value
        raise ConfigError(self.source, _line_of(self._lines, path), _dotted(path), problem)

    def agent_error(self, key: str, message: str) -> ConfigError:
        """A `ConfigError` located at the entry of agent `key` (e.g. the engine refused its
        target when it started: `engine.TargetPrepareError`)."""
        index = next((i for i, agent in enumerate(self.agents) if agent.key == key), None)
        if index is None:  # not from this file (the embedded defaults)
            return ConfigError(self.source, None, f"agent {key!r}", message)
        path = ("agents", index)
        return ConfigError(self.source, _line_of(self._lines, path), _dotted(path), message)

    def agent_specs(self, environ: Mapping[str, str] | None = None) -> list[AgentSpec]:
        """The registry entries, credentials resolved from `environ` (default: os.environ).
        Raises `ConfigError` for a credential variable that is not set or empty."""
        env = os.environ if environ is None else environ
        specs = []
        for index, agent in enumerate(self.agents):
            auth_header = None
            if agent.auth is not None:
                value = env.get(agent.auth.token_env, "")
                if not value:
                    path = ("agents", index, "auth", "token_env")
                    raise ConfigError(
                        self.source,
                        _line_of(self._lines, path),
                        _dotted(path),
                        f"the environment variable {agent.auth.token_env!r} is not set",
                    )
                credential = f"{agent.auth.scheme} {value}" if agent.auth.scheme else value
                auth_header = (agent.auth.header, credential)
            # The reader checked the protocol and its settings.
            target = _PROTOCOLS[agent.protocol].build(agent.agent_settings(auth_header))
            specs.append(
                AgentSpec(
                    key=agent.key,
                    display_name=agent.display_name,
                    description=agent.description,
                    skills=agent.skills,
                    protocol=agent.protocol,
                    target=target,
                    policy=agent.policy,
                    secrets=target.secrets,
                    read_only=agent.read_only,
                )
            )
        return specs


# -- reading -----------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    """Read and validate a TOML file. Raises `ConfigError` (also for a missing file)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, None, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, None, "", f"cannot be read: {exc}") from None
    return parse_config(text, source)


def parse_config(text: str, source: str = "<config>") -> HostConfig:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's error has no line attribute; its message ends "(at line N, column M)".
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        line = int(found.group(1)) if found else getattr(exc, "lineno", None)
        message = str(exc).split(" (at line", 1)[0]
        raise ConfigError(source, line, "", f"not valid TOML: {message}") from None
    lines = _locate(text)
    reader = _Reader(source, lines)
    return reader.host(document)


_Path = tuple[Any, ...]


def _dotted(path: _Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(lines: Mapping[_Path, int], path: _Path) -> int | None:
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


_TABLE: Final = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY: Final = re.compile(r'^\s*([A-Za-z0-9_."\'-]+?)\s*=')


def _split_key(key: str) -> list[str]:
    return [part.strip().strip("\"'") for part in key.split(".")]


def _locate(text: str) -> dict[_Path, int]:
    """Line numbers of tables and keys, by path (`("agents", 1, "policy", "x")`)."""
    lines: dict[_Path, int] = {}
    arrays: dict[tuple[str, ...], int] = {}
    current: _Path = ()
    for number, line in enumerate(text.splitlines(), start=1):
        table = _TABLE.match(line)
        if table:
            names = _split_key(table.group(2))
            if table.group(1) == "[[":
                index = arrays.get(tuple(names), -1) + 1
                arrays[tuple(names)] = index
                current = (*names, index)
            else:
                # `[agents.policy]` after `[[agents]]` belongs to the latest agent.
                head = tuple(names[:1])
                if head in arrays and len(names) > 1:
                    current = (names[0], arrays[head], *names[1:])
                else:
                    current = tuple(names)
            lines.setdefault(current, number)
            continue
        key = _KEY.match(line)
        if key:
            lines.setdefault((*current, *_split_key(key.group(1))), number)
    return lines


class _Reader:
    """Turns the decoded document into the config, raising located `ConfigError`s."""

    def __init__(self, source: str, lines: Mapping[_Path, int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: _Path, message: str) -> ConfigError:
        return ConfigError(self.source, _line_of(self.lines, path), _dotted(path), message)

    def table(self, value: Any, path: _Path, known: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a table, not {_type(value)}")
        for key in value:
            if key not in known:
                hint = f" (known: {', '.join(sorted(known))})"
                raise self.fail((*path, key), f"unknown setting{hint}")
        return value

    def get(
        self,
        table: Mapping[str, Any],
        path: _Path,
        key: str,
        kind: type | tuple[type, ...],
        default: Any = None,
        *,
        required: bool = False,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        if key not in table:
            if required:
                raise self.fail(path, f"missing required setting {key!r}")
            return default
        value = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python; a TOML `true` is never a number here.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.fail((*path, key), f"must be {names}, not {_type(value)}")
        if check is not None:
            problem = check(value)
            if problem:
                raise self.fail((*path, key), problem)
        return value

    def strings(self, table: Mapping[str, Any], path: _Path, key: str) -> tuple[str, ...]:
        values = self.get(table, path, key, list, [])
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise self.fail((*path, key, index), f"must be a string, not {_type(value)}")
        return tuple(values)

    def host(self, document: dict[str, Any]) -> HostConfig:
        known = {
            "server",
            "parent",
            "agents",
            "limits",
            "store",
            "logging",
            "metrics",
            "telemetry",
        }
        top = self.table(document, (), known)
        agents = self.get(top, (), "agents", list, [])
        entries = tuple(self.agent(value, ("agents", i)) for i, value in enumerate(agents))
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            if entry.key in seen:
                raise self.fail(
                    ("agents", index, "key"),
                    f"duplicate agent key {entry.key!r} (also agents[{seen[entry.key]}])",
                )
            seen[entry.key] = index
        server = self.server(top.get("server", {}))
        limits = self.attrs_table(top.get("limits", {}), ("limits",), EngineLimits)
        if server.replay_retention_seconds > 0 and (
            server.max_active_runs > limits.retained_closed_runs
        ):
            raise self.fail(
                ("server", "max_active_runs"),
                f"must be at most limits.retained_closed_runs ({limits.retained_closed_runs}) "
                "while replay_retention_seconds keeps finished runs replayable",
            )
        return HostConfig(
            source=self.source,
            server=server,
            parent=self.parent(top.get("parent", {})),
            agents=entries,
            limits=limits,
            store=self.store(top.get("store", {})),
            logging=self.logging(top.get("logging", {})),
            metrics=self.metrics(top.get("metrics", {}), server),
            telemetry=self.telemetry(top.get("telemetry", {})),
            lines=dict(self.lines),
        )

    def server(self, value: Any) -> ServerEntry:
        path: _Path = ("server",)
        _ok = _not_negative
        known = {
            "host",
            "port",
            "visibility",
            "cors_origins",
            "max_body_bytes",
            "keepalive_seconds",
            "reconnect_ms",
            "token_env",
            "allowed_hosts",
            "max_active_runs",
            "replay_retention_seconds",
            "shutdown_grace_seconds",
        }
        table = self.table(value, path, known)
        return ServerEntry(
            host=self.get(table, path, "host", str, "127.0.0.1", check=_nonempty),
            port=self.get(table, path, "port", int, 8080, check=_port),
            visibility=self.get(table, path, "visibility", str, DEFAULT_MODE, check=_one_of(MODES)),
            cors_origins=self.strings(table, path, "cors_origins"),
            max_body_bytes=self.get(table, path, "max_body_bytes", int, 1 << 20, check=_positive),
            keepalive_seconds=float(
                self.get(table, path, "keepalive_seconds", (int, float), 15.0, check=_positive)
            ),
            reconnect_ms=self.get(table, path, "reconnect_ms", int, 1000, check=_positive),
            token_env=self.get(table, path, "token_env", str, check=_env_name),
            allowed_hosts=tuple(
                host.lower() for host in self.strings(table, path, "allowed_hosts")
            ),
            max_active_runs=self.get(table, path, "max_active_runs", int, 32, check=_positive),
            replay_retention_seconds=float(
                self.get(
                    table,
                    path,
                    "replay_retention_seconds",
                    (int, float),
                    60.0,
                    check=_not_negative,
                )
            ),
            shutdown_grace_seconds=float(
                self.get(table, path, "shutdown_grace_seconds", (int, float), 5.0, check=_positive)
            ),
        )

    def logging(self, value: Any) -> LoggingEntry:
        path: _Path = ("logging",)
        table = self.table(value, path, {"format", "level", "access_log"})
        level = self.get(table, path, "level", str, "INFO", check=_one_of(LOG_LEVELS, upper=True))
        return LoggingEntry(
            format=self.get(table, path, "format", str, "text", check=_one_of(LOG_FORMATS)),
            level=level.upper(),
            access_log=self.get(table, path, "access_log", bool, False),
        )

    def metrics(self, value: Any, server: ServerEntry) -> MetricsEntry:
        path: _Path = ("metrics",)
        table = self.table(value, path, {"enabled", "token_env", "listen"})
        entry = MetricsEntry(
            enabled=self.get(table, path, "enabled", bool, False),
            token_env=self.get(table, path, "token_env", str, check=_env_name),
            listen=self.get(table, path, "listen", str, check=_listen_address),
        )
        host = entry.address[0] if entry.address is not None else server.host
        if entry.enabled and entry.token_env is None and not is_loopback(host):
            raise self.fail(
                (*path, "listen" if entry.address is not None else "enabled"),
                f"metrics on a listener beyond loopback ({host}) need a token: set "
                '[metrics] token_env = "NAME" or listen on 127.0.0.1',
            )
        return entry

    def telemetry(self, value: Any) -> TelemetryEntry:
        path: _Path = ("telemetry",)
        known = {"enabled", "endpoint", "headers_env", "service_name", "sample_ratio"}
        table = self.table(value, path, known)
        return TelemetryEntry(
            enabled=self.get(table, path, "enabled", bool, False),
            endpoint=self.get(table, path, "endpoint", str, DEFAULT_OTLP_ENDPOINT, check=_otlp_url),
            headers_env=self.get(table, path, "headers_env", str, check=_env_name),
            service_name=self.get(
                table, path, "service_name", str, "subagent-engine", check=_service_name
            ),
            sample_ratio=float(
                self.get(table, path, "sample_ratio", (int, float), 1.0, check=_ratio)
            ),
        )

    def store(self, value: Any) -> StoreEntry:
        path: _Path = ("store",)
        known = {
            "kind",
            "path",
            "url",
            "url_env",
            "namespace",
            "node",
            "lease_seconds",
            "outage_seconds",
        }
        table = self.table(value, path, known)
        kind = self.get(table, path, "kind", str, "sqlite", check=_one_of(STORE_KINDS))
        for key in ("path",) if kind != "sqlite" else ():
            if key in table:
                raise self.fail((*path, key), f"is for kind = 'sqlite' only (kind is {kind!r})")
        for key in ("url", "url_env", "namespace", "node", "lease_seconds", "outage_seconds"):
            if key in table and kind != "redis":
                raise self.fail((*path, key), f"is for kind = 'redis' only (kind is {kind!r})")
        entry = StoreEntry(
            kind=kind,
            path=self.get(table, path, "path", str, check=_nonempty),
            url=self.get(table, path, "url", str, check=_redis_url),
            url_env=self.get(table, path, "url_env", str, check=_env_name),
            namespace=self.get(table, path, "namespace", str, "subagent-engine", check=_namespace),
            node=self.get(table, path, "node", str, check=_namespace),
            lease_seconds=float(
                self.get(table, path, "lease_seconds", (int, float), 10.0, check=_positive)
            ),
            outage_seconds=float(
                self.get(table, path, "outage_seconds", (int, float), 30.0, check=_positive)
            ),
        )
        if kind == "redis":
            if (entry.url is None) == (entry.url_env is None):
                raise self.fail(path, "kind = 'redis' needs exactly one of url and url_env")
            if entry.url_env is not None and not os.environ.get(entry.url_env):
                raise self.fail(
                    (*path, "url_env"),
                    f"the environment variable {entry.url_env!r} is not set",
                )
        return entry

    def parent(self, value: Any) -> ParentEntry:
        path: _Path = ("parent",)
        known = {
            "kind",
            "model_endpoint",
            "model",
            "args",
            "api_key_env",
            "binary",
            "tool_timeout",
            "max_retries",
            "request_timeout_seconds",
            "run_deadline_seconds",
            "model_silence_seconds",
            "auto_background_ms",
        }
        table = self.table(value, path, known)
        timeout = self.get(table, path, "tool_timeout", (int, float), check=_positive)
        request_timeout = self.get(
            table, path, "request_timeout_seconds", (int, float), check=_finite_positive
        )
        deadline = self.get(
            table, path, "run_deadline_seconds", (int, float), check=_finite_positive
        )
        silence = self.get(
            table, path, "model_silence_seconds", (int, float), check=_finite_not_negative
        )
        kind = self.get(table, path, "kind", str, SCRIPTED, check=_parent_kind)
        background = self.get(table, path, "auto_background_ms", int, check=_not_negative)
        kind = parent_kind(kind)
        if background is not None and kind in CLI_PARENT_KINDS and kind != CLAUDE_CODE:
            raise self.fail(
                (*path, "auto_background_ms"), f"applies to kind 'claude-code' only, not {kind!r}"
            )
        return ParentEntry(
            kind=kind,
            model_endpoint=self.get(table, path, "model_endpoint", str, check=_http_url),
            model=self.get(table, path, "model", str, check=_nonempty),
            args=self.strings(table, path, "args"),
            api_key_env=self.get(table, path, "api_key_env", str, check=_env_name),
            binary=self.get(table, path, "binary", str, check=_nonempty),
            tool_timeout=None if timeout is None else float(timeout),
            max_retries=self.get(table, path, "max_retries", int, check=_retry_count),
            request_timeout_seconds=None if request_timeout is None else float(request_timeout),
            run_deadline_seconds=None if deadline is None else float(deadline),
            model_silence_seconds=None if silence is None else float(silence),
            auto_background_ms=background,
        )

    def agent(self, value: Any, path: _Path) -> AgentEntry:
        table = self.table(value, path, _protocol_settings() | _COMMON_AGENT_SETTINGS)
        key = self.get(table, path, "key", str, required=True)
        name = self.get(
            table, path, "protocol", str, DEFAULT_PROTOCOL, check=_one_of(tuple(_PROTOCOLS))
        )
        protocol = _PROTOCOLS[name]
        for setting in table:
            if setting in _protocol_settings() and setting not in protocol.settings:
                owners = " and ".join(p.name for p in _PROTOCOLS.values() if setting in p.settings)
                raise self.fail(
                    (*path, setting),
                    f"is for {owners} agents only; this agent's protocol is {name!r} "
                    f"({protocol.reached})",
                )
        settings = {
            setting: self.get(table, path, setting, str, required=required)
            for setting, required in protocol.settings.items()
            if setting in table or required
        }
        auth = None
        if "auth" in table:
            auth_path = (*path, "auth")
            auth_table = self.table(table["auth"], auth_path, {"token_env", "header", "scheme"})
            auth = AuthEntry(
                token_env=self.get(
                    auth_table, auth_path, "token_env", str, required=True, check=_env_name
                ),
                header=self.get(auth_table, auth_path, "header", str, "Authorization"),
                scheme=self.get(auth_table, auth_path, "scheme", str, "Bearer"),
            )
        entry_fields = {
            "key": key,
            "protocol": name,
            "settings": settings,
            "display_name": self.get(table, path, "display_name", str, ""),
            "description": self.get(table, path, "description", str, ""),
            "skills": self.strings(table, path, "skills"),
            "tenant": self.get(table, path, "tenant", str, check=_nonempty),
            "auth": auth,
            "trusted_origins": self.strings(table, path, "trusted_origins"),
            "forward_identity": self.get(table, path, "forward_identity", bool, False),
            "max_frame_bytes": self.byte_size(table, path, "max_frame_bytes"),
            "shortcut": self.get(table, path, "shortcut", bool, False),
            "read_only": self.get(table, path, "read_only", bool, False),
            "policy": self.attrs_table(
                table.get("policy", {}), (*path, "policy"), DelegationPolicy
            ),
        }
        # The engine's own rules decide what a key may be, the adapter's what its settings may.
        if not is_agent_key(key):
            raise self.fail(
                (*path, "key"), f"{key!r} is not an agent key (pattern {AGENT_KEY_PATTERN})"
            )
        entry = AgentEntry(**entry_fields)
        try:
            protocol.configure(entry.agent_settings())
        except (ValueError, TypeError) as exc:
            # Located at the setting its message names (the longest, so `stop_url` beats
            # `url`; said once, by the location), else at the agent.
            message = str(exc)
            candidates = [*settings, *(["max_frame_bytes"] if "max_frame_bytes" in table else [])]
            named = [s for s in candidates if re.search(rf"\b{re.escape(s)}\b", message)]
            if not named:
                raise self.fail(path, message) from None
            culprit = max(named, key=len)
            message = message.removeprefix(f"{culprit} ")
            raise self.fail((*path, culprit), message) from None
        return entry

    def byte_size(self, table: Mapping[str, Any], path: _Path, name: str) -> int | None:
        """A size given as a string ("8 MiB", "512 KiB", "65536"), or None when absent."""
        text = self.get(table, path, name, str)
        if text is None:
            return None
        try:
            return parse_byte_size(name, text)
        except ValueError as exc:
            raise self.fail((*path, name), str(exc).removeprefix(f"{name} ")) from None

    def attrs_table(self, value: Any, path: _Path, cls: type[Any]) -> Any:
        """An attrs class (policy, limits) from a table: known fields, right types, and the
        class's own validators, each failure located at its field."""
        fields = {field.name: field for field in attrs.fields(cls)}
        table = self.table(value, path, set(fields))
        kwargs = {}
        for name, raw in table.items():
            default = fields[name].default
            kind: tuple[type, ...]
            if isinstance(default, bool):
                kind = (bool,)
            elif isinstance(default, float):
                kind = (int, float)
            elif isinstance(default, int):
                kind = (int,)
            else:
                kind = (str,)
            kwargs[name] = self.get(table, path, name, kind)
            if isinstance(default, float):
                kwargs[name] = float(raw)
        try:
            return cls(**kwargs)
        except (RegistryError, ValueError, TypeError) as exc:
            message = str(exc)
            culprit = next((n for n in kwargs if n in message), None)
            raise self.fail((*path, culprit) if culprit else path, message) from None


_TYPE_NAMES: Final = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "an array",
    dict: "a table",
}


def _type(value: Any) -> str:
    for kind, name in (
        (bool, "true/false"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _nonempty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def _finite_positive(value: float) -> str | None:
    return None if 0 < value < float("inf") else "must be a positive number of seconds"


#: The most model request retries a CLI parent may be given (Claude Code clamps higher values).
MAX_MODEL_RETRIES: Final = 15


def _retry_count(value: int) -> str | None:
    if 0 <= value <= MAX_MODEL_RETRIES:
        return None
    return f"must be between 0 and {MAX_MODEL_RETRIES}"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else "must not be negative"


def _finite_not_negative(value: float) -> str | None:
    return None if 0 <= value < float("inf") else "must be a number of seconds >= 0"


def _listen_address(value: str) -> str | None:
    """`host:port` (an IPv6 host in brackets: `[::1]:9464`)."""
    host, colon, port = value.rpartition(":")
    bare = host.strip("[]")
    if not colon or not bare or not port.isascii() or not port.isdigit():
        return "must be host:port, such as 127.0.0.1:9464"
    if ":" in bare and not (host.startswith("[") and host.endswith("]")):
        return "must put an IPv6 address in brackets, such as [::1]:9464"
    return _port(int(port))


def _port(value: int) -> str | None:
    return None if 0 <= value <= 65535 else "must be a TCP port (0-65535; 0 picks a free one)"


def _one_of(choices: tuple[str, ...], *, upper: bool = False) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        found = (value.upper() if upper else value) in choices
        return None if found else f"must be one of {', '.join(choices)}"

    return check


def _parent_kind(value: str) -> str | None:
    try:
        parent_kind(value)
    except ValueError:
        return f"must be one of {parent_kinds_text()}"
    return None


def _http_url(value: str) -> str | None:
    return None if re.match(r"^https?://[^\s/]+", value) else "must be an http(s) URL"


def _otlp_url(value: str) -> str | None:
    problem = _http_url(value)
    if problem is None and "@" in value.split("/", 3)[2]:
        return "holds credentials: put them in a variable named by headers_env"
    return problem


def _ratio(value: float) -> str | None:
    return None if 0 <= value <= 1 else "must be between 0 and 1"


def _service_name(value: str) -> str | None:
    if not value.strip() or len(value) > 200 or not value.isprintable():
        return "must be a printable name of at most 200 characters"
    return None


def _redis_url(value: str) -> str | None:
    if not re.fullmatch(r"rediss?://[^\s]+|unix://[^\s]+", value):
        return "must be a redis:// (or rediss://, unix://) URL"
    if "@" in value:
        return "holds credentials: put the URL in an environment variable and name it in url_env"
    return None


def _namespace(value: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
        return "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
    return None


def _env_name(value: str) -> str | None:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        return None
    return "must be the name of an environment variable (the credential itself never goes here)"


register_protocol(a2a.AGENT_PROTOCOL)
register_protocol(agui.AGENT_PROTOCOL)
