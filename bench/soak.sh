#!/usr/bin/env bash
# Soak: mixed load through pdlb for SOAK_SECONDS while one decode mock is
# killed and restarted every SOAK_KILL_EVERY seconds; then checks that
# pdlb's goroutines (and RSS) went back to their baseline.
#
#   bench/soak.sh                      # 60 s, kill every 5 s
#   SOAK_SECONDS=30 bench/soak.sh
#   SOAK_DIE_MID_STREAM=0.05 SOAK_MIGRATION_LIMIT=0 bench/soak.sh   # decodes also cut 5% of answers
#   SOAK_DIE_MID_STREAM=0.05 SOAK_MIGRATION_LIMIT=1 bench/soak.sh   # … and broken streams migrate
#
# Knobs: SOAK_SECONDS (60), SOAK_KILL_EVERY (5), SOAK_CONCURRENCY (32 per
# load generator), SOAK_GOROUTINE_MARGIN (20), SOAK_SETTLE (22 s: fasthttp
# reaps idle server workers 10-20 s after their last request),
# SOAK_DIE_MID_STREAM (0: the decodes' --die-mid-stream, the share of answers
# cut mid-way: streams after half their events), SOAK_MIGRATION_LIMIT (pdlb's
# retry.migration_limit; unset: the default).
set -euo pipefail

SECONDS_TOTAL=${SOAK_SECONDS:-60}
KILL_EVERY=${SOAK_KILL_EVERY:-5}
CONC=${SOAK_CONCURRENCY:-32}
MARGIN=${SOAK_GOROUTINE_MARGIN:-20}
SETTLE=${SOAK_SETTLE:-22}
DIE_MID_STREAM=${SOAK_DIE_MID_STREAM:-0}
MIGRATION=()
[ -n "${SOAK_MIGRATION_LIMIT:-}" ] && MIGRATION=(--set retry.migration_limit="$SOAK_MIGRATION_LIMIT")

cd "$(dirname "$0")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pdlb-soak.XXXXXX")
PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

