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

// ResultOK is the clock_samples_total result label of a healthy sample; the
// other results are the SPEC §1.5 reasons.
const ResultOK = "ok"

type metrics struct {
	state    prometheus.Gauge
	bound    prometheus.Gauge
	rtt      prometheus.Gauge
	dev      prometheus.Gauge
	limit    prometheus.Gauge
	samples  map[string]prometheus.Counter          // by result
	failures map[protocol.Reason]prometheus.Counter // by reason
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
			Help: "Round-trip time of the last healthy clock sample, ms.",
		}),
		dev: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_dev_reference",
			Help: "1 when clock.dev_reference is set: samples come from a development reference agent, not a real time source.",
		}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clock_bound_limit_ms",
			Help: "Delta/2, ms: the largest clock_error_bound_ms that is healthy (SPEC 3.2); alerts and dashboards compare the bound with it.",
		}),
		samples:  map[string]prometheus.Counter{},
		failures: map[protocol.Reason]prometheus.Counter{},
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
	m.samples[ResultOK] = samples.WithLabelValues(ResultOK)
	for _, r := range protocol.Reasons() {
		m.samples[string(r)] = samples.WithLabelValues(string(r))
		m.failures[r] = failures.WithLabelValues(string(r))
	}
	if dev {
		m.dev.Set(1)
	}
	if reg != nil {
		all := []prometheus.Collector{m.state, m.bound, m.rtt, m.dev, m.limit, samples, failures}
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

func (m *metrics) sample(result string) {
	if c, ok := m.samples[result]; ok {
		c.Inc()
	}
}
