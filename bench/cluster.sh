#!/usr/bin/env bash
# bench/cluster.sh — what being a replica of a cluster costs on the request
# path: one pdlb on its own and one replica sharing its registry and workers
# through etcd, side by side in rotated rounds (pdlb bench --targets), CPU per
# request of each process. Both run the embedded registry (each prefill mock
# registers with its own pdlb) with JSON logs, metrics, breakers and health
# checks on. Needs etcd on PATH (Debian: apt-get install etcd-server).
#
#   bench/cluster.sh                 # ROUNDS=5 DURATION=8s CONCURRENCY=64
#
# Environment: ROUNDS, DURATION, CONCURRENCY, OUT=bench/out/cluster, ports
# SERVE_PORT=31400 (on 127.0.0.1 and .2) BOOT_PORT=31401 PREFILL_A=31410
# PREFILL_B=31411 DECODE_PORT=31412 ETCD_PORT=31420 ETCD_PEER=31421.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8s} CONCURRENCY=${CONCURRENCY:-64}
OUT=${OUT:-$ROOT/bench/out/cluster}
SERVE_PORT=${SERVE_PORT:-31400} BOOT_PORT=${BOOT_PORT:-31401}
PREFILL_A=${PREFILL_A:-31410} PREFILL_B=${PREFILL_B:-31411} DECODE_PORT=${DECODE_PORT:-31412}
ETCD_PORT=${ETCD_PORT:-31420} ETCD_PEER=${ETCD_PEER:-31421}
command -v etcd >/dev/null || { echo "etcd not on PATH (Debian: apt-get install etcd-server)" >&2; exit 1; }
mkdir -p "$OUT"
rm -rf "$OUT/etcd"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
go build -trimpath -o "$OUT/pdlb" ./cmd/pdlb

. bench/procs.sh
wait_ready() { # wait_ready URL
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "$1 never answered 200" >&2; exit 1
}
serve() { # serve HOST PREFILL_PORT [--set cluster.etcd.endpoints=…]
  local host=$1 prefill=$2; shift 2
  exec "$OUT/pdlb" serve --prefill "http://127.0.0.1:$prefill" "$BOOT_PORT" --decode "http://127.0.0.1:$DECODE_PORT" \
    --host "$host" --port "$SERVE_PORT" --set bootstrap.listen_host="$host" --set bootstrap.advertise_host="$host" \
    --set admin.port=0 --log-format json "$@"
}

start etcd etcd --data-dir "$OUT/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-cluster "default=http://127.0.0.1:$ETCD_PEER"
start decode "$OUT/pdlb" mock --role decode --port "$DECODE_PORT" --fast --log-level warn
start single serve 127.0.0.1 "$PREFILL_A"
start replica serve 127.0.0.2 "$PREFILL_B" --set cluster.etcd.endpoints="http://127.0.0.1:$ETCD_PORT"
start prefill_a "$OUT/pdlb" mock --role prefill --port "$PREFILL_A" --fast --bootstrap "http://127.0.0.1:$BOOT_PORT" --log-level warn
start prefill_b "$OUT/pdlb" mock --role prefill --port "$PREFILL_B" --fast --bootstrap "http://127.0.0.2:$BOOT_PORT" --log-level warn
wait_ready "http://127.0.0.1:$SERVE_PORT/readiness"
wait_ready "http://127.0.0.2:$SERVE_PORT/readiness"
curl -s "http://127.0.0.2:$SERVE_PORT/metrics" | grep '^pdlb_cluster_store_up'

echo "pdlb bench --targets SINGLE,REPLICA --pid-of-target <pids> --room --concurrency $CONCURRENCY --duration $DURATION --rounds $ROUNDS --input-len 128 --output-len 16"
"$OUT/pdlb" bench --quiet --targets "http://127.0.0.1:$SERVE_PORT,http://127.0.0.2:$SERVE_PORT" \
  --pid-of-target "$single_pid,$replica_pid" --room --concurrency "$CONCURRENCY" --duration "$DURATION" \
  --rounds "$ROUNDS" --input-len 128 --output-len 16 --out "$OUT/cluster.json" | tee "$OUT/cluster.txt"
# What the replica costs at rest: etcd's CPU and the replica's own while idle.
sleep 1
idle() { awk '{print $14+$15}' "/proc/$1/stat"; }
r0=$(idle "$replica_pid") s0=$(idle "$single_pid") e0=$(idle "$etcd_pid"); sleep 10
r1=$(idle "$replica_pid") s1=$(idle "$single_pid") e1=$(idle "$etcd_pid")
tck=$(getconf CLK_TCK)
echo "idle CPU over 10 s (ms): single $(( (s1-s0)*1000/tck )), replica $(( (r1-r0)*1000/tck )), etcd $(( (e1-e0)*1000/tck ))"
echo "RSS (kB): single $(awk '/VmRSS/{print $2}' /proc/$single_pid/status), replica $(awk '/VmRSS/{print $2}' /proc/$replica_pid/status), etcd $(awk '/VmRSS/{print $2}' /proc/$etcd_pid/status)"
