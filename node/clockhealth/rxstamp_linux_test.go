package clockhealth_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// stall is how long a test holds the node between its answer's arrival and
// its read (or the agent between its clock read and its answer): past
// max_rtt_ms (125 ms at Δ 500), as a CPU quota's throttled period is.
const stall = 200 * time.Millisecond

// offsetWall is the system's wall clock plus an offset a test steps, beside
// the system's monotonic clock.
type offsetWall struct {
	sys *clockhealth.SystemClock
	off atomic.Int64
}

func (c *offsetWall) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetWall) NowNs() int64   { return c.sys.NowNs() }

// stampRig is a monitor with kernel receive timestamps (or without) on the
// real clock (or wall, when set) against an agent answering the system
// clock. hold runs in the agent after it read its clock and before it
// answers; held, once set, runs in the node after the answer was written
// and before the node reads it.
type stampRig struct {
	t       *testing.T
	mon     *clockhealth.Monitor
	reg     *prometheus.Registry
	written chan struct{}
	held    atomic.Pointer[func()]
}

func newStampRig(t *testing.T, kernel bool, wall *offsetWall, hold func()) *stampRig {
	t.Helper()
	r := &stampRig{t: t, reg: prometheus.NewRegistry(), written: make(chan struct{}, 1)}
	var a *clockhealthtest.Agent
	a = clockhealthtest.StartAgent(t, []byte(vectorSecret), func(req protocol.Request) clockhealthtest.Reply {
		ref := uint64(time.Now().UnixMilli())
		if hold != nil {
			hold()
		}
		return clockhealthtest.Reply{Bytes: a.Sign(req.Nonce, ref, 3, true, 100), After: func() { r.written <- struct{}{} }}
	})
	opts := clockhealth.Options{Config: baseConfig(a.Addr()), Secret: []byte(vectorSecret), Logger: testLogger(t),
		Registerer: r.reg, KernelRxTimestamps: kernel}
	opts.Config.ProbeTimeoutMs = 900 // the 200 ms stalls are the test, not timeouts
	if wall != nil {
		opts.Wall, opts.Mono = wall, wall
	}
	mon, err := clockhealth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	r.mon = mon
	clockhealth.SetBeforeRead(mon, func() {
		select { // the answer has been written: its LF arrives while the node is held
		case <-r.written:
		case <-time.After(10 * time.Second):
			t.Error("the agent never answered")
		}
		if f := r.held.Load(); f != nil {
			(*f)()
		}
	})
	return r
}

// hold makes f run in the node between each answer's arrival and its read.
func (r *stampRig) hold(f func()) { r.held.Store(&f) }

// rx returns clock_rx_timestamps_total{kernel} and {user}.
func (r *stampRig) rx() (kernel, user float64) {
	kernel, _ = metric(r.t, r.reg, "clock_rx_timestamps_total", "source", clockhealth.RxSourceKernel)
	user, _ = metric(r.t, r.reg, "clock_rx_timestamps_total", "source", clockhealth.RxSourceUser)
	return kernel, user
}

// warm probes until an exchange used a kernel stamp: the kernel turns
// timestamping on through deferred work after New asks for it, so the
// first answers may come unstamped (user). Up to 50 rounds.
func (r *stampRig) warm() {
	r.t.Helper()
	for range 50 {
		if err := r.mon.Probe(r.t.Context()); err != nil && reasonOf(r.t, err) != "" {
			r.t.Fatalf("warm-up round: %v", err)
		}
		if k, _ := r.rx(); k > 0 {
			return
		}
	}
	k, u := r.rx()
	r.t.Fatalf("no kernel receive timestamp in 50 exchanges (kernel %v, user %v)", k, u)
}

// sleep is the stall under test (not a synchronisation): a node held
// between its answer's arrival and its read, or an agent between its clock
// read and its answer.
func sleep() { time.Sleep(stall) }

// limitMs is half the stall in ms: a sample whose rtt or offset holds the
// stall is over it.
const limitMs = uint64(stall / time.Millisecond / 2)

