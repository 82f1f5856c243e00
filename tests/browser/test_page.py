"""The bundled page (web/static/index.html) in headless Chromium against a real server.

The server is `tests.browser.serve_demo`: `subagent-engine serve`'s composition on embedded defaults
(the scripted parent delegating over the real MCP endpoint to the two in-process demo agents, the
default wire encoder, the packaged page), with the demo agents paced so that a run lasts about two
seconds; a second one, with a replay window smaller than a run, serves the gap scenario; a third
(`--asking`) has a research agent that asks the viewer a question and waits for the answer, given
through the card's form. The browser is Debian's /usr/bin/chromium, headless, driven by Playwright's
Python package (the `dev` extra; its sync API, outside any event loop) with that executable: nothing
downloads a browser. A fourth page server (`--side-by-side`) shows both protocols side by side: its
parent delegates at once to a remote AG-UI agent (this project's own server, with subagents of its
own: two levels below the parent) and to a remote A2A agent (an `a2a-serve` process with the
scripted research script). One browser and one context serve the module; each scenario below is a
module-scoped fixture that plays once, in tabs of its own (a fresh tab: fresh sessionStorage; the
three visibility-mode runs play side by side), and returns what the page showed, read through the
DOM by `page_probe.js`; the tests assert on that. Every wait is Playwright's, with a timeout: a page
that never gets there fails the test. Canned streams (`synthetic.sse`; a CLI parent's status line
and heartbeats, built below) are served by the browser's router. Chromium is installed with
apt-get when missing (as `./dev test` does); the tests skip only where it is missing and cannot be
installed (not root, or no apt-get).

Human in the loop with the demo's own agents: on the first page server, a prompt that asks for a
question ("ask me which framework to review") makes the review agent ask one (`demo.agents`); the
page names it in the status bar, scrolls the question into view and focuses its field; it is
answered on the page, through another surface (the answer endpoint, from the test with httpx), or
on the page just after another surface answered it (409 question_closed). Those scenarios also save
a phone-width and a desktop-width screenshot of the question.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Error,
    Locator,
    Page,
    Request,
    Route,
    sync_playwright,
)

from adapters.parents import Say
from demo import BUILTIN_REMOTES
from demo.agents import REVIEW_QUESTION
from tests.browser.serve_demo import BEFORE_ASKING, QUESTION, SOLO_NAME, TEAM_NAME
from tests.helpers.chromium import CHROMIUM, CHROMIUM_ARGS, ensure_chromium
from tests.helpers.cutting_proxy import CuttingProxy
from tests.helpers.processes import ready_server
from tests.integration.test_demo_command import running_demo
from web.page import bundled_page

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEMO_PAUSE = "0.2"  # seconds between the demo agents' chunks: a run lasts ~2 s
GAP_WINDOW = "20"  # journal entries the gap server keeps: a run has ~57
RUN_TIMEOUT_MS = 20_000  # any one wait in a scenario

PROMPT = "How does Trio stream events?"
RESEARCH_TEXT = "Trio nurseries give structured cancellation; memory channels carry events."
REVIEW_TEXT = "The design is sound; add a replay window."
FINAL_ANSWER_START = "Here is what the specialists found:"
ENDED_BY_THE_PAGE = "The run ended before this subagent finished."  # the page's own fallback

TERMINAL = ["finished", "cancelled", "failed"]
HAS_ENDED = "(terminal) => terminal.includes(document.getElementById('status').dataset.state)"
SUBAGENT_TEXT_SHOWS = """() => [...document.querySelectorAll("details.subagent .message .text")]
    .some((text) => text.textContent.length > 0)"""
WAS_RECONNECTING = """() => window.__probe.timeline.statuses
    .some(([, state]) => state === "reconnecting")"""
VIEW = "() => window.__probe.view()"
ANSWER = "1999"
ANSWERED_TEXT = f"Checked the sources for {ANSWER}."
EMPTY_REFUSED = "Type an answer first."  # the page's own message
NOBODY = "del-nobody-waits"  # a delegation id the server has no waiting subagent for
CAUGHT_UP = """(cursor) => {
    const state = window.subagentPage.state();
    return state.connections >= 2 && state.streamCursor !== null && state.streamCursor >= cursor;
}"""
PAGE_STATE = "() => window.subagentPage.state()"
# A subagent card inside another one has text of its own.
NESTED_TEXT_SHOWS = """() => [...document.querySelectorAll("details.subagent details.subagent")]
    .some((card) => [...card.querySelectorAll(":scope > .sa-body > .sa-items > .message > .text")]
        .some((text) => text.textContent.length > 0))"""
A2A_SCRIPT = "research"  # the a2a-serve script of the side-by-side server's A2A agent
ASKING_PROMPT = "ask me which framework to review"  # the review agent asks (demo.agents)
REVIEW_WAITS = "Review Agent waits for your answer"  # the status bar while it waits
RUNNING = "Running\u2026"
# Who answers through the answer endpoint; markup in it is text on the page.
ANOTHER_CLIENT = "<i>a colleague</i>'s client"
QUESTION_EXPIRES = "3"  # seconds the expiring server's review question waits
INVALID = "The answer must name one framework."  # a 422 answer_invalid's message
PHONE = {"width": 390, "height": 700}
DESKTOP = {"width": 1100, "height": 900}
# Where the question's block is and whether its field has the focus.
QUESTION_PLACEMENT = """(box) => {
    const rect = box.closest(".sa-input").getBoundingClientRect();
    return {top: rect.top, bottom: rect.bottom, viewport: innerHeight, scrollY,
        pageTop: rect.top + scrollY, focused: document.activeElement === box};
}"""


# --- servers, browser, the pages' watcher ------------------------------------------------------


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
def demo_server() -> Iterator[str]:
    """`subagent-engine demo` as `./dev run` starts it (the scripted parent, two remote A2A
    agents in processes of their own, no API key): the page's base URL."""
    with running_demo() as demo:
        yield demo.url


@pytest.fixture(scope="module")
def expiring_server() -> Iterator[str]:
    """The demo agents, the review agent's question expiring after `QUESTION_EXPIRES` s."""
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", DEMO_PAUSE]
    argv += ["--input-wait", QUESTION_EXPIRES]
    with ready_server(argv, cwd=REPO, name="expiring page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def ask_server() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", DEMO_PAUSE, "--asking"]
    with ready_server(argv, cwd=REPO, name="asking page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


HOST_TOKEN = "page-host-token-0123456789"


@pytest.fixture(scope="module")
def token_server() -> Iterator[str]:
    """A page server that starts runs only for who presents its host token."""
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", "0"]
    argv += ["--host-token-env", "PAGE_HOST_TOKEN"]
    env = {**os.environ, "PAGE_HOST_TOKEN": HOST_TOKEN}
    with ready_server(argv, cwd=REPO, name="token page server", env=env) as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def a2a_remote() -> Iterator[str]:
    """`subagent-engine a2a-serve --parent scripted --script research`: its card URL."""
    argv = [sys.executable, "-m", "cli", "a2a-serve", "--parent", "scripted"]
    argv += ["--script", A2A_SCRIPT, "--name", "Scripted researcher"]
    argv += ["--host", "127.0.0.1", "--port", "0", "--watch-stdin"]
    with ready_server(argv, cwd=REPO, name="a2a-serve") as (port, _, _):
        yield f"http://127.0.0.1:{port}/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def side_server(a2a_remote: str) -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", DEMO_PAUSE]
    argv += ["--side-by-side", a2a_remote]
    with ready_server(argv, cwd=REPO, name="side-by-side page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless, launched by Playwright from its path (never downloaded)."""
    chromium = ensure_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


class PageWatch:
    """The module's one browser context, and what its pages did beyond what they show: console
    errors and page errors (by scenario) and requests to any origin but the test servers'."""

    def __init__(self, context: BrowserContext, origins: set[str], screenshots: Path) -> None:
        self.context = context
        self.origins = origins
        self.screenshots = screenshots
        self.console_errors: list[tuple[str, str]] = []
        self.external_requests: list[str] = []
        context.on("request", self._on_request)

    @contextmanager
    def page(self, scenario: str) -> Iterator[Page]:
        """A new tab for `scenario`, its errors logged under that name; a full-page screenshot
        of it lands in `screenshots` when the scenario ends (or fails), and the tab is closed."""
        page = self.context.new_page()
        page.on("console", lambda message: self._on_console(scenario, message))
        page.on("pageerror", lambda error: self._on_page_error(scenario, error))
        try:
            yield page
        finally:
            try:
                page.screenshot(path=self.screenshots / f"page-{scenario}.png", full_page=True)
            finally:
                page.close()

    def _on_console(self, scenario: str, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append((scenario, message.text))

    def _on_page_error(self, scenario: str, error: Error) -> None:
        self.console_errors.append((scenario, f"pageerror: {error.message}"))

    def _on_request(self, request: Request) -> None:
        if not request.url.startswith("data:") and _origin(request.url) not in self.origins:
            self.external_requests.append(request.url)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="module")
def watch(
    browser: Browser,
    page_server: str,
    gap_server: str,
    ask_server: str,
    side_server: str,
    token_server: str,
    expiring_server: str,
    demo_server: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PageWatch]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(RUN_TIMEOUT_MS)
    context.add_init_script(path=HERE / "page_probe.js")
    shots = tmp_path_factory.mktemp("page-screenshots")
    try:
        origins = {_origin(page_server), _origin(gap_server), _origin(ask_server)}
        origins |= {_origin(side_server), _origin(token_server), _origin(expiring_server)}
        origins.add(_origin(demo_server))
        yield PageWatch(context, origins, shots)
    finally:
        context.close()


# --- driving a page ----------------------------------------------------------------------------


def start_run(page: Page, mode: str = "", prompt: str = PROMPT) -> None:
    if mode:
        page.select_option("#mode", mode)
    page.fill("#prompt", prompt)
    page.get_by_role("button", name="Run the prompt").click()


def wait_for_end(page: Page) -> None:
    page.wait_for_function(HAS_ENDED, arg=TERMINAL)
    # The page closes its EventSource at the terminal; give late DOM work one frame.
    page.evaluate("() => new Promise((resolve) => requestAnimationFrame(() => resolve()))")


def read_view(page: Page) -> dict[str, Any]:
    view: dict[str, Any] = page.evaluate(VIEW)
    return view


def page_state(page: Page) -> dict[str, Any]:
    state: dict[str, Any] = page.evaluate(PAGE_STATE)
    return state


def statuses(view: dict[str, Any]) -> list[str]:
    return [state for _, state, _ in view["timeline"]["statuses"]]


def handover(base: str, run_id: str, token: str) -> str:
    """The page's address that hands a run over to a tab (the page removes the fragment)."""
    return f"{base}/#{urlencode({'run': run_id, 'token': token})}"


def parse_sse(text: str) -> list[tuple[int | None, dict[str, Any]]]:
    """A canned SSE stream as [(cursor or None, event)]: None for an event without an `id:`, one
    of the entry the next cursor closes (the server puts the id on an entry's last event only)."""
    items: list[tuple[int | None, dict[str, Any]]] = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
        )
        if "data" in fields:
            cursor = int(fields["id"]) if "id" in fields else None
            items.append((cursor, json.loads(fields["data"])))
    return items


