"""Agent Cards: what a remote A2A agent says it is, checked before any delegation (sans-IO).

This module owns the engine's reading of an Agent Card: `validate_card` turns a card (the JSON
document the agent serves, A2A 1.0 or v0.3, or an `a2a.types.AgentCard` the SDK already parsed)
into a small frozen `CardInfo`, or refuses it with a typed `DelegationError(agent_unavailable,
retryable=False)` that names the problem; `card_fingerprint` is the card's identity (sha256 of its
canonical JSON) that results and `subagent.started` carry. It fetches nothing and caches nothing:
the session in `adapters.a2a._target` does the I/O and keeps the card.

v0.3 cards (`url` + `preferredTransport` + `additionalInterfaces`) are read through the a2a-sdk's
own compatibility parser, so the engine accepts exactly the cards its client can talk to. A card
is usable when it has a name and at least one interface with a binding the engine's client speaks
(JSON-RPC or HTTP+JSON) at an absolute http(s) URL and a protocol version of 0.3 or later (or
none). The fingerprint hashes the document as given (a mapping) or the SDK's JSON form of a
parsed card (`MessageToDict`): key order and whitespace never change it, any field's value does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]

from engine import DelegationError, ErrorCode

__all__ = [
    "SUPPORTED_BINDINGS",
    "CardInfo",
    "CardInterface",
    "CardSkill",
    "canonical_json",
    "card_fingerprint",
    "validate_card",
]

#: Protocol bindings the engine's a2a-sdk client is configured for.
SUPPORTED_BINDINGS: Final = ("JSONRPC", "HTTP+JSON")
#: The oldest A2A protocol version the a2a-sdk client still negotiates.
_OLDEST_VERSION: Final = (0, 3)
_VERSION: Final = re.compile(r"^\s*v?(\d+)\.(\d+)")
_MAX_PARSER_MESSAGE: Final = 200


@attrs.frozen(kw_only=True)
class CardSkill:
    """One skill the agent advertises (what a parent model may read to choose an agent)."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class CardInterface:
    """One endpoint of the agent. `usable` says whether the engine's client can talk to it."""

    url: str
    binding: str
    protocol_version: str | None = None
    tenant: str | None = None
    usable: bool = False


@attrs.frozen(kw_only=True)
class CardInfo:
    """A validated Agent Card: what the engine needs of it, its identity and its source.

    `interfaces` lists every interface in the card's order; `preferred` is the first usable one
    and `protocol_version` its version. `canonical_json` is the fingerprinted document; `card` is
    the card as the a2a-sdk reads it (1.0 shape, v0.3 fields converted), ready for
    `ClientFactory.create`; treat it as read-only.
    """

    name: str
    description: str
    version: str | None
    protocol_version: str | None
    streaming: bool
    skills: tuple[CardSkill, ...]
    interfaces: tuple[CardInterface, ...]
    fingerprint: str
    canonical_json: str = attrs.field(repr=False)
    card: AgentCard = attrs.field(eq=False, repr=False)

    @property
    def usable_interfaces(self) -> tuple[CardInterface, ...]:
        return tuple(i for i in self.interfaces if i.usable)

    @property
    def preferred(self) -> CardInterface:
        return self.usable_interfaces[0]


