package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// countFSM is the smallest FSM: it counts applied entries.
type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any { f.mu.Lock(); f.n++; f.mu.Unlock(); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, errors.New("countFSM: no snapshots in this test")
}
func (f *countFSM) Restore(io.ReadCloser) error {
	return errors.New("countFSM: no snapshots in this test")
}

// raftCluster is n in-process hashicorp/raft nodes on InmemTransports, all
// connected; only the first is bootstrapped (as the single voter).
type raftCluster struct {
	t      *testing.T
	ids    []string
	rafts  map[string]*raft.Raft
	trans  map[string]*raft.InmemTransport
	mu     sync.Mutex
	gossip map[string]Member
}

func newRaftCluster(t *testing.T, n int, domains ...string) *raftCluster {
	t.Helper()
	c := &raftCluster{t: t, rafts: map[string]*raft.Raft{}, trans: map[string]*raft.InmemTransport{}, gossip: map[string]Member{}}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		c.ids = append(c.ids, id)
		c.trans[id] = tr
		c.gossip[id] = Member{ID: id, Address: id, Eligible: true, FailureDomain: domains[(i-1)%len(domains)], Alive: true, RaftContact: true, ClockHealthy: true}
	}
	for _, a := range c.ids {
		for _, b := range c.ids {
			if a != b {
				c.trans[a].Connect(raft.ServerAddress(b), c.trans[b])
			}
		}
	}
	for i, id := range c.ids {
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(id)
		conf.HeartbeatTimeout = 300 * time.Millisecond
		conf.ElectionTimeout = 300 * time.Millisecond
		conf.LeaderLeaseTimeout = 150 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.LogOutput = io.Discard
		logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		if i == 0 {
			boot := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(id), Address: raft.ServerAddress(id), Suffrage: raft.Voter}}}
			if err := raft.BootstrapCluster(conf, logs, logs, snaps, c.trans[id], boot); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(conf, &countFSM{}, logs, logs, snaps, c.trans[id])
		if err != nil {
			t.Fatal(err)
		}
		c.rafts[id] = r
	}
	t.Cleanup(c.shutdown)
	eventually(t, "r1 leads", func() bool { return c.rafts["r1"].State() == raft.Leader })
	return c
}

func (c *raftCluster) shutdown() {
	for _, id := range c.ids {
		if err := c.rafts[id].Shutdown().Error(); err != nil {
			c.t.Errorf("shutdown %s: %v", id, err)
		}
		c.trans[id].Close()
	}
}

// kill stops a node and marks it gossip-dead and silent.
func (c *raftCluster) kill(id string) {
	if err := c.rafts[id].Shutdown().Error(); err != nil {
		c.t.Fatal(err)
	}
	c.trans[id].DisconnectAll()
	for _, other := range c.ids {
		c.trans[other].Disconnect(raft.ServerAddress(id))
	}
	c.mu.Lock()
	m := c.gossip[id]
	m.Alive, m.RaftContact = false, false
	c.gossip[id] = m
	c.mu.Unlock()
}

func (c *raftCluster) members() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ms []Member
	for _, id := range c.ids {
		ms = append(ms, c.gossip[id])
	}
	return ms
}

// progress is each node's own last log index, as a follower would
// advertise it.
func (c *raftCluster) progress(id string) (uint64, bool) {
	c.mu.Lock()
	alive := c.gossip[id].Alive
	c.mu.Unlock()
	if r, ok := c.rafts[id]; ok && alive {
		return r.LastIndex(), true
	}
	return 0, false
}

// leads reports whether id leads, failing the test when leadership moved
// (this test runs one Runner, on r1).
func (c *raftCluster) leads(id string) bool {
	if s := c.rafts[id].State(); s != raft.Leader {
		c.t.Fatalf("%s lost leadership (%v): the machine is too loaded for these Raft timeouts", id, s)
	}
	return true
}

// roles is the leader's configuration as id → suffrage.
func (c *raftCluster) roles() map[string]raft.ServerSuffrage {
	f := c.rafts["r1"].GetConfiguration()
	if err := f.Error(); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]raft.ServerSuffrage{}
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = s.Suffrage
	}
	return out
}

