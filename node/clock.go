package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/protocol"
)

// ClockGuard is the node's view of clock health: Check is called before
// every Grant, Renew and Expire proposal; a non-nil error refuses the
// proposal (503 with the reason) and pauses the expiry loop. The default is
// the node/clockhealth monitor built from the clock: section.
type ClockGuard interface {
	Check() error
}

// clockReporter is optionally implemented by a ClockGuard to describe
// itself in /v1/status.
type clockReporter interface {
	ClockStatus() wire.ClockStatus
}

// WallClock is the wall time the node stamps entries with.
type WallClock interface {
	Now() time.Time
}

// monitorGuard is the ClockGuard (and clockReporter) of a running ticketd:
// the clockhealth monitor built from the clock: section.
type monitorGuard struct{ m *clockhealth.Monitor }

// Check is the pre-proposal check (SPEC §3.2): the running bound including
// a wall step since the last sample, staleness and rollback.
func (g monitorGuard) Check() error { return g.m.Check() }

// Failed is closed when the clock FAILED; the run loop reacts to it.
func (g monitorGuard) Failed() <-chan struct{} { return g.m.Failed() }

// ClockStatus describes the clock for /v1/status.
func (g monitorGuard) ClockStatus() wire.ClockStatus {
	st := g.m.Status()
	cs := wire.ClockStatus{
		Source: st.Mode, Stage: string(st.Stage), StageDetail: st.StageDetail, Healthy: st.Healthy,
		BoundMs: st.BoundMs, BoundLimitMs: st.BoundLimitMs, DeltaMs: st.DeltaMs,
		SinceSampleMs: st.SinceSampleMs, StalenessMs: st.StalenessMs,
		Reason: string(st.Reason), Error: st.Error, FailedStage: string(st.FailedStage),
		ClockStages: st.ClockStages, DevReference: st.DevReference,
		LastSample: st.LastSample, Agents: st.Agents,
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

// buildMonitor builds the clock-health monitor from the clock: section
// (unless a guard was injected) and loads the API secrets, which must all
// differ from the clock secrets (SPEC §1.4).
func (n *server) buildMonitor(deps *Deps, env secret.Lookup, wall WallClock, mono clockhealth.MonoClock) error {
	cfg := &n.cfg
	clockSecrets, secrets, err := loadAllSecrets(cfg, env, n.guard == nil)
	if err != nil {
		return err
	}
	n.secrets = secrets
	if n.guard != nil {
		return nil
	}
	// The kernel's receive timestamps are CLOCK_REALTIME: only for the
	// system clock, never for a clock a test injects (SPEC §1.1, rxstamp.go).
	_, sysWall := wall.(*clockhealth.SystemClock)
	_, sysMono := mono.(*clockhealth.SystemClock)
	opts := clockhealth.Options{
		Config: cfg.Clock, Wall: wall, Mono: mono, Dialer: deps.ClockDialer, NewTicker: deps.ClockTicker,
		Logger: n.log.With("component", "clock"), Registerer: n.reg,
		KernelRxTimestamps: sysWall && sysMono && clockhealth.KernelRxTimestamps,
	}
	if clockSecrets != nil {
		opts.Secret, opts.NextSecret = clockSecrets.Current.Bytes(), clockSecrets.Next.Bytes()
	}
	if n.mon, err = clockhealth.New(opts); err != nil {
		return err
	}
	n.guard = monitorGuard{n.mon}
	return nil
}

// clockCheck is the first stage of SPEC §3.5 with an agent: nothing opens
// Raft until 3 consecutive healthy samples. A failure here retires nothing
// and records nothing; the process exits non-zero and may start again.
func (n *server) clockCheck(ctx context.Context) error {
	n.stage.Set(stage.ClockCheck, fmt.Sprintf("waiting for %d consecutive healthy samples", clockhealth.ClockCheckSamples))
	n.log.Info("clock_check: proving the clock before opening Raft", "samples", clockhealth.ClockCheckSamples,
		"agents", n.cfg.Clock.Agents(), "probe_interval_ms", n.cfg.Clock.ProbeIntervalMs, "burst", n.cfg.Clock.Burst)
	err := n.mon.ClockCheck(ctx)
	if err == nil {
		n.log.Info("clock_check passed")
		return nil
	}
	if ctx.Err() != nil && n.mon.Err() == nil {
		return errStopped
	}
	n.stage.Set(stage.Failed, clockReason(err))
	return fmt.Errorf("node: clock_check failed before the node opened its data (nothing is recorded; start it again once the clock is healthy): %w", err)
}

// errStopped: ctx ended before the node got going; Run returns nil.
var errStopped = errors.New("node: stopped during start-up")

// clockFailed is the run loop's reaction to a FAILED clock after
// clock_check (SPEC §3.4, §4), on the run loop's goroutine: the node stops
// serving at once (stage failed: every write and read is a 503 with the
// reason; the expiry loop sees the same latch), then its mode records the
// failure (a single node's hold-off marker; a cluster node retires its
// NodeId, hands leadership over and stops Raft). A non-nil error is what
// the run loop returns.
func (n *server) clockFailed() error {
	ce := n.clockErr()
	reason := "failed"
	if ce != nil {
		reason = string(ce.Reason)
	}
	n.stage.Set(stage.Failed, reason)
	return n.mode.clockFailed(reason, ce)
}

// clockErr returns the latched FAILED error, or nil.
func (n *server) clockErr() *clockhealth.Error {
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
		return api.Unavailable(string(stage.Failed), string(ce.Reason),
			"clock health FAILED (%s): %v; this process will not grant again (a restart holds off 250 s + Δ)", ce.Reason, err)
	case errors.Is(err, clockhealth.ErrClockCheck):
		return api.Unavailable(string(stage.ClockCheck), "clock_check", "%v", err)
	}
	return api.Unavailable("clock", err.Error(), "clock health refuses the proposal: %v", err)
}
