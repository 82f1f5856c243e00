"""`adapters.agui.stream_mode`: the mode a `POST /agui` client that names none gets.

A declared `forwardedProps.capabilities.multiAgent.subagents` decides first, then
`protocolVersion`, then the configured default; a declaration only chooses between `attributed`
and `custom`, and every unreadable one is a `CapabilityError` naming its field.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.agui import CapabilityError, stream_mode


def caps(subagents: Any) -> dict[str, Any]:
    return {"capabilities": {"multiAgent": {"subagents": subagents}}}


@pytest.mark.parametrize("default", ["attributed", "custom"])
def test_a_declared_flag_picks_the_mode_whatever_the_default(default: str) -> None:
    assert stream_mode(caps(True), None, default) == "attributed"
    assert stream_mode(caps(False), None, default) == "custom"


def test_the_flag_outranks_the_protocol_version() -> None:
    assert stream_mode(caps(False), "1.0", "attributed") == "custom"
    assert stream_mode(caps(True), "0.9", "custom") == "attributed"


@pytest.mark.parametrize(
    ("version", "mode"), [("1.0", "attributed"), ("2.3", "attributed"), ("0.9", "custom")]
)
def test_a_protocol_version_declares_what_the_client_reads(version: str, mode: str) -> None:
    assert stream_mode({}, version, "custom") == mode
    assert stream_mode(None, version, "attributed") == mode


@pytest.mark.parametrize(
    "props",
    [None, {}, {"mode": "x"}, {"capabilities": {}}, {"capabilities": {"multiAgent": {}}}, [1]],
)
@pytest.mark.parametrize("default", ["attributed", "custom", "inline", "hidden"])
def test_nothing_declared_keeps_the_configured_default(props: Any, default: str) -> None:
    assert stream_mode(props, None, default) == default


@pytest.mark.parametrize("default", ["inline", "hidden"])
def test_a_declaration_never_shows_subagents_an_operator_hid(default: str) -> None:
    assert stream_mode(caps(True), "1.0", default) == default
    assert stream_mode(caps(False), None, default) == default


@pytest.mark.parametrize(
    ("props", "version", "field"),
    [
        ({"capabilities": "yes"}, None, "forwardedProps.capabilities"),
        ({"capabilities": {"multiAgent": True}}, None, "forwardedProps.capabilities.multiAgent"),
        (caps("true"), None, "forwardedProps.capabilities.multiAgent.subagents"),
        (caps(1), None, "forwardedProps.capabilities.multiAgent.subagents"),
        (caps([{"name": "research"}]), None, "forwardedProps.capabilities.multiAgent.subagents"),
        (caps(None), None, "forwardedProps.capabilities.multiAgent.subagents"),
        ({}, "one", "protocolVersion"),
        ({}, "1", "protocolVersion"),
        ({}, "1.0.0", "protocolVersion"),
        ({}, " 1.0", "protocolVersion"),
        ({}, "9" * 40 + ".0", "protocolVersion"),
    ],
)
@pytest.mark.parametrize("default", ["attributed", "hidden"])
def test_an_unreadable_declaration_is_refused_naming_its_field(
    props: Any, version: str | None, field: str, default: str
) -> None:
    with pytest.raises(CapabilityError) as caught:
        stream_mode(props, version, default)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
