package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// formThree starts n1..n3 with bootstrap_expect 3 and returns the cluster
// and its one ready leader, which both followers follow; each setup edits
// the cluster before any node starts (withFaults, TLS).
func formThree(t *testing.T, setup ...func(*testCluster)) (*testCluster, string) {
	t.Helper()
	tc := newTestCluster(t, "n1", "n2", "n3")
	for _, f := range setup {
		f(tc)
	}
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	// A leader is ready once one follower acknowledged its term; the other
	// may still be a candidate of its own (its election timer ran out as
	// the leader was elected) and know no leader for a moment.
	var leader string
	waitFor(t, "one ready leader that both followers follow", 20*time.Second, func() bool {
		ls := tc.leaders()
		if len(ls) != 1 {
			return false
		}
		for _, cm := range tc.others(ls[0]) {
			if id, _ := clusterOf(cm.n).Leader(); id != ls[0] {
				return false
			}
		}
		leader = ls[0]
		return true
	})
	// Every member's gossip shows the others healthy (the transfer target
	// is chosen from it).
	waitFor(t, "all three see three alive", 10*time.Second, func() bool {
		for _, name := range tc.names {
			if aliveCount(tc.nodes[name].n) != 3 {
				return false
			}
		}
		return true
	})
	return tc, leader
}

// lie makes cm's agent answer 4Δ ahead of the node's wall clock (offset
// beyond Δ/2) and runs one probe round: the clock goes FAILED.
func lie(t *testing.T, cm *clusterMember) {
	t.Helper()
	ahead := 4 * cm.an.cfg.Clock.DeltaMs
	cm.an.agent.SetHandler(func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: cm.an.agent.Sign(req.Nonce, uint64(cm.an.clk.WallNs()/1e6)+ahead, 3, true, 100)}
	})
	if !cm.an.ts.Fire("probe", probeFireWait) {
		t.Fatal("probe ticker not taken")
	}
}

// others are the members other than name.
func (tc *testCluster) others(name string) []*clusterMember {
	var out []*clusterMember
	for _, n := range tc.names {
		if n != name {
			out = append(out, tc.nodes[n])
		}
	}
	return out
}

// firstGrant grants ticket through any of nodes, retrying until one
// succeeds (within d), and returns when it did.
func firstGrant(t *testing.T, nodes []*clusterMember, ticket string, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, cm := range nodes {
			ctx, cancel := context.WithTimeout(bg, time.Second)
			g, err := cm.tn.c.Grant(ctx, ticket, "worker", 30)
			cancel()
			if err == nil {
				if g.Token == 0 {
					t.Fatalf("grant of %s: token 0", ticket)
				}
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant of %s within %v", ticket, d)
		}
		time.Sleep(2 * time.Millisecond) // poll interval of a retry with a deadline
	}
}

// configIDs is the Raft configuration's NodeIds on cm.
func configIDs(cm *clusterMember) []string {
	s, err := cm.n.cons.Load().Servers()
	if err != nil {
		return nil
	}
	var out []string
	for _, x := range s {
		out = append(out, string(x.ID))
	}
	slices.Sort(out)
	return out
}

// failLeader lies to the leader of a fresh three-node cluster and returns
// the gap from the lie to the first successful grant after it.
func failLeader(t *testing.T, tc *testCluster, leader string, ticketName string) time.Duration {
	t.Helper()
	start := time.Now()
	lie(t, tc.nodes[leader])
	// Grants are tried only once the old leader's FAILED is latched: from
	// then on it refuses every proposal, so the first grant is the new
	// leader's.
	waitFor(t, leader+"'s clock FAILED", 5*time.Second, func() bool { return tc.nodes[leader].n.clockErr() != nil })
	got := firstGrant(t, tc.others(leader), ticketName, 10*time.Second)
	return got.Sub(start)
}

