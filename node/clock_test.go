package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/protocol"
)

// clockSecret is the clock-agent secret of these tests (≥ 32 bytes).
const clockSecret = "node-test-clock-secret-0123456789abcdef"

// wantClockFailed asserts that a write is refused with 503, stage failed
// and reason r, and that /readyz says the same.
func wantClockFailed(t *testing.T, tn *testNode, r protocol.Reason) {
	t.Helper()
	var ce *client.Error
	_, err := tn.c.Grant(bg, "after-failed", "h", 30)
	if !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Stage != string(stage.Failed) || ce.Reason != string(r) ||
		!strings.Contains(ce.Message, "FAILED ("+string(r)+")") {
		t.Fatalf("grant on a FAILED clock: %v; want 503 stage failed reason %s", err, r)
	}
	a := do(t, tn, "GET", "/readyz", "")
	var h wire.Health
	mustJSON(t, a.raw, &h)
	if a.status != 503 || h.Stage != string(stage.Failed) || h.Reason != string(r) || !strings.Contains(h.Detail, string(r)) {
		t.Fatalf("/readyz on a FAILED clock: %d %s", a.status, a.raw)
	}
}

// metricLine returns the value text of one exposition line of /metrics
// ("name{labels}" as written), or "" when absent.
func metricLine(t *testing.T, tn *testNode, series string) string {
	t.Helper()
	for _, l := range strings.Split(do(t, tn, "GET", "/metrics", "").raw, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

func mustJSON(t *testing.T, raw string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		t.Fatalf("not JSON (%v): %s", err, raw)
	}
}

// markerRecorded: /v1/status says this run wrote its FAILED marker.
func markerRecorded(t *testing.T, tn *testNode) bool {
	st, err := tn.c.Status(bg)
	return err == nil && st.Clock.FailedMarker == "written"
}

func markerExists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, datadir.FailedFile))
	return err == nil
}

// SPEC §4, §3.3-5, §3.4: a single node without an agent watches the host
// clock. A rollback latches FAILED: writes are 503 with stage failed and
// reason rollback, /readyz fails, the metrics say so, the FAILED marker is
// written; afterwards healthy readings (the clock put right, time moving
// on) change nothing.
func TestHostRollbackLatchesFailed(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	tn := startNode(t, testConfig(t, dir), Deps{Wall: clk})
	if _, err := tn.c.Grant(bg, "a", "h", 30); err != nil {
		t.Fatal(err)
	}
	if v := metricLine(t, tn, "clock_health_state"); v != "1" {
		t.Fatalf("clock_health_state %q before the rollback", v)
	}
	if markerExists(dir) {
		t.Fatal("a FAILED marker exists on a healthy node")
	}
	if a := do(t, tn, "GET", "/livez", ""); a.status != 200 {
		t.Fatalf("/livez on a healthy node: %d %s", a.status, a.raw)
	}
	clk.StepWall(-2 * time.Second)
	wantClockFailed(t, tn, protocol.ReasonRollback)
	// SPEC §5 liveness: a FAILED clock is not live.
	if a := do(t, tn, "GET", "/livez", ""); a.status != 503 || !strings.Contains(a.raw, `"reason":"clock"`) {
		t.Fatalf("/livez on a FAILED node: %d %s", a.status, a.raw)
	}
	// The run loop writes the marker on its own goroutine after the latch,
	// then records that it did: wait for both.
	waitFor(t, "the FAILED marker", 5*time.Second, func() bool { return markerExists(dir) && markerRecorded(t, tn) })

	clk.StepWall(2 * time.Second) // the wall clock is right again
	clk.Advance(time.Minute)
	wantClockFailed(t, tn, protocol.ReasonRollback)
	if _, err := tn.c.Release(bg, "a", "h", 1); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("release on a FAILED node: %v", err)
	}
	if _, err := tn.c.Get(bg, "a"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("get on a FAILED node: %v", err)
	}
	st, err := tn.c.Status(bg)
	if err != nil || st.Stage != "failed" || st.Clock.Source != "host" || st.Clock.Stage != "failed" || st.Clock.Reason != "rollback" ||
		st.Clock.Healthy || st.Clock.FailedMarker != "written" || st.Clock.ClockStages == "" {
		t.Fatalf("status %+v %v", st, err)
	}
	if v := metricLine(t, tn, "clock_health_state"); v != "-1" {
		t.Fatalf("clock_health_state %q after FAILED", v)
	}
	if v := metricLine(t, tn, `clock_failures_total{reason="rollback"}`); v != "1" {
		t.Fatalf(`clock_failures_total{reason="rollback"} %q`, v)
	}
	var ce *clockhealth.Error
	if err := tn.stop(); !errors.As(err, &ce) || ce.Reason != protocol.ReasonRollback {
		t.Fatalf("Run after FAILED returned %v; want the clock error", err)
	}
}

