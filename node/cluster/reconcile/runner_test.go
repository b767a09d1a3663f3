package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const testWait = 10 * time.Second

type runnerHarness struct {
	t      *testing.T
	fake   *fakeRaft
	clock  *manualClock
	r      *Runner
	reg    *prometheus.Registry
	passes chan struct{}
	done   chan error
	cancel context.CancelFunc
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// startRunner runs a Runner over fake until the test ends; mod adjusts the
// config first.
func startRunner(t *testing.T, fake *fakeRaft, mod func(*RunnerConfig)) *runnerHarness {
	t.Helper()
	h := &runnerHarness{t: t, fake: fake, clock: newManualClock(), reg: prometheus.NewRegistry(), passes: make(chan struct{}, 100), done: make(chan error, 1)}
	cfg := RunnerConfig{
		Raft: fake, LocalID: fake.leader, Members: fake.Members, Limits: fake.w.limits,
		Clock: h.clock, NewTimer: h.clock.NewTimer, Logger: testLogger(t), Registerer: h.reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.afterPass = func() { h.passes <- struct{}{} }
	h.r = r
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- r.Run(ctx) }()
	t.Cleanup(h.stop)
	h.waitTimer() // Run armed its first (debounce) timer
	return h
}

func (h *runnerHarness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		if !errors.Is(err, context.Canceled) {
			h.t.Errorf("Run returned %v, want context.Canceled", err)
		}
		h.done <- err // later calls see it too
	case <-time.After(testWait):
		h.t.Error("Run did not return after cancel")
	}
}

func (h *runnerHarness) waitTimer() {
	h.t.Helper()
	select {
	case <-h.clock.created:
	case <-time.After(testWait):
		h.t.Fatal("the runner armed no timer")
	}
}

// passAfter advances the clock by d and waits for the pass it fires and
// for the runner to arm its next timer.
func (h *runnerHarness) passAfter(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	select {
	case <-h.passes:
	case <-time.After(testWait):
		h.t.Fatalf("no pass %v later", d)
	}
	h.waitTimer()
}

func (h *runnerHarness) bursts() float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "raft_voter_churn_burst_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	h.t.Fatal("raft_voter_churn_burst_total not registered")
	return 0
}

func (h *runnerHarness) noViolations() {
	h.t.Helper()
	if _, v, _ := h.fake.snapshot(); len(v) > 0 {
		h.t.Fatalf("the runner made bad or quorum-losing steps: %v", v)
	}
}

// SPEC §5 Reconciler: from a bootstrapped single voter, ten eligible nodes
// end as 5 voters, 4 standbys and a client, in one pass that starts only
// once the debounce has passed, each step keeping quorum.
func TestRunnerConvergesAfterDebounce(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(10, "a", "b", "c")...)
	for id, m := range w.members {
		m.CaughtUp = false
		w.members[id] = m
	}
	w.config["n01"] = Voter
	fake := newFakeRaft(w)
	fake.autoCatch = true
	h := startRunner(t, fake, nil)

	h.clock.Advance(DefaultDebounce - time.Millisecond)
	if _, _, configs := fake.snapshot(); configs != 0 {
		t.Fatalf("a pass ran before the debounce (%d reads)", configs)
	}
	h.passAfter(time.Millisecond)
	h.noViolations()
	if v, s, c := fake.roles(); v != 5 || s != 4 || c != 1 {
		t.Fatalf("roles %d/%d/%d, want 5/4/1", v, s, c)
	}
	changes, _, _ := fake.snapshot()
	for i, c := range changes {
		if c.Kind == Promote {
			added := false
			for _, a := range changes[:i] {
				added = added || (a.Kind == AddNonvoter && a.ID == c.ID)
			}
			if !added {
				t.Fatalf("%v promotes a node that was not added as a non-voter first: %v", c, changes)
			}
		}
	}
	if b := h.bursts(); b != 1 {
		t.Fatalf("raft_voter_churn_burst_total = %v after four promotions in one pass, want 1", b)
	}
}

