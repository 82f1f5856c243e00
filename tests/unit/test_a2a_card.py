"""Unit tests of Agent Card validation and fingerprints (`adapters.a2a._card`), sans-IO."""

from __future__ import annotations

import copy
import hashlib
import json
from types import MappingProxyType
from typing import Any

import pytest
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.a2a._card import (
    CardInfo,
    CardInterface,
    CardSkill,
    card_fingerprint,
    validate_card,
)
from engine import DelegationError, ErrorCode

CARD_1_0: dict[str, Any] = {
    "name": "Research Agent",
    "description": "Finds and summarizes sources.",
    "version": "2.1.0",
    "supportedInterfaces": [
        {
            "url": "http://127.0.0.1:9999/a2a/v1",
            "protocolBinding": "GRPC",
            "protocolVersion": "1.0",
        },
        {
            "url": "http://127.0.0.1:9999/a2a/jsonrpc",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
            "tenant": "acme",
        },
        {
            "url": "http://127.0.0.1:9999/a2a/rest",
            "protocolBinding": "HTTP+JSON",
            "protocolVersion": "1.0",
        },
    ],
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [
        {
            "id": "search",
            "name": "Search",
            "description": "Searches the web.",
            "tags": ["web", "research"],
        }
    ],
}

CARD_0_3: dict[str, Any] = {
    "protocolVersion": "0.3.0",
    "name": "Legacy Agent",
    "description": "Speaks A2A 0.3.",
    "url": "http://127.0.0.1:8888/",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [
        {"url": "http://127.0.0.1:8888/", "transport": "JSONRPC"},
        {"url": "http://127.0.0.1:8888/rest", "transport": "HTTP+JSON"},
    ],
    "version": "0.1",
    "capabilities": {"streaming": False},
    "defaultInputModes": ["text"],
    "defaultOutputModes": ["text"],
    "skills": [{"id": "s", "name": "Echo", "description": "Echoes.", "tags": []}],
    "supportsAuthenticatedExtendedCard": False,
}


def card(**changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(CARD_1_0)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def refused(data: Any) -> DelegationError:
    with pytest.raises(DelegationError) as caught:
        validate_card(data)
    error = caught.value
    assert error.code == ErrorCode.AGENT_UNAVAILABLE
    assert error.retryable is False
    assert error.message.startswith("The remote agent's card cannot be used: ")
    return error


# --- valid cards ---------------------------------------------------------------------------------


def test_a_1_0_card() -> None:
    info = validate_card(CARD_1_0)
    assert isinstance(info, CardInfo)
    assert (info.name, info.description, info.version) == (
        "Research Agent",
        "Finds and summarizes sources.",
        "2.1.0",
    )
    assert info.streaming is True
    assert info.skills == (
        CardSkill(
            id="search", name="Search", description="Searches the web.", tags=("web", "research")
        ),
    )
    assert [(i.binding, i.usable) for i in info.interfaces] == [
        ("GRPC", False),
        ("JSONRPC", True),
        ("HTTP+JSON", True),
    ]
    assert info.preferred == CardInterface(
        url="http://127.0.0.1:9999/a2a/jsonrpc",
        binding="JSONRPC",
        protocol_version="1.0",
        tenant="acme",
        usable=True,
    )
    assert info.protocol_version == "1.0"
    assert info.fingerprint == card_fingerprint(CARD_1_0)
    assert json.loads(info.canonical_json) == CARD_1_0
    assert isinstance(info.card, AgentCard)
    assert info.card.name == "Research Agent"


def test_validation_does_not_change_the_given_document() -> None:
    document = copy.deepcopy(CARD_0_3)
    validate_card(document)
    assert document == CARD_0_3


def test_a_v0_3_card_through_the_sdk_compat_reading() -> None:
    info = validate_card(CARD_0_3)
    assert info.name == "Legacy Agent"
    assert info.streaming is False
    assert [(i.url, i.binding, i.protocol_version) for i in info.interfaces] == [
        ("http://127.0.0.1:8888/", "JSONRPC", "0.3.0"),
        ("http://127.0.0.1:8888/", "JSONRPC", "0.3.0"),
        ("http://127.0.0.1:8888/rest", "HTTP+JSON", "0.3.0"),
    ]
    assert info.protocol_version == "0.3.0"
    assert info.card.capabilities.extended_agent_card is False


def test_a_v0_3_card_without_a_preferred_transport_defaults_to_jsonrpc() -> None:
    legacy = copy.deepcopy(CARD_0_3)
    del legacy["preferredTransport"], legacy["additionalInterfaces"], legacy["protocolVersion"]
    info = validate_card(legacy)
    assert [(i.binding, i.protocol_version) for i in info.interfaces] == [("JSONRPC", "0.3.0")]


def test_a_proto_card() -> None:
    proto = AgentCard(
        name="Proto Agent",
        description="d",
        supported_interfaces=[
            AgentInterface(url="https://agent.example/a2a", protocol_binding="HTTP+JSON")
        ],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="x", name="X", description="does x")],
    )
    info = validate_card(proto)
    assert info.preferred.url == "https://agent.example/a2a"
    assert info.preferred.protocol_version is None
    assert info.streaming is True
    proto.name = "changed later"
    assert info.card.name == "Proto Agent"  # CardInfo holds its own copy


