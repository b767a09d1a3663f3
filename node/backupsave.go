package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/backup"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// Backup is GET /v1/cluster/backup (admin; api.Backuper; SPEC §3.4): a
// consistent copy of the state, taken by the leader. It commits a Barrier
// (every entry acknowledged before the request is applied), confirms its
// leadership, takes a Raft snapshot (as Consul's snapshot save does: the
// log is compacted as by any snapshot) and serves that snapshot's file,
// verified first — a snapshot the node could not restore is never sent.
// A follower answers not_leader naming the leader; a client given every
// node's address finds it.
func (n *server) Backup(ctx context.Context) (*api.Backup, error) {
	if e := n.mode.removed(); e != nil {
		return nil, e
	}
	cur, reason := n.stage.Get()
	r := n.raft()
	switch {
	case cur == stage.Failed || cur == stage.Stopping:
		return nil, api.Unavailable(string(cur), cmp.Or(reason, string(cur)), "this node takes no backup at stage %s", cur)
	case r == nil:
		if err := n.mode.notLeader("a backup is taken by the leader"); err != nil {
			return nil, err
		}
		return nil, api.Unavailable(string(cur), cmp.Or(reason, string(cur)), "raft is not open yet (stage %s)", cur)
	case r.State() != raft.Leader:
		if err := n.mode.notLeader("a backup is taken by the leader"); err != nil {
			return nil, err
		}
		return nil, api.NotLeader(string(stage.Raft), "this node does not lead yet (stage %s)", cur)
	}
	c := n.cons.Load()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Barrier(ctx); err != nil {
		return nil, api.Unavailable("", "raft", "backup: the barrier did not commit: %v", err)
	}
	if err := c.VerifyLeader(ctx); err != nil {
		return nil, api.NotLeader(string(stage.Raft), "backup: leadership not verified: %v", err)
	}
	start := time.Now()
	meta, err := n.snapshotForBackup(ctx, r)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(n.dir.Snapshots(), meta.ID, "state.bin")
	f, err := os.Open(path)
	if err != nil {
		return nil, api.Unavailable("", "snapshot", "backup: opening snapshot %s: %v (taken over by a newer one? try again)", meta.ID, err)
	}
	b, err := backupOf(f, n.cfg.Cluster.Name, meta)
	if err != nil {
		f.Close()
		n.log.Error("backup refused: the snapshot just taken does not verify", "snapshot", path, "err", err)
		return nil, fmt.Errorf("node: backup: %s: %w", path, err)
	}
	n.log.Info("backup served", "snapshot", meta.ID, "index", meta.Index, "term", meta.Term, "tickets", b.Header.Tickets,
		"size_bytes", b.Header.Size(), "took", time.Since(start).Round(time.Millisecond))
	return b, nil
}

// snapshotForBackup takes a Raft snapshot, trying again while Raft says it
// cannot now (one in progress; a configuration change not applied yet).
func (n *server) snapshotForBackup(ctx context.Context, r *raft.Raft) (*raft.SnapshotMeta, error) {
	c := n.cons.Load()
	for {
		f := r.Snapshot()
		err := c.Wait(ctx, f)
		if err == nil {
			meta, rc, err := f.Open()
			if err != nil {
				return nil, fmt.Errorf("node: backup: opening the new snapshot: %w", err)
			}
			rc.Close()
			return meta, nil
		}
		if !strings.Contains(err.Error(), "in progress") && !strings.Contains(err.Error(), "cannot take snapshot now") {
			return nil, api.Unavailable("", "snapshot", "backup: the snapshot failed: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil, api.Unavailable("", "timeout", "backup: no snapshot could be taken within the deadline (last: %v)", err)
		case <-time.After(100 * time.Millisecond): // Raft's snapshot in progress: try again
		}
	}
}

// backupOf verifies the snapshot file f of meta and returns it as a
// backup served by nodeID, f rewound to its start.
func backupOf(f *os.File, nodeID string, meta *raft.SnapshotMeta) (*api.Backup, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != meta.Size {
		return nil, fmt.Errorf("%d bytes, its metadata says %d", fi.Size(), meta.Size)
	}
	s, count, err := ticket.ScanSnapshot(f)
	if err != nil {
		return nil, err
	}
	if s.Raft == nil || s.Raft.Index != meta.Index || s.Raft.Term != meta.Term {
		return nil, errors.New("its Raft position is not its metadata's")
	}
	h, err := backup.Header(nodeID, s, count, uint64(meta.Size))
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return &api.Backup{Header: h, State: f}, nil
}
