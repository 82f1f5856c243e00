"""Unit tests of `engine._redact`: which secrets are redacted where, streams, valid Unicode.

Sans-IO: strings in, strings out; the registry's warning is read from the log with caplog.
"""

from __future__ import annotations

import logging

import pytest

from adapters.inprocess import InProcessTarget
from engine import REDACTED, AgentSpec, RedactedStream, Redactor, Registry, valid_text, valid_value
from engine._redact import SHORT_SECRET_CHARS, is_valid_unicode


def test_every_configured_secret_is_redacted_however_short() -> None:
    for secret in ("k", "ab", "pin9", "x-1y2", "abcdef"):
        assert Redactor([secret]).text(f"key={secret};") == f"key={REDACTED};", secret


def test_a_short_secret_is_redacted_only_as_a_token_of_its_own() -> None:
    redactor = Redactor(["abc"])
    assert redactor.text("abc abcdef xabc abc_ 1abc (abc) abc") == (
        f"{REDACTED} abcdef xabc abc_ 1abc ({REDACTED}) {REDACTED}"
    )
    # Only the sides where the secret itself has a word character need a boundary.
    assert Redactor(["-ab-"]).text("x-ab-y") == f"x{REDACTED}y"


def test_a_long_secret_is_redacted_wherever_it_occurs() -> None:
    secret = "s3cr3t"
    assert len(secret) == SHORT_SECRET_CHARS
    assert Redactor([secret]).text(f"xx{secret}yy") == f"xx{REDACTED}yy"


def test_where_secrets_overlap_the_longest_at_the_leftmost_place_wins() -> None:
    redactor = Redactor(["ABCDEF", "ABCDEFGH", "FGHIJK"])
    # ABCDEFGH starts first and is the longer: replaced whole, whatever the configured order.
    assert redactor.text("..ABCDEFGHIJK..") == f"..{REDACTED}IJK.."
    assert Redactor(["FGHIJK", "ABCDEF", "ABCDEFGH"]).text("..ABCDEFGHIJK..") == (
        f"..{REDACTED}IJK.."
    )


def test_no_secrets_is_falsy_and_empty_values_are_ignored() -> None:
    assert not Redactor()
    assert not Redactor(["", ""])
    assert Redactor(["", "k"])
    assert Redactor().text("anything") == "anything"


def test_values_are_redacted_in_keys_strings_and_models() -> None:
    from engine import ArtifactRef, DelegationError

    secret = "sk-LIVE-0123"
    redactor = Redactor([secret])
    value = {secret: [secret, {"n": 1, "t": f"a{secret}"}], "ok": None}
    assert redactor.value(value) == {
        REDACTED: [REDACTED, {"n": 1, "t": f"a{REDACTED}"}],
        "ok": None,
    }
    artifact = redactor.value(ArtifactRef(id="a", uri=f"s3://{secret}", size_bytes=3))
    assert artifact == ArtifactRef(id="a", uri=f"s3://{REDACTED}", size_bytes=3)
    error = redactor.value(DelegationError(code="remote_failed", message=f"bad {secret}"))
    assert (error.code, error.message, error.retryable) == (
        "remote_failed",
        f"bad {REDACTED}",
        False,
    )


def test_an_error_code_and_an_event_kind_are_never_redacted() -> None:
    from engine import DelegationError, Kind, TargetUpdate

    redactor = Redactor(["remote", "text"])
    error = redactor.value(DelegationError(code="remote_failed", message="remote text"))
    assert (error.code, error.message) == ("remote_failed", f"{REDACTED} {REDACTED}")
    update = redactor.value(TargetUpdate(kind=Kind.TEXT_DELTA, delta="text", error=error))
    assert (update.kind, update.delta, update.error.code) == (
        Kind.TEXT_DELTA,
        REDACTED,
        "remote_failed",
    )


# -- streams ---------------------------------------------------------------------------------


def stream_of(redactor: Redactor, *pieces: str) -> list[str]:
    stream = redactor.stream()
    return [stream.feed(piece) for piece in pieces] + [stream.close()]


def test_a_secret_split_across_pieces_is_redacted_as_one_text() -> None:
    shown = stream_of(Redactor(["secret-token"]), "my sec", "ret-to", "ken, ok")
    assert shown == ["my ", "", f"{REDACTED}, ok", ""]
    assert all("sec" not in piece or REDACTED in piece for piece in shown)


