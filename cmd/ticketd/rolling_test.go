package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/safety"
	"github.com/tckclk/tckclk/safety/workload"
)

// ctlBinary is this tree's ticketctl (a client: the same whatever
// TCKCLK_BIN_DIR runs on the server side).
func ctlBinary(t *testing.T) string { return builtCtl.path(t, "ticketctl", "../ticketctl") }

// upgradeRevision is the revision the upgrade's build of ticketd reports
// (--version), so the test can tell the two builds apart.
const upgradeRevision = "rolling-upgrade-build"

// upgradeBinary is the "new version" of the upgrade: this tree's ticketd
// built again with another revision in --version (-buildvcs=false,
// -ldflags -X). Under TCKCLK_BIN_DIR it is that dir's ticketd-upgrade,
// or else a copy of its ticketd (then marked false: the same revision).
func upgradeBinary(t *testing.T) (string, bool) {
	dir := os.Getenv(binDirEnv)
	if dir == "" {
		return builtUpgrade.path(t, "ticketd", "-buildvcs=false", "-ldflags", "-X github.com/tckclk/tckclk/internal/version.Revision="+upgradeRevision, "."), true
	}
	if p := filepath.Join(dir, "ticketd-upgrade"); fileExists(p) {
		return p, true
	}
	b, err := os.ReadFile(procBinary(t, "ticketd"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ticketd-upgrade")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p, false
}

// rollingClockFlags keep the clock out of the rolling restart's way on a
// shared host (the clock rules are tested at their defaults elsewhere, and
// under CPU starvation by TestStarvedClusterComesBack): Δ 12 s (limits 3 s),
// a probe every second with a 1 s exchange deadline, stale after 30 s.
var rollingClockFlags = []string{"--clock.delta_ms", "12000", "--clock.probe_interval_ms", "1000",
	"--clock.probe_timeout_ms", "1000", "--clock.staleness_ms", "30000"}

// rollingDown is how long each node stays stopped: longer than the 0.7 s
// after which a leader used to drop a cleanly stopped follower from the
// voters, as long as a package swap and a service restart may take.
const rollingDown = 2 * time.Second

// restartStep is one node's stop and start in a rolling pass.
type restartStep struct {
	name        string
	code        int           // SIGTERM's exit status
	stopAt      time.Time     // SIGTERM sent
	stopTook    time.Duration // SIGTERM to exit
	startAt     time.Time
	healthyTook time.Duration // start to the cluster's health
	lostVote    []string      // leader's voters seen while it was down, without it
}

// during says what step st was doing when an op was called (call, on
// the history clock of w), or "" when it was outside the step.
func (st restartStep) during(w *workload.Runner, call int64) string {
	switch {
	case call < w.At(st.stopAt):
		return ""
	case call < w.At(st.stopAt.Add(st.stopTook)):
		return st.name + " stopping"
	case call < w.At(st.startAt):
		return st.name + " down"
	case st.healthyTook == 0 || call < w.At(st.startAt.Add(st.healthyTook)):
		return st.name + " starting, before the cluster's health"
	}
	return ""
}

// rollingPass stops each node in turn with SIGTERM, keeps it down
// rollingDown while it watches the leader's voters, starts it again (on
// bin when set) and waits for the cluster's health before the next one:
// `ticketctl cluster health --wait 60s --voters 3` where both ends have
// it, else superCluster.waitHealthy. It returns the steps and the window
// the restarts took, and stops at the first node after which the cluster
// is not healthy (err).
func rollingPass(t *testing.T, sc *superCluster, bin string, useCtl bool) (steps []restartStep, from, to time.Time, err error) {
	t.Helper()
	from = time.Now()
	defer func() { to = time.Now() }()
	for _, name := range clusterNames {
		st := restartStep{name: name}
		id := sc.nodes[name].current()
		if id == nil {
			return steps, from, to, fmt.Errorf("%s is not running before its restart", name)
		}
		st.stopAt = time.Now()
		code, err := sc.nodes[name].stop(syscall.SIGTERM, 30*time.Second)
		if err != nil {
			return steps, from, to, err
		}
		st.code, st.stopTook = code, time.Since(st.stopAt)
		for end := time.Now().Add(rollingDown); time.Now().Before(end); {
			for _, other := range clusterNames {
				if other == name {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				ms, err := sc.cl[other].Members(ctx)
				cancel()
				if err != nil {
					continue
				}
				var voters []string
				leads := false
				for _, m := range ms.Members {
					if m.Suffrage == "voter" {
						voters = append(voters, m.ID)
					}
					leads = leads || m.Leader && m.ID != name
				}
				if leads && !slices.Contains(voters, sc.nodes[name].nodeIDOf(id)) && st.lostVote == nil {
					st.lostVote = voters
				}
			}
			time.Sleep(250 * time.Millisecond) // the voter watch's poll while the node is down
		}
		st.startAt = time.Now()
		sc.nodes[name].start(bin)
		steps = append(steps, st)
		if useCtl {
			cmd := exec.Command(ctlBinary(t), "--addr", sc.addrs(), "cluster", "health", "--wait", "60s", "--voters", "3")
			cmd.Env = childEnv()
			if out, err := cmd.CombinedOutput(); err != nil {
				return steps, from, to, fmt.Errorf("after restarting %s: ticketctl cluster health --wait 60s --voters 3: %v\n%s", name, err, out)
			}
		}
		if err := sc.waitHealthy(60*time.Second, nil); err != nil {
			return steps, from, to, fmt.Errorf("after restarting %s: %v", name, err)
		}
		steps[len(steps)-1].healthyTook = time.Since(st.startAt)
		t.Logf("%s: SIGTERM → exit %d in %v, down %v, healthy %v after its start", name, st.code, st.stopTook.Round(time.Millisecond), rollingDown, time.Since(st.startAt).Round(time.Millisecond))
	}
	return steps, from, to, nil
}

// latencies are the ms each op of h (not register writes) called within
// [from, to) took, sorted.
func latencies(h *safety.History, w *workload.Runner, from, to time.Time) []float64 {
	var out []float64
	lo, hi := w.At(from), w.At(to)
	for _, op := range h.Ops() {
		if op.Kind == safety.Write || op.Call < lo || op.Call >= hi {
			continue
		}
		out = append(out, float64(op.Return-op.Call)/1e6)
	}
	slices.Sort(out)
	return out
}

// quantile of sorted values (nearest rank); 0 for none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// appAnswers are the refusals a lock user expects as answers (SPEC §4.1):
// everything else a caller saw is an error surfaced to it.
var appAnswers = []string{"held", "not_found", "not_held", "wrong_holder", "wrong_token", "lease_over"}

// surfacedErrors are h's ops called within [from, to) whose caller got an
// error rather than an answer: an unknown outcome, or a refusal that is
// not one of appAnswers (503s, 429s, a failed dial). Ops that returned
// after cut (the test's end of the load, which cancels them) are not
// counted, nor failed reads (the workload does not record them). A grant
// whose repeat after a lost answer was refused is one of them (the
// client cannot know whether the lost send was applied): a graceful stop
// must lose no answer (the proposer waits for its entry's fate under the
// next leader, the stopping node answers what was forwarded to it).
func surfacedErrors(h *safety.History, w *workload.Runner, from, to, cut time.Time) []safety.Op {
	lo, hi, end := w.At(from), w.At(to), w.At(cut)
	var errs []safety.Op
	for _, op := range h.Ops() {
		if op.Kind == safety.Write || op.Call < lo || op.Call >= hi || op.Return >= end || op.Outcome == safety.OK {
			continue
		}
		if op.Outcome == safety.Refused && slices.Contains(appAnswers, op.Code) {
			continue
		}
		errs = append(errs, op)
	}
	return errs
}

// SPEC §5 (a graceful stop keeps its vote), §3.5 (a rolling restart
// waits on the cluster's health between nodes), §4.1 (a client of
// several addresses follows the cluster), §4 (issue 24 item 6): three
// supervised nodes under 64 clients sharing one multi-address Go client
// (a safety/ workload). Twice, each node in turn is stopped with SIGTERM
// (exit 0), kept down 2 s while the others' view of the voters is
// watched, started again on its data dir, and `ticketctl cluster health
// --wait 60s --voters 3` (or, on a build without it, three healthy voters
// from the leader's members) passes before the next: first a plain
// rolling restart, then an upgrade — the nodes come back on a second
// build of ticketd whose --version says another revision. Then: the
// checker finds no violation, no caller saw an error (only the answers
// of appAnswers), the stopped node stayed a voter while it was down, and
// the voters are the same three NodeIds as at the start. The test logs
// the latency of the ops before and during the restarts (p50, p99, max).
// Skips where this tree's Go client takes one address only.
// TCKCLK_BIN_DIR runs another build's ticketd and agent (for figures).
func TestRollingRestartAndUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four real processes")
	}
	if os.Getenv(binDirEnv) == "" && !hasConfigKey(t, binary(t, "ticketd"), "dead_voter_grace") {
		t.Skip("this ticketd has no cluster.raft.dead_voter_grace (SPEC §5): a voter stopped gracefully loses its vote; " +
			"run it anyway with TCKCLK_BIN_DIR=dir-of-the-build")
	}
	newBin, newRevision := upgradeBinary(t)
	sc := startSuperCluster(t, nil, rollingClockFlags...)
	startIDs := sc.look().voters
	if len(startIDs) != 3 {
		t.Fatalf("voters at the start: %v", startIDs)
	}
	ctlHelp, _ := exec.Command(ctlBinary(t), "--help").CombinedOutput()
	_, herr := sc.clusterHealth(clusterNames[0])
	useCtl := strings.Contains(string(ctlHelp), "cluster health") && herr == nil
	t.Logf("between restarts: %s", map[bool]string{true: "ticketctl cluster health --wait 60s --voters 3", false: "the members-based wait (no cluster health on this build: " + fmt.Sprint(herr) + ")"}[useCtl])

	h := safety.NewHistory(12000)
	const clients = 64
	w, err := workload.New(workload.Config{Targets: []workload.Target{{Name: "cluster", Client: sc.client(t)}}, Clients: clients, Hot: 8, Cold: 64,
		OpTimeout: 20 * time.Second, Rotate: 20 * time.Second}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	var loadTo time.Time // ops still running then end by the test's cancel, not an error of the cluster
	stop := func() {
		if loadTo.IsZero() {
			loadTo = time.Now()
		}
		cancel()
		wg.Wait()
	}
	defer stop()
	loadFrom := time.Now()
	// The baseline: 5 s of steady load after 3 s of warming up
	// (connections, the first Raft batches).
	workload.Pause(context.Background(), 3*time.Second)
	steadyFrom := time.Now()
	workload.Pause(context.Background(), 5*time.Second)

	type pass struct {
		name     string
		steps    []restartStep
		from, to time.Time
	}
	var passes []pass
	upgraded := false
	for _, bin := range []string{"", newBin} {
		name := map[bool]string{true: "restart", false: "upgrade"}[bin == ""]
		h.Fault("rolling_" + name)
		steps, from, to, err := rollingPass(t, sc, bin, useCtl)
		passes = append(passes, pass{name, steps, from, to})
		workload.Pause(context.Background(), 5*time.Second)
		if err != nil {
			t.Errorf("rolling %s: %v", name, err)
			break
		}
		upgraded = bin != ""
	}
	stop()

	res, err := safety.Check(h, safety.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clients, one multi-address client: %s", clients, res.Summary())
	base := latencies(h, w, steadyFrom, passes[0].from)
	t.Logf("before the restarts: %d ops, p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(base), quantile(base, 0.5), quantile(base, 0.99), quantile(base, 1))
	for _, p := range passes {
		lat := latencies(h, w, p.from, p.to)
		errs := surfacedErrors(h, w, p.from, p.to, loadTo)
		unknown := 0
		for _, op := range errs {
			if op.Outcome == safety.Unknown {
				unknown++
			}
		}
		t.Logf("during the rolling %s (%d nodes, %v): %d ops, p50 %.1f ms, p99 %.1f ms (%+.1f), max %.1f ms (%+.1f); errors surfaced to callers: %d (unknown outcomes: %d)",
			p.name, len(p.steps), p.to.Sub(p.from).Round(time.Millisecond), len(lat), quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 0.99)-quantile(base, 0.99),
			quantile(lat, 1), quantile(lat, 1)-quantile(base, 1), len(errs), unknown)
		for i, op := range errs {
			if i == 10 {
				t.Errorf("… %d more", len(errs)-10)
				break
			}
			at := "between nodes"
			for _, st := range p.steps {
				if d := st.during(w, op.Call); d != "" {
					at = d
				}
			}
			t.Errorf("rolling %s: an error surfaced to a caller (%s): %v", p.name, at, op)
		}
		for _, st := range p.steps {
			if st.code != 0 {
				t.Errorf("rolling %s: %s exited %d after SIGTERM, want 0", p.name, st.name, st.code)
			}
			if st.lostVote != nil {
				t.Errorf("rolling %s: SPEC §5: %s lost its vote while stopped gracefully (the leader's voters %v)", p.name, st.name, st.lostVote)
			}
		}
	}
	if all := surfacedErrors(h, w, loadFrom, loadTo, loadTo); len(all) > 0 {
		t.Errorf("%d errors surfaced to callers over the whole run", len(all))
	}
	for _, v := range res.Violations {
		t.Errorf("violation: %v", v)
	}
	if res.Ops < 1000 {
		t.Errorf("only %d ops checked", res.Ops)
	}
	end := sc.look()
	if !slices.Equal(end.voters, startIDs) {
		t.Errorf("voters after the restarts %v, at the start %v", end.voters, startIDs)
	}
	if !upgraded {
		return
	}
	// The upgrade: every node runs the second build, which says so.
	if out, err := exec.Command(newBin, "--version").Output(); newRevision && (err != nil || !strings.Contains(string(out), upgradeRevision)) {
		t.Errorf("%s --version: %q %v; want revision %s", newBin, out, err, upgradeRevision)
	}
	for _, name := range clusterNames {
		r := sc.nodes[name].current()
		if r == nil {
			t.Errorf("%s not running at the end", name)
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", r.p.cmd.Process.Pid))
		if err != nil || r.bin != newBin || filepath.Clean(exe) != filepath.Clean(newBin) {
			t.Errorf("%s runs %s (%v), want the upgrade's build %s", name, exe, err, newBin)
		}
	}
	if hv, err := sc.clusterHealth(clusterNames[0]); err == nil {
		for _, s := range hv.Servers {
			if s.Suffrage == "voter" && newRevision && s.Version != "" && !strings.Contains(s.Version, upgradeRevision) {
				t.Errorf("cluster health: voter %s reports version %q, want revision %s", s.ID, s.Version, upgradeRevision)
			}
		}
	}
}
