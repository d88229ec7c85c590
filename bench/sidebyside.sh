#!/usr/bin/env bash
# bench/sidebyside.sh — two builds of pdlb, and the bare fan-out floor, side by
# side in one run: the check that a change did not make the request path
# slower (CPU per request, throughput), on the same machine at the same time.
#
#   OLD=<git rev> bench/sidebyside.sh          # OLD vs the working tree
#   OLD=<rev> NEW=<rev> bench/sidebyside.sh     # two commits
#
# Both builds run in front of the same fast mocks with JSON logs, metrics,
# breakers and health checks on (as bench/run.sh runs pdlb), and take turns
# in rotated rounds (pdlb bench --targets: A B C, B C A, C A B, …), so that
# the machine's drift hits all of them alike.
#
# Environment: OLD (required), NEW (default: the working tree), ROUNDS=5,
# DURATION=8s, CONCURRENCY=64, NONSTREAM=1 (0 skips the non-stream
# comparison), STREAMS=0 (N > 0 adds a stream comparison: N concurrent
# streams of 64 tokens, 10 ms apart), OUT=bench/out/sidebyside,
# ports OLD_PORT=31300 NEW_PORT=31301 FLOOR_PORT=31302 PREFILL_PORT=31310
# DECODE_PORT=31311 SDECODE_PORT=31312 SOLD_PORT=31320 SNEW_PORT=31321.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
: "${OLD:?set OLD to the git revision to compare against}"
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8s}
CONCURRENCY=${CONCURRENCY:-64}
STREAMS=${STREAMS:-0}
OUT=${OUT:-$ROOT/bench/out/sidebyside}
OLD_PORT=${OLD_PORT:-31300} NEW_PORT=${NEW_PORT:-31301} FLOOR_PORT=${FLOOR_PORT:-31302}
PREFILL_PORT=${PREFILL_PORT:-31310} DECODE_PORT=${DECODE_PORT:-31311} SDECODE_PORT=${SDECODE_PORT:-31312}
SOLD_PORT=${SOLD_PORT:-31320} SNEW_PORT=${SNEW_PORT:-31321}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

build_rev() { # build_rev REV DEST: build ./cmd/pdlb as it was at REV
  local tree
  tree=$(mktemp -d)
  git worktree add --detach -q "$tree" "$1"
  (cd "$tree" && go build -trimpath -o "$2" ./cmd/pdlb)
  git worktree remove --force "$tree"
}
echo "building OLD ($OLD)…"
build_rev "$OLD" "$OUT/pdlb-old"
if [ -n "${NEW:-}" ]; then
  echo "building NEW ($NEW)…"
  build_rev "$NEW" "$OUT/pdlb-new"
else
  echo "building NEW (working tree)…"
  go build -trimpath -o "$OUT/pdlb-new" ./cmd/pdlb
fi
go build -trimpath -o "$OUT/pdlb-floor" ./bench/floor/cmd/pdlb-floor

. bench/procs.sh
serve() { # serve BINARY PORT DECODE_PORT
  exec "$1" serve --prefill "http://127.0.0.1:$PREFILL_PORT" none --decode "http://127.0.0.1:$3" \
    --host 127.0.0.1 --port "$2" --set bootstrap.mode=off --set admin.port=0 --log-format json
}

start mock_prefill "$OUT/pdlb-new" mock --role prefill --port "$PREFILL_PORT" --fast --log-level warn
start mock_decode "$OUT/pdlb-new" mock --role decode --port "$DECODE_PORT" --fast --log-level warn
wait_port "$PREFILL_PORT"; wait_port "$DECODE_PORT"
start old serve "$OUT/pdlb-old" "$OLD_PORT" "$DECODE_PORT"
start new serve "$OUT/pdlb-new" "$NEW_PORT" "$DECODE_PORT"
start floor "$OUT/pdlb-floor" -listen "127.0.0.1:$FLOOR_PORT" -prefill "http://127.0.0.1:$PREFILL_PORT" -decode "http://127.0.0.1:$DECODE_PORT"
wait_port "$OLD_PORT"; wait_port "$NEW_PORT"; wait_port "$FLOOR_PORT"
sleep 0.5

if [ "${NONSTREAM:-1}" != 0 ]; then
cmd="pdlb bench --targets OLD,NEW,FLOOR --pid-of-target <pids> --room --concurrency $CONCURRENCY --duration $DURATION --rounds $ROUNDS --input-len 128 --output-len 16"
echo "$cmd"
"$OUT/pdlb-new" bench --quiet --targets "http://127.0.0.1:$OLD_PORT,http://127.0.0.1:$NEW_PORT,http://127.0.0.1:$FLOOR_PORT" \
  --pid-of-target "$old_pid,$new_pid,$floor_pid" --room --concurrency "$CONCURRENCY" --duration "$DURATION" \
  --rounds "$ROUNDS" --input-len 128 --output-len 16 --out "$OUT/nonstream.json" | tee "$OUT/nonstream.txt"
fi

if [ "$STREAMS" -gt 0 ]; then
  start smock_decode "$OUT/pdlb-new" mock --role decode --port "$SDECODE_PORT" --token-delay 10ms --lookup=false --log-level warn
  wait_port "$SDECODE_PORT"
  start sold serve "$OUT/pdlb-old" "$SOLD_PORT" "$SDECODE_PORT"
  start snew serve "$OUT/pdlb-new" "$SNEW_PORT" "$SDECODE_PORT"
  wait_port "$SOLD_PORT"; wait_port "$SNEW_PORT"
  echo "pdlb bench --targets OLD,NEW --pid-of-target <pids> --stream --concurrency $STREAMS --requests $STREAMS --rounds $ROUNDS --input-len 16 --output-len 64"
  "$OUT/pdlb-new" bench --quiet --targets "http://127.0.0.1:$SOLD_PORT,http://127.0.0.1:$SNEW_PORT" \
    --pid-of-target "$sold_pid,$snew_pid" --stream --concurrency "$STREAMS" --requests "$STREAMS" --rounds "$ROUNDS" \
    --input-len 16 --output-len 64 --timeout 120s --out "$OUT/stream.json" | tee "$OUT/stream.txt"
fi
