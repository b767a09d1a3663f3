package node

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §3.4 whole-cluster recovery, issue 12 item 4: the agents of all
// three voters start lying at once (a shared agent outage): every voter
// goes FAILED, shuts Raft down and is retired. `Recover` from the newest
// retired data dir under a new NodeId refuses every NodeId the old cluster
// ever used (its configurations and its replicated retired set); under
// r1 it gives a single voter that keeps every ticket with its holder,
// token and absolute expiry and holds Grant off for 250 s + Δ. Two more
// new NodeIds join it during the hold-off and are promoted; the recovered
// voter's Raft address becomes its mesh address. After the hold-off a
// grant's token is above every old token.
func TestClusterWholeClusterRecovery(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "r1", "j1", "j2")
	tc.names = []string{"n1", "n2", "n3"} // the old cluster; the new NodeIds are added as they start
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	lc := tc.nodes[tc.leader()]
	for _, name := range []string{"a", "b", "c", "d"} {
		if _, err := lc.tn.c.Grant(bg, name, "h-"+name, 250); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lc.tn.c.Release(bg, "b", "h-b", mustToken(t, lc.tn, "b")); err != nil {
		t.Fatal(err)
	}
	// A NodeId in the replicated retired set only (never in a configuration).
	if err := clusterOf(lc.n).ProposeRetire(bg, "ghost"); err != nil {
		t.Fatal(err)
	}
	before := listAll(t, lc.tn)
	if len(before) != 3 {
		t.Fatalf("before the outage: %v", before)
	}

	// The shared outage: every agent lies (offset 4Δ) before any node
	// probes again, then each probes once.
	for _, name := range tc.names {
		cm := tc.nodes[name]
		ahead := 4 * cm.an.cfg.Clock.DeltaMs
		cm.an.agent.SetHandler(func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: cm.an.agent.Sign(req.Nonce, uint64(cm.an.clk.WallNs()/1e6)+ahead, 3, true, 100)}
		})
	}
	for _, name := range tc.names {
		if !tc.nodes[name].an.ts.Fire("probe", probeFireWait) {
			t.Fatalf("%s: probe ticker not taken", name)
		}
	}
	var dirs []string
	for _, name := range tc.names {
		cm := tc.nodes[name]
		// Each exits by itself with its clock error once its Raft is shut
		// down (hashicorp/raft's State may still say Follower then:
		// raftShutDown).
		var clockErr *clockhealth.Error
		if err := waitExit(t, cm.tn, 20*time.Second); !errors.As(err, &clockErr) {
			t.Fatalf("%s returned %v, want its clock error", name, err)
		}
		if r := cm.n.raft(); r == nil || !raftShutDown(r) {
			t.Fatalf("%s exited without its Raft shut down", name)
		}
		dir := cm.an.cfg.Cluster.Raft.DataDir
		if _, err := os.Stat(filepath.Join(dir, datadir.RetiredFile)); err != nil {
			t.Fatalf("%s retired marker: %v", name, err)
		}
		dirs = append(dirs, dir)
	}

	// The newest retired state: the highest last index.
	from, newest := "", uint64(0)
	for _, dir := range dirs {
		d, err := datadir.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		info, err := consensus.ReadState(d, ticket.New(500))
		d.Close()
		if err != nil {
			t.Fatalf("reading %s: %v", dir, err)
		}
		if info.LastIndex > newest {
			from, newest = dir, info.LastIndex
		}
	}
	fresh := filepath.Join(t.TempDir(), "r1")
	now := newManualClock().Now() // r1's manual clock starts there too
	var ce *config.Error
	for _, used := range []string{"n1", "n2", "n3", "ghost"} {
		if _, err := Recover(RecoverOptions{From: from, To: fresh, NodeID: used, DeltaMs: 500, Now: now}); !errors.As(err, &ce) || ce.Path != "--node-id" || !strings.Contains(err.Error(), "never used") {
			t.Fatalf("recover under %s, used by the old cluster: %v, want a --node-id refusal", used, err)
		}
		if ents, _ := os.ReadDir(fresh); len(ents) > 1 { // at most the lock file
			t.Fatalf("a refused recover wrote %v", ents)
		}
	}
	res, err := Recover(RecoverOptions{From: from, To: fresh, NodeID: "r1", DeltaMs: 500, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tickets != len(before) || res.LastIndex != newest {
		t.Fatalf("recovered %+v, want %d tickets up to index %d", res, len(before), newest)
	}

	tc.names = append(tc.names, "r1", "j1", "j2")
	r1 := tc.startWith("r1", "", 0, func(c *Config) {
		c.Cluster.Raft.DataDir = fresh
		c.Clock.StalenessMs = 600_000 // the test moves r1's clock past the hold-off in one step
	})
	tc.nodes["n1"], tc.nodes["n2"], tc.nodes["n3"] = nil, nil, nil // stopped
	var cerr *client.Error
	waitFor(t, "r1 leads, in hold_off", 20*time.Second, func() bool {
		_, err := r1.tn.c.Ready(bg)
		r := r1.n.raft()
		return errors.As(err, &cerr) && cerr.Stage == string(stage.HoldOff) && r != nil && r.State() == raft.Leader
	})
	if st, err := r1.tn.c.Status(bg); err != nil || !strings.Contains(st.HoldOffCause, "recovered from") ||
		st.HoldOffUntilUnixMs < uint64(now.Add(250*time.Second+500*time.Millisecond).UnixMilli()) {
		t.Fatalf("r1 status %+v, %v: want the recovery hold-off of 250 s + Δ", st, err)
	}
	if after := listAll(t, r1.tn); !maps.Equal(after, before) {
		t.Fatalf("tickets after recovery %v, before %v (holder, token and expiry must be identical)", after, before)
	}
	if _, err := r1.tn.c.Grant(bg, "e", "h", 30); !errors.As(err, &cerr) || cerr.Reason != "hold_off" {
		t.Fatalf("grant during the recovery hold-off: %v", err)
	}

	// Two new NodeIds join during the hold-off and are promoted.
	j1 := tc.start("j1", r1.gossipAddr(), 0)
	j2 := tc.start("j2", r1.gossipAddr(), 0)
	want := map[string]raft.ServerSuffrage{"r1": raft.Voter, "j1": raft.Voter, "j2": raft.Voter}
	waitFor(t, "r1, j1 and j2 voters", 30*time.Second, func() bool { return maps.Equal(suffrages(r1), want) })
	waitFor(t, "r1's Raft address is its mesh address", 10*time.Second, func() bool {
		s, err := r1.n.cons.Load().Servers()
		if err != nil {
			return false
		}
		for _, x := range s {
			if x.ID == "r1" {
				return string(x.Address) == clusterOf(r1.n).Mesh().Addr()
			}
		}
		return false
	})
	for _, cm := range []*clusterMember{j1, j2} {
		if got := listAll(t, cm.tn); !maps.Equal(got, before) {
			t.Fatalf("%s reads %v, want %v", cm.n.cfg.Cluster.Name, got, before)
		}
	}

	// Past the hold-off (r1's clock, with a fresh sample): grants resume,
	// through a follower too, with tokens above every old one.
	r1.an.clk.Advance(251 * time.Second)
	if !r1.an.ts.Fire("probe", probeFireWait) {
		t.Fatal("r1: probe ticker not taken")
	}
	var g *client.Lease
	waitFor(t, "a grant through j1 after the hold-off", 20*time.Second, func() bool {
		g, err = j1.tn.c.Grant(bg, "e", "h", 30)
		return err == nil
	})
	for name, w := range before {
		if g.Token <= w.Token || g.Token <= res.LastIndex {
			t.Fatalf("new token %d not above %s's old token %d / the old last index %d", g.Token, name, w.Token, res.LastIndex)
		}
	}
}
