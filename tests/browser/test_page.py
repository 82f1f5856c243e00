"""The bundled page (web/static/index.html) in headless Chromium against a real server.

The server is `tests.browser.serve_demo`: `subagent-engine serve`'s composition on embedded
defaults (the scripted parent delegating over the real MCP endpoint to the two in-process demo
agents, the default wire encoder, the packaged page), with the demo agents paced so that a run
lasts about two seconds; a second one, with a replay window smaller than a run, serves the gap
scenario. The browser is Debian's /usr/bin/chromium driven by the pinned
playwright-core in this directory; one Node driver run (`drive_page.mjs`, one browser, a fresh
profile) plays every scenario and reports what the page showed, and the tests below assert on
that report. Chromium is installed with apt-get when missing (as `./dev test` does); the tests
skip only where it is missing and cannot be installed (not root, or no apt-get).
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.node_packages import ensure_npm_packages, run_node_json_lines
from tests.servers.process import ready_server
from web.serve import _page

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHROMIUM = Path("/usr/bin/chromium")
DEMO_PAUSE = "0.2"  # seconds between the demo agents' chunks: a run lasts ~2 s
GAP_WINDOW = "20"  # journal entries the gap server keeps: a run has ~57
DRIVER_TIMEOUT = 120.0
APT_TIMEOUT = 900.0

RESEARCH_TEXT = "Trio nurseries give structured cancellation; memory channels carry events."
REVIEW_TEXT = "The design is sound; add a replay window."
FINAL_ANSWER_START = "Here is what the specialists found:"


def _ensure_chromium() -> Path:
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        pytest.skip(
            f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get); "
            "install Debian's chromium package: apt-get install -y chromium"
        )
    with open("/tmp/subagent-engine-chromium-install.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if not os.access(CHROMIUM, os.X_OK):
                env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                for argv in (
                    [apt_get, "update", "-qq"],
                    [apt_get, "install", "-y", "-qq", "chromium"],
                ):
                    result = subprocess.run(
                        argv,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=APT_TIMEOUT,
                        check=False,
                    )
                    if result.returncode != 0:
                        output = (result.stdout + result.stderr)[-3000:]
                        pytest.fail(f"`{' '.join(argv)}` failed:\n{output}", pytrace=False)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} is not there", pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="module")
def page_server() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", DEMO_PAUSE]
    with ready_server(argv, cwd=REPO, name="page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def gap_server() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", "0"]
    argv += ["--replay-window", GAP_WINDOW]
    with ready_server(argv, cwd=REPO, name="gap page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def report(
    page_server: str, gap_server: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One driver run: every scenario in one browser. Screenshots land in a temp directory."""
    chromium = _ensure_chromium()
    node = ensure_npm_packages(HERE)
    shots = tmp_path_factory.mktemp("page-screenshots")
    args = ["--base", page_server, "--gap-base", gap_server, "--screenshots", str(shots)]
    args += ["--chromium", str(chromium)]
    documents, result = run_node_json_lines(
        node, HERE / "drive_page.mjs", args, timeout=DRIVER_TIMEOUT
    )
    document = documents[-1]
    if document.get("error"):
        pytest.fail(
            f"the browser driver failed: {document['error']}\n{result.stderr[-2000:]}",
            pytrace=False,
        )
    return document


def scenario(report: dict[str, Any], name: str) -> dict[str, Any]:
    data: dict[str, Any] | None = report["scenarios"].get(name)
    assert data is not None, f"the driver reported no {name!r} scenario"
    assert "error" not in data, f"scenario {name!r} failed in the browser:\n{data['error']}"
    return data


def delegate_calls(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        call
        for call in view["toolCalls"]
        if call["topLevel"] and call["name"] == "delegate_to_agent"
    ]


