"""Driving a parent agent's CLI process (Claude Code, Codex): one way for both.

This module owns the I/O of a CLI parent: starting the binary (stdin from /dev/null, its own
process group, a minimal environment), reading its stdout line by line into a CLI-specific
sans-IO parser and publishing what the parser makes of each line as the run's parent events,
keeping the tail of its stderr, stopping it, and turning how it ended into the run's terminal.
It knows no output format: `adapters.parents._claude_code` and `_codex` own those (their parsers
take a line and give `ParentEvent`s, and say at the end what the output amounted to in a
`Verdict`). The small value types both parsers share live here too; they do no I/O.

Stopping. Cancelling `drive_parent()` (that is, the parent agent's `run()`) stops the CLI: SIGINT
to its process group (both CLIs then tell the MCP server, or at least close their session), SIGTERM
after `interrupt_grace` seconds, SIGKILL after `terminate_grace` more, in a shielded scope. Then
the run is cancelled, which cancels every delegation still running: the CLIs do not always tell the
MCP endpoint that they gave up a call (after SIGTERM neither Claude Code 2.1.332 nor Codex 0.171.0
sends anything), so the engine never relies on them for it. A CLI that exits on its own has
whatever it left behind in its process group killed (the group is signalled while the CLI is still
unreaped, so its id cannot have been reused).

Failure. A binary that cannot be started, a non-zero exit, an output that never reached its
normal end (garbage, a truncated stream), or a failure the output itself reports (an error result,
a failed turn, the run's MCP server not connected) fails the run with a message that ends with the
CLI's stderr tail, cancels its delegations, and raises `ParentProcessError`. The failure is typed
by its error code: `run_deadline` when the CLI was still running at `CliConfig.run_deadline`
(it is stopped as on cancellation), `model_unavailable` when the CLI was retrying its model
endpoint when it ended (or ran out of the retries `CliConfig.max_retries` allows), else
`internal_error`.

Model silence. A CLI whose model endpoint accepts connections and never answers may print nothing
and ignore its own request timeouts (Codex 0.171.0 does): without a run deadline it would never
end. So the driver watches the CLI's stdout (`SilenceWatch`): when no line came for
`CliConfig.silence_limit()` seconds while no tool call was in flight, the CLI can only be waiting
on its model; it is stopped and the run fails with `model_unavailable`, saying how long the model
was silent. Any stdout line restarts the clock (stderr does not: a CLI may log there while it
waits); a tool call in flight pauses it: one the output started and has not given a result for,
or a delegation of the run still running (the run's MCP endpoint serving a call the CLI made).

Model endpoint trouble. Both CLIs retry a model request that fails; what they print while they
retry becomes a `parent.status` custom event (`STATUS_EVENT`: `{"text", "source", "attempt",
"max_retries"}`), the run's status line for its viewers. `probe_model_endpoint` is the check a
command makes before it listens: a TCP connect and one small HTTP request, both bounded.

Credentials (the run's MCP token, the model API key) are redacted from every line, event and
message this module produces, by the engine's one `Redactor` (the same rules as for remote
agents' text).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Final, NamedTuple, Protocol

import attrs
import httpx
import trio

from engine import ErrorCode, Kind, Redactor, Run, RunEndpoint, Status

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "STATUS_EVENT",
    "CliParent",
    "JsonLinesParser",
    "TOKEN_ENV",
    "CliConfig",
    "LineSplitter",
    "OutputParser",
    "ParentEvent",
    "ParentOutcome",
    "ParentProcess",
    "ParentProcessError",
    "SilenceWatch",
    "Verdict",
    "child_environment",
    "clip",
    "drive_parent",
    "probe_model_endpoint",
    "raw_event",
]

log: Final = logging.getLogger(__name__)

#: The environment variable that carries the run's MCP bearer token to the CLI. The CLI's MCP
#: configuration names it (Claude Code expands `${VAR}` in `--mcp-config` headers, Codex reads
#: `bearer_token_env_var`), so the token is never on a command line that `ps` shows.
TOKEN_ENV: Final = "SUBAGENT_ENGINE_MCP_TOKEN"

#: What a CLI inherits from the host's environment: enough to run (paths, locale, proxies, CA
#: certificates), none of the host's other credentials (a CLI agent runs model-directed shell
#: commands). `LC_*` variables are inherited too. More with `CliConfig.inherit_env` / `env`.
DEFAULT_INHERITED_ENV: Final = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
)

#: The name of the custom event that carries a CLI parent's status (a model request it retries).
STATUS_EVENT: Final = Kind.PARENT_STATUS_NAME

#: How much of a line a raw/custom event keeps, and of the stderr tail a failure message shows.
RAW_CLIP_CHARS: Final = 2000
MESSAGE_TAIL_CHARS: Final = 2000
#: After the CLI exited: how long its output pipes may take to reach end-of-file.
DRAIN_TIMEOUT: Final = 5.0
#: After stdout ended: how long the CLI may take to exit before it is stopped.
EXIT_AFTER_EOF_TIMEOUT: Final = 10.0
#: The default model-silence limit's margin over the CLI's own retry bounds (seconds): start-up,
#: MCP connection, backoff between retries.
MODEL_SILENCE_MARGIN: Final = 30.0
#: While a tool call is in flight, how often the silence watch looks whether it still is.
BUSY_POLL_SECONDS: Final = 5.0


# -- what parsers produce (sans-IO value types) ---------------------------------------------


class ParentEvent(NamedTuple):
    """One parent event a parser made of a line: `run.emit(kind, **fields)`."""

    kind: str
    fields: dict[str, Any]


@attrs.frozen(kw_only=True)
class Verdict:
    """What a CLI's whole output amounted to, as its parser judges it at the end.

    `ok` only when the output reached its normal end (Claude Code's `result` line, Codex's
    `turn.completed`) and reported no error. `error` says why not, in the CLI's own words.
    """

    ok: bool
    text: str | None = None
    error: str | None = None
    usage: Mapping[str, Any] | None = None
    session_id: str | None = None


class OutputParser(Protocol):
    """A CLI's sans-IO output parser: lines in, parent events out; never raises on bad input."""

    @property
    def prefix(self) -> str:
        """The name prefix of its custom events (`claude`, `codex`)."""
        ...

    def feed(self, line: str) -> list[ParentEvent]:
        """The parent events of one stdout line (without its newline)."""
        ...

    def close(self) -> list[ParentEvent]:
        """The output ended: close whatever is still open (messages, tool calls)."""
        ...

    @property
    def fatal(self) -> str | None:
        """A failure the output reported that should stop the CLI now, else None."""
        ...

    @property
    def model_failing(self) -> bool:
        """Whether the CLI's last word on its model endpoint was a retry (no answer since)."""
        ...

    def verdict(self) -> Verdict: ...


