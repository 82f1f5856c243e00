"""Host-curated agents and the policy that bounds every delegation to them.

This module owns what a host declares: which agent keys exist (`AgentSpec`, `Registry`), what
each may do (`DelegationPolicy`), the engine-wide limits (`EngineLimits`) and the request a
delegation starts from (`DelegationRequest`). The model only ever names a key; endpoints,
credentials and policy come from here. Targets are opaque objects implementing
`engine._targets.Target`: this module never asks what protocol one speaks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from engine._redact import SHORT_SECRET_CHARS
from engine._results import (
    DEFAULT_MAX_RESULT_CHARS,
    MIN_RESULT_CHARS,
    DelegationError,
    ErrorCode,
    InputArtifact,
)
from engine._tool_input import AGENT_KEY_PATTERN, ToolInput, is_agent_key

if TYPE_CHECKING:
    from engine._targets import Target

__all__ = [
    "AgentSpec",
    "ContextPolicy",
    "DelegationPolicy",
    "DelegationRequest",
    "EngineLimits",
    "InputRequiredMode",
    "Registry",
    "RegistryError",
]


log: Final = logging.getLogger("subagent_engine")


class RegistryError(ValueError):
    """A host configuration mistake in the registry (bad or duplicate key, bad policy)."""


class ContextPolicy:
    """Which remote context a delegation continues. Results always report the one used."""

    #: A new remote context for every delegation (the safe default).
    EPHEMERAL: Final = "ephemeral"
    #: Reuse the remote context of the same agent within one run.
    STICKY_PER_RUN_AGENT: Final = "sticky_per_run_agent"
    #: Reuse it across runs of the same parent thread (`Engine.open_run(thread_id=...)`).
    STICKY_PER_PARENT_THREAD_AGENT: Final = "sticky_per_parent_thread_agent"

    ALL: Final = frozenset({EPHEMERAL, STICKY_PER_RUN_AGENT, STICKY_PER_PARENT_THREAD_AGENT})


def _context_policy(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ContextPolicy.ALL:
        raise RegistryError(f"{attribute.name} must be one of {sorted(ContextPolicy.ALL)}")


class InputRequiredMode:
    """What a delegation does when its remote asks for more input."""

    #: End the delegation with `input_required_unsupported` (the safe default).
    FAIL: Final = "fail"
    #: Emit `subagent.input_required` and wait, bounded, for `Run.answer(...)`.
    SURFACE: Final = "surface"
    #: End the delegation with status `input_required` so the parent model can decide.
    RETURN: Final = "return"

    ALL: Final = frozenset({FAIL, SURFACE, RETURN})


class InputExpiry:
    """What a delegation does when its question expires unanswered (or a person declines)."""

    #: Fail with error `input_required`.
    FAIL: Final = "fail"
    #: End with status `input_required`, so the parent model decides what next.
    RETURN: Final = "return"

    ALL: Final = frozenset({FAIL, RETURN})


class Elicitation:
    """Whether the engine may ask the parent's user through MCP elicitation."""

    OFF: Final = "off"
    ASK: Final = "ask"

    ALL: Final = frozenset({OFF, ASK})


class ElicitationDeclined:
    """What a declined (or unsupported) MCP elicitation does: `fail` or `return` as for an
    expired question (`InputExpiry`), or `wait` for another surface to answer."""

    FAIL: Final = "fail"
    RETURN: Final = "return"
    WAIT: Final = "wait"

    ALL: Final = frozenset({FAIL, RETURN, WAIT})


