// Package kernel is the `kernel` source of SPEC §2.2: the kernel's own view
// of its synchronisation, read with adjtimex(2) in read-only mode (modes 0),
// as set by whatever NTP/PTP daemon disciplines the clock.
//
// Health: STA_UNSYNC clear, the clock state not TIME_ERROR, and maxerror
// below 16 s. Uncertainty: maxerror (µs, which the kernel itself grows by
// 500 ppm per second between updates), rounded up; the offset is 0 — the
// kernel clock is the disciplined clock.
//
// Hazard: chronyd clears STA_UNSYNC only with `rtcsync`; ntpd and ptp4l's
// phc2sys set it differently. A kernel that was never told it is
// synchronised makes this source unhealthy, never synced.
package kernel

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tckclk/tckclk/agent/source"
)

// MaxError is the kernel's own "unsynchronised" limit (NTP_PHASE_LIMIT,
// 16 s): maxerror at or above it means the kernel does not know the time.
const MaxError = 16 * time.Second

// Adjtimex reads the kernel clock state (unix.Adjtimex); tests inject one.
type Adjtimex func(*unix.Timex) (state int, err error)

// Source reads the kernel clock state.
type Source struct {
	clock    source.Clock
	adjtimex Adjtimex
}

// New returns the kernel source. A nil clock or adjtimex means the real one.
func New(clock source.Clock, adj Adjtimex) *Source {
	if clock == nil {
		clock = source.SystemClock{}
	}
	if adj == nil {
		adj = unix.Adjtimex
	}
	return &Source{clock: clock, adjtimex: adj}
}

// Name is "kernel".
func (s *Source) Name() string { return "kernel" }

// Poll reads adjtimex once with modes 0 (nothing is changed).
func (s *Source) Poll(_ context.Context) (source.Sample, error) {
	var tx unix.Timex // Modes 0: read only
	st, err := s.adjtimex(&tx)
	at := s.clock.Now()
	if err != nil {
		return source.Sample{}, source.Wrap("kernel", source.ReasonUnreachable, "adjtimex", err)
	}
	return Interpret(at, st, &tx)
}

// Interpret turns one adjtimex reading taken at `at` into a sample.
func Interpret(at time.Time, state int, tx *unix.Timex) (source.Sample, error) {
	info := map[string]any{
		"state":       state,
		"status":      tx.Status,
		"maxerror_us": tx.Maxerror,
		"esterror_us": tx.Esterror,
	}
	switch {
	case tx.Status&unix.STA_UNSYNC != 0:
		return source.Sample{Info: info}, source.Errorf("kernel", source.ReasonLeap, "STA_UNSYNC is set: the kernel clock is not synchronised (chronyd sets it only with rtcsync)")
	case state == unix.TIME_ERROR:
		return source.Sample{Info: info}, source.Errorf("kernel", source.ReasonLeap, "clock state TIME_ERROR")
	case state < 0 || state > unix.TIME_ERROR:
		return source.Sample{Info: info}, source.Errorf("kernel", source.ReasonGarbage, "unknown clock state %d", state)
	case tx.Maxerror < 0:
		return source.Sample{Info: info}, source.Errorf("kernel", source.ReasonGarbage, "negative maxerror %d µs", tx.Maxerror)
	case tx.Maxerror >= MaxError.Microseconds():
		return source.Sample{Info: info}, source.Errorf("kernel", source.ReasonQuality, "maxerror %d µs is at or above the kernel's 16 s limit", tx.Maxerror)
	}
	u := time.Duration(tx.Maxerror) * time.Microsecond
	if u <= 0 {
		// A synchronised kernel never knows the time exactly: the clock
		// read itself has a granularity. Keep the bound honest and > 0.
		u = time.Microsecond
	}
	return source.Sample{At: at, Offset: 0, Uncertainty: u, Age: 0, Info: info}, nil
}
