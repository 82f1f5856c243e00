#!/usr/bin/env bash
# Run the official A2A conformance suite (a2aproject/a2a-tck) against an A2A server.
#
#   run.sh [options] SUT_URL          e.g. run.sh --must-only http://127.0.0.1:9999
#
# tck.sh (beside this script) starts `subagent-engine a2a-serve --parent conformance` and runs
# this against it; that is what `./dev tck` and `./dev test` do.
#
# SUT_URL is the base URL that serves /.well-known/agent-card.json; the TCK then
# uses the URLs of the card's supportedInterfaces (JSONRPC, HTTP+JSON, GRPC).
#
# Options:
#   --tck PATH       the TCK: a checkout (dir with run_tck.py) or a git dir. Default:
#                    $A2A_TCK_DIR, else the copy vendored in third_party/a2a-tck (the TCK is
#                    not on PyPI).
#   --ref REF        git ref to take from a git dir. Default: 1.0-dev when that branch exists
#                    (the A2A 1.0 suite), else HEAD. Ignored for a plain checkout without --ref.
#   --transport T    comma list: jsonrpc,http_json,grpc (1.0 suite) or jsonrpc,grpc,rest (legacy).
#   --must-only      run only the mandatory part (MUST level / "mandatory" category).
#   --timeout S      limit per TCK invocation in seconds (default 900).
#   --waive FILE     pytest node ids (one a line, # comments) whose MUST failure is known and
#                    tolerated, e.g. known_failures_a2a-sdk-1.3.0.txt. They are listed and counted
#                    as "waived", not "failed". Default: none (strict).
#   -v               stream the TCK's own output while it runs.
#
# Environment: PYTHON (>= 3.11, default python3), A2A_TCK_WORK (default /tmp/a2a-tck-run),
# A2A_TCK_VENV_ROOT (default /tmp; venvs are /tmp/a2a-tck-venv-<hash of pyproject.toml>).
#
# What it runs:
#   1.0 suite (tests/compatibility/, branch 1.0-dev): run_tck.py --level must, then (unless
#     --must-only) --level should and --level may, which are informational.
#   legacy suite (tests/mandatory/, branches main and 0.3.x): run_tck.py --category mandatory,
#     then (unless --must-only) --category capabilities, informational.
# Last line: "TCK mandatory: N passed, M failed, K skipped"; exit 0 only when M == 0 and N > 0
# (M excludes failures waived with --waive; a line above the last one then gives their number).
# Exit 2: setup problem (no TCK, server unreachable, install failed).
set -uo pipefail
PART_PID=""
trap '[ -z "$PART_PID" ] || kill -TERM "$PART_PID" 2>/dev/null; exit 143' TERM
trap '[ -z "$PART_PID" ] || kill -TERM "$PART_PID" 2>/dev/null; exit 130' INT

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${A2A_TCK_WORK:-/tmp/a2a-tck-run}"
VENV_ROOT="${A2A_TCK_VENV_ROOT:-/tmp}"
PY="${PYTHON:-python3}"
TCK="${A2A_TCK_DIR:-}"
REF=""
TRANSPORT=""
MUST_ONLY=0
TIMEOUT=900
VERBOSE=0
URL=""
WAIVE=""

die() { echo "run.sh: $*" >&2; exit 2; }
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --tck) TCK="$2"; shift 2 ;;
    --ref) REF="$2"; shift 2 ;;
    --transport) TRANSPORT="$2"; shift 2 ;;
    --must-only) MUST_ONLY=1; shift ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --waive) WAIVE="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    -v) VERBOSE=1; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option $1" >&2; usage 2 ;;
    *) [ -z "$URL" ] || die "only one SUT_URL"; URL="${1%/}"; shift ;;
  esac
done
[ -n "$URL" ] || usage 2
[ -n "$TCK" ] || TCK="$HERE/../../third_party/a2a-tck"
[ -n "$TCK" ] || die "no TCK given. It is not on PyPI: pass --tck PATH (a clone of github.com/a2aproject/a2a-tck)"
[ -e "$TCK" ] || die "TCK path not found: $TCK"

"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || die "$PY must be Python >= 3.11 (set PYTHON=...)"

