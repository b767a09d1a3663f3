package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// restart stops name gracefully and starts it again on the same data dir,
// mesh port and gossip port, joining the gossip at join.
func (tc *testCluster) restart(name, join string) *clusterMember {
	t := tc.t
	t.Helper()
	old := tc.nodes[name]
	cfg := old.an.cfg
	_, p, err := net.SplitHostPort(clusterOf(old.n).Mesh().Addr())
	if err != nil {
		t.Fatal(err)
	}
	meshPort, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	// The gossip port too: the others' join addresses and views name it
	// (a node left alone rejoins only through its join addresses, which a
	// new port would leave stale, as a restart on a host does not).
	_, gp, err := net.SplitHostPort(old.gossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	gossipPort, err := strconv.Atoi(gp)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.tn.stop(); err != nil {
		t.Fatalf("graceful stop of %s: %v", name, err)
	}
	prev := tc.beforeStart
	defer func() { tc.beforeStart = prev }()
	tc.beforeStart = func(d *Deps, h *testHooks) {
		if prev != nil {
			prev(d, h)
		}
		hook := h.cluster.Mesh
		h.cluster.Mesh = func(c *mesh.Config) { hook(c); c.BindPort = meshPort }
	}
	return tc.startWith(name, join, cfg.Cluster.Raft.BootstrapExpect, func(c *Config) {
		c.Cluster.Raft = cfg.Cluster.Raft // the same data dir and Raft settings
		c.Cluster.Membership.BindPort = gossipPort
	})
}

// voterIn reports whether id is a voter in cm's Raft configuration.
func voterIn(cm *clusterMember, id string) bool {
	r := cm.n.raft()
	if r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

// ack is what a client was told about one ticket.
type ack struct {
	held        bool // the last acknowledged operation was a grant
	token       uint64
	validBefore uint64
	tokens      []uint64 // every acknowledged grant's token, in order
}

// loadWorker grants and releases its own tickets through the nodes in
// turn until stop closes. A ticket whose operation failed (its outcome is
// unknown: the node may have been stopping) is dropped from the check and
// the worker moves on to a fresh name.
type loadWorker struct {
	id      int
	clients []*atomic.Pointer[client.Client]
	acks    map[string]*ack // ticket → its acknowledged state
	dropped map[string]bool
	ops     atomic.Int64 // acknowledged operations (read while it runs)
}

func (w *loadWorker) run(stop <-chan struct{}) {
	holder := fmt.Sprintf("holder-%d", w.id)
	const slots = 6
	var gen [slots]int
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		slot := i % slots
		name := fmt.Sprintf("w%d-s%d-g%d", w.id, slot, gen[slot])
		c := w.clients[i%len(w.clients)].Load()
		a := w.acks[name]
		if a == nil {
			a = &ack{}
			w.acks[name] = a
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		if a.held {
			_, err = c.Release(ctx, name, holder, a.token)
			if err == nil {
				a.held = false
			}
		} else {
			var g *client.Lease
			g, err = c.Grant(ctx, name, holder, 60)
			if err == nil {
				a.held, a.token, a.validBefore = true, g.Token, g.ConservativeValidBeforeUnixMs
				a.tokens = append(a.tokens, g.Token)
			}
		}
		cancel()
		if err != nil {
			w.dropped[name] = true
			gen[slot]++
			continue
		}
		w.ops.Add(1)
	}
}

// SPEC §5, issue 12 items 6 and 8: a three-node cluster under continuous
// grant/release load through every node; each node is stopped gracefully
// and started again on its data dir, one at a time, waiting until it is a
// voter again and the cluster has a ready leader. Afterwards every
// acknowledged grant not released is on the leader with the same token and
// expiry, released ones are gone, and tokens strictly increase per ticket
// and are never reused.
func TestClusterRollingRestartUnderLoad(t *testing.T) {
	t.Parallel()
	tc, _ := formThree(t)
	tc.waitReady(tc.names...)
	clients := make([]*atomic.Pointer[client.Client], len(tc.names))
	for i, name := range tc.names {
		clients[i] = &atomic.Pointer[client.Client]{}
		clients[i].Store(tc.nodes[name].tn.c)
	}
	const nWorkers = 3
	workers := make([]*loadWorker, nWorkers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		// Each worker starts at another node: every node takes load.
		cs := append(slices.Clone(clients[i%len(clients):]), clients[:i%len(clients)]...)
		workers[i] = &loadWorker{id: i, clients: cs, acks: map[string]*ack{}, dropped: map[string]bool{}}
		wg.Go(func() { workers[i].run(stop) })
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	for i, name := range tc.names {
		join := tc.nodes[tc.names[(i+1)%len(tc.names)]].gossipAddr()
		cm := tc.restart(name, join)
		clients[i].Store(cm.tn.c)
		var leader string
		waitFor(t, name+" a voter again under a ready leader", 20*time.Second, func() bool {
			ls := tc.leaders()
			if len(ls) != 1 {
				return false
			}
			leader = ls[0]
			return voterIn(tc.nodes[leader], name) && len(configIDs(tc.nodes[leader])) == 3
		})
		tc.waitReady(name)
		t.Logf("restarted %s; leader %s", name, leader)
	}
	// Some load after the last restart, then stop it: at least the 30
	// acknowledged operations checked below (a loaded machine may not have
	// fitted them into the restarts, which take a few seconds).
	firstGrant(t, tc.others(""), "after-roll", 10*time.Second)
	waitFor(t, "30 acknowledged operations", 30*time.Second, func() bool {
		var n int64
		for _, w := range workers {
			n += w.ops.Load()
		}
		return n >= 30
	})
	stopLoad()

	leader := tc.leader()
	lc := tc.nodes[leader]
	// Read on the leader's FSM once it applied everything it committed.
	if err := lc.n.raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatalf("barrier on %s: %v", leader, err)
	}
	seen := map[uint64]string{}
	ops, checked, dropped := 0, 0, 0
	for _, w := range workers {
		ops += int(w.ops.Load())
		dropped += len(w.dropped)
		for name, a := range w.acks {
			for j, tok := range a.tokens {
				if j > 0 && tok <= a.tokens[j-1] {
					t.Errorf("%s: tokens %v not strictly increasing", name, a.tokens)
				}
				if other, dup := seen[tok]; dup {
					t.Errorf("token %d issued for %s and %s", tok, other, name)
				}
				seen[tok] = name
			}
			if w.dropped[name] {
				continue
			}
			checked++
			got, ok := lc.n.fsm.Get(name)
			switch {
			case a.held && !ok:
				t.Errorf("%s: acknowledged grant (token %d) lost on the leader", name, a.token)
			case a.held && (got.Token != a.token || got.ValidBeforeMs != a.validBefore || got.Holder != fmt.Sprintf("holder-%d", w.id)):
				t.Errorf("%s: leader holds %+v, acknowledged token %d valid before %d", name, got, a.token, a.validBefore)
			case !a.held && ok:
				t.Errorf("%s: released, but the leader still holds %+v", name, got)
			}
		}
	}
	t.Logf("%d acknowledged operations, %d tickets checked, %d dropped (outcome unknown), %d tokens", ops, checked, dropped, len(seen))
	if ops < 30 || checked == 0 {
		t.Fatalf("too little load: %d operations, %d tickets checked", ops, checked)
	}
}

// SPEC §5, issue 12 item 8: the leader of a three-node cluster snapshots
// and truncates its log to a few entries; a fourth node (bootstrap_expect
// 0) then joins, is added by the reconciler and can only catch up by
// installing the snapshot. Its FSM holds every ticket with the leader's
// token, holder, conservative and server expiry, and nothing else.
func TestClusterSnapshotInstallOnNewcomer(t *testing.T) {
	t.Parallel()
	small := func(c *Config) {
		c.Cluster.Raft.TrailingLogs = 4
		c.Cluster.Raft.SnapshotInterval = time.Hour // snapshots are forced
	}
	tc := newTestCluster(t, "n1", "n2", "n3", "n4")
	first := tc.startWith("n1", "", 3, small)
	tc.startWith("n2", first.gossipAddr(), 3, small)
	tc.startWith("n3", first.gossipAddr(), 3, small)
	leader := tc.leader()
	lc := tc.nodes[leader]
	const nTickets = 120
	for i := range nTickets {
		name := fmt.Sprintf("t%03d", i)
		g, err := lc.tn.c.Grant(bg, name, fmt.Sprintf("h%d", i%7), 1+i%250)
		if err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
		if i%5 == 0 { // holes in the state
			if _, err := lc.tn.c.Release(bg, name, g.Holder, g.Token); err != nil {
				t.Fatalf("release %s: %v", name, err)
			}
		}
	}
	r := lc.n.raft()
	if err := r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot on %s: %v", leader, err)
	}
	snapIdx := r.LastIndex()
	// Entries after the snapshot reach the newcomer by the log.
	for i := range 3 {
		if _, err := lc.tn.c.Grant(bg, fmt.Sprintf("late%d", i), "late", 30); err != nil {
			t.Fatal(err)
		}
	}

	nc := tc.startWith("n4", lc.gossipAddr(), 0, small)
	waitFor(t, "n4 in the configuration", 20*time.Second, func() bool { return slices.Contains(configIDs(lc), "n4") })
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	want := lc.n.fsm.Index()
	waitFor(t, "n4 caught up", 20*time.Second, func() bool { return nc.n.fsm.Index() >= want })
	st := nc.n.raft().Stats()
	if si, _ := strconv.ParseUint(st["last_snapshot_index"], 10, 64); si < snapIdx-4 {
		t.Fatalf("n4's last snapshot index %s, want the leader's snapshot (≥ %d): it did not install one", st["last_snapshot_index"], snapIdx-4)
	}
	lt, _ := lc.n.fsm.List("", 1000)
	nt, _ := nc.n.fsm.List("", 1000)
	if len(lt) != nTickets-nTickets/5+3 || len(nt) != len(lt) {
		t.Fatalf("leader holds %d tickets, n4 %d; want %d", len(lt), len(nt), nTickets-nTickets/5+3)
	}
	for i := range lt {
		if lt[i] != nt[i] {
			t.Errorf("ticket %d: leader %+v, n4 %+v", i, lt[i], nt[i])
		}
	}
}

// logRecord keeps every log line written to it (and shows it on t.Log
// until the test ends).
type logRecord struct {
	gl    *guardedLog
	mu    sync.Mutex
	lines []string
}

func (r *logRecord) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.lines = append(r.lines, string(p))
	r.mu.Unlock()
	return r.gl.Write(p)
}

