package consensus

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// ErrTransferTried refuses a second leadership transfer to one voter in
// one leader term (TransferLeadership).
var ErrTransferTried = errors.New("consensus: a leadership transfer to this voter already ran in this term")

// transferGuard admits at most one leadership transfer to each voter per
// leader term. hashicorp/raft v1.7.3 (hashicorp/raft#696, unfixed in any
// approved release) hands a transfer's catch-up request to the target's
// replication over a one-slot channel without watching the transfer's own
// stop: a transfer that timed out while that replication was stuck (a
// partition, a stalled follower) leaves its request in the slot, and a
// second transfer to the same voter in the same term then blocks on the
// full slot. If leadership is lost meanwhile, nothing ever empties it: the
// transfer goroutine leaks with Raft's "leadership transfer in progress"
// flag set, and every later term this node leads refuses every write
// (ErrLeadershipTransferInProgress) while its followers see a healthy
// leader. A term change (an election) gives every voter fresh replication,
// so each may be the target once more. An untargeted transfer (Raft picks
// the voter) counts as one to every voter.
type transferGuard struct {
	mu   sync.Mutex
	term uint64
	any  bool // an untargeted transfer ran in term
	to   map[raft.ServerID]bool
}

// admit records a transfer to id (or, with id "", to the voter Raft
// picks) in term, or refuses it with ErrTransferTried.
func (g *transferGuard) admit(term uint64, id raft.ServerID) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if term != g.term {
		g.term, g.any, g.to = term, false, nil
	}
	switch {
	case g.any:
		return fmt.Errorf("%w (term %d; an untargeted transfer ran): hashicorp/raft can stall this node's writes for good on a second one (hashicorp/raft#696); "+
			"the next election allows it again", ErrTransferTried, term)
	case id == "" && len(g.to) > 0:
		return fmt.Errorf("%w (term %d; a targeted transfer ran, and Raft might pick the same voter): name another voter, or wait for the next election (hashicorp/raft#696)",
			ErrTransferTried, term)
	case g.to[id]:
		return fmt.Errorf("%w (%s, term %d): hashicorp/raft can stall this node's writes for good on a second one (hashicorp/raft#696); "+
			"name another voter, or wait for the next election", ErrTransferTried, id, term)
	}
	if id == "" {
		g.any = true
		return nil
	}
	if g.to == nil {
		g.to = map[raft.ServerID]bool{}
	}
	g.to[id] = true
	return nil
}

// TransferLeadership starts a leadership transfer to the voter id at addr,
// or with id "" to the voter Raft picks — at most once to each voter in a
// leader term (transferGuard); the future answers as Raft's does. Every
// transfer the node makes goes through here.
func (p *Raft) TransferLeadership(id raft.ServerID, addr raft.ServerAddress) (raft.Future, error) {
	if err := p.transfers.admit(p.r.CurrentTerm(), id); err != nil {
		return nil, err
	}
	if id == "" {
		return p.r.LeadershipTransfer(), nil
	}
	return p.r.LeadershipTransferToServer(id, addr), nil
}