// SPEC §5 Reconciler: a triggered pass replaces a dead voter with the best
// standby and removes the dead voter; five triggers make one pass.
func TestRunnerDeadVoterOneDebouncedPass(t *testing.T) {
	w := tenNodeWorld(t)
	fake := newFakeRaft(w)
	h := startRunner(t, fake, nil)
	h.passAfter(DefaultDebounce)
	if changes, _, configs := fake.snapshot(); len(changes) != 0 || configs != 1 {
		t.Fatalf("converged cluster: changes %v, %d reads", changes, configs)
	}

	fake.set("n02", func(m *Member) { m.Alive, m.RaftContact = false, false })
	for range 5 {
		h.r.Trigger()
	}
	h.waitTimer() // the debounce timer
	h.passAfter(DefaultDebounce)
	changes, _, configs := fake.snapshot()
	want := []Change{{Kind: AddNonvoter, ID: "n10", Address: "addr-n10"}, {Kind: Promote, ID: "n06", Address: "addr-n06"}, {Kind: Remove, ID: "n02"}}
	if !sameChanges(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	if configs != 1+len(want)+1 {
		t.Fatalf("%d configuration reads, want %d: one pass, re-planning after each change", configs, 1+len(want)+1)
	}
	h.noViolations()
	if b := h.bursts(); b != 1 {
		t.Fatalf("bursts = %v, want 1 (promote and remove within one window)", b)
	}
	select {
	case <-h.passes:
		t.Fatal("a second pass ran for the coalesced triggers")
	default:
	}
}

// Voter changes further apart than the debounce window are not a burst.
func TestRunnerSpacedVoterChangesNoBurst(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Nonvoter
	fake := newFakeRaft(w)
	h := startRunner(t, fake, nil)
	h.passAfter(DefaultDebounce) // promotes n03: one voter change
	h.clock.Advance(time.Hour)
	fake.set("n03", func(m *Member) { m.Retired = true })
	h.r.Trigger()
	h.waitTimer()
	h.passAfter(DefaultDebounce) // removes n03: one voter change, an hour later
	want := []Change{{Kind: Promote, ID: "n03", Address: "addr-n03"}, {Kind: Remove, ID: "n03"}}
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	if b := h.bursts(); b != 0 {
		t.Fatalf("bursts = %v for two voter changes an hour apart, want 0", b)
	}
	h.noViolations()
}

// The runner acts only while Raft names this node the leader.
func TestRunnerNotLeader(t *testing.T) {
	w := tenNodeWorld(t)
	fake := newFakeRaft(w)
	h := startRunner(t, fake, nil)
	fake.mu.Lock()
	fake.leader = "n02"
	fake.mu.Unlock()
	fake.set("n03", func(m *Member) { m.Alive, m.RaftContact = false, false })
	h.passAfter(DefaultDebounce)
	if changes, _, configs := fake.snapshot(); len(changes) != 0 || configs != 0 {
		t.Fatalf("follower runner changed %v (%d reads)", changes, configs)
	}
}

// A failed addition is skipped for the rest of the pass and the plan goes
// on (one node Raft will not take never holds the others up); the next
// pass, one debounce later, retries it.
func TestRunnerRetriesAfterError(t *testing.T) {
	w := tenNodeWorld(t)
	fake := newFakeRaft(w)
	fake.failNext = errInjected
	fake.set("n02", func(m *Member) { m.Alive, m.RaftContact = false, false })
	h := startRunner(t, fake, nil)
	h.passAfter(DefaultDebounce)
	changes, _, _ := fake.snapshot()
	if len(changes) != 2 {
		t.Fatalf("changes %v after the failed addition, want the plan's other 2", changes)
	}
	for _, c := range changes {
		if c.Kind == AddNonvoter {
			t.Fatalf("changes %v: the failed addition was applied in the same pass", changes)
		}
	}
	h.passAfter(DefaultDebounce)
	if changes, _, _ := fake.snapshot(); len(changes) != 3 || changes[2].Kind != AddNonvoter {
		t.Fatalf("retry applied %v, want the addition third", changes)
	}
	h.noViolations()
}

// Any other failed change ends the pass (the steps after it were ordered
// for a configuration it did not reach); the next pass applies it.
func TestRunnerFailedRemovalEndsPass(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Voter
	fake := newFakeRaft(w)
	fake.failNext = errInjected
	fake.set("n03", func(m *Member) { m.ClockHealthy = false })
	h := startRunner(t, fake, nil)
	h.passAfter(DefaultDebounce)
	if changes, _, _ := fake.snapshot(); len(changes) != 0 {
		t.Fatalf("changes %v despite the failure", changes)
	}
	h.passAfter(DefaultDebounce)
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, []Change{{Kind: Remove, ID: "n03"}}) {
		t.Fatalf("retry applied %v, want n03 removed", changes)
	}
	h.noViolations()
}

