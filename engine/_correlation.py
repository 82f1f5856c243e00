"""Which parent tool call a delegation belongs to, when the call itself does not say.

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

A parent whose stream names tool calls by its own ids rather than the model's (Codex prints
`item_N`; the model's `call_id` only reaches the MCP `_meta`) declares so on its run
(`Run.parent_call_ids = "parent"`). A delegation that arrives with the model's id is then paired
(`pair`) with the parent's unclaimed delegation call whose complete arguments (`tool_call.end`
seen) equal the call's, waiting a bounded time for the parent to print it, and only then with
the oldest unclaimed one; the model's id is kept beside it as metadata.

The ledger learns the parent's tool calls from the parent's own events (`tool_call.start`,
`tool_call.args`, `tool_call.end`, `tool_call.result`) as they are published. A tool counts as
a delegation tool when the last `__`-separated segment of its name starts with `delegate_to_`
(`delegate_to_agent`, `mcp__subagents__delegate_to_agent`, `delegate_to_research`). Sans-IO: no
clock of its own, no awaits; the run actor feeds it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["AmbiguousCorrelation", "Correlation", "ParentToolCalls", "is_delegation_tool"]

#: How many parent tool calls the ledger remembers (oldest forgotten first).
MAX_TRACKED_CALLS: Final = 1024


class Correlation:
    """How firmly a delegation is tied to its parent tool call (`none`: not tied to one)."""

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
    __slots__ = ("args", "args_done", "claimed", "open", "started_at")

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.claimed = False
        self.open = True
        self.args: Any = None
        self.args_done = False


class ParentToolCalls:
    """The parent's delegation tool calls of one run, in start order."""

    def __init__(self, *, weak_window: float = 5.0) -> None:
        self.weak_window = weak_window
        self._calls: OrderedDict[str, _Call] = OrderedDict()

    def observe(
        self,
        kind: str,
        tool_call_id: str | None,
        tool_name: str | None,
        now: float,
        args: Any = None,
    ) -> bool:
        """Feed one parent event (any kind; only tool-call events matter). True when it
        changed what `pair` could find (a call's arguments became complete)."""
        if not tool_call_id:
            return False
        if kind == "tool_call.start":
            if is_delegation_tool(tool_name) and tool_call_id not in self._calls:
                self._calls[tool_call_id] = _Call(now)
                while len(self._calls) > MAX_TRACKED_CALLS:
                    self._calls.popitem(last=False)
            return False
        call = self._calls.get(tool_call_id)
        if call is None:
            return False
        if kind == "tool_call.args":
            if isinstance(args, Mapping):
                call.args = dict(args)
            elif isinstance(args, str):  # streamed JSON text: kept whole, read at the end
                call.args = (call.args if isinstance(call.args, str) else "") + args
        elif kind == "tool_call.end":
            if isinstance(call.args, str):
                try:
                    call.args = json.loads(call.args)
                except ValueError:
                    call.args = None
            call.args_done = True
            return True
        elif kind == "tool_call.result":
            call.open = False
            call.args_done = True
            return True
        return False

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

    def pair(self, arguments: Any, *, exact: bool = True) -> str | None:
        """The parent's own id for a delegation that came with the model's id (a parent that
        names calls its own way), claimed: the oldest unclaimed call with complete arguments
        equal to `arguments`; with `exact=False` (the last resort, once the parent had time to
        print its calls) the oldest unclaimed call with complete arguments. None if there is
        none yet: the parent may not have printed the call; ask again when `observe` returns
        True."""
        wanted = dict(arguments) if isinstance(arguments, Mapping) else None
        for tool_call_id, call in self._calls.items():
            if not call.args_done or call.claimed:
                continue
            if not exact or (wanted is not None and call.args == wanted):
                call.claimed = True
                return tool_call_id
        return None

    def unclaimed(self) -> list[str]:
        """Ids of parent delegation calls no delegation claimed yet, oldest first."""
        return [i for i, call in self._calls.items() if not call.claimed]
