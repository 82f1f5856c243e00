"""`subagent-engine check-stream FILE`: exit 0 clean, 1 with violations, 2 for unreadable input."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.agui import AguiStreamEncoder
from cli import main
from cli.check_stream import check_stream_main
from tests.helpers.agui_scenarios import RUN, THREAD, happy_path

REPO = Path(__file__).resolve().parents[2]


def captured() -> bytes:
    encoder = AguiStreamEncoder(THREAD, RUN, "attributed")
    return b"".join(encoder.feed(entry) for entry in happy_path())


def test_a_clean_stream_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.sse"
    path.write_bytes(captured())
    assert main(["check-stream", str(path)]) == 0
    assert capsys.readouterr().out == "ok: 15 events\n"


def test_violations_are_listed_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cut the stream before its terminal and drop the subagent's announcement.
    blocks = captured().split(b"\n\n")
    kept = [b for b in blocks if b and b"SUBAGENT_STARTED" not in b and b"RUN_FINISHED" not in b]
    path = tmp_path / "broken.sse"
    path.write_bytes(b"\n\n".join(kept) + b"\n\n")
    assert main(["check-stream", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "event #4 (TEXT_MESSAGE_START): unknown_subagent: "
        "subagentRunId 'del-1' names no open subagent"
    )
    assert "event #8 (SUBAGENT_FINISHED): not_started: subagent 'del-1' is not open" in out
    assert (
        out[-2] == "event #13: missing_terminal: the stream ends without RUN_FINISHED or RUN_ERROR"
    )
    assert out[-1].endswith("violation(s) in 13 events")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"data: {}\r\n\r\n", "line 1: CR line ending"),
        (b'data: {"type":\n\n', "line 1: data is not JSON"),
        (b"id: nope\ndata: {}\n\n", "line 1: id 'nope' is not a cursor"),
    ],
)
def test_malformed_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "bad.sse"
    path.write_bytes(content)
    assert main(["check-stream", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-stream", str(tmp_path / "nope.sse")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_stdin_is_dash() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert check_stream_main("-", stdin=io.BytesIO(captured()), out=out, err=err) == 0
    assert out.getvalue() == "ok: 15 events\n"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "check-stream", "-"],
        input=b"data: [1]\n\n",
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert b"not an object" in done.stderr