SYNTHETIC_SSE = (HERE / "synthetic.sse").read_text()
SYNTHETIC = parse_sse(SYNTHETIC_SSE)


def sse(items: list[tuple[int | None, dict[str, Any]]], retry_ms: int | None = None) -> str:
    """SSE frames for `items`; with `retry_ms`, a `retry:` field opens the stream, rides on the
    first event, and stands alone between the held events of an entry."""
    frames = [] if retry_ms is None else [f"retry: {retry_ms}\n\n"]
    for index, (cursor, event) in enumerate(items):
        if retry_ms is not None and index > 0 and items[index - 1][0] is None:
            frames.append(f"retry: {retry_ms}\n\n")
        fields = "" if retry_ms is None or index > 0 else f"retry: {retry_ms}\n"
        fields += "" if cursor is None else f"id: {cursor}\n"
        frames.append(f"{fields}data: {json.dumps(event)}\n\n")
    return "".join(frames)


def _after_cursor(cursor: int) -> int:
    """The index in SYNTHETIC of the first event after the entry `cursor` closes."""
    return next(index for index, (c, _) in enumerate(SYNTHETIC) if c == cursor) + 1


# --- the scenarios: each plays once and returns what the page showed ----------------------------


@pytest.fixture(scope="module")
def host_token(watch: PageWatch, token_server: str) -> dict[str, Any]:
    """A server that needs its host token: Run without it, then with a wrong one, then the
    right one typed into the field the page shows; then a tab handed the token in its address."""
    seen: dict[str, Any] = {}
    status = "#status-text"
    with watch.page("host-token") as page:
        page.goto(f"{token_server}/")
        seen["field_hidden_at_first"] = page.locator("#host-token").is_hidden()
        start_run(page)
        page.wait_for_function("() => document.querySelector('#status').dataset.state === 'failed'")
        seen["asked"] = page.locator(status).text_content()
        seen["field_shown"] = page.locator("#host-token").is_visible()
        page.fill("#host-token", "not-the-token-0123456789")
        start_run(page)
        page.wait_for_function(
            "() => /refused this host token/.test(document.querySelector('#status-text')"
            ".textContent)"
        )
        seen["refused"] = page.locator(status).text_content()
        page.fill("#host-token", HOST_TOKEN)
        start_run(page)
        wait_for_end(page)
        seen["typed"] = page_state(page)
        seen["field_hidden_after"] = page.locator("#host-token").is_hidden()
    with watch.page("host-token-address") as page:
        page.goto(f"{token_server}/#{urlencode({'host_token': HOST_TOKEN})}")
        seen["address_after_load"] = page.url
        start_run(page)
        wait_for_end(page)
        seen["handed"] = page_state(page)
    return seen


@pytest.fixture(scope="module")
def modes(watch: PageWatch, page_server: str) -> dict[str, dict[str, Any]]:
    """Three runs at once, each in its own tab, to their end: "full" with the server's default
    mode, "custom" with the custom visibility mode (subagents as CUSTOM subagent.* events),
    "hidden" with the hidden one."""
    modes = {"full": "", "custom": "custom", "hidden": "hidden"}
    with ExitStack() as tabs:
        pages = {name: tabs.enter_context(watch.page(name)) for name in modes}
        for name, page in pages.items():
            page.goto(f"{page_server}/")
            start_run(page, modes[name])
        views = {}
        for name, page in pages.items():
            wait_for_end(page)
            views[name] = read_view(page)
        return views


