"""`subagent-engine demo`: the main job, a parent delegating to remote A2A subagents in the page.

This module owns the demo's composition and nothing else: which remote agents run, how they are
started and stopped, and which parent drives the runs. The server itself is `web.server`'s
(`open_host`, `create_app`, `serve_app`, as `subagent-engine serve` uses it), the remote agents
are `subagent-engine a2a-serve` processes, the parents are `adapters.parents`'.

- Default (`--parent scripted --remote builtin`, no model, no API key): two remote A2A agents,
  `research` and `review` (`BUILTIN_REMOTES`), each an a2a-serve agent with the scripted parent
  playing its script at a human pace, and the page with the scripted parent, whose
  default script delegates to both at once over the run's MCP endpoint, passing the user's
  prompt. Each remote is `python -m demo.remote --script research|review`: `a2a-serve --parent
  scripted --script KEY`, except that a task asking for a question ("ask me", "clarify",
  "question") plays the script's asking variant (`review-ask`), so "ask me which framework to
  review" typed on the page makes the review agent ask, on the page, within seconds.
- Human in the loop: every remote's questions (A2A input-required) are surfaced to the page
  (`REMOTE_POLICY`: `input_required = "surface"`), answered there or through
  `POST /runs/<id>/answer`; one left unanswered for `demo.agents.REVIEW_INPUT_WAIT` seconds
  expires and the delegation comes back to the parent as input_required.
- `--remote codex|claude-code`: one remote, `a2a-serve --parent codex|claude-code` on the model
  endpoint; `--parent claude-code|codex`: that CLI drives each run (`HostConfig.parent_factory`).
  Both flags take a parent kind as `adapters.parents.parent_kind` reads it (`claude` is
  `claude-code`); the messages repeat the spelling given.
- `--print`: the terminal demo (`run_demo`): one run with two in-process subagents, its ordered
  event stream printed as it happens (one line per journal entry, or JSON lines).
- Log lines go to stderr as `serve` writes them (`web.logs`): `--log-format text|json` (default
  text), a line per run's and delegation's start and end, and with `--access-log` one per HTTP
  request to the page; the remotes' token and `--api-key-env`'s key are redacted from every line.
  The built-in remotes write their warnings in the same format. With `--print`, log lines are
  written only when `--log-format` asks for them (the terminal shows the event stream). The demo
  takes no configuration file, so it exports no traces (`[telemetry]` is `serve`'s).

Child processes: each remote runs in its own process group with `--watch-stdin` (it exits when the
demo's end of its stdin closes, so even a killed demo leaves none behind) and `--token-env
REMOTE_TOKEN_ENV`: the demo draws a random token at start and hands it to the remotes in their
environment only (never on a command line, never printed), and to the bundled server's agents as
their credential, so nothing else on the machine can drive a remote (a CLI remote runs the commands
its model asks for). The demo reads each remote's `READY <port>` line, and on Ctrl-C or SIGTERM
drains the page first (`web.server.RunHost.drain`: new runs refused, every run cancelled, remote
tasks included, while the remotes still listen, and each run's terminal delivered to its viewers
before the page's listener closes), then closes the remotes' stdin, SIGTERMs their groups, waits,
and SIGKILLs what is left after a grace period. A second signal exits at once
(`web.server.force_exit`, status 128 + the signal; the remotes exit as their stdin closes).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

import attrs
import trio

import engine
from adapters.parents import (
    CLAUDE_CODE,
    CLI_PARENT_KINDS,
    CODEX,
    DEFAULT_SCRIPT,
    SCRIPTED,
    Answer,
    Ask,
    Delegate,
    Say,
    ScriptedParent,
    Think,
    parent_kind,
    parent_kinds_text,
    probe_model_endpoint,
)
from demo.agents import REVIEW_INPUT_WAIT, demo_agents, scripted_parent
from engine import DelegationPolicy, Engine, InputExpiry, InputRequiredMode, JournalEntry, Run
from web.config import (
    AgentEntry,
    AuthEntry,
    ConfigError,
    HostConfig,
    ParentEntry,
    ServerEntry,
    api_key_problem,
)
from web.logs import LOG_FORMATS, AccessLog, configure_logging

__all__ = [
    "ASKING_EXAMPLE",
    "BUILTIN_REMOTES",
    "REMOTE_POLICY",
    "REMOTE_TOKEN_ENV",
    "BuiltinRemote",
    "DemoError",
    "DemoOptions",
    "DemoPlan",
    "DemoStartError",
    "RemoteAgent",
    "demo_agents",
    "demo_main",
    "model_endpoint_for",
    "plan_demo",
    "run_demo",
    "run_plan",
    "scripted_parent",
]


def _describe(entry: JournalEntry) -> str:
    event = entry.event
    who = f"[{event.agent_key}]" if event.agent_key else "[parent]"
    status = event.status and (f"{event.status}: {event.text}" if event.text else event.status)
    if isinstance(event.result, dict) and "delegation_id" in event.result:
        status = f"{event.result.get('status')} ({event.result['delegation_id']})"
    detail = (
        event.delta
        or status
        or (event.error and f"{event.error.code}: {event.error.message}")
        or event.text
        or event.tool_name
        or (event.artifact and f"{event.artifact.name} -> {event.artifact.uri}")
        or (event.args and json.dumps(event.args))
        or ""
    )
    call = f" <{event.parent_tool_call_id}>" if event.parent_tool_call_id else ""
    return f"{entry.cursor:>4}  {event.kind:<26} {who:<11}{call} {detail}".rstrip()


async def _print_events(run: Run, out: TextIO, as_json: bool) -> None:
    async with run.events() as events:
        async for entry in events:
            if as_json:
                print(
                    json.dumps({"cursor": entry.cursor, "event": engine.to_jsonable(entry.event)}),
                    file=out,
                )
            else:
                print(_describe(entry), file=out)
            out.flush()


async def _demo(as_json: bool, fast: bool, out: TextIO) -> None:
    async with (
        Engine(demo_agents(pause=0 if fast else 0.05)) as eng,
        trio.open_nursery() as nursery,
        eng.open_run() as run,
    ):
        nursery.start_soon(_print_events, run, out, as_json)
        await scripted_parent(run)


def run_demo(
    *,
    as_json: bool = False,
    fast: bool = False,
    out: TextIO | None = None,
    log_format: str | None = None,
) -> int:
    """`demo --print`: one run's events on `out`; with `log_format` (`LOG_FORMATS`), the log
    lines of its start and end, and of each delegation's, on stderr too."""
    if log_format is not None:
        configure_logging(log_format, "INFO")
    trio.run(_demo, as_json, fast, out or sys.stdout)
    return 0


