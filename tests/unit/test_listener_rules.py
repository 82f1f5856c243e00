"""The request rules every listener applies (`adapters.listener._rules`), as pure functions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.listener import (
    MAX_JSON_DEPTH,
    Refusal,
    bearer_token,
    check_host,
    check_origin,
    check_single_valued,
    is_bearer_credential,
    is_json_media_type,
    is_loopback,
    parse_cursor,
    parse_json_body,
    require_bearer,
)


def refusal(call: object, *args: object, **kwargs: object) -> Refusal:
    with pytest.raises(Refusal) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize(
    "host",
    [b"127.0.0.1:8080", b"localhost:8080", b"LOCALHOST", b"[::1]:9", b"10.1.2.3", b"[fe80::1]"],
)
def test_ip_literals_and_localhost_are_always_served(host: bytes) -> None:
    check_host(host, ())


@pytest.mark.parametrize(
    "host", [b"evil.example:8080", b"127.0.0.1.nip.io", b"localhost.evil.example", b"", b"a:b:c"]
)
def test_other_names_are_misdirected(host: bytes) -> None:
    found = refusal(check_host, host, ())
    assert (found.status, found.error) == (421, "unknown_host")
    assert b"evil" not in found.body()  # nothing the caller sent is echoed


def test_configured_names_and_the_wildcard_are_served() -> None:
    check_host(b"agents.example:443", {"agents.example"})
    check_host(b"anything.example", {"*"})
    check_host(None, ())  # HTTP/1.0 without Host: not a browser
    refusal(check_host, b"other.example", {"agents.example"})


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (b"http://127.0.0.1:8080", b"127.0.0.1:8080"),
        (b"http://localhost:8080", b"LOCALHOST:8080"),
        (b"https://agents.example", b"agents.example:443"),
        (b"http://agents.example", b"agents.example"),
    ],
)
def test_a_page_of_the_listeners_own_origin_passes(origin: bytes, host: bytes) -> None:
    check_origin(origin, host, ())


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (b"http://evil.example", b"127.0.0.1:8080"),
        (b"http://127.0.0.1:9999", b"127.0.0.1:8080"),
        (b"null", b"127.0.0.1:8080"),
        (b"file://", b"127.0.0.1:8080"),
        (b"http://127.0.0.1:8080", None),
        (b"not a url", b"127.0.0.1:8080"),
    ],
)
def test_a_page_of_another_origin_is_forbidden(origin: bytes, host: bytes | None) -> None:
    found = refusal(check_origin, origin, host, ())
    assert (found.status, found.error) == (403, "forbidden_origin")


def test_configured_origins_pass_and_programs_without_origin_pass() -> None:
    check_origin(b"https://app.example", b"127.0.0.1:8080", {"https://app.example"})
    check_origin(None, b"127.0.0.1:8080", ())
    refusal(check_origin, b"null", b"127.0.0.1:8080", {"null"})


def test_repeated_single_valued_headers_are_refused() -> None:
    check_single_valued([(b"accept", b"a"), (b"accept", b"b"), (b"host", b"x")])
    found = refusal(check_single_valued, [(b"Host", b"a"), (b"host", b"b")])
    assert (found.status, found.error) == (400, "duplicate_header")


@pytest.mark.parametrize("scheme", [b"Bearer", b"bearer", b"BEARER", b"bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(scheme: bytes) -> None:
    assert bearer_token([scheme + b" abc-DEF_123.~+/="]) == "abc-DEF_123.~+/="


def test_no_authorization_is_none_and_two_are_refused() -> None:
    assert bearer_token([]) is None
    found = refusal(bearer_token, [b"Bearer a", b"Bearer b"])
    assert (found.status, found.error) == (400, "duplicate_header")


@pytest.mark.parametrize(
    "value", [b"Basic dXNlcjpwYXNz", b"Bearer", b"Bearer ", b"Bearer a b", b"Bearer \xff", b"tok"]
)
def test_a_malformed_authorization_is_unauthorized(value: bytes) -> None:
    found = refusal(bearer_token, [value])
    assert (found.status, found.error) == (401, "bad_authorization")
    assert dict(found.headers)["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"application/json", True),
        (b"Application/JSON; charset=utf-8", True),
        (b"application/vnd.api+json", True),
        (b"text/plain", False),
        (b"application/x-www-form-urlencoded", False),
        (b"multipart/form-data; boundary=x", False),
        (b"text/json+plain", False),
        (None, False),
    ],
)
def test_json_media_types(value: bytes | None, expected: bool) -> None:
    assert is_json_media_type(value) is expected


def test_loopback_binds() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.1")
    assert not is_loopback("example.com")


def test_a_deep_body_is_refused_at_any_depth_the_parser_reaches() -> None:
    for depth in (MAX_JSON_DEPTH + 1, 5_000, 100_000):
        body = b"[" * depth + b"]" * depth
        found = refusal(parse_json_body, body)
        assert (found.status, found.error) == (400, "too_deep")
    nested = b'{"a":' * (MAX_JSON_DEPTH - 1) + b"[]" + b"}" * (MAX_JSON_DEPTH - 1)
    assert parse_json_body(nested) is not None


@pytest.mark.parametrize(
    "body", [b"", b"{", b"NaN", b'{"a": Infinity}', b"[-Infinity]", b"1" * 5000, b"\xff\xfe"]
)
def test_not_json_is_bad_json(body: bytes) -> None:
    found = refusal(parse_json_body, body)
    assert (found.status, found.error) == (400, "bad_json")


def test_lone_surrogates_become_replacement_characters_in_keys_and_values() -> None:
    document = parse_json_body(b'{"\\ud800k": ["a\\udfffb", {"x": "\\ud83d\\ude00"}]}')
    assert document == {"\ufffdk": ["a\ufffdb", {"x": "\U0001f600"}]}
    json.dumps(document).encode("utf-8")  # writable as UTF-8 everywhere
    assert parse_json_body(b'"\\udc00"') == "\ufffd"


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=30,
)


@given(_JSON)
def test_documents_within_the_depth_read_back_as_they_were(document: object) -> None:
    assert parse_json_body(json.dumps(document).encode(), max_depth=10_000) == document


@given(
    st.lists(st.sampled_from(["a", "\\ud800", "\\udfff", "\\ud83d\\ude00", "\\u00e9"]), max_size=8)
)
def test_any_escaped_text_reads_as_writable_utf8(pieces: list[str]) -> None:
    body = ('"' + "".join(pieces) + '"').encode()
    parsed = parse_json_body(body)
    parsed.encode("utf-8")  # no lone surrogate survives
    # UTF-16's own reading: pairs join into one character, each lone half becomes U+FFFD.
    expected = json.loads(body).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert parsed == expected


@pytest.mark.parametrize("value", ["0", "17", "000123", "999999999999999999", None, ""])
def test_cursors(value: str | None) -> None:
    expected = None if not value else int(value)
    assert parse_cursor(value) == expected


@pytest.mark.parametrize(
    "value", ["\u00b2", "\u0661", "1\u00b2", "-1", "+1", " 1", "1 ", "1.0", "0x1", "9" * 19, "١٢"]
)
def test_anything_but_ascii_digits_is_a_bad_cursor(value: str) -> None:
    found = refusal(parse_cursor, value)
    assert (found.status, found.error) == (400, "bad_cursor")
    found = refusal(parse_cursor, value.encode("utf-8"))
    assert found.error == "bad_cursor"


def test_require_bearer_takes_only_the_expected_credential() -> None:
    require_bearer([b"bearer tok-0123456789abcdef"], "tok-0123456789abcdef", message="m")
    for values in ([], [b"Bearer other-0123456789ab"]):
        found = refusal(require_bearer, values, "tok-0123456789abcdef", message="who are you")
        assert (found.status, found.error, found.message) == (401, "unauthorized", "who are you")
        assert dict(found.headers)["www-authenticate"] == 'Bearer realm="subagent-engine"'
    found = refusal(require_bearer, [b"Basic x"], "tok", message="m", realm="a2a")
    assert dict(found.headers)["www-authenticate"] == 'Bearer realm="a2a"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [("abc-DEF_1.~+/==", True), ("a b", False), ("t\u00f6ken", False), ("", False), ("=a", False)],
)
def test_what_can_travel_as_a_bearer_credential(value: str, expected: bool) -> None:
    assert is_bearer_credential(value) is expected
