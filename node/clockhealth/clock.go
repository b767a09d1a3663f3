package clockhealth

import (
	"context"
	"net"
	"time"
)

// WallClock is the node's wall clock (CLOCK_REALTIME). Tests inject a
// manual clock they step and skew.
type WallClock interface{ Now() time.Time }

// MonoClock is a monotonic clock in nanoseconds from an arbitrary origin
// (CLOCK_MONOTONIC). It never goes backwards.
type MonoClock interface{ NowNs() int64 }

// Dialer opens the TCP connection of one exchange; *net.Dialer satisfies it.
// Tests inject in-process fakes (net.Pipe) through it.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Ticker paces the prober and the watchdog; tests inject manual tickers.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// TickerFunc makes the Ticker of one loop. name is "probe" or "watchdog".
type TickerFunc func(name string, d time.Duration) Ticker

// SystemClock is the real wall and monotonic clock.
type SystemClock struct{ epoch time.Time }

// NewSystemClock returns the real clock; its monotonic origin is now.
func NewSystemClock() *SystemClock { return &SystemClock{epoch: time.Now()} }

// Now returns the wall time.
func (c *SystemClock) Now() time.Time { return time.Now() }

// NowNs returns monotonic nanoseconds since the clock was made (one
// monotonic read, no wall read).
func (c *SystemClock) NowNs() int64 { return int64(time.Since(c.epoch)) }

type systemTicker struct{ t *time.Ticker }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }

// SystemTicker is the default TickerFunc (time.NewTicker).
func SystemTicker(_ string, d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }
