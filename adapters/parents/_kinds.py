"""The parent kinds: the one declaration of the names a host uses to pick a run's parent.

A parent kind is named in the host TOML (`[parent] kind`), by `a2a-serve --parent` and by
`demo --parent` / `--remote`; each of those reads its value through `parent_kind`, so they all
accept the same spellings and mean the same parent by them.

- `scripted`: the scripted parent (no model).
- `claude-code`: the Claude Code CLI. `claude`, the name of its binary, is an alias: the demo
  has always taken `--parent claude`, and a host may have written it anywhere a kind goes.
- `codex`: the Codex CLI.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLAUDE_CODE",
    "CLI_PARENT_KINDS",
    "CODEX",
    "PARENT_KINDS",
    "PARENT_KIND_ALIASES",
    "PARENT_KIND_NAMES",
    "SCRIPTED",
    "parent_kind",
    "parent_kinds_text",
]

SCRIPTED: Final = "scripted"
CLAUDE_CODE: Final = "claude-code"
CODEX: Final = "codex"
#: Every parent kind, by its canonical name; the default first.
PARENT_KINDS: Final = (SCRIPTED, CLAUDE_CODE, CODEX)
#: The kinds whose parent is a CLI run as a process, with a model behind it.
CLI_PARENT_KINDS: Final = (CLAUDE_CODE, CODEX)
#: Other accepted spellings, and the kind each stands for.
PARENT_KIND_ALIASES: Final = {"claude": CLAUDE_CODE}
#: Every spelling a parent kind may be given in: the kinds, then their aliases.
PARENT_KIND_NAMES: Final = (*PARENT_KINDS, *PARENT_KIND_ALIASES)


def parent_kind(name: str) -> str:
    """The parent kind `name` spells (a kind, or an alias: `claude` is `claude-code`);
    `ValueError` naming the kinds for anything else."""
    kind = PARENT_KIND_ALIASES.get(name, name)
    if kind not in PARENT_KINDS:
        raise ValueError(f"unknown parent kind {name!r}: use one of {parent_kinds_text()}")
    return kind


def parent_kinds_text(kinds: tuple[str, ...] = PARENT_KINDS) -> str:
    """`kinds` for a message, each with its aliases: `scripted, claude-code (or claude), codex`."""
    words = []
    for kind in kinds:
        aliases = [alias for alias, target in PARENT_KIND_ALIASES.items() if target == kind]
        words.append(f"{kind} (or {', '.join(aliases)})" if aliases else kind)
    return ", ".join(words)
