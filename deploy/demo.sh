#!/bin/sh
# demo.sh — the whole product on one machine, on loopback: a clock agent
# (`tckclk-agent --dev`, a development reference) and a three-node ticketd
# cluster with real gossip keys, identities and trust map
# (deploy/cluster-keys.sh), then a grant / renew / release with ticketctl
# and the cluster table. It stays up until Ctrl-C, then stops everything.
#
#   deploy/demo.sh                    from the repository root (needs go, openssl)
#
# Environment (defaults shown):
#   TCKCLK_DEMO_DIR=$(mktemp -d)       keys, configs, data and logs
#   TCKCLK_API_PORTS="7981 7982 7983"  TCKCLK_GOSSIP_PORTS="7946 7947 7948"
#   TCKCLK_AGENT_ADDR=127.0.0.1:7970   TCKCLK_AGENT_HTTP=127.0.0.1:7971
#   TCKCLK_DEMO_ONESHOT=1              stop after the walk-through (tests)
#   TCKCLK_DEMO_TICKETD_FLAGS=""       extra ticketd flags, e.g. wider clock
#                                      limits on a machine loaded by tests
# Exit 0 after Ctrl-C or the one-shot walk-through; 1 when a step fails
# (each node's log is in $TCKCLK_DEMO_DIR/logs and its tail is printed).
set -eu
cd "$(dirname "$0")/.."
work=${TCKCLK_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tckclk-demo.XXXXXX")}
export TCKCLK_AGENT_ADDR=${TCKCLK_AGENT_ADDR:-127.0.0.1:7970}
agent_http=${TCKCLK_AGENT_HTTP:-127.0.0.1:7971}
api_ports=${TCKCLK_API_PORTS:-7981 7982 7983}
export TCKCLK_API_PORTS="$api_ports"
nodes="node-1 node-2 node-3"
bin=$work/bin
mkdir -p "$work/logs"
pids=
step() { printf '\n== %s\n' "$*"; }
stop_all() {
	trap - EXIT INT TERM
	[ -n "$pids" ] || return 0
	step "stopping (SIGTERM: leaders hand off, nodes leave the gossip)"
	# shellcheck disable=SC2086
	kill $pids 2>/dev/null || true
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	pids=
	echo "stopped; keys, data and logs are in $work"
}
fail() {
	echo "demo: $*" >&2
	for f in "$work"/logs/*.log; do
		[ -e "$f" ] || continue
		echo "--- last lines of $f" >&2
		tail -n 5 "$f" >&2
	done
	stop_all
	exit 1
}
trap 'stop_all; exit 0' INT TERM
trap stop_all EXIT

step "building ticketd, ticketctl and tckclk-agent into $bin"
# The revision rides in by -ldflags too, so --version knows it even with
# GOFLAGS=-buildvcs=false (internal/version).
rev=$(git rev-parse HEAD 2>/dev/null || true)
go build -ldflags "-X github.com/tckclk/tckclk/internal/version.Revision=$rev" -o "$bin/" \
	./cmd/ticketd ./cmd/ticketctl ./cmd/tckclk-agent || fail "go build failed"

step "keys, trust map and configs (deploy/cluster-keys.sh $work/keys $nodes)"
# shellcheck disable=SC2086
sh deploy/cluster-keys.sh "$work/keys" $nodes || fail "cluster-keys.sh failed"
(umask 077 && openssl rand -base64 48 | tr -d '\n' >"$work/keys/admin.token") || fail "openssl rand failed"

step "clock agent on $TCKCLK_AGENT_ADDR (--dev: a development reference, never production)"
"$bin/tckclk-agent" --dev --listen "$TCKCLK_AGENT_ADDR" --http "$agent_http" \
	--secret-file "$work/keys/clock.secret" >"$work/logs/agent.log" 2>&1 &
pids="$pids $!"
# Nodes prove their clock at start (clock_check): the agent comes first.
deadline=$(($(date +%s) + 30))
until grep -q 'msg="source healthy"' "$work/logs/agent.log" 2>/dev/null; do
	[ "$(date +%s)" -lt "$deadline" ] || fail "the agent has no healthy source after 30 s"
	for p in $pids; do kill -0 "$p" 2>/dev/null || fail "the agent exited"; done
	sleep 0.1
done

for name in $nodes; do
	# shellcheck disable=SC2086
	"$bin/ticketd" --config "$work/keys/$name.yaml" --api.admin_token_file "$work/keys/admin.token" \
		${TCKCLK_DEMO_TICKETD_FLAGS:-} >"$work/logs/$name.log" 2>&1 &
	pids="$pids $!"
done

addr() { # addr I: node I's API URL
	idx=$1
	# shellcheck disable=SC2086
	set -- $api_ports
	shift $((idx - 1))
	echo "http://127.0.0.1:$1"
}
ctl() { "$bin/ticketctl" --admin-token-file "$work/keys/admin.token" "$@"; }

step "waiting for every node's /readyz (clock_check, mesh, gossip, bootstrap_expect 3, leader)"
deadline=$(($(date +%s) + 90))
i=0
for name in $nodes; do
	i=$((i + 1))
	until ctl --addr "$(addr $i)" --json status 2>/dev/null | grep -q '"ready": *true'; do
		[ "$(date +%s)" -lt "$deadline" ] || fail "$name ($(addr $i)) not ready within 90 s"
		for p in $pids; do kill -0 "$p" 2>/dev/null || fail "a process exited during start-up"; done
		sleep 0.2
	done
	echo "$name ready at $(addr $i)"
done

step "ticketctl grant demo-lock through node-1 (a follower forwards to the leader)"
out=$(ctl --addr "$(addr 1)" --json grant demo-lock --holder demo --lease 30) || fail "grant failed"
echo "$out"
token=$(echo "$out" | sed -n 's/.*"token": *\([0-9][0-9]*\).*/\1/p' | head -n 1)
[ -n "$token" ] || fail "no token in the grant's answer"
step "ticketctl renew through node-2, release through node-3"
ctl --addr "$(addr 2)" renew demo-lock --holder demo --token "$token" --lease 60 || fail "renew failed"
ctl --addr "$(addr 3)" release demo-lock --holder demo --token "$token" || fail "release failed"
step "ticketctl cluster"
ctl --addr "$(addr 1)" cluster || fail "ticketctl cluster failed"
step "status"
echo "status page: $(addr 1)/ui/  (give it the admin token in $work/keys/admin.token, or open $(addr 1)/ui/#token=TOKEN)"
echo "node status (JSON): $(addr 1)/v1/status   readiness: $(addr 1)/readyz   metrics: $(addr 1)/metrics"
echo "ticketctl --addr $(addr 1) status   # or any node; logs in $work/logs"
if [ "${TCKCLK_DEMO_ONESHOT:-}" = 1 ]; then
	stop_all
	exit 0
fi
echo
echo "running; Ctrl-C stops the agent and the three nodes"
wait
