package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/ticket"
)

// Deps are what Run takes from its caller besides the config. Zero values
// mean the real thing.
type Deps struct {
	Logger *slog.Logger // default: discard
	// Wall is the wall clock entries are stamped with; the clock-health
	// monitor checks the same clock. Default: the system clock.
	Wall WallClock
	// Mono is the monotonic clock the monitor pairs with Wall (SPEC §3.2).
	// Default: Wall itself when it is also a clockhealth.MonoClock (as
	// clockhealthtest.Clock is); a Wall that is not needs one.
	Mono clockhealth.MonoClock
	// Guard replaces the clock-health monitor built from cfg.Clock (tests):
	// no clock_check, no FAILED marker.
	Guard     ClockGuard
	Readiness *Readiness // default: a new one
	// HoldOffUntil, when set, refuses Grant and Expire (503, reason
	// hold_off) until the wall clock has passed it. A FAILED marker in the
	// data dir sets it to start + 250 s + Δ (SPEC §4); the later one wins.
	HoldOffUntil time.Time
	// ClockTicker and ClockDialer replace the monitor's tickers and its
	// agent dialer (tests).
	ClockTicker clockhealth.TickerFunc
	ClockDialer clockhealth.Dialer
	// Env looks up the environment (the clock secret, SPEC §1.4); default
	// os.LookupEnv.
	Env secret.Lookup
	// Listener serves the API instead of listening on cfg.API.Addr (tests).
	Listener net.Listener
	// ExpiryInterval is how often the leader looks for expired tickets.
	ExpiryInterval time.Duration // default 100 ms
	// Registry receives the metrics; default: a new one with the Go and
	// process collectors.
	Registry *prometheus.Registry

	built func(*Node) // tests in this package: the node, once built
}

// Run runs a ticketd node until ctx ends or the node fails.
func Run(ctx context.Context, cfg Config) error { return RunWith(ctx, cfg, Deps{}) }

// Node is one running ticketd; it is the API's Backend.
type Node struct {
	cfg     Config
	log     *slog.Logger
	wall    WallClock
	guard   ClockGuard
	mon     *clockhealth.Monitor // the guard, unless Deps.Guard replaced it
	ready   *Readiness
	holdOff time.Time
	expiry  time.Duration
	dataDir string

	// The FAILED marker (SPEC §4): markerMu orders writing it (clockFailed)
	// against removing an earlier run's (clearHoldOff).
	markerMu      sync.Mutex
	markerPending atomic.Bool            // an earlier run's marker is on disk
	markerState   atomic.Pointer[string] // this run's: "written" or why not
	holdOffCause  string

	fsm     *ticket.FSM
	parts   atomic.Pointer[raftParts] // nil until Raft is open; HTTP handlers read it concurrently
	notify  chan bool
	metrics *api.Metrics

	barrierTerm   atomic.Uint64 // term in which this leader's Barrier committed
	expiryRounds  atomic.Uint64 // rounds of the expiry loop (tests wait on it)
	leaderChanges prometheus.Counter
}

