#!/usr/bin/env bash
# bench/batchrss.sh — pdlb's peak RSS while it serves one large /generate batch.
#
# Starts a fast prefill and a fast decode mock and pdlb (JSON logs, metrics
# and breakers on), posts one /generate body whose "text" is a list of ITEMS
# strings of ITEM_BYTES bytes each, and prints the answer's status, pdlb's RSS
# before the request and its peak RSS (VmHWM) after it. pdlb's per-item cost
# is a bootstrap host, port and room per item and leg, so the worst cases are
# many tiny items (ITEMS=3000000 ITEM_BYTES=1: a 12 MB body) and a body at
# limits.max_body_bytes.
#
# DP=2 runs the embedded registry with a prefill that registers two DP ranks
# and names "disagg_prefill_dp_rank":1 in the body: pdlb then builds a
# different body for each leg (routed_dp_rank for the prefill,
# disagg_prefill_dp_rank for the decode), two copies instead of one.
#
# STREAM=1 makes it a stream request, for which pdlb keeps a copy of the
# body while it is served (the client's buffer goes back to fasthttp).
#
# Environment: ITEMS=1024 ITEM_BYTES=65000 DP=0 STREAM=0 SET="" (more --set flags for pdlb)
#   BIN=bench/out/bin   where pdlb is (built there unless NO_BUILD=1)
#   PDLB=$BIN/pdlb      the pdlb binary to measure (e.g. an older build)
set -euo pipefail
cd "$(dirname "$0")/.."
ITEMS=${ITEMS:-1024} ITEM_BYTES=${ITEM_BYTES:-65000} DP=${DP:-0} STREAM=${STREAM:-0}
BIN=${BIN:-bench/out/bin} OUT=${OUT:-bench/out}
PORT=${PORT:-32300} PREFILL_PORT=${PREFILL_PORT:-32301} DECODE_PORT=${DECODE_PORT:-32302} BOOTSTRAP_PORT=${BOOTSTRAP_PORT:-32398}
mkdir -p "$BIN" "$OUT"
[ -n "${NO_BUILD:-}" ] || go build -trimpath -o "$BIN/pdlb" ./cmd/pdlb
PDLB=${PDLB:-$BIN/pdlb}

body="$OUT/batchrss_body.json"
item=$(head -c "$ITEM_BYTES" /dev/zero | tr '\0' x)
{
  printf '{"text":['
  awk -v n="$ITEMS" -v s="$item" 'BEGIN { for (i = 0; i < n; i++) printf "%s\"%s\"", (i ? "," : ""), s }'
  printf '],"sampling_params":{"max_new_tokens":1}'
  [ "$DP" -gt 1 ] && printf ',"disagg_prefill_dp_rank":1'
  [ "$STREAM" = 1 ] && printf ',"stream":true'
  printf '}'
} >"$body"

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
prefill_flags=() mode=(--set bootstrap.mode=off) port=none
if [ "$DP" -gt 1 ]; then
  prefill_flags=(--dp "$DP" --bootstrap "http://127.0.0.1:$BOOTSTRAP_PORT")
  mode=(--set bootstrap.mode=embedded --set bootstrap.listen_host=127.0.0.1) port=$BOOTSTRAP_PORT
fi
"$PDLB" serve --prefill "http://127.0.0.1:$PREFILL_PORT" "$port" --decode "http://127.0.0.1:$DECODE_PORT" \
  --host 127.0.0.1 --port "$PORT" "${mode[@]}" --set admin.port=0 --log-format json ${SET:-} \
  >"$OUT/batchrss_pdlb.log" 2>&1 &
pdlb=$!
pids+=($pdlb)
sleep 0.5
"$PDLB" mock --role prefill --port "$PREFILL_PORT" --fast "${prefill_flags[@]}" --log-level warn >"$OUT/batchrss_prefill.log" 2>&1 &
pids+=($!)
"$PDLB" mock --role decode --port "$DECODE_PORT" --fast --log-level warn >"$OUT/batchrss_decode.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/readiness" && break
  sleep 0.2
done
before=$(awk '/VmRSS/{print int($2/1024)}' "/proc/$pdlb/status")
status=$(curl -s -o "$OUT/batchrss_answer.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary "@$body" "http://127.0.0.1:$PORT/generate")
peak=$(awk '/VmHWM/{print int($2/1024)}' "/proc/$pdlb/status")
echo "body $(($(stat -c %s "$body") / 1024)) KiB ($ITEMS items of $ITEM_BYTES bytes, DP=$DP, STREAM=$STREAM): status $status; pdlb RSS before ${before} MB, peak ${peak} MB"
if [ "$status" != 200 ]; then head -c 300 "$OUT/batchrss_answer.json"; echo; fi
