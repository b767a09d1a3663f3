package node

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/peerstatus"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/protocol"
)

// waitReady waits until every named node answers /readyz ok.
func (tc *testCluster) waitReady(names ...string) {
	tc.t.Helper()
	for _, name := range names {
		cm := tc.nodes[name]
		waitFor(tc.t, name+" ready", 20*time.Second, func() bool { _, err := cm.tn.c.Ready(bg); return err == nil })
	}
}

// leader waits for exactly one ready leader and returns it.
func (tc *testCluster) leader() string {
	tc.t.Helper()
	var leader string
	// Under -race a starved process stalled for seconds at a time (load
	// 8, every gossip probe and mesh handshake timing out) and a 10-node
	// cluster's first leaders stepped down for 20 s; the wait ends as soon
	// as one leads.
	d := 20 * time.Second
	if tc.scaled() {
		d = time.Minute
	}
	waitFor(tc.t, "exactly one ready leader", d, func() bool {
		ls := tc.leaders()
		if len(ls) == 1 {
			leader = ls[0]
		}
		return len(ls) == 1
	})
	return leader
}

// memberMeta is name's metadata as viewer's gossip sees it.
func memberMeta(viewer *server, name string) (membership.Meta, bool) {
	for _, m := range clusterOf(viewer).Membership().Members() {
		if m.ID == name {
			return m.Meta, true
		}
	}
	return membership.Meta{}, false
}

// SPEC §3.5: every node of a formed cluster becomes ready once uniform,
// followers included (they forward); each advertises its role and a
// healthy clock with its bound. A follower whose clock then fails
// advertises FAILED at once (metadata refresh) and is not ready; the
// others stay ready — another voter's FAILED does not take them down.
func TestClusterFollowersReadyAfterUniform(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3")
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	leader := tc.leader()
	tc.waitReady(tc.names...)
	lc := tc.nodes[leader]
	var victim string
	var others []string
	for _, name := range tc.names {
		if name == leader {
			continue
		}
		if victim == "" {
			victim = name
		} else {
			others = append(others, name)
		}
	}
	others = append(others, leader)
	waitFor(t, "every node advertises its role", 10*time.Second, func() bool {
		for _, name := range tc.names {
			m, ok := memberMeta(lc.n, name)
			if !ok || m.Role != membership.RoleVoter || m.ClockState != membership.ClockHealthy || m.ClockSampleUnixMs == 0 || m.ClockBoundMs == 0 {
				return false
			}
		}
		return true
	})
	h, err := tc.nodes[victim].tn.c.Ready(bg)
	if err != nil || h.Stage != string(stage.Ready) {
		t.Fatalf("follower %s /readyz: %+v, %v", victim, h, err)
	}

	vc := tc.nodes[victim]
	wrong := protocol.NewKey([]byte("another-secret-that-is-long-enough-000"))
	vc.an.agent.SetHandler(func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(wrong, req.Nonce, uint64(vc.an.clk.WallNs()/1e6), 3, true, 100)}
	})
	if !vc.an.ts.Fire("probe", probeFireWait) {
		t.Fatal("probe ticker not taken")
	}
	waitFor(t, victim+" advertises a failed clock", 10*time.Second, func() bool {
		m, ok := memberMeta(lc.n, victim)
		return ok && m.ClockState == membership.ClockFailed
	})
	var ce *client.Error
	if _, err := vc.tn.c.Ready(bg); !errors.As(err, &ce) || ce.StatusCode != 503 {
		t.Fatalf("%s with a failed clock: /readyz %v", victim, err)
	}
	// (Eventually, not at one instant: on a loaded machine an unrelated
	// election can make a node briefly leaderless.)
	for _, name := range others {
		waitFor(t, name+" ready after "+victim+"'s clock failed (another voter's FAILED must not take it down)", 15*time.Second, func() bool {
			_, err := tc.nodes[name].tn.c.Ready(bg)
			return err == nil
		})
	}
	if _, err := tc.nodes[others[0]].tn.c.Grant(bg, "still", "h", 30); err != nil {
		t.Fatalf("grant after one voter's clock failed: %v", err)
	}
}

