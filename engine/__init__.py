"""subagent-engine's protocol-neutral core: events, lanes, the run journal and the actor tree.

Embed it with `engine.open_run()` (a private engine for one run) or `Engine` (many runs):

    async with engine.open_run(agents) as run:
        result = await run.delegate(engine.DelegationRequest(agent="research", objective="..."))
        async for entry in run.events():
            ...

Nothing in this package imports a protocol SDK or a web framework; adapters translate. Its spans
use only the OpenTelemetry API (`engine._tracing`), recorded when the host gives a provider.
"""

from engine._actors import DelegationActor, DelegationHandle, Engine, Run, RunActor, open_run
from engine._archive import (
    ARCHIVE_FORMAT_VERSION,
    DelegationAudit,
    DelegationAudits,
    MemoryRunArchive,
    RunArchive,
    RunRecord,
    SharedRunArchive,
)
from engine._correlation import (
    AmbiguousCorrelation,
    Correlation,
    ParentToolCalls,
    is_delegation_tool,
)
from engine._delegation import DelegationIdentity, DelegationState
from engine._endpoint import RunEndpoint, RunEndpointError, RunEndpointProvider
from engine._events import (
    CRITICAL,
    IMPORTANT,
    VOLATILE,
    DelegationEvent,
    DropReport,
    Kind,
    is_terminal,
    lane_of,
)
from engine._journal import (
    CursorError,
    JournalStatistics,
    JournalStore,
    JournalTail,
    MemoryJournalStore,
    RunJournal,
    Subscription,
)
from engine._lanes import JournalEntry, LaneBuffer, LaneStatistics, event_weight
from engine._oplog import RUN_LOG, render_fields
from engine._parent_view import (
    OutputPage,
    OutputReference,
    ParentView,
    delegation_output,
    output_page,
    parent_view,
)
from engine._questions import (
    AnswerSurface,
    Question,
    QuestionOutcome,
    QuestionReason,
    check_answer,
)
from engine._recovery import RecoveredDelegation, RecoveredRun, recover_runs
from engine._redact import REDACTED, RedactedStream, Redactor, valid_text, valid_value
from engine._registry import (
    AgentSpec,
    ContextPolicy,
    DelegationPolicy,
    DelegationRequest,
    Elicitation,
    ElicitationDeclined,
    EngineLimits,
    InputExpiry,
    InputRequiredMode,
    Registry,
    RegistryError,
)
from engine._results import (
    DEFAULT_MAX_RESULT_CHARS,
    MIN_RESULT_CHARS,
    ArtifactRef,
    DelegationError,
    DelegationResult,
    ErrorCode,
    InputArtifact,
    RemoteCancel,
    ResultMessage,
    Status,
)
from engine._stats import DELEGATION_STATUSES as METRIC_STATUSES
from engine._stats import ERROR_CODES as METRIC_ERROR_CODES
from engine._stats import NONE as METRIC_NONE
from engine._stats import OTHER as METRIC_OTHER
from engine._stats import RECOVERY_REASONS as METRIC_RECOVERY_REASONS
from engine._stats import REMOTE_CANCELS as METRIC_REMOTE_CANCELS
from engine._stats import RUN_OUTCOMES as METRIC_RUN_OUTCOMES
from engine._stats import EngineStatistics
from engine._store import (
    LifecycleRetention,
    RetentionPolicy,
    StoreUnavailableError,
    gap_entry,
    replay_before_window,
)
from engine._targets import (
    AgentDescription,
    Answer,
    BaseTarget,
    BaseTargetSession,
    DelegationTask,
    Emit,
    RemoteTaskRef,
    Target,
    TargetCapabilities,
    TargetPrepareError,
    TargetSession,
    TargetUpdate,
)
from engine._tool_input import (
    AGENT_KEY_PATTERN,
    TOOL_INPUT_SCHEMA,
    ToolInput,
    is_agent_key,
    parse_tool_input,
    tool_input_schema,
)
from engine._tracing import (
    SPAN_KINDS,
    Tracing,
    note_remote_method,
    outgoing_trace_headers,
    parent_context,
)
from engine._wire import (
    WireError,
    event_from_json,
    event_from_jsonable,
    result_from_json,
    result_from_jsonable,
    to_json,
    to_jsonable,
)

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "MIN_RESULT_CHARS",
    "OutputPage",
    "OutputReference",
    "ParentView",
    "delegation_output",
    "output_page",
    "parent_view",
    "render_fields",
    "ARCHIVE_FORMAT_VERSION",
    "DelegationAudit",
    "DelegationAudits",
    "MemoryRunArchive",
    "RecoveredDelegation",
    "RecoveredRun",
    "RemoteTaskRef",
    "recover_runs",
    "RunArchive",
    "RunRecord",
    "SharedRunArchive",
    "AGENT_KEY_PATTERN",
    "CRITICAL",
    "IMPORTANT",
    "REDACTED",
    "VOLATILE",
    "AgentDescription",
    "AgentSpec",
    "AmbiguousCorrelation",
    "Answer",
    "AnswerSurface",
    "Elicitation",
    "ElicitationDeclined",
    "InputExpiry",
    "Question",
    "QuestionOutcome",
    "QuestionReason",
    "BaseTarget",
    "BaseTargetSession",
    "ContextPolicy",
    "ArtifactRef",
    "Correlation",
    "CursorError",
    "DelegationActor",
    "DelegationError",
    "DelegationEvent",
    "DelegationHandle",
    "DelegationIdentity",
    "DelegationPolicy",
    "DelegationRequest",
    "DelegationResult",
    "DelegationState",
    "DelegationTask",
    "DropReport",
    "Emit",
    "Engine",
    "EngineLimits",
    "EngineStatistics",
    "ErrorCode",
    "InputArtifact",
    "InputRequiredMode",
    "JournalEntry",
    "JournalStatistics",
    "JournalStore",
    "JournalTail",
    "Kind",
    "METRIC_ERROR_CODES",
    "METRIC_NONE",
    "METRIC_OTHER",
    "METRIC_RECOVERY_REASONS",
    "METRIC_REMOTE_CANCELS",
    "METRIC_RUN_OUTCOMES",
    "METRIC_STATUSES",
    "LaneBuffer",
    "LaneStatistics",
    "LifecycleRetention",
    "MemoryJournalStore",
    "ParentToolCalls",
    "RedactedStream",
    "Redactor",
    "Registry",
    "RUN_LOG",
    "RegistryError",
    "RemoteCancel",
    "RetentionPolicy",
    "ResultMessage",
    "Run",
    "RunActor",
    "RunEndpoint",
    "RunEndpointError",
    "RunEndpointProvider",
    "RunJournal",
    "Status",
    "StoreUnavailableError",
    "Subscription",
    "Target",
    "TargetCapabilities",
    "TargetPrepareError",
    "TargetSession",
    "TargetUpdate",
    "SPAN_KINDS",
    "Tracing",
    "note_remote_method",
    "outgoing_trace_headers",
    "parent_context",
    "TOOL_INPUT_SCHEMA",
    "ToolInput",
    "WireError",
    "check_answer",
    "event_from_json",
    "event_from_jsonable",
    "event_weight",
    "gap_entry",
    "is_delegation_tool",
    "is_agent_key",
    "is_terminal",
    "lane_of",
    "open_run",
    "parse_tool_input",
    "replay_before_window",
    "result_from_json",
    "result_from_jsonable",
    "to_json",
    "to_jsonable",
    "tool_input_schema",
    "valid_text",
    "valid_value",
]
