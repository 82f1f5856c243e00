// Drives the bundled page (web/static/index.html) in headless Chromium and reports what it saw.
//
//   node drive_page.mjs --base http://127.0.0.1:PORT [--gap-base URL] [--screenshots DIR]
//                       [--chromium PATH]
//
// One browser (Debian's chromium through playwright-core, a fresh profile directory) runs every
// scenario, each in its own page, against a server started by tests/browser/test_page.py:
//
//   full       Run with the server's default mode; wait for the run's end.
//   drop       Run through a TCP proxy; while a subagent streams, cut every connection: EventSource
//              reconnects by itself with Last-Event-ID (after its ~3 s retry delay).
//   reconnect  Run; while a subagent streams, force a reconnect that replays from cursor 1; after
//              the end, force one that replays everything. Nothing may be drawn twice.
//   stop       Run; as soon as a subagent card is working, press Stop.
//   custom     Run with the "custom" visibility mode (subagents as CUSTOM subagent.* events).
//   hidden     Run with the "hidden" visibility mode.
//   synthetic  A canned AG-UI stream served by the browser's router for the page's
//              #run=...&token=... address: a nested subagent, a failed and a suspended one,
//              events and CUSTOM names the page does not know, entries of several events.
//   gap        (with --gap-base: a server whose replay window is smaller than one run) Start a run
//              over HTTP, let it end, then open the page on it (#run=...&token=...): the page
//              watches from the first cursor, which fell out of the window, and draws the gap.
//
// The page is observed from outside: a MutationObserver installed before the page loads timestamps
// when each subagent card's text grows and when each tool call's result appears, and the DOM is read
// through its data attributes. Prints one JSON document on stdout:
//   {ok, browser, scenarios: {name: {...}}, consoleErrors: [{scenario, text}], externalRequests,
//    error?}
// Exit status 0 when the driver itself worked (the assertions are the pytest side's job).

import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const RUN_TIMEOUT_MS = 20_000;
const TERMINAL = ["finished", "cancelled", "failed"];

function parseArgs(argv) {
  const options = { base: null, gapBase: null, screenshots: null, chromium: "/usr/bin/chromium" };
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, "").replace(/-(.)/g, (_, c) => c.toUpperCase());
    if (!(key in options)) throw new Error(`unknown option ${argv[i]}`);
    options[key] = argv[++i];
  }
  if (!options.base) throw new Error("--base URL is required");
  options.base = options.base.replace(/\/$/, "");
  options.gapBase = options.gapBase?.replace(/\/$/, "") ?? null;
  return options;
}

// Runs in the page before its own script: timestamps text growth per subagent card and the first
// appearance of each tool call's result.
function installTimeline() {
  const timeline = { start: performance.now(), subagentText: {}, results: {} };
  window.__timeline = timeline;
  const sample = () => {
    const now = performance.now() - timeline.start;
    for (const card of document.querySelectorAll("details.subagent[data-subagent-run-id]")) {
      const id = card.dataset.subagentRunId;
      let length = 0;
      for (const text of card.querySelectorAll(":scope > .sa-body > .sa-items > .message > .text")) {
        length += text.textContent.length;
      }
      const series = (timeline.subagentText[id] ||= []);
      if (length > 0 && (series.length === 0 || series[series.length - 1][1] !== length)) {
        series.push([now, length]);
      }
    }
    for (const result of document.querySelectorAll(".tool-result[data-tool-call-id]")) {
      const id = result.dataset.toolCallId;
      if (!(id in timeline.results)) timeline.results[id] = now;
    }
  };
  document.addEventListener("DOMContentLoaded", () => {
    new MutationObserver(sample).observe(document.body, {
      childList: true,
      subtree: true,
      characterData: true,
    });
  });
}

