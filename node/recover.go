package node

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// RecoverOptions are `ticketd recover`'s inputs (SPEC §3.4).
type RecoverOptions struct {
	From    string // the retired (or single-node FAILED) data dir
	To      string // the new data dir; must not exist or be empty
	NodeID  string // the new NodeId: never used by the old cluster
	Address string // its Raft address ("" = NodeID: a single node; cluster mode: its mesh address is learnt at start)
	DeltaMs uint64 // the cluster's Δ; must equal the old state's
	// LogStore is the new dir's cluster.raft.log_store ("" or auto: the
	// write-ahead log); the old dir's store is whichever it holds.
	LogStore string
	Now      time.Time
	Logger   *slog.Logger
}

// RecoverResult says what was recovered.
type RecoverResult struct {
	Tickets      int
	LastIndex    uint64 // every new fencing token is above it
	HoldOffUntil time.Time
}

// ErrNotRetired: recover refuses a data dir whose node did not FAIL.
var ErrNotRetired = errors.New("node: the source data dir is neither retired nor marked FAILED")

// Recover builds a new data dir from the newest state of a retired one
// (SPEC §3.4, whole-cluster recovery): a one-voter cluster under a new
// NodeId that keeps every ticket with its absolute expiry, whose log
// continues after the old one's last index (so new fencing tokens are above
// every token ever issued), and that refuses Grant and Expire until 250 s +
// Δ after the recovery. The old dir is read, never written (its lock keeps
// a running node out).
func Recover(o RecoverOptions) (RecoverResult, error) {
	var res RecoverResult
	nc := newCluster{To: o.To, NodeID: o.NodeID, Address: o.Address, LogStore: o.LogStore, Now: o.Now, Logger: o.Logger}
	if err := nc.check(o.DeltaMs); err != nil {
		return res, err
	}
	if o.DeltaMs == 0 {
		return res, config.Errorf("--delta-ms", "the cluster's Δ is required")
	}
	if o.From == "" {
		return res, config.Errorf("--from", "both --from and --data-dir are required")
	}
	from, err := datadir.Open(o.From)
	if err != nil {
		return res, err
	}
	defer from.Close()
	var re *datadir.RetiredError
	switch err := from.CheckRetired(); {
	case errors.As(err, &re):
	case err != nil:
		return res, err
	default:
		prior, err := from.ReadFailed()
		if err != nil {
			return res, err
		}
		if prior == nil {
			return res, fmt.Errorf("%w: %s holds no retired or clock-failed marker; a healthy node restarts on its own data dir (recover is for a cluster whose every voter FAILED or was lost)", ErrNotRetired, o.From)
		}
	}
	fsm := ticket.New(o.DeltaMs)
	info, err := consensus.ReadState(from, fsm)
	if err != nil {
		return res, err
	}
	if err := nc.checkNewID(info.OldServers, fsm); err != nil {
		return res, err
	}
	res = RecoverResult{Tickets: info.Tickets, LastIndex: info.LastIndex, HoldOffUntil: nc.holdUntil(o.DeltaMs)}
	return res, nc.write(fsm, info, o.From, res.HoldOffUntil)
}