def validate_card(data: Mapping[str, Any] | AgentCard) -> CardInfo:
    """Read and check an Agent Card; raise `DelegationError(agent_unavailable)` if unusable.

    The error is not retryable (the same card fails the same way) and its `metadata["reason"]`
    is one of `not_an_object`, `not_json`, `unreadable`, `no_name`, `no_interfaces`,
    `interface_without_url`, `interface_without_binding`, `no_supported_interface`.
    """
    document = _document(data)
    text = canonical_json(document)
    try:
        # Checked first: protobuf's parser fails with a SystemError on lone surrogates in keys.
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _refused("unreadable", "the card holds text that is not Unicode") from None
    if isinstance(data, AgentCard):
        card = AgentCard()
        card.CopyFrom(data)
    else:
        try:
            # The SDK's parser mutates what it reads: give it a fresh copy of the document.
            card = parse_agent_card(json.loads(text))
        except (
            json_format.Error,
            ValueError,
            TypeError,
            AttributeError,
            ArithmeticError,  # protobuf converting a huge number (1e999) to an integer field
            RecursionError,
        ) as exc:
            detail = str(exc)[:_MAX_PARSER_MESSAGE]
            raise _refused("unreadable", f"the card is not a valid Agent Card ({detail})") from None
    if not card.name.strip():
        raise _refused("no_name", "the card has no name")
    if not card.supported_interfaces:
        raise _refused(
            "no_interfaces",
            "the card names no interface (supportedInterfaces, or url for a v0.3 card)",
        )
    interfaces = []
    for index, interface in enumerate(card.supported_interfaces):
        if not interface.url.strip():
            raise _refused("interface_without_url", f"interface #{index} has no url")
        if not interface.protocol_binding.strip():
            raise _refused(
                "interface_without_binding", f"interface #{index} has no protocolBinding"
            )
        interfaces.append(
            CardInterface(
                url=interface.url,
                binding=interface.protocol_binding,
                protocol_version=interface.protocol_version or None,
                tenant=interface.tenant or None,
                usable=_usable(
                    interface.url, interface.protocol_binding, interface.protocol_version
                ),
            )
        )
    usable = [i for i in interfaces if i.usable]
    if not usable:
        offered = ", ".join(
            sorted({f"{i.binding} {i.protocol_version or ''}".strip() for i in interfaces})
        )
        raise _refused(
            "no_supported_interface",
            "no interface the engine can use (it needs JSONRPC or HTTP+JSON at an http(s) URL, "
            f"A2A 0.3 or later); the card offers: {offered[:_MAX_PARSER_MESSAGE]}",
        )
    return CardInfo(
        name=card.name,
        description=card.description,
        version=card.version or None,
        protocol_version=usable[0].protocol_version,
        streaming=card.capabilities.streaming,
        skills=tuple(
            CardSkill(id=s.id, name=s.name, description=s.description, tags=tuple(s.tags))
            for s in card.skills
        ),
        interfaces=tuple(interfaces),
        fingerprint=_fingerprint(text),
        canonical_json=text,
        card=card,
    )


def card_fingerprint(card: Mapping[str, Any] | AgentCard) -> str:
    """`sha256:<hex>` of the card's canonical JSON; raises `DelegationError` if it has none."""
    return _fingerprint(canonical_json(_document(card)))


def canonical_json(document: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text as is; refuses what JSON cannot say (NaN, sets...)."""
    try:
        return json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise _refused(
            "not_json", f"the card is not a JSON document ({type(exc).__name__})"
        ) from None


def _document(data: Mapping[str, Any] | AgentCard) -> Any:
    if isinstance(data, AgentCard):
        try:
            return json_format.MessageToDict(data)
        except (json_format.Error, ValueError, RecursionError):
            raise _refused("not_json", "the card has values JSON cannot say (NaN?)") from None
    if not isinstance(data, Mapping):
        raise _refused("not_an_object", f"the card is not a JSON object ({type(data).__name__})")
    return dict(data)


def _usable(url: str, binding: str, version: str) -> bool:
    if binding not in SUPPORTED_BINDINGS:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if not version:
        return True
    match = _VERSION.match(version)
    return match is not None and (int(match[1]), int(match[2])) >= _OLDEST_VERSION


def _fingerprint(text: str) -> str:
    # surrogatepass: a document read with json.loads may hold lone surrogates; hash them as-is.
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _refused(reason: str, problem: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.AGENT_UNAVAILABLE,
        message=f"The remote agent's card cannot be used: {problem}.",
        retryable=False,
        metadata={"reason": reason},
    )
