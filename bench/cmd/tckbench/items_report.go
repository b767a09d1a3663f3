package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The report's parts for the agent, clock-failover and tightness sections.

// clockTarget is item 5's target: clock-failure failover median ≤ 0.5 s.
const clockTarget = 500 * time.Millisecond

// clockRow is the clock-failover result as a row of the failover table.
func (r itemResults) clockRow() []failoverResult {
	if r.Clock == nil {
		return nil
	}
	return []failoverResult{r.Clock.failoverResult}
}

func medianMax(ds []time.Duration) (time.Duration, time.Duration) {
	return failoverResult{Trials: ds}.summary()
}

func writeClockFailover(w io.Writer, r itemResults, fos []failoverResult) {
	c := r.Clock
	if c == nil {
		return
	}
	med, _ := c.summary()
	dmed, dmax := medianMax(c.Detect)
	fmt.Fprintf(w, "\nClock FAILED: a fresh 3-node cluster per trial (a FAILED node never comes back), each node reaching one `tckclk-agent --dev` through a relay of its own in the bench; the leader's relay starts shifting the reference by %v (re-signed with the dev key, as an agent whose reference stepped), the leader fails with `offset` at its next sample, hands leadership to a healthy voter and shuts Raft down. Time from the first lying answer written to the leader to the first successful Grant+Release through the survivors (probes start once the old leader shows FAILED, timed from the lie). Clock probes every 1 s (%s). Detection (the switch to the first lying answer, up to one probe interval, not in the figure): median %v, max %v. Reasons seen: %s.\n\n",
		lieOffset, joinFlags(clockFailoverFlags), dmed.Round(time.Millisecond), dmax.Round(time.Millisecond), countWords(c.Reasons))
	if len(c.Trials) > 0 {
		fmt.Fprintf(w, "Target (clock-failure failover ≤ %v median): %s (%v).", clockTarget, met(med <= clockTarget), med.Round(time.Millisecond))
		for _, f := range fos {
			if km, _ := f.summary(); km > 0 {
				fmt.Fprintf(w, " Against %s: %.2f× its median.", f.label(), float64(med)/float64(km))
			}
		}
		fmt.Fprintln(w)
	}
	for _, e := range c.Errors {
		fmt.Fprintf(w, "\n- failed %s", e)
	}
	if len(c.Errors) > 0 {
		fmt.Fprintln(w)
	}
}

func joinFlags(f []string) string { return fmt.Sprintf("`%s`", joinSpace(f)) }

