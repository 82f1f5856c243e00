"""The `delegate_to_agent` input validator: each rule, the field it names, nothing else escaping."""

from __future__ import annotations

import json
import math
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine._results import DelegationError, ErrorCode, InputArtifact
from engine._tool_input import (
    AGENT_KEY_PATTERN,
    MAX_INPUT_ARTIFACTS,
    MAX_OBJECTIVE_CHARS,
    MAX_TEXT_CHARS,
    MAX_TOOL_INPUT_BYTES,
    MAX_URI_CHARS,
    TOOL_INPUT_SCHEMA,
    ToolInput,
    is_agent_key,
    parse_tool_input,
    tool_input_schema,
)

ENDPOINT_MESSAGE = (
    "agents are reached only through host-registered keys; "
    "endpoints and credentials are configured by the host"
)

# A call that uses every field the tool takes.
CONTRACT_EXAMPLE = {
    "agent": "research",
    "objective": "Find the current A2A Go SDK streaming API shape.",
    "input": {
        "prompt": "Research official examples and summarize exact APIs.",
        "context": "We are designing agent-adaptor A2A delegation.",
        "artifacts": [{"name": "current-design.md", "uri": "host://artifact/current-design.md"}],
    },
    "constraints": {"timeout_seconds": 180, "stream": True, "max_artifacts": 10},
}


def refused(raw: Any) -> DelegationError:
    """The one error `parse_tool_input` raises for `raw`, checked for the contract's shape."""
    with pytest.raises(DelegationError) as info:
        parse_tool_input(raw)
    err = info.value
    assert err.code == ErrorCode.INVALID_INPUT
    assert err.retryable is False
    assert err.metadata is not None
    assert set(err.metadata) == {"field"}
    assert 0 < len(err.message) < 400
    return err


def with_fields(**fields: Any) -> dict[str, Any]:
    return {"agent": "research", "objective": "Summarise the design.", **fields}


# --- Valid input -------------------------------------------------------------------------------


def test_minimal_input_parses_to_defaults() -> None:
    parsed = parse_tool_input(b'{"agent":"research","objective":"Find it."}')

    assert parsed == ToolInput(agent="research", objective="Find it.")
    assert (parsed.prompt, parsed.context, parsed.artifacts) == (None, None, ())
    assert (parsed.timeout_seconds, parsed.stream) == (None, None)
    assert (parsed.max_artifacts, parsed.history_length) == (None, None)


def test_contract_example_parses_in_full() -> None:
    parsed = parse_tool_input(json.dumps(CONTRACT_EXAMPLE))

    assert parsed == ToolInput(
        agent="research",
        objective="Find the current A2A Go SDK streaming API shape.",
        prompt="Research official examples and summarize exact APIs.",
        context="We are designing agent-adaptor A2A delegation.",
        artifacts=(
            InputArtifact(name="current-design.md", uri="host://artifact/current-design.md"),
        ),
        timeout_seconds=180,
        stream=True,
        max_artifacts=10,
    )


def test_every_field_at_its_bounds() -> None:
    doc = {
        "agent": "a" * 64,
        "objective": "o" * MAX_OBJECTIVE_CHARS,
        "input": {
            "prompt": "p" * MAX_TEXT_CHARS,
            "context": "",
            "artifacts": [{"uri": "host://x/" + "u" * (MAX_URI_CHARS - 9)}]
            + [{"name": f"n{i}", "mime_type": "text/plain; charset=utf-8"} for i in range(31)],
        },
        "constraints": {
            "timeout_seconds": 86400,
            "stream": False,
            "max_artifacts": 0,
            "history_length": 10000,
        },
    }
    parsed = parse_tool_input(doc)

    assert parsed.agent == "a" * 64
    assert len(parsed.objective) == MAX_OBJECTIVE_CHARS
    assert len(parsed.prompt or "") == MAX_TEXT_CHARS
    assert parsed.context == ""
    assert len(parsed.artifacts) == MAX_INPUT_ARTIFACTS
    assert parsed.artifacts[1] == InputArtifact(name="n0", mime_type="text/plain; charset=utf-8")
    assert (parsed.timeout_seconds, parsed.stream, parsed.max_artifacts) == (86400, False, 0)
    assert parsed.history_length == 10000


