package node

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/consensus"
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

// settleWait bounds settleProposals: a proposal answered by the hand-off
// waits at most consensus.FateWait for its entry's fate, and one still
// waiting for Raft when the hand-off returned a little longer.
const settleWait = consensus.FateWait + time.Second

// settleProposals lets the proposals in flight when this node handed its
// leadership off learn their entries' fates under the next leader
// (consensus.Raft.Settle) while Raft still runs and forwarded requests
// are still served, so their callers get the applied result or a
// refusal they may repeat rather than an unknown outcome. A node that
// still leads (the hand-off failed) has nothing to wait for, nor has a
// gossip-only client (no Raft: it proposes nothing).
func (n *Node) settleProposals() {
	c := n.cons.Load()
	if c == nil || c.Raft() == nil || c.Raft().State() == raft.Leader {
		return
	}
	start := time.Now()
	if !c.Settle(settleWait) {
		n.log.Warn("stopping: proposals still in flight; stopping anyway (their outcome is unknown to their callers)", "waited", settleWait)
		return
	}
	if f := c.Fates(); f != (consensus.FateCounts{}) {
		n.log.Info("stopping: the proposals that lost their leadership in flight (since start) have their answers", "took", time.Since(start).Round(time.Millisecond),
			"applied", f.Applied, "replaced", f.Replaced, "unknown", f.Unknown)
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
