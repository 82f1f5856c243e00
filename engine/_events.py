"""The event envelope every run journal orders: delegation events and the parent's own payloads.

This module owns the event kinds (the `subagent.*` family of a delegation plus the parent's text,
reasoning, tool-call and run-lifecycle kinds), their QoS lane (critical, important, volatile) and
the flat `DelegationEvent` envelope with its identity fields (run, parent tool call, delegation,
agent, protocol, remote ids). It does no I/O and knows no wire
format: `engine._wire` owns JSON. Kinds are plain strings so an unknown kind (from a newer peer or
a fuzzer) travels through unharmed and lands in the important lane.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from engine._questions import Question
from engine._results import ArtifactRef, DelegationError

__all__ = [
    "CRITICAL",
    "DelegationEvent",
    "DropReport",
    "IMPORTANT",
    "Kind",
    "VOLATILE",
    "is_terminal",
    "lane_of",
]


class Kind:
    """Every event kind the engine itself produces. Anything else is carried as-is."""

    # A delegation's lifecycle and payloads.
    STARTED: Final = "subagent.started"
    STATUS: Final = "subagent.status"
    TEXT_START: Final = "subagent.text.start"
    TEXT_DELTA: Final = "subagent.text.delta"
    TEXT_END: Final = "subagent.text.end"
    REASONING_START: Final = "subagent.reasoning.start"
    REASONING_DELTA: Final = "subagent.reasoning.delta"
    REASONING_END: Final = "subagent.reasoning.end"
    TOOL_CALL_START: Final = "subagent.tool_call.start"
    TOOL_CALL_ARGS: Final = "subagent.tool_call.args"
    TOOL_CALL_RESULT: Final = "subagent.tool_call.result"
    TOOL_CALL_END: Final = "subagent.tool_call.end"
    ARTIFACT: Final = "subagent.artifact"
    CUSTOM: Final = "subagent.custom"
    STREAM_DROPPED: Final = "subagent.stream.dropped"
    INPUT_REQUIRED: Final = "subagent.input_required"
    #: The delegation's open question closed: answered (by whom, through which surface),
    #: expired, or withdrawn because the delegation ended. Carries the closed `question`.
    INPUT_CLOSED: Final = "subagent.input_closed"
    FINISHED: Final = "subagent.finished"
    FAILED: Final = "subagent.failed"
    CANCELLED: Final = "subagent.cancelled"

    # A nested subagent: one the delegation's remote agent itself reported (AG-UI SUBAGENT_*).
    # Its own lifecycle, inside the delegation's; never the delegation's terminal. Events of a
    # nested subagent carry its `nested_id`.
    NESTED_STARTED: Final = "subagent.nested.started"
    NESTED_FINISHED: Final = "subagent.nested.finished"
    NESTED_FAILED: Final = "subagent.nested.failed"
    NESTED_CANCELLED: Final = "subagent.nested.cancelled"
    #: A nested subagent deeper than the policy allows: its events are folded into the
    #: deepest visible ancestor (the event's `nested_id`, None: the delegation itself).
    NESTED_FOLDED: Final = "subagent.nested.folded"

    # The parent run's own payloads, in the same envelope so one journal orders both.
    RUN_STARTED: Final = "run.started"
    RUN_FINISHED: Final = "run.finished"
    RUN_FAILED: Final = "run.failed"
    RUN_CANCELLED: Final = "run.cancelled"
    PARENT_TEXT_START: Final = "text.start"
    PARENT_TEXT_DELTA: Final = "text.delta"
    PARENT_TEXT_END: Final = "text.end"
    PARENT_REASONING_START: Final = "reasoning.start"
    PARENT_REASONING_DELTA: Final = "reasoning.delta"
    PARENT_REASONING_END: Final = "reasoning.end"
    PARENT_TOOL_CALL_START: Final = "tool_call.start"
    PARENT_TOOL_CALL_ARGS: Final = "tool_call.args"
    PARENT_TOOL_CALL_END: Final = "tool_call.end"
    PARENT_TOOL_CALL_RESULT: Final = "tool_call.result"
    PARENT_CUSTOM: Final = "custom"
    #: The name of the custom event that is the parent's status line (`raw["text"]`: a model
    #: request it retries, a wait): viewers show it; a2a-serve makes it a `working` status.
    PARENT_STATUS_NAME: Final = "parent.status"

    # Markers the journal and the lanes add for a reader.
    #: Events a buffer dropped or folded by policy for one reader, and how many.
    DROPPED: Final = "stream.dropped"
    #: Cursors a reader asked for that fell out of the replay window.
    GAP: Final = "stream.gap"

    DELEGATION_TERMINALS: Final = frozenset({FINISHED, FAILED, CANCELLED})
    NESTED_TERMINALS: Final = frozenset({NESTED_FINISHED, NESTED_FAILED, NESTED_CANCELLED})
    RUN_TERMINALS: Final = frozenset({RUN_FINISHED, RUN_FAILED, RUN_CANCELLED})


#: Lane names. Critical: never dropped or reordered. Important: not dropped, identical repeated
#: statuses folded. Volatile: adjacent deltas of one (delegation, message) merged under pressure.
CRITICAL: Final = 0
IMPORTANT: Final = 1
VOLATILE: Final = 2

_LANES: Final[dict[str, int]] = {
    Kind.STARTED: CRITICAL,
    Kind.INPUT_REQUIRED: CRITICAL,
    Kind.INPUT_CLOSED: CRITICAL,
    Kind.FINISHED: CRITICAL,
    Kind.FAILED: CRITICAL,
    Kind.CANCELLED: CRITICAL,
    Kind.NESTED_STARTED: CRITICAL,
    Kind.NESTED_FINISHED: CRITICAL,
    Kind.NESTED_FAILED: CRITICAL,
    Kind.NESTED_CANCELLED: CRITICAL,
    Kind.NESTED_FOLDED: CRITICAL,
    Kind.RUN_STARTED: CRITICAL,
    Kind.RUN_FINISHED: CRITICAL,
    Kind.RUN_FAILED: CRITICAL,
    Kind.RUN_CANCELLED: CRITICAL,
    Kind.GAP: CRITICAL,
    Kind.TEXT_DELTA: VOLATILE,
    Kind.REASONING_DELTA: VOLATILE,
    Kind.TOOL_CALL_ARGS: VOLATILE,
    Kind.PARENT_TEXT_DELTA: VOLATILE,
    Kind.PARENT_REASONING_DELTA: VOLATILE,
    Kind.PARENT_TOOL_CALL_ARGS: VOLATILE,
}

_TERMINALS: Final = Kind.DELEGATION_TERMINALS | Kind.RUN_TERMINALS


def lane_of(kind: str) -> int:
    """The QoS lane of a kind; unknown kinds are important (kept, never merged)."""
    return _LANES.get(kind, IMPORTANT)


def is_terminal(kind: str) -> bool:
    return kind in _TERMINALS


@attrs.frozen(kw_only=True)
class DropReport:
    """What a buffer or a replay left out for one reader, so the reader can say so.

    `reason` is one of `status_folded`, `replay_gap` or a producer's own policy reason such as
    `max_artifacts`. Counts are events; `bytes` is their approximate payload size.
    """

    reason: str
    count: int = 0
    bytes: int = 0
    kinds: dict[str, int] | None = None
    first_cursor: int | None = None
    last_cursor: int | None = None


@attrs.frozen(kw_only=True)
class DelegationEvent:
    """One ordered observation of a run: a delegation's progress or the parent's own payload.

    Identity: `run_id` always; delegation events also carry `delegation_id`, the agent
    key and name, the protocol and whatever remote ids are known. `sequence` counts the events of
    one delegation (or of the parent) in production order; the journal cursor that orders the
    whole run lives on `JournalEntry`, not here. `message_id` groups text and reasoning deltas,
    `tool_call_id` groups one tool call's events. `extra` keeps fields this version does not know
    so they round-trip.

    Nesting: an event a nested subagent produced (one the delegation's remote itself reported)
    carries `nested_id`, the engine's id of that subagent: the remote's own id namespaced under
    the delegation (`<delegation id>/<remote id>`), so ids of two delegations never collide.
    `subagent.nested.started` also carries `nested_parent_id` (None: the delegation itself),
    `remote_subagent_id`, `name`, `text` (its description), `tool_call_id` / `message_id` (the
    remote's tool call and message that spawned it, if any) and `depth` (1: a subagent of the
    delegation's remote). Events without `nested_id` are the delegation's own, as before.
    """

    kind: str
    run_id: str
    sequence: int = 0
    time: float = 0.0
    parent_tool_call_id: str | None = None
    delegation_id: str | None = None
    agent_key: str | None = None
    agent_name: str | None = None
    protocol: str | None = None
    remote_task_id: str | None = None
    remote_context_id: str | None = None
    remote_message_id: str | None = None
    remote_artifact_id: str | None = None
    remote_tool_call_id: str | None = None
    card_fingerprint: str | None = None
    message_id: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    role: str | None = None
    delta: str | None = None
    text: str | None = None
    tool_name: str | None = None
    args: Any = None
    result: Any = None
    status: str | None = None
    artifact: ArtifactRef | None = None
    error: DelegationError | None = None
    dropped: DropReport | None = None
    synthesized: bool = False
    nested_id: str | None = None
    nested_parent_id: str | None = None
    remote_subagent_id: str | None = None
    depth: int | None = None
    #: On `subagent.input_required` the open question; on `subagent.input_closed` the closed one.
    question: Question | None = None
    raw: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None

    @property
    def lane(self) -> int:
        return lane_of(self.kind)

    @property
    def is_terminal(self) -> bool:
        return self.kind in _TERMINALS

    def derived(self, kind: str, **fields: Any) -> DelegationEvent:
        """A new event of `kind` about the same run and delegation: this event's identity and
        remote coordinates and its time, nothing of its payload; `fields` add or override."""
        identity: dict[str, Any] = {
            "run_id": self.run_id,
            "time": self.time,
            "parent_tool_call_id": self.parent_tool_call_id,
            "delegation_id": self.delegation_id,
            "agent_key": self.agent_key,
            "agent_name": self.agent_name,
            "protocol": self.protocol,
            "remote_task_id": self.remote_task_id,
            "remote_context_id": self.remote_context_id,
            "card_fingerprint": self.card_fingerprint,
        }
        identity.update(fields)
        return DelegationEvent(kind=kind, **identity)

    @property
    def stream_key(self) -> str:
        """Which producer stream the event belongs to: its delegation, or '' for the parent."""
        return self.delegation_id or ""
