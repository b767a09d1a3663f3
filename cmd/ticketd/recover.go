package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tckclk/tckclk/node"
)

const recoverUsage = `usage: ticketd recover --from DATA_DIR --node-id NEW --data-dir NEW_DIR [--delta-ms 500] [--address ADDR] [--log-store auto]

Whole-cluster recovery (SPEC §3.4): builds NEW_DIR from the newest state of
the retired (or single-node clock-failed) DATA_DIR as a one-voter cluster
under the NodeId NEW, which the old cluster never used. Every ticket keeps
its holder, token and absolute expiry; every new fencing token is above
every token ever issued; the new node refuses Grant and Expire for
250 s + Δ from now. DATA_DIR is read, never written. Start the new node with
cluster.name NEW and cluster.raft.data_dir NEW_DIR; other new NodeIds then join it.

  --from DIR       the retired data dir to recover from
  --node-id ID     the new NodeId
  --data-dir DIR   the new data dir (must not exist or be empty)
  --delta-ms N     the cluster's Δ, which must equal the old state's (default 500)
  --address ADDR   the new voter's Raft address (default: the NodeId; cluster mode learns its mesh address)
  --log-store S    the new dir's Raft log store, as cluster.raft.log_store: auto (= wal), wal or bolt

exit status: 0 recovered, 1 the old state cannot be recovered, 2 bad usage
`

// recoverCmd is `ticketd recover`.
func recoverCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ticketd recover", flag.ContinueOnError)
	f := bindNewCluster(fs, "from", "500")
	d, code, ok := f.parse(fs, args, recoverUsage, stderr)
	if !ok {
		return code
	}
	from := f.from
	res, err := node.Recover(node.RecoverOptions{From: *from, To: *f.to, NodeID: *f.id, Address: *f.addr, DeltaMs: d, LogStore: *f.store})
	if err != nil {
		return failed("ticketd recover", err, stderr, node.ErrNotRetired)
	}
	fmt.Fprintf(stdout, "recovered %d tickets from %s into %s as %s\nnew fencing tokens start above %d\nGrant and Expire refused until %s (250 s + Δ)\n",
		res.Tickets, *from, *f.to, *f.id, res.LastIndex, res.HoldOffUntil.UTC().Format(time.RFC3339))
	return 0
}
