package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// scaleSection is the scale section's figures with what the report's
// text needs to describe the run (report.json keeps it for -render).
type scaleSection struct {
	Clients      int           `json:"clients"`
	Batch        int           `json:"batch"`
	LeaseS       int           `json:"lease_s,omitempty"` // 0: scaleLease (runs before -scale-lease)
	Keep         bool          `json:"keep,omitempty"`    // the keeper renewed the fill's tickets
	TicketdFlags []string      `json:"ticketd_flags,omitempty"`
	Repo         string        `json:"repo"`
	Results      []scaleResult `json:"results"`
}

func writeScaleSection(w io.Writer, dir, base string, sec *scaleSection) {
	if sec == nil || len(sec.Results) == 0 {
		return
	}
	sc := sec.Results
	fmt.Fprintf(w, "## Scale: active tickets (3 nodes)\n\n")
	how := "one Grant request per ticket"
	if sec.Batch > 0 {
		how = fmt.Sprintf("%d grants per `POST /v1/batch` request (each op its own Raft entry, as its single request)", sec.Batch)
	}
	lease := sec.LeaseS
	if lease == 0 {
		lease = scaleLease
	}
	active := fmt.Sprintf("Active: the leader's `tickets_active` after the fill and after the last measurement, with the age of the first grant then (lease %d s + Δ: under %d s no ticket can have expired).", lease, lease)
	if sec.Keep {
		active = fmt.Sprintf("Active: the leader's `tickets_active` after the fill and after the last measurement, with the age of the first grant then. From the fill's start to the last measurement a keeper renews, through `POST /v1/batch` (%d ops each), every ticket whose lease is two thirds over, oldest first: a fill longer than a lease still ends with every ticket active; keeping N tickets takes N / %d renewals a second beside the fill, and the renewals that fail or come too late are counted in the note.", sec.Batch, lease)
	}
	fmt.Fprintf(w, "Per ticket count a fresh 3-node ticketd cluster (agent and clock flags as above) is filled through the leader's HTTP API by %d concurrent clients, %s (lease %d s, every grant a Raft entry, distinct names), then measured while every ticket is still active. "+
		"RSS: /proc/PID/status after the fill (peak = VmHWM). Snapshot: `POST /v1/cluster/snapshot` on the leader (size of the snapshot file, time of Raft's snapshot: the FSM copy and the encoding, written and fsynced). "+
		"Restore: the leader, right after that snapshot, is stopped with SIGTERM (it hands leadership off) and started again; the time its `restored snapshot` log line reports (read, CRC-64 and CRC-32C verified, decoded, state built), and from its start to `/readyz` 200 as a follower. "+
		"Catch-up: the leader of the moment snapshots (its log keeps only `trailing_logs` entries), then a fourth NodeId, trusted by all, starts with an empty data dir (`bootstrap_expect 0`); the leader's reconciler adds it, Raft sends it the snapshot and the log after it; the time from its start until its applied index reaches the leader's (taken at its start), with the index of the snapshot it installed (0: none, the log sufficed). "+
		"%s\n\n", sec.Clients, how, lease, active)
	if len(sec.TicketdFlags) > 0 {
		fmt.Fprintf(w, "Extra ticketd flags: `%s`.\n\n", strings.Join(sec.TicketdFlags, " "))
	}
	fmt.Fprintf(w, "ticketd built from %s.\n\n", sec.Repo)
	fmt.Fprintf(w, "Targets at 5M tickets: leader RSS ≤ 2 GiB, snapshot and restore ≤ 10 s each, a new node caught up ≤ 30 s.")
	fmt.Fprintf(w, " Larger counts: [scale.md](scale.md) (`go run ./cmd/tckbench -sections scale -scale 5000000 -scale-batch 256 -scale-clients 16 -out scale.md`, docs/testing.md); the in-process figures and the snapshot encoder's before/after: [findings.md](findings.md).")
	fmt.Fprintf(w, "\n\n")
	fmt.Fprintf(w, "| tickets | fill (grants/s) | active after fill / at end (first grant's age) | leader RSS MiB (anon, peak) | followers' RSS MiB | snapshot | snapshot time | restore: tickets, time (restart → ready) | catch-up (snapshot index; RSS MiB) | note |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range sc {
		var fol []string
		for _, f := range r.Followers {
			fol = append(fol, fmt.Sprintf("%.0f", f.RSS))
		}
		note := strings.TrimSpace(r.Error + " " + r.Note)
		if r.Renewals > 0 {
			note = strings.TrimSpace(fmt.Sprintf("keeper: %d renewals %s", r.Renewals, note))
		}
		if r.FillErrors > 0 {
			note = strings.TrimSpace(fmt.Sprintf("%d fill errors (first: %s) %s", r.FillErrors, r.FirstError, note))
		}
		fmt.Fprintf(w, "| %d | %.0f s (%.0f/s) | %d / %d (%.0f s) | %.0f (%.0f, %.0f) | %s | %.1f MB | %.2f s | %d, %.2f s (%.2f s) | %.2f s (%d; %.0f) | %s |\n",
			r.Tickets, r.FillSeconds, r.GrantsPerS, r.ActiveAfter, r.ActiveEnd, r.FirstGrantAgeS, r.Leader.RSS, r.Leader.Anon, r.Leader.HWM,
			strings.Join(fol, ", "), float64(r.SnapshotBytes)/1e6, float64(r.SnapshotMs)/1000, r.RestoredTickets, float64(r.RestoreMs)/1000, float64(r.RestartReadyMs)/1000,
			float64(r.CatchUpMs)/1000, r.CatchUpSnap, r.CatchUpRSS.RSS, oneLine(note))
	}
	fmt.Fprintf(w, "\n")
	name, err := writeScalePlot(dir, base, sc)
	switch {
	case err != nil:
		fmt.Fprintf(w, "(No scale plot: %v.)\n\n", err)
	case name != "":
		fmt.Fprintf(w, "![%s](%s)\n\n", name, name)
	}
}

