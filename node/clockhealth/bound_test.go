package clockhealth_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// checked returns a harness past clock_check whose last sample has error
// bound 4 ms (rtt 0, u 3, offset 0), taken at the manual clock's now.
func checked(t *testing.T, edit func(*clockhealth.Options)) *harness {
	t.Helper()
	hs := newHarness(t, nil, edit)
	hs.pass(3)
	if err := hs.mon.Check(); err != nil {
		t.Fatal(err)
	}
	return hs
}

// SPEC §3.3-4: no successful sample for staleness_ms is stale; exactly
// staleness_ms still passes.
func TestStaleAtThreshold(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.Advance(3 * time.Second) // staleness_ms = 3000; bound 4 + ceil(500 ppm × 3 s) = 6
	if err := hs.mon.Check(); err != nil {
		t.Fatalf("at exactly staleness_ms: %v", err)
	}
	hs.clk.Advance(1)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonStale)
}

// SPEC §3.3-4: staleness also counts before the first sample.
func TestStaleBeforeFirstSample(t *testing.T) {
	hs := newHarness(t, nil, nil)
	hs.clk.Advance(3 * time.Second)
	if err := hs.mon.Check(); !errors.Is(err, clockhealth.ErrClockCheck) {
		t.Fatalf("at staleness_ms: %v", err)
	}
	hs.clk.Advance(1)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonStale)
}

// SPEC §3.2: bound(t) = error_bound + |Δwall − Δmono| + ceil(ppm × (t − t_sample));
// past Δ/2 with no step the reason is bound. max_drift_ppm 100000 makes the
// drift term 0.1 ms per ms.
func TestRunningBoundDriftAtThreshold(t *testing.T) {
	hs := checked(t, func(o *clockhealth.Options) {
		o.Config.MaxDriftPPM = 100000
		o.Config.StalenessMs = 600000
	})
	hs.clk.Advance(2460 * time.Millisecond) // 4 + 246 = 250 = Δ/2
	if err := hs.mon.Check(); err != nil {
		t.Fatalf("bound at Δ/2: %v", err)
	}
	if st := hs.mon.Status(); st.BoundMs != 250 {
		t.Fatalf("bound %d, want 250", st.BoundMs)
	}
	hs.clk.Advance(1) // ceil(246.0000001) = 247: 251
	hs.wantFailed(hs.mon.Check(), protocol.ReasonBound)
}

// SPEC §3.2, §3.3-5: a forward wall step since the sample adds to the bound;
// past Δ/2 the reason is step. Check sees it with no new sample.
func TestStepAtThreshold(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.StepWall(246 * time.Millisecond) // 4 + 246 = 250
	if err := hs.mon.Check(); err != nil {
		t.Fatalf("step to exactly Δ/2: %v", err)
	}
	hs.clk.StepWall(1) // 4 + ceil(246 ms + 1 ns) = 251
	hs.wantFailed(hs.mon.Check(), protocol.ReasonStep)
}

// SPEC §3.2: a small step is allowed (it only grows the bound); the bound
// shrinks back with the next sample.
func TestSmallStepOnlyGrowsBound(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.StepWall(20 * time.Millisecond)
	if err := hs.mon.Check(); err != nil {
		t.Fatal(err)
	}
	if st := hs.mon.Status(); st.BoundMs != 24 {
		t.Fatalf("bound %d after a 20 ms step, want 24", st.BoundMs)
	}
	hs.pass(1) // the agent's R follows the (now correct) wall clock
	if st := hs.mon.Status(); st.BoundMs != 4 {
		t.Fatalf("bound %d after a new sample, want 4", st.BoundMs)
	}
}

// SPEC §3.2, §3.3-5: a rollback is Δwall < −1 ms between two evaluations;
// exactly −1 ms passes.
func TestRollbackAtThreshold(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.StepWall(-time.Millisecond)
	if err := hs.mon.Check(); err != nil {
		t.Fatalf("Δwall = −1 ms: %v", err)
	}
	hs.clk.StepWall(-time.Millisecond - 1)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonRollback)
}

// SPEC §1.5, §3.2: a rollback large enough to push the bound past Δ/2 is
// named rollback (rollback is checked before a step-driven bound).
func TestLargeRollbackIsRollback(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.StepWall(-300 * time.Millisecond)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonRollback)
}

// SPEC §3.3-5: a rollback between samples is caught when the next sample
// arrives, even if the agent's reference agrees with the stepped clock.
func TestRollbackSeenAtNextSample(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.StepWall(-5 * time.Millisecond)
	hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonRollback)
}

// SPEC §1.5: when both hold, stale is named before rollback and a
// step-driven bound.
func TestStaleBeforeRollback(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.Advance(4 * time.Second)
	hs.clk.StepWall(-4*time.Second - 10*time.Millisecond)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonStale)
}

