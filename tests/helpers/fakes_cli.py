"""A fake agent CLI for the CLI-parent tests (tests only): plays a JSON script, logs what it saw.

    python -m tests.helpers.fakes_cli --script SCRIPT.json --log LOG.jsonl [the CLI's arguments...]

`write_fake_cli(folder, script)` writes the script and an executable wrapper (`fake-cli`) that a
`ClaudeCodeConfig` / `CodexConfig` takes as its `binary`; the wrapper passes the adapter's
arguments through. The script is a JSON object:

- `steps`: a list, played in order: `{"out": "a line"}` (stdout), `{"out_json": {...}}`,
  `{"err": "text"}` (stderr), `{"err_env": "NAME"}` (`NAME=value` to stderr),
  `{"sleep": seconds}`, `{"pause": true}` (wait for signals forever), `{"exit": code}`,
  `{"close_stdout": true}`,
  `{"spawn_sleeper": seconds}` (a child in the same process group that outlives us, holding
  our stdout and stderr; its pid is logged), `{"call": {"tool": ..., "arguments": {...}, "meta":
  {...}}}` (a real MCP `tools/call` to the endpoint the arguments configure: `--mcp-config`
  for Claude Code, `-c mcp_servers.X={url=...}` for Codex, the token from `TOKEN_ENV`; its
  structured result is logged and `{"out_result": template}` may follow, printing `template`
  with `"$RESULT"` replaced by the result as a JSON string).
- `on_sigint` / `on_sigterm`: `"ignore"` (log it, go on) or `{"out": [lines], "exit": code}`
  (log it, print the lines, exit). As the real CLIs do: Claude Code prints an
  `error_during_execution` result line and exits 0 on SIGINT, Codex exits 1; both exit 143 on
  SIGTERM (the defaults).

The log (JSON lines) records `start` (argv, the environment), every `signal`, `call` results,
`sleeper` pids. Only the standard library is imported unless a `call` step runs (then the
project's MCP client, with `PYTHONPATH` set by the wrapper).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOKEN_ENV = "SUBAGENT_ENGINE_MCP_TOKEN"

CLAUDE_SIGINT = {
    "out": [
        json.dumps(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "result": "",
                "session_id": "fake",
            }
        )
    ],
    "exit": 0,
}
CODEX_SIGINT = {"out": [], "exit": 1}


def write_fake_cli(folder: Path, script: dict[str, Any], name: str = "fake-cli") -> Path:
    """Write `script` and an executable wrapper under `folder`; returns the wrapper's path.
    The log is `folder / (name + ".log")` (see `read_log`)."""
    folder.mkdir(parents=True, exist_ok=True)
    script_path = folder / f"{name}.json"
    script_path.write_text(json.dumps(script))
    log_path = folder / f"{name}.log"
    wrapper = folder / name
    command = [
        sys.executable,
        "-m",  # not the file: its folder first on sys.path could shadow installed packages
        "tests.helpers.fakes_cli",
        "--script",
        str(script_path),
        "--log",
        str(log_path),
    ]
    wrapper.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={shlex.quote(str(REPO))} exec {' '.join(shlex.quote(c) for c in command)}"
        ' "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def read_log(wrapper: Path) -> list[dict[str, Any]]:
    path = wrapper.with_name(wrapper.name + ".log")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the fake itself ---------------------------------------------------------------------------


class _Fake:
    def __init__(self, script: dict[str, Any], log_path: str, argv: list[str]) -> None:
        self.script = script
        self.log_path = log_path
        self.argv = argv
        self.result: Any = None

    def log(self, **record: Any) -> None:
        with open(self.log_path, "a") as log:
            log.write(json.dumps(record) + "\n")

    def out(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def install_signals(self) -> None:
        defaults = {"on_sigint": {"out": [], "exit": 130}, "on_sigterm": {"out": [], "exit": 143}}
        for key, signum in (("on_sigint", signal.SIGINT), ("on_sigterm", signal.SIGTERM)):
            action = self.script.get(key, defaults[key])

            def handler(number: int, frame: Any, action: Any = action) -> None:
                self.log(event="signal", signal=signal.Signals(number).name)
                if action == "ignore":
                    return
                for line in action.get("out", []):
                    self.out(line)
                os._exit(int(action.get("exit", 0)))

            signal.signal(signum, handler)

    def run(self) -> None:
        self.install_signals()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.log(event="start", argv=self.argv, env=env, cwd=os.getcwd(), pid=os.getpid())
        for step in self.script.get("steps", []):
            if "out" in step:
                self.out(step["out"])
            elif "out_json" in step:
                self.out(json.dumps(step["out_json"]))
            elif "err" in step:
                sys.stderr.write(step["err"] + "\n")
                sys.stderr.flush()
            elif "close_stdout" in step:
                sys.stdout.flush()
                os.close(1)
            elif "err_env" in step:  # echo a variable (a credential, say) to stderr
                sys.stderr.write(f"{step['err_env']}={os.environ.get(step['err_env'], '')}\n")
                sys.stderr.flush()
            elif "sleep" in step:
                time.sleep(step["sleep"])
            elif "pause" in step:
                while True:
                    signal.pause()
            elif "exit" in step:
                sys.stdout.flush()
                os._exit(int(step["exit"]))
            elif "spawn_sleeper" in step:
                # It inherits stdout and stderr: the driver must not wait for their end.
                seconds = float(step["spawn_sleeper"])
                child = subprocess.Popen(
                    [sys.executable, "-c", f"import time; time.sleep({seconds})"],
                    stdin=subprocess.DEVNULL,
                )
                self.log(event="sleeper", pid=child.pid)
            elif "call" in step:
                self.result = self.call(step["call"])
            elif "out_result" in step:
                self.out(step["out_result"].replace('"$RESULT"', json.dumps(self.result)))
        os._exit(int(self.script.get("exit", 0)))

    # -- a real MCP call, as the CLIs make it ---------------------------------------------------

    def endpoint_url(self) -> str:
        argv = self.argv
        if "--mcp-config" in argv:
            config = json.loads(argv[argv.index("--mcp-config") + 1])
            server = next(iter(config["mcpServers"].values()))
            return str(server["url"])
        for arg in argv:
            match = re.match(r'^mcp_servers\.[^=]+=\{.*?url="([^"]+)"', arg)
            if match:
                return match.group(1)
        raise SystemExit("fake cli: no MCP endpoint in the arguments")

    def call(self, call: dict[str, Any]) -> Any:
        import trio

        from adapters.mcp import connect
        from engine import RunEndpoint

        endpoint = RunEndpoint(url=self.endpoint_url(), token=os.environ[TOKEN_ENV])

        async def go() -> Any:
            async with connect(endpoint) as session:
                result = await session.call_tool(
                    call.get("tool", "delegate_to_agent"),
                    call.get("arguments", {}),
                    meta=call.get("meta"),
                )
                return result.structured_content

        structured = trio.run(go)
        self.log(event="call", result=structured)
        return structured


def main(argv: list[str]) -> None:
    script_path = argv[argv.index("--script") + 1]
    log_path = argv[argv.index("--log") + 1]
    rest = argv[argv.index("--log") + 2 :]
    with open(script_path) as f:
        script = json.load(f)
    _Fake(script, log_path, rest).run()


if __name__ == "__main__":
    main(sys.argv[1:])
