package consensus

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/ticket"
)

type memRaft struct {
	r     *raft.Raft
	trans *raft.InmemTransport
	fsm   *ticket.FSM
}

func newMemRaft(t *testing.T, id string, delta uint64, bootstrap bool) *memRaft {
	t.Helper()
	return newMemRaftWith(t, id, delta, bootstrap, raft.NewInmemSnapshotStore(), nil)
}

// newMemRaftWith is newMemRaft with its snapshot store and, when wrap is
// set, the FSM Raft sees wrapping the adapter.
func newMemRaftWith(t *testing.T, id string, delta uint64, bootstrap bool, snaps raft.SnapshotStore, wrap func(raft.FSM) raft.FSM) *memRaft {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.TrailingLogs = 0 // after a snapshot, a newcomer can only get state by install
	conf.SnapshotThreshold = 1 << 30
	conf.LogOutput = &hclogWriter{log: testLogger(t).With("node", id)}
	store := raft.NewInmemStore()
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	m := &memRaft{trans: trans, fsm: ticket.New(delta)}
	if bootstrap {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}
		if err := raft.BootstrapCluster(conf, store, store, snaps, trans, cfg); err != nil {
			t.Fatal(err)
		}
	}
	var fsm raft.FSM = &raftFSM{t: m.fsm}
	if wrap != nil {
		fsm = wrap(fsm)
	}
	r, err := raft.NewRaft(conf, fsm, store, store, &positionStore{SnapshotStore: snaps, fsm: m.fsm}, trans)
	if err != nil {
		t.Fatal(err)
	}
	m.r = r
	t.Cleanup(func() {
		r.Shutdown().Error()
		trans.Close()
	})
	return m
}

func (m *memRaft) apply(t *testing.T, e ticket.Entry) ticket.Result {
	t.Helper()
	b, err := ticket.EncodeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
	f := m.r.Apply(b, time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return f.Response().(ticket.Result)
}

// leaderWithSnapshot is a one-voter cluster holding tickets whose log has
// been compacted into a snapshot.
func leaderWithSnapshot(t *testing.T) *memRaft {
	return leaderWithSnapshotIn(t, raft.NewInmemSnapshotStore(), nil)
}

func leaderWithSnapshotIn(t *testing.T, snaps raft.SnapshotStore, wrap func(raft.FSM) raft.FSM) *memRaft {
	l := newMemRaftWith(t, "leader", 500, true, snaps, wrap)
	waitFor(t, "leadership", 5*time.Second, func() bool { return l.r.State() == raft.Leader })
	if r := l.apply(t, ticket.Entry{Op: ticket.OpInit, DeltaMs: 500}); r.Code != ticket.CodeOK {
		t.Fatal(r)
	}
	now := uint64(1_700_000_000_001)
	for _, n := range []string{"x", "y", "z"} {
		if r := l.apply(t, ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now - 1, Name: n, Holder: "h", LeaseS: 200, ExpiryMs: now + 200000 + 500}); r.Code != ticket.CodeOK {
			t.Fatal(r)
		}
	}
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	return l
}

func join(t *testing.T, l, f *memRaft) {
	l.trans.Connect(f.trans.LocalAddr(), f.trans)
	f.trans.Connect(l.trans.LocalAddr(), l.trans)
	if err := l.r.AddNonvoter(raft.ServerID(f.trans.LocalAddr()), f.trans.LocalAddr(), 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
}

// wantInstalled waits until f holds l's three tickets and fails unless
// each is l's, field for field; it returns them.
func wantInstalled(t *testing.T, l, f *memRaft) []ticket.Ticket {
	t.Helper()
	waitFor(t, "the install", 10*time.Second, func() bool { return f.fsm.Len() == 3 })
	want, _ := l.fsm.List("", 0)
	got, _ := f.fsm.List("", 0)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("installed %+v, leader has %+v", got[i], want[i])
		}
	}
	return want
}

// SPEC §4-7: a snapshot installed from the leader keeps every expiry as it
// is — Δ is not added again.
func TestSnapshotInstallKeepsExpiries(t *testing.T) {
	l := leaderWithSnapshot(t)
	f := newMemRaft(t, "follower", 500, false)
	join(t, l, f)
	want := wantInstalled(t, l, f)
	if f.fsm.Delta() != 500 || f.fsm.Fatal() != nil {
		t.Fatalf("follower Δ %d fatal %v", f.fsm.Delta(), f.fsm.Fatal())
	}
	// Entries after the install apply on top, with higher tokens.
	now := uint64(1_700_000_000_100)
	r := l.apply(t, ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: "w", Holder: "h", LeaseS: 1, ExpiryMs: now + 1000 + 500})
	waitFor(t, "replication", 5*time.Second, func() bool { _, ok := f.fsm.Get("w"); return ok })
	if tk, _ := f.fsm.Get("w"); tk != r.Ticket || tk.Token <= want[2].Token {
		t.Fatalf("after install: %+v vs %+v", tk, r.Ticket)
	}
}

// SPEC §4-8, §4-9: a node configured with another Δ refuses the leader's
// snapshot; its state machine stops (and the node with it) with the reason.
func TestSnapshotInstallOtherDeltaRefused(t *testing.T) {
	l := leaderWithSnapshot(t)
	f := newMemRaft(t, "follower", 400, false)
	join(t, l, f)
	select {
	case <-f.fsm.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("follower with another Δ accepted the snapshot")
	}
	err := f.fsm.Fatal()
	var re *ticket.RestoreError
	if !errors.Is(err, ticket.ErrDeltaMismatch) || !errors.As(err, &re) {
		t.Fatalf("fatal %v", err)
	}
	if f.fsm.Len() != 0 || f.fsm.Delta() != 0 {
		t.Fatal("refused snapshot changed the follower's state")
	}
}
