package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// holdTransport is an in-memory transport that, for the peers named in
// hold, fails every AppendEntries carrying entries without sending it:
// heartbeats still go through, so the leader keeps its lease while the
// entries it appends reach only the others. No pipelining.
type holdTransport struct {
	*raft.InmemTransport
	mu     sync.Mutex
	hold   map[raft.ServerAddress]bool
	stalls map[raft.ServerAddress]chan struct{} // stall: entries block until closed
}

func (h *holdTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	h.mu.Lock()
	held := h.hold[target] && len(args.Entries) > 0
	stall := h.stalls[target]
	h.mu.Unlock()
	if held {
		return errors.New("test: entries held back")
	}
	if stall != nil && len(args.Entries) > 0 {
		<-stall
		return errors.New("test: entries stalled")
	}
	return h.InmemTransport.AppendEntries(id, target, args, resp)
}

// stall makes every AppendEntries carrying entries to peer block (the
// replication to it stuck, heartbeats still going through) until the
// returned function is called (also at cleanup).
func (h *holdTransport) stall(t *testing.T, peer string) (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	if h.stalls == nil {
		h.stalls = map[raft.ServerAddress]chan struct{}{}
	}
	h.stalls[raft.ServerAddress(peer)] = ch
	h.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.stalls, raft.ServerAddress(peer))
			h.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

func (h *holdTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (h *holdTransport) holdBack(peers ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range peers {
		h.hold[raft.ServerAddress(p)] = true
	}
}

// fateCluster is voters on in-memory transports, each a Raft of this
// package on its own data dir.
type fateCluster struct {
	t     *testing.T
	names []string
	nodes map[string]*Raft
	fsms  map[string]*ticket.FSM
	trans map[string]*holdTransport
}

func newFateCluster(t *testing.T, n int) *fateCluster {
	t.Helper()
	timing := Timing{Heartbeat: time.Second, Election: time.Second, LeaderLease: 500 * time.Millisecond, Commit: 5 * time.Millisecond}
	c := &fateCluster{t: t, nodes: map[string]*Raft{}, fsms: map[string]*ticket.FSM{}, trans: map[string]*holdTransport{}}
	conf := raft.Configuration{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		c.names = append(c.names, name)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress(name)})
		_, tr := raft.NewInmemTransportWithTimeout(raft.ServerAddress(name), 5*time.Second)
		c.trans[name] = &holdTransport{InmemTransport: tr, hold: map[raft.ServerAddress]bool{}}
	}
	c.connectAll()
	for _, name := range c.names {
		dir, err := datadir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c.fsms[name] = ticket.New(500)
		p, err := Open(Options{Dir: dir, FSM: c.fsms[name], LocalID: name, Transport: c.trans[name], Timing: timing,
			LogStore: LogStoreWAL, Bootstrap: &conf, Logger: testLogger(t).With("node", name)})
		if err != nil {
			dir.Close()
			t.Fatal(err)
		}
		c.nodes[name] = p
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Error(err)
			}
			c.trans[name].Close()
			dir.Close()
		})
	}
	return c
}

func (c *fateCluster) connectAll() {
	for _, a := range c.names {
		for _, b := range c.names {
			if a != b {
				c.trans[a].Connect(raft.ServerAddress(b), c.trans[b].InmemTransport)
			}
		}
	}
}

// isolate cuts name off from every other node, both ways.
func (c *fateCluster) isolate(name string) {
	c.trans[name].DisconnectAll()
	for _, o := range c.names {
		if o != name {
			c.trans[o].Disconnect(raft.ServerAddress(name))
		}
	}
}

