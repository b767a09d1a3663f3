package agent

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/protocol"
)

// manualClock is a clock the test advances (no monotonic reading: Sub uses
// the wall values, which the test controls).
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// scripted is a source whose next poll result the test sets.
type scripted struct {
	name string
	mu   sync.Mutex
	s    source.Sample
	err  error
}

func (s *scripted) Name() string { return s.name }

func (s *scripted) set(sm source.Sample, err error) {
	s.mu.Lock()
	s.s, s.err = sm, err
	s.mu.Unlock()
}

func (s *scripted) Poll(context.Context) (source.Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s, s.err
}

var t0 = time.Unix(1_800_000_000, 0)

func newTestSampler(t *testing.T, clock *manualClock, maxAge time.Duration, ppm uint64, srcs ...*scripted) *Sampler {
	var specs []SourceSpec
	for _, s := range srcs {
		specs = append(specs, SourceSpec{Source: s, Interval: time.Hour, Timeout: time.Second})
	}
	return NewSampler(specs, maxAge, ppm, clock, nil, testLogger(t))
}

// pollAll polls every source once, synchronously.
func pollAll(s *Sampler) {
	for _, p := range s.pollers {
		s.pollOnce(context.Background(), p)
	}
}

// SPEC §2.1: uncertainty = ceil_ms(B + ppm × age + step), rounded up once,
// never 0 when synced; reference = floor_ms(now + offset); age rounded up.
func TestSelectArithmetic(t *testing.T) {
	clk := &manualClock{now: t0}
	src := &scripted{name: "a"}
	s := newTestSampler(t, clk, 10*time.Second, 50, src)
	src.set(source.Sample{At: t0, Offset: 1500 * time.Microsecond, Uncertainty: 2100 * time.Microsecond, Age: 400 * time.Millisecond}, nil)
	pollAll(s)
	sel := s.Select(t0)
	// age 400 ms → drift 50 ppm × 0.4 s = 20 µs; base 2.1 ms + 20 µs → 3 ms
	// (rounding each term up would say 4).
	want := Selection{Synced: true, Source: "a", ReferenceUnixMs: uint64(t0.UnixMilli()) + 1, UncertaintyMs: 3, SourceAgeMs: 400}
	if sel != want {
		t.Fatalf("got %+v, want %+v", sel, want)
	}
	// 60 s later (max age 10 s passed): unsynced, the last estimate shown.
	clk.Advance(9*time.Second + 600*time.Millisecond) // age exactly 10 s: still usable
	// drift 50 ppm × 10 s = 500 µs: 2.1 + 0.5 → 3 ms.
	if sel := s.Select(clk.Now()); !sel.Synced || sel.SourceAgeMs != 10000 || sel.UncertaintyMs != 3 {
		t.Fatalf("at max age: %+v", sel)
	}
	clk.Advance(time.Millisecond)
	sel = s.Select(clk.Now())
	if sel.Synced || sel.Source != "" || sel.SourceAgeMs != 10001 {
		t.Fatalf("past max age: %+v, want unsynced", sel)
	}
}

// SPEC §2.1: drift growth max_drift_ppm × age.
func TestSelectDriftGrowth(t *testing.T) {
	clk := &manualClock{now: t0}
	src := &scripted{name: "a"}
	s := newTestSampler(t, clk, time.Hour, 500, src)
	src.set(source.Sample{At: t0, Uncertainty: time.Millisecond}, nil)
	pollAll(s)
	clk.Advance(100 * time.Second) // 500 ppm × 100 s = 50 ms, exactly
	if sel := s.Select(clk.Now()); sel.UncertaintyMs != 1+50 {
		t.Fatalf("uncertainty %d, want 51", sel.UncertaintyMs)
	}
	clk.Advance(time.Nanosecond) // 0.0005 ns more drift: any excess rounds up
	if sel := s.Select(clk.Now()); sel.UncertaintyMs != 1+51 {
		t.Fatalf("uncertainty %d, want 52", sel.UncertaintyMs)
	}
}