def clip(text: str, limit: int = RAW_CLIP_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def raw_event(prefix: str, reason: str, line: str, **more: Any) -> ParentEvent:
    """A line (or part of one) the parser could not map, kept as a `<prefix>.raw` custom event."""
    return ParentEvent(
        Kind.PARENT_CUSTOM,
        {"name": f"{prefix}.raw", "raw": {"reason": reason, "line": clip(line), **more}},
    )


class JsonLinesParser:
    """What both CLI parsers share: one JSON object per stdout line. Blank lines are skipped; a
    line that is not JSON, or not an object, becomes a `<prefix>.raw` event; `_object` maps the
    rest (subclasses: `ClaudeStreamParser`, `CodexJsonlParser`). `lines` and `raw_lines` count
    what was seen and what could not be mapped."""

    prefix = "cli"

    def __init__(self, *, max_retries: int | None = None) -> None:
        self.lines = 0
        self.raw_lines = 0
        #: Model request retries the CLI reported since its model last answered.
        self.retries = 0
        #: Retries allowed before the parser calls the run `fatal` (None: the CLI's own bound).
        self.max_retries = max_retries
        self.retry_failure: str | None = None

    @property
    def model_failing(self) -> bool:
        return self.retries > 0

    def _retrying(
        self, text: str, *, attempt: int | None = None, max_retries: int | None = None
    ) -> ParentEvent:
        """The CLI retries a model request: count it, and say so as the run's status."""
        self.retries += 1
        limit = self.max_retries
        if limit is not None and self.retries > limit and self.retry_failure is None:
            self.retry_failure = (
                f"the model endpoint did not answer after {limit} "
                f"{'retry' if limit == 1 else 'retries'} ({clip(text, 500)})"
            )
        status = {
            "text": clip(text, 500),
            "source": self.prefix,
            "attempt": attempt if attempt is not None else self.retries,
            "max_retries": max_retries if max_retries is not None else limit,
        }
        return ParentEvent(Kind.PARENT_CUSTOM, {"name": STATUS_EVENT, "raw": status})

    def _answered(self) -> None:
        """The model answered: the retries so far are over."""
        self.retries = 0

    def feed(self, line: str) -> list[ParentEvent]:
        line = line.strip()
        if not line:
            return []
        self.lines += 1
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return self._raw("bad_json", line)
        if not isinstance(obj, dict):
            return self._raw("not_an_object", line)
        return self._object(obj, line)

    def _object(self, obj: dict[str, Any], line: str) -> list[ParentEvent]:
        raise NotImplementedError

    def _raw(self, reason: str, line: str, **more: Any) -> list[ParentEvent]:
        self.raw_lines += 1
        return [raw_event(self.prefix, reason, line, **more)]

    def _custom(self, name: str, raw: dict[str, Any]) -> ParentEvent:
        return ParentEvent(Kind.PARENT_CUSTOM, {"name": f"{self.prefix}.{name}", "raw": raw})


class LineSplitter:
    """Bytes in, lines out (without `\\n` or a trailing `\\r`), each at most `max_line_bytes`.

    A longer line is cut: its first `max_line_bytes` are given as a line of their own (a parser
    sees a truncated line, which is bad JSON) and the rest up to the next newline is dropped.
    """

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self.truncated_lines = 0
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._skipping = False

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        out: list[bytes] = []
        buffer = self._buffer
        buffer += data
        while True:
            newline = buffer.find(b"\n", self._scanned)
            if newline < 0:
                self._scanned = len(buffer)
                if len(buffer) > self.max_line_bytes:
                    if not self._skipping:
                        # Cut as a line that had its newline is cut: a trailing `\r` goes too.
                        out.append(bytes(buffer[: self.max_line_bytes]).removesuffix(b"\r"))
                        self.truncated_lines += 1
                        self._skipping = True
                    buffer.clear()
                    self._scanned = 0
                return out
            if self._skipping:
                self._skipping = False
            else:
                line = bytes(buffer[:newline])
                if len(line) > self.max_line_bytes:
                    line = line[: self.max_line_bytes]
                    self.truncated_lines += 1
                out.append(line.removesuffix(b"\r"))
            del buffer[: newline + 1]
            self._scanned = 0

    def close(self) -> list[bytes]:
        """End of input: the unterminated last line, if there is one."""
        rest = b"" if self._skipping else bytes(self._buffer).removesuffix(b"\r")
        self._buffer.clear()
        self._scanned = 0
        self._skipping = False
        return [rest] if rest.strip() else []


# -- configuration ------------------------------------------------------------------------


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, not {value!r}")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number > 0, not {value!r}")


