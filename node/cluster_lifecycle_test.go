package node

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"

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
	t.Parallel()
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
		for _, m := range clusterOf(lc.n).Membership().Members() {
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
		clusterOf(lc.n).Runner().Trigger()
		waitFor(t, "a reconciler pass", 20*time.Second, func() bool { return rec.count("node="+leader, "reconcile pass done") > passes })
	}
	if !voterIn(lc, name) {
		t.Fatalf("%s is no longer a voter on the leader: %v", name, configIDs(lc))
	}
	// Back on its data dir: a voter at once (no add, no promotion).
	nc := tc.startWith(name, lc.gossipAddr(), cfg.Cluster.Raft.BootstrapExpect, func(c *Config) { c.Cluster.Raft = cfg.Cluster.Raft })
	waitFor(t, name+" alive again on the leader", 20*time.Second, func() bool {
		for _, m := range clusterOf(lc.n).Membership().Members() {
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

// issue 26 item 4: /v1/cluster/members asked while a cluster node starts
// (its mesh, gossip and Raft not all set up) answers 503 "starting" — it
// read the membership unsynchronised before (a data race under -race, an
// empty list otherwise) — and lists the node itself once it has joined.
func TestClusterMembersWhileStarting(t *testing.T) {
	tc := newTestCluster(t, "n1")
	type answer struct {
		ms  []wire.Member
		err error
	}
	answers := make(chan answer, 1<<16)
	done := make(chan struct{})
	var asking sync.WaitGroup
	t.Cleanup(func() { close(done); asking.Wait() })
	tc.beforeStart = func(_ *Deps, h *testHooks) {
		built := h.built
		h.built = func(n *server) {
			asking.Go(func() {
				for {
					ms, err := n.Members(bg)
					if err == nil { // never dropped: the test waits for it
						select {
						case answers <- answer{ms.Members, err}:
						case <-done:
						}
						return
					}
					select {
					case answers <- answer{ms.Members, err}:
					default: // enough refusals queued
					}
					select {
					case <-done:
						return
					default:
					}
				}
			})
			built(n)
		}
	}
	tc.start("n1", "", 1)
	starting := 0
	for {
		var a answer
		select {
		case a = <-answers:
		case <-time.After(20 * time.Second):
			t.Fatalf("no successful answer after %d refusals", starting)
		}
		if a.err != nil {
			var ae *api.Error
			if !errors.As(a.err, &ae) || ae.Kind != api.KindUnavailable || ae.Reason != "starting" {
				t.Fatalf("members while starting: %v, want 503 starting", a.err)
			}
			starting++
			continue
		}
		if !slices.ContainsFunc(a.ms, func(m wire.Member) bool { return m.ID == "n1" }) {
			t.Fatalf("members %+v without the node itself (after %d refusals)", a.ms, starting)
		}
		t.Logf("%d answers 503 starting, then %d members", starting, len(a.ms))
		return
	}
}

// issue 26 item 4: an admin change asked of a cluster without a leader (two
// of three voters stopped) says there is no leader and where to look, not
// only that the leader must be asked; asked of a follower, it names the
// leader.
func TestClusterAdminWithoutLeader(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	others := tc.others(leader)
	_, err := others[0].n.ReplaceMember(bg, others[1].n.cfg.Cluster.Name, "n9")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Kind != api.KindNotLeader || !strings.Contains(ae.Message, leader+" is; send the command to its address") {
		t.Fatalf("replace asked of a follower: %v, want not_leader naming %s", err, leader)
	}
	for _, cm := range others {
		if err := cm.tn.stop(); err != nil {
			t.Fatal(err)
		}
	}
	// Not leading as well as knowing no leader: hashicorp/raft clears the
	// leader before it changes the state, so a stepping-down leader briefly
	// knows no leader while it still is one.
	waitFor(t, leader+" without a leader", 30*time.Second, func() bool {
		id, _ := clusterOf(lc.n).Leader()
		return id == "" && lc.n.raft().State() != raft.Leader
	})
	for what, call := range map[string]func() error{
		"replace":  func() error { _, err := lc.n.ReplaceMember(bg, others[0].n.cfg.Cluster.Name, "n9"); return err },
		"remove":   func() error { return lc.n.RemoveMember(bg, others[0].n.cfg.Cluster.Name) },
		"transfer": func() error { return lc.n.TransferLeadership(bg, "") },
	} {
		err := call()
		if !errors.As(err, &ae) || ae.Kind != api.KindNotLeader || !strings.Contains(ae.Message, "there is no leader now") ||
			!strings.Contains(ae.Message, "ticketctl cluster health") {
			t.Errorf("%s without a leader: %v, want not_leader saying there is no leader and where to look", what, err)
		}
	}
}
