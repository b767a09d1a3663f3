package node

import (
	"sync"
	"time"
)

// Stage is a readiness stage of SPEC §3.5, reported by /readyz and
// /v1/status.
type Stage string

// Stages, in start-up order. Only StageReady serves clients.
const (
	StageStarting   Stage = "starting"    // config, secrets, stores
	StageClockCheck Stage = "clock_check" // clock health proving itself (issue 5)
	StageRaft       Stage = "raft"        // Raft started, no leader yet
	StageReplay     Stage = "replay"      // leader committing its Barrier: replaying the log
	StageUniform    Stage = "uniform"     // cluster mode: voters agree on Δ and version
	StageReady      Stage = "ready"
	StageFailed     Stage = "failed"
	StageStopping   Stage = "stopping"
)

// Readiness holds the node's current stage and, when not ready, why. It is
// safe for concurrent use; the clock-health wiring may set stages too.
type Readiness struct {
	mu     sync.Mutex
	stage  Stage
	reason string
}

// NewReadiness starts at StageStarting.
func NewReadiness() *Readiness { return &Readiness{stage: StageStarting} }

// Set moves to stage with an optional reason. Once failed, the stage stays
// failed (FAILED is terminal, SPEC §3.4).
func (r *Readiness) Set(stage Stage, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stage == StageFailed {
		return
	}
	r.stage, r.reason = stage, reason
}

// Get returns the stage and reason.
func (r *Readiness) Get() (Stage, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stage, r.reason
}

// ClockGuard is the node's view of clock health: Check is called before
// every Grant, Renew and Expire proposal; a non-nil error refuses the
// proposal (503 with the reason) and pauses the expiry loop. Issue 5's
// node/clockhealth provides the real one.
type ClockGuard interface {
	Check() error
}

// ClockReporter is optionally implemented by a ClockGuard to describe
// itself in /v1/status.
type ClockReporter interface {
	ClockStatus() ClockInfo
}

// ClockInfo is what a ClockReporter says about the clock.
type ClockInfo struct {
	Source           string // "agent" or "host"
	Stage            string
	Healthy          bool
	BoundMs          uint64
	LastSampleUnixMs uint64
	Reason           string
	DevReference     bool
}

// HostClock is the default ClockGuard: single-node mode without an agent
// trusts the host clock and always passes.
type HostClock struct{}

// Check always passes.
func (HostClock) Check() error { return nil }

// ClockStatus describes the host clock.
func (HostClock) ClockStatus() ClockInfo {
	return ClockInfo{Source: "host", Stage: "trusted", Healthy: true}
}

// WallClock is the wall time the node stamps entries with.
type WallClock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
