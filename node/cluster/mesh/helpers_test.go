package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// keyFor derives a stable test key from a name.
func keyFor(name string) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, name)
	seed[31] = 0x5a
	return ed25519.NewKeyFromSeed(seed)
}

func pubFor(name string) ed25519.PublicKey { return keyFor(name).Public().(ed25519.PublicKey) }

// keyMap is a trust map or a gossip view: id → public key.
type keyMap struct {
	mu sync.Mutex
	m  map[string]ed25519.PublicKey
}

func newKeyMap(names ...string) *keyMap {
	k := &keyMap{m: map[string]ed25519.PublicKey{}}
	for _, n := range names {
		k.m[n] = pubFor(n)
	}
	return k
}

func (k *keyMap) set(id string, pub ed25519.PublicKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if pub == nil {
		delete(k.m, id)
		return
	}
	k.m[id] = pub
}

func (k *keyMap) Lookup(id string) (ed25519.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.m[id]
	return p, ok
}

func (k *keyMap) AdvertisedKey(id string) (ed25519.PublicKey, bool) { return k.Lookup(id) }

// tlogWriter sends log lines to t.Log while the test runs.
type tlogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &tlogWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// node is one mesh under test with its own registry.
type node struct {
	*Mesh
	reg *prometheus.Registry
}

func testConfig(t testing.TB, id string, trust *keyMap) Config {
	return Config{
		NodeID:           id,
		Key:              keyFor(identity.TrustName(id)), // NAME~G speaks with NAME's key
		GossipSecret:     testSecret,
		Trust:            trust,
		BindPort:         EphemeralPort,
		HandshakeTimeout: 2 * time.Second,
		Logger:           testLogger(t).With("node", id),
	}
}

func start(t testing.TB, cfg Config) *node {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	m, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &node{Mesh: m, reg: reg}
}

// metric reads a counter or gauge value by name and one label (or none).
func (n *node) metric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}

func (n *node) handshakes(t testing.TB, r Reason) float64 {
	return n.metric(t, "mesh_handshakes_total", "result", string(r))
}

// eventually waits for cond, checking every few milliseconds, up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// accept accepts one stream on l, within 10 s.
func accept(t testing.TB, l net.Listener) *Stream {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.c.(*Stream)
	case <-time.After(10 * time.Second):
		l.Close()
		t.Fatal("no stream accepted within 10 s")
		return nil
	}
}

func dial(t testing.TB, from *node, to *node, wantID string, c Class) *Stream {
	t.Helper()
	return dialAt(t, from, to.Addr(), wantID, c)
}

// dialAt opens a stream of class c from a node to addr, within 10 s.
func dialAt(t testing.TB, from *node, addr, wantID string, c Class) *Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := from.Dial(ctx, addr, wantID, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// echo checks that bytes written on a arrive on b and back.
func echo(t testing.TB, a, b net.Conn) {
	t.Helper()
	msg := []byte("ping over the mesh")
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := b.Write(got); err != nil {
		t.Fatal(err)
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// openYamux returns a live yamux session over a pipe, closed at cleanup.
func openYamux(t testing.TB) *yamux.Session {
	c1, c2 := net.Pipe()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	s1, _ := yamux.Client(c1, cfg)
	s2, _ := yamux.Server(c2, cfg)
	t.Cleanup(func() { s1.Close(); s2.Close() })
	return s1
}