def test_lower_bounds_of_integer_constraints_are_accepted() -> None:
    parsed = parse_tool_input(
        with_fields(constraints={"timeout_seconds": 1, "max_artifacts": 0, "history_length": 0})
    )
    assert (parsed.timeout_seconds, parsed.max_artifacts, parsed.history_length) == (1, 0, 0)


def test_null_optional_fields_count_as_absent() -> None:
    doc = with_fields(
        input={"prompt": None, "context": None, "artifacts": None},
        constraints={"timeout_seconds": None, "stream": None},
    )
    assert parse_tool_input(doc) == ToolInput(agent="research", objective="Summarise the design.")
    assert parse_tool_input(with_fields(input=None, constraints=None)) == ToolInput(
        agent="research", objective="Summarise the design."
    )


def test_values_are_kept_as_given() -> None:
    parsed = parse_tool_input(with_fields(objective="  padded  ", input={"prompt": "tab\there"}))
    assert parsed.objective == "  padded  "
    assert parsed.prompt == "tab\there"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"agent":"research","objective":"x"}',
        bytearray(b'{"agent":"research","objective":"x"}'),
        '{"agent":"research","objective":"x"}',
        {"agent": "research", "objective": "x"},
        types.MappingProxyType({"agent": "research", "objective": "x"}),
    ],
    ids=["bytes", "bytearray", "str", "dict", "mapping"],
)
def test_bytes_text_and_mappings_are_all_accepted(raw: Any) -> None:
    assert parse_tool_input(raw) == ToolInput(agent="research", objective="x")


def test_nested_mappings_and_tuples_from_an_sdk_are_plain_json() -> None:
    doc = with_fields(input=types.MappingProxyType({"artifacts": ({"name": "a.md"},)}))
    assert parse_tool_input(doc).artifacts == (InputArtifact(name="a.md"),)


def test_non_ascii_text_and_artifacts() -> None:
    parsed = parse_tool_input(
        with_fields(
            objective="Résumé 🤖",
            input={"artifacts": [{"name": "notes ü.md", "uri": "host://artifact/%C3%BC.md"}]},
        )
    )
    assert parsed.objective == "Résumé 🤖"
    assert parsed.artifacts == (InputArtifact(name="notes ü.md", uri="host://artifact/%C3%BC.md"),)


@pytest.mark.parametrize(
    "uri",
    [
        "host://artifact/current-design.md",
        "https://example.com/a@2x.png",
        "host://artifact/dir//file@2x.png",
        "https://example.com/path?q=a@b#frag@x",
        "relative/path.md",
        "s3://bucket/key",
        "data:text/plain;base64,SGVsbG8=",
    ],
)
def test_uris_without_credentials_are_accepted(uri: str) -> None:
    parsed = parse_tool_input(with_fields(input={"artifacts": [{"uri": uri}]}))
    assert parsed.artifacts == (InputArtifact(uri=uri),)