def test_minimal_card_defaults() -> None:
    info = validate_card(
        {"name": "n", "supportedInterfaces": [{"url": "http://h/", "protocolBinding": "JSONRPC"}]}
    )
    assert (info.description, info.version, info.streaming, info.skills) == ("", None, False, ())


def test_card_info_is_a_hashable_value() -> None:
    first, second = validate_card(CARD_1_0), validate_card(copy.deepcopy(CARD_1_0))
    assert first == second
    assert hash(first) == hash(second)


def test_non_dict_mappings_are_accepted() -> None:
    assert validate_card(MappingProxyType(copy.deepcopy(CARD_1_0))).name == "Research Agent"


# --- refused cards -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([CARD_1_0], "not_an_object"),
        ("card", "not_an_object"),
        (None, "not_an_object"),
        (card(name=None), "no_name"),
        (card(name="   "), "no_name"),
        (card(supportedInterfaces=None), "no_interfaces"),
        (card(supportedInterfaces=[]), "no_interfaces"),
        (card(supportedInterfaces=[{"protocolBinding": "JSONRPC"}]), "interface_without_url"),
        (card(supportedInterfaces=[{"url": "http://h/"}]), "interface_without_binding"),
        (
            card(supportedInterfaces=[{"url": "h:1", "protocolBinding": "GRPC"}]),
            "no_supported_interface",
        ),
        (
            card(supportedInterfaces=[{"url": "ftp://h/", "protocolBinding": "JSONRPC"}]),
            "no_supported_interface",
        ),
        (
            card(supportedInterfaces=[{"url": "/relative", "protocolBinding": "JSONRPC"}]),
            "no_supported_interface",
        ),
        (
            card(
                supportedInterfaces=[
                    {"url": "http://h/", "protocolBinding": "JSONRPC", "protocolVersion": "0.2"}
                ]
            ),
            "no_supported_interface",
        ),
        (
            card(
                supportedInterfaces=[
                    {"url": "http://h/", "protocolBinding": "JSONRPC", "protocolVersion": "latest"}
                ]
            ),
            "no_supported_interface",
        ),
        (card(name=5), "unreadable"),
        (card(capabilities={"streaming": "yes"}), "unreadable"),
        (card(skills="search"), "unreadable"),
        (card(supportedInterfaces="http://h/"), "unreadable"),
        ({"name": "a", "url": "http://h/", "additionalInterfaces": "abc"}, "unreadable"),
        ({"name": "a", "url": ["http://h/"]}, "unreadable"),
        ({"name": "a", "url": "http://h/", "preferredTransport": 5}, "unreadable"),
        ({"name": "\ud800", "url": "http://h/"}, "unreadable"),
        ({"name": "a", "url": "http://h/", "\ud800": 1}, "unreadable"),
        ({"name": "a", "url": "http://h/", "capabilities": {"x\udfff": 1}}, "unreadable"),
        ({"name": "a", "url": "http://h/", "extra": float("nan")}, "not_json"),
        ({"name": "a", "url": "http://h/", "extra": {1, 2}}, "not_json"),
        ({"name": "a", "url": "http://h/", 3: "x", "b": 1}, "not_json"),
    ],
)
def test_malformed_cards_are_refused_with_a_reason(data: Any, reason: str) -> None:
    error = refused(data)
    assert error.metadata == {"reason": reason}


def test_a_v0_3_card_without_url_is_refused() -> None:
    legacy = copy.deepcopy(CARD_0_3)
    del legacy["url"]
    assert refused(legacy).metadata == {"reason": "no_interfaces"}


