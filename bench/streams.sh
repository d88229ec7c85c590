#!/usr/bin/env bash
# bench/streams.sh — what N held streams cost pdlb in memory, second by second.
#
# Starts a fast prefill mock, a decode mock with a realistic token delay and
# pdlb (JSON logs, metrics, breakers on; net/http/pprof on PPROF_PORT), runs
# N concurrent streams of TOKENS tokens, and prints pdlb's RSS every second,
# its peak RSS (VmHWM) and pdlb bench's CPU per event. With HEAP=1 it also
# saves a heap profile (after a forced GC) taken PROFILE_AT seconds in, for
#   go tool pprof -sample_index=inuse_space -top $BIN/pdlb $OUT/heap.pb
#
# Environment: N=5000 TOKENS=200 DELAY=100ms HEAP=0 PROFILE_AT=10 SECONDS_WATCHED=26
#   GOMEMLIMIT_PDLB=120MiB   run pdlb with that soft memory limit
#   BIN=bench/out/bin        where pdlb is (built there unless NO_BUILD=1)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000} TOKENS=${TOKENS:-200} DELAY=${DELAY:-100ms}
PROFILE_AT=${PROFILE_AT:-10} SECONDS_WATCHED=${SECONDS_WATCHED:-26}
BIN=${BIN:-bench/out/bin} OUT=${OUT:-bench/out}
PORT=${PORT:-32100} PPROF_PORT=${PPROF_PORT:-32199} PREFILL_PORT=${PREFILL_PORT:-32000} DECODE_PORT=${DECODE_PORT:-32001}
mkdir -p "$BIN" "$OUT"
[ -n "${NO_BUILD:-}" ] || go build -trimpath -o "$BIN/pdlb" ./cmd/pdlb
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
"$BIN/pdlb" mock --role prefill --port "$PREFILL_PORT" --fast --log-level warn >"$OUT/streams_prefill.log" 2>&1 &
pids+=($!)
"$BIN/pdlb" mock --role decode --port "$DECODE_PORT" --token-delay "$DELAY" --lookup=false --log-level warn >"$OUT/streams_decode.log" 2>&1 &
pids+=($!)
sleep 0.5
env ${GOMEMLIMIT_PDLB:+GOMEMLIMIT=$GOMEMLIMIT_PDLB} "$BIN/pdlb" serve \
  --prefill "http://127.0.0.1:$PREFILL_PORT" none --decode "http://127.0.0.1:$DECODE_PORT" \
  --host 127.0.0.1 --port "$PORT" --set bootstrap.mode=off --set admin.port=0 --log-format json \
  --pprof "127.0.0.1:$PPROF_PORT" >"$OUT/streams_pdlb.log" 2>&1 &
pdlb=$!
pids+=($pdlb)
sleep 0.7
"$BIN/pdlb" bench --quiet --targets "http://127.0.0.1:$PORT" --pid-of-target "$pdlb" --stream \
  --concurrency "$N" --requests "$N" --output-len "$TOKENS" --input-len 16 --timeout 120s >"$OUT/streams_bench.txt" 2>&1 &
bench=$!
echo -n "pdlb RSS MB by second:"
for i in $(seq 1 "$SECONDS_WATCHED"); do
  sleep 1
  echo -n " $i:$(awk '/VmRSS/{print int($2/1024)}' "/proc/$pdlb/status")"
  if [ "${HEAP:-0}" = 1 ] && [ "$i" = "$PROFILE_AT" ]; then
    curl -s "http://127.0.0.1:$PPROF_PORT/debug/pprof/heap?gc=1" >"$OUT/heap.pb"
  fi
done
echo
wait "$bench" || true
echo "pdlb peak RSS: $(awk '/VmHWM/{print int($2/1024)}' "/proc/$pdlb/status") MB ($N streams of $TOKENS tokens, $DELAY apart)"
grep -E "completed|errors|CPU µs/event|TTFT p99 " "$OUT/streams_bench.txt" || cat "$OUT/streams_bench.txt"
