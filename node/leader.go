package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// leadership starts the leader's work on every gain of leadership and stops
// it on every loss.
func (n *server) leadership(ctx context.Context) {
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
				n.stage.Set(stage.Raft, "lost leadership")
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
func (n *server) lead(ctx context.Context) {
	cons := n.cons.Load()
	term := cons.Raft().CurrentTerm()
	n.stage.Set(stage.Replay, "committing a barrier in term "+fmt.Sprint(term))
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
	n.stage.Set(stage.Ready, "")
	n.waits.startTerm()
	defer n.waits.endTerm() // waits of this term end with a 503 (SPEC §4.2)
	n.log.Info("leader ready", "term", term, "applied_index", n.raft().AppliedIndex(), "tickets", n.fsm.Len(),
		"delta_ms", n.fsm.Delta(), "replay", time.Since(start).Round(time.Millisecond))
	var wg sync.WaitGroup
	wg.Go(func() { n.mode.lead(ctx) }) // a cluster's reconciler and retire watch
	defer wg.Wait()
	n.expiryLoop(ctx)
}
