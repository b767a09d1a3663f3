package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest/faultnet"
)

// faulty is a formThree setup that routes mesh and gossip through
// fault-injecting nets, returned through the pointers.
func faulty(meshNet, gossipNet **faultnet.Net) func(*testCluster) {
	return func(tc *testCluster) { *meshNet, *gossipNet = withFaults(tc) }
}

// gossipState is id's gossip state in via's /v1/cluster/members (the
// handler's backend, server.Members: the endpoint needs the admin token)
// and its Raft suffrage there.
func gossipState(t *testing.T, via *clusterMember, id string) (gossip, suffrage string) {
	t.Helper()
	ms, err := via.n.Members(bg)
	if err != nil {
		return "", ""
	}
	for _, m := range ms.Members {
		if m.ID == id {
			return m.Gossip, m.Suffrage
		}
	}
	return "", ""
}

// follower is a node other than leader and than avoid.
func (tc *testCluster) follower(leader, avoid string) string {
	for _, name := range tc.names {
		if name != leader && name != avoid {
			return name
		}
	}
	tc.t.Fatal("no follower")
	return ""
}

// gossipCut forms three nodes, cuts a follower off from the gossip only
// (its mesh intact) and waits until both others show it dead or suspect
// in /v1/cluster/members.
func gossipCut(t *testing.T) (tc *testCluster, gossipNet *faultnet.Net, leader, victim string) {
	t.Helper()
	var meshNet *faultnet.Net
	tc, leader = formThree(t, faulty(&meshNet, &gossipNet))
	victim = tc.follower(leader, "n1") // n1 has no join address to rejoin through
	gossipNet.Isolate(victim)
	for _, cm := range tc.others(victim) {
		waitFor(t, cm.n.cfg.Cluster.Name+" sees "+victim+" not alive", 20*time.Second, func() bool {
			g, _ := gossipState(t, cm, victim)
			return g == "dead" || g == "suspect"
		})
	}
	return tc, gossipNet, leader, victim
}

// SPEC §5 "Membership": a follower cut off from the gossip only shows
// dead or suspect in the others' /v1/cluster/members, the leader keeps
// granting, and after healing the follower is alive again everywhere and
// a voter again.
func TestClusterGossipCut(t *testing.T) {
	tc, gossipNet, leader, victim := gossipCut(t)
	lc := tc.nodes[leader]
	g, _ := grantRetry(t, lc, "during-cut", "w", 60)
	gossipNet.HealAll()
	for _, cm := range tc.others(victim) {
		waitFor(t, cm.n.cfg.Cluster.Name+" sees "+victim+" alive again", 30*time.Second, func() bool {
			g, _ := gossipState(t, cm, victim)
			return g == "alive"
		})
	}
	waitFor(t, victim+" a voter again", 30*time.Second, func() bool {
		_, s := gossipState(t, tc.nodes[tc.leader()], victim)
		return s == "voter"
	})
	vc := tc.nodes[victim]
	waitFor(t, victim+" reads the grant made during the cut", 20*time.Second, func() bool {
		got, err := vc.tn.c.Get(bg, "during-cut")
		return err == nil && got.Token == g.Token
	})
}

// SPEC §5 "Reconciler": a voter that is gossip-dead but still in Raft
// contact (its mesh intact) is not a dead voter ("no heartbeat and
// gossip-dead"): it keeps its vote, and Raft commits through it.
func TestClusterGossipCutVoterKept(t *testing.T) {
	tc, _, leader, victim := gossipCut(t)
	lc, vc := tc.nodes[leader], tc.nodes[victim]
	g, _ := grantRetry(t, vc, "through-victim", "w", 60) // forwarded over the mesh
	if got, err := tc.nodes[tc.leader()].tn.c.Get(bg, "through-victim"); err != nil || got.Token != g.Token {
		t.Fatalf("leader reads %+v %v, want token %d", got, err, g.Token)
	}
	// Bounded observation over many reconcile rounds (debounce 100 ms):
	// the victim keeps its vote while its Raft heartbeats flow.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if ids := configIDs(lc); !slices.Contains(ids, victim) {
			t.Fatalf("the reconciler removed %s (gossip-dead, Raft alive): config %v", victim, ids)
		}
		if _, s := gossipState(t, lc, victim); s != "voter" {
			t.Fatalf("%s suffrage %q in the leader's members, want voter", victim, s)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded observation
	}
}

