package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/safety"
	"github.com/tckclk/tckclk/safety/workload"
)

// CPU starvation as a container limit makes it (issue 24 item 6): the
// three ticketd processes share a cgroup v1 `cpu` group throttled to
// 10 ms per 250 ms period — stalls of up to ~240 ms, as a Kubernetes CPU
// limit throttles — while `stress-ng --cpu 2` keeps both cores busy.

const (
	cgroupCPURoot = "/sys/fs/cgroup/cpu"
	cgroupPrefix  = "tckclk-starve-"
	starvePeriod  = 250000 // cpu.cfs_period_us
	starveQuota   = 10000  // cpu.cfs_quota_us: 10 ms of CPU per period for the whole group
	starveLength  = 40 * time.Second
	comeBackLimit = 90 * time.Second // every NAME serving again, the cluster healthy
)

// starveRounds is how many times TestStarvedClusterComesBack starves the
// cluster: TCKCLK_STARVE_ROUNDS, default 2.
func starveRounds(t *testing.T) int {
	s := os.Getenv("TCKCLK_STARVE_ROUNDS")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("TCKCLK_STARVE_ROUNDS %q: want a whole number ≥ 1", s)
	}
	return n
}

// starveDeltaMs is the nodes' Δ in TestStarvedClusterComesBack:
// TCKCLK_STARVE_DELTA_MS, default 1200. The quota stalls a node for up to
// ~240 ms at a time. A stall between the answer's arrival and the node's
// read no longer counts (the kernel's receive timestamp is w1), but one
// between w0 (before connecting, SPEC §3.1) and the request going out
// still does, and the dev agent shares the two cores with stress-ng: at
// ticketd's default Δ of 500 (max_rtt_ms 125) whole bursts are still slow
// now and then, two or three voters FAIL within a round and no quorum is
// left for their next generations (measured, docs/testing.md). At 1200 the
// bound tolerates the stalls, which is what an operator who runs nodes
// under such CPU limits must configure.
func starveDeltaMs(t *testing.T) uint64 {
	s := os.Getenv("TCKCLK_STARVE_DELTA_MS")
	if s == "" {
		return 1200
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < 2 || n > 60000 {
		t.Fatalf("TCKCLK_STARVE_DELTA_MS %q: want 2..=60000", s)
	}
	return n
}

// cpuGroup is a child of the cgroup v1 cpu hierarchy, removed at cleanup
// (its processes gone by then; any left are moved back to the root).
type cpuGroup struct {
	t   *testing.T
	dir string
}

var cpuGroupSeq atomic.Int32

// newCPUGroup makes the group (no quota yet), or skips the test where it
// cannot: not root, or no cgroup v1 cpu hierarchy with CFS quotas.
func newCPUGroup(t *testing.T) *cpuGroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a cgroup's CPU quota needs root (CI runs the tests as root)")
	}
	if _, err := os.Stat(filepath.Join(cgroupCPURoot, "cpu.cfs_quota_us")); err != nil {
		t.Skipf("no cgroup v1 cpu hierarchy with CFS quotas at %s: %v", cgroupCPURoot, err)
	}
	// What a killed test binary left behind: empty groups go, others stay.
	old, _ := filepath.Glob(filepath.Join(cgroupCPURoot, cgroupPrefix+"*"))
	for _, d := range old {
		syscall.Rmdir(d)
	}
	g := &cpuGroup{t: t, dir: filepath.Join(cgroupCPURoot, fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), cpuGroupSeq.Add(1)))}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		t.Skipf("cannot create a cpu cgroup: %v", err)
	}
	t.Cleanup(g.remove)
	g.write("cpu.cfs_period_us", starvePeriod)
	g.write("cpu.cfs_quota_us", -1)
	return g
}

func (g *cpuGroup) write(file string, v int) {
	g.t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(strconv.Itoa(v)), 0o644); err != nil {
		g.t.Fatalf("cgroup %s: %v", file, err)
	}
}

