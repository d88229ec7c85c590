#!/usr/bin/env bash
# bench/policies.sh — every selection policy on a simulated PD cluster, under
# workloads with the shape of real traffic; writes bench/POLICIES.md and
# bench/POLICIES.svg (see bench/policies/main.go for what is measured).
#
#   bench/policies.sh                         # all workloads, 40 s per run (about 15 minutes)
#   DURATION=20s WORKLOADS=shared bench/policies.sh
#
# Environment: DURATION (per run, default 40s), WORKLOADS (comma-separated:
# multiturn, shared, unique; default all), SEED (default 1), BASE_PORT (the
# simulated engines' first port, default 24000, below the kernel's ephemeral ports; pdlb listens on +200),
# OUT (default bench/out/policies), TRY (instead of the comparison, one prefill
# policy with settings, decode power_of_two: 'cache_aware,policy.cache_aware.balance_abs_threshold=8';
# several separated by ';'; its report goes to $OUT/TRY.md). Needs Go; nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out/policies}
mkdir -p "$OUT/bin"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
go build -trimpath -o "$OUT/bin/pdlb" ./cmd/pdlb
go build -trimpath -o "$OUT/bin/pdlb-policies" ./bench/policies
args=(-pdlb "$OUT/bin/pdlb" -out "$OUT" -duration "${DURATION:-40s}" -seed "${SEED:-1}" -base-port "${BASE_PORT:-24000}")
if [ -n "${WORKLOADS:-}" ]; then args+=(-workloads "$WORKLOADS"); fi
if [ -n "${TRY:-}" ]; then args+=(-try "$TRY"); fi
exec "$OUT/bin/pdlb-policies" "${args[@]}"
