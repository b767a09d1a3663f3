package cluster

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tckclk/tckclk/node/consensus"
)

// handOffTimeout bounds a graceful leadership transfer at shutdown.
const handOffTimeout = 5 * time.Second

// HandOff transfers leadership to another voter when this node leads a
// cluster with one, so a planned stop costs no election timeout. A
// transfer that fails or times out is logged; the stop goes on.
func (cl *Node) HandOff() {
	r := cl.raft()
	if r == nil || r.State() != raft.Leader || countVoters(r) < 2 {
		return
	}
	took, err := transferLeadership(cl.host.Consensus(), raft.Server{}, handOffTimeout)
	switch {
	case errors.Is(err, errTransferTimeout):
		cl.opts.Logger.Warn("stopping: leadership transfer did not finish in time; stopping anyway", "timeout", handOffTimeout)
	case err != nil:
		cl.opts.Logger.Warn("stopping: leadership transfer failed; the others elect a leader after the election timeout", "err", err)
	default:
		cl.handedOff.Store(true)
		cl.opts.Logger.Info("stopping: leadership transferred", "took", took.Round(time.Millisecond))
	}
}

// countVoters counts the voters of r's configuration (0 when it cannot
// be read).
func countVoters(r *raft.Raft) int {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// errTransferTimeout: a leadership transfer did not answer in time (it may
// still finish; a Raft shutdown ends it).
var errTransferTimeout = errors.New("leadership transfer did not finish in time")

// transferLeadership asks c, the leader, to hand its leadership to the
// server to (or, with an empty to.ID, to the voter Raft picks) and waits at
// most timeout for Raft's answer: how long it took, Raft's error (or
// consensus.ErrTransferTried), or errTransferTimeout. The future's
// goroutine ends when Raft answers, at the latest at shutdown. The one
// transfer of the node: a planned stop (HandOff) and a leader whose clock
// FAILED (failed.go).
func transferLeadership(c *consensus.Raft, to raft.Server, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if c == nil {
		return 0, consensus.ErrShutdown
	}
	f, err := c.TransferLeadership(to.ID, to.Address)
	if err != nil {
		return 0, err
	}
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
