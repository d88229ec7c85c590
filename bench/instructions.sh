#!/usr/bin/env bash
# bench/instructions.sh — CPU instructions per request of two builds of
# pdlb, counted by valgrind's callgrind: the check for a small regression
# that the shared, noisy machines hide from bench/sidebyside.sh (whose CPU
# per request moves ±10 % between runs). Instructions do not depend on
# the machine's other load, only on the order things happen in.
#
#   OLD=<git rev> bench/instructions.sh          # OLD vs the working tree
#   OLD=<rev> NEW=<rev> bench/instructions.sh     # two commits
#
# Each build serves /generate (JSON logs, metrics, breakers on; bootstrap
# off) in front of the fast mocks under callgrind; pdlb bench sends a
# warm-up of N1 requests, callgrind dumps (and zeroes) its counters, pdlb
# bench sends N requests, callgrind dumps again: instructions per request =
# the second dump ÷ N, so start-up and warm-up drop out. It prints the
# total per request and the functions whose share changed most. Read the
# functions: the total includes the Go runtime's GC, stack growth and
# scheduling, which depend on timing and moved it by ±5 % between two runs
# of the same pair of builds, while a function of pdlb's own moves by a few
# instructions. (Per-function self costs of a dump taken mid-run do not
# add up exactly to its total; compare functions, not sums of them.)
#
# Environment: OLD (required), NEW (default: the working tree), N1=1000,
# N=20000, CONCURRENCY=4, OUT=bench/out/instructions, ports SERVE_PORT=31500
# PREFILL_PORT=31510 DECODE_PORT=31511. Needs valgrind (apt-get install
# valgrind). About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
: "${OLD:?set OLD to the git revision to compare against}"
N1=${N1:-1000} N=${N:-20000} CONCURRENCY=${CONCURRENCY:-4}
OUT=${OUT:-$ROOT/bench/out/instructions}
SERVE_PORT=${SERVE_PORT:-31500} PREFILL_PORT=${PREFILL_PORT:-31510} DECODE_PORT=${DECODE_PORT:-31511}
command -v valgrind >/dev/null || { echo "valgrind not on PATH (Debian: apt-get install valgrind)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"

build_rev() { # build_rev REV DEST
  local tree
  tree=$(mktemp -d)
  git worktree add --detach -q "$tree" "$1"
  (cd "$tree" && go build -trimpath -o "$2" ./cmd/pdlb)
  git worktree remove --force "$tree"
}
build_rev "$OLD" "$OUT/pdlb-old"
if [ -n "${NEW:-}" ]; then build_rev "$NEW" "$OUT/pdlb-new"; else go build -trimpath -o "$OUT/pdlb-new" ./cmd/pdlb; fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$OUT/pdlb-new" mock --role prefill --port "$PREFILL_PORT" --fast --log-level warn >/dev/null 2>&1 & pids+=($!)
"$OUT/pdlb-new" mock --role decode --port "$DECODE_PORT" --fast --log-level warn >/dev/null 2>&1 & pids+=($!)

wait_port() { for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.2; done; echo "port $1 never opened" >&2; exit 1; }
load() { # load N
  "$OUT/pdlb-new" bench --quiet --targets "http://127.0.0.1:$SERVE_PORT" --room --concurrency "$CONCURRENCY" \
    --requests "$1" --input-len 128 --output-len 16 >/dev/null
}
wait_port "$PREFILL_PORT"; wait_port "$DECODE_PORT"

for v in old new; do
  # asyncpreemptoff: callgrind serialises threads, and the preemption
  # signals would otherwise add work that depends on timing.
  GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$v.cg" \
    "$OUT/pdlb-$v" serve --prefill "http://127.0.0.1:$PREFILL_PORT" none --decode "http://127.0.0.1:$DECODE_PORT" \
    --host 127.0.0.1 --port "$SERVE_PORT" --set bootstrap.mode=off --set admin.port=0 --log-format json \
    >"$OUT/$v.log" 2>&1 &
  s=$!
  wait_port "$SERVE_PORT"
  load "$N1"
  callgrind_control -d "$s" >/dev/null && sleep 1
  load "$N"
  callgrind_control -d "$s" >/dev/null && sleep 1 && mv "$OUT/$v.cg.2" "$OUT/$v.run.cg"
  kill -9 "$s"; wait "$s" 2>/dev/null || true
done

# per-function self instructions of a dump, "count<TAB>function"
functions() {
  callgrind_annotate --auto=no --tree=none --threshold=100 "$1" 2>/dev/null |
    awk '/^ *[0-9,]+ \(/ {n=$1; gsub(",", "", n); $1=""; $2=""; sub(/ \[.*$/, ""); sub(/^ *[^:]*:/, ""); print n "\t" $0}'
}
for v in old new; do functions "$OUT/$v.run.cg" >"$OUT/$v.txt"; done
python3 - "$OUT" "$N" <<'EOF'
import sys
out, n = sys.argv[1], int(sys.argv[2])
def load(path):
    d = {}
    for line in open(path):
        count, fn = line.rstrip("\n").split("\t", 1)
        d[fn.strip()] = d.get(fn.strip(), 0) + int(count)
    return d
per = {}
for v in ("old", "new"):
    per[v] = {k: c / n for k, c in load(f"{out}/{v}.txt").items()}
old, new = per["old"].pop("PROGRAM TOTALS"), per["new"].pop("PROGRAM TOTALS")
print(f"instructions per request: old {old:,.0f}  new {new:,.0f}  ({new - old:+,.0f}, {new / old:.3f}×)")
diff = sorted(((per["new"].get(k, 0) - per["old"].get(k, 0), k) for k in per["old"].keys() | per["new"].keys()))
print("most changed functions (new − old, instructions per request):")
for d, k in diff[-12:][::-1] + diff[:6]:
    if abs(d) >= 50:
        print(f"  {d:+8,.0f}  {k}")
EOF