// SPEC §3.4: the leader's agent starts lying (offset beyond Δ/2), with
// cluster.auto_replace off. Leadership moves to a healthy voter, which
// grants; the failed node refuses with 503 and the reason, its data dir
// holds `retired`, every node's FSM records its NodeId retired, the
// reconciler removes it from the configuration; it exits by itself with
// its clock error (exit status 1), a restart on its data dir is refused
// with the new-NodeId message, and the same NodeId joining again (new
// data dir) is refused by the reconciler.
func TestClusterLeaderClockFails(t *testing.T) {
	t.Parallel()
	// No replacement comes here: the retired voter goes once
	// raft.dead_voter_grace has passed (SPEC §5).
	tc, leader := formThree(t, func(tc *testCluster) {
		tc.edit = func(c *Config) {
			c.Cluster.Raft.DeadVoterGrace = 300 * time.Millisecond
			c.Cluster.AutoReplace = false
		}
	})
	lc := tc.nodes[leader]
	if _, err := lc.tn.c.Grant(bg, "before", "w", 30); err != nil {
		t.Fatal(err)
	}
	gap := failLeader(t, tc, leader, "after")
	t.Logf("gap from the lie to the first grant on the new leader: %v", gap)

	var newLeader string
	waitFor(t, "one ready leader among the healthy", 10*time.Second, func() bool {
		ls := tc.leaders()
		if len(ls) == 1 {
			newLeader = ls[0]
		}
		return len(ls) == 1 && ls[0] != leader
	})
	nl := tc.nodes[newLeader]
	if g, err := nl.tn.c.Get(bg, "after"); err != nil || g.Holder != "worker" {
		t.Fatalf("new leader reads %+v, %v", g, err)
	}

	// The failed node: it exits by itself with its clock error (exit
	// status 1) once Raft is shut down; until then (and in the server it
	// leaves) every op is a 503 with the reason.
	var clockErr *clockhealth.Error
	if err := waitExit(t, lc.tn, 15*time.Second); !errors.As(err, &clockErr) {
		t.Fatalf("the failed node returned %v, want its clock error", err)
	}
	if r := lc.n.raft(); !raftShutDown(r) {
		t.Fatalf("the failed leader exited with Raft %v", r.State())
	}
	assertFailedRefusals(t, lc.n, protocol.ReasonOffset)
	dir := lc.an.cfg.Cluster.Raft.DataDir
	if _, err := os.Stat(filepath.Join(dir, datadir.RetiredFile)); err != nil {
		t.Fatalf("retired marker: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.FailedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster mode wrote the single-node FAILED marker (%v)", err)
	}
	// Recorded retired in every FSM (the failing leader proposed it before
	// handing over), and removed from the configuration past the grace.
	waitFor(t, "every FSM holds "+leader+" retired", 10*time.Second, func() bool {
		for _, name := range tc.names {
			if !tc.nodes[name].n.fsm.IsRetired(leader) {
				return false
			}
		}
		return true
	})
	waitFor(t, leader+" removed from the configuration", 10*time.Second, func() bool {
		return !slices.Contains(configIDs(nl), leader) && len(configIDs(nl)) == 2
	})

	// It stays retired.
	err := runRefused(t, lc.an.cfg, lc.an.deps)
	if !errors.Is(err, ErrRetired) || !strings.Contains(err.Error(), "new NodeId") || !strings.Contains(err.Error(), "cluster.auto_replace is off") {
		t.Fatalf("restart on the retired data dir: %v, want ErrRetired naming a new NodeId and auto_replace", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the refused restart moved the retired dir: %v", err)
	}

	// The same NodeId on a new data dir joins gossip and is never added.
	tc.names = slices.DeleteFunc(tc.names, func(n string) bool { return n == leader })
	again := tc.start(leader, nl.gossipAddr(), 0)
	waitFor(t, "the leader refuses the rejoining "+leader, 10*time.Second, func() bool {
		return clusterOf(nl.n).RefusedRejoin(leader)
	})
	if ids := configIDs(nl); slices.Contains(ids, leader) {
		t.Fatalf("a retired NodeId was added back: %v", ids)
	}
	if s, err := again.n.cons.Load().Servers(); err != nil || len(s) != 0 {
		t.Fatalf("the rejoining %s has a configuration %v (%v)", leader, s, err)
	}
	if _, err := nl.tn.c.Grant(bg, "still", "w", 30); err != nil {
		t.Fatalf("grant after the rejoin attempt: %v", err)
	}
}

// SPEC §3.4: a follower's clock fails: it shuts Raft down and retires, the
// leader records it retired and removes it, the cluster keeps granting.
func TestClusterFollowerClockFails(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	var follower string
	for _, n := range tc.names {
		if n != leader {
			follower = n
			break
		}
	}
	fc := tc.nodes[follower]
	lie(t, fc)
	var clockErr *clockhealth.Error
	if err := waitExit(t, fc.tn, 15*time.Second); !errors.As(err, &clockErr) {
		t.Fatalf("the failed follower returned %v, want its clock error", err)
	}
	if r := fc.n.raft(); !raftShutDown(r) {
		t.Fatalf("the failed follower exited with Raft %v", r.State())
	}
	if _, err := os.Stat(filepath.Join(fc.an.cfg.Cluster.Raft.DataDir, datadir.RetiredFile)); err != nil {
		t.Fatalf("retired marker: %v", err)
	}
	assertFailedRefusals(t, fc.n, protocol.ReasonOffset)
	// Whoever leads now (load may move leadership between the healthy
	// two) records it retired and removes it; both healthy FSMs hold it.
	healthy := tc.others(follower)
	waitFor(t, "the healthy record "+follower+" retired and remove it", 10*time.Second, func() bool {
		for _, cm := range healthy {
			if !cm.n.fsm.IsRetired(follower) || slices.Contains(configIDs(cm), follower) {
				return false
			}
		}
		return true
	})
	if ls := tc.leaders(); slices.Contains(ls, follower) {
		t.Fatalf("the failed follower leads: %v", ls)
	}
	for i := range 3 {
		firstGrant(t, healthy, fmt.Sprintf("t%d", i), 10*time.Second)
	}
}

// Issue 12 item 8: the gap from a leader's lie to the first grant on the
// new leader, logging median and max. The default run does 2 trials and
// checks only that the new leader grants (a timed assertion on a shared CI
// machine measures the machine); the measurement is
//
//	TCKCLK_GAP_TRIALS=10 go test -run TestClusterLeaderFailoverGap -v ./node/
//
// which also enforces the target (median ≤ 1 s, every gap under 3 s).
func TestClusterLeaderFailoverGap(t *testing.T) {
	trials, measure := 2, false
	if v := os.Getenv("TCKCLK_GAP_TRIALS"); v != "" {
		measure = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TCKCLK_GAP_TRIALS=%q", v)
		}
		trials = n
	}
	var gaps []time.Duration
	for i := range trials {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			// The measurement needs the production timing, -race or not.
			tc, leader := formThree(t, func(tc *testCluster) { tc.production = measure })
			gaps = append(gaps, failLeader(t, tc, leader, "gap"))
		})
	}
	if len(gaps) != trials {
		t.Fatalf("%d of %d trials measured", len(gaps), trials)
	}
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	if len(gaps)%2 == 0 {
		median = (gaps[len(gaps)/2-1] + gaps[len(gaps)/2]) / 2
	}
	t.Logf("leader clock FAILED → first grant on the new leader over %d trials: median %v, max %v, all %v",
		trials, median, gaps[len(gaps)-1], gaps)
	if measure && (median > time.Second || gaps[len(gaps)-1] > 3*time.Second) {
		t.Fatalf("median %v (target ≤ 1 s), max %v (bound 3 s)", median, gaps[len(gaps)-1])
	}
}

