package clockhealth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/protocol"
)

// ClockCheckSamples is how many consecutive healthy samples clock_check
// needs before the node may start its listeners (SPEC §3.5).
const ClockCheckSamples = 3

// Options configure a Monitor. Only Config is required; with an agent
// configured, Secret is too.
type Options struct {
	// Config is the clock: section; New normalizes and validates a copy.
	Config Config
	// Secret and NextSecret are the clock secrets (SPEC §1.4); see
	// LoadSecrets. With Config.DevReference they are turned into dev keys.
	Secret, NextSecret []byte
	// Wall and Mono are the clocks; both nil means the system clock.
	Wall WallClock
	Mono MonoClock
	// Dialer opens agent connections; nil means a *net.Dialer.
	Dialer Dialer
	// Rand is the nonce source; nil means crypto/rand.
	Rand io.Reader
	// NewTicker paces the loops Start runs; nil means SystemTicker.
	NewTicker TickerFunc
	// Logger receives the monitor's log lines; nil discards them.
	Logger *slog.Logger
	// Registerer receives the clock metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// KernelRxTimestamps takes an exchange's w1 from the kernel's receive
	// timestamp of the segment that carried the LF (SPEC §1.1: "when the
	// LF arrives"), not from a clock read after the read returned, which a
	// scheduler stall or a CPU quota makes late (rxstamp.go). The stamp is
	// CLOCK_REALTIME: set it only when Wall is the system clock (with
	// another clock every stamp falls outside its exchange and user-space
	// stamps are used). Where the platform has none (KernelRxTimestamps
	// false: not Linux) or the Dialer's connections are not sockets, it
	// changes nothing. clock_rx_timestamps_total{source} counts which
	// stamp each exchange used.
	KernelRxTimestamps bool
}

