#!/bin/sh
# demo.sh — the whole product on one machine, on loopback: a clock agent
# (`tckclk-agent --dev`, a development reference) and a three-node ticketd
# cluster with real gossip keys, identities and trust map
# (deploy/cluster-keys.sh), then a grant / renew / release with ticketctl
# and the cluster table. It stays up until Ctrl-C, then stops everything:
# the nodes first, then the agent they prove their clocks against.
# While it runs it watches the nodes as a supervisor would (systemd's
# Restart=on-failure): a node that exits with status 1 (a runtime failure,
# e.g. its clock FAILED: started again it comes back as the next generation
# NAME~G, SPEC 3.4) is said and started again; one that exits with 2
# (refused: read its log) is said and left stopped.
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
# Every port is checked before anything is built or started; one in use
# (e.g. by another demo) is refused naming the port and the variable to
# change. Exit 0 after Ctrl-C or the one-shot walk-through; 1 when a step
# fails (each node's log is in $TCKCLK_DEMO_DIR/logs and its tail is
# printed).
set -eu
cd "$(dirname "$0")/.."
export TCKCLK_AGENT_ADDR=${TCKCLK_AGENT_ADDR:-127.0.0.1:7970}
agent_http=${TCKCLK_AGENT_HTTP:-127.0.0.1:7971}
api_ports=${TCKCLK_API_PORTS:-7981 7982 7983}
gossip_ports=${TCKCLK_GOSSIP_PORTS:-7946 7947 7948}
export TCKCLK_API_PORTS="$api_ports" TCKCLK_GOSSIP_PORTS="$gossip_ports"
nodes="node-1 node-2 node-3"
step() { printf '\n== %s\n' "$*"; }

# port_in_use PROTO PORT: is PORT bound on any address (tcp: listening,
# udp: bound)? Read from /proc/net, so no tool beyond awk is needed.
port_in_use() {
	hex=$(printf ':%04X' "$2")
	case $1 in
	tcp) st=0A && set -- /proc/net/tcp /proc/net/tcp6 ;;
	*) st=07 && set -- /proc/net/udp /proc/net/udp6 ;;
	esac
	cat "$@" 2>/dev/null | awk -v p="$hex" -v st="$st" '$4 == st && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
