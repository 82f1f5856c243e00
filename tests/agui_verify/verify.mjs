// Runs AG-UI SSE streams through the official @ag-ui/client 1.0.0 pipeline and reports, as JSON.
//
//   node verify.mjs STREAM...                  STREAM: a file holding captured SSE bytes, or a URL
//   node verify.mjs --body '<json>' URL        POST the JSON body (a RunAgentInput) to URL
//
// Each stream goes through exactly the stages HttpAgent.runAgent applies to a response, in the same
// order: transformHttpEventStream (content-type sniffing + the SSE parser, which splits frames on
// "\n\n" only), enforceEvents (schema: unknown event types dropped, unknown fields stripped, malformed
// known fields fatal), transformChunks, and verifyEvents (the protocol rules: RUN_STARTED first,
// open/close discipline per message / tool call / reasoning / step / subagent, owner consistency per
// subagentRunId, nothing open at RUN_FINISHED, nothing after it). Two rules the official verifier
// does not check are checked after it, as `extra`: the stream ends with RUN_FINISHED
// or RUN_ERROR, and every subagentRunId tag names a subagent that is started and not yet closed.
//
// Output: one JSON line per stream,
//   {source, ok, events, types, error, stage, event, warnings}
// `events` counts the events that passed verification, `types` lists them, `stage` is where it
// failed (transport | enforce | chunks | verify | extra), `event` is the event being checked when it
// failed, `warnings` is what the client logged (dropped unknown events, stripped fields). Exit
// status 0 when every stream is ok, 1 when one is not, 2 on bad usage.

import { readFile } from "node:fs/promises";
import { asyncScheduler, lastValueFrom, of, Observable } from "rxjs";
import { observeOn, tap, toArray } from "rxjs/operators";
import {
  enforceEvents,
  transformChunks,
  transformHttpEventStream,
  verifyEvents,
} from "@ag-ui/client";

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

/** The transport's HttpEvents for bytes already captured: headers, then the body as one chunk.
 * Emitted asynchronously, as a response is: transformHttpEventStream subscribes to its source when
 * called, before anyone subscribes to its output, so a synchronous source would be lost. */
function capturedHttpEvents(bytes) {
  const headers = new Headers({ "content-type": "text/event-stream" });
  return of({ type: "headers", status: 200, headers }, { type: "data", data: bytes }).pipe(
    observeOn(asyncScheduler),
  );
}

/** The transport's HttpEvents for a live response, chunk by chunk as they arrive. */
function liveHttpEvents(url, body) {
  return new Observable((subscriber) => {
    const abort = new AbortController();
    (async () => {
      const init = body === undefined
        ? { headers: { accept: "text/event-stream" }, signal: abort.signal }
        : {
            method: "POST",
            headers: { accept: "text/event-stream", "content-type": "application/json" },
            body,
            signal: abort.signal,
          };
      const response = await fetch(url, init);
      if (!response.ok) {
        throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 500)}`);
      }
      subscriber.next({ type: "headers", status: response.status, headers: response.headers });
      const reader = response.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        subscriber.next({ type: "data", data: value });
      }
      subscriber.complete();
    })().catch((error) => subscriber.error(error));
    return () => abort.abort();
  });
}

const ATTRIBUTION_IS_IDENTITY = new Set(["SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"]);

/** The rules @ag-ui/client 1.0.0's verifier leaves to the producer's own tests. */
function extraChecks(events) {
  const live = new Set();
  for (const [index, event] of events.entries()) {
    const tag = event.subagentRunId;
    if (event.type === "SUBAGENT_STARTED") {
      live.add(tag);
    } else if (event.type === "SUBAGENT_FINISHED" || event.type === "SUBAGENT_ERROR") {
      live.delete(tag);
    } else if (tag !== undefined && !ATTRIBUTION_IS_IDENTITY.has(event.type) && !live.has(tag)) {
      return {
        error: `event ${index} (${event.type}) is tagged subagentRunId '${tag}', which names no live subagent (never started, or already finished)`,
        event,
      };
    }
  }
  const last = events.at(-1);
  if (!last || (last.type !== "RUN_FINISHED" && last.type !== "RUN_ERROR")) {
    return {
      error: `the stream ends with ${last ? last.type : "no event"}, not RUN_FINISHED or RUN_ERROR`,
      event: last ?? null,
    };
  }
  return null;
}

async function verify(source, body) {
  warnings.length = 0;
  const isUrl = /^https?:\/\//.test(source);
  const http$ = isUrl ? liveHttpEvents(source, body) : capturedHttpEvents(await readFile(source));
  let stage = "transport";
  let current = null;
  const passed = [];
  try {
    await lastValueFrom(
      transformHttpEventStream(http$).pipe(
        tap(() => (stage = "enforce")),
        enforceEvents(),
        tap(() => (stage = "chunks")),
        transformChunks(),
        tap((event) => {
          stage = "verify";
          current = event;
        }),
        verifyEvents(),
        tap((event) => passed.push(event)),
        toArray(),
      ),
      { defaultValue: [] },
    );
  } catch (error) {
    return report(source, passed, stage, `${error?.name ?? "Error"}: ${error?.message ?? error}`, current);
  }
  const extra = extraChecks(passed);
  if (extra) return report(source, passed, "extra", extra.error, extra.event);
  return report(source, passed, null, null, null);
}

function report(source, passed, stage, error, event) {
  return {
    source,
    ok: error === null,
    events: passed.length,
    types: passed.map((event) => event.type),
    error,
    stage,
    event,
    warnings: [...warnings],
  };
}

const args = process.argv.slice(2);
let body;
const sources = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--body") body = args[++i];
  else sources.push(args[i]);
}
if (sources.length === 0 || (body !== undefined && !sources.every((s) => /^https?:\/\//.test(s)))) {
  process.stderr.write("usage: node verify.mjs [--body JSON] (FILE | URL)...\n");
  process.exit(2);
}
let allOk = true;
for (const source of sources) {
  const result = await verify(source, body);
  allOk &&= result.ok;
  process.stdout.write(JSON.stringify(result) + "\n");
}
process.exit(allOk ? 0 : 1);
