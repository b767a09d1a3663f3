package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/consensus"
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
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "")
	id := fs.String("node-id", "", "")
	to := fs.String("data-dir", "", "")
	addr := fs.String("address", "", "")
	delta := fs.String("delta-ms", "500", "")
	store := fs.String("log-store", consensus.LogStoreAuto, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, recoverUsage)
			return 0
		}
		fmt.Fprintf(stderr, "ticketd recover: %s\n(ticketd recover --help for usage)\n", config.DescribeFlagError(err))
		return 2
	}
	if fs.NArg() > 0 || *from == "" || *id == "" || *to == "" {
		fmt.Fprint(stderr, "ticketd recover: --from, --node-id and --data-dir are required\n\n"+recoverUsage)
		return 2
	}
	d, err := config.ParseUint(*delta, 64)
	if err != nil {
		fmt.Fprintf(stderr, "ticketd recover: --delta-ms %q: %v\n", *delta, err)
		return 2
	}
	if !slices.Contains(consensus.LogStores, *store) {
		fmt.Fprintf(stderr, "ticketd recover: --log-store %q: want one of %s\n", *store, strings.Join(consensus.LogStores, ", "))
		return 2
	}
	res, err := node.Recover(node.RecoverOptions{From: *from, To: *to, NodeID: *id, Address: *addr, DeltaMs: d, LogStore: *store})
	if err != nil {
		fmt.Fprintf(stderr, "ticketd recover: %v\n", err)
		var ce *config.Error
		if errors.As(err, &ce) || errors.Is(err, node.ErrNotRetired) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "recovered %d tickets from %s into %s as %s\nnew fencing tokens start above %d\nGrant and Expire refused until %s (250 s + Δ)\n",
		res.Tickets, *from, *to, *id, res.LastIndex, res.HoldOffUntil.UTC().Format(time.RFC3339))
	return 0
}
