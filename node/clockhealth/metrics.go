package clockhealth

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/protocol"
)

// Values of clock_health_state.
const (
	StateFailed   = -1 // FAILED (terminal)
	StateChecking = 0  // clock_check: not yet proven healthy
	StateHealthy  = 1
)

// ResultOK is the clock_samples_total and clock_exchanges_total result label
// of a sample within every limit; clock_samples_total's other results are
// the SPEC §1.5 reasons.
const ResultOK = "ok"

// clock_exchanges_total's results besides ok and the reasons of an exchange
// that fails the node at once (SPEC §3.1).
const (
	ResultSlow       = "slow"       // tried again: rtt over, or over a limit only by the exchange's delay
	ResultIncomplete = "incomplete" // tried again: connect, timeout, io
)

type metrics struct {
	state     prometheus.Gauge
	bound     prometheus.Gauge
	rtt       prometheus.Gauge
	dev       prometheus.Gauge
	limit     prometheus.Gauge
	samples   map[string]prometheus.Counter          // by result
	exchanges map[string]prometheus.Counter          // by class: ok, slow, incomplete or a fatal reason
	failures  map[protocol.Reason]prometheus.Counter // by reason
	rx        map[string]prometheus.Counter          // by the source of w1, m1: kernel or user
}

// newMetrics builds the clock metrics of SPEC §5 and registers them on reg
// (nil: not registered). Every label value is created up front so a
// dashboard sees zeros, not gaps.
func newMetrics(reg prometheus.Registerer, dev bool, deltaMs uint64) (*metrics, error) {
	m := &metrics{
		state: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_health_state",
			Help: "Clock health of this node: 1 healthy, 0 clock_check (not yet proven), -1 FAILED (terminal).",
		}),
		bound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_error_bound_ms",
			Help: "Running clock error bound at the last evaluation, ms (healthy while <= delta/2).",
		}),
		rtt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_sample_rtt_ms",
			Help: "Round-trip time of the sample the last healthy round kept (the first of its burst within every limit), ms.",
		}),
		dev: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_dev_reference",
			Help: "1 when clock.dev_reference is set: samples come from a development reference agent, not a real time source.",
		}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_bound_limit_ms",
			Help: "Delta/2, ms: the largest clock_error_bound_ms that is healthy (SPEC 3.2); alerts and dashboards compare the bound with it.",
		}),
		samples:   map[string]prometheus.Counter{},
		exchanges: map[string]prometheus.Counter{},
		failures:  map[protocol.Reason]prometheus.Counter{},
		rx:        map[string]prometheus.Counter{},
	}
	m.limit.Set(float64(deltaMs / 2))
	samples := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clock_samples_total",
		Help: "Clock exchanges by result: ok or the SPEC 1.5 reason of the rejection.",
	}, []string{"result"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clock_failures_total",
		Help: "Transitions to FAILED by SPEC 1.5 reason (at most one per process: FAILED is terminal).",
	}, []string{"reason"})
	exchanges := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clock_exchanges_total",
		Help: "Clock exchanges by what they meant for their burst (SPEC 3.1): ok (kept), slow or incomplete (tried again), or the SPEC 1.5 reason of one that failed the node at once.",
	}, []string{"result"})
	rx := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clock_rx_timestamps_total",
		Help: "Clock exchanges whose answer's LF arrived, by where their receive timestamps (w1, m1) came from: kernel (the receive timestamp of the LF's segment) or user (clocks read after the read returned: no kernel stamp, or the exchange showed a wall-clock step).",
	}, []string{"source"})
	for _, src := range []string{RxSourceKernel, RxSourceUser} {
		m.rx[src] = rx.WithLabelValues(src)
	}
	m.samples[ResultOK] = samples.WithLabelValues(ResultOK)
	for _, r := range []string{ResultOK, ResultSlow, ResultIncomplete} {
		m.exchanges[r] = exchanges.WithLabelValues(r)
	}
	for _, r := range protocol.Reasons() {
		m.samples[string(r)] = samples.WithLabelValues(string(r))
		m.failures[r] = failures.WithLabelValues(string(r))
		if fatalReason(r) {
			m.exchanges[string(r)] = exchanges.WithLabelValues(string(r))
		}
	}
	if dev {
		m.dev.Set(1)
	}
	if reg != nil {
		all := []prometheus.Collector{m.state, m.bound, m.rtt, m.dev, m.limit, samples, exchanges, failures, rx}
		for i, c := range all {
			if err := reg.Register(c); err != nil {
				for _, done := range all[:i] {
					reg.Unregister(done)
				}
				return nil, fmt.Errorf("clockhealth: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

// fatalReason reports the reasons an exchange can fail the node with at
// once: size … bound but rtt (slow), not the incomplete ones nor those of
// an evaluation between samples.
func fatalReason(r protocol.Reason) bool {
	switch r {
	case protocol.ReasonConnect, protocol.ReasonTimeout, protocol.ReasonIO, protocol.ReasonRTT,
		protocol.ReasonStale, protocol.ReasonRollback, protocol.ReasonStep:
		return false
	}
	return true
}

// exchange counts one exchange in clock_samples_total (its SPEC §1.5
// reason), clock_exchanges_total (what it meant for its burst) and, once
// its LF arrived, clock_rx_timestamps_total (its stamps' source).
func (m *metrics) exchange(x *exchange) {
	result, class := ResultOK, ResultOK
	if x.err != nil {
		result, class = string(x.err.Reason), string(x.err.Reason)
	}
	switch x.class {
	case classSlow:
		class = ResultSlow
	case classIncomplete:
		class = ResultIncomplete
	}
	for _, c := range [...]prometheus.Counter{m.samples[result], m.exchanges[class], m.rx[x.rx]} {
		if c != nil {
			c.Inc()
		}
	}
}
