"""Fuzz harness: Agent Card ingestion, `adapters.a2a._card.validate_card` and `card_fingerprint`.

Any bytes go in, read as a JSON document (A2A 1.0 or v0.3 card) and as a binary protobuf
`AgentCard`. The one expected refusal is `DelegationError(agent_unavailable, retryable=False)`
with a `metadata["reason"]`; any other exception is a bug. So is an accepted card without a name
or a usable interface, a fingerprint that differs from `card_fingerprint` of the same input, or
a second validation of the same input that disagrees with the first.
"""

from __future__ import annotations

import json
from typing import Any

from fuzz._harness import instrumented_imports

with instrumented_imports("adapters", "engine"):
    from a2a.types import AgentCard
    from google.protobuf import message as proto_message  # type: ignore[import-untyped, unused-ignore]

    from adapters.a2a._card import SUPPORTED_BINDINGS, card_fingerprint, validate_card
    from engine._results import DelegationError, ErrorCode

__all__ = ["DICTIONARY", "SEEDS", "fuzz_one_input"]

SEEDS: list[bytes] = [
    json.dumps(
        {
            "name": "Research Agent",
            "description": "Finds sources.",
            "supportedInterfaces": [
                {
                    "url": "http://127.0.0.1:1/",
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0",
                },
                {"url": "http://127.0.0.1:1/rest", "protocolBinding": "HTTP+JSON"},
            ],
            "capabilities": {"streaming": True},
            "skills": [{"id": "s", "name": "Search", "description": "d", "tags": ["t"]}],
        }
    ).encode(),
    json.dumps(
        {
            "protocolVersion": "0.3.0",
            "name": "Legacy",
            "url": "http://127.0.0.1:2/",
            "preferredTransport": "JSONRPC",
            "additionalInterfaces": [{"url": "http://127.0.0.1:2/r", "transport": "HTTP+JSON"}],
            "securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "X-Key"}},
            "security": [{"k": []}],
            "supportsAuthenticatedExtendedCard": True,
        }
    ).encode(),
    b'{"name":"grpc only","supportedInterfaces":[{"url":"h:1","protocolBinding":"GRPC"}]}',
    b'{"name":"","url":"http://h/"}',
    b'{"name":"a","url":"http://h/","protocolVersion":"0.2"}',
    b'{"name":"a","supportedInterfaces":"x","skills":[1]}',
    b'{"name":"a","url":"http://h/","\\ud800":1}',
    AgentCard(
        name="proto",
        supported_interfaces=[{"url": "https://h/", "protocol_binding": "JSONRPC"}],
    ).SerializeToString(),
    b"[]",
    b"",
]

DICTIONARY: list[bytes] = [
    b'"name"',
    b'"description"',
    b'"url"',
    b'"preferredTransport"',
    b'"additionalInterfaces"',
    b'"supportedInterfaces"',
    b'"protocolBinding"',
    b'"protocolVersion"',
    b'"transport"',
    b'"capabilities"',
    b'"streaming"',
    b'"skills"',
    b'"securitySchemes"',
    b'"security"',
    b'"JSONRPC"',
    b'"HTTP+JSON"',
    b'"GRPC"',
    b'"http://"',
    b'"https://"',
    b'"0.3"',
    b'"1.0"',
]


def fuzz_one_input(data: bytes) -> None:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        pass
    else:
        _check(document)
    try:
        proto = AgentCard.FromString(data)
    except proto_message.DecodeError:
        return
    _check(proto)


def _check(card: Any) -> None:
    outcome = _validate(card)
    if outcome != _validate(card):
        raise AssertionError("validating the same card twice gave different answers")
    if isinstance(outcome, str):
        return
    if not outcome.name.strip():
        raise AssertionError(f"accepted a card without a name: {outcome!r}")
    if not outcome.usable_interfaces:
        raise AssertionError(f"accepted a card without a usable interface: {outcome!r}")
    if outcome.preferred.binding not in SUPPORTED_BINDINGS:
        raise AssertionError(f"preferred an unsupported binding: {outcome!r}")
    if outcome.fingerprint != card_fingerprint(card):
        raise AssertionError("the card's fingerprint differs from card_fingerprint of it")


def _validate(card: Any) -> Any:
    """The CardInfo, or the refusal's reason."""
    try:
        return validate_card(card)
    except DelegationError as error:
        if error.code != ErrorCode.AGENT_UNAVAILABLE or error.retryable is not False:
            raise AssertionError(f"unexpected refusal {error!r}") from error
        if not error.metadata or not isinstance(error.metadata.get("reason"), str):
            raise AssertionError(f"a refusal without a reason: {error!r}") from error
        return error.metadata["reason"]
