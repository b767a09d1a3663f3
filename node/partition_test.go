package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// netFaults is the in-process cluster's mesh fault injector: every mesh
// connection is dialed through it, so a test can cut a pair of nodes
// apart (existing connections closed, new dials refused) and heal it.
// Gossip is not cut: a partition here is Raft's and forwarding's.
type netFaults struct {
	tc    *testCluster
	mu    sync.Mutex
	cut   map[[2]string]bool
	conns map[[2]string][]net.Conn
}

func newNetFaults(tc *testCluster) *netFaults {
	f := &netFaults{tc: tc, cut: map[[2]string]bool{}, conns: map[[2]string][]net.Conn{}}
	tc.faults = f
	return f
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// owner is the node whose mesh listens on addr ("" if none known).
func (f *netFaults) owner(addr string) string {
	for name, cm := range f.tc.nodes {
		if cm != nil && cm.n != nil && cm.n.cl != nil && cm.n.cl.mesh != nil && cm.n.cl.mesh.Addr() == addr {
			return name
		}
	}
	return ""
}

var errCut = errors.New("netFaults: partitioned")

func (f *netFaults) dialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := f.owner(addr)
		p := pair(from, to)
		f.mu.Lock()
		cut := f.cut[p]
		f.mu.Unlock()
		if cut {
			return nil, errCut
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cut[p] { // cut while dialing
			c.Close()
			return nil, errCut
		}
		f.conns[p] = append(f.conns[p], c)
		return c, nil
	}
}

// partition cuts name off from every other node.
func (f *netFaults) isolate(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for other := range f.tc.nodes {
		if other == name {
			continue
		}
		p := pair(name, other)
		f.cut[p] = true
		for _, c := range f.conns[p] {
			c.Close()
		}
		delete(f.conns, p)
	}
}

// heal removes every cut.
func (f *netFaults) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = map[[2]string]bool{}
}

// SPEC §4, §5: a leader cut off from both followers can no longer commit
// or read; the majority elects a new leader, which keeps the old holder's
// ticket exactly as granted (never released by the partition, never
// extended by the leader change: its server expiry is byte-identical), and
// refuses another holder. After healing there is exactly one leader.
func TestClusterPartitionedLeaderCannotCommit(t *testing.T) {
	tc := newTestCluster(t, "n1", "n2", "n3")
	faults := newNetFaults(tc)
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	old := tc.leader()
	oc := tc.nodes[old]
	g, err := oc.tn.c.Grant(bg, "lock", "alice", 250)
	if err != nil {
		t.Fatal(err)
	}
	before, err := oc.tn.c.Get(bg, "lock")
	if err != nil {
		t.Fatal(err)
	}

	faults.isolate(old)
	var next string
	waitFor(t, "a new leader among the majority", 20*time.Second, func() bool {
		for _, cm := range tc.others(old) {
			st, err := cm.tn.c.Status(bg)
			if err == nil && st.Role == "leader" && st.Ready {
				next = cm.n.cfg.Cluster.Name
				return true
			}
		}
		return false
	})
	nc := tc.nodes[next]
	// The isolated old leader commits nothing and serves no stale read.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := oc.tn.c.Grant(ctx, "other", "bob", 30); err == nil {
		t.Fatal("the isolated old leader acknowledged a grant")
	}
	if _, err := oc.tn.c.Get(ctx, "lock"); err == nil {
		t.Fatal("the isolated old leader served a read")
	}
	// The new leader: alice still holds, unchanged; bob is refused.
	got, err := nc.tn.c.Get(bg, "lock")
	if err != nil || *got != *before {
		t.Fatalf("new leader's view %+v %v, want exactly %+v", got, err, before)
	}
	if _, err := nc.tn.c.Grant(bg, "lock", "bob", 30); err == nil {
		t.Fatal("the new leader granted a held ticket to another holder")
	}
	if r, err := nc.tn.c.Renew(bg, "lock", "alice", g.Token, 250); err != nil || r.Token != g.Token {
		t.Fatalf("alice renews through the new leader: %+v %v", r, err)
	}

	faults.heal()
	waitFor(t, "one leader after healing", 20*time.Second, func() bool {
		return len(tc.leaders()) == 1
	})
	if ls := tc.leaders(); len(ls) != 1 || ls[0] == "" {
		t.Fatalf("leaders after healing: %v", ls)
	}
}
