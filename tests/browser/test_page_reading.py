"""Reading the bundled page while a run streams: what a person watching it sees.

The page (web/static/index.html) in Debian's headless Chromium (Playwright's Python package, as in
test_page.py), against `tests.browser.serve_demo` (the scripted parent delegating to the two demo
agents over the real MCP endpoint, paced) and against a canned stream served by the browser's
router for what the demo agents never write (Markdown, markup and a `javascript:` link in an
agent's text, a conclusion that a result repeats, a long prompt in a tool call's arguments, an
agent-local artifact reference).

What is checked: the window follows the stream to its end unless the reader scrolled up (then it
stays, and a "Jump to latest" button brings the reader back); a finished subagent's card folds to
its result; a conclusion is shown once; tool arguments fold to one line; agent text is Markdown
built node by node (no markup an agent writes becomes an element, no `javascript:` link); in the
inline mode each text says which agent wrote it; a finished card has no current-thought line;
no doubled punctuation. Every scenario saves screenshots at desktop (1280x800) and phone
(390x844) width into $PAGE_SCREENSHOTS, or else a pytest temporary directory; the path is printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.helpers.chromium import CHROMIUM_ARGS, ensure_chromium
from tests.helpers.processes import ready_server

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 20_000
TERMINAL = ["finished", "cancelled", "failed"]
HAS_ENDED = "(terminal) => terminal.includes(document.getElementById('status').dataset.state)"
#: A prompt long enough that a run's transcript is taller than a phone's screen.
LONG_PROMPT = "How does Trio stream events? " + " ".join(
    f"Consider point {n}: cancellation scopes, memory channels, back-pressure." for n in range(24)
)
# The rendered text of the transcript: what a reader can see (closed cards' bodies excluded).
VISIBLE_TEXT = "() => document.getElementById('transcript').innerText"
AT_END = "() => innerHeight + scrollY >= document.documentElement.scrollHeight - 48"


@pytest.fixture(scope="module")
def page_server() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", "0.25"]
    with ready_server(argv, cwd=REPO, name="reading page server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("PAGE_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("page-reading-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"page screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def context() -> Iterator[BrowserContext]:
    chromium = ensure_chromium()
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            made = browser.new_context(viewport=DESKTOP)
            made.set_default_timeout(TIMEOUT_MS)
            made.add_init_script(path=HERE / "page_probe.js")
            yield made
        finally:
            browser.close()


@contextmanager
def tab(context: BrowserContext, viewport: dict[str, int]) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(error.message))
    page.set_viewport_size(viewport)
    try:
        yield page
    finally:
        page.close()
    assert errors == []


def shoot(page: Page, shots: Path, name: str) -> None:
    """Screenshots of what the reader sees now, at desktop and at phone width."""
    for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.screenshot(path=shots / f"reading-{name}-{label}.png")


def start_run(page: Page, base: str, mode: str = "", prompt: str = LONG_PROMPT) -> None:
    page.goto(base)
    if mode:
        page.select_option("#mode", mode)
    page.fill("#prompt", prompt)
    page.get_by_role("button", name="Run the prompt").click()


def wait_for_end(page: Page) -> None:
    page.wait_for_function(HAS_ENDED, arg=TERMINAL)
    page.evaluate("() => new Promise((resolve) => requestAnimationFrame(() => resolve()))")


def visible_count(page: Page, text: str) -> int:
    shown: str = page.evaluate(VISIBLE_TEXT)
    return shown.count(text)


# --- a canned stream: what the demo agents never write -----------------------------------------

CONCLUSION = "Channels carry the events in order."
LONG_OBJECTIVE = "Find out " + "how nurseries, cancel scopes and memory channels fit; " * 12
XSS_TEXT = (
    'Look: <img src=x onerror="window.__xss=1"> and **bold**, *slanted*, `code`,\n'
    "[a trap](javascript:window.__xss=2) and [the docs](https://trio.readthedocs.io/).\n\n"
    "- first point\n- second point\n\n```\nasync with trio.open_nursery() as n:\n    pass\n```"
)
SUB = "del-aaaa1111"
CALL = "call-1"
CANNED: list[dict[str, Any]] = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "canned"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": XSS_TEXT},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "TOOL_CALL_START", "toolCallId": CALL, "toolCallName": "delegate_to_agent"},
    {
        "type": "TOOL_CALL_ARGS",
        "toolCallId": CALL,
        "delta": json.dumps({"agent": "research", "objective": LONG_OBJECTIVE}),
    },
    {"type": "TOOL_CALL_END", "toolCallId": CALL},
    {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": SUB,
        "name": "Research Agent",
        "parentToolCallId": CALL,
    },
    {
        "type": "CUSTOM",
        "name": "subagent.status",
        "subagentRunId": SUB,
        "value": {"delegationId": SUB, "status": "working", "text": "Looking for sources"},
    },
    {"type": "TEXT_MESSAGE_START", "messageId": f"{SUB}-m", "subagentRunId": SUB},
    {
        "type": "TEXT_MESSAGE_CONTENT",
        "messageId": f"{SUB}-m",
        "subagentRunId": SUB,
        "delta": CONCLUSION,
    },
    {"type": "TEXT_MESSAGE_END", "messageId": f"{SUB}-m", "subagentRunId": SUB},
    {
        "type": "CUSTOM",
        "name": "subagent.artifact",
        "subagentRunId": SUB,
        "value": {
            "delegationId": SUB,
            "artifact": {
                "id": f"{SUB}-artifact-1",
                "name": "notes.md",
                "mimeType": "text/markdown",
                "uri": f"local://{SUB}/artifacts/notes.md",
                "sizeBytes": 20,
            },
        },
    },
    {"type": "SUBAGENT_FINISHED", "subagentRunId": SUB, "result": CONCLUSION},
    {
        "type": "TOOL_CALL_RESULT",
        "messageId": "r1",
        "toolCallId": CALL,
        "content": json.dumps(
            {
                "delegation_id": SUB,
                "status": "completed",
                "summary": CONCLUSION,
                "agent": "research",
            }
        ),
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "That is all."},
    {"type": "TEXT_MESSAGE_END", "messageId": "m2"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "canned"},
]
CANNED_SSE = "".join(
    f"id: {cursor}\ndata: {json.dumps(event)}\n\n" for cursor, event in enumerate(CANNED, 1)
)
CARD = "details.subagent[data-subagent-run-id='del-aaaa1111']"


@pytest.fixture(scope="module")
def canned(context: BrowserContext, page_server: str, shots: Path) -> dict[str, Any]:
    with tab(context, DESKTOP) as page:
        page.route(
            "**/runs/canned/events**",
            lambda route: route.fulfill(
                status=200, content_type="text/event-stream", body=CANNED_SSE
            ),
        )
        page.goto(f"{page_server}/#{urlencode({'run': 'canned', 'token': 't'})}")
        wait_for_end(page)
        card = page.locator(CARD)
        folded = page.evaluate(
            """(selector) => {
                const card = document.querySelector(selector);
                const args = document.querySelector(
                    ".tool-call[data-tool-call-id='call-1'] > .tool-args");
                const link = [...document.querySelectorAll("#transcript a")];
                const texts = (part) => [...document.querySelectorAll(`#transcript .text ${part}`)]
                    .map((node) => node.textContent);
                return {
                    open: card.open,
                    result: card.querySelector(":scope > summary .sa-result").textContent,
                    activity: card.querySelector(".sa-activity").textContent,
                    argsOpen: args.open,
                    argsSummary: args.querySelector("summary").textContent,
                    argsJson: args.querySelector(".args-json").textContent,
                    argsJsonShown: args.querySelector(".args-json").checkVisibility(),
                    images: document.querySelectorAll("#transcript img").length,
                    xss: window.__xss ?? null,
                    links: link.map((a) => ({
                        href: a.getAttribute("href"), rel: a.rel, text: a.textContent})),
                    strong: texts("strong"),
                    em: texts("em"),
                    code: texts("p code"),
                    blocks: texts("pre code"),
                    items: texts("li"),
                    artifact: document.querySelector(".artifact").textContent,
                };
            }""",
            CARD,
        )
        folded["conclusionShown"] = visible_count(page, CONCLUSION)
        folded["objectiveShown"] = visible_count(page, LONG_OBJECTIVE.strip())
        folded["markupShown"] = visible_count(page, '<img src=x onerror="window.__xss=1">')
        shoot(page, shots, "canned-folded")
        page.set_viewport_size(DESKTOP)
        card.locator(":scope > summary").click()
        opened = {
            "open": card.evaluate("(card) => card.open"),
            "conclusionShown": visible_count(page, CONCLUSION),
            "outcome": card.locator(".outcome").text_content(),
        }
        shoot(page, shots, "canned-opened")
        return {"folded": folded, "opened": opened}


def test_a_finished_card_folds_to_its_result(canned: dict[str, Any]) -> None:
    folded = canned["folded"]
    assert folded["open"] is False
    assert folded["result"] == CONCLUSION
    assert canned["opened"]["open"] is True  # a click unfolds it


def test_a_conclusion_is_shown_once_folded_or_open(canned: dict[str, Any]) -> None:
    # Card text, outcome box and the call's result line all had it: now once, either way.
    assert canned["folded"]["conclusionShown"] == 1
    assert canned["opened"]["conclusionShown"] == 1
    assert canned["opened"]["outcome"] == "Finished"


def test_tool_arguments_fold_to_one_line(canned: dict[str, Any]) -> None:
    folded = canned["folded"]
    assert folded["argsOpen"] is False and folded["argsJsonShown"] is False
    assert folded["argsSummary"].startswith('agent: research \u00b7 objective: "Find out how')
    assert len(folded["argsSummary"]) < 120
    assert json.loads(folded["argsJson"])["objective"] == LONG_OBJECTIVE
    assert folded["objectiveShown"] == 0  # the long objective is one click away, not on screen


def test_agent_text_is_markdown_and_markup_in_it_stays_text(canned: dict[str, Any]) -> None:
    folded = canned["folded"]
    assert folded["images"] == 0 and folded["xss"] is None
    assert folded["markupShown"] == 1  # the characters the agent wrote, as text
    assert folded["strong"] == ["bold"] and folded["em"] == ["slanted"]
    assert folded["code"] == ["code"]
    assert folded["blocks"] == ["async with trio.open_nursery() as n:\n    pass"]
    assert folded["items"] == ["first point", "second point"]
    # Only the http(s) link is a link, opened without a handle on this page.
    links = [link for link in folded["links"] if link["text"] != "notes.md"]
    assert links == [
        {"href": "https://trio.readthedocs.io/", "rel": "noopener noreferrer", "text": "the docs"}
    ]


def test_a_finished_card_has_no_current_thought_line(canned: dict[str, Any]) -> None:
    assert canned["folded"]["activity"] == ""


def test_an_agent_local_artifact_is_named_not_linked(canned: dict[str, Any]) -> None:
    folded = canned["folded"]
    assert "local://" not in folded["artifact"]
    assert folded["artifact"] == "Artifact notes.md (text/markdown, 20 bytes)"
    assert all(not (link["href"] or "").startswith("local:") for link in folded["links"])


# --- a real run: following the stream ----------------------------------------------------------


@pytest.fixture(scope="module")
def followed(context: BrowserContext, page_server: str, shots: Path) -> dict[str, Any]:
    """A run watched at phone size without touching it: where the window ends."""
    with tab(context, PHONE) as page:
        start_run(page, page_server)
        wait_for_end(page)
        view: dict[str, Any] = page.evaluate("() => window.__probe.view()")
        last = page.locator("#transcript > .message").last
        box = last.bounding_box()
        assert box is not None
        view["lastMessageBottom"] = box["y"] + box["height"]
        view["atEnd"] = page.evaluate(AT_END)
        view["scroll"] = page.evaluate(
            "() => ({y: scrollY, height: document.documentElement.scrollHeight, "
            "inner: innerHeight})"
        )
        view["jumpHidden"] = page.locator("#jump-latest").is_hidden()
        view["visible"] = page.evaluate(VISIBLE_TEXT)
        shoot(page, shots, "followed")
        page.set_viewport_size(PHONE)
        research = page.locator("details.subagent", has_text="Research Agent")
        research.locator(":scope > summary").click()
        link = research.get_by_role("link", name="notes.md")
        view["artifactHref"] = link.get_attribute("href")
        with context.expect_page() as opened:
            link.click()
        shown = opened.value
        shown.wait_for_url("blob:**")
        view["artifactShown"] = shown.evaluate("() => document.body.innerText")
        shown.close()
        return view


def test_the_window_follows_the_stream_to_the_final_answer(followed: dict[str, Any]) -> None:
    scroll = followed["scroll"]
    assert scroll["height"] > scroll["inner"]  # the run is taller than the screen
    assert followed["atEnd"] and scroll["y"] > 0
    assert followed["lastMessageBottom"] <= PHONE["height"]
    assert followed["parentMessages"][-1]["text"].startswith("Here is what the specialists found")
    assert followed["jumpHidden"]


def test_no_doubled_punctuation(followed: dict[str, Any]) -> None:
    assert followed["status"] == "finished"
    text = followed["visible"]
    assert "How does Trio stream events?" in text
    for doubled in ("?.", "!.", ".;", "..", ";."):
        assert doubled not in text, doubled


@pytest.fixture(scope="module")
def scrolled_up(context: BrowserContext, page_server: str, shots: Path) -> dict[str, Any]:
    """A run whose reader scrolls back to the top while it streams, then jumps to the latest."""
    with tab(context, PHONE) as page:
        start_run(page, page_server)
        page.wait_for_function("() => scrollY > 0")  # following: the window moved down
        page.mouse.move(200, 400)
        # The reader scrolls up until the window is at the top: a wheel over an element that
        # scrolls itself (a code block, the timeline) moves that element, not the window, so
        # the reader scrolls again, as a person would. What the page then does is asserted in
        # the test: the window stays at the top while the run goes on.
        for _ in range(5):
            page.mouse.wheel(0, -100_000)
            if page.evaluate("() => scrollY") == 0:
                break
            page.wait_for_timeout(200)
        page.wait_for_function("() => scrollY === 0")
        applied_when_scrolled = page.evaluate("() => window.subagentPage.state().applied")
        wait_for_end(page)
        after = {
            "y": page.evaluate("() => scrollY"),
            "applied": page.evaluate("() => window.subagentPage.state().applied"),
            "appliedWhenScrolled": applied_when_scrolled,
            "jumpVisible": page.locator("#jump-latest").is_visible(),
        }
        shoot(page, shots, "scrolled-up")
        page.set_viewport_size(PHONE)
        page.get_by_role("button", name="Jump to the latest events").click()
        page.wait_for_function(AT_END)
        after["jumpHiddenAfter"] = page.locator("#jump-latest").is_hidden()
        return after


def test_scrolling_up_stops_following_and_a_button_jumps_back(scrolled_up: dict[str, Any]) -> None:
    assert scrolled_up["applied"] > scrolled_up["appliedWhenScrolled"]  # the run went on
    assert scrolled_up["y"] == 0  # and the window stayed where the reader went
    assert scrolled_up["jumpVisible"]
    assert scrolled_up["jumpHiddenAfter"]


# --- the inline mode: who wrote what -----------------------------------------------------------


@pytest.fixture(scope="module")
def inline(context: BrowserContext, page_server: str, shots: Path) -> list[dict[str, Any]]:
    with tab(context, DESKTOP) as page:
        start_run(page, page_server, mode="inline", prompt="How does Trio stream events?")
        wait_for_end(page)
        shoot(page, shots, "inline")
        messages: list[dict[str, Any]] = page.evaluate(
            """() => [...document.querySelectorAll("#transcript > .message")].map((m) => ({
                who: m.querySelector(".who").textContent,
                text: m.querySelector(".text").textContent,
                author: m.dataset.author ?? null}))"""
        )
        thoughts: list[str] = page.evaluate(
            """() => [...document.querySelectorAll(
                "#transcript > details.reasoning[data-author] > summary",
            )].map((summary) => summary.textContent)"""
        )
        return [*messages, *({"who": t, "text": None, "author": "thought"} for t in thoughts)]


def test_inline_mode_names_the_agent_that_wrote_each_text(inline: list[dict[str, Any]]) -> None:
    by_text = {m["text"]: m["who"] for m in inline}
    research = "Trio nurseries give structured cancellation; memory channels carry events."
    review = "The design is sound; add a replay window."
    assert by_text[research] == "research (subagent)"
    assert by_text[review] == "review (subagent)"
    parent = [m for m in inline if m["author"] is None and m["who"] != "You"]
    assert parent and all(m["who"] == "Assistant" for m in parent)
    assert [m["who"] for m in inline if m["author"] == "thought"] == [
        "Thinking \u00b7 research (subagent)"
    ]
    assert {m["who"] for m in inline if m["author"] != "thought"} == {
        "You",
        "Assistant",
        "research (subagent)",
        "review (subagent)",
    }


def test_an_artifact_link_opens_what_the_agent_wrote(followed: dict[str, Any]) -> None:
    run_id = followed["page"]["runId"]
    href = followed["artifactHref"]
    assert href.startswith(f"/runs/{run_id}/artifacts/del-") and "local:" not in href
    assert "token" not in href  # the viewer token goes as a bearer, never in an address
    assert followed["artifactShown"] == "# Notes\n- nurseries\n"


# --- the delegations' timeline -----------------------------------------------------------------

T0 = 1_780_000_000_000  # the canned events' timestamps (ms)


def _timed(at_ms: int, event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "timestamp": T0 + at_ms}


#: A run still going: `lead` ran 4.2 s with `helper` nested in it for 1.5 s; `asker` waits for
#: input; `writer` streams. No terminal, and a long `retry:` so the page waits as it is.
TIMELINE: list[dict[str, Any]] = [
    _timed(0, {"type": "RUN_STARTED", "threadId": "t", "runId": "timeline"}),
    _timed(0, {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "delegate_to_agent"}),
    _timed(0, {"type": "TOOL_CALL_END", "toolCallId": "c1"}),
    _timed(
        100,
        {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": "lead",
            "name": "Lead",
            "parentToolCallId": "c1",
        },
    ),
    _timed(
        1000,
        {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": "helper",
            "name": "Helper",
            "parentSubagentRunId": "lead",
            "metadata": {"depth": 1},
        },
    ),
    _timed(2500, {"type": "SUBAGENT_FINISHED", "subagentRunId": "helper", "result": "Helped."}),
    _timed(4300, {"type": "SUBAGENT_FINISHED", "subagentRunId": "lead", "result": "Led."}),
    _timed(4400, {"type": "SUBAGENT_STARTED", "subagentRunId": "asker", "name": "Asker"}),
    _timed(
        4500,
        {
            "type": "CUSTOM",
            "name": "subagent.input_required",
            "subagentRunId": "asker",
            "value": {"delegationId": "asker", "prompt": "Which year?"},
        },
    ),
    _timed(4600, {"type": "SUBAGENT_STARTED", "subagentRunId": "writer", "name": "Writer"}),
    _timed(4700, {"type": "TEXT_MESSAGE_START", "messageId": "w1", "subagentRunId": "writer"}),
    _timed(
        4800,
        {
            "type": "TEXT_MESSAGE_CONTENT",
            "messageId": "w1",
            "subagentRunId": "writer",
            "delta": "Writing…",
        },
    ),
]
TIMELINE_SSE = "retry: 600000\n\n" + "".join(
    f"id: {cursor}\ndata: {json.dumps(event)}\n\n" for cursor, event in enumerate(TIMELINE, 1)
)
ROWS = """() => [...document.querySelectorAll("#timeline-rows > .tl-row")].map((row) => ({
    id: row.dataset.subagentRunId, depth: Number(row.dataset.depth), state: row.dataset.state,
    said: row.querySelector(".tl-state").textContent,
    elapsed: row.querySelector(".tl-elapsed").textContent,
    name: row.querySelector(".tl-name").textContent}))"""


@pytest.fixture(scope="module")
def timeline(context: BrowserContext, page_server: str, shots: Path) -> dict[str, Any]:
    with tab(context, PHONE) as page:
        page.emulate_media(color_scheme="dark")
        page.route(
            "**/runs/timeline/events**",
            lambda route: route.fulfill(
                status=200, content_type="text/event-stream", body=TIMELINE_SSE
            ),
        )
        page.goto(f"{page_server}/#{urlencode({'run': 'timeline', 'token': 't'})}")
        page.wait_for_function("() => window.subagentPage.state().lastCursor === 12")
        rows: list[dict[str, Any]] = page.evaluate(ROWS)
        fits = page.evaluate(
            "() => document.getElementById('timeline').getBoundingClientRect().right <= innerWidth"
            " && document.documentElement.scrollWidth <= innerWidth"
        )
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        shoot(page, shots, "timeline-dark")
        page.set_viewport_size(PHONE)
        page.locator(".tl-name", has_text="Helper").click()
        helper_open = page.evaluate(
            "() => document.querySelector('details.subagent[data-subagent-run-id=helper]').open"
        )
        return {"rows": rows, "fits": fits, "background": background, "helperOpen": helper_open}


def test_the_timeline_shows_each_delegation_s_state_nesting_and_time(
    timeline: dict[str, Any],
) -> None:
    rows = {row["id"]: row for row in timeline["rows"]}
    assert [row["id"] for row in timeline["rows"]] == ["lead", "helper", "asker", "writer"]
    assert rows["lead"] == {
        "id": "lead",
        "depth": 0,
        "state": "finished",
        "said": "finished",
        "elapsed": "4.2 s",
        "name": "Lead",
    }
    assert (rows["helper"]["depth"], rows["helper"]["state"], rows["helper"]["elapsed"]) == (
        1,
        "finished",
        "1.5 s",
    )
    assert (rows["asker"]["state"], rows["asker"]["said"]) == (
        "input-required",
        "waiting for input",
    )
    assert (rows["writer"]["state"], rows["writer"]["said"]) == ("streaming", "streaming")
    # Running ones count on the events' clock: seconds, not the time since the timestamps' epoch.
    assert rows["writer"]["elapsed"].endswith(" s") and "min" not in rows["writer"]["elapsed"]
    assert timeline["helperOpen"]  # a row's name opens its card


def test_the_timeline_fits_a_phone_in_dark_mode(timeline: dict[str, Any]) -> None:
    assert timeline["fits"]
    assert timeline["background"] == "rgb(20, 23, 28)"  # the page's dark --bg
