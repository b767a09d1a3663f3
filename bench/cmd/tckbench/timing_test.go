package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestStepClock(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	now := t0
	var out bytes.Buffer
	c := &stepClock{out: &out, start: t0, last: t0, now: func() time.Time { return now }, load: func() string { return "3.10" }}
	now = now.Add(25 * time.Second)
	c.mark("build")
	now = now.Add(90*time.Second + 40*time.Millisecond)
	c.mark("load independent 64")
	if len(c.steps) != 2 || c.steps[0].Seconds != 25 || c.steps[1].Seconds != 90.04 || c.steps[1].Load1 != "3.10" {
		t.Fatalf("steps = %+v", c.steps)
	}
	if c.total() != 115.04 {
		t.Errorf("total = %v, want 115.04", c.total())
	}
	if got := out.String(); !strings.Contains(got, "[time] load independent 64 1m30s (total 1m55s, load 3.10)") {
		t.Errorf("log = %q", got)
	}
	want := "1m55s in all from the build on: build 25s (load 3.10); load independent 64 1m30s (load 3.10)"
	if got := stepsText(c.total(), c.steps); got != want {
		t.Errorf("stepsText = %q, want %q", got, want)
	}
	if stepsText(0, nil) != "" {
		t.Error("no steps (an older report.json): want no line")
	}
	var nilClock *stepClock
	nilClock.mark("x") // a run without a clock marks nothing
}

func TestWarmupFor(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		round     int
		p50, want time.Duration
	}{
		{1, 0, 750 * ms},        // the first round: the flag's
		{1, 400 * ms, 750 * ms}, // whatever came before
		{2, 10 * ms, 250 * ms},  // fast targets: the floor
		{2, 100 * ms, 300 * ms}, // three p50s
		{3, 230 * ms, 690 * ms}, // etcd ×3 at 256 clients on a loaded machine
		{2, 400 * ms, 750 * ms}, // never longer than the flag
		{2, 0, 250 * ms},        // no cycle completed before: the floor
	} {
		if got := warmupFor(750*ms, c.round, c.p50); got != c.want {
			t.Errorf("warmupFor(750ms, round %d, p50 %v) = %v, want %v", c.round, c.p50, got, c.want)
		}
	}
	if got := warmupFor(100*ms, 2, 50*ms); got != 100*ms {
		t.Errorf("a -warmup below the floor: %v, want the flag's 100ms", got)
	}
}

func TestDurationOf(t *testing.T) {
	o := options{duration: 5 * time.Second, otherDuration: 3 * time.Second}
	for _, c := range []struct {
		w    workload
		want time.Duration
	}{
		{workload{"independent", 64, 0}, 5 * time.Second},
		{workload{"independent", 256, 0}, 5 * time.Second},
		{workload{"independent", 1, 0}, 3 * time.Second},
		{workload{"independent", 16, 0}, 3 * time.Second},
		{workload{"contended", 64, 0}, 3 * time.Second},
	} {
		if got := o.durationOf(c.w); got != c.want {
			t.Errorf("durationOf(%s %d) = %v, want %v", c.w.name, c.w.clients, got, c.want)
		}
	}
	o.otherDuration = 0
	if got := o.durationOf(workload{"independent", 1, 0}); got != 5*time.Second {
		t.Errorf("-other-duration 0: %v, want -duration's 5s", got)
	}
}
