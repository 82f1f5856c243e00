// Runs event sequences through the official @ag-ui/client 1.0.0 `transformChunks` and prints what
// it emits, as JSON (tests/unit/test_agui_chunks.py compares adapters/agui/_chunks.py with it).
//
//   node transform_chunks.mjs [FILE]           FILE (or stdin): a JSON array of events
//   node transform_chunks.mjs --batch [FILE]   FILE (or stdin): a JSON array of such arrays
//
// `transformChunks` is exported by the package (it is the stage HttpAgent.runAgent applies between
// enforceEvents and verifyEvents), so the events go through exactly that operator and nothing
// else: no schema enforcement, no verification. Each sequence is a fresh operator instance over a
// synchronous source, so a sequence's events are emitted in order before the next one starts.
//
// Output: one JSON line per sequence, {events, error, warnings}: `events` is everything the
// operator emitted (up to the error, if any), `error` the message of the error it raised (null if
// none), `warnings` what it logged with console.warn. Exit status 0, or 2 on bad usage.

import { readFileSync } from "node:fs";
import { from } from "rxjs";
import { transformChunks } from "@ag-ui/client";

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));
delete process.env.SUPPRESS_TRANSFORMATION_WARNINGS;

function transform(sequence) {
  warnings.length = 0;
  const events = [];
  let error = null;
  let completed = false;
  from(sequence)
    .pipe(transformChunks())
    .subscribe({
      next: (event) => events.push(event),
      error: (err) => {
        error = err instanceof Error ? err.message : String(err);
      },
      complete: () => {
        completed = true;
      },
    });
  if (error === null && !completed) throw new Error("the operator did not finish synchronously");
  return { events, error, warnings: [...warnings] };
}

const args = process.argv.slice(2);
const batch = args[0] === "--batch";
const files = batch ? args.slice(1) : args;
if (files.length > 1) {
  process.stderr.write("usage: node transform_chunks.mjs [--batch] [FILE]\n");
  process.exit(2);
}
const input = JSON.parse(readFileSync(files.length === 1 ? files[0] : 0, "utf8"));
const sequences = batch ? input : [input];
if (!Array.isArray(sequences) || !sequences.every(Array.isArray)) {
  process.stderr.write("input must be a JSON array of events (--batch: an array of arrays)\n");
  process.exit(2);
}
for (const sequence of sequences) {
  process.stdout.write(JSON.stringify(transform(sequence)) + "\n");
}
