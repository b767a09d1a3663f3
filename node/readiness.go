package node

import (
	"github.com/tckclk/tckclk/node/api/wire"
	"sync"
	"time"
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
// proposal (503 with the reason) and pauses the expiry loop. The default is
// the node/clockhealth monitor built from the clock: section.
type ClockGuard interface {
	Check() error
}

// ClockReporter is optionally implemented by a ClockGuard to describe
// itself in /v1/status.
type ClockReporter interface {
	ClockStatus() wire.ClockStatus
}

// WallClock is the wall time the node stamps entries with.
type WallClock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
