package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/lograte"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/connlimit"
)

// apiServer is the running HTTP API: the main listener and, with
// api.health_addr, the health listener.
type apiServer struct {
	srvs   []*http.Server
	errLog *lograte.Logger // the servers' ErrorLog lines, rate-limited
	errc   chan error      // a Serve's failure (never ErrServerClosed)
	wg     sync.WaitGroup
	// drain: stop first answers until no request arrived for apiQuiet
	// (a cluster node: its clients move on to another node). seen counts
	// the requests; stopping, once set, closes each connection after
	// its answer.
	drain              bool
	quietFor, drainMax time.Duration // 0: apiQuiet, apiDrain (tests set them)
	seen               atomic.Uint64
	stopping           atomic.Bool
}

// A cluster node that stops keeps answering (its refusals: it is
// stopping) until no request arrived for apiQuiet, at most apiDrain, each
// answer closing its connection, before it closes the server: a
// connection the server closes while idle can race with a client's next
// request on it, which then has no answer — an unknown outcome to that
// client although nothing was read.
const (
	apiQuiet = 250 * time.Millisecond
	apiDrain = 3 * time.Second
)

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// track counts the requests and, once the server is stopping, has each
// answer close its connection.
func (s *apiServer) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.seen.Add(1)
		if s.stopping.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// quiet waits until no request arrived for apiQuiet, at most apiDrain.
func (s *apiServer) quiet() {
	quiet, bound := orDefault(s.quietFor, apiQuiet), orDefault(s.drainMax, apiDrain)
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(quiet / 5)
	defer tick.Stop()
	last, since := s.seen.Load(), time.Now()
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		<-tick.C
		if n := s.seen.Load(); n != last {
			last, since = n, time.Now()
		}
	}
}

// The health listener's own limits (api.health_addr): probes and
// Prometheus need a few connections, none of which authenticates.
const (
	healthMaxConns  = 64
	healthPerSource = 16
)

// startAPI listens (unless ln, healthLn are given) and serves the API;
// probes see every stage from here on.
func (n *server) startAPI(ln, healthLn net.Listener) (*apiServer, error) {
	a := &n.cfg.API
	tlsConf, err := apiTLS(&a.TLS)
	if err != nil {
		return nil, err
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", a.Addr); err != nil {
			return nil, fmt.Errorf("node: api.addr: %w", err)
		}
	}
	if healthLn == nil && a.HealthAddr != "" {
		if healthLn, err = net.Listen("tcp", a.HealthAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("node: api.health_addr: %w", err)
		}
	}
	connMetrics := connlimit.NewMetrics(n.reg)
	// The limiter sits under TLS, so a handshake holds a slot too.
	lim := connlimit.New(connlimit.Config{MaxConns: a.MaxConns, Reserved: a.ReservedConns,
		PerSource: a.MaxConnsPerSource, UnauthIdle: a.UnauthIdleTimeout}, connMetrics, "api")
	ln = lim.Listener(ln)
	scheme := "http"
	if tlsConf != nil {
		ln, scheme = tls.NewListener(ln, tlsConf), "https"
	}
	if exposed := !isLoopback(ln.Addr()); exposed && (tlsConf == nil || n.secrets.client == nil) {
		n.log.Warn("THE API IS REACHABLE BEYOND LOOPBACK WITHOUT TLS OR A CLIENT TOKEN: anyone who can reach it can grant and release tickets; "+
			"set api.tls and api.token_file, or listen on 127.0.0.1", "addr", ln.Addr().String(), "tls", tlsConf != nil, "client_token", n.secrets.client != nil)
	}
	n.log.Info("ticketd starting", "node_id", n.cfg.Cluster.Name, "mode", n.mode.name(),
		"data_dir", n.dir.Path(), "delta_ms", n.cfg.Clock.DeltaMs, "clock", n.clockMode(),
		"api", scheme+"://"+ln.Addr().String(), "client_token", n.secrets.client != nil, "admin_api", n.secrets.admin != nil)
	if until, cause := n.hold.until, n.hold.cause; !until.IsZero() {
		n.log.Warn("refusing Grant and Expire until the hold-off instant", "until", until.UTC().Format(time.RFC3339Nano), "cause", cause)
	}
	s := &apiServer{errc: make(chan error, 2), errLog: lograte.New(n.log.With("component", "http"), lograte.Config{}), drain: n.cfg.Cluster.Enabled}
	opts := api.Options{Backend: n, Metrics: n.metrics, Gatherer: n.reg,
		ClientToken: n.secrets.client, AdminToken: n.secrets.admin, Logger: n.log}
	s.serve(ln, n.httpServer(s.track(api.NewHandler(opts)), lim, s.errLog, a.IdleTimeout))
	n.log.Info("API listening", "addr", ln.Addr().String(), "max_conns", a.MaxConns, "reserved_conns", a.ReservedConns,
		"max_conns_per_source", a.MaxConnsPerSource, "read_header_timeout", a.ReadHeaderTimeout,
		"idle_timeout", a.IdleTimeout, "unauthenticated_idle_timeout", a.UnauthIdleTimeout)
	if healthLn != nil {
		// Nobody authenticates here: every connection is in the
		// unauthenticated share, idle ones close after the short timeout.
		hlim := connlimit.New(connlimit.Config{MaxConns: healthMaxConns, PerSource: healthPerSource,
			UnauthIdle: a.UnauthIdleTimeout}, connMetrics, "health")
		opts.HealthOnly = true
		s.serve(hlim.Listener(healthLn), n.httpServer(api.NewHandler(opts), hlim, s.errLog, a.UnauthIdleTimeout))
		n.log.Info("health listener serving /livez, /readyz and /metrics", "addr", healthLn.Addr().String())
	}
	return s, nil
}

