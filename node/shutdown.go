package node

import (
	"time"

	"github.com/hashicorp/raft"
)

// handOffTimeout bounds a graceful leadership transfer at shutdown.
const handOffTimeout = 5 * time.Second

// handOffLeadership transfers leadership to another voter when this node
// leads a cluster with one, so a planned stop costs no election timeout. A
// transfer that fails or times out is logged; the stop goes on.
func (n *Node) handOffLeadership() {
	r := n.raft()
	if r == nil || r.State() != raft.Leader || n.countMembers(raft.Voter) < 2 {
		return
	}
	start := time.Now()
	done := make(chan error, 1)
	f := r.LeadershipTransfer()
	go func() { done <- f.Error() }() // ends when Raft answers, at the latest at shutdown
	select {
	case err := <-done:
		if err != nil {
			n.log.Warn("stopping: leadership transfer failed; the others elect a leader after the election timeout", "err", err)
			return
		}
		n.handedOff.Store(true)
		n.log.Info("stopping: leadership transferred", "took", time.Since(start).Round(time.Millisecond))
	case <-time.After(handOffTimeout):
		n.log.Warn("stopping: leadership transfer did not finish in time; stopping anyway", "timeout", handOffTimeout)
	}
}

// endsAtShutdown makes f's Error return at the latest once Raft's shutdown
// has ended (consensus.Raft.EndsAtShutdown), for a goroutine that waits on
// a Raft future itself (the reconciler): the node's stop waits for it.
func (n *Node) endsAtShutdown(f raft.Future) {
	if c := n.cons.Load(); c != nil {
		c.EndsAtShutdown(f)
	}
}
