package mesh

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons an inbound stream is closed unread (mesh_streams_refused_total).
const (
	refusedUnknownClass = "unknown_class" // the first byte names no assigned Class
	refusedNoListener   = "no_listener"   // nobody listens for that class
	refusedNoClass      = "no_class"      // no first byte within the handshake timeout
	refusedClosed       = "closed"        // the class listener or the mesh closed first
)

type metrics struct {
	handshakes map[Reason]prometheus.Counter
	refused    map[string]prometheus.Counter
	sessions   prometheus.Gauge
	records    prometheus.Counter
	unregister func() // takes them off the registry again
}

// newMetrics builds the mesh metrics with every label value created up
// front, and registers them on reg (nil: kept unregistered). inProgress
// reports the inbound handshakes in progress.
func newMetrics(reg prometheus.Registerer, inProgress func() int) (*metrics, error) {
	hs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_handshakes_total",
		Help: "Mesh handshakes, both directions, by result: ok or the reason of the refusal.",
	}, []string{"result"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_streams_refused_total",
		Help: "Inbound mesh streams closed unread, by reason (unknown_class, no_listener, no_class, closed).",
	}, []string{"reason"})
	m := &metrics{
		handshakes: map[Reason]prometheus.Counter{},
		refused:    map[string]prometheus.Counter{},
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mesh_sessions",
			Help: "Authenticated mesh sessions in use (one per peer).",
		}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_records_refused_total",
			Help: "Sealed mesh records that did not authenticate (changed, injected, replayed, reordered or dropped on the path); each closed its session.",
		}),
	}
	for _, r := range Reasons() {
		m.handshakes[r] = hs.WithLabelValues(string(r))
	}
	for _, r := range []string{refusedUnknownClass, refusedNoListener, refusedNoClass, refusedClosed} {
		m.refused[r] = refused.WithLabelValues(r)
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mesh_handshakes_in_progress",
		Help: "Inbound mesh handshakes in progress (at most 64, at most 8 from one source address).",
	}, func() float64 { return float64(inProgress()) })
	m.unregister = func() {}
	if reg != nil {
		all := []prometheus.Collector{hs, refused, m.sessions, m.records, pending}
		for i, c := range all {
			if err := reg.Register(c); err != nil {
				for _, done := range all[:i] {
					reg.Unregister(done)
				}
				return nil, fmt.Errorf("mesh: registering metrics: %w", err)
			}
		}
		m.unregister = func() {
			for _, c := range all {
				reg.Unregister(c)
			}
		}
	}
	return m, nil
}