// limit sets the group's quota (µs per period; -1: none).
func (g *cpuGroup) limit(quotaUs int) { g.write("cpu.cfs_quota_us", quotaUs) }

// wrap is the command prefix that puts a process in the group before it
// execs the command (its restarts too: each is started through it).
func (g *cpuGroup) wrap() []string {
	return []string{"/bin/sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", filepath.Join(g.dir, "cgroup.procs")}
}

// stat is the group's cpu.stat (nr_periods, nr_throttled, throttled_time).
func (g *cpuGroup) stat() map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

// remove moves whatever is left to the root group and removes the group.
func (g *cpuGroup) remove() {
	var err error
	for range 50 {
		b, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		for pid := range strings.FieldsSeq(string(b)) {
			os.WriteFile(filepath.Join(cgroupCPURoot, "cgroup.procs"), []byte(pid), 0o644)
		}
		if err = syscall.Rmdir(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond) // a process still exiting
	}
	g.t.Errorf("cgroup %s not removed: %v", g.dir, err)
}

// stressNG runs `stress-ng --cpu 2` in its own process group until stop.
type stressNG struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startStress(t *testing.T, bin string) *stressNG {
	t.Helper()
	cmd := exec.Command(bin, "--cpu", "2", "--timeout", "600s", "--quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("stress-ng: %v", err)
	}
	s := &stressNG{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	return s
}

// stop ends stress-ng and its workers (its process group, which it is the
// leader of).
func (s *stressNG) stop() {
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	syscall.Kill(-pgid, syscall.SIGKILL) // workers that outlived it; ESRCH when none
	<-s.done
}

// phase is a stretch of the run whose clock exchanges are reported apart.
type phase struct {
	name       string
	start, end time.Time
}

// exchangeStats are one node's clock exchanges in a phase, from its log
// (debug: every kept sample's rtt; info: every slow or unreachable one).
type exchangeStats struct {
	kept, slow, unreachable int
	worstMs                 float64 // the slowest exchange that completed
	failed                  []string
	split                   exchangeSplit
}

// clockLogLine is the part of a clock-health log record read here.
type clockLogLine struct {
	Time   time.Time `json:"time"`
	Msg    string    `json:"msg"`
	RTTNs  int64     `json:"rtt_ns"`
	RTTMs  int64     `json:"rtt_ms"`
	Reason string    `json:"reason"`
	// "clock health: exchange timing" (debug, with kernel receive
	// timestamps): where one exchange's time went, ns (-1: not measured).
	Rx        string `json:"rx"`
	RxWhy     string `json:"rx_why"`
	ConnectNs int64  `json:"connect_ns"`
	WriteNs   int64  `json:"write_ns"`
	ArriveNs  int64  `json:"arrive_ns"`
	ReadNs    int64  `json:"read_ns"`
	OffsetNs  int64  `json:"offset_ns"`
}

// exchangeSplit gathers the "exchange timing" lines of a phase: w0 → the
// connection established (connect) → the request written (write) → the
// answer's LF arrived, by the kernel's receive timestamp, split at the
// agent's clock read R: before it (agent: accepting, reading the request)
// and after it (reply: |w1 − R|, which on this one host, where the dev
// agent's reference is the nodes' own clock, is R → the LF's arrival, + ≤ 1
// ms of R's truncation) → the node's read returned it (read).
type exchangeSplit struct {
	kernel, user, unmeasured int
	why                      map[string]int     // user stamps with kernel stamps on: why
	parts                    [5][]time.Duration // connect, write, agent, reply, read
}

var splitNames = [5]string{"connect", "write", "agent", "reply", "read"}

func (sp *exchangeSplit) add(rec clockLogLine) {
	switch rec.Rx {
	case "kernel":
		sp.kernel++
	case "user":
		sp.user++
		if rec.RxWhy != "" {
			if sp.why == nil {
				sp.why = map[string]int{}
			}
			sp.why[rec.RxWhy]++
		}
	}
	if rec.Rx != "kernel" { // no kernel stamp: the split is not known
		sp.unmeasured++
		return
	}
	reply := min(rec.OffsetNs, rec.ArriveNs)
	for i, ns := range [5]int64{rec.ConnectNs, rec.WriteNs, rec.ArriveNs - reply, reply, rec.ReadNs} {
		sp.parts[i] = append(sp.parts[i], time.Duration(ns))
	}
}

// String is, for each part, p50 / p90 / max and how many exchanges spent
// more than over in it.
func (sp *exchangeSplit) String(over time.Duration) string {
	out := fmt.Sprintf("rx kernel %d user %d %v (split unknown %d)", sp.kernel, sp.user, sp.why, sp.unmeasured)
	for i, ds := range sp.parts {
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		n := 0
		for _, d := range ds {
			if d > over {
				n++
			}
		}
		q := func(p float64) time.Duration {
			return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
		}
		out += fmt.Sprintf("; %s p50 %v p90 %v max %v, >%v in %d of %d", splitNames[i], q(0.5), q(0.9), ds[len(ds)-1].Round(100*time.Microsecond), over, n, len(ds))
	}
	return out
}

// exchangesIn tallies the clock exchanges of every run of s within ph.
func exchangesIn(s *supervised, ph phase) exchangeStats {
	var st exchangeStats
	for _, r := range s.history() {
		if r.p == nil {
			continue
		}
		r.p.mu.Lock()
		lines := slices.Clone(r.p.log)
		r.p.mu.Unlock()
		for _, l := range lines {
			var rec clockLogLine
			if json.Unmarshal([]byte(l), &rec) != nil || rec.Time.Before(ph.start) || !rec.Time.Before(ph.end) {
				continue
			}
			switch {
			case rec.Msg == "clock health: sample kept":
				st.kept++
				st.worstMs = max(st.worstMs, float64(rec.RTTNs)/1e6)
			case rec.Msg == "clock health: slow exchange":
				st.slow++
				st.worstMs = max(st.worstMs, float64(rec.RTTMs))
			case rec.Msg == "clock health: agent unreachable":
				st.unreachable++
			case rec.Msg == "clock health: exchange timing":
				st.split.add(rec)
			case strings.HasPrefix(rec.Msg, "clock health FAILED"):
				st.failed = append(st.failed, rec.Reason)
			}
		}
	}
	return st
}

// failedLine finds run r's "clock health FAILED" log line: its reason and
// time.
func failedLine(r *procRun) (string, time.Time, bool) {
	if r.p == nil {
		return "", time.Time{}, false
	}
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	for _, l := range r.p.log {
		var rec clockLogLine
		if json.Unmarshal([]byte(l), &rec) == nil && strings.HasPrefix(rec.Msg, "clock health FAILED") {
			return rec.Reason, rec.Time, true
		}
	}
	return "", time.Time{}, false
}

// SPEC §3.1, §3.3, §3.4, §3.5, §5 (issue 24 item 6): three cluster nodes
// at the default clock limits (Δ 500 ms: max_rtt_ms 125, a burst of 3,
// probe timeout 500 ms, stale after 3 s), each under a supervisor loop
// (status 1 restarted after 1 s, status 2 not), against a `tckclk-agent
// --dev` outside the starvation, under a grant/release load checked by
// safety/. Phases: calm; stress-ng alone (the nodes' group has no quota:
// what a busy machine does to the exchanges); then TCKCLK_STARVE_ROUNDS
// rounds (default 2) of starvation — the group's quota 10 ms per 250 ms
// and `stress-ng --cpu 2` for 40 s — each followed by relief. Nodes may
// fail closed when a whole burst is too slow; within 90 s of each
// starvation's end every NAME must serve again (its current generation
// ready), the cluster must be healthy with failure_tolerance 1 (GET
// /v1/cluster/health, or on a build without it three healthy voters that
// are the NAMEs' current NodeIds), and the checker must find no
// violation. The test logs the figures: ops checked, unknown outcomes,
// FAILED nodes and reasons, generations, exits with status 2, time back
// to healthy, and per phase the clock exchanges (kept, slow, unreachable,
// the slowest rtt).
//
// It needs root, a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu and
// stress-ng (Debian package; CI installs it), and skips with a message
// otherwise. The default run (two rounds, ≈ 2–3 minutes) runs only
// against a ticketd with cluster.auto_replace: without it a FAILED node
// never comes back. Longer: TCKCLK_STARVE_ROUNDS=10 go test -count=1 -v
// -timeout 60m -run TestStarvedClusterComesBack ./cmd/ticketd.
// TCKCLK_STARVE_DELTA_MS sets the nodes' Δ (at 500 a stall of ~240 ms
// after w0 and before the request is out, or an agent as slow, is past
// max_rtt_ms 125; see starveDeltaMs).
// Figures for another build (e.g. an older revision): TCKCLK_BIN_DIR=/dir holding
// its ticketd and tckclk-agent (the test then runs whatever they do).
func TestStarvedClusterComesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four real processes for minutes")
	}
	rounds, deltaMs := starveRounds(t), starveDeltaMs(t)
	stressBin, err := exec.LookPath("stress-ng")
	if err != nil {
		t.Skip("stress-ng not installed (Debian package stress-ng; CI installs it)")
	}
	bin := procBinary(t, "ticketd")
	if os.Getenv(binDirEnv) == "" && !hasConfigKey(t, bin, "auto_replace") {
		t.Skip("this ticketd has no cluster.auto_replace (SPEC §3.4): a node FAILED by the starvation would never come back; " +
			"run it anyway with TCKCLK_BIN_DIR=dir-of-the-build")
	}
	cg := newCPUGroup(t)
	runStart := time.Now()
	flags := []string{"--log.level", "debug", "--clock.delta_ms", strconv.FormatUint(deltaMs, 10)}
	if rounds > 2 && hasConfigKey(t, bin, "auto_replace_max") {
		// A long run may replace each node once a round, more than the
		// default 3 an hour (SPEC §3.4) allows.
		flags = append(flags, "--cluster.auto_replace_max", strconv.Itoa(rounds+1))
	}
	sc := startSuperCluster(t, cg.wrap(), flags...)
	t.Logf("cluster healthy %v after the start", time.Since(runStart).Round(time.Millisecond))

	h := safety.NewHistory(deltaMs)
	const clients = 8
	w, err := workload.New(workload.Config{Targets: []workload.Target{{Name: "cluster", Client: sc.client(t)}}, Clients: clients, Hot: 2, Cold: 16, Rotate: 20 * time.Second}, h)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(wctx) })
	defer func() { stopLoad(); wg.Wait() }()

	var phases []phase
	hold := func(name string, d time.Duration) {
		ph := phase{name: name, start: time.Now()}
		workload.Pause(context.Background(), d)
		ph.end = time.Now()
		phases = append(phases, ph)
	}
	hold("calm", 5*time.Second)
	stress := startStress(t, stressBin)
	h.Fault("stress_only")
	hold("stress-ng alone", 10*time.Second)
	stress.stop()

	type roundResult struct {
		back      time.Duration // -1: not back within comeBackLimit
		throttled int64
		stalledMs int64
	}
	var results []roundResult
	for i := range rounds {
		before := cg.stat()
		cg.limit(starveQuota)
		stress = startStress(t, stressBin)
		h.Fault("cpu_starvation")
		hold(fmt.Sprintf("starved %d", i+1), starveLength)
		stress.stop()
		cg.limit(-1)
		ended := time.Now()
		after := cg.stat()
		res := roundResult{throttled: after["nr_throttled"] - before["nr_throttled"],
			stalledMs: (after["throttled_time"] - before["throttled_time"]) / 1e6}
		ph := phase{name: fmt.Sprintf("relief %d", i+1), start: ended}
		if err := sc.waitHealthy(comeBackLimit, nil); err != nil {
			res.back = -1
			t.Errorf("round %d: %v", i+1, err)
		} else {
			res.back = time.Since(ended)
		}
		ph.end = time.Now()
		phases = append(phases, ph)
		results = append(results, res)
		t.Logf("round %d (starved from %v): %d of %d periods throttled, %d ms stalled in all; back to healthy after %v (-1: not)",
			i+1, ended.Add(-starveLength).Sub(runStart).Round(time.Second), res.throttled, after["nr_periods"]-before["nr_periods"], res.stalledMs, res.back.Round(time.Millisecond))
	}
	hold("after", 5*time.Second)
	stopLoad()
	wg.Wait()

	// The report, then the verdicts.
	res, err := safety.Check(h, safety.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %d clients sharing one multi-address client: %s", clients, res.Summary())
	for _, ph := range phases {
		var parts []string
		var split exchangeSplit
		for _, name := range clusterNames {
			st := exchangesIn(sc.nodes[name], ph)
			parts = append(parts, fmt.Sprintf("%s: kept %d slow %d unreachable %d worst rtt %.1f ms failed %v", name, st.kept, st.slow, st.unreachable, st.worstMs, st.failed))
			split.kernel, split.user, split.unmeasured = split.kernel+st.split.kernel, split.user+st.split.user, split.unmeasured+st.split.unmeasured
			for k, v := range st.split.why {
				if split.why == nil {
					split.why = map[string]int{}
				}
				split.why[k] += v
			}
			for i := range split.parts {
				split.parts[i] = append(split.parts[i], st.split.parts[i]...)
			}
		}
		t.Logf("phase %-16s %5.1fs  %s", ph.name, ph.end.Sub(ph.start).Seconds(), strings.Join(parts, "; "))
		// max_rtt_ms is Δ/4: a part longer than that alone makes an exchange slow.
		t.Logf("phase %-16s exchange split (all nodes): %s", ph.name, split.String(time.Duration(deltaMs/4)*time.Millisecond))
	}
	failed, replaced, exit2 := 0, 0, 0
	for _, name := range clusterNames {
		s := sc.nodes[name]
		ids := map[string]bool{}
		var lines []string
		for _, r := range s.history() {
			id := s.nodeIDOf(r)
			ids[id] = true
			line := fmt.Sprintf("%s started at %v", id, r.started.Sub(runStart).Round(time.Second))
			if reason, at, ok := failedLine(r); ok {
				failed++
				line += fmt.Sprintf(", FAILED (%s) at %v", reason, at.Sub(runStart).Round(time.Second))
			}
			select {
			case <-r.exited:
				line += fmt.Sprintf(", exit %d at %v", r.code, r.at.Sub(runStart).Round(time.Second))
				if r.code == 2 {
					exit2++
				}
			default:
				line += ", running"
			}
			lines = append(lines, line)
		}
		replaced += len(ids) - 1
		t.Logf("%s: %d processes, NodeIds %v:\n  %s", name, len(s.history()), slices.Sorted(maps.Keys(ids)), strings.Join(lines, "\n  "))
	}
	var backs []string
	for _, r := range results {
		if r.back < 0 {
			backs = append(backs, fmt.Sprintf("not within %v", comeBackLimit))
			continue
		}
		backs = append(backs, r.back.Round(time.Millisecond).String())
	}
	t.Logf("SUMMARY rounds %d: ops checked %d, unknown outcomes %d, violations %d, nodes FAILED %d, generations added %d, exits with 2: %d, back to healthy after each round: %s",
		rounds, res.Ops, res.Unknown, len(res.Violations), failed, replaced, exit2, strings.Join(backs, ", "))
	for _, v := range res.Violations {
		t.Errorf("violation: %v", v)
	}
	if exit2 > 0 {
		t.Errorf("%d exits with status 2 (not restarted by a supervisor)", exit2)
	}
	if res.Ops < 100 {
		t.Errorf("only %d ops checked", res.Ops)
	}
}
