"""The server's Prometheus metrics: what `/metrics` answers, and the viewer count behind it.

This module owns turning the engine's counters (`Engine.statistics()`, `engine._stats`) into
the Prometheus text exposition format
(https://prometheus.io/docs/instrumenting/exposition_formats/) with `prometheus_client`. The
`EngineCollector` reads the engine only when a scrape asks, so a run's events pay nothing for
metrics; `ViewerCount` (ASGI middleware) counts the streams being served, by transport. Both are
built only when `[metrics] enabled` is set: off, `/metrics` is 404 and nothing is collected
beyond the engine's own plain counters.

Label values come only from closed sets: agent keys from the host's registry, statuses, error
codes, run outcomes, recovery reasons and remote-cancel outcomes from the engine's own
enumerations, transports from this module (`sse`, `ws`). Anything else (a name a parent asked
for, a code nobody defined) is `other`: nothing a request or a remote sends becomes a label
value.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from quart import Response, request
from quart_trio import QuartTrio

from adapters.listener import RequestGuard, require_bearer
from engine import (
    METRIC_ERROR_CODES,
    METRIC_NONE,
    METRIC_OTHER,
    METRIC_RECOVERY_REASONS,
    METRIC_REMOTE_CANCELS,
    METRIC_RUN_OUTCOMES,
    METRIC_STATUSES,
    Engine,
)

__all__ = [
    "CONTENT_TYPE",
    "PREFIX",
    "EngineCollector",
    "Metrics",
    "ViewerCount",
    "metrics_app",
]

#: Every metric's name starts with it.
PREFIX: Final = "subagent_engine_"
#: The `Content-Type` of a scrape's answer: text format 0.0.4, which every Prometheus reads.
CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
#: The transports a viewer's stream uses (`ViewerCount`).
TRANSPORTS: Final = ("sse", "ws")
#: A delegation's error code: the engine's, or `none` (a delegation that did not fail).
_ERROR_CODES: Final = METRIC_ERROR_CODES | {METRIC_NONE}


def _closed(value: str, allowed: Collection[str]) -> str:
    return value if value in allowed else METRIC_OTHER


class ViewerCount:
    """ASGI middleware: how many viewers' streams are being served now, by transport. An HTTP
    response counts as `sse` from the moment it starts as `200 text/event-stream` (a run's
    events, `POST /agui`) until the request ends; a WebSocket as `ws` once it is accepted."""

    def __init__(self, app: Any, active: dict[str, int] | None = None) -> None:
        self.app = app
        #: Transport -> streams open now (shared with the `EngineCollector` that reports it).
        self.active = active if active is not None else dict.fromkeys(TRANSPORTS, 0)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        counted: str | None = None

        async def counting_send(message: Any) -> None:
            nonlocal counted
            what = message.get("type")
            if counted is None:
                if what == "websocket.accept":
                    counted = "ws"
                elif what == "http.response.start" and message.get("status") == 200:
                    for name, value in message.get("headers", ()):
                        if name.lower() == b"content-type" and value.startswith(
                            b"text/event-stream"
                        ):
                            counted = "sse"
                            break
                if counted is not None:
                    self.active[counted] += 1
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if counted is not None:
                self.active[counted] -= 1


class EngineCollector(Collector):
    """A `prometheus_client` collector that reads `engine` (and `viewers`, if given) at each
    scrape. The metrics are listed in the README's "Metrics" section."""

    def __init__(self, engine: Engine, viewers: dict[str, int] | None = None) -> None:
        self.engine = engine
        self.viewers = viewers

    def describe(self) -> list[Metric]:
        return []  # no scrape at registration: the engine may not be open yet

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.statistics()
        agents = stats.agents

        def counter(name: str, doc: str, value: int) -> CounterMetricFamily:
            return CounterMetricFamily(PREFIX + name, doc, value=value)

        def gauge(name: str, doc: str, value: int) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, value=value)

        yield counter("runs_started", "Runs started.", stats.runs_started)
        ended = CounterMetricFamily(
            PREFIX + "runs_ended", "Runs ended, by outcome.", labels=["outcome"]
        )
        by_outcome = dict.fromkeys(METRIC_RUN_OUTCOMES, 0)
        for outcome, count in stats.runs_ended.items():
            key = _closed(outcome, METRIC_RUN_OUTCOMES)
            by_outcome[key] = by_outcome.get(key, 0) + count
        for outcome, count in by_outcome.items():
            ended.add_metric([outcome], count)
        yield ended
        recovered = CounterMetricFamily(
            PREFIX + "runs_recovered",
            "Runs a stopped process left live that recovery ended, by reason and outcome.",
            labels=["reason", "outcome"],
        )
        by_recovery = {
            (reason, outcome): 0
            for reason in METRIC_RECOVERY_REASONS
            for outcome in METRIC_RUN_OUTCOMES
        }
        for (reason, outcome), count in stats.runs_recovered.items():
            closed = (
                _closed(reason, METRIC_RECOVERY_REASONS),
                _closed(outcome, METRIC_RUN_OUTCOMES),
            )
            by_recovery[closed] = by_recovery.get(closed, 0) + count
        for (reason, outcome), count in by_recovery.items():
            recovered.add_metric([reason, outcome], count)
        yield recovered
        yield gauge("runs_active", "Runs open now.", stats.runs_active)
        yield gauge("delegations_active", "Delegations running now.", stats.delegations_active)
        delegations = CounterMetricFamily(
            PREFIX + "delegations_ended",
            "Delegations ended, by agent key, status and error code.",
            labels=["agent", "status", "error_code"],
        )
        merged: dict[tuple[str, str, str], int] = {}
        for (agent, status, code), count in stats.delegations_ended.items():
            labels = (
                agent if agent in agents else METRIC_OTHER,
                _closed(status, METRIC_STATUSES),
                _closed(code, _ERROR_CODES),
            )
            merged[labels] = merged.get(labels, 0) + count
        for found, count in sorted(merged.items()):
            delegations.add_metric(list(found), count)
        yield delegations
        cancels = CounterMetricFamily(
            PREFIX + "remote_cancels",
            "Remote tasks the engine cancelled, by what the remote did.",
            labels=["outcome"],
        )
        by_cancel = dict.fromkeys(METRIC_REMOTE_CANCELS, 0)
        for outcome, count in stats.remote_cancels.items():
            key = _closed(outcome, METRIC_REMOTE_CANCELS)
            by_cancel[key] = by_cancel.get(key, 0) + count
        for outcome, count in by_cancel.items():
            cancels.add_metric([outcome], count)
        yield cancels
        if self.viewers is not None:
            viewers = GaugeMetricFamily(
                PREFIX + "viewers_active", "Viewers' streams open now.", labels=["transport"]
            )
            for transport in TRANSPORTS:
                viewers.add_metric([transport], self.viewers.get(transport, 0))
            yield viewers
        yield gauge(
            "viewer_buffer_bytes",
            "Bytes waiting in viewers' buffers now.",
            stats.viewer_buffer_bytes,
        )
        yield counter("journal_events", "Events accepted into journals.", stats.journal_events)
        yield counter(
            "journal_gaps", "Gap markers given to viewers that fell behind.", stats.journal_gaps
        )
        yield counter(
            "journal_folds", "Status events folded in slow viewers' buffers.", stats.journal_folds
        )
        calls = CounterMetricFamily(
            PREFIX + "mcp_tool_calls",
            "Calls of the run endpoints' MCP tools, by tool name.",
            labels=["tool"],
        )
        for tool, count in sorted(stats.tool_calls.items()):
            calls.add_metric([tool], count)
        yield calls
        yield counter("store_appends", "Writes to runs' journal stores.", stats.store_appends)
        yield counter("store_errors", "Run store writes that failed.", stats.store_errors)