@attrs.frozen(kw_only=True)
class CliConfig:
    """What the host configures about a CLI parent (`ClaudeCodeConfig`, `CodexConfig`).

    - `binary`: the executable (a path, or a name looked up on PATH).
    - `base_url`, `model`: the model endpoint and model name (None: the CLI's own default).
    - `api_key_env`: the name of the host environment variable that holds the model API key
      (its value is handed to the CLI; the name, never the value, is configuration).
    - `extra_args`: more command-line arguments, put before the prompt.
    - `env`: more environment variables for the CLI; `inherit_env`: host variables it inherits.
    - `workdir`: the CLI's working directory (None: an empty per-run temporary folder).
    - `tool_timeout`: seconds the CLI waits for one `delegate_to_agent` call.
    - `interrupt_grace`, `terminate_grace`, `kill_grace`: stopping waits this long after SIGINT,
      SIGTERM and SIGKILL for the CLI to exit.
    - `max_retries`: how often the CLI retries a model request that failed (handed to the CLI's
      own setting; a CLI that retries on regardless is stopped after that many).
    - `request_timeout`: seconds one model request may go without an answer.
    - `run_deadline`: seconds the whole run may take (None: no deadline); past it the CLI is
      stopped and the run fails with `run_deadline`.
    - `model_silence`: seconds the CLI may print nothing while no tool call is in flight before
      it is stopped and the run fails with `model_unavailable` (see the module docs). None, the
      default: `(max_retries + 1) * request_timeout + MODEL_SILENCE_MARGIN`; 0: never.
    """

    binary: str
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    extra_args: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    env: Mapping[str, str] = attrs.field(factory=dict)
    inherit_env: tuple[str, ...] = attrs.field(default=DEFAULT_INHERITED_ENV, converter=tuple)
    workdir: str | None = None
    tool_timeout: float = attrs.field(default=3600.0, validator=_positive)
    interrupt_grace: float = attrs.field(default=3.0, validator=_non_negative)
    terminate_grace: float = attrs.field(default=3.0, validator=_non_negative)
    kill_grace: float = attrs.field(default=5.0, validator=_non_negative)
    max_retries: int = attrs.field(
        default=2, validator=[attrs.validators.instance_of(int), _non_negative]
    )
    request_timeout: float = attrs.field(default=120.0, validator=_positive)
    run_deadline: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive)
    )
    model_silence: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_non_negative)
    )
    stderr_tail_bytes: int = 8192
    max_line_bytes: int = 16 * 1024 * 1024

    def silence_limit(self) -> float | None:
        """The model-silence limit in seconds (`model_silence` or its default), None if off."""
        if self.model_silence is None:
            return (self.max_retries + 1) * self.request_timeout + MODEL_SILENCE_MARGIN
        return self.model_silence or None


