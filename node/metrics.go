package node

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/stage"
)

// registerMetrics registers the node's own series on reg: the readiness
// stage, leader changes, tickets, waiters and watchers, the Raft state,
// membership counts and term.
func (n *server) registerMetrics(reg prometheus.Registerer) {
	stage.Register(reg, func() stage.Stage { return stage.Stage(n.Readiness().Stage) })
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
func (n *server) countMembers(suffrage raft.ServerSuffrage) int {
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