// httpServer is one listener's server: the limiter's hooks and the
// api timeouts. A blocking grant or watch lifts its own deadlines
// (api.longer), so the timeouts do not cut long waits.
func (n *server) httpServer(h http.Handler, lim *connlimit.Limiter, errLog *lograte.Logger, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ConnState:         lim.ConnState,
		ConnContext:       lim.ConnContext,
		ReadHeaderTimeout: n.cfg.API.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idle,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(httpErrorLog{errLog}, "", 0),
	}
}

// httpErrorLog carries the net/http servers' own lines (a failed TLS
// handshake, a malformed request: one per connection an outsider opens)
// to the log through lograte, one burst per kind of line and a count of
// the rest (internal/lograte).
type httpErrorLog struct{ rl *lograte.Logger }

func (w httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	w.rl.Warn(httpLineKind(line), "http server", "line", line)
	return len(p), nil
}

// httpLineKind is the kind of a net/http line: its text up to the remote
// address or the first digit (never text a client chose), at most 48
// bytes ("http: TLS handshake error").
func httpLineKind(line string) string {
	kind := line
	if i := strings.Index(kind, " from "); i >= 0 {
		kind = kind[:i]
	}
	if i := strings.IndexFunc(kind, unicode.IsDigit); i >= 0 {
		kind = kind[:i]
	}
	if len(kind) > 48 {
		kind = kind[:48]
	}
	return kind
}

func (s *apiServer) serve(ln net.Listener, srv *http.Server) {
	s.srvs = append(s.srvs, srv)
	s.wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
	})
}

// stop (a cluster node: once it answered no request for apiQuiet) lets
// in-flight requests finish (5 s at most), then closes.
func (s *apiServer) stop() {
	s.stopping.Store(true)
	if s.drain {
		s.quiet()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.srvs {
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	}
	s.wg.Wait()
	s.errLog.Close() // reports what it still counts
}

// isLoopback reports whether addr is a loopback TCP address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func apiTLS(t *APITLSConfig) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, config.Errorf("api.tls.cert_file", "loading %s and %s: %v", t.CertFile, t.KeyFile, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, config.Errorf("api.tls.client_ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, config.Errorf("api.tls.client_ca_file", "%s holds no PEM certificate", t.ClientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}