// writeScalePlot draws each scale figure against the ticket count, one
// panel each (log-log), in one PNG.
func writeScalePlot(dir, base string, sc []scaleResult) (name string, err error) {
	defer func() { // gonum/plot panics on some degenerate axes
		if r := recover(); r != nil {
			name, err = "", fmt.Errorf("plot: %v", r)
		}
	}()
	var ok []scaleResult
	for _, r := range sc {
		if r.Error == "" {
			ok = append(ok, r)
		}
	}
	if len(ok) < 2 {
		return "", nil // one point shows no growth
	}
	panels := []struct {
		title, y string
		lines    []string
		f        []func(scaleResult) float64
	}{
		{"Memory", "MiB", []string{"leader RSS", "leader anon", "new node RSS"}, []func(scaleResult) float64{
			func(r scaleResult) float64 { return r.Leader.RSS }, func(r scaleResult) float64 { return r.Leader.Anon }, func(r scaleResult) float64 { return r.CatchUpRSS.RSS }}},
		{"Snapshot size", "MB", []string{"snapshot"}, []func(scaleResult) float64{
			func(r scaleResult) float64 { return float64(r.SnapshotBytes) / 1e6 }}},
		{"Snapshot and restore", "seconds", []string{"snapshot", "restore", "restart to ready"}, []func(scaleResult) float64{
			func(r scaleResult) float64 { return float64(r.SnapshotMs) / 1000 }, func(r scaleResult) float64 { return float64(r.RestoreMs) / 1000 },
			func(r scaleResult) float64 { return float64(r.RestartReadyMs) / 1000 }}},
		{"New node catch-up", "seconds", []string{"catch-up"}, []func(scaleResult) float64{
			func(r scaleResult) float64 { return float64(r.CatchUpMs) / 1000 }}},
	}
	img := vgimg.New(12*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "active tickets"
		p.Y.Label.Text = pn.y
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
		var lines []any
		for j, label := range pn.lines {
			var xy plotter.XYs
			for _, r := range ok {
				if y := pn.f[j](r); y > 0 {
					xy = append(xy, plotter.XY{X: float64(r.ActiveAfter), Y: y})
				}
			}
			if len(xy) > 0 {
				lines = append(lines, label, xy)
			}
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return "", err
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Draw(tiles.At(dc, i%2, i/2))
	}
	name = base + "-scale.png"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return "", err
	}
	return name, nil
}

// oneLine is s for a table cell: one line, no "|", at most 400 runes.
func oneLine(s string) string {
	s = strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", "/")
	if r := []rune(s); len(r) > 400 {
		s = string(r[:400]) + "…"
	}
	return s
}

// logTicks marks 1, 2 and 5 × 10^k on a log axis (gonum's LogTicks
// labels powers of ten only: none on a range like 100k..1M).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: short(v)})
			}
		}
	}
	return ts
}

// short is 200k, 5M, 0.02.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func printScale(w io.Writer, sc []scaleResult) {
	for _, r := range sc {
		if r.Error != "" && r.SnapshotBytes == 0 {
			fmt.Fprintf(w, "  scale %8d tickets: %s\n", r.Tickets, r.Error)
			continue
		}
		fmt.Fprintf(w, "  scale %8d tickets (active %d): leader RSS %.0f MiB, snapshot %.1f MB in %.2f s, restore %.2f s, new node caught up in %.2f s%s\n",
			r.Tickets, r.ActiveEnd, r.Leader.RSS, float64(r.SnapshotBytes)/1e6, float64(r.SnapshotMs)/1000, float64(r.RestoreMs)/1000, float64(r.CatchUpMs)/1000,
			map[bool]string{true: "  [" + r.Note + "]", false: ""}[r.Note != ""])
	}
}
