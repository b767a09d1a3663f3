package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
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
	// no clock_check, no FAILED marker unless it also has Failed().
	Guard ClockGuard
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
	// Listener serves the API instead of listening on cfg.API.Addr, and
	// HealthListener the health endpoints instead of cfg.API.HealthAddr
	// (tests).
	Listener, HealthListener net.Listener
	// ExpiryInterval is how often the leader looks for expired tickets.
	ExpiryInterval time.Duration // default 100 ms
	// Registry receives the metrics; default: a new one with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Transport carries Raft's RPCs; default: in-memory (single node).
	Transport raft.Transport

	// Reload asks the run loop to re-read what can change without a
	// restart (SIGHUP): today the trust map (cluster.internode.
	// trusted_peer_keys), from ReloadConfig. A bad new config is refused
	// and the old one kept.
	Reload       <-chan struct{}
	ReloadConfig func() (Config, error)

	// Readiness, if set, is called with what /readyz says whenever it
	// changes (checked every 250 ms on the node's own goroutine), and a
	// last time with stage stopping: cmd/ticketd turns it into sd_notify
	// READY=1 / STATUS= / STOPPING=1 for a Type=notify unit.
	Readiness func(wire.Health)
}

// Run runs a ticketd node until ctx ends or the node fails. Commands set
// the process umask to 077 first (cmd/ticketd does), so every file and
// directory the node and Raft's snapshot store create is owner-only.
func Run(ctx context.Context, cfg Config) error { return RunWith(ctx, cfg, Deps{}) }

// server is one running ticketd; it is the API's Backend. Its goroutines —
// the run loop (RunWith's), the HTTP server, the leadership watcher and the
// leader's expiry loop — all end before RunWith returns.
type server struct {
	cfg    Config
	log    *slog.Logger
	wall   WallClock
	guard  ClockGuard
	mon    *clockhealth.Monitor // the guard, unless Deps.Guard replaced it
	stage  *stage.Holder
	hold   *holdOff
	expiry time.Duration
	dir    *datadir.Dir

	reg     *prometheus.Registry
	secrets apiSecrets
	fsm     *ticket.FSM
	cons    atomic.Pointer[consensus.Raft] // nil until Raft is open; HTTP handlers read it concurrently
	mode    mode                           // single node or cluster (mode.go)
	notify  chan bool
	metrics *api.Metrics
	waits   *waitHub // blocking grants and watches (waiters.go)

	barrierTerm   atomic.Uint64 // term in which this leader's Barrier committed
	expiryRounds  atomic.Uint64 // rounds of the expiry loop (tests wait on it)
	started       time.Time     // when newNode ran (liveness boot grace)
	leaderChanges prometheus.Counter
	expireEarly   bool // testHooks.expireEarly (tests only)
}

// RunWith is Run with injected dependencies. Start-up order (SPEC §3.5):
// the data dir is locked and checked (retired: refused; FAILED marker: hold
// off), the API listens (probes see every stage), clock_check proves the
// clock with an agent configured, then Raft opens and the node becomes
// leader and ready. The run loop then waits for the end: ctx, a stopped
// FSM, the API server's failure, or a FAILED clock (to which it reacts
// itself, on this goroutine).
func RunWith(ctx context.Context, cfg Config, deps Deps) error {
	return runWith(ctx, cfg, deps, testHooks{expireEarly: faultExpireEarly})
}

// runWith is RunWith with the hooks of this package's tests (testhooks.go).
func runWith(ctx context.Context, cfg Config, deps Deps, hooks testHooks) error {
	n, err := newNode(cfg, &deps, hooks)
	if err != nil {
		return err
	}
	defer n.dir.Close()
	return n.run(ctx, &deps, hooks)
}