// eventually waits (up to testWait) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(testWait)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func sameRoles(got map[string]raft.ServerSuffrage, want map[string]raft.ServerSuffrage) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v { // raft.Voter is the zero value
			return false
		}
	}
	return true
}

// recordingOps is RaftOps that remembers what it was asked, to check that
// every promotion is of a server added as a non-voter first.
type recordingOps struct {
	*RaftAdapter
	mu  sync.Mutex
	log []Change
}

func (o *recordingOps) rec(c Change) {
	o.mu.Lock()
	o.log = append(o.log, c)
	o.mu.Unlock()
}
func (o *recordingOps) AddNonvoter(id, addr string) error {
	o.rec(Change{Kind: AddNonvoter, ID: id})
	return o.RaftAdapter.AddNonvoter(id, addr)
}
func (o *recordingOps) Promote(id, addr string) error {
	o.rec(Change{Kind: Promote, ID: id})
	return o.RaftAdapter.Promote(id, addr)
}
func (o *recordingOps) Remove(id string) error {
	o.rec(Change{Kind: Remove, ID: id})
	return o.RaftAdapter.Remove(id)
}

// SPEC §5 Reconciler against real hashicorp/raft: five nodes, one
// bootstrapped, limits 3 voters and 1 standby: the runner adds the others
// as non-voters, promotes them once they have caught up (judged from their
// log index), ends with voters in three domains; then a voter dies and the
// standby takes its slot, the dead voter is removed, and the cluster still
// commits.
func TestRunnerRealRaft(t *testing.T) {
	c := newRaftCluster(t, 5, "a", "b", "c")
	ops := &recordingOps{RaftAdapter: NewRaftAdapter(c.rafts["r1"], time.Second)}
	r, err := NewRunner(RunnerConfig{
		Raft: ops, LocalID: "r1", Members: c.members, Limits: Limits{MaxVoters: 3, MaxStandbys: 1},
		Debounce: 20 * time.Millisecond, Interval: 50 * time.Millisecond,
		Progress: c.progress, MaxLag: 2, StableFor: 50 * time.Millisecond,
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()

	// r1..r3 spread over a, b, c; r4 (a) the standby; r5 a client.
	want := map[string]raft.ServerSuffrage{"r1": raft.Voter, "r2": raft.Voter, "r3": raft.Voter, "r4": raft.Nonvoter}
	eventually(t, fmt.Sprintf("the configuration is %v", want), func() bool { return c.leads("r1") && sameRoles(c.roles(), want) })
	if got := c.rafts["r4"].LastIndex(); got+2 < c.rafts["r1"].LastIndex() {
		t.Fatalf("the standby does not replicate: index %d, leader %d", got, c.rafts["r1"].LastIndex())
	}
	ops.mu.Lock()
	added := map[string]bool{}
	for _, ch := range ops.log {
		switch ch.Kind {
		case AddNonvoter:
			added[ch.ID] = true
		case Promote:
			if !added[ch.ID] {
				t.Fatalf("%s promoted without being added as a non-voter first: %v", ch.ID, ops.log)
			}
		}
	}
	ops.mu.Unlock()

	// Let r4 be caught up for StableFor (the behaviour under test is time
	// passing), so that it is a ready standby when r2 dies.
	stable := time.NewTimer(50*time.Millisecond + 2*50*time.Millisecond)
	<-stable.C
	c.kill("r2")
	r.Trigger()
	// The standby r4 takes r2's slot at once; r5 (domain b) is added,
	// catches up and then takes the voter slot for domain b, r4 going back
	// to standby.
	want = map[string]raft.ServerSuffrage{"r1": raft.Voter, "r3": raft.Voter, "r5": raft.Voter, "r4": raft.Nonvoter}
	eventually(t, fmt.Sprintf("the configuration is %v", want), func() bool { return c.leads("r1") && sameRoles(c.roles(), want) })
	ops.mu.Lock()
	var order []string
	for _, ch := range ops.log {
		if ch.Kind == Promote || ch.Kind == Remove {
			order = append(order, ch.Kind.String()+" "+ch.ID)
		}
	}
	ops.mu.Unlock()
	if n := len(order); n < 3 || order[n-3] != "promote r4" || order[n-2] != "remove r2" || order[n-1] != "promote r5" {
		t.Fatalf("after r2 died: %v, want promote r4, remove r2, then promote r5", order)
	}
	if err := c.rafts["r1"].Apply([]byte("after"), time.Second).Error(); err != nil {
		t.Fatalf("the cluster no longer commits: %v", err)
	}
}

// The adapter's ops do what they say on real Raft, and Promote refuses a
// server that is not a non-voter (AddVoter would make it a full voter).
func TestRaftAdapterOps(t *testing.T) {
	c := newRaftCluster(t, 3, "a")
	a := NewRaftAdapter(c.rafts["r1"], time.Second)
	if a.LeaderID() != "r1" {
		t.Fatalf("LeaderID %q", a.LeaderID())
	}
	step := func(what string, op func() error, want map[string]raft.ServerSuffrage) {
		t.Helper()
		if _, err := a.GetConfiguration(); err != nil {
			t.Fatal(err)
		}
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := c.roles(); !sameRoles(got, want) {
			t.Fatalf("after %s: %v, want %v", what, got, want)
		}
	}
	if _, err := a.GetConfiguration(); err != nil {
		t.Fatal(err)
	}
	if err := a.Promote("r2", "r2"); !errors.Is(err, ErrNotNonvoter) {
		t.Fatalf("Promote of a server outside the configuration: %v, want ErrNotNonvoter", err)
	}
	step("add r2", func() error { return a.AddNonvoter("r2", "r2") }, map[string]raft.ServerSuffrage{"r1": raft.Voter, "r2": raft.Nonvoter})
	step("promote r2", func() error { return a.Promote("r2", "r2") }, map[string]raft.ServerSuffrage{"r1": raft.Voter, "r2": raft.Voter})
	if err := a.Promote("r2", "r2"); !errors.Is(err, ErrNotNonvoter) {
		t.Fatalf("Promote without a fresh configuration: %v, want ErrNotNonvoter", err)
	}
	step("demote r2", func() error { return a.Demote("r2") }, map[string]raft.ServerSuffrage{"r1": raft.Voter, "r2": raft.Nonvoter})
	step("remove r2", func() error { return a.Remove("r2") }, map[string]raft.ServerSuffrage{"r1": raft.Voter})

	// A change planned on a configuration that moved on is refused.
	if _, err := a.GetConfiguration(); err != nil {
		t.Fatal(err)
	}
	if err := c.rafts["r1"].AddNonvoter("r3", "r3", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove("r3"); err == nil {
		t.Fatal("a change on a stale configuration index was applied")
	}
	if got := c.roles(); got["r3"] != raft.Nonvoter {
		t.Fatalf("stale change touched r3: %v", got)
	}
	// After the refusal the adapter no longer knows the index: the
	// re-planned change goes through.
	step("remove r3", func() error { return a.Remove("r3") }, map[string]raft.ServerSuffrage{"r1": raft.Voter})
}

// A change's future goes through the shutdown end the adapter was given
// before anyone waits on it (hashicorp/raft may never answer a change
// that committed just before it shut down; consensus.Raft.EndsAtShutdown
// then ends the wait, and the node's stop does not hang on the
// reconciler).
func TestAdapterChangeEndsAtShutdown(t *testing.T) {
	c := newRaftCluster(t, 2, "a")
	var seen []raft.Future
	a := NewRaftAdapter(c.rafts["r1"], time.Second).WithShutdownEnd(func(f raft.Future) { seen = append(seen, f) })
	if _, err := a.GetConfiguration(); err != nil {
		t.Fatal(err)
	}
	if err := a.AddNonvoter("r2", "r2"); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 {
		t.Fatalf("%d futures went through the shutdown end, want the change's", len(seen))
	}
}
