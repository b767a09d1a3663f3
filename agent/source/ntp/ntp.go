// Package ntp is the `ntp` source of SPEC §2.2: it queries 1..N NTP servers
// with github.com/beevik/ntp, checks each answer (stratum, leap, root
// distance, RTT), runs an intersection step (Marzullo, as NTP's clock
// select) that drops falsetickers, and requires a minimum number of
// truechimers.
//
// Each server's measurement is the interval offset ± bound with
//
//	bound = root distance (rtt/2 + root_delay/2 + root_dispersion)
//	      + the server's precision
//
// rtt/2 is the measurement's own error (the true offset lies within half
// the round trip of the measured one, whatever the path asymmetry); the
// precision covers the server's timestamp granularity. beevik's MinError is
// deliberately not added: it is |offset| − rtt/2, which would stretch every
// interval back over the local clock and hide a falseticker.
//
// The intersection finds the smallest f < n/2 for which n − f intervals
// share a point, and the range [l, u] of such points: if at most f servers
// lie, true time is in [l, u]. Servers whose interval misses [l, u] are
// falsetickers. The answer is the truechimer with the smallest bound, its
// bound widened to cover [l, u] as well, so it holds whether that server or
// the majority is right.
//
// Hazard: every server is queried once per poll; poll_interval_ms should
// respect the servers' rate limits (a kiss-of-death answer is unhealthy).
package ntp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/beevik/ntp"

	"github.com/tckclk/tckclk/agent/source"
)

// Config is what the source needs; the agent's config maps onto it.
type Config struct {
	Servers         []string // HOST:PORT
	MinTruechimers  int      // ≥ 1
	Timeout         time.Duration
	MaxRTT          time.Duration
	MaxRootDistance time.Duration
	MaxStratum      int
}

// QueryFunc is ntp.QueryWithOptions; tests inject their own.
type QueryFunc func(addr string, opt ntp.QueryOptions) (*ntp.Response, error)

// Source polls the configured servers.
type Source struct {
	cfg   Config
	clock source.Clock
	query QueryFunc
}

// New returns the source; nil clock or query mean the real ones.
func New(cfg Config, clock source.Clock, query QueryFunc) *Source {
	if clock == nil {
		clock = source.SystemClock{}
	}
	if query == nil {
		query = ntp.QueryWithOptions
	}
	if cfg.MinTruechimers < 1 {
		cfg.MinTruechimers = 1
	}
	return &Source{cfg: cfg, clock: clock, query: query}
}

// Name is "ntp".
func (s *Source) Name() string { return "ntp" }

// Measurement is one server's checked answer.
type Measurement struct {
	Server  string
	Offset  time.Duration // true − local
	Bound   time.Duration // > 0
	At      time.Time     // local time the answer arrived
	Stratum uint8
	RTT     time.Duration
	Err     error // nil when the answer is usable
}

// Poll queries every server concurrently (each within the poll's timeout),
// then selects.
func (s *Source) Poll(ctx context.Context) (source.Sample, error) {
	timeout := s.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return source.Sample{}, source.Errorf("ntp", source.ReasonUnreachable, "no time left for the poll")
	}
	ms := make([]Measurement, len(s.cfg.Servers))
	var wg sync.WaitGroup
	for i, srv := range s.cfg.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = s.measure(srv, timeout)
		}()
	}
	wg.Wait()
	return Select(ms, s.cfg.MinTruechimers)
}

func (s *Source) measure(srv string, timeout time.Duration) Measurement {
	m := Measurement{Server: srv}
	r, err := s.query(srv, ntp.QueryOptions{Timeout: timeout})
	m.At = s.clock.Now()
	if err != nil {
		m.Err = source.Exchanged("ntp", srv, err)
		return m
	}
	m.Stratum, m.RTT, m.Offset = r.Stratum, r.RTT, r.ClockOffset
	if err := r.Validate(); err != nil {
		reason := source.ReasonQuality
		if errors.Is(err, ntp.ErrInvalidLeapSecond) {
			reason = source.ReasonLeap
		}
		m.Err = source.Wrap("ntp", reason, srv, err)
		return m
	}
	switch {
	case r.RTT < 0 || r.RootDelay < 0 || r.RootDispersion < 0 || r.Precision < 0:
		m.Err = source.Errorf("ntp", source.ReasonGarbage, "%s: negative delay or dispersion", srv)
	case int(r.Stratum) > s.cfg.MaxStratum:
		m.Err = source.Errorf("ntp", source.ReasonQuality, "%s: stratum %d above max_stratum %d", srv, r.Stratum, s.cfg.MaxStratum)
	case r.RTT > s.cfg.MaxRTT:
		m.Err = source.Errorf("ntp", source.ReasonQuality, "%s: rtt %v above max_rtt %v", srv, r.RTT, s.cfg.MaxRTT)
	case r.RootDistance > s.cfg.MaxRootDistance:
		m.Err = source.Errorf("ntp", source.ReasonQuality, "%s: root distance %v above max_root_distance %v", srv, r.RootDistance, s.cfg.MaxRootDistance)
	}
	if m.Err != nil {
		return m
	}
	m.Bound = r.RootDistance + r.Precision
	if m.Bound <= 0 {
		m.Bound = time.Nanosecond // never an exact clock
	}
	return m
}