busy=
check_port() { # check_port PROTO PORT VARIABLE
	case $2 in
	'' | *[!0-9]*) echo "demo: $3: \"$2\" is not a port number" >&2; busy=1; return ;;
	esac
	if port_in_use "$1" "$2"; then
		echo "demo: port $2 ($1) is in use — another demo or another program has it; set $3 to free ports" >&2
		busy=1
	fi
}
count() { set -- $1; echo $#; }
[ "$(count "$api_ports")" -eq 3 ] || { echo "demo: TCKCLK_API_PORTS needs 3 ports, got \"$api_ports\"" >&2; exit 1; }
[ "$(count "$gossip_ports")" -eq 3 ] || { echo "demo: TCKCLK_GOSSIP_PORTS needs 3 ports, got \"$gossip_ports\"" >&2; exit 1; }
for p in $api_ports; do check_port tcp "$p" TCKCLK_API_PORTS; done
for p in $gossip_ports; do
	check_port tcp "$p" TCKCLK_GOSSIP_PORTS
	check_port udp "$p" TCKCLK_GOSSIP_PORTS
done
check_port tcp "${TCKCLK_AGENT_ADDR##*:}" TCKCLK_AGENT_ADDR
check_port tcp "${agent_http##*:}" TCKCLK_AGENT_HTTP
[ -z "$busy" ] || { echo "demo: nothing was started" >&2; exit 1; }

work=${TCKCLK_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tckclk-demo.XXXXXX")}
bin=$work/bin
mkdir -p "$work/logs" "$work/run"
agent_pid=
node_pid() { cat "$work/run/$1.pid" 2>/dev/null || true; }
stop_all() {
	trap - EXIT INT TERM
	np=
	for name in $nodes; do
		p=$(node_pid "$name")
		[ -z "$p" ] || np="$np $p"
	done
	rm -f "$work"/run/*.pid
	if [ -n "$np" ]; then
		# The nodes go first: stopped after their agent, each would log a
		# clock FAILED (connect) on its way out.
		step "stopping the nodes (SIGTERM: a leader hands off, a voter keeps its vote)"
		# shellcheck disable=SC2086
		kill $np 2>/dev/null || true
		for p in $np; do wait "$p" 2>/dev/null || true; done
	fi
	if [ -n "$agent_pid" ]; then
		step "stopping the agent"
		kill "$agent_pid" 2>/dev/null || true
		wait "$agent_pid" 2>/dev/null || true
		agent_pid=
	fi
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

step "building ticketd, ticketctl and tckclk-agent into $bin (the first build fetches modules and compiles for a few minutes)"
# The revision rides in by -ldflags too, so --version knows it even with
# GOFLAGS=-buildvcs=false (internal/version).
rev=$(git rev-parse HEAD 2>/dev/null || true)
go build -v -ldflags "-X github.com/tckclk/tckclk/internal/version.Revision=$rev" -o "$bin/" \
	./cmd/ticketd ./cmd/ticketctl ./cmd/tckclk-agent >"$work/logs/build.log" 2>&1 &
build=$!
t0=$(date +%s)
compiled() { wc -l <"$work/logs/build.log" | tr -d ' '; }
while kill -0 "$build" 2>/dev/null; do
	el=$(($(date +%s) - t0))
	if [ -t 1 ]; then
		printf '\r   %s packages compiled, %s s' "$(compiled)" "$el"
	elif [ "$el" -gt 0 ] && [ $((el % 15)) -eq 0 ]; then
		echo "   still building: $(compiled) packages compiled, $el s"
	fi
	sleep 1
done
[ ! -t 1 ] || printf '\n'
wait "$build" || { cat "$work/logs/build.log" >&2; fail "go build failed"; }
echo "built in $(($(date +%s) - t0)) s"

step "keys, trust map and configs (deploy/cluster-keys.sh $work/keys $nodes)"
# shellcheck disable=SC2086
sh deploy/cluster-keys.sh "$work/keys" $nodes || fail "cluster-keys.sh failed"
(umask 077 && openssl rand -base64 48 | tr -d '\n' >"$work/keys/admin.token") || fail "openssl rand failed"

step "clock agent on $TCKCLK_AGENT_ADDR (--dev: a development reference, never production)"
# Ctrl-C at a terminal signals the whole foreground process group: the
# agent gets a session of its own (setsid) so that it outlives the nodes,
# and stop_all stops it last.
own_session=
command -v setsid >/dev/null 2>&1 && own_session=setsid
$own_session "$bin/tckclk-agent" --dev --listen "$TCKCLK_AGENT_ADDR" --http "$agent_http" \
	--secret-file "$work/keys/clock.secret" >"$work/logs/agent.log" 2>&1 &
agent_pid=$!
# Nodes prove their clock at start (clock_check): the agent comes first.
deadline=$(($(date +%s) + 30))
until grep -q 'msg="source healthy"' "$work/logs/agent.log" 2>/dev/null; do
	[ "$(date +%s)" -lt "$deadline" ] || fail "the agent has no healthy source after 30 s"
	kill -0 "$agent_pid" 2>/dev/null || fail "the agent exited"
	sleep 0.1
done

start_node() { # start_node NAME: the node's log is appended to across restarts
	# shellcheck disable=SC2086
	"$bin/ticketd" --config "$work/keys/$1.yaml" --api.admin_token_file "$work/keys/admin.token" \
		${TCKCLK_DEMO_TICKETD_FLAGS:-} >>"$work/logs/$1.log" 2>&1 &
	echo $! >"$work/run/$1.pid"
}
for name in $nodes; do start_node "$name"; done

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
		for n in $nodes; do
			kill -0 "$(node_pid "$n")" 2>/dev/null || fail "$n exited during start-up"
		done
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
echo "running; Ctrl-C stops the three nodes, then the agent"

# The supervisor: say when a node's stage changes or it exits; start a
# node that exited with 1 again (after 2 s), leave one that exited with 2.
stage_of() { # stage_of I: node I's readiness stage (and reason), or "unreachable"
	ctl --addr "$(addr "$1")" --json status 2>/dev/null |
		sed -n 's/^  "stage": *"\([^"]*\)".*/\1/p; s/^  "reason": *"\([^"]*\)".*/(\1)/p' | tr '\n' ' ' | sed 's/ $//' |
		grep . || echo unreachable
}
while :; do
	i=0
	for name in $nodes; do
		i=$((i + 1))
		p=$(node_pid "$name")
		[ -n "$p" ] || continue
		if kill -0 "$p" 2>/dev/null; then
			st=$(stage_of $i)
			last=$(cat "$work/run/$name.stage" 2>/dev/null || echo ready)
			if [ "$st" != "$last" ]; then
				echo "$(date +%T) $name: $last -> $st"
				echo "$st" >"$work/run/$name.stage"
			fi
			continue
		fi
		code=0
		wait "$p" 2>/dev/null || code=$?
		echo "$(date +%T) $name exited with status $code; its last lines:"
		tail -n 3 "$work/logs/$name.log" | sed 's/^/    /'
		if [ "$code" -eq 2 ]; then
			echo "$(date +%T) $name refused to start or run (status 2): not restarted; read $work/logs/$name.log"
			rm -f "$work/run/$name.pid"
			continue
		fi
		sleep 2
		echo "$(date +%T) starting $name again (as systemd's Restart=on-failure would)"
		start_node "$name"
	done
	kill -0 "$agent_pid" 2>/dev/null || fail "the agent exited"
	sleep 1
done
