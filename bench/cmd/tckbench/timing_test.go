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
