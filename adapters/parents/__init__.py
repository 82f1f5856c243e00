"""Parent agents: what drives a run and calls `delegate_to_agent` (the scripted parent now; the
Claude Code and Codex CLI adapters follow)."""

from adapters.parents._scripted import (
    DEFAULT_SCRIPT,
    Answer,
    Delegate,
    Say,
    ScriptedParent,
    Think,
)

__all__ = ["DEFAULT_SCRIPT", "Answer", "Delegate", "Say", "ScriptedParent", "Think"]
