"""Helpers shared by the tests, one module a concern, each named for what it holds.

A test module holds tests and the helpers only it uses; what two test modules need lives here
(the peer servers the tests start live in `tools.peers`), so no test module imports another.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root: where `python -m tools.peers...` and `python -m cli` run from.
REPO_ROOT = Path(__file__).resolve().parents[2]
