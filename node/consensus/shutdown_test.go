package consensus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// stuckTransport is an in-memory transport whose vote and append RPCs
// block until released: a peer that accepted the connection and never
// answers, the way a stalled mesh stream does.
type stuckTransport struct {
	*raft.InmemTransport
	called  chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *stuckTransport) block() error {
	s.once.Do(func() { close(s.called) })
	<-s.release
	return raft.ErrTransportShutdown
}

func (s *stuckTransport) RequestVote(raft.ServerID, raft.ServerAddress, *raft.RequestVoteRequest, *raft.RequestVoteResponse) error {
	return s.block()
}

func (s *stuckTransport) RequestPreVote(raft.ServerID, raft.ServerAddress, *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse) error {
	return s.block()
}

func (s *stuckTransport) AppendEntries(raft.ServerID, raft.ServerAddress, *raft.AppendEntriesRequest, *raft.AppendEntriesResponse) error {
	return s.block()
}

// Raft's shutdown waits for its RPC goroutines; one stuck on a silent peer
// would hang Close forever. Close calls Options.Unblock once the shutdown
// is slow, and returns once that freed it.
func TestCloseUnblocksAStuckShutdown(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	_, inmem := raft.NewInmemTransport("self")
	tr := &stuckTransport{InmemTransport: inmem, called: make(chan struct{}), release: make(chan struct{})}
	unblocked := make(chan struct{})
	r, err := Open(Options{
		Dir: dir, FSM: ticket.New(500), LocalID: "self", Transport: tr, Timing: ClusterTiming(), Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{
			{ID: "self", Address: inmem.LocalAddr(), Suffrage: raft.Voter},
			{ID: "ghost", Address: "ghost", Suffrage: raft.Voter},
		}},
		Unblock: func() { close(unblocked); close(tr.release) },
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.called: // an election's vote request is now stuck on the ghost
	case <-time.After(20 * time.Second):
		t.Fatal("no RPC to the ghost peer")
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(slowShutdown + 20*time.Second):
		close(tr.release)
		<-closed
		t.Fatal("Close hung on a stuck RPC")
	}
	select {
	case <-unblocked:
	default:
		t.Fatal("Close returned without calling Unblock: the RPC was not stuck")
	}
}

// hashicorp/raft's ErrLeadershipLost means the entry may still commit
// under the next leader: an unknown outcome, never "not the leader,
// nothing committed" (the safety scenarios saw such a Grant applied).
func TestLeadershipLostIsAnUnknownOutcome(t *testing.T) {
	err := mapErr(raft.ErrLeadershipLost)
	if !errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrNotLeader) {
		t.Fatalf("ErrLeadershipLost maps to %v", err)
	}
	for _, e := range []error{raft.ErrNotLeader, raft.ErrLeadershipTransferInProgress, raft.ErrNotVoter} {
		if err := mapErr(e); !errors.Is(err, ErrNotLeader) {
			t.Errorf("%v maps to %v, want ErrNotLeader (refused before the log)", e, err)
		}
	}
}

