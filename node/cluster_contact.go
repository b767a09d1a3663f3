package node

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftContactWindow is how recently a peer must have answered the leader's
// AppendEntries (heartbeats included, every ~50 ms in cluster timing: 40
// missed in a row) to count as in Raft contact for the reconciler.
const raftContactWindow = 2 * time.Second

// contactTransport is Raft's transport plus, per peer, when it last
// answered an AppendEntries (the heartbeat path). It is the leader's
// "Raft contact" of SPEC §5: a dead voter is gossip-dead AND silent in
// Raft, so a voter whose gossip is cut but whose heartbeats flow keeps its
// vote. The embedded transport's other methods (pipelines, votes,
// pre-votes, Close) are promoted unchanged, so Raft sees the same optional
// interfaces.
type contactTransport struct {
	*raft.NetworkTransport
	now func() time.Time

	mu        sync.Mutex
	last      map[raft.ServerID]time.Time
	pipelines map[*trackedPipeline]bool
}

func newContactTransport(t *raft.NetworkTransport) *contactTransport {
	return &contactTransport{NetworkTransport: t, now: time.Now, last: map[raft.ServerID]time.Time{}, pipelines: map[*trackedPipeline]bool{}}
}

// AppendEntriesPipeline implements raft.Transport and keeps the pipeline so
// closePipelines can end it. hashicorp/raft v1.7.3 can deadlock its own
// shutdown here: the replication goroutine blocks handing a sent request
// to the pipeline's full in-flight queue, whose decoder blocks handing a
// response to Raft's decoder, which already left on shutdown; only the
// pipeline's Close frees the sender, and the sender is the one that would
// call it. (Seen as a 30 s stop hang; the goroutine dump ends in
// netPipeline.AppendEntries.)
func (t *contactTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	tp := &trackedPipeline{AppendPipeline: p, owner: t}
	t.mu.Lock()
	t.pipelines[tp] = true
	t.mu.Unlock()
	return tp, nil
}

// closePipelines closes every open pipeline (consensus' Unblock on a slow
// shutdown).
func (t *contactTransport) closePipelines() {
	t.mu.Lock()
	ps := make([]*trackedPipeline, 0, len(t.pipelines))
	for p := range t.pipelines {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		_ = p.Close()
	}
}

// trackedPipeline is a pipeline its transport can close; Close is
// idempotent (the NetworkTransport's is).
type trackedPipeline struct {
	raft.AppendPipeline
	owner *contactTransport
}

func (p *trackedPipeline) Close() error {
	p.owner.mu.Lock()
	delete(p.owner.pipelines, p)
	p.owner.mu.Unlock()
	return p.AppendPipeline.Close()
}

// AppendEntries implements raft.Transport and records a successful answer.
func (t *contactTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.mu.Lock()
		t.last[id] = t.now()
		t.mu.Unlock()
	}
	return err
}

// inContact reports whether id answered an AppendEntries within the window.
func (t *contactTransport) inContact(id string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.last[raft.ServerID(id)]
	return ok && t.now().Sub(at) <= raftContactWindow
}
