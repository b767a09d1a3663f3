package clockhealth_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
	"github.com/tckclk/tckclk/protocol/vectors"
)

// vectorSecret is the secret of the shared test vectors (SPEC §1.3).
const vectorSecret = "tckclk-test-vector-secret-0123456789abcdef"

// t0 is a whole-millisecond wall time: an agent answering R = wall ms gives
// offset 0.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tlog is a slog handler writing to t.Log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// baseConfig is Δ = 500 ms (limits 125 ms each), interval 1 s, staleness
// 3 s, and a 300 ms real-time exchange deadline.
func baseConfig(addrs ...string) clockhealth.Config {
	c := clockhealth.DefaultConfig()
	c.AgentAddrs = addrs
	c.ProbeTimeoutMs = 300
	return c
}

type harness struct {
	t     *testing.T
	clk   *clockhealthtest.Clock
	agent *clockhealthtest.Agent
	mon   *clockhealth.Monitor
	reg   *prometheus.Registry
}

// healthy answers R = the manual wall clock in ms, u = 3, synced, age 100:
// error bound 0 + 3 + 0 + 1 = 4 ms.
func healthy(clk *clockhealthtest.Clock, a **clockhealthtest.Agent) clockhealthtest.Handler {
	return func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: (*a).Sign(req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 100)}
	}
}

// newHarness starts one agent (with h, or healthy if nil) and a monitor
// pointed at it; edit adjusts the options before New.
func newHarness(t *testing.T, h clockhealthtest.Handler, edit func(*clockhealth.Options)) *harness {
	t.Helper()
	hs := &harness{t: t, clk: clockhealthtest.NewClock(t0), reg: prometheus.NewRegistry()}
	if h == nil {
		h = healthy(hs.clk, &hs.agent)
	}
	hs.agent = clockhealthtest.StartAgent(t, []byte(vectorSecret), h)
	opts := clockhealth.Options{
		Config:     baseConfig(hs.agent.Addr()),
		Secret:     []byte(vectorSecret),
		Wall:       hs.clk,
		Mono:       hs.clk,
		Logger:     testLogger(t),
		Registerer: hs.reg,
	}
	if edit != nil {
		edit(&opts)
	}
	mon, err := clockhealth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs.mon = mon
	t.Cleanup(func() { _ = mon.Close() })
	return hs
}

// pass runs n healthy probe rounds, failing the test otherwise.
func (hs *harness) pass(n int) {
	hs.t.Helper()
	for i := 0; i < n; i++ {
		if err := hs.mon.Probe(hs.t.Context()); err != nil && !errors.Is(err, clockhealth.ErrClockCheck) {
			hs.t.Fatalf("round %d: %v", i+1, err)
		}
	}
}

// reasonOf returns the SPEC §1.5 reason of err ("" for nil).
func reasonOf(t testing.TB, err error) protocol.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	r, ok := protocol.ReasonOf(err)
	if !ok {
		t.Fatalf("error without a SPEC §1.5 reason: %v", err)
	}
	return r
}

// wantFailed asserts the monitor latched FAILED with reason r: the error,
// Check, Status, the stage and Failed() all agree.
func (hs *harness) wantFailed(err error, r protocol.Reason) {
	hs.t.Helper()
	if got := reasonOf(hs.t, err); got != r {
		hs.t.Fatalf("reason %q, want %q (err %v)", got, r, err)
	}
	var ce *clockhealth.Error
	if !errors.As(err, &ce) || ce.Reason != r {
		hs.t.Fatalf("not a *clockhealth.Error with reason %s: %v", r, err)
	}
	if got := reasonOf(hs.t, hs.mon.Check()); got != r {
		hs.t.Fatalf("Check after FAILED: reason %q, want %q", got, r)
	}
	st := hs.mon.Status()
	if st.Stage != clockhealth.StageFailed || st.Reason != r || st.Healthy {
		hs.t.Fatalf("status %+v, want stage failed reason %s", st, r)
	}
	select {
	case <-hs.mon.Failed():
	case <-time.After(5 * time.Second):
		hs.t.Fatal("Failed() not closed")
	}
	if e := hs.mon.Err(); reasonOf(hs.t, e) != r {
		hs.t.Fatalf("Err after Failed(): %v, want reason %s", e, r)
	}
}

// metric returns the value of a gauge or counter with the given label.
func metric(t testing.TB, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue(), true
			}
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// loadVectors returns the shared vectors (protocol/vectors).
func loadVectors(t testing.TB) *vectors.File {
	t.Helper()
	v, err := vectors.Load()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fixedNonce makes the prober's next nonce n (for replaying vector lines).
func fixedNonce(t testing.TB, s string) *bytes.Reader {
	t.Helper()
	n, err := protocol.ParseNonce(s)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(bytes.Repeat(n[:], 8))
}

// closedAddr is a 127.0.0.1 port nothing listens on (connection refused).
func closedAddr(t testing.TB) string {
	t.Helper()
	a := clockhealthtest.StartAgent(t, []byte(vectorSecret), func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{} })
	addr := a.Addr()
	a.Close()
	return addr
}
