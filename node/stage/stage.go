// Package stage is the readiness stage of a node (SPEC §3.5), reported by
// /readyz and /v1/status, and the holder the node and its cluster half set
// it through. It is a leaf: it imports nothing of the node.
//
// Invariants: Failed is terminal (SPEC §3.4); once Removed only Failed
// moves the stage on.
package stage

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage is a readiness stage of SPEC §3.5.
type Stage string

// Stages, in start-up order. Only Ready serves clients.
const (
	Starting   Stage = "starting"    // config, secrets, stores
	ClockCheck Stage = "clock_check" // with an agent: 3 consecutive healthy samples before Raft opens
	Raft       Stage = "raft"        // Raft started, no leader yet
	Replay     Stage = "replay"      // leader committing its Barrier: replaying the log
	Uniform    Stage = "uniform"     // cluster mode: voters agree on Δ and version
	Ready      Stage = "ready"
	Failed     Stage = "failed"
	Stopping   Stage = "stopping"
	// HoldOff is what /readyz reports while a restart after a FAILED
	// clock refuses Grant and Expire (SPEC §4); the node is otherwise ready.
	HoldOff Stage = "hold_off"
	// Removed: cluster mode, this NodeId was retired while the node ran
	// (`ticketctl cluster replace`): it serves nothing again. Terminal
	// (only a FAILED clock moves it on).
	Removed Stage = "removed"
)

// All lists every stage (the gauge's labels).
var All = []Stage{Starting, ClockCheck, Raft, Replay, Uniform, Ready, HoldOff, Failed, Removed, Stopping}

// Holder holds the node's current stage and, when not ready, why: the one
// place readiness is decided from (the node's Readiness reads it with the
// clock, leadership and hold-off).
type Holder struct {
	mu     sync.Mutex
	stage  Stage
	reason string
}

// NewHolder starts at Starting.
func NewHolder() *Holder { return &Holder{stage: Starting} }

// Set moves to stage with an optional reason; once failed, it stays;
// once removed, only failed moves it on.
func (h *Holder) Set(s Stage, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stage == Failed || h.stage == Removed && s != Failed {
		return
	}
	h.stage, h.reason = s, reason
}

// Get returns the stage and its reason.
func (h *Holder) Get() (Stage, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stage, h.reason
}

// Register exports node_readiness_stage{stage}: 1 for the stage /readyz
// reports at scrape time (current reads it, so a follower that /readyz
// calls ready is ready on /metrics too), 0 for the others.
func Register(reg prometheus.Registerer, current func() Stage) {
	reg.MustRegister(&collector{current: current, desc: prometheus.NewDesc("node_readiness_stage",
		"1 for the readiness stage /readyz reports (SPEC 3.5), 0 for the others.", []string{"stage"}, nil)})
}

type collector struct {
	desc    *prometheus.Desc
	current func() Stage
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	cur, known := c.current(), false
	for _, s := range All {
		v := 0.0
		if s == cur {
			v, known = 1, true
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, string(s))
	}
	if !known {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, string(cur))
	}
}