func (c *fateCluster) leader(among ...string) string {
	c.t.Helper()
	if len(among) == 0 {
		among = c.names
	}
	var l string
	waitFor(c.t, fmt.Sprintf("a leader among %v", among), 60*time.Second, func() bool {
		for _, n := range among {
			if c.nodes[n].r.State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func (c *fateCluster) others(but ...string) []string {
	var out []string
	for _, n := range c.names {
		skip := false
		for _, b := range but {
			skip = skip || n == b
		}
		if !skip {
			out = append(out, n)
		}
	}
	return out
}

// waitApplied waits until every named node's FSM has applied index.
func (c *fateCluster) waitApplied(index uint64, names ...string) {
	c.t.Helper()
	for _, n := range names {
		waitFor(c.t, fmt.Sprintf("%s applying index %d", n, index), 60*time.Second, func() bool { return c.fsms[n].Index() >= index })
	}
}

func grantData(t *testing.T, name string) []byte {
	t.Helper()
	now := uint64(time.Now().UnixMilli())
	b, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: "h", LeaseS: 200, ExpiryMs: now + 200_000 + 500})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type proposal struct {
	name string
	res  ticket.Result
	err  error
}

// proposeAll proposes a grant of each name on p, each on its own
// goroutine, and returns the channel of their answers.
func proposeAll(t *testing.T, p *Raft, names ...string) <-chan proposal {
	out := make(chan proposal, len(names))
	for _, n := range names {
		data := grantData(t, n)
		go func() {
			res, err := p.ProposeWithin(context.Background(), data, time.Minute)
			out <- proposal{n, res, err}
		}()
	}
	return out
}

// initDelta commits the Init entry on the leader and waits for every node
// to apply it; it returns its index.
func (c *fateCluster) initDelta(leader string) uint64 {
	c.t.Helper()
	propose(c.t, c.nodes[leader], ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	idx := c.fsms[leader].Index()
	c.waitApplied(idx, c.names...)
	return idx
}

// A leader with entries in flight transfers its leadership (as a node
// stopping gracefully does): the entries reached the target but not a
// quorum, so the old leader answers its proposers ErrLeadershipLost.
// Each proposer must still get the FSM's real answer for its entry,
// applied under the next leader with its original term — never an
// unknown outcome. Five voters: the old leader's entries reach only the
// target (the other three get heartbeats only), so nothing is committed
// before the transfer.
func TestLostLeadershipAnswersTheAppliedResult(t *testing.T) {
	c := newFateCluster(t, 5)
	l := c.leader()
	c.initDelta(l)
	rest := c.others(l)
	target := rest[0]
	c.trans[l].holdBack(rest[1:]...)
	lp := c.nodes[l]
	lp.fateBound = time.Minute // no bound in play: the entries commit, or the test fails on its own deadline
	first := lp.r.LastIndex() + 1
	names := []string{"a", "b", "c", "d", "e", "f"}
	answers := proposeAll(t, lp, names...)
	last := first + uint64(len(names)) - 1
	waitFor(t, "the entries stored on the target", 60*time.Second, func() bool {
		return lp.r.LastIndex() >= last && c.nodes[target].r.LastIndex() >= last
	})
	if ci := lp.r.CommitIndex(); ci >= first {
		t.Fatalf("the leader committed index %d before the transfer: the entries were not in flight", ci)
	}
	if err := lp.r.LeadershipTransferToServer(raft.ServerID(target), raft.ServerAddress(target)).Error(); err != nil {
		t.Fatalf("leadership transfer to %s: %v", target, err)
	}
	// Settle (a graceful stop's wait after its hand-off) returns once
	// every proposer has its entry's fate.
	if !lp.Settle(time.Minute) {
		t.Fatal("Settle: proposals still in flight after a minute")
	}
	if got := lp.Fates(); got.Applied+got.Replaced+got.Unknown != uint64(len(names)) {
		t.Errorf("Settle returned with fates %+v for %d proposals", got, len(names))
	}
	for range names {
		var a proposal
		select {
		case a = <-answers:
		case <-time.After(2 * time.Minute):
			t.Fatal("a proposer never answered")
		}
		tk, ok := c.fsms[target].Get(a.name)
		switch {
		case a.err != nil:
			t.Errorf("grant %s: %v; want the applied result", a.name, a.err)
		case a.res.Code != ticket.CodeOK || !ok || a.res.Ticket != tk:
			t.Errorf("grant %s answered %+v; the new leader holds %+v (%v)", a.name, a.res, tk, ok)
		}
	}
	if got := lp.Fates(); got.Applied != uint64(len(names)) || got.Replaced != 0 || got.Unknown != 0 {
		t.Errorf("fates %+v, want %d applied after the lost leadership", got, len(names))
	}
}

// An old leader cut off with uncommitted entries: the others elect a new
// leader whose no-op and next command replace them (another term at
// their indexes). When the old leader rejoins and applies the new
// leader's log, each proposer gets a definite refusal (ErrNotLeader, not
// an unknown outcome) — never a success — and no node holds its ticket.
func TestReplacedEntryIsARefusal(t *testing.T) {
	c := newFateCluster(t, 3)
	l := c.leader()
	c.initDelta(l)
	rest := c.others(l)
	c.trans[l].holdBack(rest...)
	lp := c.nodes[l]
	lp.fateBound = time.Minute
	first := lp.r.LastIndex() + 1
	answers := proposeAll(t, lp, "lost1")
	waitFor(t, "the first entry stored", 60*time.Second, func() bool { return lp.r.LastIndex() >= first })
	answers2 := proposeAll(t, lp, "lost2") // one index after: the new leader puts a command there
	waitFor(t, "the second entry stored", 60*time.Second, func() bool { return lp.r.LastIndex() >= first+1 })
	c.isolate(l)
	nl := c.leader(rest...)
	propose(t, c.nodes[nl], ticket.Entry{Op: ticket.OpGrant, NowMs: 1, RecvMs: 1, Name: "other", Holder: "h", LeaseS: 1, ExpiryMs: 1 + 1000 + 500})
	idx := c.fsms[nl].Index()
	if idx != first+1 {
		t.Fatalf("the new leader's command is at %d, want %d (after its no-op at %d)", idx, first+1, first)
	}
	waitFor(t, "the old leader stepping down", 60*time.Second, func() bool { return lp.r.State() != raft.Leader })
	c.connectAll()
	c.trans[l].mu.Lock()
	clear(c.trans[l].hold)
	c.trans[l].mu.Unlock()
	for _, ch := range []<-chan proposal{answers, answers2} {
		var a proposal
		select {
		case a = <-ch:
		case <-time.After(2 * time.Minute):
			t.Fatal("a proposer never answered")
		}
		if !errors.Is(a.err, ErrNotLeader) || errors.Is(a.err, ErrUnknownOutcome) {
			t.Errorf("grant %s of a replaced entry: %+v %v; want ErrNotLeader without an unknown outcome", a.name, a.res, a.err)
		}
	}
	c.waitApplied(idx, c.names...)
	for _, n := range c.names {
		for _, name := range []string{"lost1", "lost2"} {
			if tk, ok := c.fsms[n].Get(name); ok {
				t.Errorf("%s holds %+v", n, tk)
			}
		}
	}
	if got := lp.Fates(); got.Replaced != 2 || got.Applied != 0 || got.Unknown != 0 {
		t.Errorf("fates %+v, want 2 replaced", got)
	}
}

// When no leader commits anything after the lost leadership, the wait
// ends at its bound with an unknown outcome (not a refusal); and Raft's
// shutdown ends a wait at once, with an unknown outcome too.
func TestLostLeadershipWithoutACommitStaysUnknown(t *testing.T) {
	c := newFateCluster(t, 3)
	l := c.leader()
	c.initDelta(l)
	rest := c.others(l)
	c.trans[l].holdBack(rest...)
	lp := c.nodes[l]
	lp.fateBound = 300 * time.Millisecond
	first := lp.r.LastIndex() + 1
	answers := proposeAll(t, lp, "x")
	waitFor(t, "the entry stored", 60*time.Second, func() bool { return lp.r.LastIndex() >= first })
	for _, n := range c.names {
		c.isolate(n) // nobody can elect anybody
	}
	a := <-answers
	if !errors.Is(a.err, ErrUnknownOutcome) || errors.Is(a.err, ErrNotLeader) {
		t.Fatalf("a lost leadership without any commit after it: %+v %v; want an unknown outcome", a.res, a.err)
	}
	if got := lp.Fates(); got.Unknown != 1 || got.Applied+got.Replaced != 0 {
		t.Fatalf("fates %+v, want 1 unknown", got)
	}

	// The same on the next leader, whose wait Raft's shutdown ends.
	c.connectAll()
	l = c.leader()
	c.trans[l].holdBack(c.others(l)...)
	lp = c.nodes[l]
	lp.fateBound = time.Hour
	first = lp.r.LastIndex() + 1
	answers = proposeAll(t, lp, "y")
	waitFor(t, "the entry stored", 60*time.Second, func() bool { return lp.r.LastIndex() >= first })
	for _, n := range c.names {
		c.isolate(n)
	}
	waitFor(t, "the proposer waiting for its entry's fate", 60*time.Second, func() bool { return lp.fating.n.Load() == 1 })
	if err := lp.Shutdown(); err != nil {
		t.Fatal(err)
	}
	a = <-answers
	if !errors.Is(a.err, ErrUnknownOutcome) || !errors.Is(a.err, ErrShutdown) || errors.Is(a.err, ErrNotLeader) {
		t.Fatalf("a wait ended by Raft's shutdown: %+v %v; want a shutdown with an unknown outcome", a.res, a.err)
	}
}

// entryTerm reads the term hashicorp/raft gave an applied entry: the
// leader's term, as the FSM saw it at that index.
func TestEntryTermOfAFuture(t *testing.T) {
	m := newMemRaft(t, "solo", 500, true)
	waitFor(t, "leadership", 5*time.Second, func() bool { return m.r.State() == raft.Leader })
	b, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	f := m.r.Apply(b, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	term, ok := entryTerm(f)
	fate, _ := m.fsm.FateOf(f.Index())
	if !ok || term == 0 || term != m.r.CurrentTerm() || fate.Kind != ticket.FateApplied || fate.Term != term {
		t.Fatalf("entryTerm = %d, %v; raft's term %d; the FSM's fate at %d: %+v", term, ok, m.r.CurrentTerm(), f.Index(), fate)
	}
	m.r.Shutdown().Error()
	if _, ok := entryTerm(m.r.Apply(b, time.Second)); ok {
		t.Fatal("entryTerm of an errorFuture (raft shut down)")
	}
}

// A proposal made once Close began is refused before anything is handed
// to Raft: a shutdown without an unknown outcome (the node may say
// "stopping", and the client move on).
func TestProposeAfterCloseIsARefusal(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	r, err := Open(Options{
		Dir: dir, FSM: ticket.New(500), LocalID: "solo", RequireVoter: true, Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leadership", 10*time.Second, func() bool { return r.Raft().State() == raft.Leader })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = r.Propose(context.Background(), grantData(t, "late"))
	if !errors.Is(err, ErrShutdown) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("a proposal after Close: %v; want a shutdown refusal without an unknown outcome", err)
	}
}
