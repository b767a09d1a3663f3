package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// floodKind is what each flood connection does after connecting.
type floodKind int

const (
	floodIdle    floodKind = iota // one unauthenticated GET /livez, then nothing
	floodTrickle                  // a request header one byte at a time, never finished
	floodRaw                      // nothing at all
)

func (k floodKind) String() string { return [...]string{"idle", "trickle", "raw"}[k] }

// flood is a set of connections an unauthenticated client holds open.
type flood struct {
	mu    sync.Mutex
	conns []net.Conn
	stop  chan struct{}
	wg    sync.WaitGroup
}

// openFlood opens n connections to addr from `sources` loopback source
// addresses (127.0.0.1 when 1, else 127.0.0.2, 127.0.0.3, ...), each
// doing kind. A connection the server refuses at once still counts as
// opened (the kernel accepted it); what the server holds is held().
func openFlood(t *testing.T, addr string, n, sources int, kind floodKind) *flood {
	t.Helper()
	f := &flood{stop: make(chan struct{})}
	t.Cleanup(f.close)
	var next atomic.Int64
	var dialErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				src := "127.0.0.1"
				if sources > 1 {
					src = fmt.Sprintf("127.0.0.%d", 2+i%sources)
				}
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					dialErr.CompareAndSwap(nil, &err)
					return
				}
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
				switch kind {
				case floodIdle:
					_, _ = c.Write([]byte("GET /livez HTTP/1.1\r\nHost: flood\r\n\r\n"))
				case floodTrickle:
					f.wg.Go(func() { f.trickle(c) })
				}
			}
		})
	}
	wg.Wait()
	if p := dialErr.Load(); p != nil {
		t.Fatalf("opening the flood: %v", *p)
	}
	return f
}

// trickle sends a header that never ends, one byte every 200 ms.
func (f *flood) trickle(c net.Conn) {
	hdr := "GET /livez HTTP/1.1\r\nHost: flood\r\nX-Slow: " + strings.Repeat("a", 4096)
	for i := 0; i < len(hdr); i++ {
		if _, err := c.Write([]byte{hdr[i]}); err != nil {
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(200 * time.Millisecond): // the attack's pace, not synchronisation
		}
	}
}

// held counts the flood's connections the server has not closed.
func (f *flood) held() int {
	f.mu.Lock()
	conns := append([]net.Conn(nil), f.conns...)
	f.mu.Unlock()
	var open atomic.Int64
	var wg sync.WaitGroup
	ch := make(chan net.Conn)
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for c := range ch {
				for {
					_ = c.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
					_, err := c.Read(buf)
					if err == nil {
						continue // an answer to the flood's request: drained
					}
					if errors.Is(err, os.ErrDeadlineExceeded) {
						open.Add(1)
					}
					break
				}
			}
		})
	}
	for _, c := range conns {
		ch <- c
	}
	close(ch)
	wg.Wait()
	return int(open.Load())
}

func (f *flood) close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// timed runs fn with a deadline of d and returns how long it took and its
// error (context.DeadlineExceeded when it did not answer in time).
func timed(d time.Duration, fn func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	return time.Since(start), err
}

// startWithHealth starts a node with a client token and a health listener.
func startWithHealth(t *testing.T, built func(*server)) (*testNode, Config, string, net.Listener) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(t, dir+"/data")
	tok := strings.Repeat("c", 40)
	cfg.API.TokenFile = writeFile(t, dir, "client.token", tok, 0o600)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := startNodeHooks(t, cfg, Deps{HealthListener: hln}, testHooks{built: built}, client.WithToken(tok))
	return tn, cfg, tok, hln
}

// answerBudget is how long an answer may take during a flood: without the
// flood it is milliseconds; with the API's connections exhausted it is
// the idle timeout (minutes).
const answerBudget = 3 * time.Second