def child_environment(config: CliConfig, extra: Mapping[str, str]) -> dict[str, str]:
    """The CLI's environment: the inherited host variables, `config.env`, then `extra`."""
    host = os.environ
    env = {name: host[name] for name in config.inherit_env if name in host}
    env.update({name: value for name, value in host.items() if name.startswith("LC_")})
    env.update(config.env)
    env.update(extra)
    return env


# -- the process ----------------------------------------------------------------------------


class ParentProcessError(Exception):
    """A CLI parent failed: not startable, a non-zero exit, or an output that says it failed.

    `stderr_tail` is the end of what the CLI wrote to stderr (credentials blanked).
    """

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        stderr_tail: str = "",
        code: str = ErrorCode.INTERNAL_ERROR,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        #: The run's error code (`run_deadline`, `model_unavailable`, `internal_error`).
        self.code = code


@attrs.frozen(kw_only=True)
class ParentOutcome:
    """How a CLI parent's run ended well: its final text, usage and session/thread id."""

    text: str | None
    usage: Mapping[str, Any] | None
    session_id: str | None
    exit_code: int


async def _wait_exited(pid: int) -> None:
    """Return once our child `pid` has exited, without reaping it (so its id stays ours)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            os.close(fd)
        return
    while True:  # no pidfd (old kernel): poll without reaping
        try:
            # WNOHANG: never blocks.
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:  # noqa: ASYNC222
                return
        except ChildProcessError:
            return
        await trio.sleep(0.05)


LineHandler = Callable[[str], Awaitable[None]]


class ParentProcess:
    """One running CLI: its process group, its output pumps, how it is stopped.

    `run(on_line)` starts nothing: the process is started by `start()`. `run` pumps stdout lines
    to `on_line` and stderr into `stderr_tail` until the CLI exited and its pipes are drained,
    then returns the exit code. Cancelling `run` stops the CLI (SIGINT, SIGTERM, SIGKILL with the
    configured graces, shielded) before the cancellation propagates; `request_stop()` does the
    same without cancelling, and `run` returns when the CLI is gone.
    """

    def __init__(self, process: trio.Process, config: CliConfig) -> None:
        self._process = process
        self.config = config
        self.pid = process.pid
        self.exited = trio.Event()
        self.signals_sent: list[int] = []
        self._reaped = False
        self._swept = False
        self._tail = bytearray()
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._stdout_done = trio.Event()
        self._stderr_done = trio.Event()

    @classmethod
    async def start(
        cls, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, config: CliConfig
    ) -> ParentProcess:
        """Start the CLI in its own process group with stdin from /dev/null (OSError if the
        binary cannot be started)."""
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        return cls(process, config)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._reaped else None

    def stderr_tail(self) -> str:
        return self._tail.decode("utf-8", errors="replace")

    def signal(self, signum: int) -> None:
        """Signal the CLI's whole process group (never after the CLI was reaped)."""
        if self._reaped:
            return
        self.signals_sent.append(signum)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def request_stop(self) -> None:
        """Stop the CLI (SIGINT, then SIGTERM, then SIGKILL) while `run` keeps pumping."""
        if self._nursery is not None and not self._stopping and not self.exited.is_set():
            self._stopping = True
            self._nursery.start_soon(self._escalate)

    async def run(self, on_line: LineHandler) -> int:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watch_exit)
                nursery.start_soon(self._pump_stderr)
                nursery.start_soon(self._pump_stdout, on_line)
                await self.exited.wait()
                self._sweep()
                with trio.move_on_after(DRAIN_TIMEOUT):
                    await self._stdout_done.wait()
                    await self._stderr_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self.stop()
        code = self._process.returncode
        return code if code is not None else -1

    async def stop(self) -> None:
        """Stop the CLI if it still runs, kill what is left of its group, reap it, close the
        pipes. Idempotent. Call it shielded: it waits up to the three graces."""
        if not self.exited.is_set():
            self._stopping = True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_exit)
                await self._escalate()
                nursery.cancel_scope.cancel()
        if self.exited.is_set() and not self._reaped:
            self._sweep()
            await self._process.wait()
            self._reaped = True
        elif not self._reaped:
            log.error("CLI process %d did not exit after SIGKILL; giving up on it", self.pid)
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                with suppress(trio.ClosedResourceError, OSError):
                    await stream.aclose()

    def _sweep(self) -> None:
        """Kill whatever the exited CLI left running in its group (it may hold our pipes)."""
        if not self._swept:
            self._swept = True
            self.signal(signal.SIGKILL)

    async def _escalate(self) -> None:
        config = self.config
        for signum, grace in (
            (signal.SIGINT, config.interrupt_grace),
            (signal.SIGTERM, config.terminate_grace),
            (signal.SIGKILL, config.kill_grace),
        ):
            if self.exited.is_set():
                return
            self.signal(signum)
            with trio.move_on_after(grace):
                await self.exited.wait()

    async def _watch_exit(self) -> None:
        await _wait_exited(self.pid)
        self.exited.set()

    async def _pump_stdout(self, on_line: LineHandler) -> None:
        stream = self._process.stdout
        assert stream is not None
        splitter = LineSplitter(self.config.max_line_bytes)
        try:
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    chunk = b""
                lines = splitter.feed(chunk) if chunk else splitter.close()
                for line in lines:
                    await on_line(line.decode("utf-8", errors="replace"))
                if not chunk:
                    break
        finally:
            self._stdout_done.set()
        with trio.move_on_after(EXIT_AFTER_EOF_TIMEOUT):
            await self.exited.wait()
        if not self.exited.is_set():
            log.warning("CLI process %d closed its stdout but did not exit; stopping it", self.pid)
            self.request_stop()

    async def _pump_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        limit = max(self.config.stderr_tail_bytes, 1)
        try:
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return
                if not chunk:
                    return
                self._tail += chunk
                if len(self._tail) > limit:
                    del self._tail[: len(self._tail) - limit]
        finally:
            self._stderr_done.set()


