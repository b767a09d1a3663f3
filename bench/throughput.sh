#!/usr/bin/env bash
# Per-request throughput at 3 nodes, before and after, in one run: the
# ticketd of this checkout and one built from BASE (a git revision,
# default main~1) side by side against etcd ×3, with the clients spread
# over the nodes (tckbench -placement spread: ticketd's per-request Go
# clients each list the three nodes from node i mod 3, etcd's client
# balances over its endpoints), 64 and 256 clients, alternating rounds.
# Prints and writes (OUT, default /tmp/throughput.md) the ratios
# ticketd/etcd for both builds: throughput and p99 (targets ≥ 2.0×,
# ≤ 0.6×).
#
#   bench/throughput.sh                          # BASE=main~1, 6 rounds × 3 s
#   BASE=5ae1a90 ROUNDS=8 DURATION=4s bench/throughput.sh
#   PROFILE=/tmp/prof bench/throughput.sh        # also the leaders' CPU, block and mutex profiles
#
# Environment: BASE, ROUNDS, DURATION, WARMUP, CLIENTS (64,256), OUT,
# PLACEMENT (spread; both adds every client on the leader), PROFILE.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-main~1}
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-1s}
CLIENTS=${CLIENTS:-64,256}
OUT=${OUT:-/tmp/throughput.md}
PLACEMENT=${PLACEMENT:-spread}
rev=$(git rev-parse --verify "$BASE^{commit}") || { echo "bench: BASE=$BASE is not a revision" >&2; exit 2; }
base=$(mktemp -d "${TMPDIR:-/tmp}/ticketd-base.XXXXXX")
trap 'rm -rf "$base"' EXIT
git archive "$rev" | tar -x -C "$base"
extra=()
if [ -n "${PROFILE:-}" ]; then extra=(-profile "$PROFILE"); fi
echo "bench: this checkout ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes')) against $BASE ($(git rev-parse --short "$rev"))"
cd bench
go run ./cmd/tckbench -sections load -nodes 3 -clients "$CLIENTS" -contended-clients 0 \
  -rounds "$ROUNDS" -duration "$DURATION" -warmup "$WARMUP" -ticketd-client per-request \
  -placement "$PLACEMENT" -baseline-repo "$base" -out "$OUT" "${extra[@]}"