// SPEC §4, §5: the leader cut one way on the mesh (it still sends, it
// receives nothing) steps down; the two others elect a leader; at most one
// leader commits: every grant acknowledged anywhere during the cut is
// there after healing with the same token, alice's ticket is never granted
// to bob, and it is exactly as granted.
func TestClusterLeaderOneWayCut(t *testing.T) {
	t.Parallel()
	var meshNet, gossipNet *faultnet.Net
	tc, _ := formThree(t, faulty(&meshNet, &gossipNet))
	old, g, before := tc.grantAlice()
	oc := tc.nodes[old]
	for _, cm := range tc.others(old) {
		meshNet.Cut(cm.n.cfg.Cluster.Name, old) // old → others still flows
	}
	next := tc.leaderAmong(tc.others(old))
	waitFor(t, "the deaf old leader stepped down", 20*time.Second, func() bool {
		st, err := oc.tn.c.Status(bg)
		return err == nil && st.Role != "leader"
	})
	nc := tc.nodes[next]
	if got, err := getRetry(t, nc, "lock"); err != nil || *got != *before {
		t.Fatalf("new leader's view %+v %v, want exactly %+v", got, err, before)
	}
	// Grants through every node: whatever is acknowledged must survive.
	acked := map[string]uint64{}
	for _, name := range tc.names {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		if r, err := tc.nodes[name].tn.c.Grant(ctx, "fresh-"+name, "w", 60); err == nil {
			acked["fresh-"+name] = r.Token
		}
		if _, err := tc.nodes[name].tn.c.Grant(ctx, "lock", "bob", 30); err == nil {
			t.Fatalf("bob was granted alice's ticket through %s", name)
		}
		cancel()
	}
	if _, ok := acked["fresh-"+next]; !ok {
		t.Fatalf("the new leader %s did not grant (acked %v)", next, acked)
	}

	meshNet.HealAll()
	leader := tc.leader()
	lc := tc.nodes[leader]
	for name, token := range acked {
		if got, err := getRetry(t, lc, name); err != nil || got.Token != token {
			t.Fatalf("acknowledged %s (token %d) after healing: %+v %v", name, token, got, err)
		}
	}
	if got, err := getRetry(t, lc, "lock"); err != nil || got.Holder != "alice" || got.Token != g.Token {
		t.Fatalf("lock after healing: %+v %v, want alice's token %d", got, err, g.Token)
	}
}

// SPEC §5: a mesh with 20 ms (+ up to 5 ms) each way still forms and
// grants through a follower; the grant's round trips (follower → leader
// → replication → back) take at least two delays each way, so the delay
// is really on the path.
func TestClusterDelayedMeshForms(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	tc, leader := formThree(t, func(tc *testCluster) {
		meshNet, _ := withFaults(tc)
		for _, a := range tc.names {
			for _, b := range tc.names {
				if a != b {
					meshNet.Set(a, b, faultnet.Rule{Delay: d, Jitter: 5 * time.Millisecond})
				}
			}
		}
	})
	if got := tc.meshNet.Name(clusterOf(tc.nodes["n2"].n).Mesh().Addr()); got != "n2" {
		t.Fatalf("n2's mesh address resolves to %q", got)
	}
	fc := tc.nodes[tc.follower(leader, "")]
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := fc.n.mode.route()
		return ok
	})
	g, el := grantRetry(t, fc, "slow", "w", 30)
	if el < 4*d {
		t.Fatalf("forwarded grant took %v over a %v-each-way mesh, want ≥ %v", el, d, 4*d)
	}
	if got, err := tc.nodes[leader].tn.c.Get(bg, "slow"); err != nil || got.Token != g.Token {
		t.Fatalf("leader reads %+v %v", got, err)
	}
}