# --- Each rule's refusal, with the field it names ------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "field", "fragment"),
    [
        ({"objective": "x"}, "agent", "`agent` is required"),
        ({"agent": "research"}, "objective", "`objective` is required"),
        (with_fields(agent=None), "agent", "must be a string, got null"),
        (with_fields(agent=7), "agent", "must be a string, got a number"),
        (with_fields(agent=""), "agent", "registered agent key"),
        (with_fields(agent="Research"), "agent", 'got "Research"'),
        (with_fields(agent="_research"), "agent", "registered agent key"),
        (with_fields(agent="a" * 65), "agent", "registered agent key"),
        (with_fields(agent="research\n"), "agent", "registered agent key"),
        (with_fields(agent="re search"), "agent", "registered agent key"),
        (with_fields(objective=""), "objective", "must not be empty"),
        (with_fields(objective=" \n\t "), "objective", "must not be empty"),
        (with_fields(objective=None), "objective", "got null"),
        (with_fields(objective=["x"]), "objective", "got an array"),
        (with_fields(objective="o" * (MAX_OBJECTIVE_CHARS + 1)), "objective", "longer than 16384"),
        (with_fields(input="prompt"), "input", "`input` must be a JSON object, got a string"),
        (with_fields(input={"prompt": 1}), "input.prompt", "must be a string"),
        (
            with_fields(input={"prompt": "p" * (MAX_TEXT_CHARS + 1)}),
            "input.prompt",
            "longer than 262144 characters; pass large content as an artifact reference",
        ),
        (
            with_fields(input={"context": "c" * (MAX_TEXT_CHARS + 1)}),
            "input.context",
            "longer than 262144",
        ),
        (with_fields(input={"artifacts": {}}), "input.artifacts", "must be an array"),
        (
            with_fields(input={"artifacts": [{"name": "a"}] * 33}),
            "input.artifacts",
            "has 33 entries; at most 32",
        ),
        (with_fields(input={"artifacts": ["a.md"]}), "input.artifacts[0]", "JSON object"),
        (with_fields(input={"artifacts": [None]}), "input.artifacts[0]", "got null"),
        (
            with_fields(input={"artifacts": [{"name": "a"}, {"mime_type": "text/plain"}]}),
            "input.artifacts[1]",
            "needs a `uri` or a `name`",
        ),
        (with_fields(input={"artifacts": [{"name": ""}]}), "input.artifacts[0].name", "empty"),
        (
            with_fields(input={"artifacts": [{"name": "a\nb"}]}),
            "input.artifacts[0].name",
            "control characters",
        ),
        (with_fields(input={"artifacts": [{"uri": ""}]}), "input.artifacts[0].uri", "empty"),
        (
            with_fields(input={"artifacts": [{"uri": "host://x/" + "u" * MAX_URI_CHARS}]}),
            "input.artifacts[0].uri",
            "longer than 2048",
        ),
        (
            with_fields(input={"artifacts": [{"uri": "host://a b"}]}),
            "input.artifacts[0].uri",
            "spaces or control characters",
        ),
        (
            with_fields(input={"artifacts": [{"uri": "host://a\u0000b"}]}),
            "input.artifacts[0].uri",
            "spaces or control characters",
        ),
        (
            with_fields(input={"artifacts": [{"uri": "host://a\u2028b"}]}),
            "input.artifacts[0].uri",
            "spaces or control characters",
        ),
        (
            with_fields(input={"artifacts": [{"name": "a", "mime_type": "markdown"}]}),
            "input.artifacts[0].mime_type",
            "media type",
        ),
        (
            with_fields(constraints={"timeout_seconds": True}),
            "constraints.timeout_seconds",
            "integer from 1 to 86400, got true",
        ),
        (
            with_fields(constraints={"timeout_seconds": 30.0}),
            "constraints.timeout_seconds",
            "got 30.0",
        ),
        (
            with_fields(constraints={"timeout_seconds": 1.5}),
            "constraints.timeout_seconds",
            "got 1.5",
        ),
        (
            with_fields(constraints={"timeout_seconds": "30"}),
            "constraints.timeout_seconds",
            "got a string",
        ),
        (with_fields(constraints={"timeout_seconds": 0}), "constraints.timeout_seconds", "got 0"),
        (
            with_fields(constraints={"timeout_seconds": 86401}),
            "constraints.timeout_seconds",
            "got 86401",
        ),
        (with_fields(constraints={"max_artifacts": -1}), "constraints.max_artifacts", "0 to 1000"),
        (with_fields(constraints={"max_artifacts": 1001}), "constraints.max_artifacts", "1001"),
        (
            with_fields(constraints={"max_artifacts": False}),
            "constraints.max_artifacts",
            "got false",
        ),
        (
            with_fields(constraints={"history_length": 10001}),
            "constraints.history_length",
            "from 0 to 10000",
        ),
        (with_fields(constraints={"stream": 1}), "constraints.stream", "true or false, got 1"),
        (with_fields(constraints={"stream": "yes"}), "constraints.stream", "got a string"),
        (with_fields(constraints=[]), "constraints", "must be a JSON object, got an array"),
    ],
)
def test_each_rule_names_its_field(doc: dict[str, Any], field: str, fragment: str) -> None:
    err = refused(doc)
    assert err.metadata == {"field": field}
    assert fragment in err.message


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (with_fields(model="gpt"), "model"),
        (with_fields(input={"prompt": "p", "files": []}), "input.files"),
        (with_fields(constraints={"timeout": 30}), "constraints.timeout"),
        (with_fields(input={"artifacts": [{"name": "a"}, {"name": "b", "size": 3}]}),
         "input.artifacts[1].size"),
        (with_fields(**{"odd key": 1}), '["odd key"]'),
    ],
)  # fmt: skip
def test_unknown_fields_are_refused_at_every_level(doc: dict[str, Any], field: str) -> None:
    err = refused(doc)
    assert err.metadata == {"field": field}
    assert err.message.startswith("unknown field ")
    assert "allowed: " in err.message


