#!/usr/bin/env bash
# One million active tickets on a single-node ticketd: fill
# through the HTTP API (distinct names, lease 250 s), then report the
# process's RSS (target ≤ 1 GiB), a snapshot's size and time, the data
# dir's size, and the restart time (process start → /readyz 200) after a
# clean stop and after kill -9.
#
#   bench/million.sh                 # TICKETS=1000000 CLIENTS=256
#
# The fill must finish well inside 250 s, or the first tickets expire
# before the measurement (the script says so if that happens).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${TICKETS:-1000000}
CLIENTS=${CLIENTS:-256}
TP=${TICKETD_PORT:-27981}
if (exec 3<>"/dev/tcp/127.0.0.1/$TP") 2>/dev/null; then
  echo "bench: 127.0.0.1:$TP is in use; set TICKETD_PORT" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ticketd-million.XXXXXX")
pid=""
cleanup() {
  rc=$?
  [ "$rc" -ne 0 ] && [ -f "$tmp/ticketd.log" ] && tail -20 "$tmp/ticketd.log" >&2
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/ticketd" ./cmd/ticketd
(cd bench && go build -o "$tmp/ticketload" ./ticketload)
go build -o "$tmp/ticketctl" ./cmd/ticketctl
head -c 48 /dev/urandom | base64 >"$tmp/admin.token"
chmod 600 "$tmp/admin.token"
data="$tmp/data"
url="http://127.0.0.1:$TP"

start() {
  "$tmp/ticketd" --data-dir "$data" --http "127.0.0.1:$TP" --api.admin_token_file "$tmp/admin.token" \
    --log.level info >>"$tmp/ticketd.log" 2>&1 &
  pid=$!
}
rss() { awk '/VmRSS/ {r=$2} /RssAnon/ {a=$2} /RssFile/ {f=$2} END {printf "%.0f MiB (anon %.0f, file-backed %.0f)", r/1024, a/1024, f/1024}' "/proc/$pid/status"; }
hwm() { awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$pid/status"; }
active() { "$tmp/ticketctl" --addr "$url" status --json | awk -F'[:,]' '/"tickets_active"/ {gsub(/ /, "", $2); print $2}'; }

echo "bench: $N tickets, $CLIENTS clients, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), data in $data"
start
fill_start=$(date +%s)
"$tmp/ticketload" -ticketd "$url" -fill "$N" -clients "$CLIENTS"
fill_s=$(( $(date +%s) - fill_start ))
[ "$fill_s" -ge 240 ] && echo "bench: WARNING: the fill took ${fill_s}s; the first tickets (lease 250 s) are about to expire"
echo "bench: after the fill: RSS $(rss), peak $(hwm), tickets_active $(active 2>/dev/null || echo '?')"
"$tmp/ticketload" -ticketd "$url" -snapshot -admin-token-file "$tmp/admin.token"
echo "bench: after the snapshot: RSS $(rss), peak $(hwm)"
echo "bench: data dir $(du -sh "$data" | cut -f1) (raft.db $(du -h "$data/raft.db" | cut -f1), snapshots $(du -sh "$data/snapshots" | cut -f1))"

kill -TERM "$pid"; wait "$pid" || true
start
"$tmp/ticketload" -ticketd "$url" -await-ready -wait 5m | sed 's/^/bench: restart after a clean stop: /'
echo "bench: after restart: RSS $(rss), peak $(hwm), tickets_active $(active)"

kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
start
"$tmp/ticketload" -ticketd "$url" -await-ready -wait 5m | sed 's/^/bench: restart after kill -9: /'
echo "bench: after restart: RSS $(rss), peak $(hwm), tickets_active $(active)"
grep -E 'restored snapshot|leader ready|snapshot taken' "$tmp/ticketd.log" | sed 's/^/ticketd: /'