// SPEC §3.2, §3.3-5, §4: a wall step within Δ/2 (since the watcher
// started) is tolerated; one that pushes |Δwall − Δmono| past Δ/2 = 250 ms
// latches FAILED with reason step.
func TestHostStepLatchesFailed(t *testing.T) {
	clk := newManualClock()
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Wall: clk})
	clk.StepWall(100 * time.Millisecond)
	if _, err := tn.c.Grant(bg, "a", "h", 30); err != nil {
		t.Fatalf("grant after a 100 ms step (bound 100 ≤ 250): %v", err)
	}
	clk.StepWall(200 * time.Millisecond)
	wantClockFailed(t, tn, protocol.ReasonStep)
	clk.StepWall(-300 * time.Millisecond) // undoing the step is a rollback now, and changes nothing
	clk.Advance(time.Second)
	wantClockFailed(t, tn, protocol.ReasonStep)
	_ = tn.stop()
}

// SPEC §4 (single-node restart after FAILED): a restart on the data dir
// refuses Grant and Expire for 250 s + Δ from the restart; /readyz and
// /v1/status say hold_off and until when; a restart during the hold-off
// holds off again from that restart; once a hold-off has passed with a
// healthy clock the marker is removed and the next start is ready at once.
func TestRestartAfterFailedHoldsOff(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	cfg := testConfig(t, dir)
	tn := startNode(t, cfg, Deps{Wall: clk})
	a, err := tn.c.Grant(bg, "a", "h", 1)
	if err != nil {
		t.Fatal(err)
	}
	clk.StepWall(time.Second)
	wantClockFailed(t, tn, protocol.ReasonStep)
	// The run loop writes the marker on its own goroutine after the latch,
	// then records that it did: wait for both.
	waitFor(t, "the FAILED marker", 5*time.Second, func() bool { return markerExists(dir) && markerRecorded(t, tn) })
	_ = tn.stop()

	holdOff := 250*time.Second + 500*time.Millisecond
	var node *server
	restart := func() (*testNode, time.Time) {
		t.Helper()
		start := clk.Now()
		tn, err := tryStartHooks(t, cfg, Deps{Wall: clk}, testHooks{built: func(n *server) { node = n }}, false)
		if err != nil {
			t.Fatal(err)
		}
		var ce *client.Error
		waitFor(t, "stage hold_off", 10*time.Second, func() bool {
			_, err := tn.c.Ready(bg)
			return errors.As(err, &ce) && ce.Stage == string(stage.HoldOff)
		})
		return tn, start
	}
	tn, start := restart()
	wantUntil := uint64(start.Add(holdOff).UnixMilli()) + 1 // rounded up
	st, err := tn.c.Status(bg)
	if err != nil || st.HoldOffUntilUnixMs != wantUntil || !strings.Contains(st.HoldOffCause, "reason step") || st.Ready || st.Stage != "hold_off" {
		t.Fatalf("status during hold-off %+v %v (want until %d)", st, err, wantUntil)
	}
	h := do(t, tn, "GET", "/readyz", "")
	if h.status != 503 || !strings.Contains(h.raw, `"hold_off_until_unix_ms":`) || !strings.Contains(h.raw, "reason step") {
		t.Fatalf("/readyz during hold-off: %d %s", h.status, h.raw)
	}
	var ce *client.Error
	if _, err := tn.c.Grant(bg, "b", "h", 30); !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Reason != "hold_off" {
		t.Fatalf("grant during hold-off: %v", err)
	}
	clk.Advance(100 * time.Second) // "a" is long past its expiry, but Expire is held off
	r0 := node.expiryRounds.Load()
	waitFor(t, "expiry-loop rounds", 5*time.Second, func() bool { return node.expiryRounds.Load() >= r0+5 })
	if got, err := tn.c.Get(bg, "a"); err != nil || got.Token != a.Token {
		t.Fatalf("a during hold-off: %+v %v", got, err)
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}

	// A restart during the hold-off holds off again, from this restart.
	tn, start2 := restart()
	if st, _ := tn.c.Status(bg); st.HoldOffUntilUnixMs != uint64(start2.Add(holdOff).UnixMilli())+1 {
		t.Fatalf("second restart: hold-off until %d, want start + 250.5 s", st.HoldOffUntilUnixMs)
	}
	clk.Advance(200 * time.Second)
	if _, err := tn.c.Grant(bg, "b", "h", 30); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("grant 200 s into the second hold-off: %v", err)
	}
	if !markerExists(dir) {
		t.Fatal("marker removed before the hold-off passed")
	}
	clk.Advance(51 * time.Second)
	waitFor(t, "expiry after the hold-off", 5*time.Second, gone(tn, "a"))
	waitFor(t, "the marker removed", 5*time.Second, func() bool { return !markerExists(dir) })
	if _, err := tn.c.Grant(bg, "b", "h", 30); err != nil {
		t.Fatalf("grant after the hold-off: %v", err)
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	tn = startNode(t, cfg, Deps{Wall: clk}) // ready at once: no hold-off
	if st, _ := tn.c.Status(bg); st.HoldOffUntilUnixMs != 0 || !st.Ready {
		t.Fatalf("start after the marker was removed: %+v", st)
	}
}

