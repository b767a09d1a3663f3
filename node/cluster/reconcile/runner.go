package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of RunnerConfig.
const (
	DefaultDebounce  = 2 * time.Second  // raft.reconcile_debounce
	DefaultInterval  = 10 * time.Second // a pass even without a trigger
	DefaultMaxLag    = 256              // log entries a non-voter may trail by and count as caught up
	DefaultStableFor = 10 * time.Second // how long it must stay within MaxLag
	// DefaultDeadVoterGrace is raft.dead_voter_grace: how long a gone
	// voter keeps its slot when no replacement can take it (SPEC §5).
	DefaultDeadVoterGrace = 10 * time.Minute
	// minRecheck is the soonest a pass re-checks a non-voter that was not
	// caught up.
	minRecheck = 50 * time.Millisecond
)

// maxStepsPerPass bounds one pass; a healthy plan converges in a few steps
// per server.
const maxStepsPerPass = 256

// RaftOps is what the runner needs of the leader's Raft. RaftAdapter
// implements it over *raft.Raft; tests use a fake.
type RaftOps interface {
	// GetConfiguration returns the latest configuration.
	GetConfiguration() ([]Server, error)
	// AddNonvoter adds a server that is not in the configuration as a
	// non-voter.
	AddNonvoter(id, addr string) error
	// Promote makes an existing non-voter a voter (never a new server).
	Promote(id, addr string) error
	Demote(id string) error
	Remove(id string) error
	// LeaderID is the NodeId of the current leader as this node sees it.
	LeaderID() string
}

// IndexReader is the optional part of RaftOps the runner needs when it
// judges catch-up itself (RunnerConfig.Progress): the leader's last log
// index.
type IndexReader interface{ LastIndex() uint64 }

// Clock is the runner's wall clock (burst detection, catch-up stability).
type Clock interface{ Now() time.Time }

// Timer is a one-shot timer; *time.Timer wrapped by SystemTimer satisfies it.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }

// SystemTimer is the default RunnerConfig.NewTimer.
func SystemTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

// RunnerConfig configures a Runner. Raft, Members and LocalID are required.
type RunnerConfig struct {
	Raft RaftOps
	// LocalID is this node's NodeId: the runner acts only while Raft names
	// it the leader.
	LocalID string
	// Members returns the current gossip view (see Input.Members). It is
	// called on the runner's goroutine and must not block for long.
	Members func() []Member
	// Limits: the zero value means DefaultLimits. Normalize max_voters (and
	// log it) before, with NormalizeMaxVoters.
	Limits Limits
	// Debounce is raft.reconcile_debounce: a pass runs this long after the
	// first Trigger; triggers meanwhile join it. Default 2 s.
	Debounce time.Duration
	// Interval is the longest time between passes. Default 10 s.
	Interval time.Duration
	// Progress, when set, makes the runner judge CaughtUp itself (replacing
	// Member.CaughtUp): a non-voter is caught up once its last log index
	// (ok false: unknown) has stayed within MaxLag of the leader's for
	// StableFor. Raft must then implement IndexReader. hashicorp/raft does
	// not expose a follower's progress on the leader, so this comes from
	// the follower (gossip metadata or the mesh).
	Progress  func(id string) (lastIndex uint64, ok bool)
	MaxLag    uint64        // default DefaultMaxLag
	StableFor time.Duration // default DefaultStableFor
	// DeadVoterGrace is raft.dead_voter_grace: a voter gone (Gone) for this
	// long, as this runner has seen it, is removed even without a
	// replacement (Member.DeadPastGrace). Default DefaultDeadVoterGrace. A
	// new leader's runner starts counting afresh: a leader change never
	// shortens the grace.
	DeadVoterGrace time.Duration
	Clock          Clock                       // default the system clock
	NewTimer       func(d time.Duration) Timer // default SystemTimer
	Logger         *slog.Logger                // default slog.Default()
	// Registerer receives raft_voter_churn_burst_total (nil: not
	// registered). Registering twice (a Runner per leadership term) reuses
	// the first counter.
	Registerer prometheus.Registerer
}

// Runner applies Plan on the leader, one change at a time.
//
// raft_voter_churn_burst_total counts bursts: a burst is two or more voter
// changes (promote, demote, or remove of a voter), each within Debounce of
// the previous one; it is counted once, at its second change. Replacing a
// dead voter (promote a standby, remove the dead one) is one burst; a
// steadily rising count means members keep failing or flapping.
type Runner struct {
	cfg     RunnerConfig
	idx     IndexReader
	log     *slog.Logger
	bursts  prometheus.Counter
	trigger chan struct{}

	mu      sync.Mutex // guards running
	running bool

	// State of one Run (its goroutine only).
	lastVoterChange time.Time
	inBurst         bool
	within          map[string]time.Time // non-voter → since when within MaxLag
	goneSince       map[string]time.Time // voter → since when Gone

	afterPass func() // test hook: called after every pass
}

// ErrRunning is returned by Run when another Run of the same Runner is
// still going.
var ErrRunning = errors.New("reconcile: the runner is already running")