class Metrics:
    """What `/metrics` serves for one engine: a registry of its own (no process-wide default
    collectors), and `token`, the bearer credential a scrape needs (None: none). The viewer
    count comes from the application `count_viewers` wraps."""

    def __init__(self, engine: Engine, *, token: str | None = None) -> None:
        self.token = token
        self.viewers_active = dict.fromkeys(TRANSPORTS, 0)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(EngineCollector(engine, self.viewers_active))

    def count_viewers(self, app: Any) -> ViewerCount:
        """`app` with its viewers' streams counted for `viewers_active`."""
        return ViewerCount(app, self.viewers_active)

    def exposition(self) -> bytes:
        """The text exposition of every metric now."""
        return generate_latest(self.registry)

    def response(self, authorization: list[bytes]) -> Response:
        """The answer to `GET /metrics` with these `Authorization` values: the exposition, or
        `Refusal` 401 when a token is set and they do not carry it."""
        if self.token is not None:
            require_bearer(
                authorization,
                self.token,
                message="The metrics need their token: 'Authorization: Bearer <token>'.",
            )
        return Response(self.exposition(), content_type=CONTENT_TYPE)


def metrics_app(metrics: Metrics, *, allowed_hosts: tuple[str, ...] = ()) -> RequestGuard:
    """An application that serves only `GET /metrics` (everything else 404), for a listener of
    its own (`[metrics] listen`), behind the same request guard as the server's."""
    app = QuartTrio("subagent_engine_metrics", static_folder=None)

    @app.get("/metrics")
    async def scrape() -> Response:
        values = [value.encode("latin-1") for value in request.headers.getlist("authorization")]
        return metrics.response(values)

    return RequestGuard(app, allowed_hosts=allowed_hosts, json_only=True, websockets=False)
