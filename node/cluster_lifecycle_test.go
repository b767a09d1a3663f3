package node

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/cluster/membership"
)

// count is how many lines contain every part.
func (r *logRecord) count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			n++
		}
	}
	return n
}

// recordLogs keeps the log lines of every node tc starts from now on (each
// carries node=NAME; t.Log shows them as before).
func recordLogs(t *testing.T, tc *testCluster) *logRecord {
	rec := &logRecord{gl: &guardedLog{t: t, done: true}}
	tc.logTo = rec
	return rec
}

// SPEC §5 "Reconciler": a voter stopped gracefully (SIGTERM: the node's
// context ends) does not leave the gossip pool; the leader sees it dead,
// keeps its slot through reconciler passes within raft.dead_voter_grace,
// and the voter, started again on its data dir, is a voter again — it was
// never removed. (Before: it left the gossip and the leader removed it
// 0.7 s later, "voter gossip-dead and silent in Raft".)
func TestClusterGracefulStopKeepsVote(t *testing.T) {
	var rec *logRecord
	tc, leader := formThree(t, func(tc *testCluster) { rec = recordLogs(t, tc) })
	lc := tc.nodes[leader]
	victim := tc.others(leader)[0]
	name := victim.n.cfg.Cluster.Name
	cfg := victim.an.cfg
	if err := victim.tn.stop(); err != nil {
		t.Fatalf("graceful stop of %s: %v", name, err)
	}
	if !rec.has("node="+name, "stopping without leaving the gossip pool") {
		t.Fatalf("%s did not stop as a voter keeping its vote", name)
	}
	waitFor(t, "the leader sees "+name+" dead (not left)", 20*time.Second, func() bool {
		for _, m := range lc.n.cl.mem.Members() {
			if m.ID == name {
				return m.State == membership.StateDead
			}
		}
		return false
	})
	waitFor(t, "the leader's reconciler sees "+name+" gone", 20*time.Second, func() bool {
		return rec.has("node="+leader, "voter gone", "id="+name)
	})
	// Two more passes with the voter gone: none removes it.
	for range 2 {
		passes := rec.count("node="+leader, "reconcile pass done")
		lc.n.cl.runner().Trigger()
		waitFor(t, "a reconciler pass", 20*time.Second, func() bool { return rec.count("node="+leader, "reconcile pass done") > passes })
	}
	if !voterIn(lc, name) {
		t.Fatalf("%s is no longer a voter on the leader: %v", name, configIDs(lc))
	}
	// Back on its data dir: a voter at once (no add, no promotion).
	nc := tc.startWith(name, lc.gossipAddr(), cfg.Cluster.Raft.BootstrapExpect, func(c *Config) { c.Cluster.Raft = cfg.Cluster.Raft })
	waitFor(t, name+" alive again on the leader", 20*time.Second, func() bool {
		for _, m := range lc.n.cl.mem.Members() {
			if m.ID == name {
				return m.State == membership.StateAlive
			}
		}
		return false
	})
	tc.waitReady(name)
	if !voterIn(lc, name) || !voterIn(nc, name) {
		t.Fatalf("%s is not a voter after its restart: leader %v", name, configIDs(lc))
	}
	if rec.has("raft configuration change", "id="+name) {
		t.Fatalf("the leader changed %s's membership during a graceful restart", name)
	}
}