# -- the model-silence watchdog -----------------------------------------------------------------


class SilenceWatch:
    """How long a CLI has been silent with no tool call in flight (see the module docs).

    `heard(events)` for every stdout line (with the parent events the parser made of it): it
    restarts the clock and tracks the tool calls the output started (`tool_call.start`) and has
    not given a result for (`tool_call.result`). `busy_elsewhere()` says whether a call is in
    flight that the output does not show (the run's running delegations). `wait_silent()`
    returns the seconds of silence once `limit` seconds passed with no line while nothing was in
    flight; time in flight does not count (a delegation is looked at every `BUSY_POLL_SECONDS`).
    """

    def __init__(self, limit: float, *, busy_elsewhere: Callable[[], bool] = lambda: False) -> None:
        if not (limit > 0 and math.isfinite(limit)):
            raise ValueError(f"the silence limit must be a finite number > 0, not {limit!r}")
        self.limit = limit
        self._busy_elsewhere = busy_elsewhere
        self._open_calls: set[str] = set()
        self._quiet_since = trio.current_time()
        self._heard = trio.Event()

    @property
    def open_calls(self) -> frozenset[str]:
        return frozenset(self._open_calls)

    def heard(self, events: Iterable[ParentEvent] = ()) -> None:
        self._quiet_since = trio.current_time()
        self._heard.set()
        for kind, fields in events:
            call_id = fields.get("tool_call_id")
            if not isinstance(call_id, str):
                continue
            if kind == Kind.PARENT_TOOL_CALL_START:
                self._open_calls.add(call_id)
            elif kind == Kind.PARENT_TOOL_CALL_RESULT:
                self._open_calls.discard(call_id)

    def busy(self) -> bool:
        return bool(self._open_calls) or self._busy_elsewhere()

    async def wait_silent(self) -> float:
        while True:
            now = trio.current_time()
            if self._open_calls:  # until a line closes them (which restarts the clock)
                self._heard = trio.Event()
                await self._heard.wait()
                continue
            if self._busy_elsewhere():
                self._quiet_since = now
                await trio.sleep(min(self.limit, BUSY_POLL_SECONDS))
                continue
            quiet = now - self._quiet_since
            if quiet >= self.limit:
                return quiet
            await trio.sleep(self.limit - quiet)