def test_unknown_field_message_lists_the_allowed_fields() -> None:
    err = refused(with_fields(constraints={"max_tokens": 5}))
    assert err.message == (
        "unknown field `max_tokens` in `constraints`; "
        "allowed: timeout_seconds, stream, max_artifacts, history_length"
    )


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (with_fields(endpoint_url="https://evil.example/a2a"), "endpoint_url"),
        (with_fields(url="https://evil.example"), "url"),
        (with_fields(endpoint="x"), "endpoint"),
        (with_fields(card_url="x"), "card_url"),
        (with_fields(agent_card_url="x"), "agent_card_url"),
        (with_fields(base_url="x"), "base_url"),
        (with_fields(headers={"Authorization": "Bearer x"}), "headers"),
        (with_fields(token="x"), "token"),
        (with_fields(api_key="x"), "api_key"),
        (with_fields(auth="x"), "auth"),
        (with_fields(endpointUrl="x"), "endpointUrl"),
        (with_fields(**{"API-Key": "x"}), "API-Key"),
        (with_fields(input={"endpoint_url": "x"}), "input.endpoint_url"),
        (with_fields(constraints={"auth": {"token": "x"}}), "constraints.auth"),
        (with_fields(constraints={"extra": {"deeper": [{"token": "x"}]}}),
         "constraints.extra.deeper[0].token"),
        ({"endpoint_url": "x"}, "endpoint_url"),
        (b'[{"api_key": "x"}]', "[0].api_key"),
    ],
)  # fmt: skip
def test_endpoint_and_credential_fields_get_the_dedicated_message(doc: Any, field: str) -> None:
    err = refused(doc)
    assert err.metadata == {"field": field}
    assert err.message == f"`{field}` is not accepted: {ENDPOINT_MESSAGE}"


def test_an_artifact_url_is_pointed_to_uri() -> None:
    err = refused(with_fields(input={"artifacts": [{"name": "a", "url": "host://a"}]}))
    assert err.metadata == {"field": "input.artifacts[0].url"}
    assert err.message.endswith(f"{ENDPOINT_MESSAGE}; an artifact reference goes in `uri`")


def test_the_endpoint_rule_wins_over_every_other_rule() -> None:
    # Missing objective, wrong agent type, unknown field first: the endpoint is still what is said.
    err = refused({"agent": 1, "zzz": 2, "input": {"artifacts": "no", "x": {"base_url": "u"}}})
    assert err.metadata == {"field": "input.x.base_url"}


