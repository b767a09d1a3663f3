package agent

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/protocol"
)

// SourceSpec is one source with its poll schedule.
type SourceSpec struct {
	Source   source.Source
	Interval time.Duration // between polls
	Timeout  time.Duration // one poll's budget
}

// PollObserver receives every poll's outcome (metrics).
type PollObserver interface {
	Poll(source string, err error)
}

// Sampler runs one poll loop per source and selects, at any instant, the
// healthy source with the lowest uncertainty (SPEC §2.1). Its goroutines
// live from Start to Close.
type Sampler struct {
	clock  source.Clock
	log    *slog.Logger
	obs    PollObserver
	maxAge time.Duration
	ppm    uint64

	pollers []*poller
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// pollState is what the last polls left: an immutable value swapped
// atomically, so the answer path never takes a lock.
type pollState struct {
	sample   source.Sample
	have     bool  // sample is usable (subject to max_source_age)
	err      error // the last poll's error, nil if it succeeded
	info     map[string]any
	polledAt time.Time
	polls    uint64
	failures uint64
}

type poller struct {
	spec  SourceSpec
	state atomic.Pointer[pollState]
	first chan struct{} // closed after the first poll
}

// NewSampler prepares the poll loops; Start runs them.
func NewSampler(specs []SourceSpec, maxAge time.Duration, ppm uint64, clock source.Clock, obs PollObserver, log *slog.Logger) *Sampler {
	s := &Sampler{clock: clock, log: log, obs: obs, maxAge: maxAge, ppm: ppm}
	for _, sp := range specs {
		p := &poller{spec: sp, first: make(chan struct{})}
		p.state.Store(&pollState{})
		s.pollers = append(s.pollers, p)
	}
	return s
}

// Start launches one goroutine per source; each polls at once, then every
// Interval.
func (s *Sampler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, p := range s.pollers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.loop(ctx, p)
		}()
	}
}

// Close stops the poll loops, waits for them and closes the sources.
func (s *Sampler) Close() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	for _, p := range s.pollers {
		if c, ok := p.spec.Source.(source.Closer); ok {
			if err := c.Close(); err != nil {
				s.log.Warn("closing source", "source", p.spec.Source.Name(), "err", err)
			}
		}
	}
}

