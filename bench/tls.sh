#!/usr/bin/env bash
# bench/tls.sh — what TLS on the client listener costs pdlb per request.
#
# Two pdlb processes in front of the same fast mock engines, one plain and one
# with server.tls (an ECDSA P-256 certificate made here with openssl), measured
# side by side by pdlb bench in interleaved, rotated rounds over keep-alive
# connections; --pid-of-target gives each pdlb's own CPU-µs per request.
# Upstream TLS is measured by the Go benchmarks (README "TLS"): the mocks serve
# plain HTTP.
#
#   bench/tls.sh                      # defaults below
#   ROUNDS=7 CONCURRENCY=16 bench/tls.sh
#   bench/tls.sh --stream --output-len 64  # more flags go to pdlb bench
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8s}
CONCURRENCY=${CONCURRENCY:-64}
OUT=${OUT:-$PWD/bench/out/tls}
PLAIN_PORT=${PLAIN_PORT:-31500} TLS_PORT=${TLS_PORT:-31501}
PREFILL_PORT=${PREFILL_PORT:-31510} DECODE_PORT=${DECODE_PORT:-31511}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

go build -trimpath -o "$OUT/pdlb" ./cmd/pdlb

# A CA and a server certificate for 127.0.0.1.
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/ca.key"
openssl req -x509 -new -key "$OUT/ca.key" -subj "/CN=pdlb bench CA" -days 1 -out "$OUT/ca.crt"
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/server.key"
openssl req -new -key "$OUT/server.key" -subj "/CN=pdlb" -out "$OUT/server.csr"
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$OUT/server.ext"
openssl x509 -req -in "$OUT/server.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial \
  -days 1 -extfile "$OUT/server.ext" -out "$OUT/server.crt" 2>/dev/null

. bench/procs.sh
serve() { # serve PORT [--set …]
  local port=$1; shift
  exec "$OUT/pdlb" serve --prefill "http://127.0.0.1:$PREFILL_PORT" none --decode "http://127.0.0.1:$DECODE_PORT" \
    --host 127.0.0.1 --port "$port" --set bootstrap.mode=off --set admin.port=0 --log-format json "$@"
}

start mock_prefill "$OUT/pdlb" mock --role prefill --port "$PREFILL_PORT" --fast --log-level warn
start mock_decode "$OUT/pdlb" mock --role decode --port "$DECODE_PORT" --fast --log-level warn
wait_port "$PREFILL_PORT"; wait_port "$DECODE_PORT"
start plain serve "$PLAIN_PORT"
start tls serve "$TLS_PORT" --set "server.tls.cert_file=$OUT/server.crt" --set "server.tls.key_file=$OUT/server.key"
wait_port "$PLAIN_PORT"; wait_port "$TLS_PORT"

"$OUT/pdlb" bench --targets "http://127.0.0.1:$PLAIN_PORT,https://127.0.0.1:$TLS_PORT" --ca-file "$OUT/ca.crt" \
  --pid-of-target "$plain_pid,$tls_pid" --concurrency "$CONCURRENCY" --duration "$DURATION" --rounds "$ROUNDS" \
  --input-len 128 --output-len 16 --quiet --out "$OUT/report.json" "$@"