def test_the_refusal_names_what_the_card_offers() -> None:
    error = refused(card(supportedInterfaces=[{"url": "h:1", "protocolBinding": "GRPC"}]))
    assert "GRPC" in error.message
    assert "JSONRPC or HTTP+JSON" in error.message


def test_a_proto_card_without_interfaces_is_refused() -> None:
    assert refused(AgentCard(name="x")).metadata == {"reason": "no_interfaces"}


# --- fingerprints --------------------------------------------------------------------------------


def test_fingerprint_is_sha256_of_canonical_json() -> None:
    document = {"b": [1, {"y": "é", "x": None}], "a": True}
    canonical = '{"a":true,"b":[1,{"x":null,"y":"é"}]}'
    expected = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert card_fingerprint(document) == expected


def test_fingerprint_ignores_key_order_and_whitespace() -> None:
    reordered = json.loads(json.dumps(CARD_1_0, indent=4, sort_keys=True))
    reordered = dict(reversed(list(reordered.items())))
    reordered["supportedInterfaces"] = [
        dict(reversed(list(i.items()))) for i in reordered["supportedInterfaces"]
    ]
    assert card_fingerprint(reordered) == card_fingerprint(CARD_1_0)
    assert validate_card(reordered).fingerprint == validate_card(CARD_1_0).fingerprint


def test_fingerprint_changes_with_any_value() -> None:
    assert card_fingerprint(card(version="2.1.1")) != card_fingerprint(CARD_1_0)
    assert card_fingerprint(card(extra={"x": 1})) != card_fingerprint(CARD_1_0)


def test_proto_fingerprint_is_stable_and_follows_its_json_form() -> None:
    first = validate_card(CARD_1_0).card
    second = AgentCard()
    second.CopyFrom(first)
    assert card_fingerprint(first) == card_fingerprint(second)
    assert card_fingerprint(first).startswith("sha256:")
    assert len(card_fingerprint(first)) == len("sha256:") + 64
    # A 1.0 document without defaults or unknown fields is its own JSON form.
    assert card_fingerprint(first) == card_fingerprint(CARD_1_0)


def test_fingerprint_of_something_that_is_not_a_card_is_a_typed_error() -> None:
    for bad in (["x"], {"x": float("inf")}, 3):
        with pytest.raises(DelegationError) as caught:
            card_fingerprint(bad)  # type: ignore[arg-type]
        assert caught.value.code == ErrorCode.AGENT_UNAVAILABLE


def test_fingerprint_survives_lone_surrogates() -> None:
    assert card_fingerprint({"name": "\ud800"}).startswith("sha256:")


# --- property: any JSON document gives a CardInfo or a typed refusal -----------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)
CARD_KEYS = st.sampled_from(
    [
        "name", "description", "url", "preferredTransport", "additionalInterfaces",
        "supportedInterfaces", "protocolVersion", "capabilities", "skills", "securitySchemes",
        "security", "supportsAuthenticatedExtendedCard", "version", "transport",
        "protocolBinding", "streaming",
    ]
)  # fmt: skip
CARDISH = st.recursive(
    st.none() | st.booleans() | st.text(max_size=10) | st.sampled_from(["JSONRPC", "http://h/"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(CARD_KEYS, children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSON | CARDISH)
def test_any_document_gives_card_info_or_a_typed_refusal(document: Any) -> None:
    try:
        info: CardInfo | DelegationError = validate_card(document)
    except DelegationError as error:
        info = error
    if isinstance(info, DelegationError):
        assert (info.code, info.retryable) == (ErrorCode.AGENT_UNAVAILABLE, False)
        return
    assert info.name.strip()
    assert info.usable_interfaces
    assert info.fingerprint == card_fingerprint(document)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("card_url", "agents.example/card.json", "absolute http"),
        ("card_url", "ftp://agents.example/card.json", "absolute http"),
        ("card_url", "https://user:pw@agents.example/card.json", "credentials"),
        ("bindings", ("GRPC",), "JSONRPC"),
        ("bindings", (), "JSONRPC"),
        ("request_timeout", 0, "positive"),
    ],
)
def test_a2a_config_mistakes_are_typed_errors(field: str, value: object, match: str) -> None:
    from adapters.a2a import A2AAgentConfig
    from engine import RegistryError

    fields: dict[str, object] = {"card_url": "https://agents.example/.well-known/agent-card.json"}
    fields[field] = value
    with pytest.raises(RegistryError, match=match):
        A2AAgentConfig(**fields)  # type: ignore[arg-type]
