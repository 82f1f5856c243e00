"""Which parent tool call a delegation belongs to, when the call itself does not say (000 §13).

This module owns the run's ledger of its parent's delegation tool calls and the three ways a
delegation is tied to one of them:

- strong: the tool call's own id arrived with the request (MCP `_meta`: `claudecode/toolUseId`
  from Claude Code, `callId` from Codex). The ledger only marks that call as claimed.
- medium: no id, but the run is known (the MCP endpoint's token names it). The delegation takes
  the oldest parent delegation tool call of the run that no delegation claimed yet: calls and
  delegations pair up in call order.
- weak (diagnostic only, behind an explicit flag): the delegation takes the one parent
  delegation tool call that is open right now and started within a short window; when more than
  one is open the pairing is ambiguous and is refused (`AmbiguousCorrelation`), never guessed.

The ledger learns the parent's tool calls from the parent's own events (`tool_call.start`,
`tool_call.result`) as they are published. A tool counts as a delegation tool
when the last `__`-separated segment of its name starts with `delegate_to_` (`delegate_to_agent`,
`mcp__subagents__delegate_to_agent`, `delegate_to_research`). Sans-IO: no clock of its own, no
awaits; the run actor feeds it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

__all__ = ["AmbiguousCorrelation", "Correlation", "ParentToolCalls", "is_delegation_tool"]

#: How many parent tool calls the ledger remembers (oldest forgotten first).
MAX_TRACKED_CALLS: Final = 1024


class Correlation:
    """The correlation levels of 000 §13."""

    STRONG: Final = "strong"
    MEDIUM: Final = "medium"
    WEAK: Final = "weak"
    NONE: Final = "none"


class AmbiguousCorrelation(Exception):
    """Weak correlation found several open parent delegation calls and would have to guess."""

    def __init__(self, open_calls: int) -> None:
        super().__init__(
            f"{open_calls} parent delegation tool calls are open at once; weak (timing-based) "
            "correlation cannot tell which one this delegation belongs to"
        )
        self.open_calls = open_calls


def is_delegation_tool(tool_name: str | None) -> bool:
    """True for a parent tool that delegates (`delegate_to_agent`, `mcp__x__delegate_to_y`)."""
    if not tool_name:
        return False
    return tool_name.rsplit("__", 1)[-1].startswith("delegate_to_")


class _Call:
    __slots__ = ("claimed", "open", "started_at")

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.claimed = False
        self.open = True


class ParentToolCalls:
    """The parent's delegation tool calls of one run, in start order."""

    def __init__(self, *, weak_window: float = 5.0) -> None:
        self.weak_window = weak_window
        self._calls: OrderedDict[str, _Call] = OrderedDict()

    def observe(
        self, kind: str, tool_call_id: str | None, tool_name: str | None, now: float
    ) -> None:
        """Feed one parent event (any kind; only tool-call starts and ends matter)."""
        if not tool_call_id:
            return
        if kind == "tool_call.start":
            if is_delegation_tool(tool_name) and tool_call_id not in self._calls:
                self._calls[tool_call_id] = _Call(now)
                while len(self._calls) > MAX_TRACKED_CALLS:
                    self._calls.popitem(last=False)
        elif kind == "tool_call.result":  # `tool_call.end` only ends the arguments
            call = self._calls.get(tool_call_id)
            if call is not None:
                call.open = False

    def claim(self, tool_call_id: str) -> None:
        """A delegation arrived with this id (strong correlation): it is taken."""
        call = self._calls.get(tool_call_id)
        if call is not None:
            call.claimed = True

    def claim_next(self, mode: str, now: float) -> str | None:
        """The parent tool call a delegation without an id belongs to, claimed; None if none
        fits. `mode` is `medium` or `weak`; weak raises `AmbiguousCorrelation` when it would
        have to choose between several open calls."""
        if mode == Correlation.MEDIUM:
            for tool_call_id, call in self._calls.items():
                if not call.claimed:
                    call.claimed = True
                    return tool_call_id
            return None
        if mode == Correlation.WEAK:
            candidates = [
                (tool_call_id, call)
                for tool_call_id, call in self._calls.items()
                if call.open and not call.claimed and now - call.started_at <= self.weak_window
            ]
            if len(candidates) > 1:
                raise AmbiguousCorrelation(len(candidates))
            if not candidates:
                return None
            tool_call_id, call = candidates[0]
            call.claimed = True
            return tool_call_id
        raise ValueError(f"unknown correlation mode {mode!r} (medium or weak)")

    def unclaimed(self) -> list[str]:
        """Ids of parent delegation calls no delegation claimed yet, oldest first."""
        return [i for i, call in self._calls.items() if not call.claimed]
