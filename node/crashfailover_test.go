package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/tckclk/tckclk/internal/clustertest/faultnet"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/consensus"
)

// counterOf is one outcome's count of the crash watch's counter
// (raft_crash_detect_total).
func counterOf(t *testing.T, outcomes *prometheus.CounterVec, outcome string) float64 {
	t.Helper()
	var m dto.Metric
	if err := outcomes.WithLabelValues(outcome).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// crashTiming is the crash tests' Raft timing: a heartbeat timeout long
// enough that a follower standing for election well before it can only
// have done so through crash failover, even on a loaded machine. Under
// -race the leader lease is four times the production one (1 s): at
// 250 ms leaders stepped down again and again at load 12 before the test
// could crash one (crash failover has nothing to do with the lease).
func crashTiming() *consensus.Timing {
	t := consensus.ClusterTiming()
	t.Heartbeat, t.Election = 2*time.Second, 2*time.Second
	if raceEnabled {
		t.LeaderLease *= 4
	}
	return &t
}

// formCrashThree forms n1..n3 over fault-injecting nets with crashTiming
// and the production crash_detect_ms and gossip timing, under -race too.
func formCrashThree(t *testing.T) (tc *testCluster, meshNet, gossipNet *faultnet.Net, leader string) {
	t.Helper()
	tc, leader = formThree(t, faulty(&meshNet, &gossipNet), func(tc *testCluster) { tc.timing, tc.production = crashTiming(), true })
	return tc, meshNet, gossipNet, leader
}

// newLeaderAmong polls Raft's state every few ms until one of nodes leads
// and returns it with the time since start.
func newLeaderAmong(t *testing.T, nodes []*clusterMember, start time.Time, d time.Duration) (string, time.Duration) {
	t.Helper()
	var name string
	waitFor(t, "a leader among the others", d, func() bool {
		for _, cm := range nodes {
			if r := cm.n.raft(); r != nil && r.State() == raft.Leader {
				name = cm.n.cfg.Cluster.Name
				return true
			}
		}
		return false
	})
	return name, time.Since(start)
}

// timeoutsOf is cm's Raft heartbeat and election timeouts now.
func timeoutsOf(cm *clusterMember) (time.Duration, time.Duration) {
	return cm.n.cons.Load().Timeouts()
}

// SPEC §5 "Crash failover": the leader dies as a process does — its
// peers' mesh sessions to it end with resets, and nothing of it reaches
// them after — and a follower is elected long before the heartbeat
// timeout (2 s here) could have passed; the new leader grants, what was
// granted before is there, and every survivor's timeouts are back.
func TestCrashFailoverKilledLeader(t *testing.T) {
	tc, meshNet, gossipNet, old := formCrashThree(t)
	oc := tc.nodes[old]
	before, _ := grantRetry(t, oc, "before-crash", "w", 60)
	others := tc.others(old)
	crash := time.Now()
	meshNet.Isolate(old)
	gossipNet.Isolate(old)
	resets := 0
	for _, cm := range others {
		resets += meshNet.Reset(old, cm.n.cfg.Cluster.Name)
	}
	if resets == 0 {
		t.Fatal("no mesh stream between the leader and its followers to reset")
	}
	next, took := newLeaderAmong(t, others, crash, 20*time.Second)
	t.Logf("%s elected %v after the crash of %s (heartbeat timeout %v, crash_detect_ms %d)", next, took.Round(time.Millisecond), old, crashTiming().Heartbeat, cluster.DefaultCrashDetectMs)
	if took >= crashTiming().Heartbeat {
		t.Fatalf("the new leader took %v, not less than the heartbeat timeout %v: crash failover did not act", took, crashTiming().Heartbeat)
	}
	shortened := 0.0
	for _, cm := range others {
		shortened += counterOf(t, clusterOf(cm.n).CrashOutcomes(), "shortened")
	}
	if shortened == 0 {
		t.Fatal("no follower shortened its heartbeat timeout")
	}
	nc := tc.nodes[next]
	if got, err := getRetry(t, nc, "before-crash"); err != nil || got.Token != before.Token {
		t.Fatalf("the new leader reads %+v %v, want token %d", got, err, before.Token)
	}
	grantRetry(t, nc, "after-crash", "w", 60)
	norm := crashTiming()
	for _, cm := range others {
		waitFor(t, cm.n.cfg.Cluster.Name+"'s timeouts restored", 10*time.Second, func() bool {
			hb, el := timeoutsOf(cm)
			return hb == norm.Heartbeat && el == norm.Election
		})
	}
	meshNet.HealAll()
	gossipNet.HealAll()
}

// SPEC §5 "Crash failover": a partition ends no session (no EOF, no
// reset): nobody stands for election before the heartbeat timeout, and
// the cluster still fails over on it.
func TestCrashFailoverPartitionWaitsHeartbeat(t *testing.T) {
	tc, meshNet, gossipNet, old := formCrashThree(t)
	others := tc.others(old)
	cut := time.Now()
	meshNet.Isolate(old)
	gossipNet.Isolate(old)
	next, took := newLeaderAmong(t, others, cut, 30*time.Second)
	t.Logf("%s elected %v after the partition of %s (heartbeat timeout %v)", next, took.Round(time.Millisecond), old, crashTiming().Heartbeat)
	// The last heartbeat reached the followers at most a leader's
	// heartbeat interval (≤ 40 ms) before the cut.
	if min := crashTiming().Heartbeat - 100*time.Millisecond; took < min {
		t.Fatalf("a leader was elected %v after the partition, before the heartbeat timeout (%v)", took, crashTiming().Heartbeat)
	}
	for _, cm := range others {
		if n := counterOf(t, clusterOf(cm.n).CrashOutcomes(), "shortened"); n != 0 {
			t.Fatalf("%s shortened its heartbeat timeout %v times without a session end", cm.n.cfg.Cluster.Name, n)
		}
	}
	grantRetry(t, tc.nodes[next], "after-partition", "w", 60)
	meshNet.HealAll()
	gossipNet.HealAll()
}

// SPEC §5 "Crash failover": sessions that break while the leader lives
// do not move leadership (at worst once, on a starved machine: one
// election won): ten rounds of resets of every session of the leader,
// each followed by a forwarded grant; then one follower cut off from the
// leader (a one-way cut and a reset: it can reach no one but the other
// follower, which still follows the leader and refuses its pre-vote) for
// a heartbeat timeout and more. Production timing; under -race the
// test clusters' timing (every timeout in proportion: crash_detect_ms stays
// a fifth of the heartbeat timeout), since at load 12 the production
// 250 ms lease moved leadership four times whatever the resets did.
func TestCrashFailoverLiveLeaderUndisturbed(t *testing.T) {
	var meshNet, gossipNet *faultnet.Net
	tc, leader := formThree(t, faulty(&meshNet, &gossipNet))
	normal := consensus.ClusterTiming()
	if rt := tc.raftTiming(); rt != nil {
		normal = *rt
	}
	term0 := tc.nodes[leader].n.raft().CurrentTerm()
	won := electionsWon(t, tc)
	for i := range 10 {
		for _, cm := range tc.others(leader) {
			meshNet.Reset(leader, cm.n.cfg.Cluster.Name)
		}
		grantRetry(t, tc.nodes[tc.follower(leader, "")], fmt.Sprint("through-reset-", i), "w", 60)
	}
	// Resetting both followers' sessions at once may move leadership once
	// (both hear nothing for crash_detect_ms): the cut below is against
	// whoever leads now.
	leader = tc.leader()
	lc := tc.nodes[leader]
	f := tc.follower(leader, "")
	fc := tc.nodes[f]
	shortened := counterOf(t, clusterOf(fc.n).CrashOutcomes(), "shortened")
	// Bounded observation: for more than a heartbeat timeout (500 ms in
	// production) after f lost the leader, f shortens and stands, its
	// pre-vote is refused, and the leader keeps granting. A reset can miss the session
	// f follows the leader on (a second session between them, kept by the
	// mesh's tie-break, carries on until the cut starves it, and f then
	// stands on its plain heartbeat timeout): up to three cuts.
	for attempt := 0; attempt < 3 && counterOf(t, clusterOf(fc.n).CrashOutcomes(), "shortened") == shortened; attempt++ {
		if attempt > 0 {
			meshNet.HealAll()
			waitFor(t, f+" follows the leader again", 20*time.Second, func() bool {
				_, id := fc.n.raft().LeaderWithID()
				return string(id) == leader
			})
		}
		meshNet.Cut(f, leader)
		meshNet.Reset(f, leader)
		deadline := time.Now().Add(3 * normal.Heartbeat)
		for i := 0; time.Now().Before(deadline); i++ {
			grantRetry(t, lc, fmt.Sprint("during-cut-", attempt, "-", i), "w", 60)
			time.Sleep(50 * time.Millisecond) // pacing of a bounded observation
		}
	}
	if got := counterOf(t, clusterOf(fc.n).CrashOutcomes(), "shortened"); got == shortened {
		t.Fatalf("%s, cut off from the leader after a reset (three times), never shortened its heartbeat timeout", f)
	}
	meshNet.HealAll()
	waitFor(t, f+" follows the leader again with its timeouts restored", 20*time.Second, func() bool {
		_, id := fc.n.raft().LeaderWithID()
		hb, _ := timeoutsOf(fc)
		return string(id) != "" && hb == normal.Heartbeat
	})
	now := tc.leader()
	term := tc.nodes[now].n.raft().CurrentTerm()
	t.Logf("leader %s term %d → leader %s term %d, %d elections won", leader, term0, now, term, won())
	// Counted in elections won, not terms: one move of leadership may
	// take more than one term (both followers stand on the same reset,
	// one candidate's election runs out; seen at load 7 under -race).
	if n := won(); n > 1 {
		t.Fatalf("%d elections won (term %d → %d): sessions breaking under a live leader moved leadership more than once", n, term0, term)
	}
}

// electionsWon counts, from now on, the elections won in tc: every node's
// Raft reports its moves to the leader state to an observer.
func electionsWon(t *testing.T, tc *testCluster) func() uint64 {
	t.Helper()
	var obs []*raft.Observer
	for _, name := range tc.names {
		r := tc.nodes[name].n.raft()
		o := raft.NewObserver(make(chan raft.Observation, 64), false, func(o *raft.Observation) bool {
			s, ok := o.Data.(raft.RaftState)
			return ok && s == raft.Leader
		})
		r.RegisterObserver(o)
		t.Cleanup(func() { r.DeregisterObserver(o) })
		obs = append(obs, o)
	}
	return func() uint64 {
		var n uint64
		for _, o := range obs {
			n += o.GetNumObserved() + o.GetNumDropped()
		}
		return n
	}
}