// agentNode runs a node against an in-process agent on the manual clock,
// with manual tickers: the probe loop's first round runs at once, each
// later one when the test fires "probe".
type agentNode struct {
	clk   *clockhealthtest.Clock
	agent *clockhealthtest.Agent
	ts    *clockhealthtest.Tickers
	cfg   Config
	deps  Deps
	hooks testHooks // a cluster member's (cluster_test.go)
}

func newAgentNode(t *testing.T, dir string, key []byte, edit func(*Config)) *agentNode {
	t.Helper()
	an := &agentNode{clk: newManualClock(), ts: clockhealthtest.NewTickers()}
	an.agent = clockhealthtest.StartAgent(t, key, func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: an.agent.Sign(req.Nonce, uint64(an.clk.WallNs()/1e6), 3, true, 100)}
	})
	an.cfg = testConfig(t, dir)
	an.cfg.Clock.AgentAddr = an.agent.Addr()
	an.cfg.Clock.SecretFile = writeFile(t, t.TempDir(), "clock.secret", clockSecret, 0o600)
	if edit != nil {
		edit(&an.cfg)
	}
	an.deps = Deps{Wall: an.clk, Env: noEnv, ClockTicker: func(n string, d time.Duration) clockhealth.Ticker { return an.ts.New(n, d) }}
	return an
}

// runRefused runs a node that must refuse to start, and returns Run's error.
func runRefused(t *testing.T, cfg Config, deps Deps) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deps.Listener, deps.Logger = ln, testLogger(t)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	err = RunWith(ctx, cfg, deps)
	if ctx.Err() != nil {
		t.Fatal("the node did not refuse to start within 30 s")
	}
	return err
}

func noEnv(string) (string, bool) { return "", false }

