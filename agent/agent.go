package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/protocol"
)

// Options are what a caller injects; zero values mean the real thing.
type Options struct {
	Logger *slog.Logger
	Env    secret.Lookup // the environment (SPEC §1.4 variables); nil: os.LookupEnv
	Clock  source.Clock  // nil: the system clock
	// Sources replaces the sources built from the configuration (tests).
	Sources []SourceSpec
}

// Agent is one tckclk-agent: the sampler, the TCKCLK/2 server and the ops
// HTTP server. New checks everything that can be checked before binding a
// port; Run serves until its context ends.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	env     secret.Lookup
	clock   source.Clock
	sampler *Sampler
	server  *Server
	metrics *metrics

	key       atomic.Pointer[protocol.Key]
	keyOrigin atomic.Pointer[string]
	reloadMu  sync.Mutex
	draining  atomic.Bool

	ready    chan struct{}
	addr     net.Addr
	httpAddr net.Addr
}

// New validates cfg, loads the secret and builds the sources. Every error it
// returns is a usage or configuration error (exit status 2) and names the
// key.
func New(cfg Config, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: opts.Logger, env: opts.Env, clock: opts.Clock, ready: make(chan struct{})}
	if a.log == nil {
		a.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if a.clock == nil {
		a.clock = source.SystemClock{}
	}
	if a.env == nil {
		a.env = os.LookupEnv
	}
	if cfg.Dev {
		a.log = a.log.With("dev_reference", true)
		a.log.Warn("DEVELOPMENT REFERENCE (--dev): the local clock answers as a reference on loopback only, signed with dev_key; nodes accept it only with clock.dev_reference: true. Never use it in production.")
	}
	if err := a.loadKey(); err != nil {
		return nil, err
	}
	specs := opts.Sources
	if specs == nil {
		var err error
		if specs, err = buildSources(&cfg, a.clock, a.env, a.log); err != nil {
			return nil, err
		}
	}
	a.metrics = newMetrics(a)
	names := make([]string, 0, len(specs))
	for _, sp := range specs {
		names = append(names, sp.Source.Name())
	}
	a.metrics.knownSources(names)
	a.sampler = NewSampler(specs, ms(cfg.MaxSourceAgeMs), cfg.MaxDriftPPM, a.clock, a.metrics, a.log)
	a.server = NewServer(ServerConfig{ReadTimeout: cfg.readTimeout(), WriteTimeout: cfg.writeTimeout(), MaxConns: cfg.MaxConns}, a, a.metrics, a.log)
	return a, nil
}

// loadKey reads the secret (SPEC §1.4) and prepares the signing key: the
// secret itself, or dev_key in --dev (SPEC §1.3).
func (a *Agent) loadKey() error {
	sec, err := secret.LoadClock(a.env, a.cfg.SecretFile)
	if err != nil {
		return config.Errorf("secret_file", "%v", err)
	}
	k := sec.Bytes()
	if a.cfg.Dev {
		k = protocol.DevKey(k)
	}
	origin := sec.Origin()
	a.key.Store(protocol.NewKey(k))
	a.keyOrigin.Store(&origin)
	return nil
}

// ReloadSecret re-reads the secret (SIGHUP). Requests in flight finish with
// the key they started with; on any error the previous key stays.
func (a *Agent) ReloadSecret() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if err := a.loadKey(); err != nil {
		a.metrics.reloads.WithLabelValues("error").Inc()
		a.log.Error("secret reload failed; still signing with the previous secret", "err", err)
		return err
	}
	a.metrics.reloads.WithLabelValues("ok").Inc()
	a.log.Info("secret reloaded", "from", *a.keyOrigin.Load())
	return nil
}

// Answer implements Answerer: the selection at this instant, signed.
func (a *Agent) Answer(n protocol.Nonce) protocol.Response {
	sel := a.sampler.Select(a.clock.Now())
	r := protocol.Response{Nonce: n, ReferenceUnixMs: sel.ReferenceUnixMs, UncertaintyMs: sel.UncertaintyMs,
		Synced: sel.Synced, SourceAgeMs: sel.SourceAgeMs}
	a.key.Load().Sign(&r)
	return r
}

// Ready is closed once both listeners are bound.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Addr is the TCKCLK/2 listener's address (after Ready).
func (a *Agent) Addr() net.Addr { return a.addr }

// HTTPAddr is the ops listener's address (after Ready).
func (a *Agent) HTTPAddr() net.Addr { return a.httpAddr }

