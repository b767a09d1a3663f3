package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// stepTime is the wall time of one part of a run (the build, a load
// workload, a section), with the 1-minute load average at its end: what
// the run's length is made of, so a change to the defaults can be judged
// by where the time went.
type stepTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Load1   string  `json:"load1"`
}

// stepClock times consecutive parts of a run: each mark closes the part
// begun at the previous one (or at the start) and logs it.
type stepClock struct {
	out   io.Writer
	start time.Time
	last  time.Time
	steps []stepTime
	now   func() time.Time
	load  func() string
}

func newStepClock(out io.Writer) *stepClock {
	c := &stepClock{out: out, now: time.Now, load: func() string { return strings.Fields(loadavg() + " ?")[0] }}
	c.start = c.now()
	c.last = c.start
	return c
}

// mark ends the part called name.
func (c *stepClock) mark(name string) {
	if c == nil {
		return
	}
	c.markAt(name, c.now())
}

// markAt ends the part called name at t (a part that ended while the run
// went on beside it: the build).
func (c *stepClock) markAt(name string, t time.Time) {
	s := stepTime{Name: name, Seconds: t.Sub(c.last).Seconds(), Load1: c.load()}
	c.last = t
	c.steps = append(c.steps, s)
	fmt.Fprintf(c.out, "tckbench: [time] %s %s (total %s, load %s)\n", name, roundDur(s.Seconds), roundDur(t.Sub(c.start).Seconds()), s.Load1)
}

// total is the time since the clock started.
func (c *stepClock) total() float64 { return c.now().Sub(c.start).Seconds() }

func roundDur(secs float64) string {
	return (time.Duration(secs * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// stepsText is the report's line: the total, then each part.
func stepsText(total float64, steps []stepTime) string {
	if len(steps) == 0 {
		return ""
	}
	var parts []string
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%s %s (load %s)", s.Name, roundDur(s.Seconds), s.Load1))
	}
	return fmt.Sprintf("%s in all from the build on: %s", roundDur(total), strings.Join(parts, "; "))
}