// NewRunner checks cfg, fills in defaults and registers the metric.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	switch {
	case cfg.Raft == nil:
		return nil, errors.New("reconcile: RunnerConfig.Raft is required")
	case cfg.Members == nil:
		return nil, errors.New("reconcile: RunnerConfig.Members is required")
	case cfg.LocalID == "":
		return nil, errors.New("reconcile: RunnerConfig.LocalID is required")
	case cfg.Debounce < 0 || cfg.Interval < 0 || cfg.StableFor < 0 || cfg.DeadVoterGrace < 0:
		return nil, errors.New("reconcile: Debounce, Interval, StableFor and DeadVoterGrace must not be negative")
	}
	r := &Runner{cfg: cfg, trigger: make(chan struct{}, 1)}
	if cfg.Progress != nil {
		idx, ok := cfg.Raft.(IndexReader)
		if !ok {
			return nil, errors.New("reconcile: RunnerConfig.Progress needs a Raft that implements IndexReader (LastIndex)")
		}
		r.idx = idx
	}
	c := &r.cfg
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxLag == 0 {
		c.MaxLag = DefaultMaxLag
	}
	if c.StableFor == 0 {
		c.StableFor = DefaultStableFor
	}
	if c.DeadVoterGrace == 0 {
		c.DeadVoterGrace = DefaultDeadVoterGrace
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.NewTimer == nil {
		c.NewTimer = SystemTimer
	}
	r.log = c.Logger
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("component", "reconcile")
	r.bursts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "raft_voter_churn_burst_total",
		Help: "Bursts of voter changes by the reconciler: two or more voter promotions, demotions or removals each within raft.reconcile_debounce of the previous.",
	})
	if c.Registerer != nil {
		if err := c.Registerer.Register(r.bursts); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("reconcile: registering raft_voter_churn_burst_total: %w", err)
			}
			existing, ok := are.ExistingCollector.(prometheus.Counter)
			if !ok {
				return nil, fmt.Errorf("reconcile: raft_voter_churn_burst_total is registered as another kind of metric")
			}
			r.bursts = existing
		}
	}
	return r, nil
}

// Trigger asks for a pass within Debounce (membership changed). It never
// blocks.
func (r *Runner) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx is done and returns ctx.Err(). Give it a ctx
// that is cancelled when this node stops being the leader; it also skips
// passes while Raft names another leader. The first pass runs Debounce after
// the start. Run starts no goroutine.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return ErrRunning
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
	}()
	r.lastVoterChange, r.inBurst, r.within, r.goneSince = time.Time{}, false, map[string]time.Time{}, map[string]time.Time{}

	timer := r.cfg.NewTimer(r.cfg.Debounce)
	debouncing := true
	defer func() { timer.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.trigger:
			if !debouncing {
				timer.Stop()
				timer = r.cfg.NewTimer(r.cfg.Debounce)
				debouncing = true
			}
		case <-timer.C():
			debouncing = false
			next := r.pass(ctx)
			r.log.Debug("reconcile pass done", "next_in", next)
			if r.afterPass != nil {
				r.afterPass()
			}
			timer = r.cfg.NewTimer(next)
		}
	}
}

// pass plans and applies changes one at a time until the plan is empty, an
// operation fails, or this node is not the leader; it returns when the next
// pass is due. An AddNonvoter that fails is skipped for the rest of the
// pass and the plan's next change applied: an addition changes no vote, so
// the steps after it stay quorum-safe, and one node Raft will not take
// (a duplicate address, say) never holds the others up.
func (r *Runner) pass(ctx context.Context) time.Duration {
	failedAdds := map[string]bool{}
	for step := 0; step < maxStepsPerPass; step++ {
		if ctx.Err() != nil {
			return r.cfg.Interval
		}
		if leader := r.cfg.Raft.LeaderID(); leader != r.cfg.LocalID {
			r.log.Debug("not the leader, skipping the pass", "leader", leader)
			return r.cfg.Interval
		}
		servers, err := r.cfg.Raft.GetConfiguration()
		if err != nil {
			r.log.Warn("reading the Raft configuration failed; retrying at the next pass", "err", err)
			return r.cfg.Interval
		}
		members := append([]Member(nil), r.cfg.Members()...) // judgeCatchUp and judgeGrace write to it
		next := r.cfg.Interval
		if r.idx != nil {
			next = min(next, r.judgeCatchUp(servers, members))
		}
		var due time.Duration
		members, due = r.judgeGrace(servers, members)
		next = min(next, due)
		plan := Plan(Input{Leader: r.cfg.LocalID, Members: members, Config: servers, Limits: r.cfg.Limits})
		for len(plan) > 0 && plan[0].Kind == AddNonvoter && failedAdds[plan[0].ID] {
			plan = plan[1:]
		}
		if len(plan) == 0 {
			return min(next, r.retryIn(failedAdds))
		}
		c := plan[0]
		wasVoter := false
		for _, s := range servers {
			if s.ID == c.ID {
				wasVoter = s.Suffrage == Voter
			}
		}
		if err := r.apply(c); err != nil {
			if c.Kind == AddNonvoter && ctx.Err() == nil {
				failedAdds[c.ID] = true
				r.log.Warn("raft configuration change failed; going on with the rest of the plan, retrying it at the next pass", "change", c.Kind.String(), "id", c.ID, "why", c.Why, "err", err)
				continue
			}
			r.log.Warn("raft configuration change failed; re-planning at the next pass", "change", c.Kind.String(), "id", c.ID, "why", c.Why, "err", err)
			return min(next, r.cfg.Debounce)
		}
		r.log.Info("raft configuration change", "change", c.Kind.String(), "id", c.ID, "why", c.Why, "pending", len(plan)-1)
		if c.Kind == Promote || wasVoter {
			r.voterChanged()
		}
	}
	r.log.Warn("reconcile pass stopped without converging", "steps", maxStepsPerPass)
	return r.cfg.Interval
}