// SPEC §3.5, §5: a node configured with another Δ joining a formed cluster
// never becomes ready, says why on /readyz (naming a voter and both Δ),
// and is never added to Raft by the reconciler — while a node with the
// right Δ that joins after it is added (so passes ran that saw it).
func TestClusterDeltaMismatchNeverReady(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "odd", "even")
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	leader := tc.leader()
	lc := tc.nodes[leader]
	odd := tc.startWith("odd", first.gossipAddr(), 0, func(c *Config) { c.Clock.DeltaMs = 400 })
	waitFor(t, "the leader sees odd alive", 10*time.Second, func() bool {
		_, ok := memberMeta(lc.n, "odd")
		return ok
	})
	var ce *client.Error
	waitFor(t, "odd says delta_mismatch", 10*time.Second, func() bool {
		_, err := odd.tn.c.Ready(bg)
		return errors.As(err, &ce) && ce.Reason == "delta_mismatch"
	})
	if ce.Stage != string(stage.Uniform) || !strings.Contains(ce.Message, "(Δ 500 ≠ 400)") {
		t.Fatalf("odd /readyz: stage %q, %q", ce.Stage, ce.Message)
	}
	tc.start("even", first.gossipAddr(), 0)
	inConfig := func(id string) bool {
		f := lc.n.raft().GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == id {
				return true
			}
		}
		return false
	}
	waitFor(t, "even added to Raft", 15*time.Second, func() bool { return inConfig("even") })
	waitFor(t, "the reconciler has no addition left", 15*time.Second, func() bool { return pendingAdds(lc.n) == 0 })
	if inConfig("odd") {
		t.Fatal("the reconciler added the node with another Δ")
	}
	tc.waitReady("even")
	if _, err := odd.tn.c.Ready(bg); !errors.As(err, &ce) || ce.Reason != "delta_mismatch" {
		t.Fatalf("odd after even joined: %v", err)
	}
	if got := lc.n.countMembers(raft.Voter); got != 3 {
		t.Fatalf("voters = %d, want 3", got)
	}
}

// pendingAdds counts the AddNonvoter changes the leader's reconciler would
// still make on its current view (0: every addition was applied).
func pendingAdds(n *server) int {
	rr := n.raft()
	servers, err := reconcile.NewRaftAdapter(rr, time.Second).GetConfiguration()
	if err != nil {
		return -1
	}
	c := 0
	for _, ch := range reconcile.Plan(reconcile.Input{Leader: n.cfg.Cluster.Name, Members: clusterOf(n).ReconcileMembers(rr), Config: servers, Limits: reconcile.DefaultLimits()}) {
		if ch.Kind == reconcile.AddNonvoter {
			c++
		}
	}
	return c
}

// roles counts the voters and non-voters of n's Raft configuration and
// reports whether every named node is in it.
func roles(n *server, names ...string) (voters, nonvoters int, all bool) {
	f := n.raft().GetConfiguration()
	if f.Error() != nil {
		return 0, 0, false
	}
	in := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = true
		if s.Suffrage == raft.Voter {
			voters++
		} else {
			nonvoters++
		}
	}
	for _, name := range names {
		if !in[name] {
			return voters, nonvoters, false
		}
	}
	return voters, nonvoters, true
}