// Runs in the page: what it shows, read through the DOM only.
function readView() {
  const textOf = (node) => (node ? node.textContent : null);
  const ownText = (card) =>
    [...card.querySelectorAll(":scope > .sa-body > .sa-items > .message > .text")]
      .map((node) => node.textContent)
      .join("\n");
  const transcript = document.getElementById("transcript");
  const toolCalls = [...document.querySelectorAll(".tool-call[data-tool-call-id]")].map((call) => ({
    id: call.dataset.toolCallId,
    name: textOf(call.querySelector(".tool-name")),
    state: call.querySelector(".tool-head .pill")?.dataset.state ?? null,
    args: textOf(call.querySelector(":scope > .tool-args")),
    result: textOf(call.querySelector(":scope > .tool-result")),
    topLevel: call.parentElement === transcript,
    insideSubagent: call.parentElement?.closest("details.subagent")?.dataset.subagentRunId ?? null,
    subagents: [...call.querySelectorAll(":scope > .tool-children > details.subagent")].map(
      (card) => card.dataset.subagentRunId,
    ),
  }));
  const subagents = [...document.querySelectorAll("details.subagent[data-subagent-run-id]")].map((card) => ({
    id: card.dataset.subagentRunId,
    name: textOf(card.querySelector(":scope > summary .sa-name")),
    state: card.dataset.state,
    open: card.open,
    text: ownText(card),
    activity: textOf(card.querySelector(":scope > .sa-body > .sa-activity")),
    outcome: card.querySelector(":scope > .sa-body > .outcome:not([hidden])")?.textContent ?? null,
    // The call whose card this one sits in directly (null: nested in a subagent, or unclaimed).
    parentToolCallId: card.parentElement?.matches(".tool-children")
      ? card.parentElement.closest(".tool-call").dataset.toolCallId
      : null,
    parentSubagentRunId: card.parentElement?.closest("details.subagent")?.dataset.subagentRunId ?? null,
    toolCalls: [...card.querySelectorAll(":scope > .sa-body > .sa-items > .tool-call")].map(
      (call) => call.dataset.toolCallId,
    ),
  }));
  const parentMessages = [...transcript.querySelectorAll(":scope > .message")].map((message) => ({
    id: message.dataset.messageId,
    who: textOf(message.querySelector(".who")),
    text: textOf(message.querySelector(".text")),
  }));
  const status = document.getElementById("status");
  return {
    status: status.dataset.state,
    statusText: textOf(document.getElementById("status-text")),
    statusRole: status.getAttribute("role"),
    statusLive: status.getAttribute("aria-live"),
    runLabel: document.getElementById("run-button").getAttribute("aria-label"),
    stopLabel: document.getElementById("stop-button").getAttribute("aria-label"),
    stopDisabled: document.getElementById("stop-button").disabled,
    toolCalls,
    subagents,
    parentMessages,
    gaps: document.querySelectorAll("[data-gap]").length,
    transcriptText: transcript.innerText,
    page: window.subagentPage ? window.subagentPage.state() : null,
    timeline: window.__timeline,
  };
}

// A TCP proxy to the server that can cut every connection at once, as a network would.
async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const cut = () => {
    for (const socket of [...sockets]) socket.destroy();
  };
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    cut,
    close: () => {
      cut();
      server.close();
    },
  };
}

async function openPage(context, base, fragment = "") {
  const page = await context.newPage();
  await page.goto(`${base}/${fragment}`, { waitUntil: "domcontentloaded" });
  return page;
}

async function startRun(page, mode) {
  if (mode) await page.selectOption("#mode", mode);
  await page.fill("#prompt", "How does Trio stream events?");
  await page.getByRole("button", { name: "Run the prompt" }).click();
}

async function waitForEnd(page) {
  await page.waitForFunction(
    (terminal) => terminal.includes(document.getElementById("status").dataset.state),
    TERMINAL,
    { timeout: RUN_TIMEOUT_MS },
  );
  // The page closes its EventSource at the terminal; give late DOM work one frame.
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve())));
}