func joinSpace(f []string) string {
	s := ""
	for i, x := range f {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}

// countWords is "offset ×3, bound ×1" for the words in order of first appearance.
func countWords(ws []string) string {
	var order []string
	n := map[string]int{}
	for _, x := range ws {
		if n[x] == 0 {
			order = append(order, x)
		}
		n[x]++
	}
	s := ""
	for i, x := range order {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s ×%d", x, n[x])
	}
	if s == "" {
		return "none"
	}
	return s
}

func writeItems(w io.Writer, dir, base string, r itemResults) error {
	if a := r.Agent; a != nil {
		fmt.Fprintf(w, "## The agent against its floor (item 4)\n\n")
		fmt.Fprintf(w, "`tckclk-agent --dev` (the real binary) against a bare one-line TCP server (this binary as a separate process: reads to the first LF, answers one fixed pre-signed line, closes). Closed-loop clients, each exchange a full TCKCLK/2 one: connect, request, read the line, EOF, parse, verify the MAC (the bare line's fixed nonce is not compared), close. %d alternating rounds × %s per target per client count, pooled. Targets: agent ≥ %.1f× the bare throughput, p99 ≤ %.1f×.\n\n", a.Rounds, a.Duration, floorThroughput, floorP99)
		fmt.Fprintf(w, "| clients | agent exch/s | bare exch/s | throughput | agent p50 ms | bare p50 ms | agent p99 ms | bare p99 ms | p99 | errors (agent/bare) | target |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range a.Rows {
			tp, p99 := floorMet(x)
			fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2f× | %.2f | %.2f | %.2f | %.2f | %.2f× | %d/%d | throughput %s, p99 %s |\n", x.Clients,
				x.Agent.CyclesPerS, x.Bare.CyclesPerS, ratio(x.Agent.CyclesPerS, x.Bare.CyclesPerS), x.Agent.P50Ms, x.Bare.P50Ms,
				x.Agent.P99Ms, x.Bare.P99Ms, ratio(x.Agent.P99Ms, x.Bare.P99Ms), x.Agent.Errors, x.Bare.Errors, met(tp), met(p99))
		}
		fmt.Fprintln(w)
		name := base + "-agent.png"
		if err := plotAgentFloor(filepath.Join(dir, name), a); err != nil {
			fmt.Fprintf(w, "(No plot: %v.)\n\n", err)
		} else {
			fmt.Fprintf(w, "![%s](%s)\n\n", name, name)
		}
	}
	if t := r.Tightness; t != nil {
		fmt.Fprintf(w, "## Clock-bound tightness (item 7)\n\n")
		fmt.Fprintf(w, "chronyd -x serving its local clock (`local stratum 8`) as NTP on a loopback port, a second chronyd -x syncing from it every second (%s), `tckclk-agent --chrony` reading the second one's tracking, a 3-node ticketd cluster on that agent (no dev reference; %s). Every %s for %s: each node's running bound (/v1/status `clock.bound_ms`), its last sample's RTT (`clock_sample_rtt_ms`), and chrony's root distance from `chronyc tracking` (root delay / 2 + root dispersion). Target per sample: bound ≤ root distance + RTT + 2 ms.\n\n",
			t.Chrony, joinFlags(tightClockFlags), t.Every, t.Duration)
		fmt.Fprintf(w, "| node | samples | target met | median bound ms | max bound ms | median RTT ms | median agent uncertainty ms | median root distance ms | median root distance + RTT + 2 ms |\n|---|---|---|---|---|---|---|---|---|\n")
		nodes := 0
		if len(t.Samples) > 0 {
			nodes = len(t.Samples[0].BoundMs)
		}
		for i := range nodes {
			s := summarizeTightness(t, i)
			fmt.Fprintf(w, "| %d | %d | %d (%.0f%%) | %s | %s | %s | %s | %s | %s |\n", i+1, s.Measured, s.Met, 100*ratio(float64(s.Met), float64(s.Measured)),
				num(s.MedianBound), num(s.MaxBound), num(s.MedianRTT), num(s.MedianUnc), num3(s.MedianRD), num3(s.MedianTarget))
		}
		if unc := agentUncertainty(t); unc != "" {
			fmt.Fprintf(w, "\nThe agent's own uncertainty over the run: %s.\n", unc)
		}
		fmt.Fprintf(w, "\nRunning bound over all nodes' samples: %s.\n", boundHistogram(t))
		writeTightTerms(w, t)
		fmt.Fprintln(w)
		name := base + "-tightness.png"
		if err := plotTightness(filepath.Join(dir, name), t); err != nil {
			fmt.Fprintf(w, "(No plot: %v.)\n\n", err)
		} else {
			fmt.Fprintf(w, "![%s](%s)\n\n", name, name)
		}
	}
	writeScaleSection(w, dir, base, r.Scale)
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "- %s\n\n", s)
	}
	return nil
}

// boundHistogram is the median of the running bounds sampled and their
// histogram (histogramText).
func boundHistogram(t *tightnessResult) string {
	h := map[uint64]int{}
	for _, x := range t.Samples {
		for _, b := range x.BoundMs {
			if b >= 0 {
				h[uint64(b)]++
			}
		}
	}
	if len(h) == 0 {
		return "none measured"
	}
	return histogramText(h, true)
}

