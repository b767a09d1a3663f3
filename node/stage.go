package node

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/api/wire"
)

// Stage is a readiness stage of SPEC §3.5, reported by /readyz and
// /v1/status.
type Stage string

// Stages, in start-up order. Only StageReady serves clients.
const (
	StageStarting   Stage = "starting"    // config, secrets, stores
	StageClockCheck Stage = "clock_check" // with an agent: 3 consecutive healthy samples before Raft opens
	StageRaft       Stage = "raft"        // Raft started, no leader yet
	StageReplay     Stage = "replay"      // leader committing its Barrier: replaying the log
	StageUniform    Stage = "uniform"     // cluster mode: voters agree on Δ and version
	StageReady      Stage = "ready"
	StageFailed     Stage = "failed"
	StageStopping   Stage = "stopping"
	// StageHoldOff is what /readyz reports while a restart after a FAILED
	// clock refuses Grant and Expire (SPEC §4); the node is otherwise ready.
	StageHoldOff Stage = "hold_off"
	// StageRemoved: cluster mode, this NodeId was retired while the node
	// ran (`ticketctl cluster replace`): it serves nothing again. Terminal
	// (only a FAILED clock moves it on).
	StageRemoved Stage = "removed"
)

// stageHolder holds the node's current stage and, when not ready, why: the
// one place readiness is decided from (Node.Readiness reads it with the
// clock, leadership and hold-off). FAILED is terminal (SPEC §3.4).
type stageHolder struct {
	mu     sync.Mutex
	stage  Stage
	reason string
}

func newStageHolder() *stageHolder { return &stageHolder{stage: StageStarting} }

// allStages lists every stage (for the gauge's labels).
var allStages = []Stage{StageStarting, StageClockCheck, StageRaft, StageReplay, StageUniform, StageReady, StageHoldOff, StageFailed, StageRemoved, StageStopping}

// set moves to stage with an optional reason; once failed, it stays;
// once removed, only failed moves it on.
func (r *stageHolder) set(stage Stage, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stage == StageFailed || r.stage == StageRemoved && stage != StageFailed {
		return
	}
	r.stage, r.reason = stage, reason
}

func (r *stageHolder) get() (Stage, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stage, r.reason
}

// register exports node_readiness_stage{stage}: 1 for the stage /readyz
// reports at scrape time (current reads it: Readiness, so a follower that
// /readyz calls ready is ready on /metrics too), 0 for the others.
func (r *stageHolder) register(reg prometheus.Registerer, current func() Stage) {
	reg.MustRegister(&stageCollector{current: current, desc: prometheus.NewDesc("node_readiness_stage",
		"1 for the readiness stage /readyz reports (SPEC 3.5), 0 for the others.", []string{"stage"}, nil)})
}

type stageCollector struct {
	desc    *prometheus.Desc
	current func() Stage
}

func (c *stageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stageCollector) Collect(ch chan<- prometheus.Metric) {
	cur, known := c.current(), false
	for _, s := range allStages {
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

// watchReadiness calls report with Readiness() each time it changes,
// checking every interval, until the returned stop is called; stop reports
// a last time with stage stopping.
func (n *Node) watchReadiness(report func(wire.Health), every time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		var last wire.Health
		first := true
		for {
			if h := n.Readiness(); first || h != last {
				first, last = false, h
				report(h)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		report(wire.Health{Status: "unavailable", Stage: string(StageStopping)})
	}
}
