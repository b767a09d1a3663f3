package reconcile

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrNotNonvoter: Promote was asked for a server that is not a non-voter
// in the configuration the plan was made on (hashicorp/raft's AddVoter
// would make a new server a full voter at once; SPEC §5 forbids that).
var ErrNotNonvoter = errors.New("reconcile: promote needs an existing non-voter")

// RaftAdapter is RaftOps (and IndexReader) over *raft.Raft. Every change
// carries, as prevIndex, the index of the configuration the last
// GetConfiguration returned, so a change planned on a configuration that
// has moved on since is refused by Raft instead of applied blindly.
type RaftAdapter struct {
	r       *raft.Raft
	timeout time.Duration
	// endsAtShutdown, when set, makes a future's Error return once Raft
	// has shut down (consensus.Raft.EndsAtShutdown: Raft may never answer
	// a change that committed just before).
	endsAtShutdown func(raft.Future)

	mu    sync.Mutex
	index uint64              // configuration index of the last GetConfiguration
	seen  map[string]Suffrage // its servers
}

// NewRaftAdapter wraps r; timeout bounds how long a change may wait to be
// enqueued (0: no bound, as in hashicorp/raft).
func NewRaftAdapter(r *raft.Raft, timeout time.Duration) *RaftAdapter {
	return &RaftAdapter{r: r, timeout: timeout}
}

// GetConfiguration returns the latest configuration and remembers it for
// Promote's check.
func (a *RaftAdapter) GetConfiguration() ([]Server, error) {
	f := a.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("reconcile: reading the configuration: %w", err)
	}
	cfg := f.Configuration()
	out := make([]Server, 0, len(cfg.Servers))
	seen := make(map[string]Suffrage, len(cfg.Servers))
	for _, s := range cfg.Servers {
		suf := Nonvoter // raft.Staging is unused by hashicorp/raft: no vote
		if s.Suffrage == raft.Voter {
			suf = Voter
		}
		out = append(out, Server{ID: string(s.ID), Address: string(s.Address), Suffrage: suf})
		seen[string(s.ID)] = suf
	}
	a.mu.Lock()
	a.seen = seen
	a.mu.Unlock()
	return out, nil
}

func (a *RaftAdapter) prev() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.index
}

// WithShutdownEnd sets what makes a change's future end at Raft's
// shutdown (consensus.Raft.EndsAtShutdown) and returns a.
func (a *RaftAdapter) WithShutdownEnd(ends func(raft.Future)) *RaftAdapter {
	a.endsAtShutdown = ends
	return a
}

// change waits for f and remembers the index of the new configuration
// entry for the next change's prevIndex (forgets it on a failure).
func (a *RaftAdapter) change(what, id string, f raft.IndexFuture) error {
	if a.endsAtShutdown != nil {
		a.endsAtShutdown(f)
	}
	if err := f.Error(); err != nil {
		a.mu.Lock()
		a.index, a.seen = 0, nil
		a.mu.Unlock()
		return fmt.Errorf("reconcile: %s %s: %w", what, id, err)
	}
	a.mu.Lock()
	a.index, a.seen = f.Index(), nil
	a.mu.Unlock()
	return nil
}

// AddNonvoter adds id at addr as a non-voter.
func (a *RaftAdapter) AddNonvoter(id, addr string) error {
	return a.change("add non-voter", id, a.r.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), a.prev(), a.timeout))
}

// Promote makes the non-voter id a voter (AddVoter of an existing
// non-voter); anything else is ErrNotNonvoter.
func (a *RaftAdapter) Promote(id, addr string) error {
	a.mu.Lock()
	suf, known := a.seen[id]
	idx := a.index
	a.mu.Unlock()
	if !known || suf != Nonvoter {
		return fmt.Errorf("%w: %s is not a non-voter in the configuration last read (read it again first)", ErrNotNonvoter, id)
	}
	return a.change("promote", id, a.r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), idx, a.timeout))
}

// Demote takes id's vote.
func (a *RaftAdapter) Demote(id string) error {
	return a.change("demote", id, a.r.DemoteVoter(raft.ServerID(id), a.prev(), a.timeout))
}

// Remove takes id out of the configuration.
func (a *RaftAdapter) Remove(id string) error {
	return a.change("remove", id, a.r.RemoveServer(raft.ServerID(id), a.prev(), a.timeout))
}

// LeaderID is the leader's NodeId as this node knows it ("" if none).
func (a *RaftAdapter) LeaderID() string {
	_, id := a.r.LeaderWithID()
	return string(id)
}

// LastIndex is this node's last log index (the leader's, on the leader).
func (a *RaftAdapter) LastIndex() uint64 { return a.r.LastIndex() }
