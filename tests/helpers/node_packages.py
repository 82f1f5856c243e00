"""Node.js test tools with pinned npm packages (such as tests/agui_verify).

Each tool directory holds a package.json and package-lock.json. `./dev test` runs `npm ci` in
each; a test that finds the directory's node_modules older than its lock file (or missing) runs
`npm ci` itself, once, under a file lock, because several test sessions may share this tree.
Node.js or npm missing fails the test with what to install: they are part of the suite's setup,
not optional.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_MIN_MAJOR = 20
NPM_TIMEOUT = 300.0


def require_node() -> tuple[str, str]:
    """(node, npm) paths; fails the test if either is missing or Node is too old."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if not path)
        pytest.fail(
            f"{missing} not found on PATH: these tests drive pinned npm packages; "
            f"install Node.js >= {NODE_MIN_MAJOR} with npm (`./dev test` does).",
            pytrace=False,
        )
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=False, timeout=30
    ).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < NODE_MIN_MAJOR:
        pytest.fail(
            f"Node.js {version or '(unknown)'} is older than {NODE_MIN_MAJOR}", pytrace=False
        )
    return node, npm


def _installed(directory: Path) -> bool:
    marker = directory / "node_modules" / ".package-lock.json"  # npm writes it last
    lock = directory / "package-lock.json"
    return marker.is_file() and marker.stat().st_mtime >= lock.stat().st_mtime


def ensure_npm_packages(directory: Path) -> str:
    """Node's path, with `directory`'s locked packages installed (`npm ci` when stale)."""
    node, npm = require_node()
    if _installed(directory):
        return node
    with open(directory / ".install.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if _installed(directory):
                return node
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=directory,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
                timeout=NPM_TIMEOUT,
            )
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-3000:]
        pytest.fail(
            f"`npm ci` in {directory} failed ({result.returncode}):\n{output}", pytrace=False
        )
    return node


def run_node_json_lines(
    node: str, script: Path, args: list[str], *, timeout: float
) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[str]]:
    """Run `node script args...` and parse each stdout line as JSON; fails the test on a crash
    or on output that is not JSON lines (with the script's stderr)."""
    try:
        result = subprocess.run(
            [node, str(script), *args],
            cwd=script.parent,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{script.name} did not finish within {timeout:g} s: {exc.stderr!r}")
    try:
        documents = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    except ValueError:
        documents = []
    if not documents:
        pytest.fail(
            f"{script.name} exited {result.returncode} without a JSON report:\n"
            f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}",
            pytrace=False,
        )
    return documents, result
