package clockhealth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §3.5: the monitor's own stages are clock_check → checked → failed;
// the node's readiness stages are the node's. A failure after clock_check
// closes Failed() and names the stage it came from.
func TestStagesClockCheckCheckedFailed(t *testing.T) {
	hs := newHarness(t, nil, nil)
	if st := hs.mon.Status(); st.Stage != clockhealth.StageClockCheck || st.Healthy {
		t.Fatalf("before clock_check: %+v", st)
	}
	hs.pass(3)
	if st := hs.mon.Status(); st.Stage != clockhealth.StageChecked || !st.Healthy || !st.ClockCheckPassed {
		t.Fatalf("after clock_check: %+v", st)
	}
	select {
	case <-hs.mon.Failed():
		t.Fatal("Failed() closed while healthy")
	default:
	}
	hs.clk.StepWall(-time.Second)
	err := hs.mon.Check()
	hs.wantFailed(err, protocol.ReasonRollback)
	var ce *clockhealth.Error
	if !errors.As(err, &ce) || ce.Stage != clockhealth.StageChecked {
		t.Fatalf("failed stage: %v", err)
	}
	if st := hs.mon.Status(); st.FailedStage != clockhealth.StageChecked {
		t.Fatalf("status %+v", st)
	}
}

// SPEC §3.5, §3.3-4: Start runs the prober (first round at once, then one
// per tick) and the watchdog; ClockCheck returns after 3 healthy rounds. A
// prober that stalls is caught by the watchdog as stale, and Close returns.
func TestStartStalledProberGoesStale(t *testing.T) {
	tickers := clockhealthtest.NewTickers()
	release := make(chan struct{})
	var dials atomic.Int64
	stalling := dialFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) > 3 {
			<-release // a stalled prober: ignores its deadline
			return nil, errors.New("released")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	hs := newHarness(t, nil, func(o *clockhealth.Options) {
		o.Dialer = stalling
		o.NewTicker = func(name string, d time.Duration) clockhealth.Ticker { return tickers.New(name, d) }
	})
	if err := hs.mon.Start(); err != nil {
		t.Fatal(err)
	}
	if err := hs.mon.Start(); err == nil {
		t.Fatal("second Start accepted")
	}
	for range 2 {
		if !tickers.Fire("probe", 5*time.Second) {
			t.Fatal("probe loop did not take a tick")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := hs.mon.ClockCheck(ctx); err != nil {
		t.Fatal(err)
	}
	if w := tickers.Get("watchdog", time.Second); w == nil || w.Period != 250*time.Millisecond {
		t.Fatalf("watchdog ticker %+v", w)
	}
	if !tickers.Fire("probe", 5*time.Second) { // round 4 stalls in the dialer
		t.Fatal("probe loop did not take a tick")
	}
	hs.clk.Advance(3*time.Second + 1)
	if !tickers.Fire("watchdog", 5*time.Second) {
		t.Fatal("watchdog did not take a tick")
	}
	select {
	case <-hs.mon.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("watchdog did not catch the stalled prober")
	}
	hs.wantFailed(hs.mon.Err(), protocol.ReasonStale)
	close(release)
	if err := hs.mon.Close(); err != nil {
		t.Fatal(err)
	}
}

// SPEC §3.3-1: Close during an exchange ends it without FAILED.
func TestCloseDuringExchange(t *testing.T) {
	got, h := holdAndSignal()
	hs := newHarness(t, h, func(o *clockhealth.Options) { o.Config.ProbeTimeoutMs = 1000 })
	if err := hs.mon.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent saw no request")
	}
	start := time.Now()
	_ = hs.mon.Close()
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Fatalf("Close waited %v for the exchange deadline", el)
	}
	if err := hs.mon.Err(); err != nil {
		t.Fatalf("Close latched %v", err)
	}
}

