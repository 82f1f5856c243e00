"""The parent seam: what drives a run.

A parent agent gets a run and the user's prompt, and drives it: it emits the parent's text,
reasoning and tool calls into the run and starts delegations (`delegate_to_agent`) through it.
The scripted parent and the Claude Code and Codex CLI adapters implement it; the bundled server
and `a2a-serve` make one per run and never ask which one they have.
"""

from __future__ import annotations

from typing import Any, Protocol

from engine import Run

__all__ = ["ParentAgent"]


class ParentAgent(Protocol):
    """What drives a run: `ScriptedParent`, `ClaudeCodeParent`, `CodexParent`, ..."""

    async def run(self, run: Run, prompt: str) -> Any: ...
