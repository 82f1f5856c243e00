"""Redaction of configured secrets from anything the engine shows (events, results, errors).

`Redactor` holds the credential values a host configured (`AgentSpec.secrets`) and replaces
each occurrence in strings, and recursively in JSON-like values, with `[REDACTED]`. With no
secrets configured it costs one attribute check. It cannot see a secret split across two
deltas of a stream; targets must never send credentials to a remote that could echo them
piecewise, and adapters redact whole remote documents before splitting them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

__all__ = ["REDACTED", "Redactor"]

REDACTED: Final = "[REDACTED]"
#: Values shorter than this are not treated as secrets (they would redact ordinary words).
MIN_SECRET_LENGTH: Final = 6


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets: tuple[str, ...] = tuple(
            sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        )

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets replaced in every string (keys included)."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
