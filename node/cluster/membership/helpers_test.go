package membership

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines. memberlist's Shutdown returns
// before an in-flight probe finishes waiting for its ack (up to one
// awareness-scaled probe interval), so Find is given several rounds (each
// retries for about a second) before a straggler counts as a leak.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var err error
		for range 10 {
			if err = goleak.Find(); err == nil {
				break
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// trustMap is a mutable in-memory TrustSource.
type trustMap struct {
	mu sync.RWMutex
	m  map[string]ed25519.PublicKey
}

func newTrust() *trustMap { return &trustMap{m: map[string]ed25519.PublicKey{}} }

func (t *trustMap) Lookup(id string) (ed25519.PublicKey, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	k, ok := t.m[id]
	return k, ok
}

func (t *trustMap) set(id string, k ed25519.PublicKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[id] = k
}

func (t *trustMap) del(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// testKeys maps every public key newKey made to its private key.
var testKeys sync.Map // string(pub) → ed25519.PrivateKey

func newKey(t *testing.T) ed25519.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	testKeys.Store(string(pub), priv)
	return pub
}

// privOf is the private key of a public key newKey made.
func privOf(t *testing.T, pub ed25519.PublicKey) ed25519.PrivateKey {
	t.Helper()
	k, ok := testKeys.Load(string(pub))
	if !ok {
		t.Fatal("privOf: a key newKey did not make")
	}
	return k.(ed25519.PrivateKey)
}

// content is m without what Membership adds (NodeID, Seq): what a
// node's Config.Meta returned.
func content(m Meta) Meta {
	m.NodeID, m.Seq = "", 0
	return m
}

// logSink is an slog handler that writes to t.Log until the test ends and
// hands every record's text to the watchers waiting for it.
type logSink struct {
	mu       sync.Mutex
	t        *testing.T
	done     bool
	lines    []string
	changed  chan struct{} // closed and replaced on every record
	prefix   string
	minLevel slog.Level
}

func newLogSink(t *testing.T, prefix string) *logSink {
	s := &logSink{t: t, changed: make(chan struct{}), prefix: prefix, minLevel: slog.LevelInfo}
	t.Cleanup(func() { s.mu.Lock(); s.done = true; s.mu.Unlock() })
	return s
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler       { return s } // attrs of With are not needed by the tests
func (s *logSink) WithGroup(string) slog.Handler            { return s }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	line := b.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	if r.Level >= s.minLevel {
		s.t.Log(s.prefix + ": " + line)
	}
	s.lines = append(s.lines, line)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// waitLog waits until a record containing every part has been logged.
func (s *logSink) waitLog(t *testing.T, d time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		for ; seen < len(s.lines); seen++ {
			if containsAll(s.lines[seen], parts) {
				line := s.lines[seen]
				s.mu.Unlock()
				return line
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: no log line with %q within %v", s.prefix, parts, d)
		}
	}
}

// count is how many records logged so far contain part.
func (s *logSink) count(part string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.Contains(l, part) {
			n++
		}
	}
	return n
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// fastTiming makes failure detection take well under a second on loopback.
func fastTiming() Timing {
	return Timing{
		ProbeInterval:       100 * time.Millisecond,
		ProbeTimeout:        80 * time.Millisecond,
		SuspicionMult:       2,
		GossipInterval:      50 * time.Millisecond,
		GossipToTheDeadTime: 5 * time.Second,
		PushPullInterval:    300 * time.Millisecond,
		TCPTimeout:          500 * time.Millisecond,
		DeadNodeReclaimTime: 200 * time.Millisecond,
	}
}

type testNode struct {
	name  string
	key   ed25519.PublicKey
	trust *trustMap
	reg   *prometheus.Registry
	logs  *logSink
	m     *Membership

	mu   sync.Mutex
	meta Meta
}

func (n *testNode) currentMeta() Meta {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.meta
}

func (n *testNode) setMeta(f func(*Meta)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(&n.meta)
}

type nodeOpt func(*Config)

func withJoin(addrs ...string) nodeOpt { return func(c *Config) { c.JoinAddrs = addrs } }

// newTestNode builds (not starts) a node on 127.0.0.1 with an ephemeral
// port, fast timings, its own registry and logger. trust may be shared.
func newTestNode(t *testing.T, name string, key ed25519.PublicKey, trust *trustMap, opts ...nodeOpt) *testNode {
	t.Helper()
	n := &testNode{name: name, key: key, trust: trust, reg: prometheus.NewRegistry(), logs: newLogSink(t, name)}
	n.meta = content(sampleMeta())
	copy(n.meta.PublicKey[:], key)
	n.meta.MeshAddr = "127.0.0.1:" + strconv.Itoa(7950+len(name))
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.BindAddr = "127.0.0.1"
	cfg.BindPort = 0
	cfg.Secret = testSecret
	cfg.Meta = n.currentMeta
	cfg.Key = privOf(t, key)
	cfg.Trust = trust
	cfg.Logger = slog.New(n.logs)
	cfg.Registerer = n.reg
	cfg.JoinBackoffMin = 50 * time.Millisecond
	cfg.JoinBackoffMax = 200 * time.Millisecond
	cfg.RejoinInterval = 100 * time.Millisecond
	cfg.Timing = fastTiming()
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	n.m = m
	t.Cleanup(func() { _ = m.Close() })
	return n
}

func startTestNode(t *testing.T, name string, key ed25519.PublicKey, trust *trustMap, opts ...nodeOpt) *testNode {
	t.Helper()
	n := newTestNode(t, name, key, trust, opts...)
	if err := n.m.Start(); err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	return n
}

// waitView waits, on n's own events, until cond holds for n's Members.
func waitView(t *testing.T, n *testNode, d time.Duration, what string, cond func([]Member) bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		ms := n.m.Members()
		if cond(ms) {
			return
		}
		select {
		case _, ok := <-n.m.Events():
			if !ok {
				t.Fatalf("%s: events closed while waiting for %s", n.name, what)
			}
		case <-deadline.C:
			t.Fatalf("%s: not %s within %v; view: %s", n.name, what, d, describeView(ms))
		}
	}
}

func describeView(ms []Member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%s %s %s] ", m.ID, m.Addr, m.State)
	}
	return b.String()
}