def delegations_running(run: Run) -> Callable[[], bool]:
    """Whether `run` has a delegation still running (a call open on its MCP endpoint)."""
    return lambda: any(result.status == Status.RUNNING for result in run.delegations())


# -- a CLI parent's whole life in a run ---------------------------------------------------------


Publisher = Callable[[Run, list[ParentEvent]], Awaitable[None]]


async def publish_events(run: Run, events: list[ParentEvent]) -> None:
    """The default publisher: each event as one of the run's parent payloads."""
    for kind, fields in events:
        await run.emit(kind, **fields)


async def drive_parent(
    run: Run,
    *,
    label: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    config: CliConfig,
    parser: OutputParser,
    secrets: Iterable[str] = (),
    publish: Publisher = publish_events,
    on_process: Callable[[ParentProcess], None] | None = None,
) -> ParentOutcome:
    """Run one CLI parent to its end in `run` and end the run with it.

    Every stdout line goes through `parser` and `publish`; when the CLI ended well the run
    finishes with the CLI's final text and the outcome is returned. Otherwise the run fails
    (its delegations cancelled) and `ParentProcessError` is raised. Cancellation stops the CLI
    (see the module docs), cancels the run, and propagates.
    """
    redactor = Redactor(secrets)
    try:
        process = await ParentProcess.start(argv, env=env, cwd=cwd, config=config)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        message = f"{label} could not be started ({config.binary!r}): {reason}."
        await run.fail(message)
        raise ParentProcessError(message) from exc
    if on_process is not None:
        on_process(process)
    parser_errors = 0
    silence_limit = config.silence_limit()
    silence = (
        SilenceWatch(silence_limit, busy_elsewhere=delegations_running(run))
        if silence_limit is not None
        else None
    )

    async def on_line(line: str) -> None:
        nonlocal parser_errors
        line = redactor.text(line)
        try:
            events = parser.feed(line)
        except Exception as exc:  # a parser bug must not end the run; fuzzing hunts these
            parser_errors += 1
            log.exception("%s output parser failed on a line", label)
            events = [raw_event(parser.prefix, "parser_error", line, error=repr(exc))]
        if silence is not None:
            silence.heard(events)
        if events:
            await publish(run, events)
        if parser.fatal is not None:
            process.request_stop()

    # Why the driver stopped the CLI, the first reason only: "deadline" or "silence".
    stopped_for: str | None = None
    silent_for = 0.0

    def stop(reason: str) -> None:
        nonlocal stopped_for
        if stopped_for is None and parser.fatal is None:
            stopped_for = reason
            process.request_stop()

    async def watch_deadline(deadline: float) -> None:
        await trio.sleep(deadline)
        stop("deadline")

    async def watch_silence(watch: SilenceWatch) -> None:
        nonlocal silent_for
        silent_for = await watch.wait_silent()
        stop("silence")

    try:
        async with trio.open_nursery() as nursery:
            if config.run_deadline is not None:
                nursery.start_soon(watch_deadline, config.run_deadline)
            if silence is not None:
                nursery.start_soon(watch_silence, silence)
            exit_code = await process.run(on_line)
            nursery.cancel_scope.cancel()
    except BaseException:
        if trio.current_effective_deadline() == -math.inf:  # cancelled: the CLI was stopped
            run.cancel(f"The parent agent ({label}) was stopped.")
        raise
    closing = parser.close()
    if closing:
        await publish(run, closing)
    verdict = parser.verdict()
    tail = redactor.text(process.stderr_tail()).strip()
    error = parser.fatal
    code = ErrorCode.MODEL_UNAVAILABLE if parser.model_failing else ErrorCode.INTERNAL_ERROR
    if stopped_for == "silence":
        error = (
            f"{label} was stopped after its model was silent for {round(silent_for, 1):g} s "
            "(no output and no tool call in flight)"
        )
        code = ErrorCode.MODEL_UNAVAILABLE
    if stopped_for == "deadline":
        assert config.run_deadline is not None
        error = f"{label} was stopped at the run deadline ({config.run_deadline:g} s)"
        if parser.model_failing:
            error += " while it was retrying its model endpoint"
        code = ErrorCode.RUN_DEADLINE
    if error is None and exit_code != 0:
        error = f"{label} exited with {_describe_exit(exit_code)}"
        if verdict.error:
            error += f": {verdict.error}"
    if error is None and not verdict.ok:
        error = verdict.error or f"{label} ended without a result"
    if error is not None:
        message = redactor.text(error).rstrip(".") + "."
        if tail:
            message += f"\n{label} stderr (last lines):\n{tail[-MESSAGE_TAIL_CHARS:]}"
        await run.fail(message, code)
        raise ParentProcessError(message, exit_code=exit_code, stderr_tail=tail, code=code)
    text = redactor.text(verdict.text) if verdict.text is not None else None
    await run.finish(text)
    return ParentOutcome(
        text=text, usage=verdict.usage, session_id=verdict.session_id, exit_code=exit_code
    )


