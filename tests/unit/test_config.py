"""The host's TOML configuration: every mistake is located by file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import attrs
import pytest

import web.config as config_module
from adapters.a2a import A2ATarget
from adapters.agent_protocols import AgentProtocol, AgentSettings
from engine import DelegationPolicy, EngineLimits
from web.config import ConfigError, HostConfig, load_config, parse_config, register_protocol
from web.stores import describe_store

GOOD = textwrap.dedent(
    """\
    # A host with two agents.
    [server]
    port = 9000
    visibility = "inline"
    cors_origins = ["http://localhost:3000"]

    [parent]
    kind = "codex"
    model_endpoint = "http://127.0.0.1:8001/v1"
    model = "gpt-test"
    args = ["--skip-git-repo-check"]

    [limits]
    max_concurrent_per_run = 4

    [[agents]]
    key = "research"
    display_name = "Research"
    card_url = "https://agents.example/research/.well-known/agent-card.json"
    tenant = "acme"
    auth = { token_env = "RESEARCH_TOKEN" }
    skills = ["search"]
    shortcut = true

    [agents.policy]
    default_timeout = 300
    input_required = "surface"

    [[agents]]
    key = "review"
    card_url = "http://127.0.0.1:9999/.well-known/agent-card.json"
    """
)


def test_a_good_file_gives_the_whole_config() -> None:
    config = parse_config(GOOD, "host.toml")
    assert config.server.port == 9000
    assert config.server.visibility == "inline"
    assert config.server.cors_origins == ("http://localhost:3000",)
    assert config.parent.kind == "codex"
    assert config.parent.args == ("--skip-git-repo-check",)
    assert config.limits == EngineLimits(max_concurrent_per_run=4)
    research, review = config.agents
    assert research.policy == DelegationPolicy(default_timeout=300.0, input_required="surface")
    assert research.auth is not None and research.auth.token_env == "RESEARCH_TOKEN"
    assert review.policy == DelegationPolicy()
    assert config.shortcuts == {"research"}


def test_agent_specs_resolve_credentials_from_the_environment() -> None:
    config = parse_config(GOOD, "host.toml")
    specs = config.agent_specs({"RESEARCH_TOKEN": "s3cret"})
    assert [s.key for s in specs] == ["research", "review"]
    assert isinstance(specs[0].target, A2ATarget)
    assert "Bearer s3cret" in specs[0].all_secrets
    assert specs[0].protocol == "a2a"
    assert specs[1].all_secrets == ()


def test_a_missing_credential_variable_is_an_error_at_start() -> None:
    config = parse_config(GOOD, "host.toml")
    with pytest.raises(ConfigError) as caught:
        config.agent_specs({})
    assert str(caught.value) == (
        "host.toml:21: agents[0].auth.token_env: "
        "the environment variable 'RESEARCH_TOKEN' is not set"
    )


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text), "bad.toml")
    return caught.value


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("[server]\nport = 70000\n", 2, "server.port", "must be a TCP port"),
        ('[server]\nvisibility = "loud"\n', 2, "server.visibility", "must be one of"),
        ("[server]\nprot = 1\n", 2, "server.prot", "unknown setting"),
        ('[server]\nport = "80"\n', 2, "server.port", "must be an integer, not a string"),
        ("[server]\nmax_body_bytes = true\n", 2, "server.max_body_bytes", "not true/false"),
        ("[server]\nreconnect_ms = 0\n", 2, "server.reconnect_ms", "must be positive"),
        ("[server]\nreconnect_ms = 0.5\n", 2, "server.reconnect_ms", "must be an integer"),
        ('[parent]\nkind = "gpt"\n', 2, "parent.kind", "must be one of scripted"),
        ('[parent]\napi_key_env = "sk-live-123"\n', 2, "parent.api_key_env", "never goes"),
        ("[limits]\nmax_concurrent_per_run = 0\n", 2, "limits.max_concurrent_per_run", ""),
        ('[[agents]]\nkey = "a"\n', 1, "agents[0]", "missing required setting 'card_url'"),
        (
            '[[agents]]\nkey = "Research"\ncard_url = "http://h/c"\n',
            2,
            "agents[0].key",
            "is not an agent key",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "ftp://h/c"\n',
            3,
            "agents[0].card_url",
            "http(s) URL",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\n\n'
            '[[agents]]\nkey = "b"\ncard_url = "http://h/c"\n[agents.policy]\n'
            "default_timeout = -1\n",
            9,
            "agents[1].policy.default_timeout",
            "",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\nauth = { token = "x" }\n',
            4,
            "agents[0].auth.token",
            "unknown setting",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\n[[agents]]\nkey = "a"\n'
            'card_url = "http://h/d"\n',
            5,
            "agents[1].key",
            "duplicate agent key 'a' (also agents[0])",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\nprotocol = "grpc"\n',
            4,
            "agents[0].protocol",
            "must be one of a2a",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\n[agents.policy]\n'
            'on_input_expiry = "later"\n',
            5,
            "agents[0].policy.on_input_expiry",
            "must be one of",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\n[agents.policy]\n'
            'elicitation = "maybe"\n',
            5,
            "agents[0].policy.elicitation",
            "must be one of",
        ),
        (
            '[[agents]]\nkey = "a"\ncard_url = "http://h/c"\n[agents.policy]\n'
            'on_elicitation_declined = "shrug"\n',
            5,
            "agents[0].policy.on_elicitation_declined",
            "must be one of",
        ),
        ("surprise = 1\n", 1, "surprise", "unknown setting"),
        ('[store]\nkind = "postgres"\n', 2, "store.kind", "must be one of sqlite"),
        ('[store]\nkind = "memory"\npath = "x.db"\n', 3, "store.path", "for kind = 'sqlite'"),
        ('[store]\nurl = "redis://h"\n', 2, "store.url", "for kind = 'redis' only"),
        ('[store]\nkind = "redis"\n', 1, "store", "exactly one of url and url_env"),
        ('[store]\nkind = "redis"\nurl = "http://h"\n', 3, "store.url", "redis:// "),
        (
            '[store]\nkind = "redis"\nurl = "redis://:pw@h:6379"\n',
            3,
            "store.url",
            "holds credentials",
        ),
        (
            '[store]\nkind = "redis"\nurl_env = "SE_UNSET_REDIS_URL"\n',
            3,
            "store.url_env",
            "is not set",
        ),
        (
            '[store]\nkind = "redis"\nurl = "redis://h"\nnamespace = "a b"\n',
            4,
            "store.namespace",
            "letters, digits",
        ),
        (
            '[store]\nkind = "redis"\nurl = "redis://h"\nlease_seconds = 0\n',
            4,
            "store.lease_seconds",
            "must be positive",
        ),
        (
            '[store]\nkind = "redis"\nurl = "redis://h"\noutage_seconds = -1\n',
            4,
            "store.outage_seconds",
            "must be positive",
        ),
        (
            '[store]\nkind = "sqlite"\noutage_seconds = 5\n',
            3,
            "store.outage_seconds",
            "is for kind = 'redis' only",
        ),
    ],
)
def test_mistakes_name_file_line_and_field(text: str, line: int, field: str, message: str) -> None:
    error = _error(text)
    assert (error.source, error.line, error.field) == ("bad.toml", line, field)
    assert message in error.message
    assert str(error).startswith(f"bad.toml:{line}: {field}: ")


def test_invalid_toml_names_the_line() -> None:
    error = _error("[server]\nport = = 1\n")
    assert error.line == 2
    assert "not valid TOML" in str(error)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.toml")
    path = tmp_path / "host.toml"
    path.write_text(GOOD)
    assert load_config(path).source == str(path)


def test_an_empty_file_is_the_defaults() -> None:
    config = parse_config("", "empty.toml")
    assert config.agents == ()
    assert config.server.visibility == "attributed"
    assert config.server.cors_origins == ()
    assert config.parent.kind == "scripted"
    # A configuration file (or none at all) keeps runs in the SQLite file of the user's state
    # directory; a HostConfig built in code keeps them in memory.
    assert config.store.kind == "sqlite" and config.store.path is None
    assert HostConfig(source="<code>").store.kind == "memory"


def test_the_default_sqlite_path_is_in_the_users_state_directory(tmp_path: Path) -> None:
    entry = parse_config("", "empty.toml").store
    assert entry.sqlite_path({"XDG_STATE_HOME": str(tmp_path)}) == (
        tmp_path / "subagent-engine" / "runs.sqlite3"
    )
    home_default = Path.home() / ".local" / "state" / "subagent-engine" / "runs.sqlite3"
    assert entry.sqlite_path({}) == home_default
    assert entry.sqlite_path({"XDG_STATE_HOME": "relative/dir"}) == home_default  # per XDG
    named = parse_config('[store]\npath = "~/runs.db"\n', "x.toml").store
    assert named.sqlite_path({}) == Path.home() / "runs.db"


def test_a_redis_store_names_its_url_or_the_variable_holding_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SE_REDIS_URL", "redis://:secret@127.0.0.1:6379/0")
    entry = parse_config(
        '[store]\nkind = "redis"\nurl_env = "SE_REDIS_URL"\nnode = "node-1"\n', "x.toml"
    ).store
    assert (
        entry.kind,
        entry.node,
        entry.namespace,
        entry.lease_seconds,
        entry.outage_seconds,
    ) == ("redis", "node-1", "subagent-engine", 10.0, 30.0)
    tuned = parse_config(
        '[store]\nkind = "redis"\nurl = "redis://h"\noutage_seconds = 2.5\n', "x.toml"
    ).store
    assert tuned.outage_seconds == 2.5
    assert entry.redis_url() == "redis://:secret@127.0.0.1:6379/0"
    assert "secret" not in describe_store(entry)


# --- AG-UI agents --------------------------------------------------------------------------------

AGUI = textwrap.dedent(
    """\
    [[agents]]
    key = "writer"
    protocol = "agui"
    url = "https://agents.example/writer/run"
    stop_url = "https://agents.example/writer/stop/{run_id}"
    auth = { token_env = "WRITER_TOKEN" }
    forward_identity = true

    [agents.policy]
    input_required = "surface"

    [[agents]]
    key = "research"
    card_url = "https://agents.example/research/.well-known/agent-card.json"
    """
)


def test_an_agui_agent_is_an_endpoint_url_with_an_optional_stop_url() -> None:
    config = parse_config(AGUI, "host.toml")
    writer, research = config.agents
    assert (writer.protocol, writer.settings) == (
        "agui",
        {
            "url": "https://agents.example/writer/run",
            "stop_url": "https://agents.example/writer/stop/{run_id}",
        },
    )
    assert writer.policy == DelegationPolicy(input_required="surface")
    assert (research.protocol, research.settings) == (
        "a2a",
        {"card_url": "https://agents.example/research/.well-known/agent-card.json"},
    )


def test_every_remote_agent_may_bound_its_frames_by_a_size_string() -> None:
    config = parse_config(
        textwrap.dedent(
            """
            [[agents]]
            key = "writer"
            protocol = "agui"
            url = "http://127.0.0.1:1/run"
            max_frame_bytes = "16 MiB"

            [[agents]]
            key = "research"
            card_url = "http://127.0.0.1:1/.well-known/agent-card.json"
            max_frame_bytes = "512 KiB"

            [[agents]]
            key = "plain"
            card_url = "http://127.0.0.1:2/.well-known/agent-card.json"
            """
        ),
        "host.toml",
    )
    writer, research, plain = config.agent_specs({})
    assert writer.target.config.max_frame_bytes == 16 << 20  # type: ignore[attr-defined]
    assert research.target.config.max_frame_bytes == 512 << 10  # type: ignore[attr-defined]
    assert plain.target.config.max_frame_bytes == 8 << 20  # type: ignore[attr-defined]


def test_agui_agent_specs_get_an_agui_target_with_the_credential() -> None:
    from adapters.agui import AguiTarget

    specs = parse_config(AGUI, "host.toml").agent_specs({"WRITER_TOKEN": "w-s3cret"})
    writer, research = specs
    assert isinstance(writer.target, AguiTarget) and writer.protocol == "agui"
    assert writer.target.config.url == "https://agents.example/writer/run"
    assert writer.target.config.stop_url == "https://agents.example/writer/stop/{run_id}"
    assert writer.target.config.auth_header == ("Authorization", "Bearer w-s3cret")
    assert writer.target.config.forward_identity
    assert writer.target.capabilities.cancel and writer.target.capabilities.input
    assert "w-s3cret" in writer.all_secrets
    assert isinstance(research.target, A2ATarget)


def test_an_agui_agent_without_stop_url_cannot_cancel_beyond_closing_its_stream() -> None:
    text = '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://127.0.0.1:9/run"\n'
    (spec,) = parse_config(text, "host.toml").agent_specs({})
    assert spec.target.capabilities.cancel is False
    assert spec.target.capabilities.resubscribe is False


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\n',
            1,
            "agents[0]",
            "missing required setting 'url'",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "ftp://h/run"\n',
            4,
            "agents[0].url",
            "http(s) URL",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://h/run"\nstop_url = "nope"\n',
            5,
            "agents[0].stop_url",
            "http(s) URL",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://u:p@h/run"\n',
            4,
            "agents[0].url",
            "must not carry credentials",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://h/run"\n'
            'card_url = "http://h/c"\n',
            5,
            "agents[0].card_url",
            "is for a2a agents only",
        ),
        (
            '[[agents]]\nkey = "r"\ncard_url = "http://h/c"\nurl = "http://h/run"\n',
            4,
            "agents[0].url",
            "is for agui agents only",
        ),
        (
            '[[agents]]\nkey = "r"\ncard_url = "http://h/c"\nstop_url = "http://h/stop"\n',
            4,
            "agents[0].stop_url",
            "is for agui agents only",
        ),
        (
            '[[agents]]\nkey = "r"\ncard_url = "http://h/c"\nmax_frame_bytes = "8 MB"\n',
            4,
            "agents[0].max_frame_bytes",
            "must be a number of bytes, or one with a unit",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://h/run"\n'
            'max_frame_bytes = "1 KiB"\n',
            5,
            "agents[0].max_frame_bytes",
            "must be a whole number of bytes from 4096",
        ),
        (
            '[[agents]]\nkey = "w"\nprotocol = "agui"\nurl = "http://h/run"\n'
            "max_frame_bytes = 65536\n",
            5,
            "agents[0].max_frame_bytes",
            "must be a string",
        ),
    ],
)
def test_agui_mistakes_name_file_line_and_field(
    text: str, line: int, field: str, message: str
) -> None:
    error = _error(text)
    assert (error.source, error.line, error.field) == ("bad.toml", line, field)
    assert message in error.message


# --- protocols are registered, not switched on -------------------------------------------------


@pytest.fixture
def echo_protocol(monkeypatch: pytest.MonkeyPatch) -> AgentProtocol[str]:
    """A protocol of this test's own, registered for the test only: agents that echo a
    `greeting` (which must not be empty)."""
    from adapters.inprocess import InProcessTarget, LocalTask

    monkeypatch.setattr(config_module, "_PROTOCOLS", dict(config_module._PROTOCOLS))

    def configure(agent: AgentSettings) -> str:
        if not agent.settings["greeting"].strip():
            raise ValueError("greeting must say something")
        return agent.settings["greeting"]

    def target(greeting: str) -> InProcessTarget:
        async def echo(task: LocalTask) -> str:
            return f"{greeting}, {task.objective}"

        return InProcessTarget(echo)

    protocol = AgentProtocol(
        name="echo",
        settings={"greeting": True},
        reached="an echo agent says its `greeting`",
        configure=configure,
        target=target,
    )
    register_protocol(protocol)
    return protocol


def test_a_registered_protocol_is_read_validated_and_built(
    echo_protocol: AgentProtocol[str],
) -> None:
    from adapters.inprocess import InProcessTarget

    text = '[[agents]]\nkey = "hello"\nprotocol = "echo"\ngreeting = "hi"\n'
    (entry,) = parse_config(text, "host.toml").agents
    assert (entry.protocol, entry.settings) == ("echo", {"greeting": "hi"})
    (spec,) = parse_config(text, "host.toml").agent_specs({})
    assert isinstance(spec.target, InProcessTarget) and spec.protocol == "echo"
    for text, line, field, message in [
        ('[[agents]]\nkey = "h"\nprotocol = "echo"\n', 1, "agents[0]", "'greeting'"),
        (
            '[[agents]]\nkey = "h"\nprotocol = "echo"\ngreeting = " "\n',
            4,
            "agents[0].greeting",
            "must say something",
        ),
        (
            '[[agents]]\nkey = "h"\ngreeting = "hi"\ncard_url = "http://h/c"\n',
            3,
            "agents[0].greeting",
            "is for echo agents only; this agent's protocol is 'a2a'",
        ),
        (
            '[[agents]]\nkey = "h"\nprotocol = "smoke"\n',
            3,
            "agents[0].protocol",
            "must be one of a2a, agui, echo",
        ),
    ]:
        error = _error(text)
        assert (error.line, error.field) == (line, field), error
        assert message in error.message


def test_a_protocol_cannot_take_a_name_or_a_setting_another_one_has(
    echo_protocol: AgentProtocol[str],
) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_protocol(echo_protocol)
    for settings in ({"greeting": False}, {"card_url": True}, {"tenant": False}):
        clash = attrs.evolve(echo_protocol, name="other", settings=settings)
        with pytest.raises(ValueError, match="declares settings taken"):
            register_protocol(clash)


def test_an_agents_question_policy_is_read_from_its_policy_table() -> None:
    config = parse_config(
        textwrap.dedent(
            """
            [[agents]]
            key = "review"
            card_url = "http://127.0.0.1:9/card"
            [agents.policy]
            input_required = "surface"
            input_wait_timeout = 90
            on_input_expiry = "return"
            elicitation = "ask"
            on_elicitation_declined = "fail"
            """
        ),
        "host.toml",
    )
    policy = config.agents[0].policy
    assert (policy.input_required, policy.input_wait_timeout) == ("surface", 90)
    assert (policy.on_input_expiry, policy.elicitation, policy.on_elicitation_declined) == (
        "return",
        "ask",
        "fail",
    )
