package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §4 (an entry of an unknown version stops the node that reads it),
// §5: the leader proposes KeepAlive entries only once every server of its
// configuration advertises that it reads them. A rolling upgrade's last
// step: while n3 runs "an earlier release" (its metadata without the
// marker) the renew ops of a batch are single Renews, one entry each;
// once n3 restarted as this release, one KeepAlive carries them all. A
// follower forwards the ops one by one, as before. Every renewal is
// answered 200, and every node ends with the leader's tickets.
func TestClusterKeepAliveOnlyWhenEveryServerReadsIt(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3")
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.beforeStart = func(_ *Deps, h *testHooks) { h.cluster.SoftwareVersion = "earlier-release" }
	tc.start("n3", first.gossipAddr(), 3)
	tc.beforeStart = nil

	const n = 24
	leader := tc.leader()
	lc := tc.nodes[leader]
	tokens := make([]uint64, n)
	for i := range n {
		l, err := lc.tn.c.Grant(bg, fmt.Sprintf("k-%d", i), "keeper", 30)
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = l.Token
	}
	renews := func(lease int64) []wire.BatchOp {
		ops := make([]wire.BatchOp, n)
		for i := range ops {
			ops[i] = renewOp(fmt.Sprintf("k-%d", i), "keeper", tokens[i], lease)
		}
		return ops
	}
	// entries is how many commands a batch of renewals through via made
	// on the leader lead (its no-ops and configuration changes aside),
	// every renewal answered 200.
	entries := func(lead, via *clusterMember, lease int64) int {
		t.Helper()
		idx := lead.n.fsm.Index()
		for i, r := range postBatch(t, via.tn.url, renews(lease)) {
			if r.Status != 200 {
				t.Fatalf("renewal %d through %s: %d %s", i, via.n.cfg.Cluster.Name, r.Status, r.Body)
			}
		}
		return commandsAfter(t, lead.n, idx)
	}

	if lc.n.mode.keepAliveEntries() {
		t.Fatal("the leader would propose KeepAlives while n3 runs an earlier release")
	}
	if got := entries(lc, lc, 40); got != n {
		t.Fatalf("with n3 on an earlier release the batch made %d entries, want %d single Renews", got, n)
	}

	tc.restart("n3", first.gossipAddr()) // as this release
	leader = tc.leader()
	lc = tc.nodes[leader]
	waitFor(t, "the leader sees every server read KeepAlives", 20*time.Second, lc.n.mode.keepAliveEntries)
	if got := entries(lc, lc, 50); got != 1 {
		t.Fatalf("with every server of this release the batch made %d entries, want one KeepAlive", got)
	}
	fc := tc.others(leader)[0]
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := fc.n.mode.route()
		return ok
	})
	if got := entries(lc, fc, 60); got != n {
		t.Fatalf("through a follower the batch made %d entries, want %d forwarded Renews", got, n)
	}
	want, _ := lc.n.fsm.List("k-", 0)
	for _, tk := range want {
		if tk.LeaseS != 60 {
			t.Fatalf("%s has lease %d after the last batch, want 60", tk.Name, tk.LeaseS)
		}
	}
	for _, name := range tc.names {
		cm := tc.nodes[name]
		waitFor(t, name+" applied the leader's tickets", 10*time.Second, func() bool {
			got, _ := cm.n.fsm.List("k-", 0)
			return slices.EqualFunc(got, want, func(a, b ticket.Ticket) bool { return a == b })
		})
	}
}

// commandsAfter counts the commands n's FSM applied after index idx (by
// their fates: a no-op or a configuration change between them is no
// command).
func commandsAfter(t *testing.T, n *server, idx uint64) int {
	t.Helper()
	count := 0
	for i := idx + 1; i <= n.fsm.Index(); i++ {
		switch f, _ := n.fsm.FateOf(i); f.Kind {
		case ticket.FateApplied:
			count++
		case ticket.FateNoCommand:
		default:
			t.Fatalf("index %d: fate %v", i, f.Kind)
		}
	}
	return count
}
