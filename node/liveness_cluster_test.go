package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/cluster"
)

// SPEC §6: every cluster.liveness key out of range refuses the config,
// naming the key; the defaults are the documented ones.
func TestLivenessConfigRefusals(t *testing.T) {
	if d := DefaultConfig().Cluster.Liveness; d.BootGrace != 30*time.Second || d.MaxHealthScore != 6 ||
		d.VoterLastContact != 15*time.Second || d.StandbyLastContact != 2*time.Minute {
		t.Fatalf("defaults %+v", d)
	}
	cases := []struct {
		key  string
		edit func(*cluster.LivenessConfig)
	}{
		{"cluster.liveness.boot_grace", func(l *cluster.LivenessConfig) { l.BootGrace = -time.Second }},
		{"cluster.liveness.boot_grace", func(l *cluster.LivenessConfig) { l.BootGrace = 2 * time.Hour }},
		{"cluster.liveness.max_health_score", func(l *cluster.LivenessConfig) { l.MaxHealthScore = 0 }},
		{"cluster.liveness.max_health_score", func(l *cluster.LivenessConfig) { l.MaxHealthScore = 8 }},
		{"cluster.liveness.voter_last_contact", func(l *cluster.LivenessConfig) { l.VoterLastContact = 999 * time.Millisecond }},
		{"cluster.liveness.voter_last_contact", func(l *cluster.LivenessConfig) { l.VoterLastContact = 61 * time.Minute }},
		{"cluster.liveness.standby_last_contact", func(l *cluster.LivenessConfig) { l.StandbyLastContact = 14 * time.Second }},
		{"cluster.liveness.standby_last_contact", func(l *cluster.LivenessConfig) { l.StandbyLastContact = 61 * time.Minute }},
	}
	for _, c := range cases {
		cfg := testConfig(t, t.TempDir())
		c.edit(&cfg.Cluster.Liveness)
		before := cfg.Cluster.Liveness
		cfg.Normalize()
		var ce *config.Error
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Path != c.key {
			t.Errorf("%+v: %v, want an error naming %s", before, err, c.key)
		}
		if cfg.Cluster.Liveness != before {
			t.Errorf("validation changed %+v to %+v", before, cfg.Cluster.Liveness)
		}
	}
	// The bounds themselves are accepted.
	cfg := testConfig(t, t.TempDir())
	cfg.Cluster.Liveness = cluster.LivenessConfig{BootGrace: 0, MaxHealthScore: 7, VoterLastContact: time.Second, StandbyLastContact: time.Second}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("bounds refused: %v", err)
	}
}

// suffrages is the Raft configuration as cm sees it: NodeId → suffrage.
func suffrages(cm *clusterMember) map[string]raft.ServerSuffrage {
	s, err := cm.n.cons.Load().Servers()
	if err != nil {
		return nil
	}
	out := map[string]raft.ServerSuffrage{}
	for _, x := range s {
		out[string(x.ID)] = x.Suffrage
	}
	return out
}

// livez is cm's /livez: its HTTP status and body.
func livez(t *testing.T, cm *clusterMember) (int, string) {
	t.Helper()
	a := do(t, cm.tn, "GET", "/livez", "")
	return a.status, a.raw
}

// leaderPasses checks that whichever node leads passes /livez (the leader
// always does). Leadership may move under load: a node that was not the
// leader both before and after its check is not judged.
func leaderPasses(t *testing.T, tc *testCluster) {
	t.Helper()
	for _, name := range tc.names {
		cm := tc.nodes[name]
		r := cm.n.raft()
		if r == nil || r.State() != raft.Leader {
			continue
		}
		if h := cm.n.Liveness(); h.Status != "ok" && r.State() == raft.Leader {
			t.Fatalf("leader %s fails /livez: %+v", name, h)
		}
	}
}

// SPEC §5 "Liveness checks": with cluster.liveness.voter_last_contact 1 s
// and standby_last_contact 1 h, a follower voter cut off from the leader
// (mesh isolated, gossip still up) fails /livez naming Raft last contact
// and the key once past 1 s; a standby cut off at the same moment is
// still live past that (the lenient threshold); the leader passes
// throughout. Healed, the voter is live again.
func TestClusterLivenessLastContact(t *testing.T) {
	tc := newTestCluster(t, "n1", "n2", "n3", "n4")
	meshNet, _ := withFaults(tc) // the mesh only: gossip keeps seeing everyone alive
	edit := func(c *Config) {
		c.Cluster.Liveness.VoterLastContact = time.Second
		c.Cluster.Liveness.StandbyLastContact = time.Hour
	}
	first := tc.startWith("n1", "", 3, edit)
	tc.startWith("n2", first.gossipAddr(), 3, edit)
	tc.startWith("n3", first.gossipAddr(), 3, edit)
	leader := tc.leader()
	lc := tc.nodes[leader]
	tc.startWith("n4", first.gossipAddr(), 0, edit)
	// Four eligible nodes: three voters (an odd count) and one standby.
	var voter, standby string
	waitFor(t, "three voters and n4 a standby", 20*time.Second, func() bool {
		s := suffrages(lc)
		voters := 0
		for id, x := range s {
			if x == raft.Voter {
				voters++
				if id != leader {
					voter = id
				}
			}
		}
		standby = "n4"
		return len(s) == 4 && voters == 3 && s["n4"] == raft.Nonvoter
	})
	waitFor(t, "the standby replicates", 10*time.Second, func() bool {
		return !tc.nodes[standby].n.raft().LastContact().IsZero()
	})
	waitFor(t, "every node live before the cut", 20*time.Second, func() bool {
		for _, name := range tc.names {
			if code, _ := livez(t, tc.nodes[name]); code != 200 {
				return false
			}
		}
		return true
	})

	meshNet.Isolate(voter)
	meshNet.Isolate(standby)
	vc, sc := tc.nodes[voter], tc.nodes[standby]
	var body string
	waitFor(t, voter+" /livez fails", 20*time.Second, func() bool {
		var code int
		code, body = livez(t, vc)
		leaderPasses(t, tc)
		return code == 503
	})
	if !strings.Contains(body, `"reason":"raft"`) || !strings.Contains(body, "raft last contact") || !strings.Contains(body, "cluster.liveness.voter_last_contact") {
		t.Fatalf("%s /livez: %s, want reason raft naming last contact and the key", voter, body)
	}
	// The standby goes without contact beyond the voter limit too (its
	// last heartbeat may have come a little after the voter's).
	waitFor(t, "the standby without contact for over 1.5 s", 20*time.Second, func() bool {
		return time.Since(sc.n.raft().LastContact()) > 1500*time.Millisecond
	})
	if code, b := livez(t, sc); code != 200 {
		t.Fatalf("standby /livez: %d %s, want the lenient threshold", code, b)
	}
	leaderPasses(t, tc)

	meshNet.HealAll()
	waitFor(t, voter+" live again after healing", 20*time.Second, func() bool {
		code, _ := livez(t, vc)
		return code == 200
	})
}
