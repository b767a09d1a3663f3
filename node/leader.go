package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/ticket"
)

// leadership starts the leader's work on every gain of leadership and stops
// it on every loss.
func (n *Node) leadership(ctx context.Context) {
	stopLead := func() {}
	defer func() { stopLead() }()
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-n.notify:
			stopLead()
			stopLead = func() {}
			n.leaderChanges.Inc()
			if !leader {
				n.barrierTerm.Store(0)
				n.stage.set(StageRaft, "lost leadership")
				continue
			}
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				n.lead(lctx)
			}()
			stopLead = func() { cancel(); <-done }
		}
	}
}

// lead commits a Barrier (so every earlier entry is applied), records Δ at
// bootstrap, becomes ready and runs the expiry loop.
func (n *Node) lead(ctx context.Context) {
	cons := n.cons.Load()
	term := cons.Raft().CurrentTerm()
	n.stage.set(StageReplay, "committing a barrier in term "+fmt.Sprint(term))
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // replays the log tail since the snapshot
	defer cancel()
	if err := cons.Barrier(bctx); err != nil {
		n.log.Warn("barrier failed", "term", term, "err", err)
		return
	}
	if n.fsm.Fatal() != nil {
		return
	}
	if n.fsm.Delta() == 0 {
		data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, DeltaMs: n.cfg.Clock.DeltaMs})
		if err != nil {
			n.log.Error("encode init", "err", err)
			return
		}
		res, err := n.propose(ctx, data)
		if err != nil || res.Code != ticket.CodeOK {
			n.log.Error("recording Δ failed", "err", err, "code", res.Code)
			return
		}
		n.log.Info("recorded Δ in the replicated state", "delta_ms", n.cfg.Clock.DeltaMs)
	}
	n.barrierTerm.Store(term)
	n.stage.set(StageReady, "")
	n.waits.startTerm()
	defer n.waits.endTerm() // waits of this term end with a 503 (SPEC §4.2)
	n.log.Info("leader ready", "term", term, "applied_index", n.raft().AppliedIndex(), "tickets", n.fsm.Len(),
		"delta_ms", n.fsm.Delta(), "replay", time.Since(start).Round(time.Millisecond))
	if n.cl != nil {
		var wg sync.WaitGroup
		wg.Go(func() { n.cl.lead(ctx) })
		wg.Go(func() { n.cl.retireWatch(ctx) }) // SPEC §3.4 (cluster_failed.go)
		defer wg.Wait()
	}
	n.expiryLoop(ctx)
}

// proposeWait bounds how long a proposal waits for Raft's answer: after
// it the outcome is unknown (503 unknown_outcome).
const proposeWait = 5 * time.Second

// propose applies data through Raft and waits for the FSM's answer; the
// consensus errors become the API's.
func (n *Node) propose(ctx context.Context, data []byte) (ticket.Result, error) {
	c := n.cons.Load()
	if c == nil {
		return ticket.Result{}, api.Unavailable(string(StageStarting), "starting", "raft is not open yet")
	}
	res, err := c.ProposeWithin(ctx, data, proposeWait)
	return res, consensusRefusal(err)
}

// consensusRefusal maps consensus errors to the API's typed errors.
func consensusRefusal(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, consensus.ErrNotLeader):
		return api.NotLeader(string(StageRaft), "this node is not the leader: %v", err)
	case errors.Is(err, consensus.ErrShutdown):
		return api.Unavailable(string(StageStopping), "shutdown", "the node is shutting down")
	case errors.Is(err, consensus.ErrUnknownOutcome):
		return api.Unavailable("", "unknown_outcome", "%v; the write may still be applied: read the ticket before retrying", err)
	}
	return api.Unavailable("", "raft", "raft: %v", err)
}