def test_agent_given_as_a_url_is_refused_without_echoing_it() -> None:
    err = refused(with_fields(agent="https://admin:hunter2@agents.example/a2a"))
    assert err.metadata == {"field": "agent"}
    assert "not a URL" in err.message
    assert ENDPOINT_MESSAGE in err.message
    assert "hunter2" not in err.message


@pytest.mark.parametrize(
    "uri",
    [
        "https://user:pass@example.com/a.md",
        "https://ghp_secrettoken@github.com/org/repo",
        "//user:pass@example.com/a.md",
        "https:user:pass@example.com/a.md",
        "https:\\\\user:pass@example.com/a.md",
        "ftp://anonymous@ftp.example.com/",
        "ht@ha://u:p@hai",  # found by the fuzzer: not a scheme, yet a credential
        "https://example.com/login?next=https://u:p@evil.example/",
        "mailto:someone@example.com",  # conservative: any authority-like part with an @
    ],
)
def test_uris_carrying_credentials_are_refused_without_echoing_them(uri: str) -> None:
    err = refused(with_fields(input={"artifacts": [{"name": "a", "uri": uri}]}))
    assert err.metadata == {"field": "input.artifacts[0].uri"}
    assert "must not carry credentials" in err.message
    assert "pass" not in err.message.replace("password", "")
    assert "secrettoken" not in err.message


def test_duplicate_fields_are_refused_with_their_path() -> None:
    err = refused(b'{"agent":"research","objective":"x","agent":"other"}')
    assert err.metadata == {"field": "agent"}
    assert err.message == "`agent` appears more than once"

    err = refused(b'{"agent":"a","objective":"x","constraints":{"stream":true,"stream":false}}')
    assert err.metadata == {"field": "constraints.stream"}


def test_unpaired_surrogates_are_refused() -> None:
    err = refused(b'{"agent":"research","objective":"fix \\ud800 this"}')
    assert err.metadata == {"field": "objective"}
    assert "unpaired surrogate" in err.message


# --- The document as a whole ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"[]", "must be a JSON object, got an array"),
        (b'"research"', "got a string"),
        (b"42", "got a number"),
        (b"null", "got null"),
        (b"true", "got a boolean"),
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"{'agent': 'x'}", "not valid JSON"),
        (b'{"agent":"a","objective":"x"} trailing', "not valid JSON"),
        (b'{"agent":"a","objective":"x","constraints":{"timeout_seconds":NaN}}', "NaN"),
        (b'{"agent":"a","objective":"x","constraints":{"timeout_seconds":Infinity}}', "Infinity"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        (b'{"agent":"a","objective":"\xed\xa0\x80"}', "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a":' + b"9" * 5000 + b"}", "not valid JSON"),
    ],
)
def test_non_objects_and_non_json_are_refused_as_a_whole(raw: bytes, fragment: str) -> None:
    err = refused(raw)
    assert err.metadata == {"field": ""}
    assert fragment in err.message


@pytest.mark.parametrize("raw", [None, 42, 4.2, ["agent"], object()], ids=repr)
def test_raw_values_of_other_types_are_refused(raw: Any) -> None:
    err = refused(raw)
    assert err.metadata == {"field": ""}


def test_cyclic_and_non_json_mappings_are_refused() -> None:
    cyclic: dict[str, Any] = with_fields()
    cyclic["input"] = cyclic
    assert refused(cyclic).metadata == {"field": ""}
    assert "plain JSON" in refused(with_fields(objective={1, 2})).message
    assert "plain JSON" in refused({("agent",): "x"}).message
    assert "plain JSON" in refused(with_fields(constraints={"timeout_seconds": math.nan})).message

    deep: dict[str, Any] = {}
    for _ in range(100_000):
        deep = {"input": deep}
    assert refused(deep).metadata == {"field": ""}


