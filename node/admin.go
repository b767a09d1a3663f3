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
// mode with every gossip member (node/cluster/admin.go).
func (n *server) Members(ctx context.Context) (wire.Members, error) { return n.mode.members() }

// TransferLeadership moves leadership to another voter (admin,
// api.Backend); a single node has none.
func (n *server) TransferLeadership(ctx context.Context, to string) error {
	return n.mode.transfer(ctx, to)
}

// RemoveMember removes a server from the Raft configuration (admin,
// api.Backend); a single node cannot remove its only voter.
func (n *server) RemoveMember(ctx context.Context, id string) error { return n.mode.remove(ctx, id) }

// Snapshot takes a Raft snapshot of this node's state now (admin,
// api.Backend). Any node whose Raft is open takes its own — a follower
// too: its snapshot is of the log it applied, exactly as the leader's
// would be at that index (backups of a follower, compaction). A FAILED or
// stopping node refuses (503).
func (n *server) Snapshot(ctx context.Context) (wire.SnapshotInfo, error) {
	cur, reason := n.stage.Get()
	r := n.raft()
	switch {
	case cur == stage.Failed || cur == stage.Stopping:
		return wire.SnapshotInfo{}, api.Unavailable(string(cur), cmp.Or(reason, string(cur)), "this node takes no snapshot at stage %s", cur)
	case r == nil && n.mode.gossipOnly():
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

// ClusterHealth is GET /v1/cluster/health (api.HealthReporter).
func (n *server) ClusterHealth(ctx context.Context) (wire.ClusterHealth, error) {
	return n.mode.health(ctx)
}

// ReplaceMember is ticketctl cluster replace OLD --with NEW (admin; the
// leader only; api.Replacer). NEW must be an alive gossip member (gossip
// admits only trusted keys), not retired, Raft-eligible and not already a
// voter; OLD a server of the Raft configuration other than this leader,
// whose removal leaves a quorum of the remaining voters alive in gossip.
// OLD's NodeId is then recorded retired (the reconciler removes it, in
// its quorum-safe order, and never adds it back), NEW is added as a
// non-voter when it is not in the configuration yet, and the reconciler,
// triggered, promotes it once it has caught up. The caller waits for that
// (ticketctl --wait).
func (n *server) ReplaceMember(ctx context.Context, old, repl string) (wire.Replaced, error) {
	return n.mode.replace(ctx, old, repl)
}