// SPEC §2.1: a synced sample never has uncertainty 0, even from a source
// bug; such a sample is refused.
func TestSelectNeverZero(t *testing.T) {
	clk := &manualClock{now: t0}
	src := &scripted{name: "a"}
	s := newTestSampler(t, clk, time.Hour, 1, src)
	src.set(source.Sample{At: t0, Uncertainty: 0}, nil)
	pollAll(s)
	if sel := s.Select(t0); sel.Synced {
		t.Fatalf("a zero-uncertainty sample was selected: %+v", sel)
	}
	src.set(source.Sample{At: t0, Uncertainty: 1}, nil)
	pollAll(s)
	if sel := s.Select(t0); !sel.Synced || sel.UncertaintyMs < 1 {
		t.Fatalf("%+v", sel)
	}
}

// SPEC §2.1: with several sources the healthy one with the lowest
// uncertainty answers; an unhealthy one never does.
func TestSelectLowestUncertainty(t *testing.T) {
	clk := &manualClock{now: t0}
	a, b, c := &scripted{name: "a"}, &scripted{name: "b"}, &scripted{name: "c"}
	s := newTestSampler(t, clk, 30*time.Second, 50, a, b, c)
	a.set(source.Sample{At: t0, Uncertainty: 9 * time.Millisecond}, nil)
	b.set(source.Sample{At: t0, Uncertainty: 2 * time.Millisecond, Offset: 7 * time.Millisecond}, nil)
	c.set(source.Sample{}, source.Errorf("c", source.ReasonLeap, "unsynchronised"))
	pollAll(s)
	if sel := s.Select(t0); sel.Source != "b" || sel.ReferenceUnixMs != uint64(t0.UnixMilli())+7 {
		t.Fatalf("%+v, want b", sel)
	}
	// b goes bad (leap unsynchronised): its sample is dropped at once.
	b.set(source.Sample{}, source.Errorf("b", source.ReasonLeap, "leap 3"))
	pollAll(s)
	if sel := s.Select(t0); sel.Source != "a" {
		t.Fatalf("%+v, want a after b went unsynchronised", sel)
	}
	// b's old sample is older but its bound still lower: the fresher, worse
	// one loses to an older, better one only while the older is younger
	// than max age. Here a's age grows; b comes back fresh.
	clk.Advance(20 * time.Second)
	b.set(source.Sample{At: clk.Now(), Uncertainty: 2 * time.Millisecond}, nil)
	s.pollOnce(context.Background(), s.pollers[1])
	if sel := s.Select(clk.Now()); sel.Source != "b" {
		t.Fatalf("%+v, want b", sel)
	}
	st := s.Sources(clk.Now(), "b")
	if !st[0].Healthy || !st[1].Selected || st[2].Healthy || st[2].Reason != "leap" {
		t.Fatalf("status %+v", st)
	}
}

// An unreachable poll keeps the previous sample until max age (one lost
// packet does not unsync); garbage drops it at once.
func TestUnreachableKeepsSampleUntilStale(t *testing.T) {
	clk := &manualClock{now: t0}
	a := &scripted{name: "a"}
	s := newTestSampler(t, clk, 5*time.Second, 50, a)
	a.set(source.Sample{At: t0, Uncertainty: time.Millisecond}, nil)
	pollAll(s)
	clk.Advance(2 * time.Second)
	a.set(source.Sample{}, source.Errorf("a", source.ReasonUnreachable, "timeout"))
	pollAll(s)
	sel := s.Select(clk.Now())
	if !sel.Synced || sel.SourceAgeMs != 2000 || sel.UncertaintyMs != 1+1 {
		t.Fatalf("after one lost poll: %+v", sel)
	}
	if st := s.Sources(clk.Now(), sel.Source)[0]; st.Reason != "unreachable" || st.Failures != 1 || !st.Healthy {
		t.Fatalf("status %+v", st)
	}
	clk.Advance(3*time.Second + time.Millisecond)
	if sel := s.Select(clk.Now()); sel.Synced {
		t.Fatalf("still synced past max age: %+v", sel)
	}
	a.set(source.Sample{At: clk.Now(), Uncertainty: time.Millisecond}, nil)
	pollAll(s)
	if sel := s.Select(clk.Now()); !sel.Synced {
		t.Fatal("did not recover")
	}
	a.set(source.Sample{}, source.Errorf("a", source.ReasonGarbage, "nonsense"))
	pollAll(s)
	if sel := s.Select(clk.Now()); sel.Synced {
		t.Fatalf("garbage kept the sample: %+v", sel)
	}
}

