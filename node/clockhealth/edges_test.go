package clockhealth_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// The edges of the monitor that mutation testing found unguarded
// (docs/mutants.md, node/clockhealth).

// scriptClock is a wall and monotonic clock whose readings are scripted:
// each NowNs returns the next monotonic value (the last one repeats), Now
// the next wall value, as nanoseconds from t0.
type scriptClock struct {
	mu   sync.Mutex
	mono []int64
	wall []int64
}

func next(q *[]int64) int64 {
	v := (*q)[0]
	if len(*q) > 1 {
		*q = (*q)[1:]
	}
	return v
}

func (c *scriptClock) NowNs() int64 { c.mu.Lock(); defer c.mu.Unlock(); return next(&c.mono) }
func (c *scriptClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return t0.Add(time.Duration(next(&c.wall)))
}

// SPEC §3.2, readClocks: the wall reading is paired with the midpoint of
// the two monotonic reads around it. A host-mode evaluation 1 ms after
// the start whose monotonic bracket is 80 µs wide, with the wall read
// exactly at its midpoint, has a bound of 0 ms; pairing it with any other
// point of the bracket (or past it) would give 1 ms.
func TestClockReadPairsTheMidpoint(t *testing.T) {
	const ms = int64(time.Millisecond)
	clk := &scriptClock{
		// New reads once (0, 0); Check reads 1 ms and 1 ms + 80 µs around
		// a wall reading of 1 ms + 40 µs; later reads repeat.
		mono: []int64{0, 0, ms, ms + 80_000},
		wall: []int64{0, ms + 40_000},
	}
	reg := prometheus.NewRegistry()
	mon, err := clockhealth.New(clockhealth.Options{Config: clockhealth.DefaultConfig(), Wall: clk, Mono: clk,
		Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.Check(); err != nil {
		t.Fatal(err)
	}
	if v, ok := metric(t, reg, "clock_error_bound_ms", "", ""); !ok || v != 0 {
		t.Fatalf("bound %v ms (%v), want 0: the wall read was paired with another point than the bracket's midpoint", v, ok)
	}
}

// logRecords returns the JSON log records written to buf.
func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// Options.Logger: New logs the clock mode to the logger given (the agent
// mode line says whether a rotation is configured), and a nil Logger
// discards.
func TestMonitorLogger(t *testing.T) {
	sec := bytes.Repeat([]byte("s"), secret.MinLen)
	nextSec := bytes.Repeat([]byte("n"), secret.MinLen)
	for _, c := range []struct {
		next     []byte
		rotation bool
	}{{nil, false}, {nextSec, true}} {
		var buf bytes.Buffer
		_, err := clockhealth.New(clockhealth.Options{Config: baseConfig("127.0.0.1:1"), Secret: sec, NextSecret: c.next,
			Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		recs := logRecords(t, &buf)
		if len(recs) == 0 || recs[0]["msg"] != "clock health: probing agents" || recs[0]["rotation"] != c.rotation {
			t.Errorf("next secret %v: log %v, want the probing line with rotation=%v", c.next != nil, recs, c.rotation)
		}
	}
	if _, err := clockhealth.New(clockhealth.Options{Config: baseConfig("127.0.0.1:1"), Secret: sec}); err != nil {
		t.Fatalf("nil Logger: %v", err)
	}
}

// SPEC §1.4: the next clock secret has the same minimum length as the
// current one — exactly secret.MinLen bytes is accepted, one fewer is not.
func TestNextSecretMinLen(t *testing.T) {
	sec := bytes.Repeat([]byte("s"), secret.MinLen)
	for _, n := range []int{secret.MinLen - 1, secret.MinLen} {
		_, err := clockhealth.New(clockhealth.Options{Config: baseConfig("127.0.0.1:1"), Secret: sec,
			NextSecret: bytes.Repeat([]byte("n"), n), Logger: testLogger(t)})
		if (err == nil) != (n >= secret.MinLen) {
			t.Errorf("next secret of %d bytes: %v", n, err)
		}
	}
}

// readClocks accepts a bracket exactly maxReadGapNs (100 µs) wide at the
// first attempt; a retry here would take the second, inconsistent pair
// this clock scripts (wall 1.5 ms ahead) and report a 2 ms bound.
func TestClockReadAcceptsTheMaxGap(t *testing.T) {
	const ms = int64(time.Millisecond)
	clk := &scriptClock{
		mono: []int64{0, 0, ms, ms + 100_000},
		wall: []int64{0, ms + 50_000, ms + 100_000 + 3*ms/2},
	}
	reg := prometheus.NewRegistry()
	mon, err := clockhealth.New(clockhealth.Options{Config: clockhealth.DefaultConfig(), Wall: clk, Mono: clk,
		Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.Check(); err != nil {
		t.Fatal(err)
	}
	if v, ok := metric(t, reg, "clock_error_bound_ms", "", ""); !ok || v != 0 {
		t.Fatalf("bound %v ms (%v), want 0 from the first, 100 µs bracket", v, ok)
	}
}

// SPEC §3.2: Start paces the prober with the injected ticker at the probe
// interval and the watchdog at a quarter of it.
func TestStartUsesTheInjectedTickers(t *testing.T) {
	ts := clockhealthtest.NewTickers()
	hs := newHarness(t, nil, func(o *clockhealth.Options) {
		o.NewTicker = func(n string, d time.Duration) clockhealth.Ticker { return ts.New(n, d) }
	})
	if err := hs.mon.Start(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]time.Duration{"probe": time.Second, "watchdog": 250 * time.Millisecond} {
		if tk := ts.Get(name, 5*time.Second); tk == nil || tk.Period != want {
			t.Errorf("%s ticker %+v, want the injected one with period %v", name, tk, want)
		}
	}
}

// DESIGN §6: a FAILED clock's error says how far past its limit it went,
// in the unit it names: stale in ms since the last sample, rollback in µs.
func TestFailureTextsMeasure(t *testing.T) {
	hs := checked(t, nil)
	hs.clk.Advance(3*time.Second + time.Millisecond)
	if err := hs.mon.Check(); err == nil || !strings.Contains(err.Error(), "no healthy sample for 3001 ms > staleness_ms 3000") {
		t.Errorf("stale: %v", err)
	}
	hs = checked(t, nil)
	hs.clk.StepWall(-2500 * time.Microsecond)
	if err := hs.mon.Check(); err == nil || !strings.Contains(err.Error(), "wall clock went back 2500 µs between evaluations") {
		t.Errorf("rollback: %v", err)
	}
}

// SPEC §3.1: of a round's healthy samples the one with the smallest
// error bound is installed; on a tie the first agent in configuration
// order wins (so /v1/status names a stable agent).
func TestBestSampleInstalled(t *testing.T) {
	for _, c := range []struct {
		name      string
		extraU    uint64 // the extra agent's uncertainty; the harness agent's is 3
		extraLast bool   // the extra agent listed after the harness agent
		wantExtra bool
		wantEB    uint64
	}{
		{"worse listed first", 10, false, false, 4},
		{"worse listed last", 10, true, false, 4},
		{"better listed last", 1, true, true, 2},
		{"tie: first listed wins", 3, false, true, 4},
		{"tie: first listed wins, other order", 3, true, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hs *harness
			var extra *clockhealthtest.Agent
			extra = clockhealthtest.StartAgent(t, []byte(vectorSecret), func(req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: extra.Sign(req.Nonce, uint64(hs.clk.WallNs()/1e6), c.extraU, true, 100)}
			})
			hs = newHarness(t, nil, func(o *clockhealth.Options) {
				o.Config.AgentAddrs = []string{extra.Addr(), o.Config.AgentAddrs[0]}
				if c.extraLast {
					o.Config.AgentAddrs[0], o.Config.AgentAddrs[1] = o.Config.AgentAddrs[1], o.Config.AgentAddrs[0]
				}
			})
			hs.pass(1)
			want := hs.agent.Addr()
			if c.wantExtra {
				want = extra.Addr()
			}
			ls := hs.mon.Status().LastSample
			if ls == nil || ls.Agent != want || ls.ErrorBoundMs != c.wantEB {
				t.Fatalf("installed %+v, want agent %s with error bound %d", ls, want, c.wantEB)
			}
		})
	}
}

// SPEC §4.1 /v1/status: since_sample_ms is the time since the last
// healthy sample (agent mode; before the first one, since the monitor
// started) or since the host watcher started (host mode), in ms; the
// snapshot carries the staleness limit and the healthy-round count.
func TestStatusSinceSample(t *testing.T) {
	hs := newHarness(t, nil, nil)
	hs.clk.Advance(700 * time.Millisecond)
	if st := hs.mon.Status(); st.SinceSampleMs != 700 || st.StalenessMs != 3000 || st.HealthyRounds != 0 {
		t.Errorf("before the first sample: since %d ms, staleness %d, rounds %d; want 700, 3000, 0", st.SinceSampleMs, st.StalenessMs, st.HealthyRounds)
	}
	hs.pass(3)
	hs.clk.Advance(1200 * time.Millisecond)
	if st := hs.mon.Status(); st.SinceSampleMs != 1200 || st.HealthyRounds != 3 || st.BoundLimitMs != 250 {
		t.Errorf("after 3 samples: since %d ms, rounds %d, limit %d; want 1200, 3, 250", st.SinceSampleMs, st.HealthyRounds, st.BoundLimitMs)
	}

	clk := clockhealthtest.NewClock(t0)
	clk.Advance(time.Hour) // a monotonic origin far from 0
	host, err := clockhealth.New(clockhealth.Options{Config: clockhealth.DefaultConfig(), Wall: clk, Mono: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	clk.Advance(1500 * time.Millisecond)
	if st := host.Status(); st.SinceSampleMs != 1500 {
		t.Errorf("host mode: since %d ms, want 1500", st.SinceSampleMs)
	}
}

// SPEC §3.1: with a single agent an unreachable round fails with that
// agent's own error; only several agents get the "none answered" count.
func TestSingleUnreachableAgentOwnError(t *testing.T) {
	addr := closedAddr(t)
	hs := newHarness(t, nil, func(o *clockhealth.Options) { o.Config.AgentAddrs = []string{addr} })
	err := hs.mon.Probe(t.Context())
	if err == nil || strings.Contains(err.Error(), "no agent answered") || !strings.Contains(err.Error(), "dial "+addr) {
		t.Fatalf("error %v, want the dial error of %s alone", err, addr)
	}
}

// SPEC §3.1: a liar fails the node while a silent agent of the same round
// is still holding its exchange: the probe timeout is long (20 s) and the
// silent agent is let go only once Failed() has closed.
func TestLiarFailsWhileSilentAgentHolds(t *testing.T) {
	silent := clockhealthtest.StartAgent(t, []byte(vectorSecret), func(protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Hold: true}
	})
	liar := clockhealthtest.StartAgent(t, []byte(vectorSecret), func(protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: []byte("LIES\n")}
	})
	hs := newHarness(t, nil, func(o *clockhealth.Options) {
		o.Config.AgentAddrs = []string{o.Config.AgentAddrs[0], silent.Addr(), liar.Addr()}
		o.Config.ProbeTimeoutMs, o.Config.ProbeIntervalMs, o.Config.StalenessMs = 20000, 20000, 40000
	})
	done := make(chan error, 1)
	go func() { done <- hs.mon.Probe(t.Context()) }()
	select {
	case <-hs.mon.Failed():
	case err := <-done:
		t.Fatalf("the round ended (%v) before the liar failed the node", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the liar did not fail the node while the silent agent held its exchange")
	}
	silent.Close()
	hs.wantFailed(<-done, protocol.ReasonFormat)
}

// DESIGN §6: the FAILED error names the reason, the agent when there is
// one, the detail and the cause — and an Error with none of them set
// still prints.
func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		e    *clockhealth.Error
		want string
	}{
		{&clockhealth.Error{Reason: protocol.ReasonStale}, "clockhealth: FAILED (stale)"},
		{&clockhealth.Error{Reason: protocol.ReasonMAC, Agent: "a:1", Err: protocol.Errorf(protocol.ReasonMAC, "bad")},
			"clockhealth: FAILED (mac) agent a:1: bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	// The zero Secrets collide with nothing, not even an empty secret.
	if (clockhealth.Secrets{}).Collides(nil) {
		t.Error("zero Secrets collide with an empty secret")
	}
}

// /v1/status counts every exchange per agent and clock_sample_rtt_ms is the
// round trip of the last healthy sample (SPEC §5 metrics): an agent that
// takes 7 ms of the monitor's clock to answer shows rtt 7 after each of
// three rounds, and 3 exchanges, 3 ok.
func TestExchangesCountedAndRTTExported(t *testing.T) {
	var hs *harness
	hs = newHarness(t, func(req protocol.Request) clockhealthtest.Reply {
		hs.clk.Advance(7 * time.Millisecond) // the answer takes 7 ms
		return clockhealthtest.Reply{Bytes: hs.agent.Sign(req.Nonce, uint64(hs.clk.WallNs()/1e6), 3, true, 100)}
	}, nil)
	for round := 1; round <= 3; round++ {
		hs.pass(1)
		if v, ok := metric(t, hs.reg, "clock_sample_rtt_ms", "", ""); !ok || v != 7 {
			t.Fatalf("round %d: clock_sample_rtt_ms = %v (%v), want 7", round, v, ok)
		}
	}
	st := hs.mon.Status()
	if len(st.Agents) != 1 || st.Agents[0].Exchanges != 3 || st.Agents[0].OK != 3 {
		t.Fatalf("agent status %+v, want 3 exchanges, 3 ok", st.Agents)
	}
}
