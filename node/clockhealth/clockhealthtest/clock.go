package clockhealthtest

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a manual wall and monotonic clock (both in ns). Advance moves
// both, as real time does; StepWall moves the wall clock alone, as a clock
// step or rollback does. Safe for concurrent use.
type Clock struct {
	wall atomic.Int64
	mono atomic.Int64
}

// NewClock starts the wall clock at wall and the monotonic clock at 1 s.
func NewClock(wall time.Time) *Clock {
	c := &Clock{}
	c.wall.Store(wall.UnixNano())
	c.mono.Store(int64(time.Second))
	return c
}

// Now is the wall clock.
func (c *Clock) Now() time.Time { return time.Unix(0, c.wall.Load()) }

// NowNs is the monotonic clock.
func (c *Clock) NowNs() int64 { return c.mono.Load() }

// WallNs is the wall clock in Unix ns.
func (c *Clock) WallNs() int64 { return c.wall.Load() }

// Advance moves both clocks forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mono.Add(int64(d))
	c.wall.Add(int64(d))
}

// StepWall moves only the wall clock by d (negative: a rollback).
func (c *Clock) StepWall(d time.Duration) { c.wall.Add(int64(d)) }

// Tickers is a manual TickerFunc: each loop's ticker fires only when the
// test calls Fire with its name. Made tickers are kept by name.
type Tickers struct {
	mu   sync.Mutex
	byNm map[string]*Ticker
	made chan string
}

// NewTickers returns an empty set of manual tickers.
func NewTickers() *Tickers {
	return &Tickers{byNm: map[string]*Ticker{}, made: make(chan string, 16)}
}

// Ticker is one manual ticker.
type Ticker struct {
	c       chan time.Time
	Period  time.Duration
	stopped atomic.Bool
}

// C is the tick channel.
func (t *Ticker) C() <-chan time.Time { return t.c }

// Stop marks the ticker stopped.
func (t *Ticker) Stop() { t.stopped.Store(true) }

// New makes the named manual ticker. Wrap it for Options.NewTicker:
// func(n string, d time.Duration) clockhealth.Ticker { return ts.New(n, d) }.
func (ts *Tickers) New(name string, d time.Duration) *Ticker {
	t := &Ticker{c: make(chan time.Time), Period: d}
	ts.mu.Lock()
	ts.byNm[name] = t
	ts.mu.Unlock()
	select {
	case ts.made <- name:
	default:
	}
	return t
}

// Get returns the ticker made under name, waiting up to timeout for it.
func (ts *Tickers) Get(name string, timeout time.Duration) *Ticker {
	deadline := time.After(timeout)
	for {
		ts.mu.Lock()
		t := ts.byNm[name]
		ts.mu.Unlock()
		if t != nil {
			return t
		}
		select {
		case <-ts.made:
		case <-deadline:
			return nil
		}
	}
}

// Fire delivers one tick to the named ticker, waiting up to timeout for the
// loop to take it; it reports whether the loop took it.
func (ts *Tickers) Fire(name string, timeout time.Duration) bool {
	t := ts.Get(name, timeout)
	if t == nil {
		return false
	}
	select {
	case t.c <- time.Time{}:
		return true
	case <-time.After(timeout):
		return false
	}
}
