package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/protocol"
	"github.com/tckclk/tckclk/protocol/vectors"
)

func TestMain(m *testing.M) {
	// The slowloris benchmark's child processes.
	if spec, ok := os.LookupEnv(holderEnv); ok {
		runHolder(spec)
		os.Exit(0)
	}
	if readMs, ok := os.LookupEnv(benchAgentEnv); ok {
		runBenchAgent(readMs)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// facebook/time's NTP responder never stops its workers, listeners
		// and checker (it has no shutdown); the real-peer tests start it once.
		goleak.IgnoreTopFunction("github.com/facebook/time/ntp/responder/server.(*Server).startWorker"),
		goleak.IgnoreTopFunction("github.com/facebook/time/timestamp.ReadPacketWithRXTimestampBuf"),
		goleak.IgnoreAnyFunction("github.com/facebook/time/ntp/responder/server.(*Server).Start.func1"),
		goleak.IgnoreAnyFunction("github.com/facebook/time/ntp/responder/server.(*Server).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/facebook/time/ntp/responder/server.(*Server).Start"),
	)
}

// testSecret is 40 bytes; the tests write it to a 0600 file.
var testSecret = []byte("tckclk-agent-test-secret-0123456789abcd")

// tLog is a slog handler writing to t.Log.
type tWriter struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t, on: true}
	t.Cleanup(func() { w.mu.Lock(); w.on = false; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func writeSecret(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func noEnv(string) (string, bool) { return "", false }

// devConfig is a --dev agent on loopback ports picked by the kernel.
func devConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Dev = true
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = "127.0.0.1:0"
	cfg.SecretFile = writeSecret(t, testSecret)
	return cfg
}

// running is an agent started by startAgent, stopped by t.Cleanup.
type running struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t testing.TB, cfg Config, opts Options) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.Env == nil {
		opts.Env = noEnv
	}
	a, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-r.done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("agent not ready within 10 s")
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		r.done <- nil // a second stop returns at once
	case <-time.After(15 * time.Second):
		t.Error("agent did not stop within 15 s")
	}
}

// exchange does one full client exchange (SPEC §1.1) and returns the raw
// line (without LF) and the parse/verify result under keys.
func exchange(addr string, keys protocol.KeyRing, timeout time.Duration) (protocol.Response, error) {
	nonce, err := protocol.NewNonce()
	if err != nil {
		return protocol.Response{}, err
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return protocol.Response{}, protocol.Wrap(protocol.ReasonConnect, "dial", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(protocol.EncodeRequest(protocol.Request{Nonce: nonce})); err != nil {
		return protocol.Response{}, protocol.Wrap(protocol.ReasonIO, "write", err)
	}
	lr := protocol.NewLineReader(c)
	line, err := lr.ReadLine()
	if err != nil {
		return protocol.Response{}, err
	}
	if err := lr.ExpectEOF(); err != nil {
		return protocol.Response{}, err
	}
	return protocol.ParseVerify(line, nonce, keys)
}

// sendRaw writes b and returns everything the agent sends before closing,
// and how long the close took.
func sendRaw(t testing.TB, addr string, b []byte, deadline time.Duration) ([]byte, time.Duration, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(deadline))
	if len(b) > 0 {
		if _, err := c.Write(b); err != nil {
			return nil, 0, err
		}
	}
	got, err := io.ReadAll(c)
	return got, time.Since(start), err
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getStatus(t testing.TB, r *running) Status {
	t.Helper()
	code, body := httpGet(t, "http://"+r.HTTPAddr().String()+"/v1/status")
	if code != 200 {
		t.Fatalf("/v1/status: %d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/v1/status: %v: %s", err, body)
	}
	return st
}

// waitFor polls cond until it holds or the deadline passes (a condition
// with a deadline, not a sleep standing in for synchronisation).
func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue returns the value of one sample line of /metrics, e.g.
// `tckclk_agent_requests_total{result="format"}`.
func metricValue(t testing.TB, r *running, series string) (string, bool) {
	t.Helper()
	_, body := httpGet(t, "http://"+r.HTTPAddr().String()+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// quietLogger discards (benchmarks).
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
