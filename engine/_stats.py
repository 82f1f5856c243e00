"""The engine's own counters, for a process that exports metrics (`web.metrics`).

This module owns `EngineStats`: plain integers the engine bumps where a run or a delegation
starts and ends (the same places as its log lines, `engine._oplog`), and `EngineStatistics`, a
snapshot that also sums what the open runs' journals and viewer buffers hold, computed only when
asked (a scrape), so that nothing on the hot path of events pays for it. Runs that recovery ended
(`engine._recovery`: a dead process left them live) are counted apart from the runs this engine
ran (`runs_recovered`), so `runs_started` and `runs_ended` still balance.

Every label value kept here comes from a closed set: an agent key that is not in the engine's
registry (a parent may ask for any name; it is refused) is counted as `OTHER`, as is a status,
an error code or a remote-cancel outcome outside the engine's own (`Status`, `ErrorCode`,
`RemoteCancel`), as is a recovery reason other than `RECOVERY_REASONS`. A remote's or a parent's
text can never grow the number of series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import attrs

from engine._events import Kind
from engine._results import DelegationResult, ErrorCode, RemoteCancel, Status

if TYPE_CHECKING:
    from engine._journal import RunJournal
    from engine._recovery import RecoveredRun

__all__ = [
    "DELEGATION_STATUSES",
    "ERROR_CODES",
    "NONE",
    "OTHER",
    "RECOVERY_REASONS",
    "REMOTE_CANCELS",
    "RUN_OUTCOMES",
    "EngineStatistics",
    "EngineStats",
    "closed",
]

#: The label value of anything outside the closed sets.
OTHER: Final = "other"
#: Most distinct tool names counted (one per listed tool: the generic one, a shortcut per
#: agent, reading output, asking the requester); beyond, `OTHER`.
MAX_TOOL_LABELS: Final = 256
#: The label value of "no error code" (a delegation that did not fail).
NONE: Final = "none"
#: Every error code the engine defines.
ERROR_CODES: Final = frozenset(
    value for name, value in vars(ErrorCode).items() if name.isupper() and isinstance(value, str)
)
#: The label values of a delegation's status, a remote cancel's outcome (`not_needed` is not
#: counted) and a run's outcome; a run outcome's order is the order its series are listed in.
DELEGATION_STATUSES: Final = frozenset({*Status.TERMINAL, Status.RUNNING})
REMOTE_CANCELS: Final = (RemoteCancel.CONFIRMED, RemoteCancel.PENDING, RemoteCancel.UNSUPPORTED)
RUN_OUTCOMES: Final = tuple(
    kind.removeprefix("run.") for kind in (Kind.RUN_FINISHED, Kind.RUN_FAILED, Kind.RUN_CANCELLED)
)
#: Why recovery ended a run: its process stopped (found at the next start), or its server node
#: lost its lease (found by another node).
RECOVERY_REASONS: Final = (ErrorCode.INTERRUPTED, ErrorCode.NODE_LOST)


def closed(value: str | None, allowed: Iterable[str], none: str = NONE) -> str:
    """`value` if it is one of `allowed`, `none` for None, else `OTHER`."""
    if value is None:
        return none
    return value if value in allowed else OTHER


class EngineStats:
    """Counters one `Engine` keeps over its life (see the module). Only the engine writes them."""

    def __init__(self, agents: Iterable[str] = ()) -> None:
        #: The label values an agent may take: the registry's keys.
        self.agents = frozenset(agents)
        self.runs_started = 0
        #: Run outcome (finished, failed, cancelled) -> runs that ended so.
        self.runs_ended: Counter[str] = Counter()
        #: (agent, status, error code) -> delegations that ended so.
        self.delegations_ended: Counter[tuple[str, str, str]] = Counter()
        #: Remote-cancel outcome (`RemoteCancel`) -> delegations whose remote was cancelled so.
        self.remote_cancels: Counter[str] = Counter()
        #: (recovery reason, run outcome) -> runs a dead process left live that recovery ended.
        self.runs_recovered: Counter[tuple[str, str]] = Counter()
        #: Batches written to runs' journal stores, and writes that failed.
        self.store_appends = 0
        self.store_errors = 0
        #: Tool name -> calls the run's tool endpoint took (the adapter names only the tools it
        #: lists; at most `MAX_TOOL_LABELS` names, the rest `OTHER`).
        self.tool_calls: Counter[str] = Counter()
        # What runs no longer counted from their journals left behind.
        self.retired_events = 0
        self.evicted_gaps = 0
        self.evicted_folds = 0

    def tool_called(self, tool: str) -> None:
        """A parent called one of the run endpoint's tools (`tool`: a name it lists)."""
        if tool not in self.tool_calls and len(self.tool_calls) >= MAX_TOOL_LABELS:
            tool = OTHER
        self.tool_calls[tool] += 1

    def run_ended(self, outcome: str) -> None:
        self.runs_ended[closed(outcome, RUN_OUTCOMES)] += 1

    def delegation_ended(self, result: DelegationResult) -> None:
        agent = closed(result.agent, self.agents)
        status = closed(result.status, DELEGATION_STATUSES)
        code = closed(result.error.code if result.error is not None else None, ERROR_CODES)
        self.delegations_ended[agent, status, code] += 1
        if result.remote_cancel is not None and result.remote_cancel != RemoteCancel.NOT_NEEDED:
            self.remote_cancels[closed(result.remote_cancel, REMOTE_CANCELS)] += 1

    def recovered(self, runs: Iterable[RecoveredRun]) -> None:
        """Recovery ended `runs` (`engine._recovery`): each run by its reason and outcome, and
        the cancels of their open delegations' remote tasks with the engine's own."""
        for run in runs:
            reason = closed(run.code, RECOVERY_REASONS)
            outcome = closed(run.terminal.removeprefix("run."), RUN_OUTCOMES)
            self.runs_recovered[reason, outcome] += 1
            for delegation in run.delegations:
                if delegation.remote_cancel != RemoteCancel.NOT_NEEDED:
                    self.remote_cancels[closed(delegation.remote_cancel, REMOTE_CANCELS)] += 1

    def run_retired(self, journal: RunJournal) -> None:
        """A run closed: its journal takes no more events."""
        self.retired_events += journal.statistics().appended

    def journal_evicted(self, journal: RunJournal) -> None:
        """A closed run's journal is no longer kept: keep what its viewers counted."""
        gaps, folds, _ = viewer_totals(journal)
        self.evicted_gaps += gaps
        self.evicted_folds += folds

    def snapshot(
        self,
        *,
        runs_active: int,
        delegations_active: int,
        open_journals: Iterable[RunJournal],
        closed_journals: Iterable[RunJournal],
    ) -> EngineStatistics:
        events = self.retired_events
        gaps, folds, buffered = self.evicted_gaps, self.evicted_folds, 0
        for journal in open_journals:
            events += journal.statistics().appended
            g, f, b = viewer_totals(journal)
            gaps, folds, buffered = gaps + g, folds + f, buffered + b
        for journal in closed_journals:
            g, f, b = viewer_totals(journal)
            gaps, folds, buffered = gaps + g, folds + f, buffered + b
        return EngineStatistics(
            agents=self.agents,
            runs_started=self.runs_started,
            runs_active=runs_active,
            runs_ended=dict(self.runs_ended),
            delegations_active=delegations_active,
            delegations_ended=dict(self.delegations_ended),
            remote_cancels=dict(self.remote_cancels),
            runs_recovered=dict(self.runs_recovered),
            journal_events=events,
            journal_gaps=gaps,
            journal_folds=folds,
            viewer_buffer_bytes=buffered,
            store_appends=self.store_appends,
            store_errors=self.store_errors,
            tool_calls=dict(self.tool_calls),
        )


