package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/bench/internal/load"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-nodes", "2"}, {"-clients", "0"}, {"-clients", "a,b"}, {"-rounds", "0"}, {"-other-duration", "-1s"}, {"-only", "zookeeper"}, {"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("%v: no message", args)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 150, stime 50 ticks.
	s := "1234 (tick (d) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 8 0 100 1000 10\n"
	got, err := parseProcStat(s)
	if err != nil || got != 2.0 {
		t.Fatalf("parseProcStat = %v, %v; want 2 s", got, err)
	}
	if _, err := parseProcStat("1234 (x) S 1"); err == nil {
		t.Error("short stat line: no error")
	}
}

func TestParseMachineStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	s := "cpu  100 10 40 800 50 5 5 0 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
	busy, total, err := parseMachineStat(s)
	if err != nil || busy != 1.6 || total != 10.1 {
		t.Fatalf("parseMachineStat = %v, %v, %v; want 1.6, 10.1", busy, total, err)
	}
	if _, _, err := parseMachineStat("intr 1 2 3\n"); err == nil {
		t.Error("no cpu line: no error")
	}
}

func TestTargets(t *testing.T) {
	m := func(sys string, acquired int64, p99 float64) *measured {
		return &measured{Workload: "independent", System: sys, Nodes: 3, Result: load.Result{Clients: 64, Acquired: acquired, Seconds: 1, P99Ms: p99}}
	}
	p := pair{"independent", 64, 3, m("etcd", 1000, 10), m("ticketd", 2000, 6)}
	if tp, p99, ok := targetMet(p); !ok || !tp || !p99 {
		t.Errorf("2.0× and 0.6×: targetMet = %v %v %v, want met", tp, p99, ok)
	}
	p.tckd = m("ticketd", 1999, 6.1)
	if tp, p99, ok := targetMet(p); !ok || tp || p99 {
		t.Errorf("just under: targetMet = %v %v %v, want missed", tp, p99, ok)
	}
	p.tckd = m("ticketd", 2000, 6)
	p.tckd.Placement = "leader"
	if _, _, ok := targetMet(p); ok {
		t.Error("every client on the leader: the target does not apply")
	}
	p.tckd.Placement = "spread"
	p.clients = 16
	if _, _, ok := targetMet(p); ok {
		t.Error("16 clients: the target does not apply")
	}
}

func TestCPUUse(t *testing.T) {
	var u cpuUse
	u.add(cpuSample{procs: []float64{1, 2}, self: 1, busy: 10, total: 20}, cpuSample{procs: []float64{1.5, 3}, self: 1.25, busy: 11, total: 22})
	u.add(cpuSample{procs: []float64{0, 0}}, cpuSample{procs: []float64{0.5, 0}})
	if math.Abs(u.server()-2) > 1e-9 || u.Client != 0.25 || u.Busy != 1 || u.Total != 2 {
		t.Errorf("cpuUse = %+v (server %v)", u, u.server())
	}
	if !strings.Contains(met(false), "missed") {
		t.Error("met(false) does not say missed")
	}
}

// A real, short run against one ticketd (built from the repository):
// the report and its JSON hold completed cycles and CPU figures.
// runReport runs tckbench with args and -out in a temp dir; it returns
// the report's path, its text and its JSON.
func runReport(t *testing.T, args ...string) (out string, md string, js []byte) {
	t.Helper()
	out = filepath.Join(t.TempDir(), "r.md")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(args, "-out", out), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	js, err := os.ReadFile(strings.TrimSuffix(out, ".md") + ".json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, string(b), js
}

func TestRunTicketdOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts ticketd")
	}
	out, md, b := runReport(t, "-sections", "load", "-only", "ticketd", "-nodes", "1", "-clients", "1", "-contended-clients", "2",
		"-duration", "500ms", "-other-duration", "500ms", "-warmup", "100ms", "-rounds", "1")
	var rep struct {
		Results []measured `json:"results"`
		Meta    meta       `json:"meta"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, s := range rep.Meta.Steps {
		steps = append(steps, s.Name)
	}
	if got, want := strings.Join(steps, ", "), "build, load servers started (beside the build), load independent 1, load contended 2, load servers stopped"; got != want || rep.Meta.WallSeconds <= 0 {
		t.Errorf("steps %q (wall %v s), want %q", got, rep.Meta.WallSeconds, want)
	}
	if !strings.Contains(md, "- Wall time: ") {
		t.Errorf("report lacks the wall time line:\n%s", md)
	}
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want 4 (independent, contended; per-request and coalesced clients)", len(rep.Results))
	}
	for i, r := range rep.Results {
		want := []string{"ticketd ×1", "ticketd ×1 coalesced"}[i%2]
		if r.Target != want || r.Result.Cycles == 0 || r.Result.Errors != 0 || len(r.CPU.Procs) != 1 || r.CPU.Total <= 0 {
			t.Errorf("result %+v", r)
		}
	}
	// One client count: the log axis still gets a range (gonum panicked on 1..1).
	if _, err := os.Stat(strings.TrimSuffix(out, ".md") + "-throughput.png"); err != nil {
		t.Errorf("no throughput plot: %v", err)
	}
	if !strings.Contains(md, "| independent | 1 | ticketd ×1 |") || !strings.Contains(md, "| independent | 1 | ticketd ×1 coalesced |") {
		t.Errorf("report lacks the ticketd row:\n%s", md)
	}
}

func TestCountSyncs(t *testing.T) {
	out := `strace: Process 42 attached with 9 threads
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 90.00    0.900000         900      1000           fdatasync
 10.00    0.100000         400       250         3 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    1.000000         800      1250         3 total
`
	if n := countSyncs(out); n != 1250 {
		t.Errorf("countSyncs = %d, want 1250", n)
	}
	if n := countTotal(out + "\n"); n != 1250 {
		t.Errorf("countTotal = %d, want 1250", n)
	}
	if n := countSyncs("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"); n != 0 {
		t.Errorf("no table: countSyncs = %d, want 0", n)
	}
}

// -placement and the client modes give each 3-node cluster its targets:
// spread rows keep the plain label (the report's per-request figure),
// "on leader" rows are marked, and only the first may be a failover
// target; one node has no placement.
func TestVariants(t *testing.T) {
	o := options{placement: "both", ticketdClient: "both", coalesce: []int{2}}
	got := variants(o, &server{label: "ticketd ×3", system: "ticketd", nodes: 3})
	var labels []string
	for i, v := range got {
		labels = append(labels, fmt.Sprintf("%s/%s/%s/%v", v.label, v.system, v.placement, v.dup))
		if v.dup != (i > 0) {
			t.Errorf("%s: dup %v", v.label, v.dup)
		}
	}
	want := []string{"ticketd ×3/ticketd/spread/false", "ticketd ×3 coalesced/ticketd-coalesced/spread/true",
		"ticketd ×3 on leader/ticketd/leader/true", "ticketd ×3 on leader coalesced/ticketd-coalesced/leader/true"}
	if fmt.Sprint(labels) != fmt.Sprint(want) {
		t.Errorf("variants = %q, want %q", labels, want)
	}
	o.placement = "spread"
	if e := variants(o, &server{label: "etcd ×3", system: "etcd", nodes: 3}); len(e) != 1 || e[0].placement != "spread" {
		t.Errorf("etcd ×3 spread: %+v", e)
	}
	if one := variants(o, &server{label: "ticketd ×1", system: "ticketd", nodes: 1}); len(one) != 2 || one[0].placement != "" {
		t.Errorf("ticketd ×1: %+v", one)
	}
}