// Monitor is the node's clock health (SPEC §3): the prober, the running
// bound and the FAILED latch. It measures and latches; what a failure means
// (markers, leadership, Raft) is the node's, which reacts to Failed() on its
// own goroutine. All methods are safe for concurrent use.
type Monitor struct {
	cfg        Config
	host       bool // no agent: watch the host clock only (SPEC §4)
	keys       protocol.KeyRing
	devHint    protocol.KeyRing // dev keys, to say so when a --dev agent is used without dev_reference
	wall       WallClock
	mono       MonoClock
	dialer     Dialer
	rand       io.Reader
	newTicker  TickerFunc
	log        *slog.Logger
	met        *metrics
	timeout    time.Duration
	interval   time.Duration
	watchEvery time.Duration
	halfDelta  uint64
	staleNs    int64
	kernelRx   bool   // Options.KernelRxTimestamps
	beforeRead func() // tests: runs after the request is written, before the answer is read

	probeMu sync.Mutex // one round at a time
	randMu  sync.Mutex // one nonce reader at a time

	mu        sync.Mutex
	lastWall  int64 // the previous evaluation's wall reading (rollback check)
	baseWall  int64 // host mode: the readings the host watcher started from
	baseMono  int64
	startMono int64  // agent mode: staleness reference before the first sample
	have      bool   // a healthy sample is installed
	eNs       uint64 // the installed sample's e_ns (SPEC §3.1), before rounding
	w1, m1    int64
	last      SampleStatus
	boundMs   uint64
	rounds    uint64 // consecutive healthy rounds
	checked   bool   // clock_check passed
	stage     Stage
	detail    string
	failErr   *Error
	agents    []agentState
	checkedCh chan struct{}
	failedCh  chan struct{}
	started   bool
	closed    bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

type agentState struct {
	addr string
	st   AgentStatus
}

// New validates opts and returns a Monitor in stage clock_check (or, with
// no agent configured, in stage checked with the clock stages skipped).
// Call Start to run the prober and the watchdog, and Close to stop them.
func New(opts Options) (*Monitor, error) {
	cfg := opts.Config
	cfg.Normalize()
	if err := cfg.Validate("clock"); err != nil {
		return nil, err
	}
	m := &Monitor{
		cfg:       cfg,
		host:      !cfg.HasAgent(),
		wall:      opts.Wall,
		mono:      opts.Mono,
		dialer:    opts.Dialer,
		rand:      opts.Rand,
		newTicker: opts.NewTicker,
		log:       opts.Logger,
		timeout:   time.Duration(cfg.ProbeTimeoutMs) * time.Millisecond,
		interval:  time.Duration(cfg.ProbeIntervalMs) * time.Millisecond,
		halfDelta: cfg.DeltaMs / 2,
		kernelRx:  opts.KernelRxTimestamps && KernelRxTimestamps && cfg.HasAgent(),
		staleNs:   int64(cfg.StalenessMs) * 1e6,
		checkedCh: make(chan struct{}),
		failedCh:  make(chan struct{}),
	}
	m.watchEvery = max(time.Millisecond, m.interval/4)
	if m.kernelRx {
		holdRxTimestamps()
	}
	switch {
	case m.wall == nil && m.mono == nil:
		c := NewSystemClock()
		m.wall, m.mono = c, c
	case m.wall == nil || m.mono == nil:
		return nil, errors.New("clockhealth: Options.Wall and Options.Mono are set together or not at all")
	}
	if m.dialer == nil {
		m.dialer = &net.Dialer{}
	}
	if m.rand == nil {
		m.rand = rand.Reader
	}
	if m.newTicker == nil {
		m.newTicker = SystemTicker
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if !m.host {
		if len(opts.Secret) < secret.MinLen {
			return nil, fmt.Errorf("clockhealth: clock.secret_file: the clock secret holds %d bytes; at least %d are required", len(opts.Secret), secret.MinLen)
		}
		if len(opts.NextSecret) > 0 && len(opts.NextSecret) < secret.MinLen {
			return nil, fmt.Errorf("clockhealth: clock.next_secret_file: the next clock secret holds %d bytes; at least %d are required", len(opts.NextSecret), secret.MinLen)
		}
		m.keys = KeyRing(opts.Secret, opts.NextSecret, cfg.DevReference)
		if !cfg.DevReference {
			// Only to explain a mac failure: a dev agent's MAC never passes here.
			m.devHint = KeyRing(opts.Secret, opts.NextSecret, true)
		}
		for _, a := range cfg.Agents() {
			m.agents = append(m.agents, agentState{addr: a, st: AgentStatus{Addr: a}})
		}
	}
	met, err := newMetrics(opts.Registerer, cfg.DevReference, cfg.DeltaMs)
	if err != nil {
		return nil, err
	}
	m.met = met

	w, mo := m.readClocks()
	m.lastWall = w
	m.baseWall, m.baseMono = w, mo
	m.startMono = mo
	if m.host {
		m.checked = true
		close(m.checkedCh)
		m.stage = StageChecked
		m.detail = "no clock agent configured: clock stages skipped; the host clock is trusted and watched for rollback and step"
		m.met.state.Set(StateHealthy)
		m.log.Info("clock health: no agent, watching the host clock for rollback and step", "delta_ms", cfg.DeltaMs)
	} else {
		m.stage = StageClockCheck
		m.detail = fmt.Sprintf("waiting for %d consecutive healthy samples", ClockCheckSamples)
		m.met.state.Set(StateChecking)
		m.log.Info("clock health: probing agents", "delta_ms", cfg.DeltaMs, "agents", strings.Join(cfg.Agents(), ","),
			"burst", cfg.Burst, "rotation", len(opts.NextSecret) > 0, "dev_reference", cfg.DevReference)
		if worst := cfg.ProbeIntervalMs + cfg.Burst*cfg.ProbeTimeoutMs; worst > cfg.StalenessMs {
			m.log.Info("clock health: a burst whose every exchange times out would outlast the staleness window; such a round is cut at its end (stale)",
				"probe_interval_ms", cfg.ProbeIntervalMs, "burst", cfg.Burst, "probe_timeout_ms", cfg.ProbeTimeoutMs, "staleness_ms", cfg.StalenessMs)
		}
	}
	if cfg.DevReference {
		m.log.Warn("clock health: DEV REFERENCE: clock.dev_reference is set, samples come from a development agent (dev_key), not a trusted time source")
	}
	return m, nil
}

// Config returns the normalized configuration in force.
func (m *Monitor) Config() Config { return m.cfg }

// Reading the clocks: a wall reading is paired with the monotonic time
// taken just around it. If the thread is descheduled between the two reads
// (a loaded host can stall it for hundreds of ms), the pair would differ by
// the stall and look like a wall step of that size. So the wall read is
// bracketed by two monotonic reads and retried while the bracket is wider
// than maxReadGapNs; the monotonic value is the bracket's midpoint.
const (
	maxReadGapNs = 100_000 // 100 µs: far below the 1 ms step allowance
	readAttempts = 8
)

func (m *Monitor) readClocks() (wallNs, monoNs int64) {
	best := int64(math.MaxInt64)
	for range readAttempts {
		ma := m.mono.NowNs()
		w := m.wall.Now().UnixNano()
		mb := m.mono.NowNs()
		if gap := mb - ma; gap < best {
			best, wallNs, monoNs = gap, w, ma+gap/2
		}
		if best <= maxReadGapNs {
			break
		}
	}
	return wallNs, monoNs
}

// Start runs the prober (one round per probe interval, the first at once)
// and the watchdog, which re-evaluates the running bound every quarter
// interval so staleness, rollback and steps are seen without traffic.
func (m *Monitor) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.closed {
		return errors.New("clockhealth: Start called twice or after Close")
	}
	m.started = true
	if !m.have {
		_, m.startMono = m.readClocks()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if !m.host {
		m.wg.Go(func() { m.probeLoop(ctx) })
	}
	m.wg.Go(func() { m.watchLoop(ctx) })
	return nil
}

// Close stops the loops and waits for them; an exchange in flight is cut
// short and does not count. Close does not clear FAILED.
func (m *Monitor) Close() error {
	m.mu.Lock()
	m.closed = true
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.wg.Wait()
	return nil
}

func (m *Monitor) probeLoop(ctx context.Context) {
	t := m.newTicker("probe", m.interval)
	defer t.Stop()
	for {
		_ = m.Probe(ctx)
		if m.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (m *Monitor) watchLoop(ctx context.Context) {
	t := m.newTicker("watchdog", m.watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.failedCh:
			return
		case <-t.C():
			_ = m.Check()
		}
	}
}

// ClockCheck waits until clock_check passes (nil), the clock FAILED (the
// *Error: the process exits non-zero, and since it never joined nothing is
// retired), or ctx ends. In host mode it returns nil at once.
func (m *Monitor) ClockCheck(ctx context.Context) error {
	select {
	case <-m.checkedCh:
		return m.Err()
	case <-m.failedCh:
		return m.Err()
	case <-ctx.Done():
		if err := m.Err(); err != nil {
			return err
		}
		return ctx.Err()
	}
}

// Err returns the FAILED error (an *Error) or nil.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr == nil {
		return nil
	}
	return m.failErr
}

// Failed is closed once the clock FAILED (the latch's side effects in this
// package — metrics, the log line — are done).
func (m *Monitor) Failed() <-chan struct{} { return m.failedCh }

// Check re-evaluates the clock now, from the injected clocks (SPEC §3.2):
// the running bound including any wall-clock step since the last sample,
// staleness and rollback since the previous evaluation. The ticket layer
// calls it before every Grant, Renew and Expire it proposes. It returns nil
// when healthy, ErrClockCheck before clock_check passed, and otherwise the
// latched *Error (protocol.ReasonOf reads its reason). It does not allocate
// except on the one call that latches FAILED.
func (m *Monitor) Check() error {
	m.mu.Lock()
	if m.failErr != nil {
		e := m.failErr
		m.mu.Unlock()
		return e
	}
	w, mo := m.readClocks()
	perr := m.evaluateLocked(w, mo)
	if perr == nil {
		checked, bound := m.checked, m.boundMs
		m.mu.Unlock()
		m.met.bound.Set(float64(bound))
		if !checked {
			return ErrClockCheck
		}
		return nil
	}
	e, first := m.latchLocked(perr, "")
	m.mu.Unlock()
	if first {
		m.afterFail(e)
	}
	return e
}

// evaluateLocked is one evaluation at (w, mo). Checks, first failing one
// wins (SPEC §1.5 order, with §3.2's rule that a bound pushed past Δ/2 by a
// step is named step): bound without a step, stale, rollback, bound with a
// step.
func (m *Monitor) evaluateLocked(w, mo int64) *protocol.Error {
	dWall := w - m.lastWall
	m.lastWall = w
	var bound uint64
	var step, stale bool
	var sinceMono int64
	switch {
	case m.host:
		sw, sm := w-m.baseWall, mo-m.baseMono
		bound = protocol.CeilMs(protocol.AbsDiff(sw, sm))
		step = protocol.IsStep(sw, sm)
	case m.have:
		sw, sm := w-m.w1, mo-m.m1
		bound = protocol.RunningBound(m.eNs, sw, sm, m.cfg.MaxDriftPPM)
		step = protocol.IsStep(sw, sm)
		sinceMono = sm
		stale = sm > m.staleNs
	default:
		sinceMono = mo - m.startMono
		stale = sinceMono > m.staleNs
	}
	m.boundMs = bound
	exceeded := bound > m.halfDelta
	switch {
	case exceeded && !step:
		return protocol.Errorf(protocol.ReasonBound, "running bound %d ms > Δ/2 = %d ms", bound, m.halfDelta)
	case stale:
		return protocol.Errorf(protocol.ReasonStale, "no healthy sample for %d ms > staleness_ms %d", sinceMono/1e6, m.cfg.StalenessMs)
	case protocol.IsRollback(dWall):
		return protocol.Errorf(protocol.ReasonRollback, "wall clock went back %d µs between evaluations", -dWall/1e3)
	case exceeded:
		return protocol.Errorf(protocol.ReasonStep, "wall clock stepped: running bound %d ms > Δ/2 = %d ms", bound, m.halfDelta)
	}
	return nil
}

// latchLocked moves the monitor to FAILED unless it already is; first says
// whether this call did it (and so must run afterFail).
func (m *Monitor) latchLocked(perr *protocol.Error, agent string) (e *Error, first bool) {
	if m.failErr != nil {
		return m.failErr, false
	}
	m.failErr = &Error{Reason: perr.Reason, Agent: agent, Stage: m.stage, Err: perr}
	m.stage = StageFailed
	m.detail = ""
	return m.failErr, true
}

// afterFail runs the side effects of the latch once, outside the lock:
// metrics and the log line, then Failed() is closed.
func (m *Monitor) afterFail(e *Error) {
	m.met.state.Set(StateFailed)
	if c, ok := m.met.failures[e.Reason]; ok {
		c.Inc()
	}
	m.log.Error("clock health FAILED: this process will not grant again", "reason", string(e.Reason),
		"agent", e.Agent, "stage", string(e.Stage), "err", e.Error())
	close(m.failedCh)
}

// Probe runs one probe round now (SPEC §3.1): a burst of up to
// clock.burst exchanges per agent, the agents in parallel, within the
// round's deadline (roundBudget). It returns nil when an agent gave a sample
// within every limit and no exchange was invalid, dishonest or out of limits
// whatever its delay, and otherwise the latched *Error. A round cut short by
// ctx returns ctx.Err() and counts for nothing. In host mode it is Check.
func (m *Monitor) Probe(ctx context.Context) error {
	if m.host {
		return m.Check()
	}
	if err := m.Err(); err != nil {
		return err
	}
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	budget := m.roundBudget()
	if budget <= 0 { // the staleness window closed before this round began
		if err := m.Check(); err != nil && !errors.Is(err, ErrClockCheck) {
			return err
		}
		budget = m.timeout
	}
	bursts, expired, err := m.round(ctx, budget)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	v := m.judge(bursts)
	m.mu.Lock()
	for _, xs := range bursts {
		for i := range xs {
			m.tallyLocked(&xs[i])
		}
	}
	m.mu.Unlock()
	if err == nil && v.good == nil && v.fatal == nil && expired {
		// The round's deadline is the staleness window's end: what failed is
		// staleness, once the evaluation sees it.
		if e := m.Check(); e != nil && !errors.Is(e, ErrClockCheck) {
			return e
		}
	}

	m.mu.Lock()
	var e *Error
	var first bool
	switch {
	case err != nil: // the nonce source failed: fail closed
		e, first = m.latchLocked(asProtocolError(err, protocol.ReasonIO), "")
	case v.fatal != nil: // SPEC §3.1: a burst never outvotes a bad answer
		e, first = m.latchLocked(v.fatal.err, m.agents[v.fatal.agent].addr)
	case v.good == nil:
		e, first = m.latchLocked(v.failure(len(m.agents)), m.agents[v.pick.agent].addr)
	default:
		e, first = m.acceptLocked(v.good)
	}
	m.mu.Unlock()
	if first {
		m.afterFail(e)
	}
	if e != nil {
		return e
	}
	g := v.good
	m.met.rtt.Set(float64(g.s.RTTMs))
	if m.log.Enabled(ctx, slog.LevelDebug) { // SPEC §3.1's terms in ns, before the one rounding
		m.log.Debug("clock health: sample kept", "agent", g.s.Agent, "exchanges", v.n, "rtt_ns", g.rttNs,
			"uncertainty_ms", g.s.UncertaintyMs, "offset_ns", g.offNs, "residual_ns", g.resNs, "e_ns", g.eNs,
			"error_bound_ms", g.s.ErrorBoundMs, "rx", g.rx)
	}
	return nil
}

// roundBudget is the round's deadline (SPEC §3.1, §3.3-4), from now: the
// end of the staleness window, staleness_ms after the last healthy sample
// (before the first one, after Start). A burst never runs past it — beyond
// it the node is stale whatever the burst finds — and up to it a burst may
// use every exchange it has, though that outlasts the probe interval (the
// next round then starts when this one ends; ticks are not queued up).
func (m *Monitor) roundBudget() time.Duration {
	m.mu.Lock()
	ref := m.startMono
	if m.have {
		ref = m.m1
	}
	m.mu.Unlock()
	return time.Duration(ref + m.staleNs - m.mono.NowNs())
}

// verdict is what a round's exchanges come to (SPEC §3.1).
type verdict struct {
	good    *exchange // the sample within every limit with the smallest e_ns (first agent on a tie)
	fatal   *exchange // the first exchange that fails the node at once
	pick    *exchange // no good sample: the exchange whose reason the round fails with
	n       int       // exchanges in the round
	unreach int       // agents none of whose exchanges completed
}

// judge counts a round's exchanges (metrics) and finds its verdict. With no
// good sample the round fails with the reason of its completed exchange
// with the smallest rtt (the minimum-delay filter), or, when none
// completed, of the incomplete exchange that took the least time; ties go
// to the earlier exchange.
func (m *Monitor) judge(bursts [][]exchange) (v verdict) {
	for _, xs := range bursts {
		reached := false
		for i := range xs {
			x := &xs[i]
			v.n++
			m.met.exchange(x)
			switch x.class {
			case classOK:
				if v.good == nil || x.eNs < v.good.eNs {
					v.good = x
				}
			case classFatal:
				if v.fatal == nil {
					v.fatal = x
				}
			case classSlow:
				if v.pick == nil || v.pick.class == classIncomplete || x.rttNs < v.pick.rttNs {
					v.pick = x
				}
			case classIncomplete:
				if v.pick == nil || v.pick.class == classIncomplete && x.rttNs < v.pick.rttNs {
					v.pick = x
				}
			}
			reached = reached || x.class != classIncomplete
		}
		if !reached {
			v.unreach++
		}
	}
	return v
}

// failure is the error of a round without a good sample: the picked
// exchange's, saying how many exchanges (and agents) the round tried. A
// round of one exchange fails with that exchange's error as it is.
func (v *verdict) failure(agents int) *protocol.Error {
	x := v.pick.err
	switch {
	case v.n == 1:
		return x
	case agents > 1 && v.unreach == agents:
		return protocol.Wrap(x.Reason, fmt.Sprintf("no agent answered (%d of %d unreachable)", v.unreach, agents), x)
	}
	var note string
	switch {
	case agents > 1:
		note = fmt.Sprintf("the best of %d exchanges with %d agents, none usable; %d agents unreachable", v.n, agents, v.unreach)
	case v.pick.class == classIncomplete:
		note = fmt.Sprintf("none of %d exchanges completed", v.n)
	default:
		note = fmt.Sprintf("the smallest rtt of %d exchanges, none usable", v.n)
	}
	return protocol.Wrap(x.Reason, x.Detail+" ("+note+")", x.Err)
}

// acceptLocked installs a healthy sample as the running bound's base and
// evaluates at once (which also checks rollback since the previous
// evaluation). ClockCheckSamples consecutive healthy rounds pass clock_check.
func (m *Monitor) acceptLocked(x *exchange) (*Error, bool) {
	if m.failErr != nil {
		return m.failErr, false
	}
	ref := m.startMono
	if m.have {
		ref = m.m1
	}
	if gap := x.m1 - ref; gap > m.staleNs { // SPEC §3.3-4: the window closed before this sample came
		return m.latchLocked(protocol.Errorf(protocol.ReasonStale, "no healthy sample for %d ms > staleness_ms %d", gap/1e6, m.cfg.StalenessMs), "")
	}
	m.have, m.eNs, m.w1, m.m1, m.last = true, x.eNs, x.w1, x.m1, x.s
	w, mo := m.readClocks()
	if perr := m.evaluateLocked(w, mo); perr != nil {
		return m.latchLocked(perr, "")
	}
	m.rounds++
	if !m.checked && m.rounds >= ClockCheckSamples {
		m.checked = true
		m.stage = StageChecked
		m.detail = fmt.Sprintf("clock_check passed (%d consecutive healthy samples)", ClockCheckSamples)
		close(m.checkedCh)
		m.met.state.Set(StateHealthy)
		m.log.Info("clock health: clock_check passed", "bound_ms", m.boundMs, "delta_ms", m.cfg.DeltaMs)
	}
	m.met.bound.Set(float64(m.boundMs))
	return nil, false
}

// tallyLocked counts one exchange in its agent's status and logs the ones
// the burst tried again.
func (m *Monitor) tallyLocked(x *exchange) {
	if m.kernelRx && m.log.Enabled(context.Background(), slog.LevelDebug) {
		m.log.Debug("clock health: exchange timing", "agent", m.agents[x.agent].addr, "rx", x.rx, "rx_why", x.rxWhy, "rtt_ns", x.rttNs,
			"connect_ns", x.phase.connect, "write_ns", x.phase.write, "arrive_ns", x.phase.arrive, "read_ns", x.phase.read,
			"offset_ns", x.offNs)
	}
	a := &m.agents[x.agent].st
	a.Exchanges++
	a.LastAtUnixMs = x.s.AtUnixMs
	if x.class == classOK {
		a.OK++
		a.ConsecutiveUnreachable = 0
		a.LastResult, a.LastError = ResultOK, ""
		return
	}
	switch x.class {
	case classIncomplete:
		a.Unreachable++
		a.ConsecutiveUnreachable++
		m.log.Warn("clock health: agent unreachable", "agent", a.Addr, "reason", string(x.err.Reason),
			"consecutive", a.ConsecutiveUnreachable, "err", x.err.Error())
	case classSlow:
		a.ConsecutiveUnreachable = 0
		m.log.Info("clock health: slow exchange", "agent", a.Addr, "reason", string(x.err.Reason),
			"rtt_ms", x.s.RTTMs, "rx", x.rx, "err", x.err.Error())
	default:
		a.ConsecutiveUnreachable = 0
	}
	a.LastResult, a.LastError = string(x.err.Reason), x.err.Error()
}

// Status evaluates the clock now (as Check) and returns a snapshot for
// /readyz and /v1/status.
func (m *Monitor) Status() Status {
	_ = m.Check()
	m.mu.Lock()
	defer m.mu.Unlock()
	_, mo := m.readClocks()
	st := Status{
		Stage:            m.stage,
		StageDetail:      m.detail,
		Healthy:          m.checked && m.failErr == nil,
		Mode:             "agent",
		DevReference:     m.cfg.DevReference,
		DeltaMs:          m.cfg.DeltaMs,
		BoundMs:          m.boundMs,
		BoundLimitMs:     m.halfDelta,
		ClockCheckPassed: m.checked,
		HealthyRounds:    m.rounds,
	}
	if m.host {
		st.Mode = "host"
		st.ClockStages = "skipped: no clock agent configured (single node); the host clock is trusted and watched for rollback and step"
		st.SinceSampleMs = uint64(max(0, mo-m.baseMono) / 1e6)
	} else {
		st.StalenessMs = m.cfg.StalenessMs
		ref := m.startMono
		if m.have {
			ls := m.last
			st.LastSample = &ls
			ref = m.m1
		}
		st.SinceSampleMs = uint64(max(0, mo-ref) / 1e6)
		for _, a := range m.agents {
			st.Agents = append(st.Agents, a.st)
		}
	}
	if m.failErr != nil {
		st.Reason = m.failErr.Reason
		st.Error = m.failErr.Error()
		st.FailedStage = m.failErr.Stage
	}
	return st
}