// SPEC §3.5, §3.3-2, §3.4: with an agent, the node reports clock_check on
// /readyz and opens no Raft until 3 consecutive healthy samples; then it is
// ready and grants. A MAC failure afterwards latches FAILED: 503 with
// reason mac, the FAILED marker written.
func TestAgentClockCheckThenFailed(t *testing.T) {
	dir := t.TempDir()
	an := newAgentNode(t, dir, []byte(clockSecret), nil)
	tn, err := tryStart(t, an.cfg, an.deps, false)
	if err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	waitFor(t, "stage clock_check after one sample", 10*time.Second, func() bool {
		_, err := tn.c.Ready(bg)
		return errors.As(err, &ce) && ce.Stage == string(stage.ClockCheck) && strings.Contains(ce.Message, "1 of 3")
	})
	if _, err := os.Stat(filepath.Join(dir, datadir.RaftDBFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("raft.db exists during clock_check (%v): Raft opened before the clock was proven", err)
	}
	if _, err := tn.c.Grant(bg, "a", "h", 30); !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Stage != string(stage.ClockCheck) {
		t.Fatalf("grant during clock_check: %v", err)
	}
	for range 2 {
		if !an.ts.Fire("probe", 5*time.Second) {
			t.Fatal("probe ticker not taken")
		}
	}
	waitFor(t, "ready after clock_check", 10*time.Second, func() bool { _, err := tn.c.Ready(bg); return err == nil })
	if _, err := tn.c.Grant(bg, "a", "h", 30); err != nil {
		t.Fatal(err)
	}
	// Error bound: rtt 0 (the manual clock stands still) + u 3 + offset
	// ceil(0.25 ms) = 1 + 1 = 5 ms.
	st, _ := tn.c.Status(bg)
	if st.Clock.Source != "agent" || st.Clock.Stage != "ready" || !st.Clock.Healthy || st.Clock.LastSample == nil ||
		st.Clock.LastSample.ErrorBoundMs != 5 || len(st.Clock.Agents) != 1 || st.Clock.Agents[0].OK < 3 || st.Clock.DevReference {
		t.Fatalf("clock status %+v", st.Clock)
	}
	// SPEC §5: the clock metrics are on the node's /metrics.
	for _, series := range []string{"clock_health_state", "clock_error_bound_ms", "clock_sample_rtt_ms",
		`clock_samples_total{result="ok"}`, `clock_failures_total{reason="mac"}`, "clock_dev_reference"} {
		if metricLine(t, tn, series) == "" {
			t.Errorf("%s missing from /metrics", series)
		}
	}
	if v := metricLine(t, tn, "clock_health_state"); v != "1" {
		t.Errorf("clock_health_state %q when ready", v)
	}
	// The healthy limit Δ/2 beside the bound, for alerts (deploy/prometheus).
	if v, want := metricLine(t, tn, "clock_bound_limit_ms"), fmt.Sprint(an.cfg.Clock.DeltaMs/2); v != want {
		t.Errorf("clock_bound_limit_ms %q, want Δ/2 = %s", v, want)
	}

	wrong := protocol.NewKey([]byte("another-secret-that-is-long-enough-000"))
	an.agent.SetHandler(func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(wrong, req.Nonce, uint64(an.clk.WallNs()/1e6), 3, true, 100)}
	})
	if !an.ts.Fire("probe", 5*time.Second) {
		t.Fatal("probe ticker not taken")
	}
	waitFor(t, "FAILED", 5*time.Second, func() bool { return markerExists(dir) })
	wantClockFailed(t, tn, protocol.ReasonMAC)
	if v := metricLine(t, tn, `clock_samples_total{result="mac"}`); v != "1" {
		t.Fatalf(`clock_samples_total{result="mac"} %q`, v)
	}
	_ = tn.stop()
}

