package connlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer is an http.Server behind a Limiter: /auth marks its
// connection authenticated, /block waits until release is closed,
// anything else answers at once.
type testServer struct {
	l       *Limiter
	m       *Metrics
	reg     *prometheus.Registry
	addr    string
	release chan struct{}
}

func serve(t *testing.T, cfg Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{reg: prometheus.NewRegistry(), addr: ln.Addr().String(), release: make(chan struct{})}
	ts.m = NewMetrics(ts.reg)
	ts.l = New(cfg, ts.m, "api")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/auth":
				MarkAuthenticated(r.Context())
			case "/block":
				<-ts.release
			}
			fmt.Fprintln(w, "ok")
		}),
		ConnState: ts.l.ConnState, ConnContext: ts.l.ConnContext,
		ReadHeaderTimeout: time.Minute,
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ts.l.Listener(ln)) }()
	t.Cleanup(func() {
		select {
		case <-ts.release:
		default:
			close(ts.release)
		}
		srv.Close()
		<-done
	})
	return ts
}

// client is one raw client connection from a loopback source.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (ts *testServer) dial(t *testing.T, src string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// get sends one request and reads its answer.
func (c *client) get(path string) {
	c.t.Helper()
	c.send(path)
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func (c *client) send(path string) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.c, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path); err != nil {
		c.t.Fatal(err)
	}
}

// closed reports whether the server closed the connection (EOF or reset
// within a second; an open, silent connection times out).
func (c *client) closed() bool {
	_ = c.c.SetReadDeadline(time.Now().Add(time.Second))
	defer c.c.SetReadDeadline(time.Time{})
	_, err := c.r.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// lists returns the sizes of the evictable lists.
func (l *Limiter) lists() (unauthIdle, unauthReading, authIdle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unauthIdle.Len(), l.unauthReading.Len(), l.authIdle.Len()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // poll interval of a condition with a deadline
	}
}

func (ts *testServer) count(t *testing.T, vec string, reason string) int {
	t.Helper()
	var cv *prometheus.CounterVec
	switch vec {
	case "evicted":
		cv = ts.m.evicted
	case "refused":
		cv = ts.m.refused
	}
	var d dto.Metric
	if err := cv.WithLabelValues("api", reason).Write(&d); err != nil {
		t.Fatal(err)
	}
	return int(d.GetCounter().GetValue())
}

// SPEC §4.1: a source at its limit crowds out only itself — its oldest
// idle connection goes, another source's stays.
func TestPerSourceEvictsOwnOldest(t *testing.T) {
	ts := serve(t, Config{MaxConns: 100, Reserved: 10, PerSource: 2})
	other := ts.dial(t, "127.0.0.9")
	other.get("/x")
	a, b := ts.dial(t, "127.0.0.2"), ts.dial(t, "127.0.0.2")
	a.get("/x")
	b.get("/x")
	waitFor(t, "three idle connections", func() bool { i, _, _ := ts.l.lists(); return i == 3 })
	c := ts.dial(t, "127.0.0.2")
	c.get("/x")
	if !a.closed() {
		t.Fatal("the source's oldest idle connection was not evicted")
	}
	if b.closed() || other.closed() {
		t.Fatal("a connection other than the source's oldest was evicted")
	}
	if n := ts.count(t, "evicted", ReasonPerSource); n != 1 {
		t.Fatalf("per_source evictions %d, want 1", n)
	}
}

// SPEC §4.1: when every connection of the source is being served, one more
// is refused, and nothing being served is cut.
func TestPerSourceRefusesWhenAllActive(t *testing.T) {
	ts := serve(t, Config{MaxConns: 100, Reserved: 10, PerSource: 2})
	a, b := ts.dial(t, "127.0.0.2"), ts.dial(t, "127.0.0.2")
	a.send("/block")
	b.send("/block")
	waitFor(t, "two requests in service", func() bool {
		i, r, _ := ts.l.lists()
		return i == 0 && r == 0 && ts.l.Stats().Open == 2
	})
	c := ts.dial(t, "127.0.0.2")
	if !c.closed() {
		t.Fatal("a third connection of a source whose two are being served was admitted")
	}
	if n := ts.count(t, "refused", ReasonPerSource); n != 1 {
		t.Fatalf("per_source refusals %d, want 1", n)
	}
	close(ts.release)
	for _, x := range []*client{a, b} {
		resp, err := http.ReadResponse(x.r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("a request in service was cut: %v", err)
		}
		resp.Body.Close()
	}
}

// SPEC §4.1: unauthenticated connections never take the reserved share:
// at MaxConns−Reserved the oldest idle unauthenticated one is evicted,
// then the one reading a request longest; authenticated connections stay.
func TestUnauthenticatedShare(t *testing.T) {
	ts := serve(t, Config{MaxConns: 6, Reserved: 2, PerSource: 100})
	auth := []*client{ts.dial(t, "127.0.0.2"), ts.dial(t, "127.0.0.2")}
	for _, c := range auth {
		c.get("/auth")
	}
	waitFor(t, "two authenticated idle", func() bool { _, _, a := ts.l.lists(); return a == 2 })
	idle := ts.dial(t, "127.0.0.3")
	idle.get("/x")
	waitFor(t, "one unauthenticated idle", func() bool { i, _, _ := ts.l.lists(); return i == 1 })
	// Three trickling a header (the share of 4 is full), then one more:
	// the idle one goes first.
	slow := []*client{ts.dial(t, "127.0.0.4"), ts.dial(t, "127.0.0.5"), ts.dial(t, "127.0.0.6")}
	for _, c := range slow {
		if _, err := c.c.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "six open", func() bool { return ts.l.Stats().Open == 6 })
	n1 := ts.dial(t, "127.0.0.7")
	if !idle.closed() {
		t.Fatal("the idle unauthenticated connection was not evicted first")
	}
	// Now only readers: the one reading longest goes.
	n1.send("/block")
	waitFor(t, "n1 in service", func() bool { _, r, _ := ts.l.lists(); return r == 3 })
	n2 := ts.dial(t, "127.0.0.8")
	if !slow[0].closed() {
		t.Fatal("the connection reading a request longest was not evicted")
	}
	if slow[1].closed() || slow[2].closed() {
		t.Fatal("a younger reader was evicted")
	}
	for _, c := range auth {
		if c.closed() {
			t.Fatal("an authenticated connection was evicted to make room for an unauthenticated one")
		}
		c.get("/x") // still serves
	}
	if n := ts.count(t, "evicted", ReasonUnauth); n != 2 {
		t.Fatalf("unauthenticated_share evictions %d, want 2", n)
	}
	n2.get("/x")
}

