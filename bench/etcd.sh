#!/usr/bin/env bash
# ticketd vs etcd, side by side in one run (SPEC §4/§5 known-good
# set): a single-member etcd from Debian's etcd-server and a single-node
# ticketd, both on loopback in a temp dir with fsync on (the defaults of
# both), driven by bench/ticketload (in bench/'s own Go module, which
# keeps etcd's client out of the product's go.mod) with the same number of concurrent
# clients doing lock cycles on distinct names, in alternating rounds.
# Prints cycles/s, p50 and p99 for both and the ratios ticketd/etcd
# (targets: throughput ≥ 1.0×, p99 ≤ 1.0×).
#
#   bench/etcd.sh                       # 64 clients, 2 rounds × 20 s each
#   CLIENTS=64 DURATION=30s ROUNDS=3 bench/etcd.sh
#   HANDOFF=1 bench/etcd.sh             # one contended lock: ticketd Acquire vs etcd Mutex.Lock (SPEC §4.2)
#
# Environment: CLIENTS, DURATION, ROUNDS, WARMUP, HANDOFF, ETCD (binary),
# ETCD_CLIENT_PORT (23790), ETCD_PEER_PORT (23800), TICKETD_PORT (27980).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-20s}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-3s}
MODE=()
if [ -n "${HANDOFF:-}" ]; then MODE=(-handoff); fi
EP=${ETCD_CLIENT_PORT:-23790}
PP=${ETCD_PEER_PORT:-23800}
TP=${TICKETD_PORT:-27980}
ETCD=${ETCD:-$(command -v etcd || true)}
if [ -z "$ETCD" ] || [ ! -x "$ETCD" ]; then
  echo "bench: no etcd binary; install Debian's etcd-server (apt-get install etcd-server)" >&2
  exit 2
fi
for port in "$EP" "$PP" "$TP"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "bench: 127.0.0.1:$port is already in use; set ETCD_CLIENT_PORT/ETCD_PEER_PORT/TICKETD_PORT" >&2
    exit 2
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ticketd-bench.XXXXXX")
pids=()
cleanup() {
  rc=$?
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/ticketd" ./cmd/ticketd
(cd bench && go build -o "$tmp/ticketload" ./ticketload)

echo "bench: $("$ETCD" --version | head -1), $(go version | cut -d' ' -f3), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench: $CLIENTS clients, $ROUNDS rounds × $DURATION per target (after $WARMUP warm-up), data in $tmp"

"$ETCD" --name bench --data-dir "$tmp/data-etcd" \
  --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
  --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "bench=http://127.0.0.1:$PP" --logger zap --log-level error \
  >"$tmp/etcd.log" 2>&1 &
pids+=($!)
"$tmp/ticketd" --data-dir "$tmp/data-ticketd" --http "127.0.0.1:$TP" --log.level warn >"$tmp/ticketd.log" 2>&1 &
pids+=($!)
tpid=$!

"$tmp/ticketload" -ticketd "http://127.0.0.1:$TP" -etcd "127.0.0.1:$EP" \
  -clients "$CLIENTS" -duration "$DURATION" -rounds "$ROUNDS" -warmup "$WARMUP" "${MODE[@]}"

echo "bench: peak RSS ticketd $(awk '/VmHWM/ {print $2, $3}' "/proc/$tpid/status"), etcd $(awk '/VmHWM/ {print $2, $3}' "/proc/${pids[0]}/status")"