// Without any sample ever: no reference (never the local clock), synced 0.
func TestSelectNothing(t *testing.T) {
	clk := &manualClock{now: t0}
	s := newTestSampler(t, clk, time.Second, 50, &scripted{name: "a", err: source.Errorf("a", source.ReasonUnreachable, "x")})
	pollAll(s)
	sel := s.Select(t0)
	if sel.Synced || sel.ReferenceUnixMs != 0 || sel.UncertaintyMs != math.MaxUint64 {
		t.Fatalf("%+v", sel)
	}
}

// The poll loops run and stop with Close (goleak checks the rest).
func TestSamplerLoopsStartAndStop(t *testing.T) {
	a := &scripted{name: "a"}
	a.set(source.Sample{At: time.Now(), Uncertainty: time.Millisecond}, nil)
	s := NewSampler([]SourceSpec{{Source: a, Interval: 10 * time.Millisecond, Timeout: time.Second}}, time.Minute, 50, source.SystemClock{}, nil, testLogger(t))
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.WaitFirstPolls(ctx)
	waitFor(t, "three polls", 5*time.Second, func() bool { return s.pollers[0].state.Load().polls >= 3 })
	s.Close()
	if !s.Select(time.Now()).Synced {
		t.Fatal("not synced after polls")
	}
}

// A step of the local wall clock since the sample (Δwall ≠ Δmono) is added
// to the bound: a held offset no longer describes the stepped clock.
func TestSelectAddsLocalSteps(t *testing.T) {
	s := newTestSampler(t, &manualClock{now: t0}, time.Hour, 50)
	sm := &source.Sample{At: t0, Uncertainty: time.Millisecond, Offset: 2 * time.Millisecond}
	// 1 s later on both clocks: 1 + drift 1.
	if v := s.evalAt(sm, t0.Add(time.Second).UnixNano(), time.Second); v.uMs != 2 || v.refMs != uint64(t0.Add(time.Second).UnixMilli())+2 {
		t.Fatalf("unstepped: %+v", v)
	}
	// The wall clock was stepped back 300 ms (or forward) during that second.
	for _, d := range []time.Duration{-300 * time.Millisecond, 300 * time.Millisecond} {
		v := s.evalAt(sm, t0.Add(time.Second+d).UnixNano(), time.Second)
		if v.uMs != 2+300 || !v.usable {
			t.Fatalf("stepped %v: %+v, want the step in the bound", d, v)
		}
	}
}

// The three terms of SPEC §2.1's uncertainty are summed before rounding
// up: 0.3 ms base + 0.3 ms drift + a 0.3 ms step is 1 ms, not 3.
func TestSelectRoundsTheSumOnce(t *testing.T) {
	s := newTestSampler(t, &manualClock{now: t0}, time.Hour, 500, &scripted{name: "a"})
	sm := source.Sample{At: t0, Uncertainty: 300 * time.Microsecond}
	since := 600 * time.Millisecond // 500 ppm × 0.6 s = 0.3 ms drift
	// the wall clock moved 0.3 ms more than the monotonic one: a step
	v := s.evalAt(&sm, t0.Add(since+300*time.Microsecond).UnixNano(), since)
	if !v.usable || v.uMs != 1 {
		t.Fatalf("got %+v, want uncertainty 1 ms", v)
	}
	v = s.evalAt(&sm, t0.Add(since+701*time.Microsecond).UnixNano(), since) // 1.301 ms in all
	if v.uMs != 2 {
		t.Fatalf("got uncertainty %d, want 2 ms", v.uMs)
	}
	if got := protocol.DriftNs(math.MaxUint64, math.MaxUint64); got != math.MaxUint64 {
		t.Fatalf("driftNs overflow: %d, want saturation", got)
	}
	if got := protocol.DriftNs(50, 1); got != 1 {
		t.Fatalf("protocol.DriftNs(50 ppm, 1 ns) = %d, want 1 (rounded up)", got)
	}
}