// Intersection is the result of the clock-select step over n intervals.
type Intersection struct {
	OK          bool
	Lo, Hi      time.Duration // [l, u], the points at least n − F intervals share
	F           int           // falsetickers allowed (< n/2)
	Truechimers []int         // indices of intervals meeting [l, u]
}

// Intersect runs the intersection (Marzullo / NTP clock select) step over
// the intervals offset ± bound.
func Intersect(offsets, bounds []time.Duration) Intersection {
	n := len(offsets)
	type edge struct {
		v   time.Duration
		low bool
	}
	edges := make([]edge, 0, 2*n)
	for i := range offsets {
		edges = append(edges, edge{offsets[i] - bounds[i], true}, edge{offsets[i] + bounds[i], false})
	}
	// Ascending; at equal values lows first, so touching intervals overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		switch {
		case a.low == b.low:
			return 0
		case a.low:
			return -1
		}
		return 1
	})
	for f := 0; 2*f < n; f++ {
		need := n - f
		var lo, hi time.Duration
		found := 0
		cnt := 0
		for _, e := range edges {
			if e.low {
				if cnt++; cnt >= need {
					lo, found = e.v, found+1
					break
				}
			} else {
				cnt--
			}
		}
		cnt = 0
		for i := len(edges) - 1; i >= 0; i-- {
			e := edges[i]
			if !e.low {
				if cnt++; cnt >= need {
					hi, found = e.v, found+1
					break
				}
			} else {
				cnt--
			}
		}
		if found == 2 && lo <= hi {
			res := Intersection{OK: true, Lo: lo, Hi: hi, F: f}
			for i := range offsets {
				if offsets[i]-bounds[i] <= hi && offsets[i]+bounds[i] >= lo {
					res.Truechimers = append(res.Truechimers, i)
				}
			}
			return res
		}
	}
	return Intersection{}
}

// Select checks the measurements and returns the sample (SPEC §2.2 ntp).
func Select(ms []Measurement, minTruechimers int) (source.Sample, error) {
	var good []int
	unreachable := 0
	var firstErr error
	for i := range ms {
		switch {
		case ms[i].Err == nil:
			good = append(good, i)
		case source.ReasonOf(ms[i].Err) == source.ReasonUnreachable:
			unreachable++
		}
		if ms[i].Err != nil && firstErr == nil {
			firstErr = ms[i].Err
		}
	}
	info := map[string]any{"servers": serverInfo(ms, nil), "min_truechimers": minTruechimers}
	if len(good) == 0 {
		r := source.ReasonQuality
		if unreachable == len(ms) {
			r = source.ReasonUnreachable
		} else if firstErr != nil {
			r = source.ReasonOf(firstErr)
		}
		return source.Sample{Info: info}, source.Wrap("ntp", r, fmt.Sprintf("no usable server of %d", len(ms)), firstErr)
	}
	offs := make([]time.Duration, len(good))
	bnds := make([]time.Duration, len(good))
	for j, i := range good {
		offs[j], bnds[j] = ms[i].Offset, ms[i].Bound
	}
	x := Intersect(offs, bnds)
	var tc []int
	for _, j := range x.Truechimers {
		tc = append(tc, good[j])
	}
	info["servers"] = serverInfo(ms, tc)
	info["truechimers"] = len(tc)
	if !x.OK || len(tc) < minTruechimers {
		r := source.ReasonTruechimers
		if x.OK && len(tc)+unreachable >= minTruechimers {
			r = source.ReasonUnreachable // the missing ones did not answer
		}
		return source.Sample{Info: info}, source.Errorf("ntp", r, "%d truechimers of %d answering servers (%d unreachable); need %d", len(tc), len(good), unreachable, minTruechimers)
	}
	best := tc[0]
	for _, i := range tc[1:] {
		if ms[i].Bound < ms[best].Bound {
			best = i
		}
	}
	b := ms[best]
	bound := max(b.Bound, absDur(b.Offset-x.Lo), absDur(x.Hi-b.Offset))
	info["selected"] = b.Server
	info["stratum"] = b.Stratum
	info["intersection_ns"] = []int64{int64(x.Lo), int64(x.Hi)}
	return source.Sample{At: b.At, Offset: b.Offset, Uncertainty: bound, Info: info}, nil
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func serverInfo(ms []Measurement, truechimers []int) []map[string]any {
	out := make([]map[string]any, len(ms))
	for i, m := range ms {
		e := map[string]any{"server": m.Server}
		switch {
		case m.Err != nil:
			e["state"] = "error"
			e["error"] = m.Err.Error()
		case slices.Contains(truechimers, i):
			e["state"] = "truechimer"
		case truechimers != nil:
			e["state"] = "falseticker"
		default:
			e["state"] = "ok"
		}
		if m.Err == nil {
			e["offset_ns"], e["bound_ns"], e["stratum"], e["rtt_ns"] = int64(m.Offset), int64(m.Bound), m.Stratum, int64(m.RTT)
		}
		out[i] = e
	}
	return out
}
