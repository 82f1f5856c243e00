"""Text from outside made safe to show: configured secrets redacted, text made valid Unicode.

Whatever the engine shows (events, results, errors, log lines) may carry text a remote agent, a
parent agent or a host gave it. This module owns the two rules that text passes where it enters
the engine, and decides nothing else about it. It is the checkout's one redactor: the adapters
only say which values are secret (a remote's credential, a CLI parent's run token and model key,
the MCP sessions' ids in the MCP SDK's log lines) and redact them with `Redactor`.

Secrets. `Redactor` holds the credential values a host configured (`AgentSpec.secrets`) and
replaces each occurrence with `[REDACTED]`, in strings and recursively in JSON-like values and
attrs models (keys included; an event's kind and an error's code are the engine's vocabulary,
so they are only made valid). Every configured value is redacted, whatever its length: a
credential that leaks because it is short is still a credential. One of `SHORT_SECRET_CHARS`
characters or more is replaced wherever it occurs; a shorter one only where it stands as a
token of its own (no letter, digit or underscore glued to it on a side where it starts or ends
with one), so that a host whose test token is `abc` sees `token=[REDACTED]` but not
`[REDACTED]def` for `abcdef`. The registry warns when such a credential is registered: a remote
that glues it to other text shows it. Matching is one pass, leftmost first and, where several
secrets start at one place, the longest (a regular expression of the secrets, longest first),
so the outcome does not depend on the order in which secrets were configured.

Streams. A secret split across two deltas of one message (`"sec" + "ret-token"`) is in neither,
yet a viewer gets adjacent deltas merged (the lanes merge them under pressure, the AG-UI encoder
writes one event per message and batch). `RedactedStream` redacts a stream as the one text it
is: each piece is released at once except the shortest tail that could still grow into a secret
(a prefix of one, or a short secret that waits for the character after it), held until the next
piece or the stream's end. What it releases, concatenated, is exactly `Redactor.text` of the
whole stream, so no piece, and no merge of adjacent pieces, holds a secret.

Unicode. JSON can spell an unpaired UTF-16 surrogate (`"\\ud800"`, RFC 8259 section 8.2) and
Python's `json.loads` gives it back as a `str` holding U+D800, which no UTF-8 encoder accepts:
one such character journaled would make every later write of the run's stream raise.
`valid_text` and `valid_value` read a string as the UTF-16 it stands for: an unpaired surrogate
becomes U+FFFD and a pair of surrogates the character they spell. ASCII text costs one flag
check; `Redactor.text` applies it before redacting.

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
    "RedactedStream",
    "Redactor",
    "is_valid_unicode",
    "valid_text",
    "valid_value",
]

REDACTED: Final = "[REDACTED]"
#: Secrets shorter than this are redacted only where they stand as a token of their own.
SHORT_SECRET_CHARS: Final = 6
#: Fields of the engine's models that hold its own vocabulary (an event kind, an error code):
#: made valid Unicode but never redacted, since rules dispatch on them and a short secret may
#: well be a word of one.
VOCABULARY_FIELDS: Final = frozenset({"kind", "code"})

_WORD: Final = re.compile(r"\w")


# -- valid Unicode ---------------------------------------------------------------------------


def valid_text(text: str) -> str:
    """`text` with every unpaired surrogate replaced by U+FFFD (and a pair joined)."""
    if text.isascii():  # a flag of the string object: no scan
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _valid(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_valid_unicode(value: Any) -> bool:
    """Whether every string in `value` (JSON-like, or an attrs model such as `ArtifactRef`)
    encodes as UTF-8. Nothing is copied."""
    if isinstance(value, str):
        return _valid(value)
    if value is None or isinstance(value, int | float):
        return True
    if isinstance(value, dict):
        return all(is_valid_unicode(k) and is_valid_unicode(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(is_valid_unicode(item) for item in value)
    if attrs.has(value.__class__):
        return all(is_valid_unicode(getattr(value, f.name)) for f in attrs.fields(value.__class__))
    return True


def valid_value(value: Any) -> Any:
    """`value` with `valid_text` applied to every string (see `Redactor.value`)."""
    return _PLAIN.value(value)


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
    """The configured secrets, redacted from text and JSON-like values; always valid Unicode.

    Falsy when no secret is configured (empty values are ignored). Immutable once built.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: the pattern tries its branches in order, so where two secrets start
        # at one place the longer one is replaced whole.
        values = sorted({valid_text(s) for s in secrets if s}, key=len, reverse=True)
        self.secrets: tuple[str, ...] = tuple(values)
        self.longest = len(values[0]) if values else 0
        self._pattern = re.compile("|".join(map(_alternative, values))) if values else None
        # What `RedactedStream` needs to find a tail that could still become a secret.
        self._by_initial: dict[str, list[str]] = {}
        for secret in values:
            self._by_initial.setdefault(secret[0], []).append(secret)
        self._initials = re.compile(
            "[" + "".join(re.escape(c) for c in self._by_initial) + "]" if values else "(?!)"
        )
        #: Short secrets that end with a word character: a match needs the character after it.
        self._wait_after = frozenset(
            s for s in values if len(s) < SHORT_SECRET_CHARS and _WORD.match(s[-1])
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        value = valid_text(value)
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
        `VOCABULARY_FIELDS` only made valid Unicode (what `attrs.evolve` takes)."""
        out = {}
        for name in _init_fields(model.__class__):
            item = getattr(model, name)
            if item is None or item.__class__ is int or item.__class__ is bool:
                continue
            if name in VOCABULARY_FIELDS and isinstance(item, str):
                out[name] = valid_text(item)
            else:
                out[name] = self.value(item)
        return out

    def stream(self) -> RedactedStream:
        """A new stream of pieces to redact as one text (see `RedactedStream`)."""
        return RedactedStream(self)

    # -- streams: what `RedactedStream` calls --------------------------------------------

    def _unsettled(self, text: str, start: int) -> int:
        """The first position from `start` where a match could still begin if more text came
        (`len(text)` if none): the tail from there is a proper prefix of a secret, or a whole
        short secret that waits for the character after it."""
        end = len(text)
        by_initial = self._by_initial
        wait_after = self._wait_after
        for found in self._initials.finditer(text, max(start, end - self.longest)):
            at = found.start()
            tail = text[at:]
            for secret in by_initial[tail[0]]:
                if len(tail) < len(secret):
                    if secret.startswith(tail):
                        return at
                elif secret in wait_after and tail == secret:
                    return at
        return end

    def _release(self, text: str, start: int, final: bool) -> tuple[str, int]:
        """Redact `text[start:]` (what comes before is context for token boundaries) up to
        where matching could still change, or to the end when `final`. Returns the redacted
        text and how far into `text` it reaches."""
        assert self._pattern is not None
        end = len(text)
        hold = end if final else self._unsettled(text, start)
        out: list[str] = []
        at = start
        for match in self._pattern.finditer(text, start):
            if match.start() >= hold:
                break
            out.append(text[at : match.start()])
            out.append(REDACTED)
            at = match.end()
            if at > hold:  # a settled match ran past the hold: look again from its end
                hold = end if final else self._unsettled(text, at)
        out.append(text[at:hold])
        return "".join(out), hold


# The Unicode half of a redactor: what `valid_value` applies.
_PLAIN: Final = Redactor()


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls) if f.init)


class RedactedStream:
    """One stream of text pieces (a message's deltas) redacted as the one text it is.

    `feed(piece)` returns what may be shown now (possibly ""); `close()` returns the rest. What
    they return, concatenated, is `Redactor.text` of the pieces joined (each piece made valid
    Unicode on its own), so no piece and no merge of adjacent pieces holds a secret. At most a
    tail shorter than the longest secret (or a whole short secret, until the character after
    it arrives) is held between calls; nothing is ever dropped.
    """

    __slots__ = ("_before", "_held", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        if not redactor:
            raise ValueError("a stream needs a redactor with secrets")
        self._redactor = redactor
        self._held = ""  # raw text not released yet
        self._before = ""  # the raw character before it: token boundaries look at it

    @property
    def held(self) -> str:
        """The raw tail held back (never shown before `feed` or `close` releases it)."""
        return self._held

    def feed(self, piece: str) -> str:
        text = self._before + self._held + valid_text(piece)
        released, cut = self._redactor._release(text, len(self._before), final=False)
        self._held = text[cut:]
        if cut:
            self._before = text[cut - 1]
        return released

    def close(self) -> str:
        if not self._held:
            return ""
        text = self._before + self._held
        released, _ = self._redactor._release(text, len(self._before), final=True)
        self._held = self._before = ""
        return released
