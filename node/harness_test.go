package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/cluster"
	"go.uber.org/goleak"
)

// TestMain is goleak.VerifyTestMain with a longer wait for goroutines that
// end by themselves: a memberlist probe in flight when its node shut down
// waits out its probe interval first (seconds, scaled up by memberlist's
// awareness once the peers stopped answering), and since the cluster tests
// run in parallel the package's last test is a cluster's. A goroutine
// still there after leakWait is reported as goleak reports it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(leakWait)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // poll interval of a condition with a deadline
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakWait bounds TestMain's wait for the goroutines still running after
// the last test.
const leakWait = 10 * time.Second

// newManualClock is a manual wall + monotonic clock (Advance moves both,
// as real time does; StepWall moves the wall alone) at a wall time with a
// sub-millisecond part, so rounding up and down differ.
func newManualClock() *clockhealthtest.Clock {
	return clockhealthtest.NewClock(time.UnixMilli(1_700_000_000_000).Add(250 * time.Microsecond))
}

// switchGuard is a ClockGuard whose answer a test sets; it counts calls.
type switchGuard struct {
	err   atomic.Pointer[error]
	calls atomic.Int64
}

func (g *switchGuard) Check() error {
	g.calls.Add(1)
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (g *switchGuard) set(err error) {
	if err == nil {
		g.err.Store(nil)
		return
	}
	g.err.Store(&err)
}

// tlog sends log lines to t.Log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testNode is a node running RunWith in this process on a loopback port.
type testNode struct {
	t      testing.TB
	url    string
	c      *client.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
	tr     *http.Transport
}

func testConfig(t testing.TB, dir string) Config {
	cfg := DefaultConfig()
	cfg.Cluster.Raft.DataDir = dir
	return cfg
}

// startNode starts a node and waits until /readyz answers 200 (or Run
// returns, which fails the test unless wantErr).
func startNode(t testing.TB, cfg Config, deps Deps, opts ...client.Option) *testNode {
	t.Helper()
	return startNodeHooks(t, cfg, deps, testHooks{}, opts...)
}

// startNodeHooks is startNode with this package's test hooks.
func startNodeHooks(t testing.TB, cfg Config, deps Deps, hooks testHooks, opts ...client.Option) *testNode {
	t.Helper()
	tn, err := tryStartHooks(t, cfg, deps, hooks, true, opts...)
	if err != nil {
		t.Fatalf("node did not start: %v", err)
	}
	return tn
}

func tryStart(t testing.TB, cfg Config, deps Deps, waitReady bool, opts ...client.Option) (*testNode, error) {
	t.Helper()
	return tryStartHooks(t, cfg, deps, testHooks{}, waitReady, opts...)
}

// tryStartHooks is tryStart with this package's test hooks.
func tryStartHooks(t testing.TB, cfg Config, deps Deps, hooks testHooks, waitReady bool, opts ...client.Option) (*testNode, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deps.Listener = ln
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	if deps.ExpiryInterval == 0 {
		deps.ExpiryInterval = 5 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	scheme := "http://"
	if cfg.API.TLS.Enabled {
		scheme = "https://"
	}
	tn := &testNode{t: t, url: scheme + ln.Addr().String(), cancel: cancel, done: make(chan error, 1), tr: &http.Transport{}}
	// No failover rounds: the node tests read each answer as the node gave it.
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tn.tr, Timeout: 30 * time.Second}), client.WithFailover(0)}, opts...)
	tn.c, err = client.New(tn.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	go func() { tn.done <- runWith(ctx, cfg, deps, hooks) }()
	t.Cleanup(func() { tn.stop() })
	if !waitReady {
		return tn, nil
	}
	deadline := time.After(20 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := tn.c.Ready(rctx)
		rcancel()
		if err == nil {
			return tn, nil
		}
		select {
		case err := <-tn.done:
			tn.once.Do(func() { tn.err = err })
			return nil, err
		case <-deadline:
			return nil, errors.New("not ready after 20s: " + err.Error())
		case <-time.After(5 * time.Millisecond): // poll interval, not synchronisation
		}
	}
}

// stop cancels the node and returns what Run returned.
func (tn *testNode) stop() error {
	tn.once.Do(func() {
		tn.cancel()
		select {
		case tn.err = <-tn.done:
		case <-time.After(30 * time.Second):
			tn.err = errors.New("node did not stop within 30s")
			// Every goroutine's stack: where the stop is stuck.
			buf := make([]byte, 1<<22)
			tn.t.Errorf("%v; goroutines:\n%s", tn.err, buf[:runtime.Stack(buf, true)])
		}
		tn.tr.CloseIdleConnections()
	})
	return tn.err
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval of a condition with a deadline
	}
}

func writeFile(t testing.TB, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// clusterOf is a cluster node's cluster half as tests look inside it
// (cluster.Internals); the zero Internals for a single node.
func clusterOf(n *server) cluster.Internals {
	if m, ok := n.mode.(clusterMode); ok {
		return m.cl.Internals()
	}
	return cluster.Internals{}
}