# -- the page with remote A2A subagents (`subagent-engine demo`) ----------------------------------

#: How long a remote agent may take to print its READY line.
READY_TIMEOUT: Final = 60.0
#: How long a stopped remote agent may take to exit before its process group is killed.
STOP_GRACE: Final = 10.0
#: `--remote`'s default: the built-in remotes; else the kind of the CLI served as the remote.
BUILTIN: Final = "builtin"
#: A prompt that makes the built-in review agent ask a question (`demo.agents.asks_for_a_question`).
ASKING_EXAMPLE: Final = "ask me which framework to review"
#: The variable that carries the remotes' bearer token into their environment (`--token-env`).
REMOTE_TOKEN_ENV: Final = "SUBAGENT_ENGINE_REMOTE_TOKEN"
#: Every remote's policy on the page: its questions wait for the viewer's answer, for
#: `REVIEW_INPUT_WAIT` s (then back to the parent as input_required), within a task that may
#: last that long and two more minutes.
REMOTE_POLICY: Final = DelegationPolicy(
    input_required=InputRequiredMode.SURFACE,
    input_wait_timeout=REVIEW_INPUT_WAIT,
    on_input_expiry=InputExpiry.RETURN,
    default_timeout=REVIEW_INPUT_WAIT + 120.0,
)

