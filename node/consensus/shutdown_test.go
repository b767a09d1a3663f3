package consensus

import (
	"errors"
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