// histogramText is "median M ms of N: A ms x%, …" of whole-ms counts
// (upper median), the buckets listed until 95 % of the counts are, the
// rest summed up to the largest.
func histogramText(h map[uint64]int, bold bool) string {
	keys := slices.Sorted(maps.Keys(h))
	total := 0
	for _, k := range keys {
		total += h[k]
	}
	var parts []string
	median, seen := uint64(0), 0
	for _, k := range keys {
		if seen <= total/2 && seen+h[k] > total/2 {
			median = k
		}
		if 100*seen < 95*total {
			parts = append(parts, fmt.Sprintf("%d ms %.1f%%", k, 100*float64(h[k])/float64(total)))
		}
		seen += h[k]
	}
	if len(parts) < len(keys) {
		rest := 0
		for _, k := range keys[len(parts):] {
			rest += h[k]
		}
		parts = append(parts, fmt.Sprintf("%.1f%% above, up to %d ms", 100*float64(rest)/float64(total), keys[len(keys)-1]))
	}
	m := fmt.Sprintf("median %d ms", median)
	if bold {
		m = "median **" + fmt.Sprint(median) + " ms**"
	}
	return fmt.Sprintf("%s of %d (%s)", m, total, strings.Join(parts, ", "))
}

// writeTightTerms breaks each node's kept samples into SPEC §3.1's terms
// (from the nodes' debug logs): e_ns = rtt + u + |w1 − R| + 1 ms, summed in
// ns and rounded up once; the running bound adds |Δwall − Δmono| and drift
// since the sample, rounded up once more at each evaluation.
func writeTightTerms(w io.Writer, t *tightnessResult) {
	if len(t.Terms) == 0 {
		return
	}
	q := func(x quantiles) string {
		return fmt.Sprintf("%.3f (%.3f–%.3f, max %.3f)", x.P50, x.P10, x.P90, x.Max)
	}
	fmt.Fprintf(w, "\nEach kept sample's terms (SPEC §3.1), ms, median (p10–p90, max), from the nodes' debug lines: e = rtt + u + |w1 − R| + 1 ms (R's truncation), summed in ns and rounded up once to the error bound; the running bound then adds drift (max_drift_ppm 500: ≤ 0.5 ms a second) and any wall step since the sample, rounded up once per evaluation.\n\n")
	fmt.Fprintf(w, "| node | kept samples | rtt | u | \\|w1 − R\\| | + truncation | e (sum) | error bound (ceil once) | each term rounded up (before) |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, x := range t.Terms {
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | 1 | %s | %s | %s |\n", i+1, x.Kept, q(x.RTTMs), q(x.UncMs), q(x.OffsetMs), q(x.EMs),
			histogramText(x.ErrorBound, false), histogramText(x.PerTerm, false))
	}
	fmt.Fprintf(w, "\nRounded term by term, the running bound also added ceil(drift) — a whole ms as soon as a ns had passed since the sample — so it sat at least 1 ms above that last column between samples.\n")
}

func num(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}

// num3 is num to the µs (chrony's root distance on loopback is µs).
func num3(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.3f", x)
}

// agentUncertainty is "min–max ms (median M)" of the agent's uncertainty.
func agentUncertainty(t *tightnessResult) string {
	var u []float64
	for _, s := range t.Samples {
		if s.AgentUncMs > 0 {
			u = append(u, float64(s.AgentUncMs))
		}
	}
	if len(u) == 0 {
		return ""
	}
	slices.Sort(u)
	return fmt.Sprintf("%.0f–%.0f ms (median %.0f)", u[0], u[len(u)-1], u[len(u)/2])
}

// savePlot draws p, legend top right, recovering gonum/plot's panics on
// degenerate axes.
func savePlot(p *plot.Plot, path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %v", r)
		}
	}()
	p.Legend.Top = true
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