Step = Say | Think | Delegate | Ask | Answer


@attrs.frozen
class BuiltinRemote:
    """A built-in remote agent: an a2a-serve agent (`demo.remote`) whose scripted parent plays
    the script named like its key (`demo.scripts.SCRIPTS`), or its asking variant for a task
    that asks for a question."""

    key: str
    display_name: str
    description: str

    @property
    def script(self) -> tuple[Step, ...]:
        from demo.scripts import SCRIPTS

        return SCRIPTS[self.key]


#: The default remotes, under the keys the scripted parent's default script delegates to; each
#: is `python -m demo.remote --script <key>` (scripts in `demo.scripts`).
BUILTIN_REMOTES: Final[Mapping[str, BuiltinRemote]] = {
    "research": BuiltinRemote(
        key="research",
        display_name="Research Agent",
        description="Finds and summarizes sources (a scripted A2A agent, no model).",
    ),
    "review": BuiltinRemote(
        key="review",
        display_name="Review Agent",
        description="Reviews a plan and gives a verdict (a scripted A2A agent, no model).",
    ),
}


@attrs.frozen
class _Cli:
    binary: str
    label: str
    package: str


#: What the demo tells a user about each CLI parent kind.
_CLIS: Final = {
    CLAUDE_CODE: _Cli("claude", "Claude Code", "@anthropic-ai/claude-code"),
    CODEX: _Cli("codex", "Codex", "@openai/codex"),
}


@attrs.frozen(kw_only=True)
class DemoOptions:
    """What `subagent-engine demo` runs: its command-line options."""

    host: str = "127.0.0.1"
    port: int = 8080
    parent: str = SCRIPTED  # a parent kind (`adapters.parents.PARENT_KINDS`, or an alias)
    remote: str = BUILTIN  # builtin, or a CLI parent kind (codex, claude-code, or an alias)
    #: The model server's base URL, for every CLI in the demo: Claude Code gets it as
    #: ANTHROPIC_BASE_URL, Codex as an OpenAI Responses provider at `<URL>/v1`.
    model_endpoint: str | None = None
    model: str | None = None
    #: The variable holding the endpoint's API key (default: each CLI's own).
    api_key_env: str | None = None
    #: Where the `claude` and `codex` binaries are (default: PATH).
    binary_dir: str | None = None
    #: How log lines are written on stderr (`web.logs.LOG_FORMATS`: text, json).
    log_format: str = "text"
    #: One log line per HTTP request to the page.
    access_log: bool = False


@attrs.frozen
class RemoteAgent:
    """One remote A2A agent the demo starts: its registry key, who it is, its command."""

    key: str
    display_name: str
    description: str
    argv: tuple[str, ...]
    #: What runs, for the user (`a2a-serve --parent codex`).
    what: str


@attrs.frozen
class DemoPlan:
    """Everything `demo` decided before anything starts (see `plan_demo`)."""

    options: DemoOptions
    remotes: tuple[RemoteAgent, ...]
    parent: ParentEntry
    #: The scripted parent's script (when `parent.kind` is scripted).
    script: tuple[Step, ...] = ()
    #: Files the remotes read, path -> text: a CLI remote's `[parent]` settings.
    files: Mapping[str, str] = attrs.field(factory=dict)

    def host_config(self, card_urls: Mapping[str, str]) -> HostConfig:
        """The bundled server's configuration once the remotes listen at `card_urls`; each agent
        presents the remotes' token, read from `REMOTE_TOKEN_ENV` (see `agent_specs`)."""
        agents = tuple(
            AgentEntry(
                key=remote.key,
                protocol="a2a",
                settings={"card_url": card_urls[remote.key]},
                display_name=remote.display_name,
                description=remote.description,
                auth=AuthEntry(token_env=REMOTE_TOKEN_ENV),
                policy=REMOTE_POLICY,
            )
            for remote in self.remotes
        )
        server = ServerEntry(host=self.options.host, port=self.options.port)
        return HostConfig(
            source="subagent-engine demo", server=server, parent=self.parent, agents=agents
        )

    def parent_factory(self, config: HostConfig) -> Callable[[], Any]:
        """Each run's parent: the scripted parent with the plan's script, or the CLI of the
        configuration (`ConfigError` if it cannot be found)."""
        if self.parent.kind == SCRIPTED:
            script = self.script
            return lambda: ScriptedParent(script)
        return config.parent_factory()