// newNode validates the config, resolves the clocks, opens and checks the
// data dir, and builds the clock-health monitor.
func newNode(cfg Config, deps *Deps, hooks testHooks) (*server, error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &server{
		cfg: cfg, log: deps.Logger, guard: deps.Guard, stage: stage.NewHolder(),
		expiry: deps.ExpiryInterval, fsm: ticket.New(cfg.Clock.DeltaMs), notify: make(chan bool, 16),
		started: time.Now(), expireEarly: hooks.expireEarly,
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.expiry <= 0 {
		n.expiry = 100 * time.Millisecond
	}
	wall, mono, err := clockDeps(deps)
	if err != nil {
		return nil, err
	}
	n.wall = wall
	// The data dir first, under its lock, and with it the NodeId: a
	// retired one is refused or replaced by the next generation (SPEC
	// §3.4, generation.go), a FAILED marker holds off (SPEC §4).
	if n.dir, n.cfg.Cluster.Name, err = dataDirID(&n.cfg, wall.Now(), n.log); err != nil {
		return nil, err
	}
	if n.cfg.Cluster.Name != cfg.Cluster.Name && n.cfg.Cluster.Raft.BootstrapExpect != 0 {
		n.log.Info("a new generation joins the cluster, it never bootstraps one: cluster.raft.bootstrap_expect taken as 0",
			"node_id", n.cfg.Cluster.Name, "bootstrap_expect", n.cfg.Cluster.Raft.BootstrapExpect)
		n.cfg.Cluster.Raft.BootstrapExpect = 0
	}
	n.waits = newWaitHub(n.cfg.Cluster.Name, cfg.API, func() int { return n.mode.aliveNodes() })
	n.fsm.OnChange(n.waits.changed)
	if n.hold, err = openHoldOff(n.dir, n.wall.Now(), deps.HoldOffUntil, cfg.Clock.DeltaMs); err != nil {
		n.dir.Close()
		return nil, err
	}
	n.reg = deps.Registry
	if n.reg == nil {
		n.reg = prometheus.NewRegistry()
		n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	env := deps.Env
	if env == nil {
		env = os.LookupEnv
	}
	if err := n.buildMonitor(deps, env, wall, mono); err != nil {
		n.dir.Close()
		return nil, err
	}
	n.mode = singleMode{n: n, tr: deps.Transport}
	if cfg.Cluster.Enabled {
		if n.mode, err = newClusterMode(n, hooks.cluster); err != nil {
			n.dir.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *server) run(ctx context.Context, deps *Deps, hooks testHooks) (err error) {
	n.metrics = api.NewMetrics(n.reg)
	n.registerMetrics(n.reg)
	if hooks.built != nil {
		hooks.built(n)
	}

	srv, err := n.startAPI(deps.Listener, deps.HealthListener)
	if err != nil {
		return err
	}
	defer func() {
		n.stage.Set(stage.Stopping, "")
		n.waits.close()
		srv.stop()
	}()
	if deps.Readiness != nil {
		stopWatch := n.watchReadiness(deps.Readiness, 250*time.Millisecond)
		defer stopWatch()
	}

	var failed <-chan struct{}
	if f, ok := n.guard.(interface{ Failed() <-chan struct{} }); ok {
		failed = f.Failed()
	}
	reused := n.mode.reused() // the cluster holds this NodeId retired (node/cluster/generation.go)
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
		if n.cfg.Clock.HasAgent() {
			if err := n.clockCheck(ctx); err != nil {
				if errors.Is(err, errStopped) {
					return nil
				}
				return err
			}
		}
	}

	n.stage.Set(stage.Raft, "opening the data dir")
	defer n.mode.close() // after Raft closed (deferred calls run last in, first out)
	cons, err := n.mode.open()
	if err != nil {
		n.stage.Set(stage.Failed, err.Error())
		return err
	}
	n.cons.Store(cons)
	n.stage.Set(stage.Raft, "waiting for leadership")

	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { n.leadership(lctx) })
	// Raft shuts down before the leader's goroutines are waited for: a
	// proposal blocked on Raft's queue then returns at once (shutdown)
	// instead of running out its enqueue timeout.
	defer func() {
		stop()
		n.mode.noteStop() // before Raft closes: does a cluster voter keep its vote?
		if cerr := cons.Close(); cerr != nil && err == nil {
			err = cerr
		}
		wg.Wait()
	}()
	// The cluster's bootstrap and forward server stop before Raft closes,
	// and not before the graceful stop below has handed off and let the
	// requests in flight finish: forwarded writes still get their answers
	// (TestGracefulStopAnswersForwardedWrites).
	mctx, mstop := context.WithCancel(context.WithoutCancel(lctx))
	mdone := make(chan struct{})
	go func() { defer close(mdone); n.mode.run(mctx, cons) }()
	defer func() { mstop(); <-mdone }()
	for {
		select {
		case <-ctx.Done():
			// Graceful stop (SPEC §5): a cluster leader hands its
			// leadership to another voter first, then the proposals the
			// hand-off ended learn their entries' fates and in-flight
			// requests finish (forwarding reaches the new leader), then Raft closes
			// and gossip ends — without a leave message for a voter, which
			// keeps its vote (the deferred calls).
			n.stage.Set(stage.Stopping, "")
			n.mode.handOff()
			n.waits.close() // waits end with a 503 the client retries elsewhere
			srv.stop()
			return nil
		case <-n.fsm.Stopped():
			err = n.fatalError()
			n.stage.Set(stage.Failed, err.Error())
			n.log.Error("state machine stopped; refusing to serve", "err", err)
			return err
		case err = <-srv.errc:
			return fmt.Errorf("node: API server: %w", err)
		case <-failed:
			failed = nil // once; FAILED is terminal
			// SPEC §3.4: a FAILED cluster node exits non-zero once it
			// has handed off leadership, written its marker and shut
			// Raft down, so that its supervisor starts it again
			// (generation.go: as the next generation, or refused). A
			// single node serves 503s until stopped.
			if err := n.clockFailed(); err != nil {
				return err
			}
		case <-reused:
			return n.mode.reusedExit() // stage removed
		case <-deps.Reload:
			n.reload(deps.ReloadConfig)
		}
	}
}

// failedExit is what a FAILED cluster node's run returns: its clock
// error (exit status 1).
func (n *server) failedExit() error {
	if ce := n.clockErr(); ce != nil {
		return ce
	}
	return errors.New("node: clock FAILED")
}

// clockMode describes the clock the node runs on, for the start-up log.
func (n *server) clockMode() string {
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
func (n *server) raft() *raft.Raft {
	if c := n.cons.Load(); c != nil {
		return c.Raft()
	}
	return nil
}

// fatalError names the file behind the FSM's fatal error.
func (n *server) fatalError() error {
	err := n.fsm.Fatal()
	var re *ticket.RestoreError
	if errors.As(err, &re) {
		return &datadir.Error{File: "snapshot install into " + n.dir.Path(), Err: err}
	}
	file := n.dir.RaftDB()
	if c := n.cons.Load(); c != nil {
		file = c.LogPath()
	}
	return &datadir.Error{File: file, Err: err}
}