// RunWith is Run with injected dependencies. Start-up order (SPEC §3.5):
// the data dir is locked and checked (retired: refused; FAILED marker: hold
// off), the API listens (probes see every stage), clock_check proves the
// clock with an agent configured, then Raft opens and the node becomes
// leader and ready.
func RunWith(ctx context.Context, cfg Config, deps Deps) (err error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := &Node{
		cfg: cfg, log: deps.Logger, guard: deps.Guard, ready: deps.Readiness,
		holdOff: deps.HoldOffUntil, expiry: deps.ExpiryInterval, dataDir: cfg.Cluster.Raft.DataDir,
		fsm: ticket.New(cfg.Clock.DeltaMs), notify: make(chan bool, 16),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.ready == nil {
		n.ready = NewReadiness()
	}
	if n.expiry <= 0 {
		n.expiry = 100 * time.Millisecond
	}
	env := deps.Env
	if env == nil {
		env = os.LookupEnv
	}
	wall, mono, err := clockDeps(&deps)
	if err != nil {
		return err
	}
	n.wall = wall
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	// The data dir first, under its lock: a retired one is refused (SPEC
	// §3.4), a FAILED marker holds off (SPEC §4).
	lock, err := lockDataDir(n.dataDir)
	if err != nil {
		return err
	}
	defer func() {
		if lock != nil {
			lock.Close()
		}
	}()
	if err := clockhealth.CheckRetired(n.dataDir); err != nil {
		return err
	}
	prior, err := readFailedMarker(n.dataDir)
	if err != nil {
		return err
	}
	if prior != nil {
		n.markerPending.Store(true)
		n.holdOffCause = prior.String()
		if until := n.wall.Now().Add(holdOffFor(cfg.Clock.DeltaMs)); until.After(n.holdOff) {
			n.holdOff = until
		}
	}

	var clockSecrets *clockhealth.Secrets
	if deps.Guard == nil && cfg.Clock.HasAgent() {
		s, err := clockhealth.LoadSecrets(&cfg.Clock, env)
		if err != nil {
			return err
		}
		clockSecrets = &s
	}
	secrets, err := loadSecrets(&cfg, env, clockSecrets)
	if err != nil {
		return err
	}
	tlsConf, err := apiTLS(&cfg.API.TLS)
	if err != nil {
		return err
	}
	n.metrics = api.NewMetrics(reg)
	n.registerMetrics(reg)
	if n.guard == nil {
		opts := clockhealth.Options{
			Config: cfg.Clock, Wall: wall, Mono: mono, Dialer: deps.ClockDialer, NewTicker: deps.ClockTicker,
			Logger: n.log.With("component", "clock"), Registerer: reg, OnFailed: n.clockFailed,
		}
		if clockSecrets != nil {
			opts.Secret, opts.NextSecret = clockSecrets.Current.Bytes(), clockSecrets.Next.Bytes()
		}
		if n.mon, err = clockhealth.New(opts); err != nil {
			return err
		}
		n.guard = monitorGuard{n.mon}
	}
	if deps.built != nil {
		deps.built(n)
	}

	ln := deps.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.API.Addr); err != nil {
			return fmt.Errorf("node: api.addr: %w", err)
		}
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	n.log.Info("ticketd starting", "node_id", cfg.Cluster.Name, "mode", "single-node",
		"data_dir", n.dataDir, "delta_ms", cfg.Clock.DeltaMs, "clock", n.clockMode(),
		"api", scheme+"://"+ln.Addr().String(), "client_token", secrets.client != nil, "admin_api", secrets.admin != nil)
	if !n.holdOff.IsZero() {
		n.log.Warn("refusing Grant and Expire until the hold-off instant", "until", n.holdOff.UTC().Format(time.RFC3339Nano),
			"cause", n.holdOffCause)
	}

	srv := &http.Server{
		Handler: api.NewHandler(api.Options{
			Backend: n, Metrics: n.metrics, Gatherer: reg,
			ClientToken: secrets.client, AdminToken: secrets.admin, Logger: n.log,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(n.log.With("component", "http").Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	n.log.Info("API listening", "addr", ln.Addr().String())
	defer func() {
		n.ready.Set(StageStopping, "")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e := srv.Shutdown(sctx); e != nil {
			srv.Close()
		}
		wg.Wait()
	}()

	if n.mon != nil {
		if err := n.mon.Start(); err != nil {
			return err
		}
		defer n.mon.Close()
		// Returning a FAILED clock's error makes the exit status say so.
		defer func() {
			if ferr := n.mon.Err(); ferr != nil && (err == nil || errors.Is(err, errStopped)) {
				err = ferr
			}
		}()
		if cfg.Clock.HasAgent() {
			if err := n.clockCheck(ctx); err != nil {
				if errors.Is(err, errStopped) {
					return nil
				}
				return err
			}
		}
	}

	n.ready.Set(StageRaft, "opening the data dir")
	rp, err := openRaft(&cfg, lock, n.fsm, n.notify, n.log)
	lock = nil // openRaft owns it now (and closes it on failure)
	if err != nil {
		n.ready.Set(StageFailed, err.Error())
		return err
	}
	n.parts.Store(rp)
	n.advanceClock(clockhealth.StageJoined, "single node: bootstrapped as the only voter")
	n.ready.Set(StageRaft, "waiting for leadership")

	lctx, stop := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.leadership(lctx)
	}()
	select {
	case <-ctx.Done():
	case <-n.fsm.Stopped():
		err = n.fatalError()
		n.ready.Set(StageFailed, err.Error())
		n.log.Error("state machine stopped; refusing to serve", "err", err)
	case err = <-serveErr:
		err = fmt.Errorf("node: API server: %w", err)
	}
	stop()
	if cerr := rp.close(); cerr != nil && err == nil && !errors.Is(cerr, raft.ErrRaftShutdown) {
		err = cerr
	}
	return err
}

// clockMode describes the clock the node runs on, for the start-up log.
func (n *Node) clockMode() string {
	switch {
	case n.mon == nil:
		return "injected guard"
	case !n.cfg.Clock.HasAgent():
		return "host (no agent): watched for rollback and step"
	case n.cfg.Clock.DevReference:
		return "agent, DEVELOPMENT REFERENCE (dev_key)"
	}
	return "agent"
}

// raft returns the Raft instance, or nil before it is open.
func (n *Node) raft() *raft.Raft {
	if p := n.parts.Load(); p != nil {
		return p.r
	}
	return nil
}

// fatalError names the file behind the FSM's fatal error.
func (n *Node) fatalError() error {
	err := n.fsm.Fatal()
	var re *ticket.RestoreError
	if errors.As(err, &re) {
		return &DataError{File: "snapshot install into " + n.cfg.Cluster.Raft.DataDir, Err: err}
	}
	return &DataError{File: n.parts.Load().dbPath, Err: err}
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

func (n *Node) registerMetrics(reg prometheus.Registerer) {
	n.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{Name: "raft_leader_changes_total", Help: "Leadership transitions seen by this node."})
	reg.MustRegister(
		n.leaderChanges,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tickets_active", Help: "Tickets currently held."},
			func() float64 { return float64(n.fsm.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_state", Help: "0 follower, 1 candidate, 2 leader, 3 shutdown."},
			func() float64 {
				r := n.raft()
				if r == nil {
					return 0
				}
				switch r.State() {
				case raft.Candidate:
					return 1
				case raft.Leader:
					return 2
				case raft.Shutdown:
					return 3
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_voters", Help: "Voters in the Raft configuration."},
			func() float64 { return float64(n.countMembers(raft.Voter)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_non_voters", Help: "Non-voters (standbys) in the Raft configuration."},
			func() float64 { return float64(n.countMembers(raft.Nonvoter)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raft_term", Help: "Current Raft term."},
			func() float64 {
				if r := n.raft(); r != nil {
					return float64(r.CurrentTerm())
				}
				return 0
			}),
	)
}

// countMembers counts the configuration's servers of one suffrage.
func (n *Node) countMembers(suffrage raft.ServerSuffrage) int {
	r := n.raft()
	if r == nil {
		return 0
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == suffrage {
			c++
		}
	}
	return c
}

// leadership starts the leader's work on every gain of leadership and stops
// it on every loss.
func (n *Node) leadership(ctx context.Context) {
	stopLead := func() {}
	defer func() { stopLead() }()
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-n.notify:
			stopLead()
			stopLead = func() {}
			n.leaderChanges.Inc()
			if !leader {
				n.barrierTerm.Store(0)
				n.ready.Set(StageRaft, "lost leadership")
				continue
			}
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				n.lead(lctx)
			}()
			stopLead = func() { cancel(); <-done }
		}
	}
}

// lead commits a Barrier (so every earlier entry is applied), records Δ at
// bootstrap, becomes ready and runs the expiry loop.
func (n *Node) lead(ctx context.Context) {
	term := n.raft().CurrentTerm()
	n.ready.Set(StageReplay, "committing a barrier in term "+fmt.Sprint(term))
	start := time.Now()
	if err := n.raft().Barrier(0).Error(); err != nil {
		n.log.Warn("barrier failed", "term", term, "err", err)
		return
	}
	if n.fsm.Fatal() != nil {
		return
	}
	if n.fsm.Delta() == 0 {
		data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, DeltaMs: n.cfg.Clock.DeltaMs})
		if err != nil {
			n.log.Error("encode init", "err", err)
			return
		}
		res, err := n.propose(data)
		if err != nil || res.Code != ticket.CodeOK {
			n.log.Error("recording Δ failed", "err", err, "code", res.Code)
			return
		}
		n.log.Info("recorded Δ in the replicated state", "delta_ms", n.cfg.Clock.DeltaMs)
	}
	n.barrierTerm.Store(term)
	n.advanceClock(clockhealth.StageUniform, "single node: no other voter to agree with")
	n.advanceClock(clockhealth.StageReady, "")
	n.ready.Set(StageReady, "")
	n.log.Info("leader ready", "term", term, "applied_index", n.raft().AppliedIndex(), "tickets", n.fsm.Len(),
		"delta_ms", n.fsm.Delta(), "replay", time.Since(start).Round(time.Millisecond))
	n.expiryLoop(ctx)
}

// propose applies data through Raft and waits for the FSM's answer.
func (n *Node) propose(data []byte) (ticket.Result, error) {
	f := n.raft().Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return ticket.Result{}, &api.Error{Status: http.StatusServiceUnavailable, Code: "not_leader", Stage: string(StageRaft), Message: "this node is not the leader: " + err.Error()}
		case errors.Is(err, raft.ErrRaftShutdown):
			return ticket.Result{}, api.Unavailable(string(StageStopping), "shutdown", "the node is shutting down")
		}
		return ticket.Result{}, api.Unavailable("", "raft", "raft: %v", err)
	}
	res, ok := f.Response().(ticket.Result)
	if !ok {
		return ticket.Result{}, fmt.Errorf("node: unexpected FSM response %T", f.Response())
	}
	return res, nil
}