class DemoError(Exception):
    """The options cannot run; each problem names the flag or variable to fix."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class DemoStartError(Exception):
    """A remote agent did not start."""


def model_endpoint_for(kind: str, url: str) -> str:
    """The endpoint a CLI parent gets from the demo's one `--model-endpoint` (a base URL, with
    or without `/v1`): Claude Code appends `/v1/messages` itself, Codex's provider wants `/v1`."""
    base = url.rstrip("/")
    root = base.removesuffix("/v1")
    return root if kind == CLAUDE_CODE else f"{root}/v1"


def _find_cli(
    flag: str, name: str, binary_dir: str | None, which: Callable[[str], str | None]
) -> tuple[str | None, str | None]:
    """(the CLI's path, None) or (None, the problem); `name` as the user spelled the kind."""
    cli = _CLIS[parent_kind(name)]
    if binary_dir is not None:
        path = Path(binary_dir) / cli.binary
        if path.is_file() and os.access(path, os.X_OK):
            return str(path.absolute()), None
        return None, f"{flag} {name}: no executable {cli.binary!r} in --binary-dir {binary_dir}"
    found = which(cli.binary)
    if found:
        return found, None
    return None, (
        f"{flag} {name}: the {cli.label} CLI {cli.binary!r} is not on PATH "
        f"(npm install -g {cli.package}, or pass --binary-dir DIR)"
    )


def _single_remote_script(remote: RemoteAgent) -> tuple[Step, ...]:
    return (
        Say(
            (
                "You asked: ",
                "{prompt}",
                f". I'll hand it to {remote.display_name}, ",
                "a remote A2A agent.",
            )
        ),
        Delegate(({"agent": remote.key, "objective": "{prompt}"},)),
        Answer(intro=f"Here is what {remote.display_name} answered:"),
    )