@pytest.fixture(scope="module")
def full(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return modes["full"]


@pytest.fixture(scope="module")
def custom(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return modes["custom"]


@pytest.fixture(scope="module")
def hidden(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return modes["hidden"]


@pytest.fixture(scope="module")
def drop(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """Run through a TCP proxy; while a subagent streams, cut every connection: EventSource
    reconnects by itself with Last-Event-ID (after the stream's `retry:` delay, or its own)."""
    port = urlsplit(page_server).port
    assert port is not None
    with CuttingProxy(port) as proxy, watch.page("drop") as page:
        watch.origins.add(proxy.url)
        page.goto(f"{proxy.url}/")
        start_run(page)
        page.wait_for_function(SUBAGENT_TEXT_SHOWS)
        before_cut = page_state(page)
        cut = proxy.cut()
        page.wait_for_function(WAS_RECONNECTING)
        wait_for_end(page)
        view = read_view(page)
        while_cut = next(s for s in view["timeline"]["statuses"] if s[1] == "reconnecting")
        streams = [head for head in proxy.request_heads if head.startswith("GET /runs/")]
        return {
            **view,
            "beforeCut": before_cut,
            "cut": cut,
            "whileCut": while_cut,
            "streamRequests": streams,
        }


@pytest.fixture(scope="module")
def reconnect(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """Run; while a subagent streams, drop the connection and resume from the last cursor drawn
    (what EventSource does with Last-Event-ID); after the end, force a reconnect that replays
    everything. Nothing may be lost or drawn twice.

    Not from cursor 1 mid-run: the journal merges a catch-up's text deltas (by design), so a
    viewer resuming from an older cursor than it drew gets a merged event that may straddle its
    last drawn cursor, which no cursor-based dedupe can split (it failed about 1 run in 10).
    Whole resent entries are deduped: the replay after the end, and the retry test."""
    with watch.page("reconnect") as page:
        page.goto(f"{page_server}/")
        start_run(page)
        page.wait_for_function(SUBAGENT_TEXT_SHOWS)
        mid_run = page.evaluate(
            "() => ({state: window.subagentPage.state(),"
            " reconnected: window.subagentPage.reconnect()})"
        )
        wait_for_end(page)
        after_run = read_view(page)
        page.evaluate("() => window.subagentPage.reconnect(0)")
        page.wait_for_function("() => !window.subagentPage.state().open")
        after_replay = read_view(page)
        return {"midRun": mid_run, "afterRun": after_run, "afterReplay": after_replay}


@pytest.fixture(scope="module")
def side_by_side(watch: PageWatch, side_server: str) -> dict[str, dict[str, Any]]:
    """(The side-by-side server) Two runs at once, each in its own tab, in the server's default
    (attributed) mode and in the custom mode: while a subagent two levels down streams, force a
    reconnect after the last cursor drawn, as EventSource's own does; after the end, force one
    that replays everything. (Mid-run, a replay from an earlier cursor may bring text deltas merged
    across the last cursor drawn into one event with a higher id: the server writes what is ready
    at once that way, and a page that dedupes by cursor cannot take such an event apart.)"""
    modes = {"attributed": "", "custom": "custom"}
    views: dict[str, dict[str, Any]] = {name: {} for name in modes}
    with ExitStack() as tabs:
        pages = {name: tabs.enter_context(watch.page(f"side-by-side-{name}")) for name in modes}
        for name, page in pages.items():
            page.goto(f"{side_server}/")
            start_run(page, modes[name])
        for name, page in pages.items():
            try:
                page.wait_for_function(NESTED_TEXT_SHOWS)
            except Error as exc:  # no nested card ever showed text: said by the tests, per mode
                views[name]["failed"] = f"no nested subagent text: {exc.message}"
                continue
            views[name]["midRun"] = page.evaluate(
                "() => ({state: window.subagentPage.state(),"
                " reconnected: window.subagentPage.reconnect()})"
            )
        for name, page in pages.items():
            wait_for_end(page)
            views[name]["afterRun"] = read_view(page)
            page.evaluate("() => window.subagentPage.reconnect(0)")
            page.wait_for_function("() => !window.subagentPage.state().open")
            views[name]["afterReplay"] = read_view(page)
        return views


@pytest.fixture(scope="module")
def stop(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """Run; as soon as a subagent card is working, press Stop."""
    with watch.page("stop") as page:
        page.goto(f"{page_server}/")
        start_run(page)
        page.wait_for_selector("details.subagent[data-state='running']")
        before_stop = page_state(page)
        page.get_by_role("button", name="Stop the run").click()
        wait_for_end(page)
        return {**read_view(page), "beforeStop": before_stop}


@pytest.fixture(scope="module")
def synthetic(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """synthetic.sse, served by the browser's router for a run handed over in the address: a
    nested subagent, a failed and a suspended one, events and CUSTOM names the page does not
    know, entries of several events."""
    with watch.page("synthetic") as page:
        page.route(
            "**/runs/synthetic/events**",
            lambda route: route.fulfill(
                status=200, content_type="text/event-stream", body=SYNTHETIC_SSE
            ),
        )
        page.goto(handover(page_server, "synthetic", "t"))
        wait_for_end(page)
        return read_view(page)


#: A CLI parent's run (the shape the server sends for Claude Code): its status line while it
#: retries the model, then its delegation call, waiting, with Claude's 30 s heartbeats.
RETRYING = "Retrying the model request (HTTP 529)"
PROGRESS_CALL = "toolu_progress"
STATUS_AND_PROGRESS: list[tuple[int | None, dict[str, Any]]] = [
    (1, {"type": "RUN_STARTED", "threadId": "t", "runId": "cli-progress"}),
    (
        2,
        {
            "type": "CUSTOM",
            "name": "parent.status",
            "value": {"text": RETRYING, "source": "claude", "attempt": 1, "max_retries": 2},
        },
    ),
    (None, {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
    (None, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Delegating."}),
    (3, {"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
    (
        None,
        {
            "type": "TOOL_CALL_START",
            "toolCallId": PROGRESS_CALL,
            "toolCallName": "mcp__subagents__delegate_to_agent",
            "parentMessageId": "m1",
        },
    ),
    (
        None,
        {
            "type": "TOOL_CALL_ARGS",
            "toolCallId": PROGRESS_CALL,
            "delta": '{"agent":"research","objective":"Take a while."}',
        },
    ),
    (4, {"type": "TOOL_CALL_END", "toolCallId": PROGRESS_CALL}),
    (
        5,
        {
            "type": "CUSTOM",
            "name": "tool_call.progress",
            "value": {
                "tool_call_id": PROGRESS_CALL,
                "tool_name": "mcp__subagents__delegate_to_agent",
                "elapsed_seconds": 30,
                "heartbeat": True,
            },
        },
    ),
    (
        6,
        {
            "type": "CUSTOM",
            "name": "tool_call.progress",
            "value": {"tool_call_id": PROGRESS_CALL, "elapsed_seconds": 60, "heartbeat": True},
        },
    ),
    (
        7,
        {
            "type": "CUSTOM",
            "name": "tool_call.progress",  # a call the page never saw
            "value": {"tool_call_id": "toolu_unknown", "elapsed_seconds": 90},
        },
    ),
]
STATUS_AND_PROGRESS_END: list[tuple[int | None, dict[str, Any]]] = [
    (
        8,
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": "r1",
            "toolCallId": PROGRESS_CALL,
            "content": '{"status":"completed","summary":"The slow answer."}',
        },
    ),
    (
        9,
        {
            "type": "CUSTOM",
            "name": "tool_call.progress",  # late: the call has its result
            "value": {"tool_call_id": PROGRESS_CALL, "elapsed_seconds": 90, "heartbeat": True},
        },
    ),
    (None, {"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"}),
    (None, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "Done."}),
    (10, {"type": "TEXT_MESSAGE_END", "messageId": "m2"}),
    (11, {"type": "RUN_FINISHED", "threadId": "t", "runId": "cli-progress"}),
]
#: The pill on a parent's tool call row, and the notes among the parent's messages.
CALL_PILL = """(id) => {
    const pill = document.querySelector(`.tool-call[data-tool-call-id="${id}"] .tool-head .pill`);
    return pill ? {text: pill.textContent, state: pill.dataset.state} : null;
}"""
PARENT_NOTES = (
    "() => [...document.querySelectorAll('#transcript > .note')].map((n) => n.textContent)"
)
APPLIED = "(cursor) => window.subagentPage.state().streamCursor >= cursor"


@pytest.fixture(scope="module")
def status_and_progress(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """A CLI parent's status line and its call's heartbeats, served by the browser's router in
    two responses: the first ends while the call waits (EventSource comes back by itself after
    the `retry:` delay); the second, the call's result and the run's end, is held until the
    page has been read mid-call."""
    requests: list[Route] = []  # the first is answered at once, the reconnect when told

    def serve(route: Route) -> None:
        requests.append(route)
        if len(requests) == 1:
            body = sse(STATUS_AND_PROGRESS, retry_ms=100)
            route.fulfill(status=200, content_type="text/event-stream", body=body)

    with watch.page("status-and-progress") as page:
        page.route("**/runs/cli-progress/events**", serve)
        page.goto(handover(page_server, "cli-progress", "t"))
        page.wait_for_function(APPLIED, arg=STATUS_AND_PROGRESS[-1][0])  # all of it drawn
        during = {
            "pill": page.evaluate(CALL_PILL, PROGRESS_CALL),
            "notes": page.evaluate(PARENT_NOTES),
        }
        page.screenshot(
            path=watch.screenshots / "page-status-and-progress-waiting.png", full_page=True
        )
        while len(requests) < 2:  # EventSource's reconnect, after the 100 ms retry delay
            page.wait_for_timeout(50)
        requests[1].fulfill(
            status=200,
            content_type="text/event-stream",
            body=sse(STATUS_AND_PROGRESS_END),
        )
        wait_for_end(page)
        after = {
            "pill": page.evaluate(CALL_PILL, PROGRESS_CALL),
            "notes": page.evaluate(PARENT_NOTES),
        }
        errors = [
            text for scenario, text in watch.console_errors if scenario == "status-and-progress"
        ]
        return {"during": during, "after": after, "errors": errors, **read_view(page)}


@pytest.fixture(scope="module")
def retry(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """synthetic.sse with SSE `retry:` fields, served in two responses by the browser's router: the
    first ends (as a dropped connection does) after cursor 9; EventSource comes back by itself
    after the `retry:` delay, and the second resends entries 8 and 9 before the rest, as a
    server that resumes at an earlier entry boundary would."""
    parts = [sse(SYNTHETIC[: _after_cursor(9)], 150), sse(SYNTHETIC[_after_cursor(7) :], 150)]
    seen: list[str] = []

    def serve(route: Route) -> None:
        seen.append(route.request.url)
        body = parts[len(seen) - 1] if len(seen) <= len(parts) else ""
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    with watch.page("retry") as page:
        page.route("**/runs/retried/events**", serve)
        page.goto(handover(page_server, "retried", "t"))
        wait_for_end(page)
        view = read_view(page)
        return {**view, "requests": len(seen)}


@pytest.fixture(scope="module")
def gap(watch: PageWatch, gap_server: str) -> dict[str, Any]:
    """(A server whose replay window is smaller than one run) Start a run over HTTP, read it to
    its end, then hand it to a tab: the page watches from the first cursor, which fell out of the
    window, and draws the gap."""
    messages = [{"id": "u1", "role": "user", "content": PROMPT}]
    response = httpx.post(f"{gap_server}/runs", json={"messages": messages}, timeout=10)
    started = response.raise_for_status().json()
    token = started["viewer_token"]
    headers = {"authorization": f"Bearer {token}"}
    httpx.get(
        f"{gap_server}{started['events_url']}", headers=headers, timeout=30
    ).raise_for_status()
    with watch.page("gap") as page:
        page.goto(handover(gap_server, started["run_id"], token))
        url_after_load = page.url
        wait_for_end(page)
        return {**read_view(page), "token": token, "urlAfterLoad": url_after_load}


@pytest.fixture(scope="module")
def reload(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """Run with a prompt of its own; while a subagent streams, reload the tab; after the end,
    reload it again; then open a second tab on the same address."""
    prompt = "Reloaded: how does Trio cancel a delegation?"
    with watch.page("reload") as page:
        addresses: list[str] = []
        runs_started: list[str] = []
        page.on("framenavigated", lambda frame: addresses.append(frame.url))
        page.on(
            "request",
            lambda request: runs_started.append(request.url) if request.method == "POST" else None,
        )
        page.goto(f"{page_server}/")
        history_at_start = page.evaluate("() => history.length")
        with page.expect_response(lambda r: urlsplit(r.url).path == "/runs") as response:
            start_run(page, prompt=prompt)
        token = response.value.json()["viewer_token"]
        page.wait_for_function(SUBAGENT_TEXT_SHOWS)
        before = page_state(page)
        assert before["status"] == "running", before  # the reload lands mid-run
        page.reload()
        wait_for_end(page)
        after_reload = read_view(page)
        page.reload()
        wait_for_end(page)
        after_second_reload = read_view(page)
        history = [history_at_start, page.evaluate("() => history.length")]
        with watch.page("reload-other-tab") as other:
            other.goto(page.url)
            other.wait_for_function("() => document.readyState === 'complete'")
            other_tab = read_view(other)
        return {
            "prompt": prompt,
            "token": token,
            "before": before,
            "afterReload": after_reload,
            "afterSecondReload": after_second_reload,
            "addresses": addresses,
            "runsStarted": runs_started,
            "history": history,
            "otherTab": other_tab,
        }


def card(page: Page, name: str) -> Locator:
    """The subagent card named `name`."""
    return page.locator("details.subagent").filter(
        has=page.locator(":scope > summary .sa-name", has_text=name)
    )


def answer_box(page: Page) -> Locator:
    return card(page, "Research Agent").get_by_role("textbox", name="Your answer", exact=True)


def answer_button(page: Page) -> Locator:
    return card(page, "Research Agent").get_by_role("button", name="Answer", exact=True)


def is_answer(request: Request) -> bool:
    return request.method == "POST" and urlsplit(request.url).path.endswith("/answer")


@pytest.fixture(scope="module")
def ask(watch: PageWatch, ask_server: str) -> dict[str, Any]:
    """(The asking server) Run; when the research agent asks, force a reconnect that replays the
    request; submit an empty and a blank answer; submit one the server refuses (the browser's
    router points it at a delegation nobody waits for); answer; force a reconnect while the
    subagent goes on, another after the end, then reload the tab."""
    with watch.page("ask") as page:
        sent: list[dict[str, Any]] = []
        page.on(
            "request",
            lambda r: sent.append(json.loads(r.post_data or "null")) if is_answer(r) else None,
        )
        page.goto(f"{ask_server}/")
        start_run(page)
        box, button = answer_box(page), answer_button(page)
        box.wait_for()
        asked = read_view(page)
        # The request again, from a replay while the subagent waits: still one form.
        cursor = page.evaluate(
            "() => { const c = window.subagentPage.state().lastCursor;"
            " window.subagentPage.reconnect(1); return c; }"
        )
        page.wait_for_function(CAUGHT_UP, arg=cursor)
        replayed = read_view(page)
        # Empty and blank answers: refused by the page itself, nothing sent.
        button.click()
        card(page, "Research Agent").get_by_text(EMPTY_REFUSED).wait_for()
        empty = {
            "view": read_view(page),
            "invalid": box.get_attribute("aria-invalid"),
            "focused": box.evaluate("(box) => document.activeElement === box"),
        }
        box.fill("   ")
        button.click()
        page.wait_for_function("() => document.activeElement?.name === 'answer'")
        blank = read_view(page)
        sent_before_server = len(sent)

        # An answer the server refuses (404: no such delegation): its message shows in the card.
        def to_nobody(route: Route) -> None:
            body = json.loads(route.request.post_data or "{}")
            route.continue_(post_data=json.dumps({**body, "delegationId": NOBODY}))

        page.route("**/answer", to_nobody)
        box.fill(ANSWER)
        with page.expect_response(lambda r: is_answer(r.request)) as refused_response:
            button.click()
        card(page, "Research Agent").locator(".answer-error", has_text=NOBODY).wait_for()
        page.unroute("**/answer", to_nobody)
        refused = {
            "view": read_view(page),
            "status": refused_response.value.status,
            "body": refused_response.value.json(),
            "enabled": box.is_enabled() and button.is_enabled(),
            "value": box.input_value(),
        }
        # The answer: 202, the form gives way, the subagent goes on with it.
        with page.expect_response(lambda r: is_answer(r.request)) as accepted:
            button.click()
        card(page, "Research Agent").get_by_text(f"Answered: {ANSWER}").wait_for()
        answered = read_view(page)
        mid_run = page.evaluate(  # mid-stream: resume after the last cursor (see `reconnect`)
            "() => ({state: window.subagentPage.state(),"
            " reconnected: window.subagentPage.reconnect()})"
        )
        wait_for_end(page)
        after_run = read_view(page)
        page.evaluate("() => window.subagentPage.reconnect(0)")
        page.wait_for_function("() => !window.subagentPage.state().open")
        after_replay = read_view(page)
        page.reload()
        wait_for_end(page)
        after_reload = read_view(page)
        return {
            "asked": asked,
            "replayed": replayed,
            "empty": empty,
            "blank": blank,
            "sentBeforeServer": sent_before_server,
            "refused": refused,
            "acceptedStatus": accepted.value.status,
            "answered": answered,
            "midRun": mid_run,
            "afterRun": after_run,
            "afterReplay": after_replay,
            "afterReload": after_reload,
            "sent": sent,
        }


@pytest.fixture(scope="module")
def ask_custom(watch: PageWatch, ask_server: str) -> dict[str, Any]:
    """(The asking server) The same question in the custom visibility mode, answered."""
    with watch.page("ask-custom") as page:
        page.goto(f"{ask_server}/")
        start_run(page, "custom")
        answer_box(page).fill("2001")
        asked = read_view(page)
        answer_button(page).click()
        wait_for_end(page)
        return {"asked": asked, "view": read_view(page)}


@pytest.fixture(scope="module")
def ask_stop(watch: PageWatch, ask_server: str) -> dict[str, Any]:
    """(The asking server) Run; while the research agent waits for its answer, press Stop."""
    with watch.page("ask-stop") as page:
        page.goto(f"{ask_server}/")
        start_run(page)
        answer_box(page).wait_for()
        asked = read_view(page)
        page.get_by_role("button", name="Stop the run").click()
        wait_for_end(page)
        return {"asked": asked, "view": read_view(page)}


# --- the demo's review agent asks (human in the loop) ------------------------------------------


def review_card(page: Page) -> Locator:
    return card(page, "Review Agent")


def review_box(page: Page) -> Locator:
    return review_card(page).get_by_role("textbox", name="Your answer", exact=True)


def review_button(page: Page) -> Locator:
    return review_card(page).get_by_role("button", name="Answer", exact=True)


def shoot(watch: PageWatch, page: Page, name: str) -> None:
    """The viewport now, at phone width then at desktop width (the page is left at desktop)."""
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
        page.set_viewport_size(size)
        page.screenshot(path=watch.screenshots / f"page-{name}-{label}.png")


def start_asking_run(page: Page, base: str) -> dict[str, Any]:
    """Run the asking prompt; the server's answer ({run_id, viewer_token, events_url})."""
    page.goto(f"{base}/")
    with page.expect_response(lambda r: urlsplit(r.url).path == "/runs") as started:
        start_run(page, prompt=ASKING_PROMPT)
    review_box(page).wait_for()
    document: dict[str, Any] = started.value.json()
    return document


def answer_elsewhere(base: str, started: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
    """POST /runs/<id>/answer as another client would (the viewer token as a bearer)."""
    return httpx.post(
        f"{base}/runs/{started['run_id']}/answer",
        json=body,
        headers={"authorization": f"Bearer {started['viewer_token']}"},
        timeout=10,
    )


def review_question(page: Page) -> dict[str, Any]:
    """The review card's question as the page shows it, with the ids the page answers for."""
    block = review_card(page).locator(".sa-input")
    return {
        "questionId": block.get_attribute("data-question-id"),
        "answered": block.locator(".answered").all_text_contents(),
        "closed": block.locator(".input-closed").all_text_contents(),
        "error": block.locator(".answer-error").text_content(),
        "forms": block.locator("form").count(),
        "state": block.get_attribute("data-state"),
        "markup": block.locator("i").count(),  # elements from text that looks like HTML
    }


@pytest.fixture(scope="module")
def review_asks(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """(The demo agents) Run a prompt that asks for a question, in a phone-sized tab; when the
    review agent asks, read where the question is; answer it on the page; run to the end."""
    with watch.page("review-asks") as page:
        sent: list[dict[str, Any]] = []
        page.on(
            "request",
            lambda r: sent.append(json.loads(r.post_data or "null")) if is_answer(r) else None,
        )
        page.set_viewport_size(PHONE)
        start_asking_run(page, page_server)
        box = review_box(page)
        page.wait_for_function("() => document.activeElement?.name === 'answer'")
        placement = box.evaluate(QUESTION_PLACEMENT)
        asked = read_view(page)
        question = review_question(page)
        shoot(watch, page, "review-asks")
        box.fill("Trio")
        with page.expect_response(lambda r: is_answer(r.request)) as accepted:
            review_button(page).click()
        review_card(page).get_by_text("Answered: Trio").wait_for()
        wait_for_end(page)
        return {
            "placement": placement,
            "asked": asked,
            "question": question,
            "acceptedStatus": accepted.value.status,
            "sent": sent,
            "view": read_view(page),
            "closed": review_question(page),
        }


@pytest.fixture(scope="module")
def review_answered_elsewhere(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """(The demo agents) The review asks; another client answers through the answer endpoint
    while the page shows the question; run to the end."""
    with watch.page("review-answered-elsewhere") as page:
        started = start_asking_run(page, page_server)
        asked = read_view(page)
        question = review_question(page)
        body = {
            "delegationId": cards_by_name(asked)["Review Agent"]["id"],
            "questionId": question["questionId"],
            "text": "Quart",
            "answeredBy": ANOTHER_CLIENT,
        }
        response = answer_elsewhere(page_server, started, body)
        review_card(page).locator(".sa-input > .answered").wait_for()
        closed = review_question(page)
        shoot(watch, page, "review-answered-elsewhere")
        wait_for_end(page)
        return {
            "asked": asked,
            "question": question,
            "status": response.status_code,
            "body": response.json(),
            "closed": closed,
            "view": read_view(page),
        }


@pytest.fixture(scope="module")
def dev_run_asks(watch: PageWatch, demo_server: str) -> dict[str, Any]:
    """(`./dev run`) The asking prompt on the demo's own page: the remote review agent (A2A, in
    its own process) asks; answered on the page; run to the end."""
    with watch.page("dev-run-asks") as page:
        start_asking_run(page, demo_server)
        page.wait_for_function("() => document.activeElement?.name === 'answer'")
        asked = read_view(page)
        shoot(watch, page, "dev-run-asks")
        review_box(page).fill("Trio")
        with page.expect_response(lambda r: is_answer(r.request)) as accepted:
            review_button(page).click()
        review_card(page).get_by_text("Answered: Trio").wait_for()
        wait_for_end(page)
        return {"asked": asked, "acceptedStatus": accepted.value.status, "view": read_view(page)}


@pytest.fixture(scope="module")
def review_expires(watch: PageWatch, expiring_server: str) -> dict[str, Any]:
    """(The demo agents, the question expiring) The review asks; nobody answers."""
    with watch.page("review-expires") as page:
        start_asking_run(page, expiring_server)
        asked = read_view(page)
        review_card(page).locator(".sa-input > .input-closed").wait_for()
        closed = review_question(page)
        shoot(watch, page, "review-expires")
        wait_for_end(page)
        return {"asked": asked, "closed": closed, "view": read_view(page)}


@pytest.fixture(scope="module")
def review_invalid(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """(The demo agents) The review asks; the first answer is refused 422 answer_invalid (the
    browser's router answers for the server: the demo question takes any text), the second
    is taken."""
    with watch.page("review-invalid") as page:
        start_asking_run(page, page_server)
        refusal = {
            "error": "answer_invalid",
            "message": INVALID,
            "details": {"reason": "schema", "path": "$"},
        }

        def refuse(route: Route) -> None:
            route.fulfill(status=422, json=refusal)

        page.route("**/answer", refuse)
        box = review_box(page)
        box.fill("all of them")
        review_button(page).click()
        review_card(page).locator(".answer-error", has_text=INVALID).wait_for()
        page.unroute("**/answer", refuse)
        refused = {
            **review_question(page),
            "invalid": box.get_attribute("aria-invalid"),
            "focused": box.evaluate("(box) => document.activeElement === box"),
            "value": box.input_value(),
            "statusText": read_view(page)["statusText"],
        }
        shoot(watch, page, "review-invalid")
        box.fill("Trio")
        review_button(page).click()
        review_card(page).get_by_text("Answered: Trio").wait_for()
        wait_for_end(page)
        return {"refused": refused, "view": read_view(page)}


@pytest.fixture(scope="module")
def review_closed_on_page(watch: PageWatch, page_server: str) -> dict[str, Any]:
    """(The demo agents) The review asks; the page's answer is sent just after another client's
    (the browser's router lets the test answer first, then lets the page's request through): the
    server refuses the page's with 409 question_closed."""
    with watch.page("review-closed") as page:
        started = start_asking_run(page, page_server)
        first: list[httpx.Response] = []

        def another_surface_first(route: Route) -> None:
            body = json.loads(route.request.post_data or "{}")
            body = {**body, "text": "Quart", "answeredBy": ANOTHER_CLIENT}
            body.pop("surface", None)  # the endpoint's own surface (http), not the page's
            first.append(answer_elsewhere(page_server, started, body))
            route.continue_()

        page.route("**/answer", another_surface_first)
        review_box(page).fill("Trio")
        with page.expect_response(lambda r: is_answer(r.request)) as refused:
            review_button(page).click()
        review_card(page).locator(".sa-input .answer-error:not(:empty)").wait_for()
        page.unroute("**/answer", another_surface_first)
        closed = review_question(page)
        shoot(watch, page, "review-closed")
        wait_for_end(page)
        return {
            "first": first[0].status_code,
            "status": refused.value.status,
            "body": refused.value.json(),
            "closed": closed,
            "view": read_view(page),
        }


# --- reading a view ----------------------------------------------------------------------------


def delegate_calls(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        call
        for call in view["toolCalls"]
        if call["topLevel"] and call["name"] == "delegate_to_agent"
    ]


def cards_by_name(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {card["name"]: card for card in view["subagents"]}


def assert_the_whole_run_once(view: dict[str, Any]) -> None:
    """Both subagents with their whole text once, both calls, one final answer, nothing twice."""
    assert view["status"] == "finished", view["statusText"]
    by_name = cards_by_name(view)
    assert len(view["subagents"]) == 2
    assert by_name["Research Agent"]["text"] == RESEARCH_TEXT
    assert by_name["Review Agent"]["text"] == REVIEW_TEXT
    assert len(delegate_calls(view)) == 2
    texts = [m["text"] for m in view["parentMessages"]]
    assert len(texts) == len(set(texts))
    assert sum(text.startswith(FINAL_ANSWER_START) for text in texts) == 1


# --- the page is shipped and served; the browser ------------------------------------------------


def test_the_page_is_package_data_and_served_at_root(page_server: str) -> None:
    resource = files("web").joinpath("static/index.html")
    assert resource.is_file()
    assert bundled_page() == resource.read_bytes()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["web"]
    assert any(fnmatch.fnmatch("static/index.html", pattern) for pattern in patterns)
    response = httpx.get(f"{page_server}/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.content == resource.read_bytes()


def test_the_browser_is_debian_s_chromium_headless(browser: Browser, watch: PageWatch) -> None:
    version = subprocess.run(
        [str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "Debian" in version and browser.version in version, (version, browser.version)
    page = watch.context.new_page()
    try:
        assert "HeadlessChrome/" in page.evaluate("() => navigator.userAgent")
    finally:
        page.close()


def test_the_page_stays_on_its_server_and_logs_no_errors(
    watch: PageWatch,
    full: dict[str, Any],
    drop: dict[str, Any],
    reconnect: dict[str, Any],
    stop: dict[str, Any],
    custom: dict[str, Any],
    hidden: dict[str, Any],
    synthetic: dict[str, Any],
    retry: dict[str, Any],
    status_and_progress: dict[str, Any],
    gap: dict[str, Any],
    reload: dict[str, Any],
    ask: dict[str, Any],
    ask_custom: dict[str, Any],
    ask_stop: dict[str, Any],
    side_by_side: dict[str, dict[str, Any]],
    host_token: dict[str, Any],
    review_asks: dict[str, Any],
    review_answered_elsewhere: dict[str, Any],
    review_closed_on_page: dict[str, Any],
    review_expires: dict[str, Any],
    review_invalid: dict[str, Any],
    dev_run_asks: dict[str, Any],
) -> None:
    # Every scenario above has played (this test asks for each); then what their pages did:
    assert watch.external_requests == []
    # Chromium logs the stream the drop scenario cuts, the answers the server refuses in the ask
    # (404), review-closed (409) and review-invalid (422) scenarios and the runs it refuses
    # without the host token (401); nothing else may log an error.
    errors = [
        (scenario, text)
        for scenario, text in watch.console_errors
        if not (scenario == "drop" and "net::ERR_" in text)
        and not (scenario == "ask" and "the server responded with a status of 404" in text)
        and not (
            scenario == "review-closed" and "the server responded with a status of 409" in text
        )
        and not (
            scenario == "review-invalid" and "the server responded with a status of 422" in text
        )
        and not (scenario == "host-token" and "the server responded with a status of 401" in text)
    ]
    assert errors == []


# --- a run: nested subagents, streaming, the final answer --------------------------------------


def test_each_subagent_card_sits_under_its_delegate_tool_call(full: dict[str, Any]) -> None:
    view = full
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


def test_subagent_text_streams_in_before_the_tool_result(full: dict[str, Any]) -> None:
    view = full
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


def test_the_final_answer_appears_after_the_delegations(full: dict[str, Any]) -> None:
    view = full
    answers = [m for m in view["parentMessages"] if m["who"] == "Assistant"]
    assert answers[-1]["text"].startswith(FINAL_ANSWER_START)
    assert "research: completed" in answers[-1]["text"]
    assert "review: completed" in answers[-1]["text"]
    assert view["statusText"] == "Finished"
    assert view["page"]["duplicates"] == 0 and view["page"]["connections"] == 1


def test_status_and_buttons_are_accessible(full: dict[str, Any]) -> None:
    view = full
    assert view["statusRole"] == "status" and view["statusLive"] == "polite"
    assert view["runLabel"] == "Run the prompt" and view["stopLabel"] == "Stop the run"
    assert view["stopDisabled"]  # nothing to stop once the run ended


# --- stop, reconnect, reload -------------------------------------------------------------------


def test_the_stop_button_cancels_the_run(stop: dict[str, Any]) -> None:
    view = stop
    assert view["beforeStop"]["status"] == "running"
    assert view["status"] == "cancelled", view["statusText"]
    assert view["statusText"].startswith("Cancelled")
    states = [card["state"] for card in view["subagents"]]
    assert "cancelled" in states
    assert not {"running", "starting"} & set(states)
    # The server cancelled the running delegation and said so in the stream: the card's outcome
    # is its, not the page's fallback for a subagent the run's end left without one.
    for card in view["subagents"]:
        if card["state"] == "cancelled":
            assert card["outcome"].startswith("Cancelled"), card
            assert ENDED_BY_THE_PAGE not in card["outcome"], card
    assert FINAL_ANSWER_START not in view["transcriptText"]
    assert view["stopDisabled"]


def test_a_dropped_connection_reconnects_by_itself_without_duplicates(
    drop: dict[str, Any],
) -> None:
    view = drop
    assert view["beforeCut"]["status"] == "running"
    assert view["cut"] >= 1  # the page's stream was among the connections cut
    _, state, text = view["whileCut"]
    assert state == "reconnecting" and "reconnecting" in text  # said, in the live status region
    after_cut = statuses(view)[statuses(view).index("reconnecting") :]
    assert "running" in after_cut  # back before the end, by itself
    assert view["page"]["connections"] >= 2  # EventSource came back by itself
    # ... with Last-Event-ID, at or after the cursor drawn before the cut, and the server went on
    # from there: nothing was sent twice.
    first, *again = view["streamRequests"]
    assert "last-event-id" not in first.lower()
    resumed = [
        int(line.split(":", 1)[1])
        for head in again
        for line in head.split("\r\n")
        if line.lower().startswith("last-event-id:")
    ]
    assert resumed and len(resumed) == len(again), again
    assert resumed[0] >= view["beforeCut"]["lastCursor"]
    assert view["page"]["duplicates"] == 0
    assert_the_whole_run_once(view)


def test_a_forced_reconnect_does_not_duplicate_content(reconnect: dict[str, Any]) -> None:
    data = reconnect
    assert data["midRun"]["reconnected"] and data["midRun"]["state"]["status"] == "running"
    after_run, after_replay = data["afterRun"], data["afterReplay"]
    assert after_run["status"] == "finished", after_run["statusText"]
    page = after_run["page"]
    assert page["connections"] >= 2
    assert page["duplicates"] == 0  # resumed after the last cursor drawn: nothing resent
    assert_the_whole_run_once(after_run)
    # Replaying the whole run after its end changes nothing on the page.
    assert after_replay["page"]["duplicates"] > page["duplicates"]
    assert after_replay["page"]["applied"] == page["applied"]
    assert after_replay["transcriptText"] == after_run["transcriptText"]
    assert after_replay["status"] == "finished"


def test_sse_retry_fields_break_nothing_and_set_the_reconnect_delay(
    retry: dict[str, Any], synthetic: dict[str, Any]
) -> None:
    view = retry
    assert view["requests"] == 2 and view["page"]["connections"] == 2  # came back by itself
    lost, back = next(
        (earlier[0], later[0])
        for earlier, later in itertools.pairwise(view["timeline"]["statuses"])
        if earlier[1] == "reconnecting" and later[1] == "running"
    )
    assert back - lost < 2000  # `retry: 150`, not EventSource's default of about 3 s
    assert view["page"]["duplicates"] == 3  # entries 8 and 9, resent: skipped whole
    # `retry:` fields (alone, on an event, inside an entry) change nothing that is drawn.
    assert view["status"] == "finished", view["statusText"]
    assert view["transcriptText"] == synthetic["transcriptText"]
    assert view["subagents"] == synthetic["subagents"]
    assert view["page"]["unknown"] == synthetic["page"]["unknown"] == 2


def test_a_server_with_a_host_token_asks_for_it_once_and_runs(
    host_token: dict[str, Any], token_server: str
) -> None:
    assert host_token["field_hidden_at_first"]
    assert "needs its host token" in host_token["asked"] and host_token["field_shown"]
    assert "refused this host token" in host_token["refused"]
    assert host_token["typed"]["terminal"] == "finished"
    assert host_token["field_hidden_after"]
    # The token handed over in the address is taken and removed from it at once.
    assert host_token["address_after_load"] == f"{token_server}/"
    assert host_token["handed"]["terminal"] == "finished"


def test_the_viewer_token_is_never_in_the_address(
    reload: dict[str, Any], gap: dict[str, Any]
) -> None:
    token = reload["token"]
    views = [reload["afterReload"], reload["afterSecondReload"], reload["otherTab"]]
    addresses = reload["addresses"] + [view["url"] for view in views]
    assert addresses and all(token not in url and "token" not in url for url in addresses)
    start, end = reload["history"]
    assert end == start  # no history entry was pushed (reloads add none)
    # A run handed over in the address: taken in, and the fragment gone before the stream opens.
    assert gap["token"] not in gap["urlAfterLoad"] and "#" not in gap["urlAfterLoad"]
    assert gap["token"] not in gap["url"]


def test_a_reload_resumes_the_run_without_duplicates(reload: dict[str, Any]) -> None:
    before, view = reload["before"], reload["afterReload"]
    assert view["page"]["runId"] == before["runId"]
    assert len(reload["runsStarted"]) == 1  # the same run watched again, not a new one
    assert_the_whole_run_once(view)
    assert view["page"]["duplicates"] == 0
    # After the end, another reload draws the same run again, identically.
    again = reload["afterSecondReload"]
    assert again["page"]["runId"] == before["runId"]
    assert again["transcriptText"] == view["transcriptText"]
    assert again["status"] == "finished"


def test_a_reloaded_page_shows_the_prompt_again(reload: dict[str, Any]) -> None:
    prompt = reload["prompt"]
    for view in (reload["afterReload"], reload["afterSecondReload"]):
        mine = [m for m in view["parentMessages"] if m["who"] == "You"]
        assert [m["text"] for m in mine] == [prompt]
        assert view["parentMessages"][0]["who"] == "You"  # first, above the run
        assert view["prompt"] == prompt  # and in the box, to run it again
    # The run belongs to its tab (sessionStorage): another tab on the same address starts empty.
    other = reload["otherTab"]
    assert other["status"] == "idle" and other["parentMessages"] == []
    assert other["page"]["runId"] is None


# --- visibility modes --------------------------------------------------------------------------


def test_custom_mode_still_draws_nested_subagents(custom: dict[str, Any]) -> None:
    view = custom
    assert view["status"] == "finished", view["statusText"]
    calls = delegate_calls(view)
    assert sorted(len(call["subagents"]) for call in calls) == [1, 1]
    assert cards_by_name(view)["Research Agent"]["text"] == RESEARCH_TEXT


def test_hidden_mode_draws_no_subagents_but_the_answer(hidden: dict[str, Any]) -> None:
    view = hidden
    assert view["status"] == "finished", view["statusText"]
    assert any(m["text"].startswith(FINAL_ANSWER_START) for m in view["parentMessages"])
    if view["page"]["agui"]:  # the engine envelope has no visibility modes; AG-UI does
        assert view["subagents"] == []
        assert RESEARCH_TEXT not in view["transcriptText"]


def test_nested_failed_and_suspended_subagents_and_unknown_events(
    synthetic: dict[str, Any],
) -> None:
    view = synthetic  # synthetic.sse: a canned AG-UI stream
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


# --- a CLI parent: its status line and its waiting call's heartbeat -----------------------------


def test_a_parent_s_status_line_is_a_note_among_its_messages(
    status_and_progress: dict[str, Any],
) -> None:
    view = status_and_progress  # a canned stream: a CLI retrying its model, then delegating
    assert view["during"]["notes"] == [f"\u23f3 {RETRYING}"]
    assert view["after"]["notes"] == [f"\u23f3 {RETRYING}"]  # drawn once, kept
    assert view["status"] == "finished", view["statusText"]
    assert view["page"]["unknown"] == 0  # parent.status and tool_call.progress are known
    assert view["errors"] == []


def test_a_waiting_call_s_heartbeat_shows_how_long_it_has_run_on_its_row(
    status_and_progress: dict[str, Any],
) -> None:
    view = status_and_progress
    # The latest heartbeat wins; one for a call the page never saw changes nothing.
    assert view["during"]["pill"] == {"text": "running for 60 s", "state": "waiting-result"}
    # Once the result is there, a late heartbeat does not bring "running" back.
    assert view["after"]["pill"]["state"] != "waiting-result"
    assert "running for" not in view["after"]["pill"]["text"]
    [call] = [c for c in view["toolCalls"] if c["id"] == PROGRESS_CALL]
    assert call["topLevel"] and "The slow answer." in call["result"]
    assert [m["text"] for m in view["parentMessages"]] == ["Delegating.", "Done."]


def test_nested_subagents_in_the_custom_shape_two_levels_deep(synthetic: dict[str, Any]) -> None:
    view = synthetic  # its surveyor: CUSTOM subagent.* events, subagent.nested.* inside
    cards = {card["id"]: card for card in view["subagents"]}
    assert len(cards) == len(view["subagents"])  # one card per subagent, a continued one too
    surveyor, north, gauge = cards["d5"], cards["d5/north"], cards["d5/gauge"]
    assert surveyor["name"] == "Surveyor" and surveyor["state"] == "finished"
    assert surveyor["parentToolCallId"] == "c2" and surveyor["parentSubagentRunId"] is None
    # The remote's own ids (m1, c1) are the surveyor's, not the parent's message and call.
    assert surveyor["text"] == "Two regions." and surveyor["toolCalls"] == ["d5:c1"]
    parent_call = next(call for call in view["toolCalls"] if call["id"] == "c1")
    assert json.loads(parent_call["args"]) == {"agent": "planner"}
    assert parent_call["subagents"] == ["s1"]
    # One level down, under the surveyor's own call; two levels down, under north.
    assert north["name"] == "North" and north["text"] == "Quiet."
    assert north["parentToolCallId"] == "d5:c1" and north["parentSubagentRunId"] == "d5"
    assert north["state"] == "failed" and "north went dark" in north["outcome"]
    assert gauge["name"] == "Gauge" and gauge["parentSubagentRunId"] == "d5/north"
    assert gauge["parentToolCallId"] is None
    # Suspended, then continued: the same card, its text whole, finished.
    assert gauge["text"] == "Dry. Still dry." and gauge["state"] == "finished"
    states = [state for _, state in view["timeline"]["cardStates"]["d5/gauge"]]
    assert "waiting" in states and "running" in states[states.index("waiting") :], states
    assert states[-1] == "finished"
    assert gauge["notes"] == ["\u2935 Nested subagent 'probe' is beyond max_nesting_depth 2."]
    assert [call["state"] for call in view["toolCalls"] if call["id"] in ("c2", "d5:c1")] == [
        "done",
        "done",
    ]


def test_a_late_viewer_sees_the_gap_and_the_run_s_outcome(gap: dict[str, Any]) -> None:
    view = gap
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


# --- a subagent that asks for input ------------------------------------------------------------


def research_inputs(view: dict[str, Any]) -> list[dict[str, Any]]:
    inputs: list[dict[str, Any]] = cards_by_name(view)["Research Agent"]["inputs"]
    return inputs


OPEN_QUESTION = {"state": "open", "question": QUESTION, "forms": 1, "answered": None, "error": None}


def answered_question(text: str) -> dict[str, Any]:
    return {
        "state": "answered",
        "question": QUESTION,
        "forms": 0,
        "answered": f"Answered: {text}",
        "error": None,
    }


def test_the_question_shows_in_the_asking_subagent_s_card(ask: dict[str, Any]) -> None:
    view = ask["asked"]
    assert view["status"] == "running", view["statusText"]
    research, review = (cards_by_name(view)[name] for name in ("Research Agent", "Review Agent"))
    assert research["state"] == "input-required"
    assert research["text"] == BEFORE_ASKING  # what it said before asking, then the question
    assert research["inputs"] == [OPEN_QUESTION]
    assert review["inputs"] == []
    # The card is the one under the call that delegated to research, and the question is nowhere
    # else in the transcript.
    call = next(c for c in delegate_calls(view) if c["id"] == research["parentToolCallId"])
    assert '"agent": "research"' in call["args"]
    assert view["transcriptText"].count(QUESTION) == 1


def test_a_replayed_request_draws_no_second_form(ask: dict[str, Any]) -> None:
    view = ask["replayed"]
    assert view["page"]["connections"] >= 2 and view["page"]["duplicates"] > 0
    assert cards_by_name(view)["Research Agent"]["state"] == "input-required"
    assert research_inputs(view) == [OPEN_QUESTION]


def test_an_empty_answer_is_refused_by_the_page(ask: dict[str, Any]) -> None:
    empty = ask["empty"]
    assert research_inputs(empty["view"]) == [{**OPEN_QUESTION, "error": EMPTY_REFUSED}]
    assert empty["invalid"] == "true" and empty["focused"]
    assert research_inputs(ask["blank"]) == [{**OPEN_QUESTION, "error": EMPTY_REFUSED}]
    assert cards_by_name(ask["blank"])["Research Agent"]["state"] == "input-required"
    # Neither the empty nor the blank answer was sent; the two answers sent are the real ones.
    assert ask["sentBeforeServer"] == 0
    assert [body["text"] for body in ask["sent"]] == [ANSWER, ANSWER]


def test_an_answer_the_server_refuses_shows_its_message_in_the_card(ask: dict[str, Any]) -> None:
    refused = ask["refused"]
    # No such delegation in the run: 404 delegation_not_found.
    code, message = refusal(refused["body"])
    assert refused["status"] == 404 and code == "delegation_not_found", refused["body"]
    assert NOBODY in message
    # The server's own message, in the card; the form stays, with the answer, to try again.
    assert research_inputs(refused["view"]) == [{**OPEN_QUESTION, "error": message}]
    assert refused["enabled"] and refused["value"] == ANSWER


def test_answering_lets_the_subagent_go_on_with_the_answer(ask: dict[str, Any]) -> None:
    assert ask["acceptedStatus"] == 202
    research_id = cards_by_name(ask["asked"])["Research Agent"]["id"]
    assert [body["delegationId"] for body in ask["sent"]] == [research_id, research_id]
    assert research_inputs(ask["answered"]) == [answered_question(ANSWER)]
    view = ask["afterRun"]
    assert view["status"] == "finished", view["statusText"]
    research = cards_by_name(view)["Research Agent"]
    assert research["state"] == "finished"
    assert research["text"] == f"{BEFORE_ASKING}\n{ANSWERED_TEXT}"
    assert research["outcome"] == f"FinishedChecked {ANSWER}."
    assert cards_by_name(view)["Review Agent"]["inputs"] == []
    # The card waited, went back to running when the subagent went on, then finished.
    states = [state for _, state in view["timeline"]["cardStates"][research["id"]]]
    waited = states.index("input-required")
    assert states[waited + 1 :] == ["running", "finished"], states


def test_an_answered_form_never_comes_back(ask: dict[str, Any]) -> None:
    mid_run = ask["midRun"]
    assert mid_run["reconnected"] and mid_run["state"]["status"] == "running"
    after_run, after_replay, after_reload = (
        ask[name] for name in ("afterRun", "afterReplay", "afterReload")
    )
    assert after_run["page"]["duplicates"] > 0  # the replay from cursor 1 resent the request
    assert after_replay["page"]["duplicates"] > after_run["page"]["duplicates"]
    assert after_reload["page"]["duplicates"] == 0  # a reload draws it all again, from scratch
    for view in (after_run, after_replay, after_reload):
        assert view["status"] == "finished", view["statusText"]
        assert research_inputs(view) == [answered_question(ANSWER)]
        assert cards_by_name(view)["Research Agent"]["text"] == f"{BEFORE_ASKING}\n{ANSWERED_TEXT}"
    assert after_replay["transcriptText"] == after_run["transcriptText"]


def test_custom_mode_asks_and_answers_in_the_card(ask_custom: dict[str, Any]) -> None:
    asked = cards_by_name(ask_custom["asked"])["Research Agent"]
    assert asked["state"] == "input-required" and asked["inputs"] == [OPEN_QUESTION]
    view = ask_custom["view"]
    assert view["page"]["agui"] and view["status"] == "finished", view["statusText"]
    research = cards_by_name(view)["Research Agent"]
    assert research["state"] == "finished"
    assert research["text"] == f"{BEFORE_ASKING}\nChecked the sources for 2001."
    assert research["inputs"] == [answered_question("2001")]


def test_the_form_goes_when_the_run_ends_unanswered(ask_stop: dict[str, Any]) -> None:
    assert research_inputs(ask_stop["asked"]) == [OPEN_QUESTION]
    view = ask_stop["view"]
    assert view["status"] == "cancelled", view["statusText"]
    assert cards_by_name(view)["Research Agent"]["state"] == "cancelled"
    assert research_inputs(view) == [
        {"state": "closed", "question": QUESTION, "forms": 0, "answered": None, "error": None}
    ]


# --- the demo's review agent asks: status bar, scrolled into view, answered anywhere ----------


def refusal(body: dict[str, Any]) -> tuple[str, str]:
    """(code, message) of the server's JSON error: {error: code, message} or {error: {code,
    message}}."""
    error = body["error"]
    if isinstance(error, dict):
        return error["code"], error["message"]
    return error, body["message"]


def review_states(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The status bar's (state, text) over the run, in order."""
    return [(state, text) for _, state, text in view["timeline"]["statusTexts"]]


def test_the_status_bar_names_the_subagent_that_waits_for_an_answer(
    review_asks: dict[str, Any],
) -> None:
    asked = review_asks["asked"]
    assert asked["status"] == "running"
    assert asked["statusText"] == REVIEW_WAITS
    assert cards_by_name(asked)["Review Agent"]["state"] == "input-required"
    # Running, then waiting for the review, then running again once answered, then finished.
    states = review_states(review_asks["view"])
    waited = states.index(("running", REVIEW_WAITS))
    assert ("running", RUNNING) in states[:waited]
    assert ("running", RUNNING) in states[waited + 1 :]
    assert states[-1][0] == "finished"


def test_the_question_is_scrolled_into_view_and_its_field_focused(
    review_asks: dict[str, Any],
) -> None:
    placement = review_asks["placement"]
    # Below the first screen of the page: it is in view because the page scrolled to it.
    assert placement["pageTop"] > placement["viewport"], placement
    assert placement["scrollY"] > 0
    assert placement["top"] >= 0 and placement["bottom"] <= placement["viewport"], placement
    assert placement["focused"]
    inputs = cards_by_name(review_asks["asked"])["Review Agent"]["inputs"]
    assert inputs == [
        {"state": "open", "question": REVIEW_QUESTION, "forms": 1, "answered": None, "error": None}
    ]


def test_answering_on_the_page_continues_the_review_with_the_answer(
    review_asks: dict[str, Any],
) -> None:
    assert review_asks["acceptedStatus"] == 202
    review_id = cards_by_name(review_asks["asked"])["Review Agent"]["id"]
    question_id = review_asks["question"]["questionId"]
    assert review_asks["sent"] == [
        {"delegationId": review_id, "questionId": question_id, "text": "Trio", "surface": "page"}
    ]
    view = review_asks["view"]
    assert view["status"] == "finished", view["statusText"]
    review = cards_by_name(view)["Review Agent"]
    assert review["state"] == "finished"
    assert review["text"] == "Reviewed Trio: the design is sound; add a replay window."
    assert review["outcome"] == "FinishedApprove Trio, with a replay window."
    assert review["inputs"][0]["answered"] == "Answered: Trio"
    assert review_asks["closed"]["forms"] == 0


def test_the_question_carries_its_id_to_the_answer(review_asks: dict[str, Any]) -> None:
    question_id = review_asks["question"]["questionId"]
    review_id = cards_by_name(review_asks["asked"])["Review Agent"]["id"]
    assert question_id and question_id.startswith(f"{review_id}-input-")
    assert review_asks["sent"][0]["questionId"] == question_id


def test_a_question_answered_elsewhere_closes_the_card_with_its_surface(
    review_answered_elsewhere: dict[str, Any],
) -> None:
    seen = review_answered_elsewhere
    assert seen["status"] == 202, seen["body"]
    assert seen["asked"]["statusText"] == REVIEW_WAITS
    closed = seen["closed"]
    assert closed["forms"] == 0 and closed["state"] == "answered"
    assert len(closed["answered"]) == 1
    # The endpoint's surface (not this page's) and who answered there, as text.
    assert closed["answered"] == [f"Answered via http by {ANOTHER_CLIENT}"], closed
    assert closed["markup"] == 0
    view = seen["view"]
    assert view["status"] == "finished", view["statusText"]
    review = cards_by_name(view)["Review Agent"]
    assert review["text"] == "Reviewed Quart: the design is sound; add a replay window."
    assert review["inputs"][0]["answered"] == closed["answered"][0]
    # The status bar went back to running when the question closed.
    states = review_states(view)
    waited = states.index(("running", REVIEW_WAITS))
    assert ("running", RUNNING) in states[waited + 1 :]


def test_answering_a_closed_question_on_the_page_shows_the_409(
    review_closed_on_page: dict[str, Any],
) -> None:
    seen = review_closed_on_page
    assert seen["first"] == 202
    assert seen["status"] == 409
    code, message = refusal(seen["body"])
    assert code == "question_closed", seen["body"]
    closed = seen["closed"]
    # The form is gone; the card says the question closed, who answered it, and the server's
    # message.
    assert closed["forms"] == 0
    assert closed["error"] == message
    assert closed["answered"] == [f"Answered via http by {ANOTHER_CLIENT}"], closed
    view = seen["view"]
    assert view["status"] == "finished", view["statusText"]
    review = cards_by_name(view)["Review Agent"]
    assert review["text"] == "Reviewed Quart: the design is sound; add a replay window."


def test_an_expired_question_closes_the_card_and_the_status_goes_back_to_running(
    review_expires: dict[str, Any],
) -> None:
    assert review_expires["asked"]["statusText"] == REVIEW_WAITS
    closed = review_expires["closed"]
    assert (closed["forms"], closed["state"], closed["closed"]) == (0, "closed", ["Expired"])
    view = review_expires["view"]
    assert view["status"] == "finished", view["statusText"]
    states = review_states(view)
    waited = states.index(("running", REVIEW_WAITS))
    assert ("running", RUNNING) in states[waited + 1 :]
    # Unanswered, the review came back to the parent waiting for input.
    review = cards_by_name(view)["Review Agent"]
    assert review["state"] == "waiting"
    assert review["inputs"][0]["state"] == "closed"
    answers = [m["text"] for m in view["parentMessages"] if m["who"] == "Assistant"]
    # The answer's Markdown list is drawn as a list: its items, without the "- " markers.
    assert "review: input_required" in answers[-1]


def test_an_invalid_answer_s_message_stays_with_the_field(review_invalid: dict[str, Any]) -> None:
    refused = review_invalid["refused"]
    assert refused["error"] == INVALID
    assert (refused["forms"], refused["state"]) == (1, "open")
    assert refused["invalid"] == "true" and refused["focused"]
    assert refused["value"] == "all of them"  # kept, to fix and send again
    assert refused["statusText"] == REVIEW_WAITS  # still waiting for a valid answer
    view = review_invalid["view"]
    assert view["status"] == "finished", view["statusText"]
    review = cards_by_name(view)["Review Agent"]
    assert review["text"] == "Reviewed Trio: the design is sound; add a replay window."


def test_dev_run_s_remote_review_agent_asks_on_the_page_and_uses_the_answer(
    dev_run_asks: dict[str, Any],
) -> None:
    asked = dev_run_asks["asked"]
    assert asked["statusText"] == REVIEW_WAITS
    review = cards_by_name(asked)["Review Agent"]
    assert review["state"] == "input-required"
    assert [i["question"] for i in review["inputs"]] == [REVIEW_QUESTION]
    assert dev_run_asks["acceptedStatus"] == 202
    view = dev_run_asks["view"]
    assert view["status"] == "finished", view["statusText"]
    review = cards_by_name(view)["Review Agent"]
    assert review["state"] == "finished"
    assert review["text"].startswith("Reviewed Trio: ")
    assert "Verdict: approve Trio" in review["text"]


# --- a remote AG-UI delegation beside a remote A2A one, with nested subagents --------------------


def a2a_says() -> str:
    """What the side-by-side server's A2A agent says: its script's messages, in order."""
    script = BUILTIN_REMOTES[A2A_SCRIPT].script
    return " ".join("".join(step.chunks) for step in script if isinstance(step, Say))


def assert_side_by_side(view: dict[str, Any]) -> None:
    """The two remote delegations, each under its own delegate call; inside the AG-UI one, the
    inner run's two subagents, each under the inner parent's call that started it; every card
    finished, with its own text, once."""
    assert view["status"] == "finished", view["statusText"]
    ids = [card["id"] for card in view["subagents"]]
    assert len(ids) == len(set(ids)) == 4, ids
    cards = {card["id"]: card for card in view["subagents"]}
    calls = delegate_calls(view)
    assert [len(call["subagents"]) for call in calls] == [1, 1]
    top = {
        cards[call["subagents"][0]]["name"]: (call, cards[call["subagents"][0]]) for call in calls
    }
    assert set(top) == {TEAM_NAME, SOLO_NAME}
    for call, card in top.values():
        assert card["parentToolCallId"] == call["id"] and card["parentSubagentRunId"] is None
        assert card["state"] == "finished" and card["outcome"].startswith("Finished"), card
        assert call["state"] == "done" and call["result"]
    (team_call, team), (solo_call, solo) = top[TEAM_NAME], top[SOLO_NAME]
    assert '"agent": "team"' in team_call["args"] and '"agent": "solo"' in solo_call["args"]
    # Two levels below the page's parent: the inner run's subagents, in the AG-UI subagent's card.
    nested = {card["name"]: card for card in cards.values() if card["parentSubagentRunId"]}
    assert set(nested) == {"Research Agent", "Review Agent"}
    inner_calls = {c["id"]: c for c in view["toolCalls"] if c["insideSubagent"] == team["id"]}
    for card in nested.values():
        assert card["parentSubagentRunId"] == team["id"]
        call = inner_calls[card["parentToolCallId"]]  # the inner parent's call, in Team's card
        assert call["name"] == "delegate_to_agent" and call["subagents"] == [card["id"]]
        assert call["state"] == "done"
        assert card["state"] == "finished" and card["outcome"].startswith("Finished"), card
    research, review = nested["Research Agent"], nested["Review Agent"]
    assert research["text"] == RESEARCH_TEXT
    assert review["text"] == REVIEW_TEXT
    searches = [c for c in view["toolCalls"] if c["insideSubagent"] == research["id"]]
    assert [c["name"] for c in searches] == ["search"] and research["toolCalls"] == [
        searches[0]["id"]
    ]
    # Each card shows its own text: the AG-UI subagent's is the inner parent's, not its
    # subagents'; the A2A subagent's is its script's, once.
    assert team["text"].startswith("You asked: ") and FINAL_ANSWER_START in team["text"]
    assert RESEARCH_TEXT not in team["text"] and REVIEW_TEXT not in team["text"]
    assert solo["text"].split() == a2a_says().split()
    answers = [m["text"] for m in view["parentMessages"] if m["who"] == "Assistant"]
    assert answers[-1].startswith(FINAL_ANSWER_START)
    assert "team: completed" in answers[-1] and "solo: completed" in answers[-1]


@pytest.mark.parametrize("mode", ["attributed", "custom"])
def test_an_agui_and_an_a2a_delegation_show_side_by_side_with_nested_subagents(
    side_by_side: dict[str, dict[str, Any]], mode: str
) -> None:
    data = side_by_side[mode]
    view = data["afterRun"]
    assert "failed" not in data, (data["failed"], view["subagents"])
    assert data["midRun"]["reconnected"] and data["midRun"]["state"]["status"] == "running"
    # The reconnect while a nested subagent streamed lost nothing and repeated nothing
    # (assert_side_by_side: every card and every text whole, once).
    assert_side_by_side(view)
    page = view["page"]
    assert page["connections"] >= 2 and page["unknown"] == 0
    # Replaying the whole run after its end resends everything and changes nothing on the page.
    replayed = data["afterReplay"]
    assert replayed["page"]["duplicates"] > page["duplicates"]
    assert replayed["page"]["applied"] == page["applied"]
    assert replayed["subagents"] == view["subagents"]
    assert replayed["transcriptText"] == view["transcriptText"]


def test_the_agui_and_the_a2a_delegation_run_at_the_same_time(
    side_by_side: dict[str, dict[str, Any]],
) -> None:
    view = side_by_side["attributed"]["afterRun"]
    states = view["timeline"]["cardStates"]

    def running(name: str) -> tuple[float, float]:
        series = states[cards_by_name(view)[name]["id"]]
        start = next(t for t, state in series if state == "running")
        end = next(t for t, state in series if state == "finished")
        return start, end

    (team_start, team_end), (solo_start, solo_end) = running(TEAM_NAME), running(SOLO_NAME)
    assert team_start < solo_end and solo_start < team_end, states


def test_a_finished_run_reopens_in_the_page_after_the_server_restarts(
    browser: Browser, tmp_path: Path
) -> None:
    """The page server keeps runs in its SQLite store (as `serve` does by default): a tab whose
    run finished shows the same run after the server was stopped and started again on the same
    address and store, and a reload there watches it from the new process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", "0"]
    argv += ["--port", str(port), "--state-dir", str(tmp_path / "state")]
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(RUN_TIMEOUT_MS)
    context.add_init_script(path=HERE / "page_probe.js")
    try:
        page = context.new_page()
        with ready_server(argv, cwd=REPO, name="page server before restart"):
            page.goto(f"http://127.0.0.1:{port}/")
            start_run(page, prompt="kept across restarts")
            wait_for_end(page)
            before = read_view(page)
        with ready_server(argv, cwd=REPO, name="page server after restart"):
            page.reload()
            wait_for_end(page)
            after = read_view(page)
            page.screenshot(path=tmp_path / "page-after-restart.png", full_page=True)
    finally:
        context.close()
    # The same run, drawn the same (timings and connection counts aside).
    timings = {"timeline", "page"}
    assert {k: v for k, v in before.items() if k not in timings} == {
        k: v for k, v in after.items() if k not in timings
    }
    for key in ("runId", "status", "terminal", "lastCursor"):
        assert before["page"][key] == after["page"][key]
    assert after["page"]["status"] == "finished"
    assert "kept across restarts" in json.dumps(after)