say() { printf '[soak %s] %s\n' "$(date +%T)" "$*"; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

wait_http() { # URL
	for _ in $(seq 1 100); do
		curl -fs -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "soak: $1 did not come up" >&2
	return 1
}

say "building pdlb"
go build -o "$WORK/pdlb" ./cmd/pdlb
PDLB="$WORK/pdlb"

start_mock() { # role port → pid
	# With bootstrap.mode=off there is no registry: decodes must not look one up.
	local extra=()
	[ "$1" = decode ] && extra=(--lookup=false --die-mid-stream "$DIE_MID_STREAM" --chained-output)
	"$PDLB" mock --role "$1" --port "$2" --token-delay 2ms --output-len 16 --log-level warn "${extra[@]}" >>"$WORK/mock-$2.log" 2>&1 &
	echo $!
}

P1=$(free_port); P2=$(free_port); D1=$(free_port); D2=$(free_port)
LB=$(free_port); PPROF=$(free_port); ADMIN=$(free_port)
PIDS+=("$(start_mock prefill "$P1")" "$(start_mock prefill "$P2")" "$(start_mock decode "$D1")")
D2PID=$(start_mock decode "$D2")
for p in $P1 $P2 $D1 $D2; do wait_http "http://127.0.0.1:$p/health"; done

"$PDLB" serve --port "$LB" --pprof "127.0.0.1:$PPROF" \
	--prefill "http://127.0.0.1:$P1" none --prefill "http://127.0.0.1:$P2" none \
	--decode "http://127.0.0.1:$D1" --decode "http://127.0.0.1:$D2" \
	--set bootstrap.mode=off --set admin.port="$ADMIN" --set retry.max_attempts=3 \
	--set breaker.open_timeout=2s --set health.interval=1s \
	"${MIGRATION[@]}" --log-level warn >"$WORK/pdlb.log" 2>&1 &
LBPID=$!
PIDS+=("$LBPID")
wait_http "http://127.0.0.1:$LB/liveness"
wait_http "http://127.0.0.1:$PPROF/debug/pprof/"

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$LBPID/status"; }
goroutines() { # first line of the profile: "goroutine profile: total N" (awk reads it all: no SIGPIPE)
	curl -s "http://127.0.0.1:$PPROF/debug/pprof/goroutine?debug=1" | awk 'NR == 1 { print $NF }'
}

# Warm up (pools, buffers) so the baseline is the steady idle state.
"$PDLB" bench --targets "http://127.0.0.1:$LB" --requests 200 --concurrency 8 --output-len 8 --quiet >/dev/null
sleep 1
BASE_RSS=$(rss_kb); BASE_G=$(goroutines)
say "baseline: RSS ${BASE_RSS} kB, ${BASE_G} goroutines"

say "load for ${SECONDS_TOTAL}s (plain + stream, ${CONC} each); decode :$D2 killed every ${KILL_EVERY}s"
"$PDLB" bench --targets "http://127.0.0.1:$LB" --duration "${SECONDS_TOTAL}s" --concurrency "$CONC" \
	--input-len 16-256 --output-len 4-32 --timeout 10s --quiet --out "$WORK/plain.json" >"$WORK/plain.txt" 2>&1 &
BP1=$!
"$PDLB" bench --targets "http://127.0.0.1:$LB" --duration "${SECONDS_TOTAL}s" --concurrency "$CONC" --stream \
	--input-len 16-256 --output-len 4-32 --timeout 10s --quiet --out "$WORK/stream.json" >"$WORK/stream.txt" 2>&1 &
BP2=$!
PIDS+=("$BP1" "$BP2")

KILLS=0
END=$((SECONDS + SECONDS_TOTAL))
while [ $SECONDS -lt $END ]; do
	sleep "$KILL_EVERY"
	[ $SECONDS -ge $END ] && break
	kill -9 "$D2PID" 2>/dev/null || true
	wait "$D2PID" 2>/dev/null || true
	KILLS=$((KILLS + 1))
	sleep 0.5
	D2PID=$(start_mock decode "$D2")
done
PIDS+=("$D2PID")
wait "$BP1" || { echo "soak: plain load generator failed:"; cat "$WORK/plain.txt"; exit 1; }
wait "$BP2" || { echo "soak: stream load generator failed:"; cat "$WORK/stream.txt"; exit 1; }
say "decode killed and restarted $KILLS times"

# Totals by class from the --out JSON (no jq needed).
summarize() { # file label
	python3 - "$1" "$2" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
sent = ok = failed = 0
classes = {}
for t in rep["targets"]:
    for r in t["rounds"]:
        ok += r.get("completed", 0)
        failed += r.get("failed", 0)
        for k, v in (r.get("errors") or {}).items():
            classes[k] = classes.get(k, 0) + v
sent = ok + failed
cls = ", ".join(f"{k}={v}" for k, v in sorted(classes.items())) or "none"
print(f"  {sys.argv[2]:<7} sent {sent:>7}  succeeded {ok:>7}  failed {failed:>5}  ({cls})")
PY
}
echo "requests:"
summarize "$WORK/plain.json" plain
summarize "$WORK/stream.json" stream
echo "pdlb metrics:"
curl -s "http://127.0.0.1:$LB/metrics" | grep -E '^pdlb_(requests_total|retries_total|migrations_total|breaker_transitions_total|backend_in_flight)' | sed 's/^/  /'

echo "breaker transitions (pdlb log):"
grep -h "circuit breaker state changed" "$WORK/pdlb.log" | cut -c1-300 | awk 'NR <= 20 { print "  " $0 }' || true

sleep "$SETTLE"
END_RSS=$(rss_kb); END_G=$(goroutines)
PEAK_RSS=$(awk '/^VmHWM:/ {print $2}' "/proc/$LBPID/status")
say "after ${SETTLE}s idle: RSS ${END_RSS} kB (baseline ${BASE_RSS}, peak ${PEAK_RSS}), goroutines ${END_G} (baseline ${BASE_G})"
if grep -q "panic" "$WORK/pdlb.log"; then
	echo "soak: FAIL: pdlb panicked"; grep -m5 -A5 panic "$WORK/pdlb.log"; exit 1
fi
if ! kill -0 "$LBPID" 2>/dev/null; then
	echo "soak: FAIL: pdlb exited"; tail -20 "$WORK/pdlb.log"; exit 1
fi
if [ "$END_G" -gt $((BASE_G + MARGIN)) ]; then
	echo "soak: FAIL: ${END_G} goroutines, more than baseline ${BASE_G} + ${MARGIN}"
	curl -s "http://127.0.0.1:$PPROF/debug/pprof/goroutine?debug=1" | awk 'NR <= 40'
	exit 1
fi
# RSS: the Go runtime returns memory lazily; report, flag only a doubling.
if [ "$END_RSS" -gt $((BASE_RSS * 2 + 32768)) ]; then
	echo "soak: WARN: RSS ${END_RSS} kB is more than twice the baseline"
fi
say "OK"