// has reports whether one line contains every part.
func (r *logRecord) has(parts ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return true
		}
	}
	return false
}

// SPEC §5 "Membership" (bad input), issue 12 item 8: a raw memberlist node
// with a trusted name and the gossip key, advertising garbage metadata,
// joins a running cluster's gossip. It is refused and logged, never in
// /v1/cluster/members or Raft; the reconciler keeps working: a proper node
// joining afterwards is added.
func TestClusterMalformedMetaIgnored(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "bad", "n4")
	gl := &guardedLog{t: t}
	t.Cleanup(gl.stop)
	rec := &logRecord{gl: gl}
	tc.beforeStart = func(d *Deps, _ *testHooks) {
		d.Logger = slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	leader := tc.leader()
	lc := tc.nodes[leader]

	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "bad", "127.0.0.1", 0
	mc.SecretKey = []byte("0123456789abcdef") // gossipSecret, decoded
	mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval = 100*time.Millisecond, 80*time.Millisecond, 50*time.Millisecond
	mc.Delegate = rawDelegate{meta: []byte{membership.MetaVersion, 0xff, 'g', 'a', 'r', 'b', 'a', 'g', 'e'}}
	mc.LogOutput = gl
	raw, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Shutdown() }()
	_, _ = raw.Join([]string{lc.gossipAddr()}) // refused: the answer does not matter
	waitFor(t, "the malformed member refused and logged", 10*time.Second, func() bool {
		return rec.has("peer refused", `\"bad\"`, "reason="+membership.ReasonMalformedMeta)
	})

	nc := tc.start("n4", first.gossipAddr(), 0)
	waitFor(t, "n4 added by the reconciler", 20*time.Second, func() bool { return slices.Contains(configIDs(lc), "n4") })
	grantRetry(t, lc, "after", "h", 30) // (a leader change under load is a 503, retried)
	for _, cm := range []*clusterMember{lc, nc} {
		if slices.Contains(configIDs(cm), "bad") {
			t.Fatalf("the malformed member is in Raft: %v", configIDs(cm))
		}
		if _, ok := memberMeta(cm.n, "bad"); ok {
			t.Fatal("the malformed member is in gossip")
		}
	}
	ms, err := lc.n.Members(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if m.ID == "bad" {
			t.Fatalf("the malformed member is in /v1/cluster/members: %+v", m)
		}
	}
	if len(ms.Members) != 4 {
		t.Fatalf("members %+v, want n1–n4", ms)
	}
}

