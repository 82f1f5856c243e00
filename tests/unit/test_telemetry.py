"""`[telemetry]` and the tracer provider it builds (`web.telemetry`): every mistake in the table
is a `ConfigError` naming `telemetry.<key>`; the collector's headers are read in the
`OTEL_EXPORTER_OTLP_HEADERS` format and never repeated in an error; a provider exists only when
enabled, names the service and samples new traces at the ratio while following a remote parent;
`serve` and `a2a-serve` refuse to start on a collector headers variable they cannot use."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from engine import parent_context
from web.config import DEFAULT_OTLP_ENDPOINT, ConfigError, TelemetryEntry, parse_config
from web.telemetry import collector_headers, telemetry_problem, tracer_provider

SECRET = "s3cr3t-collector-key"
SAMPLED_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def telemetry(body: str) -> TelemetryEntry:
    return parse_config(f"[telemetry]\n{textwrap.dedent(body)}", "host.toml").telemetry


def test_the_table_is_optional_and_off_by_default() -> None:
    entry = parse_config("", "host.toml").telemetry
    assert entry == TelemetryEntry()
    assert not entry.enabled
    assert entry.endpoint == DEFAULT_OTLP_ENDPOINT == "http://127.0.0.1:4318/v1/traces"
    assert entry.headers_env is None
    assert entry.sample_ratio == 1.0


def test_a_whole_table_is_read() -> None:
    entry = telemetry(
        """\
        enabled = true
        endpoint = "https://collector.example:4318/v1/traces"
        headers_env = "OTLP_HEADERS"
        service_name = "agents-prod"
        sample_ratio = 0
        """
    )
    assert entry == TelemetryEntry(
        enabled=True,
        endpoint="https://collector.example:4318/v1/traces",
        headers_env="OTLP_HEADERS",
        service_name="agents-prod",
        sample_ratio=0.0,
    )
    assert isinstance(entry.sample_ratio, float)


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ('endpoint = "ftp://collector:4318/v1/traces"', "telemetry.endpoint", "http(s) URL"),
        ('endpoint = "collector:4318"', "telemetry.endpoint", "http(s) URL"),
        (
            f'endpoint = "https://user:{SECRET}@collector:4318/v1/traces"',
            "telemetry.endpoint",
            "holds credentials",
        ),
        ("sample_ratio = 1.5", "telemetry.sample_ratio", "between 0 and 1"),
        ("sample_ratio = -0.1", "telemetry.sample_ratio", "between 0 and 1"),
        ('sample_ratio = "1"', "telemetry.sample_ratio", ""),
        ('enabled = "yes"', "telemetry.enabled", ""),
        ('sampler = "always_on"', "telemetry.sampler", "unknown setting"),
        ('headers_env = "OTLP-HEADERS"', "telemetry.headers_env", "environment variable"),
        (f'headers_env = "api-key={SECRET}"', "telemetry.headers_env", "environment variable"),
        ('service_name = " "', "telemetry.service_name", "printable name"),
    ],
)
def test_each_mistake_is_a_config_error_naming_its_key_and_line(
    line: str, field: str, says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"[server]\nport = 0\n\n[telemetry]\n{line}\n", "host.toml")
    error = raised.value
    assert error.field == field
    assert error.line == 5
    assert says in error.message
    assert str(error).startswith(f"host.toml:{error.line}: {field}: ")
    assert SECRET not in str(error)


def test_a_telemetry_value_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('telemetry = "on"\n', "host.toml")
    assert raised.value.field == "telemetry"


@pytest.mark.parametrize(
    ("value", "headers"),
    [
        ("api-key=abc", {"api-key": "abc"}),
        (
            "Authorization=Bearer%20tok%2Cen, x-tenant = acme ",
            {"authorization": "Bearer tok,en", "x-tenant": "acme"},
        ),
        ("k=a=b", {"k": "a=b"}),  # only the first '=' separates
        ("k=", {"k": ""}),
        (",,a=1,,", {"a": "1"}),  # empty members are skipped
        ("", {}),
    ],
)
def test_collector_headers_are_read_as_otel_exporter_otlp_headers(
    value: str, headers: dict[str, str]
) -> None:
    assert collector_headers(value) == headers


@pytest.mark.parametrize(
    ("value", "pair"),
    [
        (SECRET, 1),
        (f"good=1,{SECRET}", 2),
        (f"={SECRET}", 1),
        (f"na me={SECRET}", 1),
        (f"key\u00e9={SECRET}", 1),
        (f"a=1,b:{SECRET}", 2),
    ],
)
def test_a_pair_that_is_not_name_value_is_a_value_error_naming_its_position_only(
    value: str, pair: int
) -> None:
    with pytest.raises(ValueError, match="is not name=value") as raised:
        collector_headers(value)
    assert str(raised.value) == f"pair {pair} is not name=value"
    assert SECRET not in str(raised.value)


def test_telemetry_problem_names_the_variable_never_its_value() -> None:
    entry = TelemetryEntry(enabled=True, headers_env="OTLP_HEADERS")
    unset = telemetry_problem(entry, {})
    assert unset is not None and "OTLP_HEADERS" in unset and "not set" in unset
    empty = telemetry_problem(entry, {"OTLP_HEADERS": ""})
    assert empty == unset
    unreadable = telemetry_problem(entry, {"OTLP_HEADERS": f"ok=1,{SECRET}"})
    assert unreadable is not None
    assert "OTLP_HEADERS" in unreadable and "pair 2" in unreadable
    assert SECRET not in unreadable
    assert telemetry_problem(entry, {"OTLP_HEADERS": f"api-key={SECRET}"}) is None


def test_telemetry_problem_is_none_when_off_or_without_headers() -> None:
    assert telemetry_problem(TelemetryEntry(headers_env="OTLP_HEADERS"), {}) is None
    assert telemetry_problem(TelemetryEntry(enabled=True), {}) is None


def test_no_provider_while_disabled() -> None:
    assert tracer_provider(TelemetryEntry(), {}) is None
    assert tracer_provider(TelemetryEntry(headers_env="UNSET"), {}) is None


def test_a_provider_without_its_headers_variable_is_refused_naming_it() -> None:
    entry = TelemetryEntry(enabled=True, headers_env="OTLP_HEADERS")
    with pytest.raises(ValueError, match="OTLP_HEADERS"):
        tracer_provider(entry, {})
    with pytest.raises(ValueError, match="OTLP_HEADERS") as raised:
        tracer_provider(entry, {"OTLP_HEADERS": SECRET})
    assert SECRET not in str(raised.value)


def test_an_enabled_provider_names_the_service() -> None:
    entry = TelemetryEntry(enabled=True, service_name="agents-test", headers_env="H")
    provider = tracer_provider(entry, {"H": f"api-key={SECRET}"})
    assert isinstance(provider, TracerProvider)
    try:
        attributes = provider.resource.attributes
        assert attributes["service.name"] == "agents-test"
        assert attributes["service.version"]
        span = provider.get_tracer("probe").start_span("new trace")
        assert span.is_recording()  # sample_ratio 1: every new trace is kept
    finally:
        provider.shutdown()  # (the span was never ended: nothing is exported)


def test_a_ratio_of_zero_drops_new_traces_but_follows_a_sampled_remote_parent() -> None:
    provider = tracer_provider(TelemetryEntry(enabled=True, sample_ratio=0.0), {})
    assert provider is not None
    try:
        tracer = provider.get_tracer("probe")
        assert not tracer.start_span("new trace").is_recording()
        remote = parent_context(SAMPLED_PARENT)
        assert remote is not None
        child = tracer.start_span("continued", context=remote)
        assert child.is_recording()
        assert child.get_span_context().trace_id == int(SAMPLED_PARENT.split("-")[1], 16)
        unsampled = parent_context(SAMPLED_PARENT[:-2] + "00")
        assert not tracer.start_span("continued", context=unsampled).is_recording()
        assert isinstance(child, trace.Span)
    finally:
        provider.shutdown()


def _serve(config: Path) -> int:
    from cli.serve import serve_main

    return serve_main(str(config))


def _a2a_serve(config: Path) -> int:
    from cli.a2a_serve import a2a_serve_main

    return a2a_serve_main(parent="scripted", config_path=str(config))


#: Each command that exports traces, and what it prints once it listens (it must not).
COMMANDS: dict[str, tuple[Callable[[Path], int], str]] = {
    "serve": (_serve, "serving"),
    "a2a-serve": (_a2a_serve, "READY"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "telemetry.headers_env names 'SE_OTLP_HEADERS', which is not set"),
        (f"api-key={SECRET},{SECRET}", "the collector headers in 'SE_OTLP_HEADERS': pair 2"),
    ],
)
def test_a_command_refuses_a_collector_headers_variable_it_cannot_use(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    value: str | None,
    says: str,
) -> None:
    main, listening = COMMANDS[command]
    config = tmp_path / "host.toml"
    config.write_text('[telemetry]\nenabled = true\nheaders_env = "SE_OTLP_HEADERS"\n')
    with pytest.MonkeyPatch.context() as patch:
        if value is None:
            patch.delenv("SE_OTLP_HEADERS", raising=False)
        else:
            patch.setenv("SE_OTLP_HEADERS", value)
        assert main(config) == 2
    captured = capsys.readouterr()
    assert says in captured.err
    assert SECRET not in captured.err + captured.out
    assert listening not in captured.out