// SPEC §1.1, §3.1 on the real clock over loopback: a node held 200 ms
// between its answer's arrival and its read (a scheduler stall, a CPU
// quota) gets a sample within the limits with kernel receive timestamps —
// the stall is in neither rtt nor |w1 − R| — while with user-space stamps
// every exchange of the burst is slow (rtt > 125 ms) and the round fails.
func TestKernelRxStampExcludesStallBeforeRead(t *testing.T) {
	t.Run("kernel stamps", func(t *testing.T) {
		r := newStampRig(t, true, nil, nil)
		r.warm()
		k0, u0 := r.rx()
		r.hold(sleep)
		if err := r.mon.Probe(t.Context()); err != nil && reasonOf(t, err) != "" {
			t.Fatal(err)
		}
		ls := r.mon.Status().LastSample
		if ls == nil || ls.RTTMs >= limitMs || ls.OffsetMs >= limitMs {
			t.Fatalf("last sample %+v: the %v stall is in its rtt or offset", ls, stall)
		}
		if k, u := r.rx(); k != k0+1 || u != u0 {
			t.Fatalf("clock_rx_timestamps_total kernel %v user %v, want %v and %v", k, u, k0+1, u0)
		}
	})
	t.Run("user stamps", func(t *testing.T) {
		r := newStampRig(t, false, nil, nil)
		r.hold(sleep)
		if err := r.mon.Probe(t.Context()); reasonOf(t, err) != protocol.ReasonRTT {
			t.Fatalf("round: %v, want rtt", err)
		}
		if k, u := r.rx(); k != 0 || u != 3 {
			t.Fatalf("clock_rx_timestamps_total kernel %v user %v, want 0 and 3", k, u)
		}
		if v, _ := metric(t, r.reg, "clock_exchanges_total", "result", clockhealth.ResultSlow); v != 3 {
			t.Fatalf("clock_exchanges_total{slow} = %v, want 3", v)
		}
	})
}

// SPEC §3.1: kernel stamps take out only the node's own lateness in reading
// an answer that has arrived. An agent that holds its answer 200 ms after
// reading its clock is as slow with them as without: the LF arrives 200
// ms late, every exchange is slow (rtt), and each used the kernel stamp.
func TestKernelRxStampKeepsDelayBeforeArrival(t *testing.T) {
	var slow atomic.Bool
	r := newStampRig(t, true, nil, func() {
		if slow.Load() {
			sleep()
		}
	})
	r.warm()
	k0, u0 := r.rx()
	slow.Store(true)
	if err := r.mon.Probe(t.Context()); reasonOf(t, err) != protocol.ReasonRTT {
		t.Fatalf("round: %v, want rtt", err)
	}
	if k, u := r.rx(); k != k0+3 || u != u0 {
		t.Fatalf("clock_rx_timestamps_total kernel %v user %v, want %v and %v", k, u, k0+3, u0)
	}
}

// SPEC §3.2: a wall-clock step during an exchange is never hidden by the
// kernel's stamp. The wall clock is stepped 50 ms ahead of the system clock
// (and of the agent's reference) while the answer is in flight — in the
// agent before it answers, or in the node after the LF arrived and before
// it reads it. Used as w1, the stamp (taken on the system clock before the
// step, or never stepped) would show offset ≈ 0 and the pair (w1, m1) would
// carry the step past the running bound. The exchange shows the step
// (|Δwall − Δmono| > 1 ms from w0 to the read), so it keeps the
// user-space reading: its offset and bound hold the 50 ms, and the running
// bound after it too. A wall clock that is not CLOCK_REALTIME (a standing
// offset) never uses the stamp either.
func TestKernelRxStampNeverHidesAStep(t *testing.T) {
	const step = 50 * time.Millisecond
	stepMs := uint64(step / time.Millisecond)
	cases := []struct {
		name      string
		inAgent   bool // the step happens before the answer is written
		beforeRun time.Duration
	}{
		{"step while the agent answers", true, 0},
		{"step between the LF's arrival and the read", false, 0},
		{"a wall clock 50 ms off CLOCK_REALTIME", false, step},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wall := &offsetWall{sys: clockhealth.NewSystemClock()}
			var armed atomic.Bool
			stepOnce := func() {
				if armed.CompareAndSwap(true, false) {
					wall.off.Add(int64(step))
				}
			}
			var agentHold func()
			if tc.inAgent {
				agentHold = stepOnce
			}
			r := newStampRig(t, true, wall, agentHold)
			if !tc.inAgent {
				r.hold(stepOnce)
			}
			r.warm()
			k0, u0 := r.rx()
			if tc.beforeRun > 0 {
				wall.off.Store(int64(tc.beforeRun))
			} else {
				armed.Store(true)
			}
			if err := r.mon.Probe(t.Context()); err != nil && reasonOf(t, err) != "" {
				t.Fatal(err)
			}
			if armed.Load() {
				t.Fatal("the step did not happen")
			}
			ls := r.mon.Status().LastSample
			if ls == nil || ls.OffsetMs < stepMs || ls.ErrorBoundMs < stepMs+3 {
				t.Fatalf("last sample %+v: the %v step is not in its offset and bound", ls, step)
			}
			if b := r.mon.Status().BoundMs; b < stepMs+3 {
				t.Fatalf("running bound %d ms after a %v step", b, step)
			}
			if k, u := r.rx(); k != k0 || u != u0+1 {
				t.Fatalf("clock_rx_timestamps_total kernel %v user %v, want %v and %v", k, u, k0, u0+1)
			}
		})
	}
}