def test_a_stream_holds_only_what_could_still_become_a_secret() -> None:
    stream = Redactor(["secret-token"]).stream()
    assert stream.feed("nothing to hide here") == "nothing to hide here"
    assert stream.held == ""
    assert stream.feed(" but s") == " but "  # "s" may start the secret
    assert stream.held == "s"
    assert stream.feed("o on") == "so on"
    assert stream.close() == ""


def test_a_stream_releases_its_held_tail_when_closed() -> None:
    assert stream_of(Redactor(["secret-token"]), "the end: secret-tok") == [
        "the end: ",
        "secret-tok",
    ]


def test_a_short_secret_waits_for_the_character_after_it() -> None:
    redactor = Redactor(["abc"])
    assert stream_of(redactor, "x abc", "def") == ["x ", "abcdef", ""]
    assert stream_of(redactor, "x abc", " y") == ["x ", f"{REDACTED} y", ""]
    assert stream_of(redactor, "x abc") == ["x ", REDACTED]
    # ... and looks at the character before it, released long ago.
    assert stream_of(redactor, "xab", "c d") == ["x", "abc d", ""]


def test_a_stream_needs_secrets() -> None:
    with pytest.raises(ValueError, match="needs a redactor with secrets"):
        RedactedStream(Redactor())


# -- valid Unicode -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("plain", "plain"),
        ("é😀", "é😀"),
        ("a\ud800b", "a\ufffdb"),
        ("\udc00", "\ufffd"),
        ("end\ud83d", "end\ufffd"),
        ("\ud83d\ude00", "😀"),  # a pair spelled as two code points is the character it spells
        ("\ude00\ud83d", "\ufffd\ufffd"),
    ],
)
def test_valid_text_replaces_unpaired_surrogates(text: str, valid: str) -> None:
    assert valid_text(text) == valid
    valid_text(text).encode("utf-8")
    assert is_valid_unicode(text) == (text == valid)


def test_ascii_and_valid_text_come_back_as_the_same_object() -> None:
    for text in ("ascii", "é😀"):
        assert valid_text(text) is text


def test_valid_value_repairs_keys_strings_and_models() -> None:
    from engine import DelegationError

    value = {"\ud800": ["x\udfff", 1, None, {"k": "\ud800"}]}
    assert valid_value(value) == {"\ufffd": ["x\ufffd", 1, None, {"k": "\ufffd"}]}
    assert not is_valid_unicode(value)
    assert is_valid_unicode(valid_value(value))
    error = valid_value(DelegationError(code="x", message="m\ud800"))
    assert error.message == "m\ufffd"


def test_redaction_applies_to_the_valid_text() -> None:
    assert Redactor(["secret-token"]).text("\ud800secret-token") == f"\ufffd{REDACTED}"


# -- the registry ----------------------------------------------------------------------------


async def _agent(task: object) -> str:
    return "ok"


def test_the_registry_warns_about_a_credential_too_short_to_be_safe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    short = AgentSpec(key="short", target=InProcessTarget(_agent), secrets=("pin9",))
    fine = AgentSpec(key="fine", target=InProcessTarget(_agent), secrets=("a-long-credential",))
    with caplog.at_level(logging.WARNING, logger="subagent_engine"):
        Registry([short, fine])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'short'" in warnings[0] and "4 characters" in warnings[0]
    assert "pin9" not in warnings[0]  # never the value itself


# -- the one redactor ------------------------------------------------------------------------


def test_the_mcp_sdks_log_lines_lose_session_ids_to_the_one_redactor() -> None:
    """The MCP endpoint knows which words are session ids (their shape); it redacts them as
    every secret is redacted, with `Redactor`."""
    from adapters.mcp._endpoint import _SessionIdFilter

    session = "0123456789abcdef0123456789abcdef"
    record = logging.LogRecord(
        "mcp.server.streamable_http", logging.INFO, __file__, 1, "Terminating %s (%s)",
        (session, "x" + session), None,
    )  # fmt: skip
    assert _SessionIdFilter().filter(record)
    # Found by its shape where it stands alone, then redacted wherever it is, as a secret is.
    assert record.getMessage() == f"Terminating {REDACTED} (x{REDACTED})"
    plain = logging.LogRecord("mcp", logging.INFO, __file__, 1, "no ids: %s", ("abc",), None)
    assert _SessionIdFilter().filter(plain) and plain.args == ("abc",)
