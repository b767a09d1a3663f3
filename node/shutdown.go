package node

import (
	"errors"
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
	took, err := transferLeadership(r, raft.Server{}, handOffTimeout)
	switch {
	case errors.Is(err, errTransferTimeout):
		n.log.Warn("stopping: leadership transfer did not finish in time; stopping anyway", "timeout", handOffTimeout)
	case err != nil:
		n.log.Warn("stopping: leadership transfer failed; the others elect a leader after the election timeout", "err", err)
	default:
		n.handedOff.Store(true)
		n.log.Info("stopping: leadership transferred", "took", took.Round(time.Millisecond))
	}
}

// errTransferTimeout: a leadership transfer did not answer in time (it may
// still finish; a Raft shutdown ends it).
var errTransferTimeout = errors.New("leadership transfer did not finish in time")

// transferLeadership asks r, the leader, to hand its leadership to the
// server to (or, with an empty to.ID, to the voter Raft picks) and waits at
// most timeout for Raft's answer: how long it took, Raft's error, or
// errTransferTimeout. The future's goroutine ends when Raft answers, at the
// latest at shutdown. The one transfer of the node: a planned stop
// (handOffLeadership) and a leader whose clock FAILED (cluster_failed.go).
func transferLeadership(r *raft.Raft, to raft.Server, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	f := startTransfer(r, to)
	done := make(chan error, 1) // buffered: the future's goroutine never blocks
	go func() { done <- f.Error() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-timer.C:
		return timeout, errTransferTimeout
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

// startTransfer starts a leadership transfer to the server to, or with an
// empty to.ID to the voter Raft picks.
func startTransfer(r *raft.Raft, to raft.Server) raft.Future {
	if to.ID == "" {
		return r.LeadershipTransfer()
	}
	return r.LeadershipTransferToServer(to.ID, to.Address)
}