def test_a_mapping_that_raises_is_refused() -> None:
    class Broken(dict[str, Any]):
        def __iter__(self) -> Any:
            raise KeyError("boom")

        def keys(self) -> Any:
            raise KeyError("boom")

    assert refused(Broken(agent="research")).metadata == {"field": ""}


def _padded_to(size: int) -> bytes:
    """A valid input of exactly `size` bytes: multi-byte text, then JSON whitespace."""
    body = json.dumps(
        with_fields(input={"prompt": "é" * MAX_TEXT_CHARS, "context": "漢" * 170_000}),
        ensure_ascii=False,
    ).encode()
    assert size - 20_000 < len(body) <= size
    return body + b" " * (size - len(body))


def test_body_at_the_size_limit_is_parsed_and_one_byte_more_is_refused() -> None:
    assert parse_tool_input(_padded_to(MAX_TOOL_INPUT_BYTES)).prompt == "é" * MAX_TEXT_CHARS

    err = refused(_padded_to(MAX_TOOL_INPUT_BYTES + 1))
    assert err.metadata == {"field": ""}
    assert err.message == (
        "tool input is larger than 1048576 bytes; pass large content as artifact references"
    )


def test_oversize_text_and_mappings_are_refused_by_their_utf8_size() -> None:
    text = _padded_to(MAX_TOOL_INPUT_BYTES + 1).decode()
    assert len(text) < MAX_TOOL_INPUT_BYTES  # only the UTF-8 size is over
    assert refused(text).metadata == {"field": ""}

    mapping = with_fields(
        input={"prompt": "é" * MAX_TEXT_CHARS, "context": "漢" * MAX_TEXT_CHARS},
        constraints={"stream": True},
    )
    assert "larger than" in refused(mapping).message
    assert "larger than" in refused(with_fields(objective="x" * (2 * MAX_TOOL_INPUT_BYTES))).message


def test_huge_values_are_never_echoed_back() -> None:
    err = refused(with_fields(agent="R" * 100_000))
    assert len(err.message) < 300
    assert '"' + "R" * 80 + '"...' in err.message

    err = refused(b'{"agent":"a","objective":"x","' + b"k" * 100_000 + b'":1}')
    assert len(err.message) < 300
    assert len(err.metadata["field"]) < 100  # type: ignore[index]

    err = refused(
        b'{"agent":"a","objective":"x","constraints":{"timeout_seconds":1' + b"0" * 4000 + b"}}"
    )
    assert len(err.message) < 300


def test_escaped_values_are_clipped_after_escaping() -> None:
    # Found by the fuzzer: 80 characters of DEL are 480 characters once escaped.
    err = refused(with_fields(agent="code-" + "\x7f" * 200))
    assert '"code-' + "\\u007f" * 12 + '"...' in err.message
    assert len(err.message) < 300


def test_paths_into_deep_documents_are_clipped() -> None:
    doc: dict[str, Any] = {"api_key": "x"}
    for _ in range(500):
        doc = {"level": doc}
    err = refused(json.dumps(with_fields(constraints=doc)))
    field = err.metadata["field"]  # type: ignore[index]
    assert field.startswith("constraints.level.level.")
    assert field.endswith("level.level.api_key")
    assert len(field) <= 163
    assert len(err.message) < 400


def test_control_characters_in_names_are_escaped_in_messages() -> None:
    err = refused(b'{"agent":"a","objective":"x","bad\\u001b[31mkey":1}')
    assert "\x1b" not in err.message
    assert "\x1b" not in err.metadata["field"]  # type: ignore[index]
    assert "\\u001b" in err.message


# --- Agent keys and the advertised schema -------------------------------------------------------


def test_is_agent_key() -> None:
    accepted = ["research", "code-review.v2", "9", "a" * 64]
    refused_keys = ["Research", "research\n", "", "-x", "a" * 65, "a/b", None, 7]
    assert [is_agent_key(key) for key in accepted] == [True] * len(accepted)
    assert [is_agent_key(key) for key in refused_keys] == [False] * len(refused_keys)