def _parent_toml(entry: ParentEntry) -> str:
    """A `[parent]` table for a2a-serve's `--config` (JSON strings are TOML basic strings)."""
    lines = ["[parent]"]
    for key in ("kind", "model_endpoint", "model", "api_key_env"):
        value = getattr(entry, key)
        if value is not None:
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def plan_demo(
    options: DemoOptions,
    *,
    workdir: str,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> DemoPlan:
    """Check the options and decide what runs; `DemoError` lists every problem at once.
    Nothing starts and nothing is written here (`workdir` only names the remotes' files)."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    if options.log_format not in LOG_FORMATS:
        problems.append(f"--log-format {options.log_format}: use one of {', '.join(LOG_FORMATS)}")
    chosen_parent = _kind_of(options.parent)
    if chosen_parent is None:
        problems.append(f"--parent {options.parent}: use one of {parent_kinds_text()}")
    chosen_remote = BUILTIN if options.remote == BUILTIN else _kind_of(options.remote)
    if chosen_remote not in (BUILTIN, *CLI_PARENT_KINDS):
        remotes_text = parent_kinds_text(CLI_PARENT_KINDS)
        problems.append(f"--remote {options.remote}: use one of {BUILTIN}, {remotes_text}")
    clis = [
        (flag, name)
        for flag, name, kind in (
            ("--parent", options.parent, chosen_parent),
            ("--remote", options.remote, chosen_remote),
        )
        if kind in CLI_PARENT_KINDS
    ]
    binaries: dict[str, str] = {}
    for flag, name in clis:
        found, problem = _find_cli(flag, name, options.binary_dir, which)
        if found:
            binaries[flag] = found
        if problem:
            problems.append(problem)
    if clis and not options.model_endpoint:
        who = " and ".join(f"{flag} {name}" for flag, name in clis)
        problems.append(
            f"{who} {'needs' if len(clis) == 1 else 'need'} a model endpoint: pass "
            f"--model-endpoint URL (and --model NAME, --api-key-env VAR if it needs them)"
        )
    if clis and options.model_endpoint:
        url = urlsplit(options.model_endpoint)
        if url.scheme not in ("http", "https") or not url.netloc:
            problems.append(
                f"--model-endpoint {options.model_endpoint}: not an http(s) URL "
                f"(like http://127.0.0.1:4000)"
            )
    if not clis:
        unused = [
            flag
            for flag, value in (
                ("--model-endpoint", options.model_endpoint),
                ("--model", options.model),
                ("--api-key-env", options.api_key_env),
                ("--binary-dir", options.binary_dir),
            )
            if value is not None
        ]
        if unused:
            kinds = "|".join(CLI_PARENT_KINDS)
            problems.append(f"{', '.join(unused)}: only for --parent {kinds} or --remote {kinds}")
    elif options.api_key_env:
        missing = api_key_problem(options.api_key_env, env)
        if missing is not None:
            problems.append(f"--api-key-env {options.api_key_env}: {missing}")
    if problems:
        raise DemoError(problems)
    assert chosen_parent is not None and chosen_remote is not None  # else a problem above

    def cli_parent(kind: str) -> ParentEntry:
        endpoint = model_endpoint_for(kind, options.model_endpoint or "")
        return ParentEntry(
            kind=kind, model_endpoint=endpoint, model=options.model, api_key_env=options.api_key_env
        )

    files: dict[str, str] = {}
    if chosen_remote == BUILTIN:
        remotes = tuple(
            RemoteAgent(
                key=remote.key,
                display_name=remote.display_name,
                description=remote.description,
                argv=(
                    *(python, "-m", "demo.remote"),
                    *("--script", remote.key, "--name", remote.display_name),
                    *("--description", remote.description),
                    *("--skill", f"{remote.key}={remote.description}"),
                    *("--host", "127.0.0.1", "--port", "0", "--watch-stdin"),
                    *("--token-env", REMOTE_TOKEN_ENV),
                    *("--log-format", options.log_format),
                ),
                what=f"a2a-serve --parent {SCRIPTED} --script {remote.key} (demo.remote)",
            )
            for remote in BUILTIN_REMOTES.values()
        )
    else:
        cli = _CLIS[chosen_remote]
        path = str(Path(workdir) / f"{options.remote}-remote.toml")
        files[path] = _parent_toml(cli_parent(chosen_remote))
        argv = (
            python, "-m", "cli", "a2a-serve",
            "--parent", chosen_remote,
            "--config", path,
            "--binary", binaries["--remote"],
            "--host", "127.0.0.1",
            "--port", "0",
            "--name", cli.label,
            "--watch-stdin",
            "--token-env", REMOTE_TOKEN_ENV,
        )  # fmt: skip
        remotes = (
            RemoteAgent(
                key=options.remote,
                display_name=cli.label,
                description=f"{cli.label}, a remote A2A agent served by subagent-engine a2a-serve.",
                argv=argv,
                what=f"a2a-serve --parent {chosen_remote}",
            ),
        )
    if chosen_parent == SCRIPTED:
        parent = ParentEntry()
        script = DEFAULT_SCRIPT if chosen_remote == BUILTIN else _single_remote_script(remotes[0])
    else:
        parent = attrs.evolve(cli_parent(chosen_parent), binary=binaries["--parent"])
        script = ()
    return DemoPlan(options=options, remotes=remotes, parent=parent, script=script, files=files)


def _kind_of(name: str) -> str | None:
    """The parent kind `name` spells, or None."""
    try:
        return parent_kind(name)
    except ValueError:
        return None


@attrs.frozen
class _Running:
    remote: RemoteAgent
    pid: int
    port: int

    @property
    def card_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/agent-card.json"


async def _ready_port(remote: RemoteAgent, proc: trio.Process) -> int:
    """The port of the remote's `READY <port>` line; `DemoStartError` if it never comes."""
    assert proc.stdout is not None
    who = f"the {remote.key} agent ({remote.what})"
    buffer = b""
    with trio.move_on_after(READY_TIMEOUT):
        while b"\n" not in buffer:
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                code = await proc.wait()
                raise DemoStartError(f"{who} exited before it was ready (exit code {code})")
            buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
        found = re.fullmatch(r"READY (\d+)", line)
        if found is None:
            raise DemoStartError(f"{who} printed {line!r} instead of its READY line")
        return int(found.group(1))
    raise DemoStartError(f"{who} was not ready within {READY_TIMEOUT:g} s")


@asynccontextmanager
async def _running_remotes(
    remotes: Sequence[RemoteAgent], token: str
) -> AsyncIterator[list[_Running]]:
    """Start every remote (each in its own process group, `token` in its environment as
    `REMOTE_TOKEN_ENV`), wait for their READY lines; on exit, even a cancelled one, stop them
    all (see `_stop_remotes`)."""
    procs: list[trio.Process] = []
    env = {**os.environ, REMOTE_TOKEN_ENV: token}
    try:
        for remote in remotes:
            proc = await trio.lowlevel.open_process(
                list(remote.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
            procs.append(proc)
        running = [
            _Running(remote, proc.pid, await _ready_port(remote, proc))
            for remote, proc in zip(remotes, procs, strict=True)
        ]
        yield running
    finally:
        with trio.CancelScope(shield=True):
            await _stop_remotes(procs, STOP_GRACE)


async def _stop_remotes(procs: Sequence[trio.Process], grace: float) -> None:
    """Close their stdin and SIGTERM their groups, wait up to `grace`, SIGKILL the groups of
    those still running. A group is only signalled while its leader is not reaped."""
    for proc in procs:
        if proc.stdin is not None:
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await proc.stdin.aclose()
        if proc.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
    with trio.move_on_after(grace):
        for proc in procs:
            await proc.wait()
    for proc in procs:
        if proc.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()


def _announce(
    plan: DemoPlan, url: str, mcp_url: str, running: Sequence[_Running], out: TextIO
) -> None:
    keys = " and ".join(r.remote.key for r in running)
    if plan.parent.kind == SCRIPTED:
        parent = f"the scripted parent (no model), delegating to {keys} over MCP"
    else:
        parent = f"{plan.parent.kind} ({plan.parent.binary}), offered {keys} over MCP"
    print(f"subagent-engine demo on {url}", file=out)
    print(f"  parent: {parent} ({mcp_url})", file=out)
    for r in running:
        print(
            f"  {r.remote.key}: a remote A2A agent, {r.remote.what} (pid {r.pid}): {r.card_url}",
            file=out,
        )
    if any(r.remote.key in BUILTIN_REMOTES for r in running):
        print(f"  try: {ASKING_EXAMPLE!r} (the review agent asks you a question first)", file=out)
    print(
        "Open the URL, type a prompt and press Run. Ctrl-C stops the page and the agents.", file=out
    )
    out.flush()


async def _serve_demo(plan: DemoPlan, out: TextIO, token: str) -> int:
    """Start the remotes (`token`: the one they require), serve the page until SIGINT/SIGTERM,
    stop everything. The exit status: 0, or `force_exit`'s after a second signal."""
    from web.page import bundled_page
    from web.server import (
        create_app,
        default_encoder_factory,
        force_exit,
        freeze_startup_objects,
        open_host,
        serve_app,
    )

    serving = False
    forced = 0
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            everything = trio.CancelScope()

            async def watch_signals() -> None:
                nonlocal forced
                async for signum in signals:
                    if not serving:
                        everything.cancel()  # still starting: nothing to drain
                    elif stop.is_set():
                        forced = force_exit(everything, signum, out)  # a second signal
                    stop.set()

            nursery.start_soon(watch_signals)
            with everything:
                async with _running_remotes(plan.remotes, token) as running:
                    try:
                        config = plan.host_config({r.remote.key: r.card_url for r in running})
                        parent = plan.parent_factory(config)
                        agents = config.agent_specs({REMOTE_TOKEN_ENV: token})
                    except ConfigError as exc:
                        raise DemoStartError(str(exc)) from None
                    async with open_host(config, agents, parent) as (hosted, mcp):
                        app: Any = create_app(
                            hosted, config, default_encoder_factory(), page=bundled_page()
                        )
                        if plan.options.access_log:
                            app = AccessLog(app)
                        async with serve_app(
                            app, host=plan.options.host, port=plan.options.port
                        ) as url:
                            _announce(plan, url, mcp.base_url, running, out)
                            serving = True
                            freeze_startup_objects()
                            await stop.wait()
                            grace = config.server.shutdown_grace_seconds
                            print(
                                f"stopping: ending every run (at most {grace:g} s; a second "
                                "Ctrl-C stops at once), then the remote agents",
                                file=out,
                                flush=True,
                            )
                            await hosted.drain(grace)
            nursery.cancel_scope.cancel()
    return forced


def demo_main(options: DemoOptions, *, out: TextIO | None = None) -> int:
    """`subagent-engine demo`: 0 after Ctrl-C or SIGTERM, 2 for options that cannot run, 1 if
    it could not start (a remote agent, or the page's port is taken)."""
    with tempfile.TemporaryDirectory(prefix="subagent-engine-demo-") as workdir:
        try:
            plan = plan_demo(options, workdir=workdir)
        except DemoError as exc:
            for problem in exc.problems:
                print(f"subagent-engine demo: {problem}", file=sys.stderr)
            return 2
        if options.model_endpoint is not None:  # a CLI's: checked before anything starts
            unreachable = probe_model_endpoint(options.model_endpoint)
            if unreachable is not None:
                print(f"subagent-engine demo: --model-endpoint: {unreachable}", file=sys.stderr)
                return 2
        for path, text in plan.files.items():
            Path(path).write_text(text, encoding="utf-8")
        token = _remote_token()
        key = os.environ.get(options.api_key_env) if options.api_key_env else None
        configure_logging(options.log_format, "INFO", secrets=[token, *filter(None, [key])])
        return run_plan(plan, out or sys.stdout, token=token)


def _remote_token() -> str:
    # The remotes' token lives in this process's memory and their environments only: not in
    # os.environ, so a CLI parent started from here never sees it.
    return secrets.token_urlsafe(32)


def run_plan(plan: DemoPlan, out: TextIO, *, token: str | None = None) -> int:
    """Run a checked plan until Ctrl-C or SIGTERM (0); 1 with the reason if it cannot start.
    `token`: the one the remotes require (default: a new one)."""
    try:
        status = trio.run(_serve_demo, plan, out, token or _remote_token())
    except Exception as exc:
        problem = _start_problem(exc, plan.options)
        if problem is None:
            raise
        print(f"subagent-engine demo: {problem}", file=sys.stderr)
        return 1
    return status


def _start_problem(exc: BaseException, options: DemoOptions) -> str | None:
    """Why the demo could not start, if `exc` (or an exception group's leaf) says so."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            problem = _start_problem(inner, options)
            if problem is not None:
                return problem
        return None
    if isinstance(exc, DemoStartError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"{options.host}:{options.port} is in use: pass --port P (0: any free port)"
    return None