async function screenshot(page, options, name) {
  if (!options.screenshots) return null;
  const path = join(options.screenshots, `page-${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

// The synthetic scenario's stream: [cursor or null, event]. A null cursor is an event of the
// entry the next cursor closes (the server puts the id on an entry's last event only).
const SYNTHETIC = [
  [1, { type: "RUN_STARTED", threadId: "t", runId: "synthetic" }],
  [null, { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" }],
  [2, { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Planning." }],
  [3, { type: "TEXT_MESSAGE_END", messageId: "m1" }],
  [null, { type: "TOOL_CALL_START", toolCallId: "c1", toolCallName: "delegate_to_agent", parentMessageId: "m1" }],
  [null, { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '{"agent":"planner"}' }],
  [4, { type: "TOOL_CALL_END", toolCallId: "c1" }],
  [5, { type: "SUBAGENT_STARTED", subagentRunId: "s1", name: "Planner", description: "Plans the work", parentToolCallId: "c1", parentMessageId: "m1" }],
  [6, { type: "FUTURE_EVENT_TYPE", subagentRunId: "s1", whatever: 1 }],
  [7, { type: "CUSTOM", name: "app.private", value: { x: 1 } }],
  [null, { type: "TEXT_MESSAGE_START", messageId: "s1-m", role: "assistant", subagentRunId: "s1" }],
  [8, { type: "TEXT_MESSAGE_CONTENT", messageId: "s1-m", delta: "Two tasks.", subagentRunId: "s1" }],
  [9, { type: "TEXT_MESSAGE_END", messageId: "s1-m", subagentRunId: "s1" }],
  [null, { type: "TOOL_CALL_START", toolCallId: "s1-c", toolCallName: "delegate_to_agent", subagentRunId: "s1" }],
  [10, { type: "TOOL_CALL_END", toolCallId: "s1-c", subagentRunId: "s1" }],
  [11, { type: "SUBAGENT_STARTED", subagentRunId: "s2", name: "Estimator", parentSubagentRunId: "s1", parentToolCallId: "s1-c" }],
  [12, { type: "TEXT_MESSAGE_CHUNK", messageId: "s2-m", delta: "About a day each.", subagentRunId: "s2" }],
  [13, { type: "SUBAGENT_FINISHED", subagentRunId: "s2", result: "2 days", outcome: { type: "success" } }],
  [14, { type: "TOOL_CALL_RESULT", messageId: "s1-r", toolCallId: "s1-c", content: "2 days", subagentRunId: "s1" }],
  [15, { type: "SUBAGENT_STARTED", subagentRunId: "s3", name: "Checker", parentSubagentRunId: "s1" }],
  [16, { type: "SUBAGENT_ERROR", subagentRunId: "s3", message: "rate limited", code: "remote_failed" }],
  [17, { type: "SUBAGENT_FINISHED", subagentRunId: "s1", result: { tasks: 2 }, outcome: { type: "success" } }],
  [18, { type: "TOOL_CALL_RESULT", messageId: "r1", toolCallId: "c1", content: '{"status":"completed","summary":"Plan: 2 tasks"}' }],
  [19, { type: "SUBAGENT_STARTED", subagentRunId: "s4", name: "Deleter" }],
  [20, { type: "SUBAGENT_FINISHED", subagentRunId: "s4", outcome: { type: "suspended", interruptIds: ["i1"] } }],
  [null, { type: "TEXT_MESSAGE_START", messageId: "m2", role: "assistant" }],
  [null, { type: "TEXT_MESSAGE_CONTENT", messageId: "m2", delta: "Plan ready." }],
  [21, { type: "TEXT_MESSAGE_END", messageId: "m2" }],
  [22, { type: "RUN_FINISHED", threadId: "t", runId: "synthetic" }],
];

function syntheticBody() {
  return SYNTHETIC.map(([cursor, event]) => `${cursor === null ? "" : `id: ${cursor}\n`}data: ${JSON.stringify(event)}\n\n`).join("");
}

const scenarios = {
  async full(context, options) {
    const page = await openPage(context, options.base);
    await startRun(page, "");
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    view.screenshot = await screenshot(page, options, "full");
    await page.close();
    return view;
  },

  async drop(context, options) {
    const proxy = await startProxy(options.base);
    options.origins.push(new URL(proxy.url).origin);
    try {
      const page = await openPage(context, proxy.url);
      await startRun(page, "");
      await page.waitForFunction(
        () => [...document.querySelectorAll("details.subagent .message .text")].some((t) => t.textContent.length > 0),
        null,
        { timeout: RUN_TIMEOUT_MS },
      );
      const beforeCut = await page.evaluate(() => window.subagentPage.state());
      proxy.cut();
      await page.waitForFunction(
        () => document.getElementById("status").dataset.state === "reconnecting",
        null,
        { timeout: RUN_TIMEOUT_MS },
      );
      const whileCut = await page.evaluate(() => ({
        status: document.getElementById("status").dataset.state,
        statusText: document.getElementById("status-text").textContent,
      }));
      await waitForEnd(page);
      const view = await page.evaluate(readView);
      await page.close();
      return { ...view, beforeCut, whileCut };
    } finally {
      proxy.close();
    }
  },

  async reconnect(context, options) {
    const page = await openPage(context, options.base);
    await startRun(page, "");
    // Mid-run: once a subagent's text is streaming, reconnect with a cursor far behind.
    await page.waitForFunction(
      () => [...document.querySelectorAll("details.subagent .message .text")].some((t) => t.textContent.length > 0),
      null,
      { timeout: RUN_TIMEOUT_MS },
    );
    const midRun = await page.evaluate(() => ({
      state: window.subagentPage.state(),
      reconnected: window.subagentPage.reconnect(1),
    }));
    await waitForEnd(page);
    const afterRun = await page.evaluate(readView);
    // After the end: a reconnect that replays the whole run from its first cursor.
    await page.evaluate(() => window.subagentPage.reconnect(0));
    await page.waitForFunction(
      () => !window.subagentPage.state().open,
      null,
      { timeout: RUN_TIMEOUT_MS },
    );
    const afterReplay = await page.evaluate(readView);
    afterReplay.screenshot = await screenshot(page, options, "reconnect");
    await page.close();
    return { midRun, afterRun, afterReplay };
  },

  async stop(context, options) {
    const page = await openPage(context, options.base);
    await startRun(page, "");
    await page.waitForSelector("details.subagent[data-state='running']", { timeout: RUN_TIMEOUT_MS });
    const beforeStop = await page.evaluate(() => window.subagentPage.state());
    await page.getByRole("button", { name: "Stop the run" }).click();
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    view.beforeStop = beforeStop;
    view.screenshot = await screenshot(page, options, "stop");
    await page.close();
    return view;
  },

  async custom(context, options) {
    const page = await openPage(context, options.base);
    await startRun(page, "custom");
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    await page.close();
    return view;
  },

  async hidden(context, options) {
    const page = await openPage(context, options.base);
    await startRun(page, "hidden");
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    await page.close();
    return view;
  },

  async synthetic(context, options) {
    const page = await context.newPage();
    await page.route("**/runs/synthetic/events**", (route) =>
      route.fulfill({ status: 200, contentType: "text/event-stream", body: syntheticBody() }),
    );
    await page.goto(`${options.base}/#run=synthetic&token=t`, { waitUntil: "domcontentloaded" });
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    view.screenshot = await screenshot(page, options, "synthetic");
    await page.close();
    return view;
  },

  async gap(context, options) {
    if (!options.gapBase) return { skipped: "no --gap-base" };
    const started = await (await fetch(`${options.gapBase}/runs`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ id: "u1", role: "user", content: "How does Trio stream events?" }] }),
    })).json();
    // Read the run to its end first, so that the page arrives late.
    const events = await fetch(`${options.gapBase}${started.events_url}`, {
      headers: { authorization: `Bearer ${started.viewer_token}` },
    });
    await events.text();
    const fragment = `#${new URLSearchParams({ run: started.run_id, token: started.viewer_token })}`;
    const page = await openPage(context, options.gapBase, fragment);
    await waitForEnd(page);
    const view = await page.evaluate(readView);
    view.gapText = await page.evaluate(() => [...document.querySelectorAll("[data-gap]")].map((n) => n.textContent));
    view.screenshot = await screenshot(page, options, "gap");
    await page.close();
    return view;
  },
};

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const profile = await mkdtemp(join(tmpdir(), "subagent-page-profile-"));
  const report = { ok: true, browser: null, scenarios: {}, consoleErrors: [], externalRequests: [] };
  let context;
  let current = null;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: options.chromium,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1100, height: 900 },
    });
    report.browser = context.browser()?.version() ?? null;
    await context.addInitScript(installTimeline);
    options.origins = [options.base, options.gapBase].filter(Boolean).map((url) => new URL(url).origin);
    context.on("request", (request) => {
      const url = request.url();
      if (!url.startsWith("data:") && !options.origins.includes(new URL(url).origin)) {
        report.externalRequests.push(url);
      }
    });
    context.on("page", (page) => {
      page.on("console", (message) => {
        if (message.type() === "error") report.consoleErrors.push({ scenario: current, text: message.text() });
      });
      page.on("pageerror", (error) => report.consoleErrors.push({ scenario: current, text: `pageerror: ${error.message}` }));
    });
    for (const [name, scenario] of Object.entries(scenarios)) {
      current = name;
      const started = Date.now();
      try {
        report.scenarios[name] = await scenario(context, options);
      } catch (error) {
        report.ok = false;
        report.scenarios[name] = { error: String(error?.stack ?? error) };
      }
      report.scenarios[name].seconds = (Date.now() - started) / 1000;
    }
  } catch (error) {
    report.ok = false;
    report.error = String(error?.stack ?? error);
  } finally {
    await context?.close().catch(() => {});
    await rm(profile, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(report) + "\n");
}

await main();