// SPEC §5 "Bounded core", issue 12 item 2: nodes with bootstrap_expect 0
// join a one-voter cluster as non-voters and are promoted only once caught
// up (progress asked over the mesh): two eligible → both vote, three →
// three voters, four → three voters and one standby. Every one ends ready.
func TestClusterJoinAndPromote(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "n4")
	first := tc.start("n1", "", 1)
	tc.waitReady("n1")
	lc := tc.nodes["n1"]
	tc.start("n2", first.gossipAddr(), 0)
	waitFor(t, "n2 promoted: two eligible nodes both vote", 15*time.Second, func() bool {
		v, nv, all := roles(lc.n, "n1", "n2")
		return all && v == 2 && nv == 0
	})
	tc.start("n3", first.gossipAddr(), 0)
	tc.start("n4", first.gossipAddr(), 0)
	waitFor(t, "three voters and one standby", 30*time.Second, func() bool {
		v, nv, all := roles(lc.n, tc.names...)
		return all && v == 3 && nv == 1
	})
	tc.waitReady(tc.names...)
	// Standby by rank: n4 (priority ties, then NodeId).
	waitFor(t, "n4 advertises standby", 10*time.Second, func() bool {
		m, ok := memberMeta(lc.n, "n4")
		return ok && m.Role == membership.RoleStandby
	})
	if _, err := tc.nodes["n4"].tn.c.Grant(bg, "via-standby", "h", 30); err != nil {
		t.Fatalf("grant through the standby: %v", err)
	}
}

// SPEC §5 "Bootstrap": conflicting bootstrap_expect values never
// bootstrap: every node says so on /readyz and none has a configuration.
func TestClusterConflictingBootstrapExpect(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "a", "b", "c")
	a := tc.start("a", "", 3)
	tc.start("b", a.gossipAddr(), 3)
	tc.start("c", a.gossipAddr(), 2)
	var ce *client.Error
	for _, name := range tc.names {
		cm := tc.nodes[name]
		waitFor(t, name+" says conflicting bootstrap_expect", 10*time.Second, func() bool {
			_, err := cm.tn.c.Ready(bg)
			return errors.As(err, &ce) && strings.Contains(ce.Message, "conflicting bootstrap_expect")
		})
		if ce.Stage != string(stage.Raft) {
			t.Fatalf("%s: stage %q", name, ce.Stage)
		}
	}
	for _, name := range tc.names {
		if s, err := tc.nodes[name].n.cons.Load().Servers(); err != nil || len(s) != 0 {
			t.Fatalf("%s has a configuration %v (%v)", name, s, err)
		}
	}
}

// Consul's maybeBootstrap (issue 11 item 5): before bootstrapping, a node
// asks every peer over the mesh whether it holds Raft state; one that
// does stops it, and /readyz says so. The peer's answer carries its log
// index (what promotion judges).
func TestClusterSafeBootstrapAsksPeers(t *testing.T) {
	t.Parallel()
	// n5 is trusted but never started: no mesh session to it can exist.
	tc := newTestCluster(t, "n1", "n2", "n3", "x4", "n5")
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	tc.leader()
	x := tc.start("x4", first.gossipAddr(), 3)
	var n1meta membership.Meta
	waitFor(t, "x4 sees n1", 10*time.Second, func() bool {
		var ok bool
		n1meta, ok = memberMeta(x.n, "n1")
		return ok && n1meta.MeshAddr != ""
	})
	// (Retried: under load one query can run out of its deadline.)
	var st peerstatus.Status
	var err error
	waitFor(t, "n1's peer status", 15*time.Second, func() bool {
		st, err = clusterOf(x.n).QueryPeer(bg, "n1", n1meta.MeshAddr)
		return err == nil
	})
	if !st.HasState || st.LastIndex == 0 {
		t.Fatalf("n1's peer status: %+v, %v (want Raft state and a log)", st, err)
	}
	servers := []raft.Server{{ID: "n1", Address: raft.ServerAddress(n1meta.MeshAddr)}, {ID: "x4", Address: raft.ServerAddress(clusterOf(x.n).Mesh().Addr())}}
	if clusterOf(x.n).SafeBootstrap(bg, x.n.cons.Load(), servers) {
		t.Fatal("safeBootstrap went ahead with a peer holding Raft state")
	}
	if why := clusterOf(x.n).BootstrapRefusal(); !strings.Contains(why, "n1 reports existing Raft state") {
		t.Fatalf("refusal %q", why)
	}
	// (A query for an id with a live session uses that session, whatever
	// the address: it is authenticated as that id.)
	if _, err := clusterOf(x.n).QueryPeer(bg, "n5", n1meta.MeshAddr); err == nil {
		t.Fatal("a peer-status query to n1's address accepted it as n5")
	}
}