// rawDelegate advertises whatever bytes it is given as metadata.
type rawDelegate struct{ meta []byte }

func (d rawDelegate) NodeMeta(int) []byte           { return d.meta }
func (rawDelegate) NotifyMsg([]byte)                {}
func (rawDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (rawDelegate) LocalState(bool) []byte          { return nil }
func (rawDelegate) MergeRemoteState([]byte, bool)   {}

// SPEC §5 (a node restarting on a new address rejoins): a voter restarted
// on another mesh port is reached by the leader at once — Raft dials the
// mesh address gossip advertises, not the one its configuration recorded —
// so it catches up on what was committed while it was away instead of
// campaigning alone at the old address.
func TestClusterVoterRestartsOnNewMeshPort(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	victim := tc.others(leader)[0].n.cfg.Cluster.Name
	old := tc.nodes[victim]
	oldAddr := clusterOf(old.n).Mesh().Addr()
	cfg := old.an.cfg
	if err := old.tn.stop(); err != nil {
		t.Fatalf("stop %s: %v", victim, err)
	}
	g, _ := grantRetry(t, lc, "while-away", "h", 60)
	// Restarted with its mesh on an ephemeral port (the harness's default):
	// a new address, the old one in the leader's Raft configuration.
	nc := tc.startWith(victim, lc.gossipAddr(), cfg.Cluster.Raft.BootstrapExpect, func(c *Config) {
		c.Cluster.Raft = cfg.Cluster.Raft
	})
	if clusterOf(nc.n).Mesh().Addr() == oldAddr {
		t.Skipf("the ephemeral port came back the same (%s): nothing to test this time", oldAddr)
	}
	waitFor(t, victim+" applied the grant made while it was away", 20*time.Second, func() bool {
		st, err := nc.tn.c.Status(bg)
		return err == nil && st.Raft.AppliedIndex >= g.Token
	})
	waitFor(t, victim+" ready with a leader", 20*time.Second, func() bool {
		st, err := nc.tn.c.Status(bg)
		return err == nil && st.Ready && st.Leader != ""
	})
	if ls := tc.leaders(); len(ls) != 1 {
		t.Fatalf("leaders after the restart: %v", ls)
	}
}
