"""`[metrics]` in the host TOML (`web.config`): off by default, its token named by a variable,
and refused on a listener beyond loopback without one; every mistake located."""

from __future__ import annotations

import textwrap

import attrs
import pytest

from web.config import ConfigError, MetricsEntry, parse_config

TOKEN = "metrics-token-9Gh2Kd7Lq0Zx"


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text), "host.toml")
    return caught.value


def test_metrics_are_off_by_default() -> None:
    config = parse_config("", "host.toml")
    assert config.metrics == MetricsEntry(enabled=False, token_env=None)
    assert config.metrics_token({}) is None


def test_enabled_metrics_with_a_token_read_it_from_the_environment() -> None:
    config = parse_config('[metrics]\nenabled = true\ntoken_env = "METRICS_TOKEN"\n', "host.toml")
    assert config.metrics == MetricsEntry(enabled=True, token_env="METRICS_TOKEN")
    assert config.metrics_token({"METRICS_TOKEN": TOKEN}) == TOKEN


def test_enabled_metrics_on_loopback_need_no_token() -> None:
    config = parse_config("[metrics]\nenabled = true\n", "host.toml")
    assert config.metrics.enabled and config.metrics_token({}) is None


def test_a_disabled_table_reads_no_variable() -> None:
    config = parse_config('[metrics]\ntoken_env = "METRICS_TOKEN"\n', "host.toml")
    assert config.metrics_token({}) is None


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("[metrics]\nenabled = 1\n", 2, "metrics.enabled", "must be true or false"),
        ("[metrics]\nenabled = true\nport = 9464\n", 3, "metrics.port", "unknown setting"),
        ('[metrics]\ntoken_env = "not a name"\n', 2, "metrics.token_env", ""),
        ("metrics = 3\n", 1, "metrics", "must be a table"),
        (
            '[server]\nhost = "0.0.0.0"\n\n[metrics]\nenabled = true\n',
            5,
            "metrics.enabled",
            "beyond loopback",
        ),
    ],
)
def test_mistakes_name_file_line_and_field(text: str, line: int, field: str, message: str) -> None:
    error = _error(text)
    assert (error.source, error.line, error.field) == ("host.toml", line, field)
    assert message in error.message


def test_the_token_variable_must_be_set_and_strong() -> None:
    config = parse_config('[metrics]\nenabled = true\ntoken_env = "METRICS_TOKEN"\n', "host.toml")
    with pytest.raises(ConfigError) as unset:
        config.metrics_token({})
    assert (unset.value.line, unset.value.field) == (3, "metrics.token_env")
    assert "is not set" in unset.value.message
    with pytest.raises(ConfigError) as weak:
        config.metrics_token({"METRICS_TOKEN": "short"})
    assert weak.value.field == "metrics.token_env" and "at least 16" in weak.value.message
    assert "short" not in str(weak.value)


def test_a_host_moved_beyond_loopback_after_reading_is_refused_too() -> None:
    """`serve --host 0.0.0.0` changes the host after the file was read."""
    config = parse_config("[metrics]\nenabled = true\n", "host.toml")
    moved = attrs.evolve(config, server=attrs.evolve(config.server, host="0.0.0.0"))
    with pytest.raises(ConfigError) as caught:
        moved.metrics_token({})
    assert caught.value.field == "metrics.enabled" and "beyond loopback" in caught.value.message


def test_a_listener_of_their_own_is_host_and_port() -> None:
    config = parse_config('[metrics]\nenabled = true\nlisten = "127.0.0.1:9464"\n', "host.toml")
    assert config.metrics.address == ("127.0.0.1", 9464)
    v6 = parse_config('[metrics]\nenabled = true\nlisten = "[::1]:0"\n', "host.toml")
    assert v6.metrics.address == ("::1", 0) and v6.metrics_token({}) is None


def test_their_own_listener_decides_whether_a_token_is_needed() -> None:
    # The server beyond loopback (with its host token), metrics on loopback only: no token.
    text = '[server]\nhost = "0.0.0.0"\n\n[metrics]\nenabled = true\nlisten = "127.0.0.1:9464"\n'
    assert parse_config(text, "host.toml").metrics_token({}) is None
    error = _error('[metrics]\nenabled = true\nlisten = "0.0.0.0:9464"\n')
    assert (error.line, error.field) == (3, "metrics.listen")
    assert "beyond loopback (0.0.0.0)" in error.message


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("9464", "must be host:port"),
        ("127.0.0.1:", "must be host:port"),
        (":9464", "must be host:port"),
        ("127.0.0.1:http", "must be host:port"),
        ("127.0.0.1:70000", "must be a TCP port"),
        ("::1:9464", "IPv6 address in brackets"),
    ],
)
def test_a_bad_listen_address_is_named(listen: str, message: str) -> None:
    error = _error(f'[metrics]\nlisten = "{listen}"\n')
    assert (error.line, error.field) == (2, "metrics.listen")
    assert message in error.message
