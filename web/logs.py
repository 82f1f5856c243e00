"""The server process's log output: its format, its level, its access log, its redaction.

The engine writes one line at each run's and each delegation's start and end on the
`subagent_engine.runs` logger (`engine.RUN_LOG`, fields in the record's attributes); this module
decides how a process shows them and every other record, and owns nothing the engine decides.
`configure_logging` puts one handler on the root logger writing to a stream (stderr) in one of
`LOG_FORMATS`:

- `text`: one readable line per record: `2026-12-04T13:05:00.123Z INFO subagent_engine.runs
  run.end run=run-1f2e status=finished duration=1.234s delegations=2`;
- `json`: one JSON object per line (JSON Lines) with the stable keys `ts`, `level`, `logger`,
  `event` (the record's `event` attribute, else `log`) and `message` for records without an
  event, then the record's own fields (`run_id`, `status`, `duration_s`, ...).

`AccessLog` (ASGI middleware, off unless asked for) adds one `http.request` line per HTTP request
or WebSocket connection once it has ended: method, path, status, bytes sent, duration, remote
address. The path is the ASGI `path`, which never holds the query string (a viewer token may
ride in `?token=`), and no header is read, so an `Authorization` value never reaches a line.

Every line, whatever logger wrote it, passes the host's `Redactor` last (the configured agent
credentials, the host token): a secret that slipped into some library's message is still never
written.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Iterable
from typing import Any, Final, TextIO

import trio

from engine import Redactor, render_fields

__all__ = [
    "ACCESS_LOG",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "AccessLog",
    "LineFormatter",
    "configure_logging",
]

#: `[logging] format` / `--log-format`.
LOG_FORMATS: Final = ("text", "json")
#: `[logging] level`.
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The loggers of this checkout, which `configure_logging`'s level applies to.
OWN_LOGGERS: Final = ("subagent_engine", "engine", "adapters", "web", "cli", "demo")
#: The logger of the access log's lines.
ACCESS_LOG: Final = logging.getLogger("subagent_engine.access")

#: The attributes every `LogRecord` has: whatever else a record carries came in `extra`.
_STANDARD: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class LineFormatter(logging.Formatter):
    """One line per record, `text` or `json` (see the module), redacted by `redactor`."""

    def __init__(self, kind: str = "text", redactor: Redactor | None = None) -> None:
        if kind not in LOG_FORMATS:
            raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {kind!r}")
        super().__init__()
        self.kind = kind
        self.redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        problem = self.formatException(record.exc_info) if record.exc_info else None
        if self.kind == "json":
            event = getattr(record, "event", None)
            document: dict[str, Any] = {
                "ts": _timestamp(record),
                "level": record.levelname,
                "logger": record.name,
                "event": event if isinstance(event, str) else "log",
            }
            if not isinstance(event, str):
                document["message"] = message
            for name, value in record.__dict__.items():
                if name not in _STANDARD and name != "event":
                    document[name] = _jsonable(value)
            if problem:
                document["exception"] = problem
            line = json.dumps(document, ensure_ascii=False)
        else:
            line = f"{_timestamp(record)} {record.levelname} {record.name} {message}"
            if problem:
                line += "\n" + problem
        # A record's message may span lines (a library's, a traceback): in JSON it is escaped;
        # in text the continuation lines are indented so that they cannot pass for records.
        line = line.replace("\n", "\n    ") if self.kind == "text" else line
        return self.redactor.text(line) if self.redactor else line


def configure_logging(
    kind: str = "text",
    level: str = "INFO",
    *,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Write the checkout's records at `level` or above (`OWN_LOGGERS`; other libraries' at
    WARNING or above) to `stream` (default stderr) in format `kind`, redacting `secrets`.
    Replaces the handler this function installed before (a process, or a test, may call it
    again). Returns the handler."""
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_subagent_engine", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._subagent_engine = True  # type: ignore[attr-defined]
    handler.setFormatter(LineFormatter(kind, Redactor(s for s in secrets if s)))
    root.addHandler(handler)
    threshold = getattr(logging, level)
    # The libraries (HTTP clients, protocol SDKs) say at INFO what only their own debugging
    # needs (an HTTP client logs each request's whole URL): they stay at WARNING or above.
    root.setLevel(max(threshold, logging.WARNING))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(threshold)
    return handler


class AccessLog:
    """ASGI middleware: one `http.request` line on `ACCESS_LOG` per HTTP request or WebSocket
    connection, written when the application call returns (a stream's line comes at its end).
    A WebSocket's status is 101 once accepted, else the status of the response that refused it
    (403 when it was closed before accepting, as ASGI servers answer)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket") or not ACCESS_LOG.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        began = trio.current_time()
        status: int | None = None
        sent = 0

        async def counting_send(message: Any) -> None:
            nonlocal status, sent
            what = message.get("type")
            if what in ("http.response.start", "websocket.http.response.start"):
                status = int(message.get("status", 0))
            elif what in ("http.response.body", "websocket.http.response.body"):
                sent += len(message.get("body", b""))
            elif what == "websocket.accept":
                status = 101
            elif what == "websocket.send":
                data = message.get("bytes") or (message.get("text") or "").encode()
                sent += len(data)
            elif what == "websocket.close" and status is None:
                status = 403
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            client = scope.get("client")
            fields = {
                "method": scope.get("method", "GET"),
                "path": scope.get("path", ""),
                "status": status,
                "bytes": sent,
                "duration_s": trio.current_time() - began,
                "remote": f"{client[0]}:{client[1]}" if client else None,
            }
            if kind == "websocket":
                fields["websocket"] = True
            ACCESS_LOG.info(
                "%s",
                render_fields("http.request", fields),
                extra={"event": "http.request", **fields},
            )
