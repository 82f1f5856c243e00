"""Parent agents: what drives a run and calls `delegate_to_agent`.

The scripted parent (no model), and the Claude Code and Codex CLIs run as a run's parent: their
output parsers are sans-IO (`ClaudeStreamParser`, `CodexJsonlParser`), the process they run in is
driven by one module (`adapters.parents._process`) for both.

The kinds a host names them by (`[parent] kind`, `--parent`) are declared here only
(`PARENT_KINDS`, canonical `scripted`, `claude-code`, `codex`; `claude` is accepted as an alias
of `claude-code`): read a kind with `parent_kind`.
"""

from adapters.parents._agent import ParentAgent
from adapters.parents._claude_code import (
    ClaudeCodeConfig,
    ClaudeCodeParent,
    ClaudeStreamParser,
    claude_command,
)
from adapters.parents._codex import (
    CodexConfig,
    CodexJsonlParser,
    CodexParent,
    codex_command,
)
from adapters.parents._kinds import (
    CLAUDE_CODE,
    CLI_PARENT_KINDS,
    CODEX,
    PARENT_KIND_ALIASES,
    PARENT_KIND_NAMES,
    PARENT_KINDS,
    SCRIPTED,
    parent_kind,
    parent_kinds_text,
)
from adapters.parents._process import (
    STATUS_EVENT,
    TOKEN_ENV,
    CliConfig,
    ParentEvent,
    ParentOutcome,
    ParentProcessError,
    Verdict,
    probe_model_endpoint,
)
from adapters.parents._scripted import (
    DEFAULT_SCRIPT,
    Answer,
    Ask,
    Delegate,
    Say,
    ScriptedParent,
    Think,
    result_gist,
)

__all__ = [
    "CLAUDE_CODE",
    "CLI_PARENT_KINDS",
    "CODEX",
    "DEFAULT_SCRIPT",
    "PARENT_KINDS",
    "PARENT_KIND_ALIASES",
    "PARENT_KIND_NAMES",
    "SCRIPTED",
    "STATUS_EVENT",
    "TOKEN_ENV",
    "Answer",
    "Ask",
    "ClaudeCodeConfig",
    "ClaudeCodeParent",
    "ClaudeStreamParser",
    "CliConfig",
    "CodexConfig",
    "CodexJsonlParser",
    "CodexParent",
    "Delegate",
    "ParentAgent",
    "ParentEvent",
    "ParentOutcome",
    "ParentProcessError",
    "Say",
    "ScriptedParent",
    "result_gist",
    "Think",
    "Verdict",
    "claude_command",
    "codex_command",
    "parent_kind",
    "parent_kinds_text",
    "probe_model_endpoint",
]
