"""`[server] shutdown_grace_seconds`: how long `serve` drains on SIGINT/SIGTERM."""

from __future__ import annotations

import pytest

from web.config import ConfigError, ServerEntry, parse_config


def test_the_grace_defaults_to_a_few_seconds_and_is_read() -> None:
    assert (
        parse_config("", "<embedded>").server.shutdown_grace_seconds
        == ServerEntry().shutdown_grace_seconds
        == 5.0
    )
    config = parse_config("[server]\nshutdown_grace_seconds = 12\n", "host.toml")
    assert config.server.shutdown_grace_seconds == 12.0


@pytest.mark.parametrize("value", ["0", "-1", '"5"'])
def test_a_grace_that_is_not_a_positive_number_is_refused_at_its_line(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"[server]\nport = 0\nshutdown_grace_seconds = {value}\n", "host.toml")
    assert str(raised.value).startswith("host.toml:3: server.shutdown_grace_seconds: ")