// hashicorp/raft v1.7.3 drops what waits in its FSM goroutine's queue when
// it shuts down (raft#498): an entry committed and queued behind a slow
// Apply is never answered, and a reader of its future blocked for ever —
// goleak found two such consensus readers after the node tests, and Close
// waited 5 s for them ("raft futures still unanswered"). Here the FSM is
// held inside one Apply while 20 more entries commit, each queued as its
// own batch; Raft shuts down; the FSM is let go. The FSM goroutine picks
// the shutdown or a queued batch at random each time, so (but once in 2^20
// runs) some futures are never answered by Raft: every proposer must still
// get its answer at once — applied, or ErrShutdown with an unknown outcome
// — and Close must return without waiting.
func TestShutdownAnswersQueuedFutures(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	fsm := ticket.New(500)
	r, err := Open(Options{
		Dir: dir, FSM: fsm, LocalID: "solo", RequireVoter: true, Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leadership", 10*time.Second, func() bool { return r.Raft().State() == raft.Leader })
	propose(t, r, ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	entered, release := make(chan struct{}), make(chan struct{})
	fsm.OnChange(func(name string) {
		if name == "hold" {
			close(entered)
			<-release // the FSM goroutine waits here, inside Apply
		}
	})
	now := uint64(time.Now().UnixMilli())
	grant := func(name string) []byte {
		b, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: "h", LeaseS: 30, ExpiryMs: now + 30_000 + 500})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const queued = 20
	type answer struct {
		res ticket.Result
		err error
		at  time.Time
	}
	answers := make(chan answer, queued+1)
	proposeAsync := func(name string) {
		go func() {
			res, err := r.Propose(context.Background(), grant(name))
			answers <- answer{res, err, time.Now()}
		}()
	}
	proposeAsync("hold")
	<-entered
	pending := func() int {
		n, _ := strconv.Atoi(r.Raft().Stats()["fsm_pending"])
		return n
	}
	for i := range queued {
		proposeAsync(fmt.Sprintf("queued-%d", i))
		waitFor(t, "the entry queued for the FSM", 10*time.Second, func() bool { return pending() == i+1 })
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	waitFor(t, "raft shutting down", 10*time.Second, func() bool { return r.Raft().State() == raft.Shutdown })
	released := time.Now()
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return")
	}
	if took := time.Since(released); took > 3*time.Second {
		t.Errorf("Close took %v after the FSM was let go: it waited for unanswered futures", took)
	}
	applied, shut := 0, 0
	for range queued + 1 {
		select {
		case a := <-answers:
			switch {
			case a.err == nil && a.res.Code == ticket.CodeOK:
				applied++
			case errors.Is(a.err, ErrShutdown) && errors.Is(a.err, ErrUnknownOutcome):
				shut++
			default:
				t.Errorf("answer %+v %v: neither applied nor a shutdown with an unknown outcome", a.res, a.err)
			}
			if d := a.at.Sub(released); d > 3*time.Second {
				t.Errorf("a proposer was answered %v after the FSM was let go", d)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d proposers still wait (%d applied, %d shut down)", queued+1-applied-shut, applied, shut)
		}
	}
	t.Logf("%d entries applied before the FSM goroutine saw the shutdown, %d answered by the shutdown", applied, shut)
}

// endsAtShutdown reaches every kind of future this package waits on in
// the hashicorp/raft it is built with (a version that renames deferError's
// ShutdownCh fails here, not in a leak at shutdown): Apply, Barrier and
// VerifyLeader, and an errorFuture is left alone.
func TestEveryFutureEndsAtShutdown(t *testing.T) {
	m := newMemRaft(t, "solo", 500, true)
	waitFor(t, "leadership", 5*time.Second, func() bool { return m.r.State() == raft.Leader })
	shut := make(chan struct{})
	for name, f := range map[string]raft.Future{
		"Apply": m.r.Apply(nil, time.Second), "Barrier": m.r.Barrier(time.Second), "VerifyLeader": m.r.VerifyLeader(),
		"AddNonvoter": m.r.AddNonvoter("x", "x", 0, time.Second),
	} {
		endsAtShutdown(f, shut)
		if got := reflect.ValueOf(f).Elem().FieldByName("ShutdownCh"); !got.IsValid() || got.Interface() != shut {
			t.Errorf("%s: %T's ShutdownCh is not set", name, f)
		}
		f.Error()
	}
	m.r.Shutdown().Error()
	after := m.r.Apply(nil, time.Second) // an errorFuture
	if endsAtShutdown(after, shut) != after || after.Error() == nil {
		t.Fatal("an errorFuture changed")
	}
}

// A proposal is waited for on the proposer's own goroutine
// (waitInPlace): its context ending still ends the wait at once with an
// unknown outcome — not a shutdown — while Raft holds the entry, and
// leaves nothing registered behind; Raft's answer to a later proposal
// still reaches its proposer.
func TestProposeEndsWithItsContext(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	fsm := ticket.New(500)
	r, err := Open(Options{
		Dir: dir, FSM: fsm, LocalID: "solo", RequireVoter: true, Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, "leadership", 10*time.Second, func() bool { return r.Raft().State() == raft.Leader })
	propose(t, r, ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	entered, release := make(chan struct{}), make(chan struct{})
	fsm.OnChange(func(name string) {
		if name == "hold" {
			close(entered)
			<-release // the FSM goroutine waits here, inside Apply
		}
	})
	now := uint64(time.Now().UnixMilli())
	grant := func(name string) []byte {
		b, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: "h", LeaseS: 30, ExpiryMs: now + 30_000 + 500})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	held := make(chan error, 1)
	go func() {
		_, err := r.Propose(context.Background(), grant("hold"))
		held <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = r.Propose(ctx, grant("late"))
	if !errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrShutdown) || !strings.Contains(fmt.Sprint(err), context.DeadlineExceeded.Error()) {
		t.Errorf("a proposal whose context ended while Raft held it: %v; want an unknown outcome naming the deadline, not a shutdown", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the proposal returned %v after its 100 ms context", took)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the held proposal: %v", err)
	}
	if res, err := r.Propose(context.Background(), grant("after")); err != nil || res.Code != ticket.CodeOK {
		t.Fatalf("a proposal after: %+v %v", res, err)
	}
	r.wmu.Lock()
	left := len(r.ends)
	r.wmu.Unlock()
	if left != 0 {
		t.Errorf("%d in-place waits still registered after every proposal returned", left)
	}
}

// ProposeWithin's bound ends the wait like a context would: an unknown
// outcome, not a shutdown, while Raft still holds the entry.
func TestProposeWithinItsBound(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	fsm := ticket.New(500)
	r, err := Open(Options{
		Dir: dir, FSM: fsm, LocalID: "solo", RequireVoter: true, Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, "leadership", 10*time.Second, func() bool { return r.Raft().State() == raft.Leader })
	propose(t, r, ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	entered, release := make(chan struct{}), make(chan struct{})
	fsm.OnChange(func(name string) {
		if name == "hold" {
			close(entered)
			<-release
		}
	})
	defer close(release)
	now := uint64(time.Now().UnixMilli())
	b, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: "hold", Holder: "h", LeaseS: 30, ExpiryMs: now + 30_000 + 500})
	if err != nil {
		t.Fatal(err)
	}
	late, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: "late", Holder: "h", LeaseS: 30, ExpiryMs: now + 30_000 + 500})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = r.Propose(context.Background(), b) }()
	<-entered
	start := time.Now()
	_, err = r.ProposeWithin(context.Background(), late, 100*time.Millisecond)
	if !errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrShutdown) || !strings.Contains(fmt.Sprint(err), "within 100ms") {
		t.Errorf("a proposal held past its bound: %v; want an unknown outcome naming the bound", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("returned %v after a 100 ms bound", took)
	}
}
