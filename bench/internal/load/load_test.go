package load

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var all []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		all = append(all, time.Duration(i)*time.Millisecond)
	}
	r := Summarize("x", 4, all, 2, 3)
	if r.Cycles != 1000 || r.CyclesPerS != 500 || r.Errors != 3 {
		t.Errorf("cycles %d, rate %v, errors %d", r.Cycles, r.CyclesPerS, r.Errors)
	}
	if r.P50Ms != 501 || r.P99Ms != 991 || r.P999Ms != 1000 || r.MaxMs != 1000 {
		t.Errorf("p50 %v p99 %v p99.9 %v max %v", r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs)
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
}

// fakeCycler: every third cycle is busy, every fifth fails.
type fakeCycler struct{ n atomic.Int64 }

var errFake = errors.New("fake failure")

func (f *fakeCycler) Cycle(ctx context.Context, i int) error {
	n := f.n.Add(1)
	time.Sleep(time.Millisecond) // a cycle takes time; not synchronisation
	switch {
	case n%5 == 0:
		return errFake
	case n%3 == 0:
		return ErrBusy
	}
	return nil
}
func (f *fakeCycler) Close() {}

// Busy attempts count as cycles but not acquisitions; failures count as
// errors only; the window hook brackets the measurement.
func TestMeasureCountsBusyAndErrors(t *testing.T) {
	var opened, closed atomic.Bool
	window := func() func() {
		opened.Store(true)
		return func() { closed.Store(true) }
	}
	r := Measure(context.Background(), "fake", &fakeCycler{}, 3, 10*time.Millisecond, 200*time.Millisecond, window)
	if !opened.Load() || !closed.Load() {
		t.Error("the window hook was not called around the measurement")
	}
	if r.Cycles == 0 || r.Errors == 0 || r.FirstError != errFake.Error() {
		t.Fatalf("cycles %d errors %d first %q", r.Cycles, r.Errors, r.FirstError)
	}
	if r.Acquired >= int64(r.Cycles) || r.Acquired == 0 {
		t.Errorf("acquired %d of %d cycles: busy attempts must not count", r.Acquired, r.Cycles)
	}
}