// Run binds both listeners, starts the poll loops and serves until ctx ends;
// then it stops accepting, fails /readyz, finishes the exchanges in flight
// (within shutdown_timeout_ms) and returns. A bind failure is returned at
// once (exit status 1).
func (a *Agent) Run(ctx context.Context) error {
	lc := net.ListenConfig{KeepAlive: -1} // one short exchange per connection
	// The TCKCLK/2 listener's accepted sockets inherit SO_LINGER 0 from it:
	// a connection this process never answers ends with a TCP reset even
	// when the process dies holding it (kill -9, a crash), never with the
	// FIN a node would read as a missing LF, `format` (see drop). end turns
	// lingering off again before the FIN that follows an answer.
	tlc := net.ListenConfig{KeepAlive: -1, Control: resetOnClose}
	ln, err := tlc.Listen(ctx, "tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("agent: listen %s: %w", a.cfg.Listen, err)
	}
	hln, err := lc.Listen(ctx, "tcp", a.cfg.HTTP)
	if err != nil {
		ln.Close()
		return fmt.Errorf("agent: http listen %s: %w", a.cfg.HTTP, err)
	}
	a.addr, a.httpAddr = ln.Addr(), hln.Addr()
	hs := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	a.warnFileLimit()
	a.sampler.Start()
	defer a.sampler.Close()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs <- a.server.Serve(ln) }()
	go func() {
		defer wg.Done()
		if err := hs.Serve(hln); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("agent: http: %w", err)
		}
	}()
	close(a.ready)
	a.log.Info("agent serving", "listen", a.addr.String(), "http", a.httpAddr.String(),
		"secret_from", *a.keyOrigin.Load(), "max_conns", a.cfg.MaxConns,
		"read_timeout", a.cfg.readTimeout(), "max_source_age", ms(a.cfg.MaxSourceAgeMs), "max_drift_ppm", a.cfg.MaxDriftPPM)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	a.draining.Store(true)
	a.log.Info("agent shutting down: finishing exchanges in flight", "open", a.server.OpenConns())
	sctx, cancel := context.WithTimeout(context.Background(), ms(a.cfg.ShutdownTimeoutMs))
	defer cancel()
	if err := a.server.Shutdown(sctx); err != nil {
		a.log.Warn("shutdown timeout: connections still open", "open", a.server.OpenConns())
	}
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	wg.Wait()
	return runErr
}

// warnFileLimit says when max_conns cannot be reached: past the descriptor
// limit accept fails (and backs off) before the cap closes anything.
func (a *Agent) warnFileLimit() {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	if need := uint64(a.cfg.MaxConns) + 64; rl.Cur < need {
		a.log.Warn("RLIMIT_NOFILE is below max_conns + 64: raise LimitNOFILE (systemd) or ulimit -n, or lower max_conns",
			"nofile", rl.Cur, "max_conns", a.cfg.MaxConns)
	}
}

// Status is the /v1/status document (SPEC §2.3).
type Status struct {
	Mode         string `json:"mode"` // "production" or "dev-reference"
	DevReference bool   `json:"dev_reference"`
	Synced       bool   `json:"synced"`
	Ready        bool   `json:"ready"`
	Selected     string `json:"selected"`
	// The three figures of the selected sample; null while the agent has
	// none (never a sentinel such as the largest uint64).
	ReferenceUnixMs *uint64        `json:"reference_unix_ms"`
	UncertaintyMs   *uint64        `json:"uncertainty_ms"`
	SourceAgeMs     *uint64        `json:"source_age_ms"`
	MaxSourceAgeMs  uint64         `json:"max_source_age_ms"`
	MaxDriftPPM     uint64         `json:"max_drift_ppm"`
	Sources         []SourceStatus `json:"sources"`
	ConnectionsOpen int64          `json:"connections_open"`
	MaxConns        int            `json:"max_conns"`
	SecretFrom      string         `json:"secret_from"`
	Draining        bool           `json:"draining"`
}

// Status reports the agent's state now.
func (a *Agent) Status() Status {
	now := a.clock.Now()
	sel := a.sampler.Select(now)
	st := Status{
		Mode: "production", DevReference: a.cfg.Dev, Synced: sel.Synced, Selected: sel.Source,
		MaxSourceAgeMs: a.cfg.MaxSourceAgeMs, MaxDriftPPM: a.cfg.MaxDriftPPM,
		Sources: a.sampler.Sources(now, sel.Source), ConnectionsOpen: a.server.OpenConns(), MaxConns: a.cfg.MaxConns,
		SecretFrom: *a.keyOrigin.Load(), Draining: a.draining.Load(),
	}
	if sel.UncertaintyMs != math.MaxUint64 { // a sample exists (synced, or the last one while stale)
		st.ReferenceUnixMs, st.UncertaintyMs, st.SourceAgeMs = &sel.ReferenceUnixMs, &sel.UncertaintyMs, &sel.SourceAgeMs
	}
	if a.cfg.Dev {
		st.Mode = "dev-reference"
	}
	st.Ready = st.Synced && !st.Draining
	return st
}

// Handler serves /metrics, /livez, /readyz and /v1/status.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n") // a failed write is the client gone
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := a.Status()
		label := ""
		if st.DevReference {
			label = " (DEV REFERENCE: dev_key, loopback only)"
		}
		switch {
		case st.Draining:
			http.Error(w, "not ready: shutting down"+label, http.StatusServiceUnavailable)
		case !st.Synced:
			http.Error(w, "not ready: synced=0, no healthy source"+label, http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ready: synced=1 from %s, uncertainty %d ms%s\n", st.Selected, *st.UncertaintyMs, label)
		}
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Status()) // a failed write is the client gone
	})
	return mux
}

// resetOnClose sets SO_LINGER 0 on a listening socket (net.ListenConfig's
// Control), which the sockets it accepts inherit.
func resetOnClose(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_LINGER 0 on the listener: %w", serr)
	}
	return nil
}
