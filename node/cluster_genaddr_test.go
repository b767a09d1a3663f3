package node

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest/faultnet"
	"github.com/tckclk/tckclk/node/clockhealth"
)

// SPEC §3.4, §5: a voter, cut off from the mesh (as deploy/demo.sh's
// stopped node-3: silent in Raft, so the leader keeps its slot within
// raft.dead_voter_grace), FAILs, exits, and its supervisor restarts it on
// the same mesh address (the demo, compose and k8s use fixed mesh ports)
// as NAME~2, which speaks with NAME's key. The
// leader's Raft RPCs for NAME must never be answered by NAME~2 (an empty
// data dir that would count in quorums with NAME's vote and log): from
// the exit on, no AppendEntries for NAME succeeds. The reconciler removes
// NAME at once (superseded), then adds NAME~2 at the address NAME held —
// hashicorp/raft refuses a duplicate address, so the removal comes first —
// and promotes it: three voters, failure tolerance 1 again.
func TestClusterNextGenerationAtSameMeshAddress(t *testing.T) {
	t.Parallel()
	var meshNet, gossipNet *faultnet.Net
	tc, leader := formThree(t, faulty(&meshNet, &gossipNet))
	victim := tc.others(leader)[0]
	name := victim.n.cfg.Cluster.Name
	lc := tc.others(name)[0] // a node that stays (gossip seed)
	meshAddr := clusterOf(victim.n).Mesh().Addr()
	_, portStr, err := net.SplitHostPort(meshAddr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.nodes[leader].tn.c.Grant(bg, "before", "w", 60); err != nil {
		t.Fatal(err)
	}

	meshNet.Isolate(name)
	waitFor(t, "the leader loses Raft contact with "+name, 10*time.Second, func() bool {
		return !clusterOf(tc.nodes[leader].n).InContact(name)
	})
	lie(t, victim)
	var clockErr *clockhealth.Error
	if err := waitExit(t, victim.tn, 15*time.Second); !errors.As(err, &clockErr) {
		t.Fatalf("%s returned %v, want its clock error (exit status 1)", name, err)
	}
	if !slices.Contains(configIDs(tc.nodes[leader]), name) {
		t.Fatalf("%s left the configuration %v before its next generation came: the case under test did not arise", name, configIDs(tc.nodes[leader]))
	}
	// What the cut held back dies with the process, as its kernel's
	// resets would have it; from now on nothing answers for name.
	for _, cm := range tc.others(name) {
		meshNet.Reset(name, cm.n.cfg.Cluster.Name)
	}
	gone := time.Now()
	meshNet.HealAll()
	raftCfg := victim.an.cfg.Cluster.Raft
	others := tc.others(name)

	next := tc.startWith(name, lc.gossipAddr(), raftCfg.BootstrapExpect, func(c *Config) {
		c.Cluster.Raft = raftCfg
		c.Cluster.Internode.BindPort = port
	})
	want := name + "~2"
	if got := next.n.cfg.Cluster.Name; got != want {
		t.Fatalf("restarted as %q, want %q", got, want)
	}
	if got := clusterOf(next.n).Mesh().Addr(); got != meshAddr {
		t.Fatalf("%s listens at %s, want %s's address %s", want, got, name, meshAddr)
	}

	answeredFor := func(cm *clusterMember, id string) (time.Time, bool) {
		at, _, ok := clusterOf(cm.n).LastContact(id)
		return at, ok && at.After(gone)
	}
	wantVoters := []string{want}
	for _, cm := range others {
		wantVoters = append(wantVoters, cm.n.cfg.Cluster.Name)
	}
	slices.Sort(wantVoters)
	waitFor(t, want+" promoted at "+meshAddr+", "+name+" removed, failure tolerance 1", 60*time.Second, func() bool {
		for _, cm := range others {
			if at, ok := answeredFor(cm, name); ok {
				t.Fatalf("%s counts %s in Raft contact at %v, after it exited at %v: %s answered as %s", cm.n.cfg.Cluster.Name, name, at, gone, want, name)
			}
		}
		for _, cm := range others {
			if ls := tc.leaders(); len(ls) != 1 || ls[0] != cm.n.cfg.Cluster.Name {
				continue
			}
			if !slices.Equal(voterIDs(cm), wantVoters) || slices.Contains(configIDs(cm), name) {
				return false
			}
			h, err := cm.n.ClusterHealth(bg)
			return err == nil && h.Voters == 3 && h.FailureTolerance == 1
		}
		return false
	})
	// The new generation serves what was granted before.
	waitFor(t, want+" ready", 20*time.Second, func() bool { _, err := next.tn.c.Ready(bg); return err == nil })
	if g, err := next.tn.c.Get(bg, "before"); err != nil || g.Holder != "w" {
		t.Fatalf("the new generation reads %+v, %v", g, err)
	}
	for _, cm := range others {
		if at, ok := answeredFor(cm, name); ok {
			t.Fatalf("%s counts %s in Raft contact at %v, after it exited", cm.n.cfg.Cluster.Name, name, at)
		}
	}
}
