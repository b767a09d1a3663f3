package node

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/backup"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/ticket"
)

// RestoreOptions are `ticketd restore`'s inputs (SPEC §3.4).
type RestoreOptions struct {
	From    string // the backup file (ticketctl snapshot save)
	To      string // the new data dir; must not exist or be empty
	NodeID  string // the new NodeId: never used by the old cluster
	Address string // its Raft address ("" = NodeID)
	// DeltaMs, when set, must equal the backup's Δ (a check that the
	// configuration the node starts with agrees); 0 takes the backup's.
	DeltaMs uint64
	// Epoch is the new token epoch: 0 is the backup's + 1; any other must
	// be above the backup's (a second restore of one backup, see
	// docs/operations.md).
	Epoch    uint64
	LogStore string
	Now      time.Time
	Logger   *slog.Logger
}

// RestoreResult says what was restored.
type RestoreResult struct {
	Backup  wire.BackupHeader
	SHA256  [32]byte
	Tickets int
	Epoch   uint64 // the new token epoch
	// TokenFloor: every token the new cluster issues is above it;
	// OldCeiling: every token the old cluster can issue, also after the
	// backup, is at or below it (OldCeiling < TokenFloor).
	TokenFloor, OldCeiling uint64
	HoldOffUntil           time.Time
}

// Restore builds a new data dir from a backup file (SPEC §3.4): a one-voter
// cluster under a new NodeId that keeps every ticket with its absolute
// expiry, whose log continues after the backup's Raft index in the next
// token epoch (so every new fencing token is above every token the old
// cluster can issue in its own epoch, before or after the backup), and
// that refuses Grant and Expire until 250 s + Δ after the restore. The
// file is verified end to end and decoded before anything is written; a
// refusal writes nothing.
func Restore(o RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	nc := newCluster{To: o.To, NodeID: o.NodeID, Address: o.Address, LogStore: o.LogStore, Now: o.Now, Logger: o.Logger}
	if err := nc.check(o.DeltaMs); err != nil {
		return res, err
	}
	if o.From == "" {
		return res, config.Errorf("--from-snapshot", "the backup file is required")
	}
	b, err := backup.ReadFile(o.From)
	if err != nil {
		return res, err
	}
	h := b.Header
	if o.DeltaMs != 0 && o.DeltaMs != h.DeltaMs {
		return res, config.Errorf("--delta-ms", "%d ms, but the backup %s was taken with Δ %d ms: a restored cluster keeps its Δ (changing Δ: restore, then recover into a new cluster)", o.DeltaMs, o.From, h.DeltaMs)
	}
	old := map[string]bool{}
	for _, sv := range b.Position.Servers {
		old[sv.ID] = true
	}
	if err := nc.checkNewID(old, b.State); err != nil {
		return res, err
	}
	epoch, err := nextEpoch(b.State, o.Epoch)
	if err != nil {
		return res, err
	}
	info := consensus.RecoverInfo{LastIndex: h.Index, LastTerm: h.Term, Tickets: b.State.Len(), OldServers: old}
	res = RestoreResult{
		Backup: h, SHA256: b.SHA256, Tickets: info.Tickets, Epoch: epoch,
		TokenFloor:   ticket.TokenFor(epoch, h.Index),
		OldCeiling:   ticket.TokenFor(h.Epoch, ticket.MaxTokenIndex),
		HoldOffUntil: nc.holdUntil(h.DeltaMs),
	}
	return res, nc.write(b.State, info, "backup "+o.From, res.HoldOffUntil)
}

// nextEpoch moves the restored state to epoch want (0: the next one),
// refusing one at or below its own and past the last.
func nextEpoch(fsm *ticket.FSM, want uint64) (uint64, error) {
	cur := fsm.Epoch()
	if want == 0 {
		want = cur + 1
	}
	switch {
	case want <= cur:
		return 0, config.Errorf("--epoch", "%d is not above the backup's token epoch %d", want, cur)
	case want > ticket.MaxTokenEpoch:
		return 0, config.Errorf("--epoch", "%d is above the last token epoch %d: no epoch is left for a restore of this backup (docs/operations.md, \"Backup and restore\")", want, ticket.MaxTokenEpoch)
	}
	for fsm.Epoch() < want {
		if _, err := fsm.NextEpoch(); err != nil {
			return 0, fmt.Errorf("node: %w", err)
		}
	}
	return want, nil
}