func plotAgentFloor(path string, a *agentFloor) error {
	p := plot.New()
	p.Title.Text = "Agent vs bare TCP server: exchanges/s (left axis values) and p99"
	p.X.Label.Text = "concurrent clients"
	p.Y.Label.Text = "ratio agent / bare"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var tput, p99, one09, one12 plotter.XYs
	for _, x := range a.Rows {
		c := float64(x.Clients)
		tput = append(tput, plotter.XY{X: c, Y: ratio(x.Agent.CyclesPerS, x.Bare.CyclesPerS)})
		p99 = append(p99, plotter.XY{X: c, Y: ratio(x.Agent.P99Ms, x.Bare.P99Ms)})
		one09 = append(one09, plotter.XY{X: c, Y: floorThroughput})
		one12 = append(one12, plotter.XY{X: c, Y: floorP99})
	}
	if len(tput) == 1 {
		p.X.Min, p.X.Max = tput[0].X/2, tput[0].X*2
	}
	p.Title.Text = "Agent / bare TCP server, same run"
	if err := plotutil.AddLinePoints(p, "throughput ratio", tput, "p99 ratio", p99, "throughput target ≥ 0.9", one09, "p99 target ≤ 1.2", one12); err != nil {
		return err
	}
	return savePlot(p, path)
}

func plotTightness(path string, t *tightnessResult) error {
	p := plot.New()
	p.Title.Text = "Node running bound vs chrony's root distance"
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	pos := func(v float64) float64 { return max(v, 0.001) } // the log axis: a µs floor
	var lines []any
	nodes := 0
	if len(t.Samples) > 0 {
		nodes = len(t.Samples[0].BoundMs)
	}
	for i := range nodes {
		var b plotter.XYs
		for _, s := range t.Samples {
			if s.BoundMs[i] >= 0 {
				b = append(b, plotter.XY{X: s.At, Y: pos(s.BoundMs[i])})
			}
		}
		if len(b) > 0 {
			lines = append(lines, fmt.Sprintf("node %d bound", i+1), b)
		}
	}
	var rd, tgt plotter.XYs
	for _, s := range t.Samples {
		rd = append(rd, plotter.XY{X: s.At, Y: pos(s.RootDistMs)})
		if len(s.RTTMs) > 0 && s.RTTMs[0] >= 0 {
			tgt = append(tgt, plotter.XY{X: s.At, Y: pos(s.RootDistMs + s.RTTMs[0] + 2)})
		}
	}
	lines = append(lines, "chrony root distance", rd)
	if len(tgt) > 0 {
		lines = append(lines, "target: root distance + RTT (node 1) + 2", tgt)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return err
	}
	return savePlot(p, path)
}

func printItems(w io.Writer, r itemResults) {
	if r.Scale != nil {
		defer printScale(w, r.Scale.Results)
	}
	if a := r.Agent; a != nil {
		for _, x := range a.Rows {
			tp, p99 := floorMet(x)
			fmt.Fprintf(w, "  agent vs bare %3d clients: throughput %.2f× (%.0f vs %.0f/s)  p99 %.2f× (%.2f vs %.2f ms)  [target throughput %s, p99 %s]\n",
				x.Clients, ratio(x.Agent.CyclesPerS, x.Bare.CyclesPerS), x.Agent.CyclesPerS, x.Bare.CyclesPerS,
				ratio(x.Agent.P99Ms, x.Bare.P99Ms), x.Agent.P99Ms, x.Bare.P99Ms, trimMet(tp), trimMet(p99))
		}
	}
	if c := r.Clock; c != nil {
		med, mx := c.summary()
		fmt.Fprintf(w, "  failover ticketd ×3 clock FAILED → first grant on the new leader: median %v, max %v over %d trials (%d failed)  [target ≤ %v median %s]\n",
			med.Round(time.Millisecond), mx.Round(time.Millisecond), len(c.Trials), len(c.Errors), clockTarget, trimMet(len(c.Trials) > 0 && med <= clockTarget))
	}
	if t := r.Tightness; t != nil && len(t.Samples) > 0 {
		for i := range len(t.Samples[0].BoundMs) {
			s := summarizeTightness(t, i)
			fmt.Fprintf(w, "  tightness node %d: bound ≤ root distance + RTT + 2 ms in %d of %d samples; median bound %s ms vs median target %s ms (root distance %s ms)\n",
				i+1, s.Met, s.Measured, num(s.MedianBound), num3(s.MedianTarget), num3(s.MedianRD))
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "  %s\n", s)
	}
}

func trimMet(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