// With Progress the runner judges CaughtUp: a non-voter is promoted only
// after its index has stayed within MaxLag of the leader's for StableFor.
func TestRunnerProgressStability(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"] = Voter, Voter
	fake := newFakeRaft(w)
	fake.lastIndex = 1000
	h := startRunner(t, fake, func(c *RunnerConfig) {
		c.Progress = fake.Progress
		c.StableFor = 5 * time.Second
	})
	h.passAfter(DefaultDebounce)
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, []Change{{Kind: AddNonvoter, ID: "n03", Address: "addr-n03"}}) {
		t.Fatalf("changes %v, want n03 added as a non-voter only (it has not caught up)", changes)
	}
	fake.mu.Lock()
	fake.progress["n03"] = 1000 - DefaultMaxLag
	fake.mu.Unlock()
	h.r.Trigger()
	h.waitTimer()
	h.passAfter(DefaultDebounce) // within MaxLag from now on
	if changes, _, _ := fake.snapshot(); len(changes) != 1 {
		t.Fatalf("promoted before StableFor: %v", changes)
	}
	// Falling behind restarts the window: 7 s after it first came within
	// MaxLag, but 2 s after it came back, n03 is not promoted.
	fake.mu.Lock()
	fake.progress["n03"] = 10
	fake.mu.Unlock()
	h.passAfter(5 * time.Second) // the stability timer; this pass sees the lag
	fake.mu.Lock()
	fake.progress["n03"] = 999
	fake.mu.Unlock()
	h.r.Trigger()
	h.waitTimer()
	h.passAfter(DefaultDebounce)
	if changes, _, _ := fake.snapshot(); len(changes) != 1 {
		t.Fatalf("promoted although the lag reset the window: %v", changes)
	}
	h.passAfter(5 * time.Second)
	want := []Change{{Kind: AddNonvoter, ID: "n03", Address: "addr-n03"}, {Kind: Promote, ID: "n03", Address: "addr-n03"}}
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	h.noViolations()
}

func TestRunnerRunTwiceAndCancel(t *testing.T) {
	fake := newFakeRaft(tenNodeWorld(t))
	h := startRunner(t, fake, nil)
	if err := h.r.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
	h.stop()
}