// holdAndSignal is an agent that never answers and signals its first request.
func holdAndSignal() (<-chan struct{}, clockhealthtest.Handler) {
	got := make(chan struct{})
	var once sync.Once
	return got, func(protocol.Request) clockhealthtest.Reply {
		once.Do(func() { close(got) })
		return clockhealthtest.Reply{Hold: true}
	}
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// SPEC §4.1, §3.5: the status snapshot serves as JSON.
func TestStatusJSON(t *testing.T) {
	hs := checked(t, nil)
	raw, err := json.Marshal(hs.mon.Status())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"stage", "healthy", "mode", "dev_reference", "delta_ms", "bound_ms", "bound_limit_ms", "last_sample", "agents", "since_sample_ms"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("key %q missing in %s", k, raw)
		}
	}
	ls := m["last_sample"].(map[string]any)
	for _, k := range []string{"agent", "reference_unix_ms", "uncertainty_ms", "rtt_ms", "offset_ms", "source_age_ms", "error_bound_ms", "at_unix_ms"} {
		if _, ok := ls[k]; !ok {
			t.Fatalf("last_sample key %q missing in %s", k, raw)
		}
	}
	if m["stage"] != "checked" || m["healthy"] != true {
		t.Fatalf("%s", raw)
	}
}

// SPEC §5, §1.5: every reason label exists before any failure; a second
// registration on the same registry is refused and leaves nothing behind.
func TestMetricsPreRegistered(t *testing.T) {
	hs := newHarness(t, nil, nil)
	for _, r := range protocol.Reasons() {
		if _, ok := metric(t, hs.reg, "clock_failures_total", "reason", string(r)); !ok {
			t.Fatalf("clock_failures_total{reason=%q} missing", r)
		}
		if _, ok := metric(t, hs.reg, "clock_samples_total", "result", string(r)); !ok {
			t.Fatalf("clock_samples_total{result=%q} missing", r)
		}
	}
	for _, r := range []string{"ok", "slow", "incomplete", "size", "format", "version", "nonce", "mac", "unsynced",
		"source_age", "uncertainty", "offset", "bound"} {
		if _, ok := metric(t, hs.reg, "clock_exchanges_total", "result", r); !ok {
			t.Fatalf("clock_exchanges_total{result=%q} missing", r)
		}
	}
	for _, name := range []string{"clock_health_state", "clock_error_bound_ms", "clock_sample_rtt_ms", "clock_dev_reference"} {
		if _, ok := metric(t, hs.reg, name, "", ""); !ok {
			t.Fatalf("%s missing", name)
		}
	}
	opts := clockhealth.Options{Config: clockhealth.DefaultConfig(), Registerer: hs.reg}
	if _, err := clockhealth.New(opts); err == nil {
		t.Fatal("duplicate registration accepted")
	}
	// A clash on the fourth collector unregisters the first three.
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "clock_dev_reference", Help: "squatter"}))
	opts.Registerer = reg
	if _, err := clockhealth.New(opts); err == nil {
		t.Fatal("clashing registration accepted")
	}
	if _, ok := metric(t, reg, "clock_health_state", "", ""); ok {
		t.Fatal("a refused registration left clock_health_state behind")
	}
}

// SPEC §3.1, §3.5, §3.4: with the system clock and real tickers, the
// monitor passes clock_check against an agent reading real time, stays
// healthy, and latches FAILED within a few intervals once the agent turns
// unsynced.
func TestSystemClockEndToEnd(t *testing.T) {
	var synced atomic.Bool
	synced.Store(true)
	var agent *clockhealthtest.Agent
	agent = clockhealthtest.StartAgent(t, []byte(vectorSecret), func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: agent.Sign(req.Nonce, uint64(time.Now().UnixMilli()), 2, synced.Load(), 10)}
	})
	cfg := baseConfig(agent.Addr())
	cfg.ProbeIntervalMs = 100
	cfg.ProbeTimeoutMs = 100
	cfg.StalenessMs = 5000
	mon, err := clockhealth.New(clockhealth.Options{Config: cfg, Secret: []byte(vectorSecret), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := mon.ClockCheck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mon.Check(); err != nil {
		t.Fatal(err)
	}
	if st := mon.Status(); st.LastSample == nil || st.BoundMs > 250 || st.BoundMs < 3 {
		t.Fatalf("status %+v", st)
	}
	synced.Store(false)
	select {
	case <-mon.Failed():
	case <-ctx.Done():
		t.Fatal("not FAILED after the agent turned unsynced")
	}
	if r := reasonOf(t, mon.Check()); r != protocol.ReasonUnsynced {
		t.Fatalf("reason %q", r)
	}
}
