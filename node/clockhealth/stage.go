package clockhealth

import (
	"errors"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/protocol"
)

// Stage is where the clock stands: clock_check until 3 consecutive healthy
// samples, then checked, and failed once the latch moved (terminal). The
// node's readiness stages (SPEC §3.5) are the node's own.
type Stage string

// The clock's stages, in order.
const (
	StageClockCheck Stage = "clock_check" // proving 3 consecutive healthy samples
	StageChecked    Stage = "checked"     // clock_check passed (or skipped: host mode)
	StageFailed     Stage = "failed"      // FAILED latch (terminal)
)

// ErrClockCheck is returned by Check while the clock has
// not yet passed clock_check (3 consecutive healthy samples). It carries no
// SPEC §1.5 reason: the node is not failed, just not yet proven.
var ErrClockCheck = errors.New("clockhealth: clock_check has not passed yet (needs 3 consecutive healthy samples)")

// Error is the FAILED latch's error. It wraps the *protocol.Error of the
// first failure, so protocol.ReasonOf and errors.As(*protocol.Error) read
// its SPEC §1.5 reason.
type Error struct {
	Reason protocol.Reason
	Agent  string // the agent whose exchange failed; "" for evaluations between samples
	Stage  Stage  // the stage the node was in when it failed
	Err    *protocol.Error
}

func (e *Error) Error() string {
	s := "clockhealth: FAILED (" + string(e.Reason) + ")"
	if e.Agent != "" {
		s += " agent " + e.Agent
	}
	if e.Err != nil && e.Err.Detail != "" {
		s += ": " + e.Err.Detail
	}
	if e.Err != nil && e.Err.Err != nil {
		s += ": " + e.Err.Err.Error()
	}
	return s
}

// Unwrap returns the *protocol.Error (nil, not a typed nil, when unset).
func (e *Error) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// Status is a snapshot for /readyz and /v1/status (JSON-ready).
type Status struct {
	Stage       Stage  `json:"stage"`
	StageDetail string `json:"stage_detail,omitempty"`
	// Healthy: clock_check passed, not FAILED, and the running bound was
	// within Δ/2 at the evaluation this snapshot made.
	Healthy          bool            `json:"healthy"`
	Reason           protocol.Reason `json:"reason,omitempty"` // SPEC §1.5 reason once FAILED
	Error            string          `json:"error,omitempty"`  // the FAILED error's text
	FailedStage      Stage           `json:"failed_stage,omitempty"`
	Mode             string          `json:"mode"` // "agent", or "host" (single node, no agent)
	ClockStages      string          `json:"clock_stages,omitempty"`
	DevReference     bool            `json:"dev_reference"` // samples from a development reference agent (SPEC §2.2)
	DeltaMs          uint64          `json:"delta_ms"`
	BoundMs          uint64          `json:"bound_ms"`       // running bound at this evaluation
	BoundLimitMs     uint64          `json:"bound_limit_ms"` // Δ/2
	ClockCheckPassed bool            `json:"clock_check_passed"`
	HealthyRounds    uint64          `json:"healthy_rounds"`         // consecutive healthy probe rounds
	LastSample       *SampleStatus   `json:"last_sample,omitempty"`  // the last healthy sample
	Agents           []AgentStatus   `json:"agents,omitempty"`       // per-agent counters (SPEC §3.1)
	StalenessMs      uint64          `json:"staleness_ms,omitempty"` // clock.staleness_ms
	SinceSampleMs    uint64          `json:"since_sample_ms"`        // monotonic ms since the last healthy sample (or start)
}

// SampleStatus is one accepted sample (SPEC §3.1 terms) and AgentStatus
// one agent's counters: the API's wire types, so /v1/status shows them as
// they are (node/api/wire is a stdlib-only leaf).
type (
	SampleStatus = wire.SampleStatus
	AgentStatus  = wire.AgentStatus
)
