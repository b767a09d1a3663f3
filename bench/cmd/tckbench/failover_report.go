package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The failover section's targets (SPEC §5 "Crash failover"): kill -9,
// ticketd's median at most a quarter of etcd's and its maximum at most
// 1 s; a lost machine, ticketd's median no slower than etcd's.
const (
	killRatioTarget = 0.25
	killMaxTarget   = time.Second
	lostRatioTarget = 1.0
)

// failoverPair is ticketd's and etcd's result of one kind.
func failoverPair(fos []failoverResult, kind string) (tckd, etcd *failoverResult) {
	for i := range fos {
		f := &fos[i]
		if cmp := f.Kind; cmp == kind || (cmp == "" && kind == kindKill) {
			switch f.Target {
			case "ticketd ×3":
				tckd = f
			case "etcd ×3":
				etcd = f
			}
		}
	}
	return tckd, etcd
}

// failoverRatio is ticketd's median over etcd's for kind, ok false
// without trials of both.
func failoverRatio(fos []failoverResult, kind string) (r float64, tmed, emed time.Duration, ok bool) {
	t, e := failoverPair(fos, kind)
	if t == nil || e == nil || len(t.Trials) == 0 || len(e.Trials) == 0 {
		return 0, 0, 0, false
	}
	tmed, _ = t.summary()
	emed, _ = e.summary()
	return float64(tmed) / float64(emed), tmed, emed, true
}

// failoverTargetsMet says, per kind with both systems measured, whether
// its target was met, as report text.
func failoverTargetsMet(fos []failoverResult) []string {
	var out []string
	if r, tm, em, ok := failoverRatio(fos, kindKill); ok {
		t, _ := failoverPair(fos, kindKill)
		_, mx := t.summary()
		out = append(out, fmt.Sprintf("kill -9: ticketd's median %.2f× etcd's (%v vs %v; target ≤ %.2f×) %s, its max %v (target ≤ %v) %s",
			r, tm.Round(time.Millisecond), em.Round(time.Millisecond), killRatioTarget, met(r <= killRatioTarget),
			mx.Round(time.Millisecond), killMaxTarget, met(mx <= killMaxTarget && len(t.Errors) == 0)))
	}
	if r, tm, em, ok := failoverRatio(fos, kindLost); ok {
		out = append(out, fmt.Sprintf("machine lost: ticketd's median %.2f× etcd's (%v vs %v; target ≤ %.2f×) %s",
			r, tm.Round(time.Millisecond), em.Round(time.Millisecond), lostRatioTarget, met(r <= lostRatioTarget)))
	}
	return out
}

