"""Debian's chromium for the browser tests: where it is, the flags every test starts it with,
and installing it with apt-get when it is missing and the tests run as root (Playwright's Python
package drives it and never downloads a browser of its own)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest

CHROMIUM: Final = Path("/usr/bin/chromium")
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
APT_TIMEOUT: Final = 900.0


def ensure_chromium() -> Path:
    """The browser's path, installing Debian's package first when it is missing (skips when
    it cannot: not root, no apt-get)."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        pytest.skip(
            f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get); "
            "install Debian's chromium package: apt-get install -y chromium"
        )
    with open("/tmp/subagent-engine-chromium-install.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if not os.access(CHROMIUM, os.X_OK):
                env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                for argv in (
                    [apt_get, "update", "-qq"],
                    [apt_get, "install", "-y", "-qq", "chromium"],
                ):
                    result = subprocess.run(
                        argv,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=APT_TIMEOUT,
                        check=False,
                    )
                    if result.returncode != 0:
                        output = (result.stdout + result.stderr)[-3000:]
                        pytest.fail(f"`{' '.join(argv)}` failed:\n{output}", pytrace=False)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} is not there", pytrace=False)
    return CHROMIUM
