package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/tckclk/tckclk/node/api/wire"
	"net/http"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/protocol"
)

// monitorGuard is the ClockGuard (and ClockReporter) of a running ticketd:
// the clockhealth monitor built from the clock: section.
type monitorGuard struct{ m *clockhealth.Monitor }

// Check is the pre-proposal check (SPEC §3.2): the running bound including
// a wall step since the last sample, staleness and rollback.
func (g monitorGuard) Check() error { return g.m.Check() }

// ClockStatus describes the clock for /v1/status.
func (g monitorGuard) ClockStatus() wire.ClockStatus {
	st := g.m.Status()
	cs := wire.ClockStatus{
		Source: st.Mode, Stage: string(st.Stage), StageDetail: st.StageDetail, Healthy: st.Healthy,
		BoundMs: st.BoundMs, BoundLimitMs: st.BoundLimitMs, DeltaMs: st.DeltaMs,
		SinceSampleMs: st.SinceSampleMs, StalenessMs: st.StalenessMs,
		Reason: string(st.Reason), Error: st.Error, FailedStage: string(st.FailedStage),
		ClockStages: st.ClockStages, DevReference: st.DevReference,
		LastSample: (*wire.SampleStatus)(st.LastSample),
	}
	for _, a := range st.Agents {
		cs.Agents = append(cs.Agents, wire.AgentStatus(a))
	}
	if st.LastSample != nil && st.LastSample.AtUnixMs > 0 {
		cs.LastSampleUnixMs = uint64(st.LastSample.AtUnixMs)
	}
	return cs
}

// clockDeps resolves the wall and monotonic clocks the node and its
// monitor share: one clock, so the entries' timestamps are the readings the
// monitor checks.
func clockDeps(deps *Deps) (WallClock, clockhealth.MonoClock, error) {
	switch {
	case deps.Wall == nil && deps.Mono == nil:
		c := clockhealth.NewSystemClock()
		return c, c, nil
	case deps.Wall == nil:
		return nil, nil, errors.New("node: Deps.Mono is set without Deps.Wall")
	case deps.Mono != nil:
		return deps.Wall, deps.Mono, nil
	}
	if m, ok := deps.Wall.(clockhealth.MonoClock); ok {
		return deps.Wall, m, nil
	}
	return nil, nil, errors.New("node: Deps.Wall needs Deps.Mono (the clock-health monitor pairs every wall reading with a monotonic one)")
}

// clockCheck is the first stage of SPEC §3.5 with an agent: nothing opens
// Raft until 3 consecutive healthy samples. A failure here retires nothing
// and records nothing; the process exits non-zero and may start again.
func (n *Node) clockCheck(ctx context.Context) error {
	n.ready.Set(StageClockCheck, fmt.Sprintf("waiting for %d consecutive healthy samples", clockhealth.ClockCheckSamples))
	n.log.Info("clock_check: proving the clock before opening Raft", "samples", clockhealth.ClockCheckSamples,
		"agents", n.cfg.Clock.Agents(), "probe_interval_ms", n.cfg.Clock.ProbeIntervalMs)
	err := n.mon.ClockCheck(ctx)
	if err == nil {
		n.log.Info("clock_check passed")
		return nil
	}
	if ctx.Err() != nil && n.mon.Err() == nil {
		return errStopped
	}
	n.ready.Set(StageFailed, clockReason(err))
	return fmt.Errorf("node: clock_check failed before the node opened its data (nothing is recorded; start it again once the clock is healthy): %w", err)
}

// errStopped: ctx ended before the node got going; Run returns nil.
var errStopped = errors.New("node: stopped during start-up")

// advanceClock moves the monitor's stage (SPEC §3.5) along with the
// node's; a FAILED monitor refuses, which changes nothing here.
func (n *Node) advanceClock(s clockhealth.Stage, detail string) {
	if n.mon == nil {
		return
	}
	_ = n.mon.Advance(s, detail)
}

// clockFailed is the monitor's OnFailed hook: the FAILED latch moved. The
// node stops serving at once (readiness failed: every write and read is a
// 503 with the reason; the expiry loop sees the same latch), and, unless
// the clock failed before clock_check passed, records the failure durably
// so that a restart holds off (SPEC §4). It runs on the goroutine that
// latched; the marker write is a few ms of fsync.
func (n *Node) clockFailed(e *clockhealth.Error) {
	n.ready.Set(StageFailed, string(e.Reason))
	if e.Stage == clockhealth.StageClockCheck {
		return
	}
	n.markerMu.Lock()
	defer n.markerMu.Unlock()
	state := "written"
	if err := writeFailedMarker(n.dataDir, e, n.wall.Now()); err != nil {
		state = "NOT written: " + err.Error()
		n.log.Error("clock FAILED but the FAILED marker could not be written: a restart will NOT hold off; keep this node stopped for 250 s + Δ",
			"dir", n.dataDir, "err", err)
	} else {
		n.log.Error("clock FAILED: recorded in the data dir; a restart refuses Grant and Expire for 250 s + Δ",
			"marker", failedMarkerFile, "reason", string(e.Reason))
	}
	n.markerState.Store(&state)
}

// clockErr returns the latched FAILED error, or nil.
func (n *Node) clockErr() *clockhealth.Error {
	var ce *clockhealth.Error
	if err := n.guard.Check(); errors.As(err, &ce) {
		return ce
	}
	return nil
}

// clockReason is the short reason of a clock refusal: the SPEC §1.5 reason
// when there is one, else the error text.
func clockReason(err error) string {
	if r, ok := protocol.ReasonOf(err); ok {
		return string(r)
	}
	return err.Error()
}

// clockRefusal turns a ClockGuard error into the API's 503: stage failed
// with the SPEC §1.5 reason for a FAILED clock, stage clock_check before it
// is proven, stage clock otherwise.
func clockRefusal(err error) *api.Error {
	var ce *clockhealth.Error
	switch {
	case errors.As(err, &ce):
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Stage: string(StageFailed), Reason: string(ce.Reason),
			Message: fmt.Sprintf("clock health FAILED (%s): %v; this process will not grant again (a restart holds off 250 s + Δ)", ce.Reason, err)}
	case errors.Is(err, clockhealth.ErrClockCheck):
		return api.Unavailable(string(StageClockCheck), "clock_check", "%v", err)
	}
	return api.Unavailable("clock", err.Error(), "clock health refuses the proposal: %v", err)
}

// holdOffFor is the single-node restart rule of SPEC §4: 250 s (the longest
// lease) + Δ.
func holdOffFor(deltaMs uint64) time.Duration {
	return 250*time.Second + time.Duration(deltaMs)*time.Millisecond
}
