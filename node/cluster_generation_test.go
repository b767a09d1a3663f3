package node

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/datadir"
)

// voterIDs is the voters of the Raft configuration on cm, sorted.
func voterIDs(cm *clusterMember) []string {
	r := cm.n.raft()
	if r == nil {
		return nil
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

// SPEC §3.4 "Replacement by a new generation", §5: a follower's — or the
// leader's — clock FAILs (its agent lies about the offset, not one of the
// lying-agent reasons that need a look); it hands off, marks its dir
// retired and exits with its clock error. Started again on that data dir
// (as its supervisor would) with a healthy agent, it moves the retired
// dir aside, comes back as NAME~2 through clock_check, joins as a
// non-voter, is promoted into the retired voter's slot once caught up,
// and the retired NodeId leaves the configuration; /v1/cluster/members
// shows the generation and the retired NodeId; tickets granted before are
// still held and the new generation serves.
func TestClusterFailedNodeComesBackAsNextGeneration(t *testing.T) {
	t.Run("follower", func(t *testing.T) { comesBackAsNextGeneration(t, false) })
	t.Run("leader", func(t *testing.T) { comesBackAsNextGeneration(t, true) })
}

func comesBackAsNextGeneration(t *testing.T, failLeader bool) {
	tc, leader := formThree(t)
	victim := tc.others(leader)[0]
	lc := tc.others(victim.n.cfg.Cluster.Name)[0] // a node that stays (gossip seed)
	if failLeader {
		victim = tc.nodes[leader]
		lc = tc.others(leader)[0]
	}
	name := victim.n.cfg.Cluster.Name
	if _, err := tc.nodes[leader].tn.c.Grant(bg, "before", "w", 60); err != nil {
		t.Fatal(err)
	}
	lie(t, victim)
	var clockErr *clockhealth.Error
	if err := waitExit(t, victim.tn, 15*time.Second); !errors.As(err, &clockErr) {
		t.Fatalf("%s returned %v, want its clock error (exit status 1)", name, err)
	}
	raftCfg := victim.an.cfg.Cluster.Raft
	dir := raftCfg.DataDir

	// The supervisor's restart: same config, same data dir, a healthy agent.
	start := time.Now()
	next := tc.startWith(name, lc.gossipAddr(), raftCfg.BootstrapExpect, func(c *Config) { c.Cluster.Raft = raftCfg })
	want := name + "~2"
	if got := next.n.cfg.Cluster.Name; got != want {
		t.Fatalf("restarted as %q, want %q", got, want)
	}
	ms, err := filepath.Glob(filepath.Join(filepath.Dir(dir), "retired-"+name+"-*"))
	if err != nil || len(ms) != 1 {
		t.Fatalf("the retired dir kept aside: %v, %v", ms, err)
	}
	if _, err := os.Stat(filepath.Join(ms[0], datadir.RetiredFile)); err != nil {
		t.Fatalf("the dir kept aside lost its marker: %v", err)
	}
	others := tc.others(name)
	wantVoters := []string{}
	for _, cm := range others {
		wantVoters = append(wantVoters, cm.n.cfg.Cluster.Name)
	}
	wantVoters = append(wantVoters, want)
	slices.Sort(wantVoters)
	waitFor(t, want+" promoted into "+name+"'s slot and "+name+" removed", 60*time.Second, func() bool {
		for _, cm := range others {
			if ls := tc.leaders(); len(ls) == 1 && ls[0] == cm.n.cfg.Cluster.Name {
				return slices.Equal(voterIDs(cm), wantVoters) && !slices.Contains(configIDs(cm), name)
			}
		}
		return false
	})
	t.Logf("%s back as a voter %v after its restart", want, time.Since(start).Round(time.Millisecond))
	for _, cm := range append(others, next) {
		if !cm.n.fsm.IsRetired(name) || cm.n.fsm.IsRetired(want) {
			t.Fatalf("%s: retired %s %v, %s %v", cm.n.cfg.Cluster.Name, name, cm.n.fsm.IsRetired(name), want, cm.n.fsm.IsRetired(want))
		}
	}
	waitFor(t, want+" ready", 20*time.Second, func() bool { _, err := next.tn.c.Ready(bg); return err == nil })
	if g, err := next.tn.c.Get(bg, "before"); err != nil || g.Holder != "w" {
		t.Fatalf("the new generation reads %+v, %v", g, err)
	}
	if _, err := next.tn.c.Grant(bg, "after", "w", 30); err != nil {
		t.Fatalf("grant through the new generation: %v", err)
	}
	// The admin listing: generations and the retired NodeId.
	var via *clusterMember
	for _, cm := range others {
		if cm.n.raft().State() == raft.Leader {
			via = cm
		}
	}
	if via == nil {
		t.Fatal("no leader among the others")
	}
	mlist, err := via.n.Members(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(mlist.RetiredNodeIDs, name) {
		t.Fatalf("retired_node_ids %v lacks %s", mlist.RetiredNodeIDs, name)
	}
	found := false
	for _, m := range mlist.Members {
		if m.ID == want {
			found = true
			if m.Name != name || m.Generation != 2 || m.Suffrage != "voter" || m.Retired || m.Gossip != "alive" {
				t.Fatalf("members entry %+v", m)
			}
		}
		if m.ID == name {
			t.Fatalf("the retired %s is still listed: %+v", name, m)
		}
	}
	if !found {
		t.Fatalf("%s not in members %+v", want, mlist.Members)
	}
}

// SPEC §3.4 "a NodeId is never reused", the data dir lost entirely: a
// follower's clock FAILs and the cluster records its NodeId retired; its
// data dir is then lost. Started on an empty dir it is NAME again, asks a
// peer for the retired generations of its name, finds itself retired,
// marks the dir (the cluster's generation as the floor) and exits
// (ErrNodeIDRetired, exit status 1); started once more it comes back as
// NAME~2 and is promoted. It never joined as NAME.
func TestClusterLostDataDirNeverReusesNodeID(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	victim := tc.others(leader)[0]
	name := victim.n.cfg.Cluster.Name
	lie(t, victim)
	if err := waitExit(t, victim.tn, 15*time.Second); err == nil {
		t.Fatalf("%s exited without its clock error", name)
	}
	waitFor(t, "the leader records "+name+" retired", 20*time.Second, func() bool { return lc.n.fsm.IsRetired(name) })
	raftCfg := victim.an.cfg.Cluster.Raft
	if err := os.RemoveAll(raftCfg.DataDir); err != nil {
		t.Fatal(err)
	}

	again := tc.startWith(name, lc.gossipAddr(), raftCfg.BootstrapExpect, func(c *Config) { c.Cluster.Raft = raftCfg })
	if got := again.n.cfg.Cluster.Name; got != name {
		t.Fatalf("an empty data dir started as %q, want %q", got, name)
	}
	if err := waitExit(t, again.tn, 20*time.Second); !errors.Is(err, cluster.ErrNodeIDRetired) {
		t.Fatalf("%s on an empty data dir returned %v, want ErrNodeIDRetired", name, err)
	}
	if s, err := again.n.cons.Load().Servers(); err != nil || len(s) != 0 {
		t.Fatalf("the reused %s joined: configuration %v, %v", name, s, err)
	}
	next := tc.startWith(name, lc.gossipAddr(), raftCfg.BootstrapExpect, func(c *Config) { c.Cluster.Raft = raftCfg })
	want := name + "~2"
	if got := next.n.cfg.Cluster.Name; got != want {
		t.Fatalf("restarted as %q, want %q", got, want)
	}
	waitFor(t, want+" a voter, "+name+" gone", 60*time.Second, func() bool {
		for _, cm := range tc.others(name) {
			if cm.n.raft().State() == raft.Leader {
				v := voterIDs(cm)
				return slices.Contains(v, want) && len(v) == 3 && !slices.Contains(configIDs(cm), name)
			}
		}
		return false
	})
}
