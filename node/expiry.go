package node

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// expiryLoop proposes Expire for every ticket whose server-side expiry has
// passed by the leader's wall clock (rounded down), until ctx ends.
func (n *server) expiryLoop(ctx context.Context) {
	t := time.NewTicker(n.expiry)
	defer t.Stop()
	var lastRefusal string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.expiryRounds.Add(1)
		refusal := ""
		if err := n.guard.Check(); err != nil {
			refusal = "clock: " + err.Error()
		} else if now := n.wall.Now(); n.hold.active(now) {
			refusal = "hold_off"
		} else {
			n.clearHoldOff()
			n.expireDue(ctx, now)
		}
		if refusal != lastRefusal {
			if refusal != "" {
				n.log.Warn("expiry loop paused", "reason", refusal)
			} else {
				n.log.Info("expiry loop resumed")
			}
			lastRefusal = refusal
		}
	}
}

// expireDue proposes one batch of Expire entries stamped with now and waits
// for them to apply.
func (n *server) expireDue(ctx context.Context, now time.Time) {
	nowMs, ok := protocol.FloorUnixMs(now)
	if !ok {
		return
	}
	if n.expireEarly {
		nowMs += n.fsm.Delta() // a deliberately broken node (tests only)
	}
	due := n.fsm.Due(nowMs, 4096)
	if len(due) == 0 {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons := n.cons.Load()
	futs := make([]raft.ApplyFuture, 0, len(due))
	for _, d := range due {
		data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpExpire, NowMs: nowMs, Name: d.Name, Token: d.Token})
		if err != nil {
			n.log.Error("encode expire", "err", err)
			continue
		}
		futs = append(futs, cons.ProposeAsync(ctx, data))
	}
	for _, f := range futs {
		result := "error"
		r, err := cons.Await(ctx, f)
		switch {
		case err == nil:
			result = r.Code.String()
		case errors.Is(err, consensus.ErrShutdown), errors.Is(err, consensus.ErrNotLeader), errors.Is(err, consensus.ErrUnknownOutcome):
			result = "unavailable"
		}
		n.metrics.Observe("expire", result, time.Since(start))
	}
}

// clearHoldOff removes an earlier run's FAILED marker once the hold-off has
// passed and the clock is still healthy (the check runs before the marker
// lock: a Check that latches FAILED must not run under it).
func (n *server) clearHoldOff() {
	if !n.hold.pending.Load() {
		return
	}
	removed, err := n.hold.clear(n.guard.Check() == nil)
	switch {
	case err != nil:
		n.log.Error("hold-off passed but the FAILED marker could not be removed (the next start holds off again)", "err", err)
	case removed:
		n.log.Info("hold-off passed with a healthy clock: FAILED marker removed", "marker", datadir.FailedFile)
	}
}
