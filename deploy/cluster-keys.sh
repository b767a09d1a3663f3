#!/bin/sh
# cluster-keys.sh — keys and one ticketd.yaml per node for a cluster on ONE
# machine (loopback), as the README's "A three-node cluster on one machine"
# walks through (SPEC §5, §1.4; keys made with openssl as the seed shows).
#
#   deploy/cluster-keys.sh DIR node-1 node-2 node-3
#
# writes, every file mode 0600 (DIR itself 0700):
#   DIR/gossip.key       the gossip secret, `openssl rand -base64 32` (all nodes)
#   DIR/clock.secret     the clock-agent secret (48 random bytes, base64) for
#                        `tckclk-agent --dev --secret-file DIR/clock.secret`
#   DIR/NAME.key         NAME's ed25519 identity: the 32-byte seed in base64,
#                        taken from `openssl genpkey -algorithm ed25519`
#   DIR/trust.yaml       the trust map (NAME: base64 public key), for reference
#   DIR/NAME.yaml        NAME's ticketd config: cluster.enabled, gossip on
#                        127.0.0.1, join_addrs = every other node, the trust
#                        map, raft.data_dir DIR/NAME/data, bootstrap_expect =
#                        the number of nodes, the dev agent, api.addr
# Run `ticketd --config DIR/NAME.yaml` for each NAME.
#
# Ports (space-separated lists, one per node, in NAME order; defaults shown
# for three nodes) and the agent come from the environment:
#   TCKCLK_API_PORTS="7981 7982 7983"      api.addr 127.0.0.1:PORT
#   TCKCLK_GOSSIP_PORTS="7946 7947 7948"   cluster.membership.bind_port
#   TCKCLK_AGENT_ADDR=127.0.0.1:7970       clock.agent_addr (tckclk-agent --listen)
# The mesh port is auto-picked in 7950–7959 (then an ephemeral port) and
# advertised in gossip, so it needs no setting.
#
# The agent is `--dev` and every config sets clock.dev_reference: true: a
# development setup, never production (on several hosts use real clock
# sources and one key pair made on each node's own host).
#
# It refuses to overwrite: DIR must not hold gossip.key yet. Exit 0 on
# success, 2 on bad usage, 1 when a tool fails.
set -eu

usage() {
	echo "usage: $0 DIR NAME [NAME...]   (see the comment at the top of this file)" >&2
	exit 2
}
die() {
	echo "cluster-keys: $*" >&2
	exit 1
}

[ $# -ge 2 ] || usage
dir=$1
shift
command -v openssl >/dev/null 2>&1 || die "openssl is not on PATH"

n=$#
names=$* # validated below: no spaces or glob characters
for name in "$@"; do
	case $name in
	'' | *[!A-Za-z0-9._-]*) echo "cluster-keys: node name '$name' must be letters, digits, '-', '_' or '.'" >&2; exit 2 ;;
	esac
	[ ${#name} -le 64 ] || { echo "cluster-keys: node name '$name' is longer than 64 characters" >&2; exit 2; }
done
[ "$(printf '%s\n' "$@" | sort | uniq -d)" = "" ] || { echo "cluster-keys: node names must differ" >&2; exit 2; }

# nth LIST I: the I-th (1-based) word of LIST.
nth() {
	idx=$2
	# shellcheck disable=SC2086
	set -- $1
	shift $((idx - 1))
	echo "$1"
}
seq_from() { # seq_from FIRST COUNT
	i=0
	out=
	while [ "$i" -lt "$2" ]; do
		out="$out $(($1 + i))"
		i=$((i + 1))
	done
	echo "$out"
}
api_ports=${TCKCLK_API_PORTS:-$(seq_from 7981 "$n")}
gossip_ports=${TCKCLK_GOSSIP_PORTS:-$(seq_from 7946 "$n")}
agent_addr=${TCKCLK_AGENT_ADDR:-127.0.0.1:7970}
count() {
	# shellcheck disable=SC2086
	set -- $1
	echo $#
}
for list in "$api_ports" "$gossip_ports"; do
	[ "$(count "$list")" -eq "$n" ] || { echo "cluster-keys: TCKCLK_API_PORTS and TCKCLK_GOSSIP_PORTS need $n ports each" >&2; exit 2; }
done

umask 077
mkdir -p "$dir"
chmod 700 "$dir"
dir=$(cd "$dir" && pwd)
case $dir in
*[\"\\]*) die "DIR must not contain a double quote or a backslash (it goes into YAML)" ;;
esac
[ ! -e "$dir/gossip.key" ] || die "$dir/gossip.key exists; refusing to overwrite keys (use a new DIR)"

openssl rand -base64 32 >"$dir/gossip.key"
openssl rand -base64 48 | tr -d '\n' >"$dir/clock.secret"

# Identities: openssl's PKCS#8 DER of an ed25519 key is a fixed 16-byte
# header and the 32-byte seed; its SubjectPublicKeyInfo DER ends in the
# 32-byte public key. ticketd reads the seed in base64.
pem=$(mktemp "$dir/.genpkey.XXXXXX")
trap 'rm -f "$pem"' EXIT
: >"$dir/trust.yaml"
for name in $names; do
	openssl genpkey -algorithm ed25519 -out "$pem" 2>/dev/null || die "openssl genpkey -algorithm ed25519 failed (OpenSSL ≥ 1.1.1 is needed)"
	openssl pkey -in "$pem" -outform DER | tail -c 32 | openssl base64 -A >"$dir/$name.key"
	echo >>"$dir/$name.key"
	pub=$(openssl pkey -in "$pem" -pubout -outform DER | tail -c 32 | openssl base64 -A)
	[ ${#pub} -eq 44 ] || die "unexpected public key from openssl for $name"
	echo "$name: \"$pub\"" >>"$dir/trust.yaml"
done

i=0
for name in $names; do
	i=$((i + 1))
	join=
	j=0
	for peer in $names; do
		j=$((j + 1))
		[ "$peer" != "$name" ] || continue
		join="${join:+$join,}127.0.0.1:$(nth "$gossip_ports" "$j")"
	done
	{
		echo "# ticketd.yaml for $name, made by deploy/cluster-keys.sh (a one-machine"
		echo "# development cluster against tckclk-agent --dev; never production)."
		echo "cluster:"
		echo "  enabled: true"
		echo "  name: $name"
		echo "  membership:"
		echo "    bind_addr: 127.0.0.1"
		echo "    bind_port: $(nth "$gossip_ports" "$i")"
		echo "    join_addrs: \"$join\""
		echo "    secret_file: \"$dir/gossip.key\""
		echo "  internode:"
		echo "    identity_key_file: \"$dir/$name.key\""
		echo "    trusted_peer_keys:"
		sed 's/^/      /' "$dir/trust.yaml"
		echo "  raft:"
		echo "    data_dir: \"$dir/$name/data\""
		echo "    bootstrap_expect: $n"
		echo "clock:"
		echo "  agent_addr: $agent_addr"
		echo "  secret_file: \"$dir/clock.secret\""
		echo "  dev_reference: true"
		echo "api:"
		echo "  addr: 127.0.0.1:$(nth "$api_ports" "$i")"
	} >"$dir/$name.yaml"
	mkdir -p "$dir/$name"
done
echo "wrote $dir: gossip.key clock.secret trust.yaml and, for $names, NAME.key NAME.yaml"