// WaitFirstPolls returns when every source has been polled once or ctx ends.
func (s *Sampler) WaitFirstPolls(ctx context.Context) {
	for _, p := range s.pollers {
		select {
		case <-p.first:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Sampler) loop(ctx context.Context, p *poller) {
	t := time.NewTicker(p.spec.Interval)
	defer t.Stop()
	for {
		s.pollOnce(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Sampler) pollOnce(ctx context.Context, p *poller) {
	pctx, cancel := context.WithTimeout(ctx, p.spec.Timeout)
	sample, err := p.spec.Source.Poll(pctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: keep the last state
	}
	now := s.clock.Now()
	old := p.state.Load()
	next := &pollState{err: err, info: sample.Info, polledAt: now, polls: old.polls + 1, failures: old.failures}
	if next.info == nil {
		next.info = old.info
	}
	name := p.spec.Source.Name()
	switch {
	case err == nil && sample.Uncertainty <= 0:
		// A source bug must never produce an uncertainty of 0.
		err = source.Errorf(name, source.ReasonGarbage, "sample with uncertainty %v", sample.Uncertainty)
		next.err = err
		next.failures++
	case err == nil:
		next.sample, next.have = sample, true
	case source.ReasonOf(err) == source.ReasonUnreachable:
		// No answer this time: the previous sample stays usable, its bound
		// growing with age, until it is older than max_source_age.
		next.sample, next.have = old.sample, old.have
		next.failures++
	default:
		// The source answered and said (or showed) it cannot be trusted.
		next.failures++
	}
	p.state.Store(next)
	if s.obs != nil {
		s.obs.Poll(name, err)
	}
	switch {
	case err != nil && (old.err == nil || source.ReasonOf(old.err) != source.ReasonOf(err)):
		s.log.Warn("source unhealthy", "source", name, "reason", source.ReasonOf(err), "err", err)
	case err == nil && (old.err != nil || old.polls == 0):
		s.log.Info("source healthy", "source", name, "offset", sample.Offset, "uncertainty", sample.Uncertainty, "age", sample.Age)
	}
	if old.polls == 0 {
		close(p.first)
	}
}

// Selection is the answer the agent gives at one instant.
type Selection struct {
	Synced          bool
	Source          string // the selected source; "" when none is usable
	ReferenceUnixMs uint64
	UncertaintyMs   uint64
	SourceAgeMs     uint64
}

// view is one source evaluated at an instant.
type view struct {
	usable bool   // has a sample younger than max_source_age
	have   bool   // has a sample at all
	uMs    uint64 // uncertainty now, ms, rounded up, drift included, ≥ 1
	ageMs  uint64
	refMs  uint64
	refOK  bool
}

// evaluate applies SPEC §2.1 to one source's state at now:
//
//	age  = sample.Age + (now − sample.At)                      (monotonic)
//	step = |Δwall − Δmono| since sample.At                     (the local clock was stepped)
//	u    = ceil_ms(sample.Uncertainty + max_drift_ppm × age + step)   (in ns, ≥ 1)
//	R    = floor_ms(now + sample.Offset)
func (s *Sampler) evaluate(now time.Time, st *pollState) view {
	if !st.have {
		return view{}
	}
	// now.Sub is monotonic when both readings carry one; the wall clock
	// difference alone is now.UnixNano() − At.UnixNano().
	return s.evalAt(&st.sample, now.UnixNano(), now.Sub(st.sample.At))
}

// evalAt is evaluate's arithmetic for a wall reading nowNs and a monotonic
// span since the sample.
func (s *Sampler) evalAt(sm *source.Sample, nowNs int64, since time.Duration) view {
	if since < 0 {
		since = 0 // a wall clock stepped back under a manual clock; never a negative age
	}
	step := protocol.AbsDiff(nowNs-sm.At.UnixNano(), int64(since))
	ageNs := satAddNs(sm.Age, since)
	v := view{have: true}
	v.ageMs = protocol.CeilMs(ageNs)
	// The three terms are summed in ns and rounded up once: ceil(a+b+c)
	// still bounds a+b+c, up to 2 ms tighter than rounding each term.
	sum, _ := protocol.AddSat(uint64(sm.Uncertainty), protocol.DriftNs(s.ppm, ageNs))
	sum, _ = protocol.AddSat(sum, step)
	v.uMs = protocol.CeilMs(sum)
	if v.uMs == 0 {
		v.uMs = 1
	}
	ref := nowNs + int64(sm.Offset)
	if (sm.Offset > 0 && ref < nowNs) || ref < 0 {
		return v // overflow or before 1970: nonsense, never synced
	}
	v.refMs, v.refOK = uint64(ref)/1e6, true
	v.usable = ageNs <= uint64(s.maxAge)
	return v
}

func satAddNs(a, b time.Duration) uint64 {
	s, ok := protocol.AddSat(uint64(max(a, 0)), uint64(max(b, 0)))
	if !ok {
		return math.MaxUint64
	}
	return s
}

// Select evaluates every source at now and returns the answer: the usable
// source with the lowest uncertainty, or synced=0.
func (s *Sampler) Select(now time.Time) Selection {
	best, bestV := -1, view{}
	staleIdx, staleV := -1, view{}
	for i, p := range s.pollers {
		v := s.evaluate(now, p.state.Load())
		if v.usable && (best < 0 || v.uMs < bestV.uMs) {
			best, bestV = i, v
		}
		if !v.usable && v.have && v.refOK && staleIdx < 0 {
			staleIdx, staleV = i, v
		}
	}
	if best >= 0 {
		return Selection{Synced: true, Source: s.pollers[best].spec.Source.Name(),
			ReferenceUnixMs: bestV.refMs, UncertaintyMs: bestV.uMs, SourceAgeMs: bestV.ageMs}
	}
	if staleIdx >= 0 {
		// The last estimate, labelled unsynced: informative, never trusted.
		return Selection{ReferenceUnixMs: staleV.refMs, UncertaintyMs: staleV.uMs, SourceAgeMs: staleV.ageMs}
	}
	// No source ever gave a sample: no reference at all (the agent never
	// reports its own clock), the uncertainty and age unknown.
	return Selection{UncertaintyMs: math.MaxUint64, SourceAgeMs: math.MaxUint64}
}

// SourceStatus is one source in /v1/status.
type SourceStatus struct {
	Name          string         `json:"name"`
	Healthy       bool           `json:"healthy"`
	HasSample     bool           `json:"has_sample"`
	Selected      bool           `json:"selected"`
	Reason        string         `json:"reason,omitempty"`
	Error         string         `json:"error,omitempty"`
	OffsetNs      int64          `json:"offset_ns"`
	UncertaintyMs uint64         `json:"uncertainty_ms"`
	AgeMs         uint64         `json:"age_ms"`
	LastPoll      time.Time      `json:"last_poll"`
	Polls         uint64         `json:"polls"`
	Failures      uint64         `json:"failures"`
	Info          map[string]any `json:"info,omitempty"`
}

// Sources reports every source evaluated at now, selected one marked.
func (s *Sampler) Sources(now time.Time, selected string) []SourceStatus {
	out := make([]SourceStatus, 0, len(s.pollers))
	for _, p := range s.pollers {
		st := p.state.Load()
		v := s.evaluate(now, st)
		ss := SourceStatus{
			Name: p.spec.Source.Name(), Healthy: v.usable, Selected: v.usable && p.spec.Source.Name() == selected,
			LastPoll: st.polledAt, Polls: st.polls, Failures: st.failures, Info: st.info,
		}
		if v.have {
			ss.HasSample = true
			ss.OffsetNs, ss.UncertaintyMs, ss.AgeMs = int64(st.sample.Offset), v.uMs, v.ageMs
		}
		switch {
		case st.err != nil:
			ss.Reason, ss.Error = string(source.ReasonOf(st.err)), st.err.Error()
		case v.have && !v.usable:
			ss.Reason, ss.Error = string(source.ReasonStale), "sample older than max_source_age"
		case st.polls == 0:
			ss.Reason = "not_polled_yet"
		}
		if v.have && !v.usable && st.err != nil && source.ReasonOf(st.err) == source.ReasonUnreachable {
			ss.Reason = string(source.ReasonUnreachable)
		}
		out = append(out, ss)
	}
	return out
}
