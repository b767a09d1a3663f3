package node

import (
	"fmt"
	"testing"
	"time"
)

// Issue 23 (Low), SPEC §4.1: POST /v1/cluster/snapshot on a ready follower
// takes that follower's own snapshot (as etcd's snapshot save does against
// any member): it answers 200 naming the node and its role, the follower's
// last snapshot index moves, the leader's does not.
func TestClusterSnapshotOnFollower(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t, func(tc *testCluster) { tc.slow = true })
	lc := tc.nodes[leader]
	for i := range 5 {
		if _, err := lc.tn.c.Grant(bg, fmt.Sprint("s", i), "h", 60); err != nil {
			t.Fatal(err)
		}
	}
	f := tc.others(leader)[0]
	id := f.n.cfg.Cluster.Name
	applied := lc.n.raft().AppliedIndex()
	// Raft's AppliedIndex counts entries handed to the state machine, which
	// applies them on its own goroutine: wait for the tickets themselves
	// (SnapshotInfo.Tickets is the state machine's count when the
	// snapshot is asked for).
	waitFor(t, "the follower to apply the grants", 10*time.Second, func() bool {
		return f.n.raft().AppliedIndex() >= applied && f.n.fsm.Len() == 5
	})
	leaderSnap := lc.n.raft().Stats()["last_snapshot_index"]
	info, err := f.n.Snapshot(bg)
	if err != nil {
		t.Fatalf("snapshot on the follower %s: %v", id, err)
	}
	if info.NodeID != id || info.Role != "follower" || info.Index < applied || info.Tickets != 5 || info.SizeBytes == 0 {
		t.Fatalf("the follower's snapshot: %+v (applied %d)", info, applied)
	}
	if got := f.n.raft().Stats()["last_snapshot_index"]; got != fmt.Sprint(info.Index) {
		t.Fatalf("the follower's last snapshot index %s, want %d", got, info.Index)
	}
	if got := lc.n.raft().Stats()["last_snapshot_index"]; got != leaderSnap {
		t.Fatalf("the leader's last snapshot index moved from %s to %s", leaderSnap, got)
	}
}
