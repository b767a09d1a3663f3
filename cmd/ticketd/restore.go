package main

import (
	"encoding/hex"
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
	"github.com/tckclk/tckclk/node/ticket"
)

const restoreUsage = `usage: ticketd restore --from-snapshot FILE --node-id NEW --data-dir NEW_DIR [--delta-ms N] [--epoch N] [--address ADDR] [--log-store auto]

Restore from a backup (SPEC §3.4): builds NEW_DIR from FILE (written by
ticketctl snapshot save) as a one-voter cluster under the NodeId NEW, which
the old cluster never used. Every ticket keeps its holder, token and
absolute expiry. New fencing tokens are in the next token epoch
(token = epoch<<48 | Raft index), above every token the old cluster can
issue, also after the backup was taken. The new node refuses Grant and
Expire for 250 s + Δ from now: stop the old cluster first, so every lease it
granted has ended by then. FILE is verified end to end (length, SHA-256,
the state's own checksum and every field) before anything is written; a
refused FILE writes nothing. Start the new node with cluster.name NEW and
cluster.raft.data_dir NEW_DIR; other new NodeIds then join it.

  --from-snapshot FILE  the backup file
  --node-id ID          the new NodeId
  --data-dir DIR        the new data dir (must not exist or be empty)
  --delta-ms N          check that the backup's Δ is N (the new nodes' clock.delta_ms)
  --epoch N             the new token epoch (default: the backup's + 1; give a higher
                        one when this backup was restored before, docs/operations.md)
  --address ADDR        the new voter's Raft address (default: the NodeId; cluster mode learns its mesh address)
  --log-store S         the new dir's Raft log store, as cluster.raft.log_store: auto (= wal), wal or bolt

exit status: 0 restored, 1 the backup cannot be restored (named), 2 bad usage
`

// newClusterFlags are the flags recover and restore share.
type newClusterFlags struct {
	fromName                         string // --from or --from-snapshot
	from, id, to, addr, delta, store *string
}

func bindNewCluster(fs *flag.FlagSet, fromName, defaultDelta string) newClusterFlags {
	return newClusterFlags{
		fromName: fromName, from: fs.String(fromName, "", ""),
		id: fs.String("node-id", "", ""), to: fs.String("data-dir", "", ""), addr: fs.String("address", "", ""),
		delta: fs.String("delta-ms", defaultDelta, ""), store: fs.String("log-store", consensus.LogStoreAuto, ""),
	}
}

// parse parses args into fs (sharing the flags f), printing usage or the
// error; ok false: exit with code.
func (f newClusterFlags) parse(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (delta uint64, code int, ok bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, usage)
			return 0, 0, false
		}
		fmt.Fprintf(stderr, "%s: %s\n(%s --help for usage)\n", fs.Name(), config.DescribeFlagError(err), fs.Name())
		return 0, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n\n%s", fs.Name(), fs.Args(), usage)
		return 0, 2, false
	}
	if *f.from == "" || *f.id == "" || *f.to == "" {
		fmt.Fprintf(stderr, "%s: --%s, --node-id and --data-dir are required\n\n%s", fs.Name(), f.fromName, usage)
		return 0, 2, false
	}
	if *f.delta != "" {
		d, err := config.ParseUint(*f.delta, 64)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --delta-ms %q: %v\n", fs.Name(), *f.delta, err)
			return 0, 2, false
		}
		delta = d
	}
	if !slices.Contains(consensus.LogStores, *f.store) {
		fmt.Fprintf(stderr, "%s: --log-store %q: want one of %s\n", fs.Name(), *f.store, strings.Join(consensus.LogStores, ", "))
		return 0, 2, false
	}
	return delta, 0, true
}

// failed reports a refused recover or restore: 2 for bad usage, else 1.
func failed(name string, err error, stderr io.Writer, usageErr ...error) int {
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ce *config.Error
	if errors.As(err, &ce) {
		return 2
	}
	for _, u := range usageErr {
		if errors.Is(err, u) {
			return 2
		}
	}
	return 1
}

// restoreCmd is `ticketd restore`.
func restoreCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ticketd restore", flag.ContinueOnError)
	epoch := fs.String("epoch", "", "")
	f := bindNewCluster(fs, "from-snapshot", "")
	delta, code, ok := f.parse(fs, args, restoreUsage, stderr)
	if !ok {
		return code
	}
	from := f.from
	var ep uint64
	if *epoch != "" {
		var err error
		if ep, err = config.ParseUint(*epoch, 64); err != nil || ep == 0 {
			fmt.Fprintf(stderr, "ticketd restore: --epoch %q: want a token epoch in 1..=%d\n", *epoch, ticket.MaxTokenEpoch)
			return 2
		}
	}
	res, err := node.Restore(node.RestoreOptions{From: *from, To: *f.to, NodeID: *f.id, Address: *f.addr, DeltaMs: delta, Epoch: ep, LogStore: *f.store})
	if err != nil {
		return failed("ticketd restore", err, stderr)
	}
	h := res.Backup
	fmt.Fprintf(stdout, "restored %d tickets from %s into %s as %s\n", res.Tickets, *from, *f.to, *f.id)
	fmt.Fprintf(stdout, "backup: taken %s by %s (voters %s) at Raft index %d, term %d; Δ %d ms; sha256 %s\n",
		time.UnixMilli(int64(h.TakenUnixMs)).UTC().Format(time.RFC3339Nano), h.NodeID, strings.Join(h.Voters, ","), h.Index, h.Term, h.DeltaMs, hex.EncodeToString(res.SHA256[:]))
	fmt.Fprintf(stdout, "token epoch %d (the backup's %d): new fencing tokens are above %d; the old cluster's never exceed %d\n",
		res.Epoch, h.Epoch, res.TokenFloor, res.OldCeiling)
	fmt.Fprintf(stdout, "Grant and Expire refused until %s (250 s + Δ): stop the old cluster now if it still runs\n", res.HoldOffUntil.UTC().Format(time.RFC3339))
	return 0
}
