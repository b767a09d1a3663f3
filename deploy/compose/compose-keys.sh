#!/bin/sh
# compose-keys.sh — keys, trust map and one ticketd.yaml per node for
# deploy/compose/docker-compose.yml: nodes node-1..node-3 and the
# replacement node-4 (started later, in the trust map from the start),
# addressed by their compose hostnames. The key material comes from
# deploy/cluster-keys.sh (openssl); only the configs differ: container
# paths, gossip between containers, the API on the container's address.
#
#   deploy/compose/compose-keys.sh DIR        (then: TCKCLK_KEYS=DIR docker-compose up -d)
#
# writes into DIR (0700; files 0600, owned by the containers' user 65532,
# the USER of both images, so that it alone reads them; needs root for
# the chown, or TCKCLK_CONTAINER_UID=$(id -u) with --user in your compose):
#   gossip.key clock.secret admin.token        shared secrets
#   node-N.key                                  node-N's ed25519 identity
#   trust.yaml                                  the trust map, for reference
#   node-N.yaml                                 node-N's config, read at
#                                               /etc/ticketd/ticketd.yaml
# Compose mounts each file read-only under /run/secrets/ in the containers
# that need it; nothing is baked into an image.
#
# The clock: a --dev agent (a development reference: loopback only) runs
# beside each node, sharing that node's network namespace, and every config
# sets clock.dev_reference: true. All containers run on one host's kernel
# clock, the one-host setup --dev exists for; never production.
#
# Exit 0 on success, 2 on bad usage, 1 when a tool fails.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
uid=${TCKCLK_CONTAINER_UID:-65532}
case $uid in '' | *[!0-9]*) echo "compose-keys: TCKCLK_CONTAINER_UID must be a number, got '$uid'" >&2; exit 2 ;; esac
nodes="node-1 node-2 node-3 node-4"
initial="node-1 node-2 node-3"

umask 077
raw=$(mktemp -d "${TMPDIR:-/tmp}/tckclk-compose-keys.XXXXXX")
trap 'rm -rf "$raw"' EXIT
# shellcheck disable=SC2086
sh "$here/../cluster-keys.sh" "$raw/k" $nodes >/dev/null || { echo "compose-keys: cluster-keys.sh failed" >&2; exit 1; }
mkdir -p "$dir"
chmod 700 "$dir"
[ ! -e "$dir/gossip.key" ] || { echo "compose-keys: $dir/gossip.key exists; refusing to overwrite keys (use a new DIR)" >&2; exit 1; }
cp "$raw/k/gossip.key" "$raw/k/clock.secret" "$raw/k/trust.yaml" "$dir/"
openssl rand -base64 48 | tr -d '\n' >"$dir/admin.token"

for name in $nodes; do
	cp "$raw/k/$name.key" "$dir/$name.key"
	join=
	for peer in $initial; do
		[ "$peer" != "$name" ] || continue
		join="${join:+$join,}$peer:7946"
	done
	expect=3
	case " $initial " in *" $name "*) ;; *) expect=0 ;; esac
	{
		echo "# ticketd.yaml for $name in deploy/compose, made by compose-keys.sh"
		echo "# (a one-host development cluster against a --dev agent; never production)."
		echo "# compose adds --cluster.membership.bind_addr (the container's static IP)."
		echo "cluster:"
		echo "  enabled: true"
		echo "  name: $name"
		echo "  membership:"
		echo "    bind_port: 7946"
		echo "    join_addrs: \"$join\""
		echo "    secret_file: /run/secrets/gossip.key"
		echo "  internode:"
		echo "    identity_key_file: /run/secrets/identity.key"
		echo "    trusted_peer_keys:"
		sed 's/^/      /' "$dir/trust.yaml"
		echo "  raft:"
		echo "    # Inside the volume, not its mount point: a retired dir is moved"
		echo "    # aside beside it (cluster.auto_replace, SPEC 3.4)."
		echo "    data_dir: /var/lib/ticketd/data"
		if [ "$expect" = 0 ]; then
			echo "    # A replacement: joins the running cluster, never bootstraps."
		fi
		echo "    bootstrap_expect: $expect"
		echo "clock:"
		echo "  agent_addr: 127.0.0.1:7970"
		echo "  secret_file: /run/secrets/clock.secret"
		echo "  dev_reference: true"
		echo "api:"
		echo "  addr: 0.0.0.0:7980"
		echo "  admin_token_file: /run/secrets/admin.token"
	} >"$dir/$name.yaml"
done
chmod 600 "$dir"/*
if [ "$(id -u)" = 0 ]; then
	chown "$uid:$uid" "$dir"/*
elif [ "$uid" != "$(id -u)" ]; then
	echo "compose-keys: the containers run as uid $uid and must own the secrets: run as root, or set TCKCLK_CONTAINER_UID=$(id -u) and run the containers with that --user" >&2
	exit 1
fi
echo "wrote $dir: gossip.key clock.secret admin.token trust.yaml and, for $nodes, NAME.key NAME.yaml (owned by uid $uid)"