// SPEC §4.1: an unauthenticated connection idle for UnauthIdle is closed;
// an authenticated one is not.
func TestUnauthenticatedIdleTimeout(t *testing.T) {
	ts := serve(t, Config{MaxConns: 10, Reserved: 2, PerSource: 10, UnauthIdle: 50 * time.Millisecond})
	a, u := ts.dial(t, "127.0.0.2"), ts.dial(t, "127.0.0.2")
	a.get("/auth")
	u.get("/x")
	waitFor(t, "the unauthenticated idle connection to be closed", func() bool { return ts.l.Stats().Open == 1 })
	if !u.closed() {
		t.Fatal("the unauthenticated connection stays open")
	}
	if a.closed() {
		t.Fatal("the authenticated connection was closed as idle")
	}
	if n := ts.count(t, "evicted", ReasonUnauthIdle); n != 1 {
		t.Fatalf("unauthenticated_idle %d, want 1", n)
	}
}

// SPEC §4.1: at MaxConns with everything authenticated and busy, a new
// connection is refused at once (never parked), and counted.
func TestMaxConnsRefuses(t *testing.T) {
	ts := serve(t, Config{MaxConns: 3, Reserved: 1, PerSource: 10})
	var cs []*client
	for range 3 {
		c := ts.dial(t, "127.0.0.2")
		c.get("/auth")
		c.send("/block")
		cs = append(cs, c)
	}
	waitFor(t, "three busy", func() bool {
		i, r, a := ts.l.lists()
		return i+r+a == 0 && ts.l.Stats().Open == 3
	})
	if c := ts.dial(t, "127.0.0.3"); !c.closed() {
		t.Fatal("a connection beyond max_conns was admitted while all were busy")
	}
	if n := ts.count(t, "refused", ReasonMaxConns); n != 1 {
		t.Fatalf("max_conns refusals %d, want 1", n)
	}
	// Once one is idle it makes room.
	close(ts.release)
	for _, c := range cs {
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitFor(t, "three authenticated idle", func() bool { _, _, a := ts.l.lists(); return a == 3 })
	n := ts.dial(t, "127.0.0.3")
	n.get("/x")
	evicted := 0
	for _, c := range cs {
		if c.closed() {
			evicted++
		}
	}
	if evicted != 1 {
		t.Fatalf("%d idle authenticated connections made room at max_conns, want 1", evicted)
	}
}

// The counts stay exact through many concurrent connections coming and
// going (every open connection is counted once, none after it closes).
func TestCountsBalance(t *testing.T) {
	ts := serve(t, Config{MaxConns: 40, Reserved: 10, PerSource: 8, UnauthIdle: 20 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 20 {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 2+i%4))}}
				c, err := d.Dial("tcp", ts.addr)
				if err != nil {
					continue
				}
				path := "/x"
				if j%3 == 0 {
					path = "/auth"
				}
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path)
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					resp.Body.Close()
				}
				if j%2 == 0 {
					c.Close()
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every unauthenticated connection to time out", func() bool { return ts.l.Stats().Unauthenticated == 0 })
	st := ts.l.Stats()
	if st.Open > 40 || st.Open < 0 {
		t.Fatalf("open %d outside 0..=40", st.Open)
	}
	ts.l.mu.Lock()
	srcs := len(ts.l.sources)
	ts.l.mu.Unlock()
	if srcs != 0 {
		t.Fatalf("%d sources still counted with no unauthenticated connection", srcs)
	}
}

func TestSourceOf(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"10.1.2.3:80", "10.1.2.3"},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := SourceOf(a); got != c.want {
			t.Errorf("SourceOf(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := SourceOf(&net.UnixAddr{Name: "x"}); got != "" {
		t.Errorf("a unix address: %q", got)
	}
}

// Under TLS the hooks see the *tls.Conn: the connection is still found,
// marked authenticated, and counted as such.
func TestTLSConnections(t *testing.T) {
	l := New(Config{MaxConns: 10, Reserved: 2, PerSource: 10}, nil, "api")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/auth" {
			MarkAuthenticated(r.Context())
		}
		fmt.Fprintln(w, Authenticated(r.Context()))
	}))
	srv.Listener = l.Listener(srv.Listener)
	srv.Config.ConnState, srv.Config.ConnContext = l.ConnState, l.ConnContext
	srv.StartTLS()
	defer srv.Close()
	get := func(path string) string {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	if got := get("/x"); got != "false" {
		t.Fatalf("a new TLS connection says authenticated %s", got)
	}
	if got := get("/auth"); got != "true" {
		t.Fatalf("after MarkAuthenticated: %s", got)
	}
	waitFor(t, "the TLS connection idle and authenticated", func() bool {
		_, _, a := l.lists()
		return a == 1 && l.Stats() == Stats{Open: 1, Unauthenticated: 0}
	})
}