// SPEC §4.1: floods of unauthenticated connections — idle after one
// request, trickling a header, or silent — cannot keep a client holding
// the token, nor a readiness probe, from being answered promptly: not a
// new client, not one on its kept-alive connection, not a blocking grant
// waiting through the flood; the health listener answers throughout; a
// flood from one source is shed by the per-source limit, and counted.
func TestAPIFloodUnauthenticated(t *testing.T) {
	for _, c := range []struct {
		kind       floodKind
		n, sources int
	}{
		{floodIdle, 1100, 8},
		{floodIdle, 1100, 1},
		{floodTrickle, 1100, 1},
		{floodTrickle, 1100, 8},
		{floodRaw, 3000, 8},
	} {
		t.Run(fmt.Sprintf("%v-%d-from-%d", c.kind, c.n, c.sources), func(t *testing.T) {
			var nd atomic.Pointer[server]
			tn, cfg, tok, hln := startWithHealth(t, func(n *server) { nd.Store(n) })
			addr := strings.TrimPrefix(tn.url, "http://")
			health, err := client.New("http://"+hln.Addr().String(), client.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
			if err != nil {
				t.Fatal(err)
			}
			// A client with the token: dial counts who reuses a connection.
			var dials atomic.Int64
			newClient := func() *client.Client {
				tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, a)
				}}
				t.Cleanup(tr.CloseIdleConnections)
				cl, err := client.New(tn.url, client.WithToken(tok), client.WithHTTPClient(&http.Client{Transport: tr}))
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}
			kept := newClient()
			held, err := kept.Grant(bg, "long", "holder", 30)
			if err != nil {
				t.Fatal(err)
			}
			keptDials := dials.Load()
			waited := make(chan error, 1)
			go func() {
				_, err := newClient().GrantWait(bg, "long", "waiter", 30, time.Minute)
				waited <- err
			}()
			waitFor(t, "the blocking grant to wait", 10*time.Second, func() bool { w, _ := nd.Load().waits.counts(); return w == 1 })

			healthURL := "http://" + hln.Addr().String()
			accepted := func() int {
				v, _ := strconv.Atoi(metricValue(t, healthURL, `api_connections_accepted_total{listener="api"}`))
				return v
			}
			before := accepted()
			start := time.Now()
			f := openFlood(t, addr, c.n, c.sources, c.kind)
			// The flood held, not its arrival: once the server has taken
			// every flood connection from the listen backlog.
			waitFor(t, "the server to take the flood from the backlog", time.Minute, func() bool { return accepted() >= before+c.n })
			t.Logf("%v flood of %d from %d source(s) opened and taken from the backlog in %v", c.kind, c.n, c.sources, time.Since(start).Round(time.Millisecond))
			took, err := timed(answerBudget, func(ctx context.Context) error {
				_, err := newClient().Grant(ctx, "flooded", "h", 30)
				return err
			})
			t.Logf("%v flood of %d from %d source(s): a new token holder's grant took %v (err %v)", c.kind, c.n, c.sources, took.Round(time.Millisecond), err)
			if err != nil {
				t.Fatalf("a new client with the token was not answered within %v during the flood: %v", answerBudget, err)
			}
			dialed := dials.Load()
			if _, err := timed(answerBudget, func(ctx context.Context) error {
				_, err := kept.Renew(ctx, "long", "holder", held.Token, 30)
				return err
			}); err != nil {
				t.Fatalf("the kept-alive client was not answered during the flood: %v", err)
			}
			if dials.Load() != dialed || keptDials != 1 {
				t.Fatalf("the authenticated kept-alive connection was closed by the flood (%d dials before the flood, %d more after)", keptDials, dials.Load()-dialed)
			}
			answered, healthAnswered := 0, 0
			for i := 0; i < 9; i++ {
				took, err := timed(answerBudget, func(ctx context.Context) error {
					_, err := newClient().Ready(ctx)
					return err
				})
				if err == nil {
					answered++
				} else {
					t.Logf("probe %d: %v after %v", i, err, took.Round(time.Millisecond))
				}
				if _, err := timed(answerBudget, func(ctx context.Context) error {
					_, err := health.Ready(ctx)
					return err
				}); err == nil {
					healthAnswered++
				}
			}
			if _, err := kept.Release(bg, "long", "holder", held.Token); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("the blocking grant waiting through the flood: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the blocking grant waiting through the flood was not granted after the release")
			}
			n := f.held()
			t.Logf("%v flood: %d of 9 /readyz probes answered within %v (health listener: %d of 9); the server holds %d of the flood's %d connections", c.kind, answered, answerBudget, healthAnswered, n, c.n)
			if answered != 9 || healthAnswered != 9 {
				t.Fatalf("%d of 9 readiness probes answered during the flood, %d of 9 on the health listener", answered, healthAnswered)
			}
			if n > cfg.API.MaxConns {
				t.Fatalf("the server holds %d flood connections, above api.max_conns", n)
			}
			if c.sources == 1 {
				// Beyond 512 (half of max_conns) the source evicts
				// its own; a trickler may also run out its header timeout
				// first when the flood takes long to open.
				v := metricValue(t, healthURL, `api_connections_evicted_total{listener="api",reason="per_source"}`)
				if got, err := strconv.Atoi(v); err != nil || got < 1 || n > cfg.API.MaxConns/2 {
					t.Fatalf("per-source evictions %q, %d of the source's connections held: want evictions and at most %d held", v, n, cfg.API.MaxConns/2)
				}
			}
		})
	}
}

