package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/stage"
)

// Members lists the Raft configuration (admin, api.Backend), in cluster
// mode with every gossip member (admin_cluster.go).
func (n *Node) Members(ctx context.Context) (wire.Members, error) {
	switch {
	case n.cl == nil && n.raft() == nil:
		return wire.Members{}, api.Unavailable(string(stage.Starting), "starting", "raft is not open yet")
	case n.cl != nil && n.cons.Load() == nil:
		// The mesh, gossip and Raft are set up before the consensus is
		// stored: until it is, none of it may be read (as for health).
		return wire.Members{}, n.notJoinedYet()
	}
	return n.members()
}

var errSingleNode = api.Refuse(api.KindConflict, "single_node",
	"this is a single-node cluster (cluster.enabled: false): there is no other voter")

// TransferLeadership has nowhere to go in single-node mode (api.Backend).
func (n *Node) TransferLeadership(ctx context.Context, to string) error {
	if n.cl != nil {
		return n.clusterTransfer(ctx, to)
	}
	return errSingleNode
}

// RemoveMember cannot remove the only voter (api.Backend).
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if n.cl != nil {
		return n.clusterRemove(ctx, id)
	}
	if id != n.cfg.Cluster.Name {
		return api.Refuse(api.KindNotFound, "not_found", "no member %q", id)
	}
	return errSingleNode
}

// Snapshot takes a Raft snapshot of this node's state now (admin,
// api.Backend). Any node whose Raft is open takes its own — a follower
// too: its snapshot is of the log it applied, exactly as the leader's
// would be at that index (backups of a follower, compaction). A FAILED or
// stopping node refuses (503).
func (n *Node) Snapshot(ctx context.Context) (wire.SnapshotInfo, error) {
	cur, reason := n.stage.Get()
	r := n.raft()
	switch {
	case cur == stage.Failed || cur == stage.Stopping:
		return wire.SnapshotInfo{}, api.Unavailable(string(cur), cmp.Or(reason, string(cur)), "this node takes no snapshot at stage %s", cur)
	case r == nil && n.cl != nil && !n.cl.eligible():
		return wire.SnapshotInfo{}, api.Refuse(api.KindConflict, "no_log", "this node is a gossip-only client and keeps no Raft log; ask a voter or standby for a snapshot")
	case r == nil:
		return wire.SnapshotInfo{}, api.Unavailable(string(cur), cmp.Or(reason, string(cur)), "raft is not open yet (stage %s); a snapshot needs this node's log", cur)
	}
	tickets := n.fsm.Len()
	start := time.Now()
	f := r.Snapshot()
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return wire.SnapshotInfo{}, api.Refuse(api.KindConflict, "nothing_new", "nothing new to snapshot since the last one")
		}
		return wire.SnapshotInfo{}, api.Unavailable("", "snapshot", "snapshot failed: %v", err)
	}
	took := time.Since(start)
	meta, rc, err := f.Open()
	if err != nil {
		return wire.SnapshotInfo{}, fmt.Errorf("node: opening the new snapshot: %w", err)
	}
	rc.Close()
	role := roleName(r.State())
	n.log.Info("snapshot taken", "id", meta.ID, "index", meta.Index, "size_bytes", meta.Size, "took", took.Round(time.Millisecond), "role", role)
	return wire.SnapshotInfo{ID: meta.ID, Index: meta.Index, Term: meta.Term, SizeBytes: meta.Size, DurationMs: took.Milliseconds(), Tickets: tickets,
		NodeID: n.cfg.Cluster.Name, Role: role}, nil
}
