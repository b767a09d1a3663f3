package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Result is one check's verdict in a report.
type Result struct {
	ID          string        `json:"id"`
	Section     string        `json:"section"`
	Level       Level         `json:"level"`
	Requirement string        `json:"requirement"`
	Status      Status        `json:"result"`
	Detail      string        `json:"detail"`
	Duration    time.Duration `json:"-"`
}

// Report is a whole run.
type Report struct {
	Target   string
	Dev      bool
	Timeout  time.Duration
	Started  time.Time
	Duration time.Duration
	Results  []Result
}

// Counts returns how many checks passed, failed and warned.
func (r *Report) Counts() (passed, failed, warned int) {
	for _, res := range r.Results {
		switch res.Status {
		case Pass:
			passed++
		case Fail:
			failed++
		case Warn:
			warned++
		}
	}
	return passed, failed, warned
}

// OK reports whether no check failed (a WARN does not fail a run).
func (r *Report) OK() bool {
	_, failed, _ := r.Counts()
	return failed == 0
}

// Run validates cfg and runs the selected checks one after the other, in
// catalogue order. The error is only ever a configuration error; what the
// target does is in the report. A cancelled ctx fails the checks not yet
// run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := newTarget(&cfg)
	rep := &Report{Target: cfg.Addr, Dev: cfg.Dev, Timeout: cfg.Timeout, Started: time.Now()}
	t.log.Info("conformance run", "target", cfg.Addr, "dev", cfg.Dev, "timeout", cfg.Timeout)
	for _, c := range selected(cfg.Only) {
		start := time.Now()
		var o Outcome
		if err := ctx.Err(); err != nil {
			o = fail("not run: %v", err)
		} else if o = c.Run(ctx, t); !o.OK && ctx.Err() != nil {
			o.Detail = fmt.Sprintf("interrupted (%v): %s", ctx.Err(), o.Detail)
		}
		res := Result{ID: c.ID, Section: c.Section, Level: c.Level, Requirement: c.Requirement,
			Status: verdict(c.Level, o.OK), Detail: bounded(o.Detail), Duration: time.Since(start)}
		rep.Results = append(rep.Results, res)
		t.log.Debug("check", slog.String("id", res.ID), slog.String("result", string(res.Status)),
			slog.String("detail", res.Detail), slog.Duration("took", res.Duration))
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

func verdict(l Level, ok bool) Status {
	switch {
	case ok:
		return Pass
	case l == Should:
		return Warn
	}
	return Fail
}

// selected returns the checks named in only, in catalogue order (all when
// only is empty). IDs were validated by Config.Validate.
func selected(only []string) []Check {
	if len(only) == 0 {
		return Catalogue()
	}
	want := make(map[string]bool, len(only))
	for _, id := range only {
		want[id] = true
	}
	var out []Check
	for _, c := range checks {
		if want[c.ID] {
			out = append(out, c)
		}
	}
	return out
}