// SPEC §4.1: the health listener (api.health_addr) serves /livez, /readyz
// and /metrics without a token and nothing else; the main listener keeps
// serving them too.
func TestHealthListener(t *testing.T) {
	tn, _, tok, hln := startWithHealth(t, nil)
	health := "http://" + hln.Addr().String()
	for _, c := range []struct {
		base, path, auth string
		status           int
	}{
		{health, "/livez", "", 200},
		{health, "/readyz", "", 200},
		{health, "/metrics", "", 200},
		{health, "/v1/status", "Bearer " + tok, 404},
		{health, "/v1/tickets/a", "Bearer " + tok, 404},
		{health, "/ui/", "", 404},
		{tn.url, "/readyz", "", 200},
		{tn.url, "/metrics", "", 200},
		{tn.url, "/v1/status", "Bearer " + tok, 200},
	} {
		req, _ := http.NewRequest("GET", c.base+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s%s: %d, want %d", c.base, c.path, resp.StatusCode, c.status)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if v := metricValue(t, health, `api_connections{class="unauthenticated",listener="health"}`); v == "" {
		t.Fatal("the health listener's connections are not in /metrics")
	}
}

// lineCounter counts log lines holding a string.
type lineCounter struct {
	want string
	n    atomic.Int64
}

func (w *lineCounter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.n.Add(1)
	}
	return len(p), nil
}

// Issue 23 (rate-limited logs where an outsider causes them): 200
// connections speaking plain HTTP to the TLS API log a burst of
// "TLS handshake error" lines, not one each; the rest are counted.
func TestAPIHandshakeErrorsRateLimited(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := makeCert(t, nil, nil, "test CA", true)
	srv, srvKey := makeCert(t, ca, caKey, "127.0.0.1", false)
	cfg := testConfig(t, dir+"/data")
	cfg.API.TLS = APITLSConfig{Enabled: true,
		CertFile: writeFile(t, dir, "srv.pem", pemCert(srv), 0o600),
		KeyFile:  writeFile(t, dir, "srv.key", pemKey(t, srvKey), 0o600)}
	lines := &lineCounter{want: "TLS handshake error"}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	tn := startNode(t, cfg, Deps{Logger: slog.New(slog.NewTextHandler(lines, nil))}, client.WithHTTPClient(&http.Client{Transport: tr}))
	addr := strings.TrimPrefix(tn.url, "https://")
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
		_, _ = io.ReadAll(c) // the server's plain 400, then its close
		c.Close()
	}
	if n := lines.n.Load(); n < 1 || n > 2 {
		t.Fatalf("200 plain-HTTP connections to the TLS API logged %d handshake lines, want a burst of 1 (and at most a summary)", n)
	}
	if _, err := tn.c.Ready(bg); err != nil {
		t.Fatal(err)
	}
}
