"""The assistant-ui example app (examples/assistant-ui) in headless Chromium against a real server.

The app is a frontend people already use, @assistant-ui/react with its AG-UI runtime
(@assistant-ui/react-ag-ui), installed from its lock file and built here when its build is missing
or older than its sources (`npm ci`, `npm run build`, under a file lock as
`tests.helpers.node_packages` does). `vite preview` serves the build on 127.0.0.1 and forwards
`/agui` to the bundled server (`tests.browser.serve_demo`: the scripted parent delegating over the
real MCP endpoint to the two in-process demo agents, paced), so the page and its `POST /agui` share
one origin, as `npm run dev` beside `./dev run` does for a user.

What the test shows through the DOM: each subagent renders as a nested message of the parent's
`delegate_to_agent` call (the library's own nesting, `ToolCallMessagePart.messages`), its text
streams (several partial states seen by a MutationObserver), the composer's Stop ends the run
(the page says so and the server's audit has every delegation cancelled), and the review agent's
question ("ask me ...": `demo.agents`) arrives as an AG-UI interrupt, is answered in the page and
the resumed run finishes with the answer in the subagent's text. Screenshots (desktop 1280x800,
phone 390x844) land in the test's temporary directory. Every wait is Playwright's, bounded.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from demo.agents import REVIEW_QUESTION
from tests.helpers.chromium import CHROMIUM_ARGS, ensure_chromium
from tests.helpers.node_packages import ensure_npm_packages
from tests.helpers.ports import closed_port
from tests.helpers.processes import ready_server
from tools.peers.children import stop_process_group

pytestmark = pytest.mark.slow  # Node.js builds and serves the app

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "examples" / "assistant-ui"
BUILD_TIMEOUT = 300.0
PREVIEW_TIMEOUT = 30.0
WAIT_MS = 20_000
PAUSE = "0.3"  # seconds between the demo agents' chunks: time to see text stream and stop it

PROMPT = "How does Trio stream events?"
ASKING_PROMPT = "ask me which framework to review"
ANSWER = "Trio nurseries"
DELEGATE = '.tool-call[data-tool="delegate_to_agent"]'
SUBAGENT = f"{DELEGATE} .subagents .subagent"

# Every distinct text a subagent's text paragraph shows, as the page renders it.
TEXT_RECORDER = """
window.__texts = [];
new MutationObserver(() => {
    for (const node of document.querySelectorAll(".subagent .subagent-text")) {
        const text = node.textContent;
        if (text && !window.__texts.includes(text)) window.__texts.push(text);
    }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
# Two partial states of one growing subagent text: the second extends the first by a word.
STREAMED = """() => {
    const words = (text) => text.trim().split(/\\s+/).length;
    return window.__texts.some((a) => window.__texts.some(
        (b) => b.startsWith(a) && words(b) > words(a)));
}"""


# --- the app's build, the servers, the browser ---------------------------------------------------


def _stale(dist: Path) -> bool:
    built = dist / "index.html"
    if not built.is_file():
        return True
    sources = [APP / "package-lock.json", APP / "index.html", APP / "vite.config.ts"]
    sources += list((APP / "src").rglob("*"))
    return any(path.stat().st_mtime > built.stat().st_mtime for path in sources)


@pytest.fixture(scope="module")
def app_build() -> Path:
    """examples/assistant-ui/dist, built from the locked packages when missing or stale."""
    ensure_npm_packages(APP)
    dist = APP / "dist"
    with open(APP / ".install.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if _stale(dist):
                result = subprocess.run(
                    ["npm", "run", "build"],
                    cwd=APP,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=BUILD_TIMEOUT,
                )
                if result.returncode != 0:
                    output = (result.stdout + result.stderr).strip()[-3000:]
                    pytest.fail(f"`npm run build` in {APP} failed:\n{output}", pytrace=False)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    return dist


@pytest.fixture(scope="module")
def engine_server() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.browser.serve_demo", "--pause", PAUSE]
    with ready_server(argv, cwd=REPO, name="example app server") as (port, _, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def app_url(app_build: Path, engine_server: str) -> Iterator[str]:
    """`vite preview` of the build, forwarding /agui to the engine server: the app's URL."""
    port = closed_port()
    env = {**os.environ, "SUBAGENT_ENGINE_URL": engine_server, "NO_COLOR": "1"}
    vite = APP / "node_modules" / "vite" / "bin" / "vite.js"
    argv = ["node", str(vite), "preview", "--port", str(port), "--strictPort"]
    proc = subprocess.Popen(
        argv,
        cwd=APP,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        seen: list[str] = []
        assert proc.stdout is not None
        # vite prints its URL once it listens (or exits with why it cannot).
        for line in proc.stdout:
            seen.append(line)
            if url in line:
                break
        else:
            pytest.fail(f"vite preview did not start:\n{''.join(seen)[-3000:]}", pytrace=False)
        yield url
    finally:
        stop_process_group(proc, 5.0)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = ensure_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("example-app-screenshots")


@contextmanager
def open_app(
    browser: Browser, url: str, width: int = 1280, height: int = 800
) -> Iterator[tuple[Page, list[str]]]:
    """The app in a context of its own (`width` x `height`), and the page's uncaught errors."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        context.set_default_timeout(WAIT_MS)
        context.add_init_script(TEXT_RECORDER)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(url)
        page.wait_for_selector(".composer textarea")
        yield page, errors
    finally:
        context.close()


def send(page: Page, prompt: str) -> dict[str, str]:
    """Type `prompt`, press Run; the POST /agui answer's headers (the server's run id, token)."""
    page.fill(".composer textarea", prompt)
    with page.expect_response(lambda r: r.url.endswith("/agui") and r.ok) as response:
        page.click(".composer .send")
    return response.value.all_headers()


def delegation_statuses(server: str, headers: dict[str, str]) -> dict[str, str]:
    """Each delegation's status by agent key, from the server's audit of the run that answered
    with `headers`."""
    run_id, token = headers["x-run-id"], headers["x-viewer-token"]
    answer = httpx.get(
        f"{server}/runs/{run_id}/audit",
        headers={"authorization": f"Bearer {token}"},
        timeout=10,
    )
    answer.raise_for_status()
    body = answer.json()
    records: list[dict[str, Any]] = body["delegations"] if isinstance(body, dict) else body
    return {record["agent_key"]: record["status"] for record in records}


# --- the scenarios -----------------------------------------------------------------------------


def test_subagents_nest_under_the_delegate_call_stream_and_stop(
    browser: Browser, app_url: str, engine_server: str, screenshots: Path
) -> None:
    with open_app(browser, app_url) as (page, errors):
        headers = send(page, PROMPT)
        page.wait_for_selector("#run-status[data-state='running']")
        # Each subagent is a message inside the parent's delegate call, named by its agent.
        page.wait_for_selector(f"{SUBAGENT} .subagent-name:text('Research Agent')")
        page.wait_for_selector(f"{SUBAGENT} .subagent-name:text('Review Agent')")
        assert page.locator(DELEGATE).count() == 2
        research = page.locator(DELEGATE).filter(has_text="Research Agent")
        assert research.locator(".subagent").count() == 1
        assert research.locator(".subagent-name").inner_text() == "Research Agent"
        # Its text streams: a partial state, then one that extends it by a word.
        page.wait_for_function(STREAMED)
        print(f"partial texts seen: {page.evaluate('() => window.__texts')}")
        page.screenshot(path=screenshots / "streaming-desktop.png")

        page.click(".composer .stop")
        page.wait_for_selector("#run-status[data-state='cancelled']")
        assert page.locator(".message.assistant .ended").inner_text() == "Stopped."
        for card in page.locator(SUBAGENT).all():
            assert card.get_attribute("data-status") == "cancelled"
        page.wait_for_selector(".composer .send")
        page.screenshot(path=screenshots / "stopped-desktop.png")
        # The text stopped where the run was stopped: it never reached its end.
        final = page.locator(".subagent-text").all_inner_texts()
        assert not any("carry events." in text for text in final), final
        # The server stopped the run: every delegation ended cancelled (the cascade).
        statuses = delegation_statuses(engine_server, headers)
        assert statuses == {"research": "cancelled", "review": "cancelled"}, statuses
        assert errors == []


def test_a_subagents_question_is_answered_in_the_page(
    browser: Browser, app_url: str, engine_server: str, screenshots: Path
) -> None:
    with (
        open_app(browser, app_url) as (page, errors),
        open_app(browser, app_url, 390, 844) as (phone, phone_errors),
    ):
        headers = send(page, ASKING_PROMPT)
        # The run ends at the review agent's question (an AG-UI interrupt): the page asks it.
        page.wait_for_selector("#run-status[data-state='waiting']")
        question = page.locator(".questions .question")
        assert question.locator(".asker").inner_text() == "Review Agent asks:"
        assert question.locator(".question-text").inner_text() == REVIEW_QUESTION
        review = page.locator(SUBAGENT).filter(has_text="Review Agent")
        assert review.get_attribute("data-status") == "waiting"
        page.screenshot(path=screenshots / "question-desktop.png")

        # The same question on a phone-width page (a run of its own), for its screenshot.
        send(phone, ASKING_PROMPT)
        phone.wait_for_selector(".questions .question")
        phone.screenshot(path=screenshots / "question-phone.png")
        phone.fill(".questions input", "the phone")
        phone.click(".questions button[type='submit']")

        question.locator("input").fill(ANSWER)
        with page.expect_response(lambda r: r.url.endswith("/agui")) as resumed:
            page.click(".questions button[type='submit']")
        assert resumed.value.status == 200
        page.wait_for_selector("#run-status[data-state='finished']")
        assert page.locator(".questions").count() == 0
        # The resumed run went on from the question: the review used the answer. assistant-ui
        # streams a resumed run into a new assistant message, where the re-announced subagents
        # have no spawning call to nest under, so their further text shows there (the library's
        # fallback); the review's delegate call gets its result and its card shows it finished.
        resumed_text = page.locator(".message.assistant").last.inner_text()
        assert f"Reviewed {ANSWER}:" in resumed_text, resumed_text
        assert review.get_attribute("data-status") == "finished"
        call = page.locator(DELEGATE).filter(has_text="Review Agent")
        outcome = call.locator(".tool-result pre").text_content() or ""
        assert f"Approve {ANSWER}, with a replay window." in outcome, outcome
        page.screenshot(path=screenshots / "answered-desktop.png", full_page=True)
        statuses = delegation_statuses(engine_server, headers)
        assert statuses == {"research": "completed", "review": "completed"}, statuses

        phone.wait_for_selector("#run-status[data-state='finished']")
        assert "Reviewed the phone:" in phone.locator(".message.assistant").last.inner_text()
        phone.screenshot(path=screenshots / "answered-phone.png", full_page=True)
        assert errors == [] and phone_errors == []
        print(f"screenshots: {screenshots}")