# ---------------------------------------------------------------- TCK source -> $WORK/src
SRC="$WORK/src"
rm -rf "$SRC" && mkdir -p "$SRC" "$WORK" || die "cannot create $WORK"
rm -f "$WORK"/*.log.counts
GITDIR=""
if [ -d "$TCK/.git" ]; then GITDIR="$TCK/.git"
elif git --git-dir="$TCK" rev-parse --git-dir >/dev/null 2>&1 && [ ! -f "$TCK/run_tck.py" ]; then GITDIR="$TCK"; fi
if [ -n "$GITDIR" ] && { [ -n "$REF" ] || [ ! -f "$TCK/run_tck.py" ]; }; then
  if [ -z "$REF" ]; then
    if git --git-dir="$GITDIR" rev-parse -q --verify "refs/heads/1.0-dev^{commit}" >/dev/null; then REF=1.0-dev
    elif git --git-dir="$GITDIR" rev-parse -q --verify "refs/remotes/origin/1.0-dev^{commit}" >/dev/null; then REF=origin/1.0-dev
    else REF=HEAD; fi
  fi
  COMMIT="$(git --git-dir="$GITDIR" rev-parse -q --verify "$REF^{commit}")" || die "ref $REF not found in $GITDIR"
  git --git-dir="$GITDIR" archive "$COMMIT" | tar -x -C "$SRC" || die "git archive failed"
  ORIGIN="$TCK @ $REF ($(git --git-dir="$GITDIR" log -1 --format='%h %cs' "$COMMIT"))"
else
  [ -f "$TCK/run_tck.py" ] || die "$TCK has no run_tck.py and is not a git dir"
  tar -C "$TCK" --exclude=./.git --exclude=./.venv --exclude=./reports -cf - . | tar -x -C "$SRC" || die "copy failed"
  ORIGIN="$TCK (work tree$( [ -n "$GITDIR" ] && git --git-dir="$GITDIR" log -1 --format=' at %h %cs' 2>/dev/null))"
fi
if [ -d "$SRC/tests/compatibility" ]; then LINE=1.0
elif [ -d "$SRC/tests/mandatory" ]; then LINE=legacy
else die "unrecognised TCK layout in $ORIGIN (no tests/compatibility or tests/mandatory)"; fi

# ---------------------------------------------------------------- venv under /tmp
HASH="$(cat "$SRC/pyproject.toml" | sha256sum | cut -c1-12)"
VENV="$VENV_ROOT/a2a-tck-venv-$HASH"
if [ ! -f "$VENV/.installed" ]; then
  echo "== setting up TCK venv $VENV (pip install -e TCK)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV" || die "venv failed"
  "$VENV/bin/pip" install -q --disable-pip-version-check -e "$SRC" >"$WORK/pip.log" 2>&1 \
    || { tail -20 "$WORK/pip.log"; die "pip install of the TCK failed (log: $WORK/pip.log)"; }
  touch "$VENV/.installed"
fi

# ---------------------------------------------------------------- the SUT must answer
card_ok=0
for _ in $(seq 1 30); do
  if "$VENV/bin/python" - "$URL" <<'EOF' >/dev/null 2>&1
import sys, httpx
for p in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
    r = httpx.get(sys.argv[1] + p, timeout=5)
    if r.status_code == 200:
        r.json(); sys.exit(0)
sys.exit(1)
EOF
  then card_ok=1; break; fi
  break
done
[ "$card_ok" = 1 ] || die "no agent card at $URL/.well-known/agent-card.json"

echo "== TCK: $ORIGIN  [suite: $LINE]"
echo "== SUT: $URL"

# ---------------------------------------------------------------- run one part
# run_part NAME ARGS... : runs run_tck.py in $SRC, keeps log + reports, sets COUNTS_<NAME>
run_part() {
  local name="$1"; shift
  local log="$WORK/$name.log" rc t0 t1
  echo "== running $name: run_tck.py $*"
  rm -rf "$SRC/reports"
  t0=$(date +%s)
  if [ "$VERBOSE" = 1 ]; then
    (cd "$SRC" && PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" timeout "$TIMEOUT" "$VENV/bin/python" run_tck.py "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  else
    # In the background and waited for, so that a TERM to this script stops the suite at once
    # (timeout passes it on to the suite's whole process group).
    (cd "$SRC" && PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" exec timeout "$TIMEOUT" "$VENV/bin/python" run_tck.py "$@") >"$log" 2>&1 &
    PART_PID=$!
    wait "$PART_PID"
    rc=$?
    PART_PID=""
  fi
  t1=$(date +%s)
  mkdir -p "$WORK/reports"; rm -rf "$WORK/reports/$name"
  [ -d "$SRC/reports" ] && mv "$SRC/reports" "$WORK/reports/$name"
  [ "$rc" = 124 ] && echo "   !! timed out after ${TIMEOUT}s"
  "$VENV/bin/python" - "$log" "$name" "$rc" "$((t1 - t0))" "$WAIVE" <<'EOF'
import re, sys
log, name, rc, secs, waive = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
waived_ids = set()
if waive and name == "must":
    for line in open(waive):
        line = line.split("#", 1)[0].strip()
        if line:
            waived_ids.add(line)
text = open(log, errors="replace").read().splitlines()
summary = None
for line in reversed(text):
    s = line.strip("= ").strip()
    if re.search(r"\b\d+ (passed|failed|skipped|errors?|deselected|xfailed)\b", s) and re.search(r" in [\d.]+s", s):
        summary = s
        break
c = {k: 0 for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}
if summary:
    for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary):
        c["error" if k.startswith("error") else k] += int(n)
waived = 0
for line in text:
    m = re.match(r"(FAILED|ERROR) (\S+::\S+)", line)
    if m:
        tag = ""
        if m.group(2) in waived_ids:
            waived += 1
            tag = "[waived] "
        print("   " + tag + line[:220])
print(f"   {name}: {summary or 'NO PYTEST SUMMARY (rc=%d)' % rc}  [{secs}s, rc={rc}]")
ok = 1 if summary else 0
failed = c["failed"] + c["error"] - waived
with open(log + ".counts", "w") as f:
    f.write(f"{c['passed'] + c['xpassed']} {failed} {c['skipped']} {c['xfailed']} {ok} {waived}\n")
EOF
}

# requirement-level view of the 1.0 suite's compatibility.json
req_view() {
  local f="$WORK/reports/$1/compatibility.json"
  [ -f "$f" ] || return 0
  "$VENV/bin/python" - "$f" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); level = sys.argv[2]
reqs = {k: v for k, v in d.get("per_requirement", {}).items() if v.get("level") == level}
by = {}
for k, v in reqs.items():
    by.setdefault(v.get("status"), []).append(k)
print(f"   {level} requirements: " + ", ".join(f"{s} {len(v)}" for s, v in sorted(by.items())))
for k in by.get("FAIL", []):
    errs = "; ".join(reqs[k].get("errors") or [])[:200]
    print(f"     FAIL {k} {sorted(reqs[k].get('transports', {}))}: {errs}")
EOF
}

EXTRA=()
if [ "$LINE" = 1.0 ]; then
  [ -n "$TRANSPORT" ] && EXTRA+=(--transport "$TRANSPORT")
  # -p tck_loopback: keeps the TCK's push webhook receiver on 127.0.0.1 (see tck_loopback.py)
  PT=(-- -p tck_loopback --webhook-host 127.0.0.1 -rfEs)
  run_part must --sut-host "$URL" --level must "${EXTRA[@]}" "${PT[@]}"
  req_view must MUST
  if [ "$MUST_ONLY" = 0 ]; then
    run_part should --sut-host "$URL" --level should "${EXTRA[@]}" "${PT[@]}"
    req_view should SHOULD
    run_part may --sut-host "$URL" --level may "${EXTRA[@]}" "${PT[@]}"
    req_view may MAY
  fi
else
  [ -n "$TRANSPORT" ] && EXTRA+=(--transports "$TRANSPORT")
  run_part must --sut-url "$URL" --category mandatory "${EXTRA[@]}"
  [ "$MUST_ONLY" = 0 ] && run_part capabilities --sut-url "$URL" --category capabilities "${EXTRA[@]}"
fi

echo "== logs and reports: $WORK/{must,should,may,capabilities}.log, $WORK/reports/"
for part in should may capabilities; do
  [ -f "$WORK/$part.log.counts" ] || continue
  read -r p f s x ok w < "$WORK/$part.log.counts"
  echo "TCK $part (informational): $p passed, $f failed, $s skipped, $x xfailed"
done
read -r P F S X OK W < "$WORK/must.log.counts"
if [ "$OK" != 1 ]; then
  echo "run.sh: the mandatory run printed no pytest summary; see $WORK/must.log" >&2
fi
[ -n "$WAIVE" ] && echo "TCK mandatory waived (known failures listed in $(basename "$WAIVE")): $W"
echo "TCK mandatory: $P passed, $F failed, $S skipped"
[ "$OK" = 1 ] && [ "$F" = 0 ] && [ "$P" -gt 0 ] && exit 0
exit 1