// SPEC §5 "Bounded core", issue 12 item 1: a gossip-only client node
// (raft.role client) has no Raft at all — no raft.db in its data dir, never
// in the configuration — advertises the client role, learns the leader
// from the voters over the mesh, becomes ready once uniform and serves the
// API by forwarding: a grant through it is the leader's.
func TestClusterGossipOnlyClient(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "c1")
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	tc.leader()
	c := tc.startWith("c1", first.gossipAddr(), 0, func(c *Config) { c.Cluster.Raft.Role = "client" })
	tc.waitReady("c1")
	h, err := c.tn.c.Ready(bg)
	if err != nil || h.Stage != string(stage.Ready) {
		t.Fatalf("client /readyz: %+v, %v", h, err)
	}
	// Retried (the same holder's Grant is idempotent): on a loaded machine
	// an election can end a term between the client's forward and the
	// leader's check; the grant must still go through the client.
	var g *client.Lease
	waitFor(t, "a grant through the client", 15*time.Second, func() bool {
		g, err = c.tn.c.Grant(bg, "via-client", "w", 30)
		return err == nil && g.Token != 0
	})
	lc := tc.nodes[tc.leader()]
	got, err := lc.tn.c.Get(bg, "via-client")
	if err != nil || got.Token != g.Token {
		t.Fatalf("leader reads %+v, %v; want token %d", got, err, g.Token)
	}
	if fg, err := c.tn.c.Get(bg, "via-client"); err != nil || fg.Token != g.Token {
		t.Fatalf("client reads %+v, %v", fg, err)
	}
	waitFor(t, "the leader sees c1 as a client", 10*time.Second, func() bool {
		m, ok := memberMeta(lc.n, "c1")
		return ok && m.Role == membership.RoleClient && !m.RaftEligible
	})
	waitFor(t, "the reconciler has no addition left", 15*time.Second, func() bool { return pendingAdds(lc.n) == 0 })
	if _, _, all := roles(lc.n, "c1"); all {
		t.Fatal("the client is in the Raft configuration")
	}
	if c.n.raft() != nil {
		t.Fatal("the client opened Raft")
	}
	if st, err := c.tn.c.Status(bg); err != nil || st.Role != "client" || st.Leader != lc.n.cfg.Cluster.Name {
		t.Fatalf("client status %+v %v: want role client and leader %s", st, err, lc.n.cfg.Cluster.Name)
	}
	if _, err := os.Stat(c.n.dir.RaftDB()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the client's data dir has %s (%v)", c.n.dir.RaftDB(), err)
	}
}

// SPEC §5 "Bootstrap": bootstrap_expect met is not enough — the same
// members must stay for the stability window. With a window far longer
// than the observation, three nodes that see each other do not bootstrap.
func TestClusterBootstrapWaitsForStableWindow(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "a", "b", "c")
	tc.window = time.Hour
	a := tc.start("a", "", 3)
	b := tc.start("b", a.gossipAddr(), 3)
	c := tc.start("c", a.gossipAddr(), 3)
	waitFor(t, "all three see each other", 10*time.Second, func() bool {
		return aliveCount(a.n) == 3 && aliveCount(b.n) == 3 && aliveCount(c.n) == 3
	})
	deadline := time.Now().Add(3 * consensusElection()) // bounded observation
	for time.Now().Before(deadline) {
		for _, cm := range []*clusterMember{a, b, c} {
			if s, err := cm.n.cons.Load().Servers(); err != nil || len(s) != 0 {
				t.Fatalf("%s bootstrapped inside the stability window: %v (%v)", cm.n.cfg.Cluster.Name, s, err)
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded observation
	}
}