func TestNewRunnerChecks(t *testing.T) {
	fake := newFakeRaft(tenNodeWorld(t))
	ok := RunnerConfig{Raft: fake, LocalID: "n01", Members: fake.Members}
	for name, mod := range map[string]func(*RunnerConfig){
		"no raft":    func(c *RunnerConfig) { c.Raft = nil },
		"no members": func(c *RunnerConfig) { c.Members = nil },
		"no id":      func(c *RunnerConfig) { c.LocalID = "" },
		"negative":   func(c *RunnerConfig) { c.Debounce = -1 },
		"progress without LastIndex": func(c *RunnerConfig) {
			c.Raft = struct{ RaftOps }{fake}
			c.Progress = fake.Progress
		},
	} {
		c := ok
		mod(&c)
		if _, err := NewRunner(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	reg := prometheus.NewRegistry()
	ok.Registerer = reg
	a, err := NewRunner(ok)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRunner(ok)
	if err != nil {
		t.Fatalf("a second runner on the same registry (next leadership term): %v", err)
	}
	if a.bursts != b.bursts {
		t.Fatal("the second runner does not share the registered counter")
	}
}

// A non-voter that is not caught up is looked at again after a debounce,
// not after a whole Interval (10 s): a standby taking a dead voter's slot
// is promoted StableFor after it caught up, without waiting for a trigger.
func TestRunnerRechecksLaggingStandbySoon(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"] = Voter, Voter
	fake := newFakeRaft(w)
	fake.lastIndex = 1000
	h := startRunner(t, fake, func(c *RunnerConfig) {
		c.Progress = fake.Progress
		c.StableFor = time.Second
	})
	h.passAfter(DefaultDebounce) // n03 added as a non-voter; its progress unknown yet
	fake.mu.Lock()
	fake.progress["n03"] = 1000
	fake.mu.Unlock()
	h.passAfter(DefaultDebounce) // no Trigger: the re-check itself is due
	h.passAfter(time.Second)     // StableFor within MaxLag: promoted
	want := []Change{{Kind: AddNonvoter, ID: "n03", Address: "addr-n03"}, {Kind: Promote, ID: "n03", Address: "addr-n03"}}
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	h.noViolations()
}

// raft.reconcile_debounce: the first pass is armed Debounce after Run
// starts — the configured value, or DefaultDebounce when it is zero.
func TestRunnerDebounceSetting(t *testing.T) {
	for _, c := range []struct{ set, want time.Duration }{{0, DefaultDebounce}, {7 * time.Second, 7 * time.Second}} {
		h := startRunner(t, newFakeRaft(tenNodeWorld(t)), func(cfg *RunnerConfig) { cfg.Debounce = c.set })
		h.clock.mu.Lock()
		at := h.clock.timers[0].at
		h.clock.mu.Unlock()
		if got := at.Sub(newManualClock().Now()); got != c.want {
			t.Errorf("Debounce %v: first pass armed %v after the start, want %v", c.set, got, c.want)
		}
		h.stop()
	}
}

// stuckRaft accepts every change and applies none: the plan never empties.
// Past twice maxStepsPerPass it refuses, so an unbounded pass still ends.
type stuckRaft struct{ calls int }

func (s *stuckRaft) GetConfiguration() ([]Server, error) {
	return []Server{{ID: "n01", Address: "addr-n01", Suffrage: Voter}}, nil
}
func (s *stuckRaft) change() error {
	if s.calls++; s.calls > 2*maxStepsPerPass {
		return errors.New("stuckRaft: too many changes")
	}
	return nil
}
func (s *stuckRaft) AddNonvoter(id, addr string) error { return s.change() }
func (s *stuckRaft) Promote(id, addr string) error     { return s.change() }
func (s *stuckRaft) Demote(id string) error            { return s.change() }
func (s *stuckRaft) Remove(id string) error            { return s.change() }
func (s *stuckRaft) LeaderID() string                  { return "n01" }

// counterValue reads a registered counter by name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// One pass is bounded: against a Raft whose configuration never changes,
// it applies exactly maxStepsPerPass changes, then gives up until the next
// interval instead of spinning. Adding non-voters is no voter churn, and
// each change is logged with the number of changes still pending.
func TestRunnerPassBounded(t *testing.T) {
	raft := &stuckRaft{}
	ms := healthy(2, "a")
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	r, err := NewRunner(RunnerConfig{Raft: raft, LocalID: "n01", Members: func() []Member { return ms },
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if next := r.pass(context.Background()); next != DefaultInterval {
		t.Errorf("a pass that did not converge asks for the next in %v, want the interval %v", next, DefaultInterval)
	}
	if raft.calls != maxStepsPerPass {
		t.Fatalf("one pass applied %d changes, want %d", raft.calls, maxStepsPerPass)
	}
	if b := counterValue(t, reg, "raft_voter_churn_burst_total"); b != 0 {
		t.Errorf("%d additions of a non-voter counted as %v voter-churn bursts", maxStepsPerPass, b)
	}
	var first struct {
		Msg     string `json:"msg"`
		Change  string `json:"change"`
		Pending *int   `json:"pending"`
	}
	line, _, _ := bytes.Cut(logs.Bytes(), []byte("\n"))
	if err := json.Unmarshal(line, &first); err != nil || first.Msg != "raft configuration change" ||
		first.Change != "add_nonvoter" || first.Pending == nil || *first.Pending != 0 {
		t.Errorf("first log line %s (%v): want the add_nonvoter change with 0 pending", line, err)
	}
}

// raft_voter_churn_burst_total: voter changes at most Debounce apart are
// one burst, counted once at its second change; a gap longer than
// Debounce ends it.
func TestBurstWindowInclusive(t *testing.T) {
	clk := newManualClock()
	reg := prometheus.NewRegistry()
	r, err := NewRunner(RunnerConfig{Raft: &stuckRaft{}, LocalID: "n01", Members: func() []Member { return nil },
		Clock: clk, Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		after time.Duration
		want  float64
	}{{0, 0}, {DefaultDebounce, 1}, {DefaultDebounce, 1}, {DefaultDebounce + time.Nanosecond, 1}, {DefaultDebounce, 2}} {
		clk.Advance(c.after)
		r.voterChanged()
		if got := counterValue(t, reg, "raft_voter_churn_burst_total"); got != c.want {
			t.Fatalf("change %d (%v after the previous): %v bursts, want %v", i, c.after, got, c.want)
		}
	}
}

// SPEC §5 Reconciler: the runner removes a gone voter without a
// replacement only once raft.dead_voter_grace has passed since it first saw
// it gone, re-checking when the grace ends; a voter back before that is
// forgotten and counts afresh when it goes again.
func TestRunnerDeadVoterGrace(t *testing.T) {
	w := graceWorld()
	m := w.members["n03"]
	m.Alive, m.RaftContact = true, true
	w.members["n03"] = m
	fake := newFakeRaft(w)
	const grace = time.Minute
	h := startRunner(t, fake, func(c *RunnerConfig) { c.DeadVoterGrace = grace })
	h.passAfter(DefaultDebounce)

	fake.set("n03", func(m *Member) { m.Alive, m.RaftContact = false, false })
	h.r.Trigger()
	h.waitTimer()
	h.passAfter(DefaultDebounce) // n03 first seen gone
	// Back before the grace ends, then gone again: the grace starts over.
	h.passAfter(DefaultInterval)
	fake.set("n03", func(m *Member) { m.Alive = true })
	h.passAfter(DefaultInterval)
	fake.set("n03", func(m *Member) { m.Alive = false })
	h.passAfter(DefaultInterval) // seen gone again: the grace starts now
	for elapsed := DefaultInterval; elapsed < grace; elapsed += DefaultInterval {
		h.passAfter(DefaultInterval)
		if changes, _, _ := fake.snapshot(); len(changes) != 0 {
			t.Fatalf("%v after %v gone (grace %v)", changes, elapsed, grace)
		}
	}
	h.passAfter(DefaultInterval)
	changes, _, _ := fake.snapshot()
	if want := []Change{{Kind: Remove, ID: "n03"}}; !sameChanges(changes, want) {
		t.Fatalf("changes %v past the grace, want %v", changes, want)
	}
	h.noViolations()
}

// A pass due before the next Interval: the grace of a gone voter ends
// between two Interval passes and the runner plans at that instant.
func TestRunnerGraceEndWakesThePass(t *testing.T) {
	w := graceWorld()
	fake := newFakeRaft(w)
	const grace = DefaultInterval + 3*time.Second
	h := startRunner(t, fake, func(c *RunnerConfig) { c.DeadVoterGrace = grace })
	h.passAfter(DefaultDebounce) // n03 first seen gone: next pass at Interval
	h.passAfter(DefaultInterval) // 3 s of grace left: next pass then
	if changes, _, _ := fake.snapshot(); len(changes) != 0 {
		t.Fatalf("changes %v within the grace", changes)
	}
	h.passAfter(3 * time.Second)
	if changes, _, _ := fake.snapshot(); !sameChanges(changes, []Change{{Kind: Remove, ID: "n03"}}) {
		t.Fatalf("changes %v at the end of the grace, want n03 removed", changes)
	}
}