def _objects_in(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found.extend(_objects_in(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(_objects_in(value))
    return found


def test_schema_is_closed_everywhere_and_has_the_same_bounds() -> None:
    objects = _objects_in(TOOL_INPUT_SCHEMA)
    assert len(objects) == 4  # top level, input, each artifact, constraints
    assert all(obj["additionalProperties"] is False for obj in objects)
    assert TOOL_INPUT_SCHEMA["required"] == ["agent", "objective"]

    props = TOOL_INPUT_SCHEMA["properties"]
    assert props["agent"]["pattern"] == AGENT_KEY_PATTERN
    assert props["objective"]["maxLength"] == MAX_OBJECTIVE_CHARS
    assert props["input"]["properties"]["prompt"]["maxLength"] == MAX_TEXT_CHARS
    artifacts = props["input"]["properties"]["artifacts"]
    assert artifacts["maxItems"] == MAX_INPUT_ARTIFACTS
    assert artifacts["items"]["properties"]["uri"]["maxLength"] == MAX_URI_CHARS
    constraints = props["constraints"]["properties"]
    assert (
        constraints["timeout_seconds"]["minimum"],
        constraints["timeout_seconds"]["maximum"],
    ) == (1, 86400)
    assert (constraints["max_artifacts"]["minimum"], constraints["max_artifacts"]["maximum"]) == (
        0,
        1000,
    )
    assert (constraints["history_length"]["minimum"], constraints["history_length"]["maximum"]) == (
        0,
        10000,
    )
    assert constraints["stream"]["type"] == "boolean"
    assert "endpoint_url" not in json.dumps(TOOL_INPUT_SCHEMA)


def test_tool_input_schema_is_a_fresh_copy_with_an_optional_enum() -> None:
    plain = tool_input_schema()
    assert plain == TOOL_INPUT_SCHEMA
    assert plain is not TOOL_INPUT_SCHEMA
    plain["properties"]["agent"]["pattern"] = "changed"
    assert TOOL_INPUT_SCHEMA["properties"]["agent"]["pattern"] == AGENT_KEY_PATTERN

    keyed = tool_input_schema(["research", "code-review", "research"])
    assert keyed["properties"]["agent"]["enum"] == ["research", "code-review"]
    assert "enum" not in TOOL_INPUT_SCHEMA["properties"]["agent"]
    assert "enum" not in tool_input_schema([])["properties"]["agent"]


@pytest.mark.parametrize("keys", [["Research"], ["ok", "https://x"], "research"])
def test_tool_input_schema_refuses_keys_the_validator_would_refuse(keys: Any) -> None:
    with pytest.raises(ValueError, match="agent"):
        tool_input_schema(keys)


# --- Properties -----------------------------------------------------------------------------------

agent_keys = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,63}", fullmatch=True)
objectives = st.text(min_size=1, max_size=200).filter(lambda s: s.strip() != "")
texts = st.text(max_size=300)
labels = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)
uris = st.builds(
    lambda scheme, path: f"{scheme}://{path}",
    st.sampled_from(["host", "https", "s3", "file"]),
    st.text(
        st.characters(
            blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="@/\\?#"
        ),
        min_size=1,
        max_size=60,
    ),
)
mime_types = st.sampled_from(["text/markdown", "application/json", "image/png", "text/plain; a=b"])


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Absent (the key left out), null, or a value: the validator treats the first two alike."""
    return st.one_of(st.just(_ABSENT), st.none(), strategy)


_ABSENT = object()


def _drop_absent(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if v is not _ABSENT}


@st.composite
def artifacts(draw: st.DrawFn) -> dict[str, Any]:
    entry = _drop_absent(
        {
            "name": draw(_optional(labels)),
            "uri": draw(_optional(uris)),
            "mime_type": draw(_optional(mime_types)),
        }
    )
    if entry.get("name") is None and entry.get("uri") is None:
        entry["uri"] = draw(uris)
    return entry


@st.composite
def valid_inputs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {"agent": draw(agent_keys), "objective": draw(objectives)}
    body = draw(
        _optional(
            st.fixed_dictionaries(
                {},
                optional={
                    "prompt": st.none() | texts,
                    "context": st.none() | texts,
                    "artifacts": st.none() | st.lists(artifacts(), max_size=MAX_INPUT_ARTIFACTS),
                },
            )
        )
    )
    constraints = draw(
        _optional(
            st.fixed_dictionaries(
                {},
                optional={
                    "timeout_seconds": st.none() | st.integers(1, 86400),
                    "stream": st.none() | st.booleans(),
                    "max_artifacts": st.none() | st.integers(0, 1000),
                    "history_length": st.none() | st.integers(0, 10000),
                },
            )
        )
    )
    doc["input"], doc["constraints"] = body, constraints
    return _drop_absent(doc)


def _expected(doc: dict[str, Any]) -> ToolInput:
    body = doc.get("input") or {}
    constraints = doc.get("constraints") or {}
    return ToolInput(
        agent=doc["agent"],
        objective=doc["objective"],
        prompt=body.get("prompt"),
        context=body.get("context"),
        artifacts=tuple(InputArtifact(**entry) for entry in body.get("artifacts") or ()),
        timeout_seconds=constraints.get("timeout_seconds"),
        stream=constraints.get("stream"),
        max_artifacts=constraints.get("max_artifacts"),
        history_length=constraints.get("history_length"),
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(doc=valid_inputs(), form=st.sampled_from(["bytes", "str", "mapping"]))
def test_property_every_valid_input_parses_to_its_values(doc: dict[str, Any], form: str) -> None:
    raw: Any = {
        "bytes": json.dumps(doc).encode(),
        "str": json.dumps(doc, ensure_ascii=False),
        "mapping": doc,
    }[form]
    assert parse_tool_input(raw) == _expected(doc)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(
        st.sampled_from(["agent", "objective", "input", "constraints", "prompt", "artifacts",
                         "uri", "name", "stream", "timeout_seconds", "url", "x"]) | st.text(),
        children,
        max_size=5,
    ),
    max_leaves=30,
)  # fmt: skip


def _only_typed_errors(raw: Any) -> None:
    """`raw` parses to a ToolInput that keeps the invariants, or fails with the one typed error.

    Any other exception propagates and fails the test.
    """
    try:
        parsed = parse_tool_input(raw)
    except DelegationError as err:
        error = err
    else:
        assert is_agent_key(parsed.agent)
        assert parsed.objective.strip()
        return
    assert error.code == ErrorCode.INVALID_INPUT
    assert error.retryable is False
    assert error.metadata is not None
    assert isinstance(error.metadata["field"], str)


@settings(max_examples=300)
@given(value=json_values)
def test_property_any_json_value_parses_or_is_a_typed_error(value: Any) -> None:
    _only_typed_errors(value)
    _only_typed_errors(json.dumps(value))


@settings(max_examples=300)
@given(data=st.binary(max_size=300))
def test_property_any_bytes_parse_or_are_a_typed_error(data: bytes) -> None:
    _only_typed_errors(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(doc=valid_inputs(), path=st.sampled_from([
    ("agent",), ("objective",), ("input",), ("constraints",), ("input", "prompt"),
    ("input", "artifacts"), ("constraints", "timeout_seconds"), ("constraints", "stream"),
]), value=json_values)  # fmt: skip
def test_property_a_valid_input_with_one_field_replaced_parses_or_is_a_typed_error(
    doc: dict[str, Any], path: tuple[str, ...], value: Any
) -> None:
    target = doc
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value
    _only_typed_errors(json.dumps(doc).encode())
