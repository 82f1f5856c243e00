#!/usr/bin/env bash
# The A2A conformance suite (TCK) against `subagent-engine a2a-serve --parent conformance`.
#
#   tools/conformance/tck.sh [run.sh options]     e.g. --must-only, -v
#
# Starts the conformance agent on a free 127.0.0.1 port with the checkout's Python (PYTHON_SUT,
# default .venv/bin/python), runs run.sh over JSON-RPC and HTTP+JSON (a2a-serve has no gRPC
# binding) at MUST level, then SHOULD and MAY (informational), with the waiver file beside this
# script, and stops the agent. Exit status: run.sh's (0 only when no MUST test failed beyond the
# waiver; 2 for a setup problem). Work files go to A2A_TCK_WORK (default: a new /tmp directory).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SUT_PY="${PYTHON_SUT:-$ROOT/.venv/bin/python}"
export A2A_TCK_WORK="${A2A_TCK_WORK:-$(mktemp -d /tmp/subagent-engine-tck.XXXXXX)}"
mkdir -p "$A2A_TCK_WORK"
[ -x "$SUT_PY" ] || { echo "tck.sh: no $SUT_PY (run ./dev check once, or set PYTHON_SUT)" >&2; exit 2; }

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
  fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

OUT="$A2A_TCK_WORK/a2a-serve.out"
(cd "$ROOT" && exec "$SUT_PY" -m cli a2a-serve --parent conformance --port 0) \
  >"$OUT" 2>"$A2A_TCK_WORK/a2a-serve.log" &
SERVER_PID=$!
PORT=""
for _ in $(seq 1 300); do
  PORT="$(sed -n 's/^READY \([0-9][0-9]*\)$/\1/p' "$OUT" 2>/dev/null | head -1)"
  [ -n "$PORT" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$PORT" ]; then
  echo "tck.sh: a2a-serve --parent conformance did not start; its log:" >&2
  cat "$A2A_TCK_WORK/a2a-serve.log" >&2
  exit 2
fi
echo "== a2a-serve --parent conformance on http://127.0.0.1:$PORT (log $A2A_TCK_WORK/a2a-serve.log)"
"$HERE/run.sh" --transport jsonrpc,http_json --waive "$HERE/known_failures_a2a-sdk-1.3.0.txt" \
  "$@" "http://127.0.0.1:$PORT"
status=$?
echo "== TCK run took ${SECONDS} s"
exit "$status"