// writeFailover is the report's failover section (kill -9, machine lost,
// clock FAILED) with its distribution plot.
func writeFailover(w io.Writer, dir, base string, fos []failoverResult, items itemResults) {
	if len(fos) == 0 && items.Clock == nil {
		return
	}
	fmt.Fprintf(w, "## Failover (3 nodes): kill -9 of the leader, the leader's machine lost, the leader's clock going bad\n\n")
	fmt.Fprintf(w, "Each trial starts a fresh cluster, waits for a leader (ticketd: and three voters), then fails the leader and times until the first lock cycle succeeds through the surviving nodes (overlapping probes, a new one every 10 ms, each allowed 10 s, so one blocked through the election answers as soon as the new leader commits it; ticketd: Grant+Release through a survivor, which forwards to the new leader, each probe one request (its client tries once: the next probe is the retry, no client back-off hides the first moment the new leader grants); etcd: TryLock+Unlock with a session opened before the failure, its client on the survivors). The targets alternate within each round of trials.\n\n")
	fmt.Fprintf(w, "- **kill -9**: the leader's process killed on loopback; its kernel closes its connections. ticketd's followers see their mesh session to it end and, after `cluster.raft.crash_detect_ms` (default 100) of silence, stand for election in turns (the second as soon as the first asked it for its pre-vote) (SPEC §5 \"Crash failover\"); etcd waits its election timeout (default 1 s).\n")
	fmt.Fprintf(w, "- **machine lost**: every node in its own network namespace (a veth pair to a bridge; the bench reaches the nodes through the bridge); the leader's link is set down: its packets vanish, nothing is reset (the process keeps running, unreachable). Both systems wait their timeouts: ticketd's heartbeat timeout (500 ms), etcd's election timeout.\n")
	fmt.Fprintf(w, "- Every trial's timeline is in the raw figures (`timelines`): ticketd's survivors' log lines (at info) from the failure to the first successful lock — how each saw its mesh session to the leader end, the crash failover's shortening, each candidacy, pre-vote and election, the new leader ready — and the probes: how many, which succeeded first, when it started and through which node, why the others failed.\n\n")
	fmt.Fprintf(w, "| target | trials | median | min | max | failed trials |\n|---|---|---|---|---|---|\n")
	for _, f := range append(slices.Clone(fos), items.clockRow()...) {
		med, mx := f.summary()
		mn := time.Duration(0)
		if len(f.Trials) > 0 {
			mn = slices.Min(f.Trials)
		}
		fmt.Fprintf(w, "| %s | %d | %v | %v | %v | %d |\n", f.label(), len(f.Trials), med.Round(time.Millisecond), mn.Round(time.Millisecond), mx.Round(time.Millisecond), len(f.Errors))
	}
	fmt.Fprintln(w)
	for _, t := range failoverTargetsMet(fos) {
		fmt.Fprintf(w, "- Target, %s.\n", t)
	}
	for _, f := range fos {
		for _, e := range f.Errors {
			fmt.Fprintf(w, "- %s: %s\n", f.label(), e)
		}
	}
	writeClockFailover(w, items, fos)
	fmt.Fprintln(w)
	name := base + "-failover.png"
	if err := plotFailover(filepath.Join(dir, name), append(slices.Clone(fos), items.clockRow()...)); err != nil {
		fmt.Fprintf(w, "(No failover plot: %v.)\n\n", err)
	} else {
		fmt.Fprintf(w, "![failover distributions](%s)\n\n", name)
	}
}

// plotFailover draws each row's trials as a box (quartiles, whiskers to
// the extremes within 1.5 IQR) with every trial as a point beside it.
func plotFailover(path string, fos []failoverResult) (err error) {
	defer func() { // gonum/plot panics on some degenerate axes
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %v", r)
		}
	}()
	p := plot.New()
	p.Title.Text = "Failover: failure of the leader → first successful lock"
	p.Y.Label.Text = "ms"
	var names []string
	x := 0.0
	for _, f := range fos {
		if len(f.Trials) == 0 {
			continue
		}
		vals := make(plotter.Values, len(f.Trials))
		pts := make(plotter.XYs, len(f.Trials))
		for i, d := range f.Trials {
			ms := float64(d) / float64(time.Millisecond)
			vals[i] = ms
			pts[i] = plotter.XY{X: x + 0.25 + 0.08*float64(i%3), Y: ms}
		}
		b, err := plotter.NewBoxPlot(vg.Points(18), x, vals)
		if err != nil {
			return err
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.GlyphStyle.Radius = vg.Points(1.5)
		p.Add(b, s)
		names = append(names, strings.Replace(f.label(), " ×3", "", 1))
		x++
	}
	if len(names) == 0 {
		return fmt.Errorf("no trials")
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max, p.Y.Min = -0.6, x-0.2, 0
	p.Add(plotter.NewGrid())
	return p.Save(vg.Length(110*len(names))+2*vg.Inch, 4*vg.Inch, path)
}

// printFailover is the summary's failover lines.
func printFailover(w io.Writer, fos []failoverResult) {
	for _, f := range fos {
		med, mx := f.summary()
		fmt.Fprintf(w, "  failover %-24s median %v, max %v over %d trials (%d failed)\n", f.label(), med.Round(time.Millisecond), mx.Round(time.Millisecond), len(f.Trials), len(f.Errors))
	}
	for _, t := range failoverTargetsMet(fos) {
		fmt.Fprintf(w, "  failover target, %s\n", strings.ReplaceAll(t, "**", ""))
	}
}