def viewer_totals(journal: RunJournal) -> tuple[int, int, int]:
    """(gap markers delivered, statuses folded, bytes waiting) of `journal`'s viewers, those
    that left included for the first two."""
    gaps, folds, buffered = journal.viewer_gaps, journal.viewer_folds, 0
    for sub in (*journal._live, *journal._catching_up):
        lane = sub._buffer.statistics()
        folds += lane.folded_statuses
        buffered += lane.pending_bytes
    return gaps, folds, buffered


@attrs.frozen(kw_only=True)
class EngineStatistics:
    """One reading of an engine's counters (`Engine.statistics()`); label values closed."""

    #: The registry's agent keys (the values `delegations_ended`'s agent may take, with OTHER).
    agents: frozenset[str]
    runs_started: int
    runs_active: int
    runs_ended: dict[str, int]
    delegations_active: int
    delegations_ended: dict[tuple[str, str, str], int]
    remote_cancels: dict[str, int]
    #: Events accepted into runs' journals.
    journal_events: int
    #: `stream.gap` markers viewers were given (what they missed was no longer kept).
    journal_gaps: int
    #: Status events folded away in slow viewers' buffers (`engine._lanes`).
    journal_folds: int
    #: Bytes waiting in viewers' buffers now.
    viewer_buffer_bytes: int
    store_appends: int
    store_errors: int
    #: Calls of the run endpoints' tools, by tool name (names the endpoint lists, or OTHER).
    tool_calls: dict[str, int] = attrs.field(factory=dict)
    #: (recovery reason, run outcome) -> runs a dead process left live that recovery ended.
    runs_recovered: dict[tuple[str, str], int] = attrs.field(factory=dict)
