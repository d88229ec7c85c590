#!/usr/bin/env bash
# bench/run.sh — the reproducible performance run behind bench/RESULTS.md.
#
# Builds pdlb and the bare fan-out "floor" proxy, starts fast mock engines
# and both proxies on loopback, and measures in interleaved rounds:
#   (a) max throughput, non-stream /generate, concurrency 64:
#       pdlb vs the floor vs the decode mock directly [vs OTHER_LB]
#   (b) fixed-rate latency at half of (a)'s pdlb throughput: pdlb vs direct [vs OTHER_LB]
#   (c) STREAMS concurrent streams (default 5000) held ~30 s: pdlb's RSS and CPU per event
# then writes bench/RESULTS.md and bench/latency.svg.
#
# Environment:
#   OTHER_LB=http://host:port   another balancer in front of the same mocks (e.g. SGLang's mini LB
#                               started with --prefill http://127.0.0.1:$PREFILL_PORT --decode http://127.0.0.1:$DECODE_PORT)
#   OTHER_LB_PID=N              its PID, for CPU per request
#   DURATION=10s ROUNDS=5 STREAMS=5000 STREAM_SECONDS=30  (5 rotated rounds: the medians move less between runs than with 3)
#   PIN=1                       pin with taskset: pdlb on LB_CPUS, the rest on LOAD_CPUS (16-core machines)
#   LB_CPUS=0-3 LOAD_CPUS=4-15
#   PREFILL_PORT DECODE_PORT LB_PORT FLOOR_PORT   (no PDLB_ names here: PDLB_* is pdlb's own config
#                               namespace, and pdlb refuses an environment variable it does not know)
#   RESULTS=bench/RESULTS.md    where to write the report (the 16-core run uses a second file)
#   HISTORY=bench/HISTORY.md    hand-kept before/after notes appended to the report (empty: none)
#   NO_BUILD=1                  use the binaries already in $OUT/bin (a machine without Go; no micro-benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench/out}
BIN=$OUT/bin
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-5}
STREAMS=${STREAMS:-5000}
STREAM_SECONDS=${STREAM_SECONDS:-30}
RESULTS=${RESULTS:-$ROOT/bench/RESULTS.md}
PREFILL_PORT=${PREFILL_PORT:-31000}
DECODE_PORT=${DECODE_PORT:-31001}
LB_PORT=${LB_PORT:-31100}
FLOOR_PORT=${FLOOR_PORT:-31200}
SPREFILL_PORT=$((PREFILL_PORT + 10))
SDECODE_PORT=$((DECODE_PORT + 10))
SPDLB_PORT=$((LB_PORT + 10))
mkdir -p "$OUT" "$BIN"
rm -f "$OUT"/*.json "$OUT"/*.log

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pin_pdlb=() pin_load=()
if [ "${PIN:-0}" = 1 ]; then
  pin_pdlb=(taskset -c "${LB_CPUS:-0-3}")
  pin_load=(taskset -c "${LOAD_CPUS:-4-15}")
fi

if [ -z "${NO_BUILD:-}" ]; then
  echo "building…"
  go build -trimpath -o "$BIN/pdlb" ./cmd/pdlb
  go build -trimpath -o "$BIN/pdlb-floor" ./bench/floor/cmd/pdlb-floor
  go build -trimpath -o "$BIN/pdlb-results" ./bench/results
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

port_free() { # port_free PORT — refuse to measure whatever already listens there
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    echo "port $1 is already in use; stop what listens there or set the *_PORT variables" >&2; exit 1
  fi
}
for p in "$PREFILL_PORT" "$DECODE_PORT" "$LB_PORT" "$FLOOR_PORT" "$SPREFILL_PORT" "$SDECODE_PORT" "$SPDLB_PORT"; do port_free "$p"; done

start() { # start NAME CMD… — background process, logs to $OUT/NAME.log
  local name=$1; shift
  "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}

wait_port() { # wait_port PORT — until something accepts connections there
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2; exit 1
}

# pdlb as it runs in production: JSON logs (to a file), metrics, breakers,
# health checks on. The registry is off: the fast mocks do not register and
# the registry is not on the request path beyond one atomic load.
pdlb_serve() { # pdlb_serve PORT PREFILL DECODE (exec: the background PID is pdlb's own)
  exec "${pin_pdlb[@]}" "$BIN/pdlb" serve --prefill "http://127.0.0.1:$2" none --decode "http://127.0.0.1:$3" \
    --host 127.0.0.1 --port "$1" --set bootstrap.mode=off --set admin.port=0 --log-format json
}

echo "starting fast mocks, pdlb and the floor…"
start mock_prefill "${pin_load[@]}" "$BIN/pdlb" mock --role prefill --port "$PREFILL_PORT" --fast --log-level warn
start mock_decode "${pin_load[@]}" "$BIN/pdlb" mock --role decode --port "$DECODE_PORT" --fast --log-level warn
wait_port "$PREFILL_PORT"; wait_port "$DECODE_PORT"
start pdlb pdlb_serve "$LB_PORT" "$PREFILL_PORT" "$DECODE_PORT"
start floor "${pin_pdlb[@]}" "$BIN/pdlb-floor" -listen "127.0.0.1:$FLOOR_PORT" -prefill "http://127.0.0.1:$PREFILL_PORT" -decode "http://127.0.0.1:$DECODE_PORT"
wait_port "$LB_PORT"
sleep 0.5
# The background PIDs are the processes themselves (pdlb_serve and taskset
# exec); pgrep, where installed, double-checks by command line.
real_pid() { # real_pid PATTERN FALLBACK
  local p=""
  command -v pgrep >/dev/null && p=$(pgrep -f "$1" | head -1)
  echo "${p:-$2}"
}
pdlb_real=$(real_pid "pdlb serve .*--port $LB_PORT" "$pdlb_pid")
floor_real=$(real_pid "pdlb-floor -listen 127.0.0.1:$FLOOR_PORT" "$floor_pid")
decode_real=$(real_pid "pdlb mock --role decode --port $DECODE_PORT" "$mock_decode_pid")

targets="http://127.0.0.1:$LB_PORT,http://127.0.0.1:$FLOOR_PORT,http://127.0.0.1:$DECODE_PORT"
target_pids="$pdlb_real,$floor_real,$decode_real"
if [ -n "${OTHER_LB:-}" ]; then
  targets="$targets,$OTHER_LB"
  target_pids="$target_pids,${OTHER_LB_PID:-0}"
fi

bench() { "${pin_load[@]}" "$BIN/pdlb" bench --quiet "$@"; }

CMD_A="pdlb bench --targets $targets --pid-of-target <pids> --room --concurrency 64 --duration $DURATION --rounds $ROUNDS --input-len 128 --output-len 16"
echo "(a) max throughput: $CMD_A"
bench --targets "$targets" --pid-of-target "$target_pids" --room --concurrency 64 --duration "$DURATION" \
  --rounds "$ROUNDS" --input-len 128 --output-len 16 --out "$OUT/a.json" | tee "$OUT/a.txt"

rate=$("$BIN/pdlb-results" -half-rate "$OUT/a.json")
targets_b="http://127.0.0.1:$LB_PORT,http://127.0.0.1:$DECODE_PORT"
pids_b="$pdlb_real,$decode_real"
if [ -n "${OTHER_LB:-}" ]; then targets_b="$targets_b,$OTHER_LB"; pids_b="$pids_b,${OTHER_LB_PID:-0}"; fi
CMD_B="pdlb bench --targets $targets_b --pid-of-target <pids> --room --rate $rate --concurrency 1024 --duration $DURATION --rounds $ROUNDS --input-len 128 --output-len 16"
echo "(b) fixed rate: $CMD_B"
bench --targets "$targets_b" --pid-of-target "$pids_b" --room --rate "$rate" --concurrency 1024 --duration "$DURATION" \
  --rounds "$ROUNDS" --input-len 128 --output-len 16 --out "$OUT/b.json" | tee "$OUT/b.txt"

# (b2) the same comparison at a rate that leaves this machine idle most of
# the time, so queueing behind the load generator and the mocks (all on the
# same cores) does not swamp what pdlb itself adds.
RATE2=${RATE2:-1000}
CMD_B2="pdlb bench --targets $targets_b --pid-of-target <pids> --room --rate $RATE2 --concurrency 1024 --duration $DURATION --rounds $ROUNDS --input-len 128 --output-len 16"
echo "(b2) low fixed rate: $CMD_B2"
bench --targets "$targets_b" --pid-of-target "$pids_b" --room --rate "$RATE2" --concurrency 1024 --duration "$DURATION" \
  --rounds "$ROUNDS" --input-len 128 --output-len 16 --out "$OUT/b2.json" | tee "$OUT/b2.txt"

# (c) streams: a decode mock with a realistic token delay, STREAMS streams
# held STREAM_SECONDS (token delay 100 ms × tokens).
tokens=$((STREAM_SECONDS * 10))
start smock_prefill "${pin_load[@]}" "$BIN/pdlb" mock --role prefill --port "$SPREFILL_PORT" --fast --log-level warn
start smock_decode "${pin_load[@]}" "$BIN/pdlb" mock --role decode --port "$SDECODE_PORT" --token-delay 100ms --lookup=false --log-level warn
wait_port "$SPREFILL_PORT"; wait_port "$SDECODE_PORT"
start spdlb pdlb_serve "$SPDLB_PORT" "$SPREFILL_PORT" "$SDECODE_PORT"
wait_port "$SPDLB_PORT"
sleep 0.5
spdlb_real=$(real_pid "pdlb serve .*--port $SPDLB_PORT" "$spdlb_pid")
CMD_C="pdlb bench --targets http://127.0.0.1:$SPDLB_PORT --pid-of-target <pid> --stream --concurrency $STREAMS --requests $STREAMS --output-len $tokens --input-len 16 --timeout 120s"
echo "(c) $STREAMS concurrent streams: $CMD_C"
bench --targets "http://127.0.0.1:$SPDLB_PORT" --pid-of-target "$spdlb_real" --stream --concurrency "$STREAMS" \
  --requests "$STREAMS" --output-len "$tokens" --input-len 16 --timeout 120s --out "$OUT/c.json" | tee "$OUT/c.txt"

echo "hot-path micro-benchmarks…"
if command -v go >/dev/null; then
  go test -run '^$' -bench 'ParseInject|SSERelay' -benchmem -count 3 ./router ./proxy 2>&1 | grep -E '^(Benchmark|cpu:)' >"$OUT/gobench.txt" || true
else
  : >"$OUT/gobench.txt" # no Go toolchain here (prebuilt binaries, NO_BUILD=1): no micro-benchmarks
fi

cat >"$OUT/commands.txt" <<CMDS
(a) $CMD_A
(b) $CMD_B
(b2) $CMD_B2
(c) $CMD_C
pdlb: pdlb serve --prefill URL none --decode URL --set bootstrap.mode=off --set admin.port=0 --log-format json
mocks: pdlb mock --role prefill|decode --port N --fast (c: decode --token-delay 100ms)
pinning: ${PIN:-0} (pdlb ${LB_CPUS:-0-3}, load ${LOAD_CPUS:-4-15})
micro-benchmarks: go test -run '^\$' -bench 'ParseInject|SSERelay' -benchmem -count 3 ./router ./proxy
CMDS
"$BIN/pdlb-results" -dir "$OUT" -o "$RESULTS" -chart "${RESULTS%.md}.svg" -history "${HISTORY-bench/HISTORY.md}"
echo "wrote $RESULTS"
