"""The SDK's error report of a session torn down mid-request, as the MCP endpoint logs it.

It must come out as one formatted debug line of the endpoint's own logger, shown only when the
host's logging configuration asks for debug, and never as the SDK's error record demoted in place
(which passed the SDK logger's level check as an error and reached every handler).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import pytest

from adapters.mcp import _endpoint

SESSION = "0123456789abcdef0123456789abcdef"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()  # no level of its own: it shows what the loggers let through
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter(logging.BASIC_FORMAT).format(record))


@pytest.fixture
def handler() -> Iterator[_Lines]:
    """A root handler like `logging.basicConfig`'s, the SDK logger under the endpoint's filter."""
    root = logging.getLogger()
    lines = _Lines()
    old_level = root.level
    root.addHandler(lines)
    sdk = logging.getLogger(_endpoint._SDK_TRANSPORT_LOGGER)
    teardown = _endpoint._TeardownLogFilter()
    sdk.addFilter(teardown)
    token = _endpoint._EXCHANGE.set(_endpoint._Exchange(session_id=SESSION))
    try:
        yield lines
    finally:
        _endpoint._EXCHANGE.reset(token)
        sdk.removeFilter(teardown)
        root.removeHandler(lines)
        root.setLevel(old_level)
        logging.getLogger(_endpoint.__name__).setLevel(logging.NOTSET)


def _sdk_reports_teardown() -> None:
    try:
        raise anyio.ClosedResourceError()
    except anyio.ClosedResourceError:
        logging.getLogger(_endpoint._SDK_TRANSPORT_LOGGER).exception(
            "Error handling POST request for session %s", SESSION
        )


def test_a_teardown_report_is_hidden_at_the_default_level(handler: _Lines) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    _sdk_reports_teardown()
    assert handler.lines == []
    exchange = _endpoint._EXCHANGE.get()
    assert exchange is not None and exchange.session_ended


def test_a_teardown_report_is_one_formatted_debug_line_of_the_endpoint(handler: _Lines) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger(_endpoint.__name__).setLevel(logging.DEBUG)
    _sdk_reports_teardown()
    assert len(handler.lines) == 1
    line = handler.lines[0]
    assert line.startswith(f"DEBUG:{_endpoint.__name__}:Error handling POST request for session ")
    assert "the session ended meanwhile (ClosedResourceError())" in line
    assert "%s" not in line and "%r" not in line
    assert SESSION not in line  # session ids are redacted as in every other SDK line
    assert "Traceback" not in line


def test_other_errors_of_the_sdk_are_left_alone(handler: _Lines) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    try:
        raise ValueError("not a teardown")
    except ValueError:
        logging.getLogger(_endpoint._SDK_TRANSPORT_LOGGER).exception("Error in message router")
    assert len(handler.lines) == 1
    assert handler.lines[0].startswith("ERROR:mcp.server.streamable_http:Error in message router")