def probe_model_endpoint(url: str, *, timeout: float = 5.0) -> str | None:
    """Why the model endpoint `url` cannot serve a CLI parent now, or None if it answers.

    A TCP connect and one GET of `url`, each bounded by `timeout` seconds: any HTTP answer (a
    404 too) means something listens and speaks HTTP; a refused or timed-out connection, or one
    that accepts and never answers, is the problem. Blocking: call it before the event loop."""
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            client.get(url)
    except httpx.TimeoutException:
        return f"the model endpoint {url} did not answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        return f"the model endpoint {url} cannot be reached ({clip(reason, 200)})"
    return None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class CliParent:
    """What the CLI parents share: their config, the process of the last `run()` (its pid and
    the signals it was sent, once started) and the run's MCP endpoint they hand the CLI."""

    name = "cli"
    label = "The CLI"

    def __init__(self, config: Any) -> None:
        self.config = config
        self.process: ParentProcess | None = None

    def _started(self, process: ParentProcess) -> None:
        self.process = process

    def _endpoint(self, run: Run) -> RunEndpoint:
        endpoint = run.endpoint
        if endpoint is None:
            raise RuntimeError(
                f"{self.label} calls delegate_to_agent over MCP: open the run on an Engine "
                "with an endpoint provider (adapters.mcp.DelegationEndpoint)"
            )
        return endpoint
