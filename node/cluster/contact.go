package cluster

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

	mu   sync.Mutex
	last map[raft.ServerID]time.Time
	term map[raft.ServerID]uint64 // the term in its last answer (cluster health)
}

func newContactTransport(t *raft.NetworkTransport) *contactTransport {
	return &contactTransport{NetworkTransport: t, now: time.Now, last: map[raft.ServerID]time.Time{}, term: map[raft.ServerID]uint64{}}
}

// AppendEntries implements raft.Transport and records a successful answer.
func (t *contactTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.mu.Lock()
		t.last[id] = t.now()
		t.term[id] = resp.Term
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