// SPEC §3.4: a leader whose clock fails with no voter advertising a healthy
// clock (both followers stopped) still retires and shuts Raft down.
func TestClusterLeaderClockFailsAlone(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	for _, cm := range tc.others(leader) {
		if err := cm.tn.stop(); err != nil {
			t.Fatalf("stopping a follower: %v", err)
		}
	}
	waitFor(t, leader+" sees the followers gone", 10*time.Second, func() bool { return aliveCount(lc.n) == 1 })
	if _, ok := clusterOf(lc.n).TransferTarget(lc.n.raft()); ok {
		t.Fatal("a transfer target among stopped followers")
	}
	lie(t, lc)
	var clockErr *clockhealth.Error
	if err := waitExit(t, lc.tn, 15*time.Second); !errors.As(err, &clockErr) {
		t.Fatalf("the failed leader returned %v, want its clock error", err)
	}
	if r := lc.n.raft(); !raftShutDown(r) {
		t.Fatalf("the failed leader exited with Raft %v", r.State())
	}
	if _, err := os.Stat(filepath.Join(lc.an.cfg.Cluster.Raft.DataDir, datadir.RetiredFile)); err != nil {
		t.Fatalf("retired marker: %v", err)
	}
	assertFailedRefusals(t, lc.n, protocol.ReasonOffset)
}

// waitExit waits (up to d) for tn's RunWith to return by itself and
// returns its error.
// raftShutDown: r has been shut down, its goroutines ended. Not State()
// alone: hashicorp/raft's leader loop can set Follower after Shutdown set
// Shutdown (a lease check that failed as the shutdown began: both call
// setState, and the state then says Follower for good; seen in
// TestClusterWholeClusterRecovery). A user snapshot request is refused with
// ErrRaftShutdown once nobody is left to take it, and taken by a running
// Raft.
func raftShutDown(r *raft.Raft) bool {
	return r.State() == raft.Shutdown || errors.Is(r.Snapshot().Error(), raft.ErrRaftShutdown)
}

func waitExit(t *testing.T, tn *testNode, d time.Duration) error {
	t.Helper()
	select {
	case err := <-tn.done:
		tn.once.Do(func() { tn.err = err })
		return err
	case <-time.After(d):
		t.Fatalf("the node did not exit by itself within %v", d)
		return nil
	}
}

// assertFailedRefusals checks that the FAILED node n refuses a Grant and
// reports not ready, with stage failed and reason (SPEC §3.4), saying to
// bring a new NodeId.
func assertFailedRefusals(t *testing.T, n *server, reason protocol.Reason) {
	t.Helper()
	var ae *api.Error
	_, err := n.Write(bg, api.Write{Op: ticket.OpGrant, Name: "x", Holder: "h", LeaseS: 30})
	if !errors.As(err, &ae) || ae.Stage != string(stage.Failed) || ae.Reason != string(reason) || !strings.Contains(ae.Error(), "new NodeId") {
		t.Fatalf("grant on the failed node: %v, want a 503 failed/%s saying to bring a new NodeId", err, reason)
	}
	if h := n.Readiness(); h.Stage != string(stage.Failed) || h.Reason != string(reason) {
		t.Fatalf("readiness of the failed node: %+v, want stage failed, reason %s", h, reason)
	}
}
