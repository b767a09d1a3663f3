package mesh

import (
	"errors"
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
		// Addresses that name their server, as node/cluster/node.go's
		// ServerAddressProvider returns them.
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: RaftAddress(raft.ServerID(id), m.Addr())})
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

// SPEC §3.4, §5: Raft traffic for server S reaches only the process whose
// NodeId is S. node-b failed and came back as node-b~2 on the same mesh
// address with the same key: a Raft dial for node-b must not reach it —
// an empty data dir would answer AppendEntries and RequestVote as node-b
// and still count in quorums — not on a new session, and not on the
// session node-b~2 already has with the dialer.
func TestRaftDialRefusesAnotherGeneration(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	a := start(t, testConfig(t, "node-a", trust))
	b2 := start(t, testConfig(t, "node-b~2", trust))
	la, lb := NewStreamLayer(a.Mesh, ClassRaft), NewStreamLayer(b2.Mesh, ClassRaft)
	defer la.Close()
	defer lb.Close()

	_, err := la.Dial(RaftAddress("node-b", b2.Addr()), 5*time.Second)
	var he *HandshakeError
	if !errors.As(err, &he) || he.Reason != ReasonWrongPeer || he.ID != "node-b~2" {
		t.Fatalf("Raft dial for node-b answered by node-b~2: %v, want a wrong_peer refusal naming node-b~2", err)
	}
	if a.handshakes(t, ReasonWrongPeer) != 1 || len(a.Peers()) != 0 {
		t.Fatalf("wrong_peer count %v, sessions %+v", a.handshakes(t, ReasonWrongPeer), a.Peers())
	}
	// A bare address names no server: refused before any dial.
	if _, err := la.Dial(raft.ServerAddress(b2.Addr()), 5*time.Second); !errors.Is(err, ErrRaftAddress) {
		t.Fatalf("Raft dial of a bare address: %v, want ErrRaftAddress", err)
	}
	// The right NodeId is served, and its session is kept under it.
	c, err := la.Dial(RaftAddress("node-b~2", b2.Addr()), 5*time.Second)
	if err != nil {
		t.Fatalf("Raft dial for node-b~2: %v", err)
	}
	defer c.Close()
	in := accept(t, lb)
	defer in.Close()
	if in.PeerID() != "node-a" || c.(*Stream).PeerID() != "node-b~2" {
		t.Fatalf("peers %q and %q, want node-a and node-b~2", in.PeerID(), c.(*Stream).PeerID())
	}
	if p := a.Peers(); len(p) != 1 || p[0].ID != "node-b~2" || p[0].Addr != b2.Addr() {
		t.Fatalf("sessions %+v, want one with node-b~2 at %s", p, b2.Addr())
	}
	// With that session up, a dial for node-b at the same address still
	// does not use it.
	if _, err := la.Dial(RaftAddress("node-b", b2.Addr()), 5*time.Second); !errors.As(err, &he) || he.Reason != ReasonWrongPeer {
		t.Fatalf("Raft dial for node-b with node-b~2's session up: %v, want wrong_peer", err)
	}
}

func TestSplitRaftAddress(t *testing.T) {
	for a, ok := range map[raft.ServerAddress]bool{
		RaftAddress("node-1", "127.0.0.1:7951"): true, RaftAddress("node-1~2", "[::1]:7951"): true,
		"127.0.0.1:7951": false, "@127.0.0.1:7951": false, "node-1@": false, "node-1~1@h:1": false, "no de@h:1": false,
	} {
		id, addr, err := SplitRaftAddress(a)
		if (err == nil) != ok {
			t.Errorf("SplitRaftAddress(%q) = %v, want ok=%v", a, err, ok)
		}
		if ok && RaftAddress(raft.ServerID(id), addr) != a {
			t.Errorf("SplitRaftAddress(%q) = %q, %q: does not join back", a, id, addr)
		}
	}
}
