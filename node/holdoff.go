package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/datadir"
)

// holdOff is the single-node restart rule of SPEC §4: after a FAILED clock
// the data dir carries a marker; every start on it refuses Grant and Expire
// for 250 s + Δ, and the marker goes once a hold-off has passed with a
// healthy clock. until and cause are set at start and never change.
type holdOff struct {
	dir   *datadir.Dir
	until time.Time // zero: no hold-off
	cause string    // why: the marker found at start

	// mu orders writing this run's marker (markFailed) against removing an
	// earlier run's (clear).
	mu      sync.Mutex
	pending atomic.Bool            // an earlier run's marker is on disk
	state   atomic.Pointer[string] // this run's marker: "written" or why not
	failed  atomic.Bool            // this run's clock FAILED
}

// holdOffFor is 250 s (the longest lease) + Δ.
func holdOffFor(deltaMs uint64) time.Duration {
	return 250*time.Second + time.Duration(deltaMs)*time.Millisecond
}

// openHoldOff reads the FAILED marker: found, it holds off from now; the
// later of that and injected wins.
func openHoldOff(dir *datadir.Dir, now, injected time.Time, deltaMs uint64) (*holdOff, error) {
	h := &holdOff{dir: dir, until: injected}
	if err := dir.CheckRetired(); err != nil {
		return nil, err
	}
	prior, err := dir.ReadFailed()
	if err != nil {
		return nil, err
	}
	rec, err := dir.ReadRecovered()
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if u := time.UnixMilli(rec.HoldUntilMs); u.After(h.until) {
			h.until = u
			h.cause = "recovered from " + rec.From + " (SPEC 3.4: no old lease may overlap)"
		}
	}
	if prior != nil {
		h.pending.Store(true)
		h.cause = prior.String()
		if u := now.Add(holdOffFor(deltaMs)); u.After(h.until) {
			h.until = u
		}
	}
	return h, nil
}

// active reports whether Grant and Expire are refused at wall time now.
func (h *holdOff) active(now time.Time) bool {
	return !h.until.IsZero() && !now.After(h.until)
}

func (h *holdOff) text() string {
	s := "Grant and Expire refused until " + h.until.UTC().Format(time.RFC3339Nano)
	if h.cause != "" {
		s += ": " + h.cause
	}
	return s
}

// markFailed records this run's FAILED durably (so a restart holds off) and
// returns what happened, for the log and /v1/status.
func (h *holdOff) markFailed(e *clockhealth.Error, at time.Time) (state string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed.Store(true)
	state = "written"
	if err = h.dir.WriteFailed(string(e.Reason), at, e.Error()); err != nil {
		state = "NOT written: " + err.Error()
	}
	h.state.Store(&state)
	return state, err
}

// clear removes an earlier run's marker once the hold-off has passed, if
// healthy says the clock is still healthy and this run has not FAILED. The
// caller has checked the clock (a Check that latches FAILED must not run
// under mu). It returns whether it removed the marker, and the error of a
// removal that failed.
func (h *holdOff) clear(healthy bool) (bool, error) {
	if !h.pending.Load() || !healthy {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.pending.Load() || h.failed.Load() {
		return false, nil
	}
	if err := h.dir.RemoveFailed(); err != nil {
		return false, err
	}
	h.pending.Store(false)
	return true, nil
}