// retryIn is when a pass that skipped failed additions runs again.
func (r *Runner) retryIn(failedAdds map[string]bool) time.Duration {
	if len(failedAdds) > 0 {
		return r.cfg.Debounce
	}
	return r.cfg.Interval
}

func (r *Runner) apply(c Change) error {
	ops := r.cfg.Raft
	switch c.Kind {
	case AddNonvoter:
		return ops.AddNonvoter(c.ID, c.Address)
	case Promote:
		return ops.Promote(c.ID, c.Address)
	case Demote:
		return ops.Demote(c.ID)
	case Remove:
		return ops.Remove(c.ID)
	}
	return fmt.Errorf("reconcile: unknown change kind %v", c.Kind)
}

func (r *Runner) voterChanged() {
	now := r.cfg.Clock.Now()
	if !r.lastVoterChange.IsZero() && now.Sub(r.lastVoterChange) <= r.cfg.Debounce {
		if !r.inBurst {
			r.bursts.Inc()
			r.inBurst = true
		}
	} else {
		r.inBurst = false
	}
	r.lastVoterChange = now
}

// judgeCatchUp sets CaughtUp on every member from Progress and returns how
// soon a non-voter still inside its stability window will be due.
func (r *Runner) judgeCatchUp(servers []Server, members []Member) time.Duration {
	now := r.cfg.Clock.Now()
	leaderIdx := r.idx.LastIndex()
	nonvoter := map[string]bool{}
	for _, s := range servers {
		if s.Suffrage == Nonvoter {
			nonvoter[s.ID] = true
		}
	}
	for id := range r.within {
		if !nonvoter[id] {
			delete(r.within, id)
		}
	}
	next := r.cfg.Interval
	for i := range members {
		m := &members[i]
		m.CaughtUp = false
		if !nonvoter[m.ID] {
			continue
		}
		idx, ok := r.cfg.Progress(m.ID)
		if !ok || idx+r.cfg.MaxLag < leaderIdx {
			// Not caught up (or its progress unknown this time): look
			// again after a debounce, not a whole Interval — a standby
			// waiting to take a dead voter's slot would otherwise wait
			// 10 s for the next pass.
			delete(r.within, m.ID)
			next = min(next, max(r.cfg.Debounce, minRecheck))
			continue
		}
		since, seen := r.within[m.ID]
		if !seen {
			since = now
			r.within[m.ID] = now
		}
		if wait := since.Add(r.cfg.StableFor).Sub(now); wait > 0 {
			next = min(next, wait)
		} else {
			m.CaughtUp = true
		}
	}
	return next
}

// judgeGrace sets DeadPastGrace on every gone voter of the configuration
// (Gone; a voter the Members func did not list is added as gone) that
// has been gone for DeadVoterGrace, logs a voter the first time it is
// seen gone, and returns the members and how soon the next grace ends.
func (r *Runner) judgeGrace(servers []Server, members []Member) ([]Member, time.Duration) {
	now := r.cfg.Clock.Now()
	listed := map[string]int{}
	for i, m := range members {
		if _, dup := listed[m.ID]; !dup {
			listed[m.ID] = i // Plan takes the first entry for an id
		}
	}
	next := r.cfg.Interval
	gone := map[string]bool{}
	for _, s := range servers {
		if s.Suffrage != Voter || s.ID == r.cfg.LocalID {
			continue
		}
		i, ok := listed[s.ID]
		if !ok {
			members = append(members, Member{ID: s.ID, Address: s.Address})
			i = len(members) - 1
			listed[s.ID] = i
		}
		m := &members[i]
		if !Gone(*m) {
			continue
		}
		gone[s.ID] = true
		since, seen := r.goneSince[s.ID]
		if !seen {
			since = now
			r.goneSince[s.ID] = now
			r.log.Warn("voter gone (gossip-dead or retired, silent in Raft): it keeps its slot until a caught-up replacement takes it or raft.dead_voter_grace passes",
				"id", s.ID, "retired", m.Retired, "dead_voter_grace", r.cfg.DeadVoterGrace)
		}
		if left := since.Add(r.cfg.DeadVoterGrace).Sub(now); left > 0 {
			next = min(next, left)
		} else {
			m.DeadPastGrace = true
		}
	}
	for id := range r.goneSince {
		if !gone[id] {
			delete(r.goneSince, id)
		}
	}
	return members, next
}
