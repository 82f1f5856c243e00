// In-page probes for tests/browser/test_page.py, installed in every page before the page's own
// script (BrowserContext.add_init_script). They observe the page from outside, through the DOM
// and its data attributes only; the page itself knows nothing about them.
//
//   window.__probe.timeline  a MutationObserver's record, in ms since the document started:
//                            subagentText {card id: [[t, text length], ...]} each time a card's
//                            own text grows, results {tool call id: t} when a result appears,
//                            statuses [[t, state, text], ...] each time the status changes,
//                            statusTexts [[t, state, text], ...] each time its text changes too,
//                            cardStates {card id: [[t, state], ...]} each time a card's changes.
//   window.__probe.view()    what the page shows: status, tool calls, subagent cards (with their
//                            input requests and notes), messages.
(() => {
  const timeline = {
    start: performance.now(),
    subagentText: {},
    results: {},
    statuses: [],
    statusTexts: [],
    cardStates: {},
  };
  const ownTextNodes = (card) =>
    card.querySelectorAll(":scope > .sa-body > .sa-items > .message > .text");

  const sample = () => {
    const now = performance.now() - timeline.start;
    for (const card of document.querySelectorAll("details.subagent[data-subagent-run-id]")) {
      const id = card.dataset.subagentRunId;
      let length = 0;
      for (const text of ownTextNodes(card)) length += text.textContent.length;
      const series = (timeline.subagentText[id] ||= []);
      if (length > 0 && (series.length === 0 || series[series.length - 1][1] !== length)) {
        series.push([now, length]);
      }
      const states = (timeline.cardStates[id] ||= []);
      if (states.length === 0 || states[states.length - 1][1] !== card.dataset.state) {
        states.push([now, card.dataset.state]);
      }
    }
    for (const result of document.querySelectorAll(".tool-result[data-tool-call-id]")) {
      const id = result.dataset.toolCallId;
      if (!(id in timeline.results)) timeline.results[id] = now;
    }
    const status = document.getElementById("status");
    if (status) {
      const last = timeline.statuses[timeline.statuses.length - 1];
      if (!last || last[1] !== status.dataset.state) {
        const text = document.getElementById("status-text")?.textContent ?? null;
        timeline.statuses.push([now, status.dataset.state, text]);
      }
      const shown = document.getElementById("status-text")?.textContent ?? null;
      const said = timeline.statusTexts[timeline.statusTexts.length - 1];
      if (!said || said[1] !== status.dataset.state || said[2] !== shown) {
        timeline.statusTexts.push([now, status.dataset.state, shown]);
      }
    }
  };

  document.addEventListener("DOMContentLoaded", () => {
    sample();
    new MutationObserver(sample).observe(document.body, {
      childList: true,
      subtree: true,
      characterData: true,
      attributes: true,
      attributeFilter: ["data-state"],
    });
  });

  function view() {
    const textOf = (node) => (node ? node.textContent : null);
    const ownText = (card) => [...ownTextNodes(card)].map((node) => node.textContent).join("\n");
    const transcript = document.getElementById("transcript");
    const toolCalls = [...document.querySelectorAll(".tool-call[data-tool-call-id]")].map((call) => ({
      id: call.dataset.toolCallId,
      name: textOf(call.querySelector(".tool-name")),
      state: call.querySelector(".tool-head .pill")?.dataset.state ?? null,
      args: textOf(call.querySelector(":scope > .tool-args > .args-json")),
      result: textOf(call.querySelector(":scope > .tool-result")),
      topLevel: call.parentElement === transcript,
      insideSubagent: call.parentElement?.closest("details.subagent")?.dataset.subagentRunId ?? null,
      subagents: [...call.querySelectorAll(":scope > .tool-children > details.subagent")].map(
        (card) => card.dataset.subagentRunId,
      ),
    }));
    const subagents = [...document.querySelectorAll("details.subagent[data-subagent-run-id]")].map(
      (card) => ({
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
        parentSubagentRunId:
          card.parentElement?.closest("details.subagent")?.dataset.subagentRunId ?? null,
        toolCalls: [...card.querySelectorAll(":scope > .sa-body > .sa-items > .tool-call")].map(
          (call) => call.dataset.toolCallId,
        ),
        // Its notes (drop and fold markers), in order.
        notes: [...card.querySelectorAll(":scope > .sa-body > .sa-items > .note")].map(
          (note) => note.textContent,
        ),
        // Its input requests: the question, whether the answer form is there, what it says.
        inputs: [...card.querySelectorAll(":scope > .sa-body > .sa-items > .sa-input")].map(
          (block) => ({
            state: block.dataset.state,
            question: textOf(block.querySelector(".sa-question .text")),
            forms: block.querySelectorAll("form").length,
            answered: textOf(block.querySelector(".answered")),
            error: textOf(block.querySelector(".answer-error")) || null,
          }),
        ),
      }),
    );
    const parentMessages = [...transcript.querySelectorAll(":scope > .message")].map((message) => ({
      id: message.dataset.messageId,
      who: textOf(message.querySelector(".who")),
      text: textOf(message.querySelector(".text")),
    }));
    const status = document.getElementById("status");
    return {
      url: location.href,
      status: status.dataset.state,
      statusText: textOf(document.getElementById("status-text")),
      statusRole: status.getAttribute("role"),
      statusLive: status.getAttribute("aria-live"),
      runLabel: document.getElementById("run-button").getAttribute("aria-label"),
      stopLabel: document.getElementById("stop-button").getAttribute("aria-label"),
      stopDisabled: document.getElementById("stop-button").disabled,
      prompt: document.getElementById("prompt").value,
      toolCalls,
      subagents,
      parentMessages,
      gaps: document.querySelectorAll("[data-gap]").length,
      gapText: [...document.querySelectorAll("[data-gap]")].map((node) => node.textContent),
      transcriptText: transcript.innerText,
      page: window.subagentPage ? window.subagentPage.state() : null,
      timeline,
    };
  }

  window.__probe = { timeline, view };
})();
