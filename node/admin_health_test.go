package node

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster"
)

// summary is a health answer in one line, for failure messages.
func summary(h *wire.ClusterHealth) string {
	if h == nil {
		return "no answer"
	}
	var b strings.Builder
	for _, s := range h.Servers {
		b.WriteString(" " + s.ID + ":" + s.Suffrage)
		if !s.Healthy {
			b.WriteString("(" + s.Why + ")")
		}
	}
	return strings.TrimSpace(b.String())
}

// SPEC §3.5: a healthy three-node cluster is healthy with failure
// tolerance 1, the most three voters allow, by the leader's view (every
// server in Raft contact, no log lag) and by a follower's; with one voter
// stopped it is unhealthy with tolerance 0, whichever node answers. The
// Go client with every address prefers the leader's view.
func TestClusterHealth(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	tc.waitReady(tc.names...)
	var urls []string
	for _, name := range tc.names {
		urls = append(urls, tc.nodes[name].tn.url)
	}
	all, err := client.New(strings.Join(urls, ","), client.WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	var h *wire.ClusterHealth
	defer func() {
		if t.Failed() {
			t.Logf("last answer: %+v, %v (%s)", h, err, summary(h))
		}
	}()
	waitFor(t, "healthy, tolerance 1, by the leader's view", 20*time.Second, func() bool {
		h, err = all.ClusterHealth(bg)
		if err != nil || !h.Healthy || h.FailureTolerance != 1 || h.MaxFailureTolerance != 1 || h.Voters != 3 || h.HealthyVoters != 3 ||
			!h.LeaderView || h.ServedBy != leader || h.Leader != leader || len(h.Servers) != 3 {
			return false
		}
		for _, s := range h.Servers {
			if !s.Healthy || s.Suffrage != "voter" || s.Gossip != "alive" || s.Clock != "healthy" || s.LastContactMs == nil ||
				s.LastIndex == nil || s.LogLag == nil || s.Leader != (s.ID == leader) || s.Term == nil || *s.Term == 0 || *s.Term != *h.Servers[0].Term ||
				len(s.ClockBoundHistoryMs) == 0 {
				return false
			}
		}
		return true
	})
	others := tc.others(leader)
	fv, err := others[0].tn.c.ClusterHealth(bg)
	if err != nil || !fv.Healthy || fv.FailureTolerance != 1 || fv.LeaderView || fv.ServedBy != others[0].n.cfg.Cluster.Name || fv.Leader != leader {
		t.Fatalf("a follower's view of a healthy cluster: %+v, %v (%s)", fv, err, summary(fv))
	}
	// Raft terms (as etcdctl endpoint status): the leader knows each
	// server's from its answers; a follower only its own.
	for _, s := range fv.Servers {
		if self := s.ID == fv.ServedBy; (s.Term != nil) != self || self && *s.Term != *h.Servers[0].Term {
			t.Errorf("a follower's view: %s term %v", s.ID, s.Term)
		}
	}

	stopped := others[1]
	name := stopped.n.cfg.Cluster.Name
	if err := stopped.tn.stop(); err != nil {
		t.Fatal(err)
	}
	for _, view := range []struct {
		who string
		c   *client.Client
	}{{"leader", tc.nodes[leader].tn.c}, {"follower", others[0].tn.c}} {
		waitFor(t, "unhealthy, tolerance 0, by the "+view.who+"'s view", 20*time.Second, func() bool {
			h, err = view.c.ClusterHealth(bg)
			if err != nil || h.Healthy || h.FailureTolerance != 0 || h.MaxFailureTolerance != 1 || h.Voters != 3 || h.HealthyVoters != 2 {
				return false
			}
			for _, s := range h.Servers {
				if (s.ID == name) == s.Healthy || (s.ID == name && s.Why == "") {
					return false
				}
			}
			return true
		})
		t.Logf("%s's view with %s stopped: %s", view.who, name, summary(h))
	}
}

// SPEC §3.5: a single node is one voter that tolerates no failure; it is
// healthy while it serves.
func TestSingleNodeHealth(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{})
	h, err := tn.c.ClusterHealth(bg)
	if err != nil || !h.Healthy || h.Voters != 1 || h.HealthyVoters != 1 || h.FailureTolerance != 0 || h.MaxFailureTolerance != 0 ||
		!h.LeaderView || len(h.Servers) != 1 || !h.Servers[0].Healthy || h.Servers[0].Clock != "healthy" {
		t.Fatalf("single node: %+v, %v", h, err)
	}
}

// A cluster node asked for health before it joined (here: in clock_check,
// its mesh, gossip and Raft not open) answers 503 with its stage, which
// a client with several addresses moves past.
func TestClusterHealthBeforeJoin(t *testing.T) {
	tc := newTestCluster(t, "n1")
	an := newAgentNode(t, t.TempDir(), []byte(clockSecret), func(c *Config) {
		c.Cluster.Enabled = true
		c.Cluster.Name = "n1"
		c.Cluster.Membership.BindAddr = "127.0.0.1"
		c.Cluster.Membership.SecretKey = cluster.SecretString(gossipSecret)
		c.Cluster.Internode.IdentityKey = cluster.SecretString(base64.StdEncoding.EncodeToString(tc.keys["n1"].Seed()))
		c.Cluster.Internode.TrustedPeerKeys = tc.trust
		c.Cluster.Raft.BootstrapExpect = 1
	})
	tn, err := tryStart(t, an.cfg, an.deps, false)
	if err != nil {
		t.Fatal(err)
	}
	var e *client.Error
	waitFor(t, "a 503 in clock_check", 10*time.Second, func() bool {
		_, err = tn.c.ClusterHealth(bg)
		return errors.As(err, &e) && e.StatusCode == 503 && e.Stage == "clock_check"
	})
}