def _one_of(allowed: frozenset[str]) -> Callable[[Any, attrs.Attribute[Any], str], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in allowed:
            raise RegistryError(f"{attribute.name} must be one of {sorted(allowed)}")

    return check


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise RegistryError(f"{attribute.name} must be positive, got {value!r}")


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise RegistryError(f"{attribute.name} must not be negative, got {value!r}")


#: The most `max_text_chars` a host may set: a result keeps its delegation's whole text, and a
#: run store must read a result's JSON back (up to 6 characters per character, `\u0000`)
#: within its document bound (`engine._wire.MAX_RESULT_DOCUMENT_CHARS`, 64 Mi characters).
MAX_TEXT_CHARS_CEILING: Final = 8_000_000


def _text_chars(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= MAX_TEXT_CHARS_CEILING:
        raise RegistryError(
            f"{attribute.name} must be from 0 to {MAX_TEXT_CHARS_CEILING:,} characters, "
            f"got {value!r}"
        )


#: The deepest `max_nesting_depth` a host may set (a bound on what one stream can hold).
MAX_NESTING_DEPTH: Final = 16


def _nesting_depth(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if type(value) is not int or not 0 <= value <= MAX_NESTING_DEPTH:
        raise RegistryError(
            f"{attribute.name} must be an integer from 0 to {MAX_NESTING_DEPTH}, got {value!r}"
        )


def _input_mode(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in InputRequiredMode.ALL:
        raise RegistryError(f"{attribute.name} must be one of {sorted(InputRequiredMode.ALL)}")


@attrs.frozen(kw_only=True)
class DelegationPolicy:
    """Bounds on one agent's delegations. Times are seconds; zero counts mean "none allowed".

    `default_timeout` applies when the model asks for none; a model's `timeout_seconds` is
    clamped to `max_timeout`. `cancel_timeout` bounds the shielded remote cancel; after it the
    delegation reports `cancel_pending` and the engine keeps retrying the cancel in the
    background for `cancel_retry_window`, so a remote task is still cancelled when its run is
    gone. `input_wait_timeout` bounds the wait for an answer.
    """

    default_timeout: float = attrs.field(default=120.0, validator=_positive)
    max_timeout: float = attrs.field(default=600.0, validator=_positive)
    cancel_timeout: float = attrs.field(default=5.0, validator=_positive)
    #: After an unconfirmed cancel, the engine keeps retrying it this long (0: give up at once).
    cancel_retry_window: float = attrs.field(default=60.0, validator=_non_negative)
    poll_interval: float = attrs.field(default=1.0, validator=_positive)
    max_polls: int = attrs.field(default=100_000, validator=_non_negative)
    stream_recovery_attempts: int = attrs.field(default=1, validator=_non_negative)
    require_streaming: bool = False
    #: When a streaming send is refused before the remote accepted the task, send it again
    #: without streaming and poll (a target that supports it says so through `session.streaming`).
    fallback_to_polling: bool = True
    input_required: str = attrs.field(default=InputRequiredMode.FAIL, validator=_input_mode)
    input_wait_timeout: float = attrs.field(default=300.0, validator=_positive)
    #: What an unanswered question does when `input_wait_timeout` passes (`InputExpiry`).
    on_input_expiry: str = attrs.field(default=InputExpiry.FAIL, validator=_one_of(InputExpiry.ALL))
    #: Ask the parent's user through MCP elicitation when a question opens (`Elicitation`).
    elicitation: str = attrs.field(default=Elicitation.OFF, validator=_one_of(Elicitation.ALL))
    #: What a declined or unsupported elicitation does (`ElicitationDeclined`).
    on_elicitation_declined: str = attrs.field(
        default=ElicitationDeclined.WAIT, validator=_one_of(ElicitationDeclined.ALL)
    )
    max_artifacts: int = attrs.field(default=20, validator=_non_negative)
    max_artifact_bytes: int = attrs.field(default=10 << 20, validator=_non_negative)
    max_summary_chars: int = attrs.field(default=4000, validator=_non_negative)
    #: Streamed text and reasoning of one delegation, in characters (`output_too_large` past it).
    max_text_chars: int = attrs.field(default=4_000_000, validator=_text_chars)
    #: What the parent model reads of one result, in characters (text and structured JSON
    #: each); output past it is served on demand by reference (`engine._parent_view`).
    max_result_chars: int = attrs.field(default=DEFAULT_MAX_RESULT_CHARS)
    allow_remote_artifacts: bool = True
    context_policy: str = attrs.field(default=ContextPolicy.EPHEMERAL, validator=_context_policy)
    max_nesting_depth: int = attrs.field(default=2, validator=_nesting_depth)

    @max_result_chars.validator
    def _check_result_chars(self, attribute: attrs.Attribute[Any], value: int) -> None:
        if value < MIN_RESULT_CHARS:
            raise RegistryError(
                f"{attribute.name} must be at least {MIN_RESULT_CHARS} (room for the ids, "
                f"status and error), got {value!r}"
            )

    def effective_timeout(self, requested: float | None) -> float:
        """The timeout a delegation gets: the request's (or `default_timeout`), clamped to
        `max_timeout`. A host that lowers only `max_timeout` lowers the default with it."""
        if requested is None:
            return min(self.default_timeout, self.max_timeout)
        return min(max(float(requested), 0.001), self.max_timeout)


@attrs.frozen(kw_only=True)
class EngineLimits:
    """Engine-wide bounds. Excess delegations get `concurrency_limit`, never a hang."""

    max_concurrent_per_run: int = attrs.field(default=8, validator=_positive)
    max_concurrent_global: int = attrs.field(default=256, validator=_positive)
    replay_window_events: int = attrs.field(default=10_000, validator=_positive)
    replay_window_bytes: int = attrs.field(default=8 << 20, validator=_positive)
    subscriber_buffer_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    run_mailbox_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    #: Closed runs whose journals and results stay readable (for reconnecting viewers).
    retained_closed_runs: int = attrs.field(default=64, validator=_non_negative)
    #: How long opening the engine waits for its targets to prepare (fetch their cards); one
    #: not ready by then is prepared again before its first delegation.
    prepare_timeout: float = attrs.field(default=10.0, validator=_positive)


def _agent_key(_: Any, __: Any, value: str) -> None:
    # One definition of a key for the registry and the tool input the model sends.
    if not is_agent_key(value):
        raise RegistryError(
            f"agent key {value!r} must match {AGENT_KEY_PATTERN} (lowercase, no URL)"
        )


@attrs.frozen(kw_only=True)
class AgentSpec:
    """One host-registered agent a model may delegate to, by `key` only.

    `secrets` lists credential values the engine must never let into an event, a result or a
    log line (adapters add what they resolve from the environment); they are redacted wherever
    a remote's text is copied into an error. Every value is redacted; one shorter than
    `SHORT_SECRET_CHARS` only where it stands as a token of its own (see `engine._redact`), and
    registering it logs a warning.

    `read_only` is the host's word that a delegation to this agent changes nothing outside it
    (it reads, searches, answers), so two of them may run in either order or at once: parent
    CLIs then run several delegations of one model turn in parallel (the MCP tools say so with
    `readOnlyHint`). The engine does not check it; the default (False) is the safe one.
    """

    key: str = attrs.field(validator=_agent_key)
    target: Target
    display_name: str = ""
    description: str = ""
    protocol: str = "inprocess"
    skills: tuple[str, ...] = ()
    policy: DelegationPolicy = attrs.field(factory=DelegationPolicy)
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    read_only: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @property
    def name(self) -> str:
        return self.display_name or self.key

    @property
    def all_secrets(self) -> tuple[str, ...]:
        """`secrets` plus what the target says it sends (`Target.secrets`), so a host that
        forgets to copy a target's credentials here is still covered."""
        return tuple(dict.fromkeys((*self.secrets, *self.target.secrets)))


class Registry:
    """The host's agents by key. Keys are unique; lookups of unknown keys raise a typed error.

    Safe for concurrent reads; register everything before runs start delegating.
    """

    def __init__(self, agents: Iterable[AgentSpec] = ()) -> None:
        self._agents: dict[str, AgentSpec] = {}
        for spec in agents:
            self.register(spec)

    def register(self, spec: AgentSpec) -> None:
        if not isinstance(spec, AgentSpec):
            raise RegistryError(f"expected an AgentSpec, got {type(spec).__name__}")
        if spec.key in self._agents:
            raise RegistryError(f"agent key {spec.key!r} is registered twice")
        self._agents[spec.key] = spec
        short = [s for s in spec.all_secrets if 0 < len(s) < SHORT_SECRET_CHARS]
        if short:
            # Never the value itself: only how short it is.
            log.warning(
                "agent %r: a configured credential is only %d characters long, too short to "
                "be safe: it is redacted only where it stands as a token of its own, so a "
                "remote that glues it to other text shows it. Use a credential of at least "
                "%d characters (a random token of 32 or more is better).",
                spec.key,
                min(map(len, short)),
                SHORT_SECRET_CHARS,
            )

    def lookup(self, key: str) -> AgentSpec:
        """The agent under `key`, or `DelegationError(agent_not_found)` naming the known keys."""
        spec = self._agents.get(key)
        if spec is None:
            known = ", ".join(sorted(self._agents)) or "none"
            raise DelegationError(
                code=ErrorCode.AGENT_NOT_FOUND,
                message=f"No agent is registered under {key[:64]!r}; registered keys: {known}.",
            )
        return spec

    def keys(self) -> list[str]:
        return sorted(self._agents)

    def secrets(self) -> frozenset[str]:
        """Every configured credential value, for redaction."""
        return frozenset(s for spec in self._agents.values() for s in spec.all_secrets if s)

    def __contains__(self, key: object) -> bool:
        return key in self._agents

    def __iter__(self) -> Iterator[AgentSpec]:
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)


@attrs.frozen(kw_only=True)
class DelegationRequest:
    """One host-authorized delegation: an agent key and what to ask it.

    Built from validated tool input (`DelegationRequest.from_tool_input`) or directly by a host.
    `timeout_seconds` is clamped by the agent's policy; `parent_tool_call_id` ties the
    delegation's events to the parent's tool call (strong correlation).
    """

    agent: str
    objective: str
    prompt: str | None = None
    context: str | None = None
    artifacts: tuple[InputArtifact, ...] = ()
    timeout_seconds: float | None = None
    stream: bool | None = None
    max_artifacts: int | None = None
    history_length: int | None = None
    parent_tool_call_id: str | None = None
    tenant: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_tool_input(
        cls, tool_input: ToolInput, *, parent_tool_call_id: str | None = None
    ) -> DelegationRequest:
        """A request from a validated `ToolInput` (see `engine.parse_tool_input`)."""
        return cls(
            agent=tool_input.agent,
            objective=tool_input.objective,
            prompt=tool_input.prompt,
            context=tool_input.context,
            artifacts=tuple(tool_input.artifacts),
            timeout_seconds=tool_input.timeout_seconds,
            stream=tool_input.stream,
            max_artifacts=tool_input.max_artifacts,
            history_length=tool_input.history_length,
            parent_tool_call_id=parent_tool_call_id,
        )