func find(ms []Member, id string) (Member, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// aliveWith holds when every node in want is alive in the view with its
// current metadata, and nobody else is alive.
func aliveWith(want ...*testNode) func([]Member) bool {
	return func(ms []Member) bool {
		alive := 0
		for _, m := range ms {
			if m.State == StateAlive {
				alive++
			}
		}
		if alive != len(want) {
			return false
		}
		for _, w := range want {
			m, ok := find(ms, w.name)
			if !ok || m.State != StateAlive || content(m.Meta) != w.currentMeta() {
				return false
			}
		}
		return true
	}
}

func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	t.Fatal("not a counter or gauge")
	return 0
}

func histogram(t *testing.T, h prometheus.Histogram) (count uint64, sum float64) {
	t.Helper()
	var d dto.Metric
	if err := h.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.Histogram.GetSampleCount(), d.Histogram.GetSampleSum()
}

// partNet isolates gossip addresses: a partTransport drops packets and
// refuses dials from or to an isolated address.
type partNet struct {
	mu       sync.Mutex
	isolated map[string]bool
}

func (p *partNet) isolate(addr string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated[addr] = on
}

func (p *partNet) blocked(a, b string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isolated[a] || p.isolated[b]
}

type partTransport struct {
	*memberlist.NetTransport
	net  *partNet
	self string
}

var errPartitioned = errors.New("test: partitioned")

func (p *partTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if p.net.blocked(p.self, addr) {
		return time.Now(), nil // dropped on the floor, as a lossy network does
	}
	return p.NetTransport.WriteTo(b, addr)
}

func (p *partTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return p.WriteTo(b, a.Addr)
}

func (p *partTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if p.net.blocked(p.self, addr) {
		return nil, errPartitioned
	}
	return p.NetTransport.DialTimeout(addr, timeout)
}

func (p *partTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return p.DialTimeout(a.Addr, timeout)
}

func withPartition(t *testing.T, pn *partNet) nodeOpt {
	return func(c *Config) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"},
			Logger:    newMemberlistLogger(c.Logger),
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Transport = &partTransport{NetTransport: nt, net: pn, self: "127.0.0.1:" + strconv.Itoa(nt.GetAutoBindPort())}
	}
}

// fakeClock is a manual Clock: every NewTimer is handed to the test on
// timers, and firing it moves the clock forward by its duration.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers chan *fakeTimer
}

type fakeTimer struct {
	d   time.Duration
	c   chan time.Time
	clk *fakeClock
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: make(chan *fakeTimer, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	ft := &fakeTimer{d: d, c: make(chan time.Time, 1), clk: c}
	c.timers <- ft
	return ft
}

func (ft *fakeTimer) C() <-chan time.Time { return ft.c }
func (ft *fakeTimer) Stop() bool          { return true }

func (ft *fakeTimer) fire() {
	ft.clk.mu.Lock()
	ft.clk.now = ft.clk.now.Add(ft.d)
	now := ft.clk.now
	ft.clk.mu.Unlock()
	ft.c <- now
}

func (c *fakeClock) next(t *testing.T) *fakeTimer {
	t.Helper()
	select {
	case ft := <-c.timers:
		return ft
	case <-time.After(10 * time.Second):
		t.Fatal("the join loop asked for no timer within 10 s")
		return nil
	}
}