// SPEC §3.4: FAILED is a latch. The first failure's reason stays; healthy
// samples and later failures change nothing; Failed() closed once.
func TestFailedIsALatch(t *testing.T) {
	good := true
	var hs *harness
	hs = newHarness(t, func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: hs.agent.Sign(req.Nonce, uint64(hs.clk.WallNs()/1e6), 3, good, 1)}
	}, nil)
	hs.pass(3)
	good = false
	hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonUnsynced)
	conns := hs.agent.Conns()
	good = true
	for range 5 {
		if r := reasonOf(t, hs.mon.Probe(t.Context())); r != protocol.ReasonUnsynced {
			t.Fatalf("after FAILED, a healthy agent gives %q", r)
		}
		hs.clk.Advance(time.Second)
	}
	hs.clk.Advance(time.Hour)       // stale
	hs.clk.StepWall(-time.Hour * 2) // rollback
	if r := reasonOf(t, hs.mon.Check()); r != protocol.ReasonUnsynced {
		t.Fatalf("first failure must win, got %q", r)
	}
	if hs.agent.Conns() != conns {
		t.Fatal("a FAILED monitor kept probing")
	}
	if err := hs.mon.ClockCheck(t.Context()); reasonOf(t, err) != protocol.ReasonUnsynced {
		t.Fatalf("ClockCheck after FAILED: %v", err)
	}
	st := hs.mon.Status()
	if st.Healthy || st.Stage != clockhealth.StageFailed || st.FailedStage != clockhealth.StageChecked {
		t.Fatalf("status %+v", st)
	}
	if v, _ := metric(t, hs.reg, "clock_failures_total", "reason", "unsynced"); v != 1 {
		t.Fatalf("clock_failures_total{unsynced} = %v", v)
	}
	if v, _ := metric(t, hs.reg, "clock_health_state", "", ""); v != clockhealth.StateFailed {
		t.Fatalf("clock_health_state = %v", v)
	}
}

// SPEC §4 (last rules), §3.3-5: single node without an agent watches the
// host clock: clock stages skipped, a step past Δ/2 or a rollback FAILs.
func TestHostClockWatcher(t *testing.T) {
	newHost := func(t *testing.T) *harness {
		clk := clockhealthtest.NewClock(t0)
		hs := &harness{t: t, clk: clk}
		mon, err := clockhealth.New(clockhealth.Options{
			Config: clockhealth.DefaultConfig(), Wall: clk, Mono: clk, Logger: testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		hs.mon = mon
		t.Cleanup(func() { _ = mon.Close() })
		return hs
	}
	t.Run("stages skipped and said so", func(t *testing.T) {
		hs := newHost(t)
		if err := hs.mon.ClockCheck(t.Context()); err != nil {
			t.Fatal(err)
		}
		hs.clk.Advance(time.Hour) // no staleness without an agent
		if err := hs.mon.Check(); err != nil {
			t.Fatal(err)
		}
		st := hs.mon.Status()
		if st.Mode != "host" || st.ClockStages == "" || st.Stage != clockhealth.StageChecked || !st.Healthy || st.LastSample != nil {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("step at Δ/2", func(t *testing.T) {
		hs := newHost(t)
		hs.clk.StepWall(250 * time.Millisecond)
		if err := hs.mon.Check(); err != nil {
			t.Fatalf("step of exactly Δ/2: %v", err)
		}
		hs.clk.StepWall(1)
		hs.wantFailed(hs.mon.Check(), protocol.ReasonStep)
	})
	t.Run("rollback at −1 ms", func(t *testing.T) {
		hs := newHost(t)
		hs.clk.Advance(time.Second)
		hs.clk.StepWall(-time.Millisecond)
		if err := hs.mon.Probe(t.Context()); err != nil {
			t.Fatalf("Δwall = −1 ms: %v", err)
		}
		hs.clk.StepWall(-time.Millisecond - 1)
		hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonRollback)
	})
}

// SPEC §3.2: Check does not allocate on the healthy path.
func TestCheckDoesNotAllocate(t *testing.T) {
	hs := checked(t, nil)
	if n := testing.AllocsPerRun(1000, func() {
		if err := hs.mon.Check(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Check allocates %v times per call", n)
	}
	hs.clk.StepWall(-time.Second)
	_ = hs.mon.Check() // latches (allocates once)
	if n := testing.AllocsPerRun(1000, func() { _ = hs.mon.Check() }); n != 0 {
		t.Fatalf("Check after FAILED allocates %v times per call", n)
	}
}

// stallingWall simulates a thread descheduled right after reading the wall
// clock: the next stalls reads are each followed by 600 ms passing.
type stallingWall struct {
	clk    *clockhealthtest.Clock
	stalls atomic.Int64
}

func (s *stallingWall) Now() time.Time {
	t := s.clk.Now()
	if s.stalls.Add(-1) >= 0 {
		s.clk.Advance(600 * time.Millisecond)
	}
	return t
}

// SPEC §3.2: "the 1 ms absorbs the gap between reading the two clocks" only
// if that gap is small. A stall between the wall and the monotonic read
// must not look like a step: the read is retried while the bracket is wide.
// A real step is still caught through the same wall clock.
func TestStalledClockReadIsNotAStep(t *testing.T) {
	sw := &stallingWall{}
	hs := checked(t, func(o *clockhealth.Options) {
		sw.clk = o.Wall.(*clockhealthtest.Clock)
		o.Wall = sw
	})
	sw.stalls.Store(3)
	if err := hs.mon.Check(); err != nil {
		t.Fatalf("a stalled read failed the clock: %v", err)
	}
	if st := hs.mon.Status(); st.BoundMs > 6 {
		t.Fatalf("a stalled read grew the bound to %d ms", st.BoundMs)
	}
	hs.clk.StepWall(300 * time.Millisecond)
	hs.wantFailed(hs.mon.Check(), protocol.ReasonStep)
}