// SPEC §3.4, §3.5: a clock_check that fails (dead agent port) ends Run with
// the connect reason before Raft opened, and records nothing: no FAILED
// marker, no retired marker, no raft.db; the node may start again.
func TestClockCheckFailureRecordsNothing(t *testing.T) {
	dir := t.TempDir()
	an := newAgentNode(t, dir, []byte(clockSecret), nil)
	an.agent.Close()
	err := runRefused(t, an.cfg, an.deps)
	var ce *clockhealth.Error
	if !errors.As(err, &ce) || ce.Reason != protocol.ReasonConnect || ce.Stage != clockhealth.StageClockCheck || !strings.Contains(err.Error(), "clock_check failed") {
		t.Fatalf("start against a dead agent: %v", err)
	}
	for _, f := range []string{datadir.FailedFile, datadir.RetiredFile, datadir.RaftDBFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a clock_check failure: %v", f, err)
		}
	}
}

// SPEC §3.4: a retired data dir is refused with the message that tells the
// operator to bring a new NodeId.
func TestRetiredDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	d, err := datadir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRetired("clockhealth: FAILED (rollback)"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	err = runRefused(t, testConfig(t, dir), Deps{})
	if !errors.Is(err, datadir.ErrRetired) || !strings.Contains(err.Error(), "new NodeId") {
		t.Fatalf("start on a retired data dir: %v", err)
	}
}

// SPEC §2.2, §1.3: with clock.dev_reference the node accepts only dev_key
// samples and labels it on /readyz, /v1/status and in the metrics.
func TestDevReferenceLabelled(t *testing.T) {
	an := newAgentNode(t, t.TempDir(), protocol.DevKey([]byte(clockSecret)), func(c *Config) { c.Clock.DevReference = true })
	tn, err := tryStart(t, an.cfg, an.deps, false)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range 2 {
			an.ts.Fire("probe", 5*time.Second)
		}
	}()
	waitFor(t, "ready", 10*time.Second, func() bool { _, err := tn.c.Ready(bg); return err == nil })
	if a := do(t, tn, "GET", "/readyz", ""); a.status != 200 || !strings.Contains(a.raw, `"dev_reference":true`) {
		t.Fatalf("/readyz %d %s", a.status, a.raw)
	}
	if st, _ := tn.c.Status(bg); !st.Clock.DevReference || !st.Clock.Healthy {
		t.Fatalf("status clock %+v", st.Clock)
	}
	if v := metricLine(t, tn, "clock_dev_reference"); v != "1" {
		t.Fatalf("clock_dev_reference %q", v)
	}
	if _, err := tn.c.Grant(bg, "a", "h", 5); err != nil {
		t.Fatal(err)
	}
}

// SPEC §1.4: the clock secret must differ from the API tokens; the start
// is refused naming both keys, and neither value is printed.
func TestClockSecretDistinctFromTokens(t *testing.T) {
	an := newAgentNode(t, t.TempDir(), []byte(clockSecret), nil)
	an.cfg.API.TokenFile = writeFile(t, t.TempDir(), "client.token", clockSecret+"\n", 0o600)
	err := runRefused(t, an.cfg, an.deps)
	if err == nil || !strings.Contains(err.Error(), "clock.secret_file: holds the same secret as api.token_file") || strings.Contains(err.Error(), clockSecret) {
		t.Fatalf("clock secret equal to the client token: %v", err)
	}
	an.cfg.API.TokenFile = ""
	env := func(k string) (string, bool) {
		if k == "CLUSTER_CLOCK_AGENT_SECRET" {
			return clockSecret, true
		}
		return "", false
	}
	an.cfg.Clock.SecretFile = ""
	an.cfg.API.AdminTokenFile = writeFile(t, t.TempDir(), "admin.token", clockSecret, 0o600)
	an.deps.Env = env
	err = runRefused(t, an.cfg, an.deps)
	if err == nil || !strings.Contains(err.Error(), "environment CLUSTER_CLOCK_AGENT_SECRET: holds the same secret as api.admin_token_file") {
		t.Fatalf("clock secret (environment) equal to the admin token: %v", err)
	}
}
