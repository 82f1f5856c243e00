"""`python -m fuzz`: run every fuzz harness for a bounded time and report which found a bug.

    python -m fuzz [--seconds N] [--only NAME] [--list] [--seed S] [--engine auto|atheris|random]

Each harness (`fuzz/fuzz_<name>.py`, see `fuzz._harness`) runs in its own subprocess
(`fuzz._session`) inside a fresh temporary folder, so a crash, a hang or a leak in the code under
test cannot take the runner down, and nothing is written into the repository. A session that
overruns its time by `_TIME_MARGIN_S` is killed with its process group and counts as a failure.

Prints one line per harness (name, engine, result, executions, time) and, for a failing one, where
the failing input was kept (a folder under the system temp dir, which outlives the run), its bytes
in hex and the end of the session's log. Exits 1 if any harness failed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from fuzz._harness import DEFAULT_PACKAGE, harness_names

#: Time a session may take beyond its budget (interpreter start, instrumented imports, seeds).
_TIME_MARGIN_S: Final = 30.0
_SHOWN_HEX_BYTES: Final = 512
_SHOWN_LOG_LINES: Final = 30

_EXECUTED = re.compile(r"^stat::number_of_executed_units:\s*(\d+)", re.MULTILINE)
_WRITTEN = re.compile(r"Test unit written to (\S+)")


@dataclass(frozen=True)
class SessionOutcome:
    name: str
    package: str
    engine: str
    seed: int
    exit_status: int | None  # None: killed after overrunning its time
    executed: int | None
    seconds: float
    failing_input: Path | None
    log_tail: list[str]

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def verdict(self) -> str:
        if self.exit_status is None:
            return "HUNG"
        if self.exit_status == 0:
            return "ok"
        if self.failing_input is not None:
            # libFuzzer names the file after what went wrong: crash-, timeout-, oom-, leak-.
            return self.failing_input.name.split("-", 1)[0].upper()
        return f"FAILED (exit {self.exit_status})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="budget per harness (5)")
    parser.add_argument("--only", metavar="NAME", help="run one harness, e.g. tool_input")
    parser.add_argument("--list", action="store_true", help="list the harnesses and exit")
    parser.add_argument("--seed", type=int, help="fuzzer seed (default: random, printed)")
    parser.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    parser.add_argument("--package", default=DEFAULT_PACKAGE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    names = harness_names(args.package)
    if args.list:
        print("\n".join(names))
        return 0
    if args.only is not None:
        wanted = args.only.removeprefix("fuzz_").removesuffix(".py")
        if wanted not in names:
            print(f"no harness named {args.only!r}; harnesses: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [wanted]
    if args.seconds <= 0:
        print("--seconds must be positive", file=sys.stderr)
        return 2

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if importlib.util.find_spec("atheris") is not None else "random"
    # libFuzzer reads -seed=0 as "pick one"; a printed non-zero seed makes a run repeatable.
    seed = args.seed if args.seed else int.from_bytes(os.urandom(4), "big") % (2**31 - 1) + 1

    failed = 0
    for name in names:
        outcome = _run_session(name, args.package, engine, seed, args.seconds)
        _report(outcome)
        failed += not outcome.ok
    if len(names) > 1 or failed:
        print(f"fuzz: {len(names)} harnesses, {failed} failed")
    return 1 if failed else 0


def _run_session(name: str, package: str, engine: str, seed: int, seconds: float) -> SessionOutcome:
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as tmp:
        workdir = Path(tmp)
        log_path = workdir / "session.log"
        command = [
            sys.executable,
            "-m",
            "fuzz._session",
            name,
            f"--package={package}",
            f"--workdir={workdir}",
            f"--seconds={seconds}",
            f"--engine={engine}",
            f"--seed={seed}",
        ]
        started = time.monotonic()
        with log_path.open("wb") as log:
            exit_status = _run_bounded(command, workdir, log, seconds + _TIME_MARGIN_S, package)
        elapsed = time.monotonic() - started

        output = log_path.read_text(encoding="utf-8", errors="replace")
        executed = [int(n) for n in _EXECUTED.findall(output)]
        written = _WRITTEN.findall(output)
        failing_input = _keep(Path(written[-1]), name) if written and exit_status != 0 else None
        return SessionOutcome(
            name=name,
            package=package,
            engine=engine,
            seed=seed,
            exit_status=exit_status,
            executed=executed[-1] if executed else None,
            seconds=elapsed,
            failing_input=failing_input,
            log_tail=[] if exit_status == 0 else output.splitlines()[-_SHOWN_LOG_LINES:],
        )


def _run_bounded(
    command: list[str], workdir: Path, log: IO[bytes], timeout: float, package: str
) -> int | None:
    """Run one session; kill its whole process group if it overruns (or we are interrupted)."""
    env = dict(os.environ)
    # The session imports `fuzz` and the harness package by name, from a cwd outside the repo.
    roots = {str(_package_root(DEFAULT_PACKAGE)), str(_package_root(package))}
    env["PYTHONPATH"] = os.pathsep.join([*sorted(roots), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ written into the repo
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _package_root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"no package named {package!r}")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _keep(path: Path, name: str) -> Path | None:
    """Copy a failing input out of the session's folder, which is about to be deleted."""
    if not path.is_file():
        return None
    kept = Path(tempfile.mkdtemp(prefix=f"fuzz-{name}-failure-")) / path.name
    shutil.copyfile(path, kept)
    return kept


def _report(outcome: SessionOutcome) -> None:
    executed = "?" if outcome.executed is None else f"{outcome.executed}"
    print(
        f"{outcome.name:<16} {outcome.engine:<8} {outcome.verdict:<8} "
        f"{executed:>10} execs  {outcome.seconds:5.1f} s  seed {outcome.seed}",
        flush=True,
    )
    if outcome.ok:
        return
    if outcome.failing_input is not None:
        data = outcome.failing_input.read_bytes()
        shown = data[:_SHOWN_HEX_BYTES].hex()
        more = f" ... ({len(data)} bytes in all)" if len(data) > _SHOWN_HEX_BYTES else ""
        print(f"  input: {outcome.failing_input} ({len(data)} bytes)")
        print(f"  hex:   {shown}{more}")
        replay = (
            f"from {outcome.package}.fuzz_{outcome.name} import fuzz_one_input as f; "
            f"f(open({str(outcome.failing_input)!r}, 'rb').read())"
        )
        print(f'  replay: PYTHONPATH=. python -c "{replay}"')
    elif outcome.exit_status is None:
        print(f"  killed after {outcome.seconds:.0f} s: the session overran its time")
    for line in outcome.log_tail:
        print(f"  | {line}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
