package membership

import "time"

// Clock is what the join loop schedules with: the wall time for the
// convergence metric and timers for back-off and the rejoin check. Tests
// inject a manual clock whose timers they fire.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer (what time.Timer offers).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock is the real clock (time.Now, time.NewTimer).
type SystemClock struct{}

// Now returns the wall time.
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }
