"""The process's log output (`web.logs`): both formats line by line, redaction, the handler it
installs, and the `[logging]` table of the host configuration."""

from __future__ import annotations

import io
import json
import logging
import sys
import textwrap
from collections.abc import Iterator

import pytest

from engine import Redactor, render_fields
from web.config import ConfigError, LoggingEntry, parse_config
from web.logs import OWN_LOGGERS, LineFormatter, configure_logging

#: 2026-12-04T13:05:00.123Z
CREATED = 1796389500.123


def record(
    message: str = "%s", *args: object, name: str = "x", **extra: object
) -> logging.LogRecord:
    made = logging.LogRecord(name, logging.INFO, __file__, 1, message, args, None)
    made.created = CREATED
    made.__dict__.update(extra)
    return made


def run_end() -> logging.LogRecord:
    fields = {"run_id": "run-1", "status": "finished", "duration_s": 1.2341, "delegations": 2}
    return record(
        "%s",
        render_fields("run.end", fields),
        name="subagent_engine.runs",
        event="run.end",
        error_code=None,
        **fields,
    )


def test_text_is_one_stable_readable_line() -> None:
    line = LineFormatter("text").format(run_end())
    assert line == (
        "2026-12-04T13:05:00.123Z INFO subagent_engine.runs "
        "run.end run=run-1 status=finished duration=1.234s delegations=2"
    )


def test_json_lines_parse_with_stable_keys_then_the_fields() -> None:
    line = LineFormatter("json").format(run_end())
    assert "\n" not in line
    document = json.loads(line)
    assert list(document)[:4] == ["ts", "level", "logger", "event"]
    assert document == {
        "ts": "2026-12-04T13:05:00.123Z",
        "level": "INFO",
        "logger": "subagent_engine.runs",
        "event": "run.end",
        "error_code": None,
        "run_id": "run-1",
        "status": "finished",
        "duration_s": 1.2341,
        "delegations": 2,
    }


def test_a_record_without_an_event_keeps_its_message_and_exception() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        made = record("lost %d\nrows", 3, name="web.server")
        made.exc_info = sys.exc_info()
    document = json.loads(LineFormatter("json").format(made))
    assert document["event"] == "log" and document["message"] == "lost 3\nrows"
    assert "ValueError: bad" in document["exception"]
    text = LineFormatter("text").format(made)
    # Continuation lines are indented: none can pass for a record of its own.
    assert all(line.startswith("    ") for line in text.splitlines()[1:])
    assert text.startswith("2026-12-04T13:05:00.123Z INFO web.server lost 3")


@pytest.mark.parametrize("kind", ["text", "json"])
def test_a_configured_secret_never_reaches_a_line(kind: str) -> None:
    formatter = LineFormatter(kind, Redactor(["sk-secret-0123456789"]))
    made = record("sent header Bearer %s", "sk-secret-0123456789", token="sk-secret-0123456789")
    line = formatter.format(made)
    assert "sk-secret-0123456789" not in line and "[REDACTED]" in line


def test_an_unknown_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        LineFormatter("xml")
    with pytest.raises(ValueError, match="log level"):
        configure_logging("text", "LOUD")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *OWN_LOGGERS)}
    handlers = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_configuring_again_replaces_the_handler_and_keeps_libraries_at_warning() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", "INFO", stream=first)
    configure_logging("json", "DEBUG", stream=second)
    logging.getLogger("subagent_engine.runs").debug("mine")
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/?token=t")
    logging.getLogger("httpx").warning("a library warning")
    assert first.getvalue() == ""
    written = [json.loads(line) for line in second.getvalue().splitlines()]
    assert [w["message"] for w in written] == ["mine", "a library warning"]


def test_the_logging_table_defaults_and_values() -> None:
    assert parse_config("", "host.toml").logging == LoggingEntry("text", "INFO", False)
    text = '[logging]\nformat = "json"\nlevel = "debug"\naccess_log = true\n'
    assert parse_config(text, "host.toml").logging == LoggingEntry("json", "DEBUG", True)


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ('[logging]\nformat = "xml"\n', 2, "logging.format", "must be one of text, json"),
        ('[logging]\n\nlevel = "LOUD"\n', 3, "logging.level", "must be one of DEBUG"),
        ('[logging]\naccess_log = "yes"\n', 2, "logging.access_log", "must be true or false"),
        ("[logging]\nformat = 1\n", 2, "logging.format", "must be a string"),
        ('[logging]\nfile = "x.log"\n', 2, "logging.file", "unknown setting"),
        ('logging = "json"\n', None, "logging", "must be a table"),
    ],
)
def test_logging_mistakes_name_file_line_and_field(
    text: str, line: int | None, field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text), "bad.toml")
    error = caught.value
    assert (error.source, error.field) == ("bad.toml", field)
    if line is not None:
        assert error.line == line
    assert message in error.message
