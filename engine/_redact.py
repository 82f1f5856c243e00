"""Redaction of configured secrets from anything the engine shows (events, results, errors).

`Redactor` holds the credential values a host configured (`AgentSpec.secrets`) and
replaces each occurrence with `[REDACTED]`, in strings and recursively in JSON-like values and
attrs models (keys included; an event's kind and an error's code are the engine's vocabulary,
so they are left as they are). Every configured value is redacted, whatever its length: a
credential that leaks because it is short is still a credential. One of `SHORT_SECRET_CHARS`
characters or more is replaced wherever it occurs; a shorter one only where it stands as a
token of its own (no letter, digit or underscore glued to it on a side where it starts or ends
with one), so that a host whose test token is `abc` sees `token=[REDACTED]` but not
`[REDACTED]def` for `abcdef`. The registry warns when such a credential is registered: a remote
that glues it to other text shows it. Matching is one pass, leftmost first and, where several
secrets start at one place, the longest (a regular expression of the secrets, longest first),
so the outcome does not depend on the order in which secrets were configured. It cannot see a
secret split across two deltas of a stream; targets must never send credentials to a remote that
could echo them piecewise, and adapters redact whole remote documents before splitting them.

With no secrets configured a `Redactor` is falsy, and callers on a hot path skip it with one
attribute check.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any, Final

import attrs

__all__ = [
    "REDACTED",
    "SHORT_SECRET_CHARS",
    "VOCABULARY_FIELDS",
    "Redactor",
]

REDACTED: Final = "[REDACTED]"
#: Secrets shorter than this are redacted only where they stand as a token of their own.
SHORT_SECRET_CHARS: Final = 6
#: Fields of the engine's models that hold its own vocabulary (an event kind, an error code):
#: never redacted, since rules dispatch on them and a short secret may
#: well be a word of one.
VOCABULARY_FIELDS: Final = frozenset({"kind", "code"})

_WORD: Final = re.compile(r"\w")


# -- secrets ---------------------------------------------------------------------------------


def _alternative(secret: str) -> str:
    """A secret as one branch of the redaction pattern: short ones only as their own token."""
    literal = re.escape(secret)
    if len(secret) >= SHORT_SECRET_CHARS:
        return literal
    before = r"(?<!\w)" if _WORD.match(secret[0]) else ""
    after = r"(?!\w)" if _WORD.match(secret[-1]) else ""
    return before + literal + after


class Redactor:
    """The configured secrets, redacted from text and JSON-like values.

    Falsy when no secret is configured (empty values are ignored). Immutable once built.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: the pattern tries its branches in order, so where two secrets start
        # at one place the longer one is replaced whole.
        values = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.secrets: tuple[str, ...] = tuple(values)
        self._pattern = re.compile("|".join(map(_alternative, values))) if values else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(REDACTED, value)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string cleaned by `text` (keys included);
        attrs models (`ArtifactRef`, `DelegationError`) are rebuilt from `fields`."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if attrs.has(value.__class__):
            return attrs.evolve(value, **self.fields(value))
        return value

    def fields(self, model: Any) -> dict[str, Any]:
        """An attrs model's fields that hold something, each cleaned by `value`;
        `VOCABULARY_FIELDS` as they are (what `attrs.evolve` takes)."""
        out = {}
        for name in _init_fields(model.__class__):
            item = getattr(model, name)
            if item is None or item.__class__ is int or item.__class__ is bool:
                continue
            out[name] = item if name in VOCABULARY_FIELDS else self.value(item)
        return out


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls) if f.init)