def cards_by_name(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {card["name"]: card for card in view["subagents"]}


# --- the page is shipped and served ------------------------------------------------------------


def test_the_page_is_package_data_and_served_at_root(page_server: str) -> None:
    resource = files("web").joinpath("static/index.html")
    assert resource.is_file()
    assert _page() == resource.read_bytes()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["web"]
    assert any(fnmatch.fnmatch("static/index.html", pattern) for pattern in patterns)
    response = httpx.get(f"{page_server}/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.content == resource.read_bytes()


def test_the_page_stays_on_its_server_and_logs_no_errors(report: dict[str, Any]) -> None:
    assert report["externalRequests"] == []
    # Chromium logs the stream the drop scenario cuts; nothing else may log an error.
    errors = [
        error
        for error in report["consoleErrors"]
        if not (error["scenario"] == "drop" and "net::ERR_" in error["text"])
    ]
    assert errors == []


# --- a run: nested subagents, streaming, the final answer --------------------------------------


def test_each_subagent_card_sits_under_its_delegate_tool_call(report: dict[str, Any]) -> None:
    view = scenario(report, "full")
    assert view["status"] == "finished", view["statusText"]
    calls = delegate_calls(view)
    assert len(calls) == 2
    cards = {card["id"]: card for card in view["subagents"]}
    for call in calls:
        assert len(call["subagents"]) == 1, call
        card = cards[call["subagents"][0]]
        assert card["parentToolCallId"] == call["id"]
        assert card["parentSubagentRunId"] is None
        assert card["state"] == "finished"
        assert card["outcome"] and card["outcome"].startswith("Finished")
        assert call["state"] == "done" and call["result"]
    by_name = cards_by_name(view)
    assert set(by_name) == {"Research Agent", "Review Agent"}
    research, review = by_name["Research Agent"], by_name["Review Agent"]
    assert '"agent": "research"' in next(
        c["args"] for c in calls if c["id"] == research["parentToolCallId"]
    )
    assert research["text"] == RESEARCH_TEXT
    assert review["text"] == REVIEW_TEXT
    # The subagent's own tool call renders inside its card, not in the parent's transcript.
    inner = [call for call in view["toolCalls"] if call["insideSubagent"] == research["id"]]
    assert [call["name"] for call in inner] == ["search"]
    assert research["toolCalls"] == [inner[0]["id"]]


def test_subagent_text_streams_in_before_the_tool_result(report: dict[str, Any]) -> None:
    view = scenario(report, "full")
    timeline = view["timeline"]
    for call in delegate_calls(view):
        card_id = call["subagents"][0]
        series = timeline["subagentText"][card_id]
        first_text_at = series[0][0]
        result_at = timeline["results"][call["id"]]
        assert first_text_at < result_at, (call["id"], series, result_at)
    research = cards_by_name(view)["Research Agent"]
    growth = timeline["subagentText"][research["id"]]
    # Word by word as it arrives, not all at once when the delegation ends.
    assert len(growth) >= 5, growth
    assert growth[-1][1] == len(RESEARCH_TEXT)


def test_the_final_answer_appears_after_the_delegations(report: dict[str, Any]) -> None:
    view = scenario(report, "full")
    answers = [m for m in view["parentMessages"] if m["who"] == "Assistant"]
    assert answers[-1]["text"].startswith(FINAL_ANSWER_START)
    assert "research: completed" in answers[-1]["text"]
    assert "review: completed" in answers[-1]["text"]
    assert view["statusText"] == "Finished"
    assert view["page"]["duplicates"] == 0 and view["page"]["connections"] == 1


def test_status_and_buttons_are_accessible(report: dict[str, Any]) -> None:
    view = scenario(report, "full")
    assert view["statusRole"] == "status" and view["statusLive"] == "polite"
    assert view["runLabel"] == "Run the prompt" and view["stopLabel"] == "Stop the run"
    assert view["stopDisabled"]  # nothing to stop once the run ended


# --- stop, reconnect ---------------------------------------------------------------------------


def test_the_stop_button_cancels_the_run(report: dict[str, Any]) -> None:
    view = scenario(report, "stop")
    assert view["beforeStop"]["status"] == "running"
    assert view["status"] == "cancelled", view["statusText"]
    assert view["statusText"].startswith("Cancelled")
    states = [card["state"] for card in view["subagents"]]
    assert "cancelled" in states
    assert not {"running", "starting"} & set(states)
    assert FINAL_ANSWER_START not in view["transcriptText"]
    assert view["stopDisabled"]


def test_a_dropped_connection_reconnects_by_itself_without_duplicates(
    report: dict[str, Any],
) -> None:
    view = scenario(report, "drop")
    assert view["beforeCut"]["status"] == "running"
    assert view["whileCut"]["status"] == "reconnecting"  # said, in the live status region
    assert view["status"] == "finished", view["statusText"]
    assert view["page"]["connections"] >= 2  # EventSource came back (with Last-Event-ID)
    by_name = cards_by_name(view)
    assert len(view["subagents"]) == 2
    assert by_name["Research Agent"]["text"] == RESEARCH_TEXT
    assert by_name["Review Agent"]["text"] == REVIEW_TEXT
    texts = [m["text"] for m in view["parentMessages"]]
    assert len(texts) == len(set(texts))
    assert sum(text.startswith(FINAL_ANSWER_START) for text in texts) == 1


def test_a_forced_reconnect_does_not_duplicate_content(report: dict[str, Any]) -> None:
    data = scenario(report, "reconnect")
    assert data["midRun"]["reconnected"] and data["midRun"]["state"]["status"] == "running"
    after_run, after_replay = data["afterRun"], data["afterReplay"]
    assert after_run["status"] == "finished", after_run["statusText"]
    page = after_run["page"]
    assert page["connections"] >= 2
    assert page["duplicates"] > 0  # the replay from cursor 1 really resent what was drawn
    by_name = cards_by_name(after_run)
    assert len(after_run["subagents"]) == 2
    assert by_name["Research Agent"]["text"] == RESEARCH_TEXT
    assert by_name["Review Agent"]["text"] == REVIEW_TEXT
    assert len(delegate_calls(after_run)) == 2
    texts = [m["text"] for m in after_run["parentMessages"]]
    assert len(texts) == len(set(texts))
    assert sum(text.startswith(FINAL_ANSWER_START) for text in texts) == 1
    # Replaying the whole run after its end changes nothing on the page.
    assert after_replay["page"]["duplicates"] > page["duplicates"]
    assert after_replay["page"]["applied"] == page["applied"]
    assert after_replay["transcriptText"] == after_run["transcriptText"]
    assert after_replay["status"] == "finished"


# --- visibility modes --------------------------------------------------------------------------


def test_custom_mode_still_draws_nested_subagents(report: dict[str, Any]) -> None:
    view = scenario(report, "custom")
    assert view["status"] == "finished", view["statusText"]
    calls = delegate_calls(view)
    assert sorted(len(call["subagents"]) for call in calls) == [1, 1]
    assert cards_by_name(view)["Research Agent"]["text"] == RESEARCH_TEXT


def test_hidden_mode_draws_no_subagents_but_the_answer(report: dict[str, Any]) -> None:
    view = scenario(report, "hidden")
    assert view["status"] == "finished", view["statusText"]
    assert any(m["text"].startswith(FINAL_ANSWER_START) for m in view["parentMessages"])
    if view["page"]["agui"]:  # the engine envelope has no visibility modes; AG-UI does
        assert view["subagents"] == []
        assert RESEARCH_TEXT not in view["transcriptText"]


def test_nested_failed_and_suspended_subagents_and_unknown_events(report: dict[str, Any]) -> None:
    view = scenario(report, "synthetic")  # drive_page.mjs SYNTHETIC: a canned AG-UI stream
    assert view["status"] == "finished", view["statusText"]
    cards = {card["name"]: card for card in view["subagents"]}
    planner, estimator = cards["Planner"], cards["Estimator"]
    assert planner["parentToolCallId"] == "c1" and planner["parentSubagentRunId"] is None
    # Nested: under the planner's own tool call, inside the planner's card.
    assert estimator["parentToolCallId"] == "s1-c" and estimator["parentSubagentRunId"] == "s1"
    assert estimator["text"] == "About a day each." and estimator["state"] == "finished"
    assert cards["Checker"]["parentSubagentRunId"] == "s1"
    assert cards["Checker"]["state"] == "failed"
    assert "rate limited" in cards["Checker"]["outcome"]
    assert cards["Deleter"]["state"] == "waiting"  # a suspended outcome is not "done"
    assert planner["text"] == "Two tasks." and planner["toolCalls"] == ["s1-c"]
    texts = [m["text"] for m in view["parentMessages"]]
    assert texts == ["Planning.", "Plan ready."]
    assert view["page"]["unknown"] == 2  # FUTURE_EVENT_TYPE and app.private: skipped, no harm


def test_a_late_viewer_sees_the_gap_and_the_run_s_outcome(report: dict[str, Any]) -> None:
    view = scenario(report, "gap")
    assert view["status"] == "finished", view["statusText"]
    assert view["gaps"] >= 1
    assert all(text.startswith("\u26a0 Gap: ") for text in view["gapText"])
    assert "no longer available" in view["gapText"][0]
    # Starts and terminals outlive the window: both subagents are drawn with their outcome,
    # under their tool call once its result names it.
    states = {card["name"]: card["state"] for card in view["subagents"]}
    assert states == {"Research Agent": "finished", "Review Agent": "finished"}
    assert all(card["parentToolCallId"] for card in view["subagents"])
    assert any(m["text"].startswith(FINAL_ANSWER_START) for m in view["parentMessages"])
