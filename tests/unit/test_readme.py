"""README's embedding example runs as written (it is the first thing a user copies)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_embedding_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README lost its embedding example"
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=README.parent,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "completed Found it."
    assert lines[1].endswith("run.started") and lines[-1].endswith("run.finished")


def test_readme_commands_are_the_ones_ci_runs() -> None:
    text = README.read_text()
    assert "./dev run" in text and "./dev test" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "exec ./dev test" in ci
