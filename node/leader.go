package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/ticket"
)

func (n *Node) registerMetrics(reg prometheus.Registerer) {
	n.stage.register(reg, func() Stage { return Stage(n.Readiness().Stage) })
	n.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{Name: "raft_leader_changes_total", Help: "Leadership transitions seen by this node."})
	reg.MustRegister(
		n.leaderChanges,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tickets_active", Help: "Tickets currently held."},
			func() float64 { return float64(n.fsm.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ticket_waiters", Help: "Blocking grants (wait_ms) waiting on this node, forwarded ones included (cap api.max_waiters)."},
			func() float64 { w, _ := n.waits.counts(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ticket_watchers", Help: "Blocking reads (?wait=) waiting on this node, forwarded ones included (cap api.max_watchers)."},
			func() float64 { _, w := n.waits.counts(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_state", Help: "0 follower, 1 candidate, 2 leader, 3 shutdown."},
			func() float64 {
				r := n.raft()
				if r == nil {
					return 0
				}
				switch r.State() {
				case raft.Candidate:
					return 1
				case raft.Leader:
					return 2
				case raft.Shutdown:
					return 3
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_voters", Help: "Voters in the Raft configuration."},
			func() float64 { return float64(n.countMembers(raft.Voter)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_non_voters", Help: "Non-voters (standbys) in the Raft configuration."},
			func() float64 { return float64(n.countMembers(raft.Nonvoter)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_term", Help: "Current Raft term."},
			func() float64 {
				if r := n.raft(); r != nil {
					return float64(r.CurrentTerm())
				}
				return 0
			}),
	)
}

// countMembers counts the configuration's servers of one suffrage.
func (n *Node) countMembers(suffrage raft.ServerSuffrage) int {
	r := n.raft()
	if r == nil {
		return 0
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == suffrage {
			c++
		}
	}
	return c
}

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
