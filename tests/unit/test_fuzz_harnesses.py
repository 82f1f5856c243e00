"""The fuzz harnesses as regression tests, and `python -m fuzz` as a bounded, reporting command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import fuzz.fuzz_agui_stream
import fuzz.fuzz_mcp_call
import fuzz.fuzz_tool_input
import fuzz.fuzz_wire
from engine._results import DelegationError, ErrorCode
from engine._tool_input import ToolInput
from fuzz._harness import committed_seed_files, harness_names, load_harness

REPO = Path(__file__).resolve().parents[2]


# --- Seeds, in process ---------------------------------------------------------------------------


def test_discovery_finds_the_harnesses_by_file_name() -> None:
    assert {"tool_input", "wire"} <= set(harness_names())


@pytest.mark.parametrize("name", harness_names())
def test_every_seed_passes_its_harness(name: str) -> None:
    harness = load_harness(name)
    assert len(harness.seeds) >= 5
    for seed in harness.seeds + [path.read_bytes() for path in committed_seed_files(name)]:
        harness.fuzz_one_input(seed)


# --- The harnesses can fail ----------------------------------------------------------------------


def test_tool_input_harness_fails_on_an_accepted_input_that_breaks_the_contract(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        fuzz.fuzz_tool_input,
        "parse_tool_input",
        lambda raw: ToolInput(agent="Not A Key", objective="x"),
    )
    with pytest.raises(AssertionError, match="agent is not a registry key"):
        fuzz.fuzz_tool_input.fuzz_one_input(b"{}")


def test_tool_input_harness_fails_on_an_untyped_or_mistyped_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def raise_key_error(raw: Any) -> ToolInput:
        raise KeyError("agent")

    monkeypatch.setattr(fuzz.fuzz_tool_input, "parse_tool_input", raise_key_error)
    with pytest.raises(KeyError):
        fuzz.fuzz_tool_input.fuzz_one_input(b"{}")

    def raise_wrong_code(raw: Any) -> ToolInput:
        raise DelegationError(code=ErrorCode.INTERNAL_ERROR, message="m", metadata={"field": ""})

    monkeypatch.setattr(fuzz.fuzz_tool_input, "parse_tool_input", raise_wrong_code)
    with pytest.raises(AssertionError, match="malformed refusal"):
        fuzz.fuzz_tool_input.fuzz_one_input(b"{}")


def test_tool_input_harness_fails_when_bytes_and_text_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fuzz.fuzz_tool_input.parse_tool_input
    monkeypatch.setattr(
        fuzz.fuzz_tool_input,
        "parse_tool_input",
        lambda raw: real(raw if isinstance(raw, bytes) else b"[]"),
    )
    with pytest.raises(AssertionError, match="bytes and text disagree"):
        fuzz.fuzz_tool_input.fuzz_one_input(b'{"agent":"a","objective":"x"}')


def test_wire_harness_fails_when_the_writer_loses_a_field(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz.fuzz_wire.to_json
    monkeypatch.setattr(
        fuzz.fuzz_wire, "to_json", lambda obj: real(obj).replace(',"delta":"Hel"', "")
    )
    with pytest.raises(AssertionError, match="round trip changed the value"):
        fuzz.fuzz_wire.fuzz_one_input(fuzz.fuzz_wire.SEEDS[1])


def test_wire_harness_fails_when_the_writer_writes_non_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        fuzz.fuzz_wire, "to_json", lambda obj: '{"kind":"k","run_id":"r","time":NaN}'
    )
    with pytest.raises(AssertionError, match="not JSON"):
        fuzz.fuzz_wire.fuzz_one_input(b'{"kind":"k","run_id":"r"}')


def test_wire_harness_fails_when_a_reader_lets_a_lone_surrogate_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engine._wire

    monkeypatch.setattr(engine._wire, "valid_value", lambda value: value)
    with pytest.raises(AssertionError, match="cannot be UTF-8"):
        fuzz.fuzz_wire.fuzz_one_input(b'{"kind":"k","run_id":"r","delta":"\\ud800"}')


def test_mcp_call_harness_fails_when_a_shortcut_delegates_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fuzz.fuzz_mcp_call.read_call

    def wrong_agent(name: str, arguments: Any, meta: Any, *, shortcuts: Any) -> Any:
        call = real("delegate_to_agent", {"agent": "other", "objective": "x"}, meta)
        return call

    monkeypatch.setattr(fuzz.fuzz_mcp_call, "read_call", wrong_agent)
    with pytest.raises(AssertionError, match="delegated to 'other'"):
        fuzz.fuzz_mcp_call.fuzz_one_input(fuzz.fuzz_mcp_call.SEEDS[2])


def test_mcp_call_harness_fails_when_a_malformed_id_is_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fuzz.fuzz_mcp_call, "_expected_tool_call_id", lambda meta: None)
    with pytest.raises(AssertionError, match="tool-call id 'toolu_01'"):
        fuzz.fuzz_mcp_call.fuzz_one_input(fuzz.fuzz_mcp_call.SEEDS[1])


def test_agui_stream_harness_fails_when_the_encoder_leaves_things_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapters.agui._encoder import AguiStreamEncoder

    monkeypatch.setattr(AguiStreamEncoder, "_close_entities", lambda self, did, out: None)
    # Parent text opened and never closed, then the run terminal.
    with pytest.raises(AssertionError, match="open_at_finish"):
        fuzz.fuzz_agui_stream.fuzz_one_input(bytes([0, 0, 1, 0]))


def test_agui_stream_harness_fails_when_the_encoder_is_not_deterministic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import itertools

    from adapters.agui import _encoder

    counter = itertools.count()
    real = _encoder.sse_bytes
    monkeypatch.setattr(
        _encoder, "sse_bytes", lambda frames: real(frames) + b": %d\n\n" % next(counter)
    )
    with pytest.raises(AssertionError, match="second pass wrote other bytes"):
        fuzz.fuzz_agui_stream.fuzz_one_input(bytes([0, 0, 1, 0, 2, 0]))


def test_agui_stream_harness_fails_on_an_untyped_reader_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(text: bytes) -> Any:
        raise IndexError("a planted bug")

    monkeypatch.setattr(fuzz.fuzz_agui_stream, "parse_sse", explode)
    with pytest.raises(IndexError):
        fuzz.fuzz_agui_stream.fuzz_one_input(b"data: {}\n\n")


def test_agui_stream_harness_fails_when_framing_and_reading_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fuzz.fuzz_agui_stream.frame_events
    monkeypatch.setattr(
        fuzz.fuzz_agui_stream, "frame_events", lambda events, cursor: real(events, None)
    )
    with pytest.raises(AssertionError, match="round trip changed the events"):
        fuzz.fuzz_agui_stream.fuzz_one_input(fuzz.fuzz_agui_stream.SEEDS[0])


# Regression seeds: found by `python -m fuzz` in engine/_wire.py (non-finite numbers were read
# and written back as tokens no browser parses; empty objects and a wire `extra` did not
# round-trip).
@pytest.mark.parametrize(
    "document",
    [
        b'{"kind":"k","run_id":"r","time":NaN}',
        b'{"kind":"k","run_id":"r","time":1e999}',
        b'{"kind":"k","run_id":"r","unknown_field":{"bytes":Infinity}}',
        b'{"kind":"k","run_id":"r","args":[NaN]}',
    ],
)
def test_wire_regression_non_finite_numbers(document: bytes) -> None:
    fuzz.fuzz_wire.fuzz_one_input(document)


@pytest.mark.parametrize(
    "document",
    [
        b'{"kind":"k","run_id":"r","error":{"code":"c","metadata":{}}}',
        b'{"kind":"k","run_id":"r","extra":{}}',
        b'{"kind":"k","run_id":"r","extra":{"kind":"y"}}',
    ],
)
def test_wire_regression_round_trip(document: bytes) -> None:
    fuzz.fuzz_wire.fuzz_one_input(document)


# --- python -m fuzz ------------------------------------------------------------------------------


def _run_fuzz(*args: str, pythonpath: list[Path] | None = None, tmpdir: Path | None = None) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [REPO, *(pythonpath or [])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run(
        [sys.executable, "-m", "fuzz", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.mark.slow  # runs the fuzzer
def test_fuzz_command_runs_one_harness_and_writes_nothing_into_the_repo(tmp_path: Path) -> None:
    before = _files_under(REPO / "fuzz")

    done = _run_fuzz("--seconds", "1", "--only", "tool_input", tmpdir=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    line = re.search(r"^tool_input\s+(atheris|random)\s+ok\s+(\d+) execs", done.stdout, re.M)
    assert line is not None, done.stdout
    assert int(line.group(2)) > 100
    assert _files_under(REPO / "fuzz") == before
    assert list(tmp_path.iterdir()) == []  # the session's temporary folder is gone too


@pytest.mark.slow  # runs the fuzzer
def test_fallback_engine_works_without_atheris(tmp_path: Path) -> None:
    done = _run_fuzz(
        "--seconds", "1", "--only", "fuzz_tool_input", "--engine", "random", "--seed", "7",
        tmpdir=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^tool_input\s+random\s+ok\s+\d+ execs .* seed 7$", done.stdout, re.M)


def test_list_and_unknown_names() -> None:
    listed = _run_fuzz("--list")
    assert listed.returncode == 0
    assert {"tool_input", "wire"} <= set(listed.stdout.split())

    unknown = _run_fuzz("--only", "nope")
    assert unknown.returncode == 2
    assert "no harness named 'nope'" in unknown.stderr


@pytest.fixture
def crashing_package(tmp_path: Path) -> Path:
    package = tmp_path / "pkgs" / "boomfuzz"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "fuzz_boom.py").write_text(
        textwrap.dedent(
            """
            SEEDS = [b"fine", b"boom!"]

            def fuzz_one_input(data: bytes) -> None:
                if data.startswith(b"boom"):
                    raise ValueError("a planted bug")
            """
        )
    )
    return package.parent


@pytest.mark.slow  # runs the fuzzer
@pytest.mark.parametrize("engine", ["random", "atheris"])
def test_a_crash_fails_the_command_and_keeps_the_input(
    engine: str, crashing_package: Path, tmp_path: Path
) -> None:
    if engine == "atheris":
        pytest.importorskip("atheris")
    temp = tmp_path / "temp"
    temp.mkdir()

    done = _run_fuzz(
        "--package", "boomfuzz", "--seconds", "1", "--engine", engine,
        pythonpath=[crashing_package], tmpdir=temp,
    )  # fmt: skip

    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"^boom\s+{engine}\s+CRASH\s", done.stdout, re.M), done.stdout
    assert "hex:   626f6f6d" in done.stdout  # "boom"
    kept = Path(re.findall(r"^  input: (\S+)", done.stdout, re.M)[0])
    assert kept.is_relative_to(temp)
    assert kept.read_bytes().startswith(b"boom")
    assert "ValueError: a planted bug" in done.stdout
    assert "fuzz: 1 harnesses, 1 failed" in done.stdout


def test_trace_context_harness_fails_on_a_parent_it_did_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fuzz.fuzz_trace_context as harness
    from engine import parent_context

    other = parent_context("00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    monkeypatch.setattr(harness, "parent_context", lambda parent, state: other)
    with pytest.raises(AssertionError):
        harness.fuzz_one_input(harness.SEEDS[0])


def test_trace_context_harness_fails_when_a_header_value_leaks_into_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fuzz.fuzz_trace_context as harness

    def leaky(text: str) -> dict[str, str]:
        raise ValueError(f"bad: {text}")

    monkeypatch.setattr(harness, "collector_headers", leaky)
    with pytest.raises(AssertionError, match="leaked"):
        harness.fuzz_one_input(b"authorization=Bearer%20secret")
