package mesh

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type recordFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *recordFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return nil
}

func (f *recordFSM) has(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.applied {
		if a == s {
			return true
		}
	}
	return false
}

func (f *recordFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("no snapshots in this test")
}
func (f *recordFSM) Restore(io.ReadCloser) error { return fmt.Errorf("no snapshots in this test") }

// SPEC §5 Mesh/Raft: Raft runs over mesh streams, not a port of its own:
// three nodes elect a leader and replicate an Apply.
func TestRaftOverStreamLayer(t *testing.T) {
	ids := []string{"node-a", "node-b", "node-c"}
	trust := newKeyMap(ids...)
	var servers []raft.Server
	var meshes []*node
	for _, id := range ids {
		m := start(t, testConfig(t, id, trust))
		meshes = append(meshes, m)
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Addr())})
	}
	var rafts []*raft.Raft
	var fsms []*recordFSM
	for i, id := range ids {
		trans := raft.NewNetworkTransport(NewStreamLayer(meshes[i].Mesh, ClassRaft), 3, 2*time.Second, io.Discard)
		if got := string(trans.LocalAddr()); got != meshes[i].Addr() {
			t.Fatalf("transport address %s, mesh address %s", got, meshes[i].Addr())
		}
		cfg := raft.DefaultConfig()
		cfg.LocalID = raft.ServerID(id)
		cfg.HeartbeatTimeout = 300 * time.Millisecond
		cfg.ElectionTimeout = 300 * time.Millisecond
		cfg.LeaderLeaseTimeout = 150 * time.Millisecond
		cfg.CommitTimeout = 20 * time.Millisecond
		cfg.LogOutput = io.Discard
		fsm := &recordFSM{}
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(cfg, fsm, store, store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := r.Shutdown().Error(); err != nil {
				t.Error(err)
			}
			trans.Close()
		})
		rafts = append(rafts, r)
		fsms = append(fsms, fsm)
	}
	if err := rafts[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	var leader *raft.Raft
	eventually(t, "a leader", func() bool {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				leader = r
				return true
			}
		}
		return false
	})
	if err := leader.Apply([]byte("grant lock-1"), 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fsms {
		eventually(t, ids[i]+" applied the entry", func() bool { return f.has("grant lock-1") })
	}
	for i, r := range rafts {
		if r == leader && len(meshes[i].Peers()) != 2 {
			t.Fatalf("leader %s has mesh sessions %+v, want both followers", ids[i], meshes[i].Peers())
		}
	}
}
