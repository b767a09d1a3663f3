package connlimit

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the connection metrics of every Limiter of a node, labelled
// by listener ("api", "health"):
//
//	api_connections_accepted_total{listener}        accepted from the kernel (then admitted or refused)
//	api_connections{listener,class}                 open now; class authenticated|unauthenticated
//	api_connections_evicted_total{listener,reason}  closed to make room, or idle unauthenticated
//	api_connections_refused_total{listener,reason}  closed at accept: nothing could make room
type Metrics struct {
	accepted *prometheus.CounterVec
	open     *prometheus.GaugeVec
	evicted  *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_connections_accepted_total",
			Help: "API connections accepted from the listen backlog, admitted or refused.",
		}, []string{"listener"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "api_connections",
			Help: "Open API connections by listener and class (authenticated: a request on it passed the token check).",
		}, []string{"listener", "class"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_connections_evicted_total",
			Help: "API connections closed to make room for a new one (reason: per_source, unauthenticated_share, max_conns) or idle without authenticating (unauthenticated_idle).",
		}, []string{"listener", "reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_connections_refused_total",
			Help: "New API connections closed at once because no connection could be evicted for them, by the limit that was full.",
		}, []string{"listener", "reason"}),
	}
	reg.MustRegister(m.accepted, m.open, m.evicted, m.refused)
	return m
}

// metricsFor is one listener's view of Metrics (nil: none).
type metricsFor struct {
	m                      *Metrics
	listener               string
	authGauge, unauthGauge prometheus.Gauge
	accepted               prometheus.Counter
}

func (m *Metrics) forListener(listener string) *metricsFor {
	if m == nil {
		return nil
	}
	f := &metricsFor{m: m, listener: listener,
		authGauge:   m.open.WithLabelValues(listener, "authenticated"),
		unauthGauge: m.open.WithLabelValues(listener, "unauthenticated"),
		accepted:    m.accepted.WithLabelValues(listener)}
	for _, r := range []string{ReasonPerSource, ReasonUnauth, ReasonMaxConns} {
		m.evicted.WithLabelValues(listener, r)
		m.refused.WithLabelValues(listener, r)
	}
	m.evicted.WithLabelValues(listener, ReasonUnauthIdle)
	return f
}

func (f *metricsFor) open(total, unauth int) {
	if f == nil {
		return
	}
	f.authGauge.Set(float64(total - unauth))
	f.unauthGauge.Set(float64(unauth))
}

func (f *metricsFor) accept() {
	if f != nil {
		f.accepted.Inc()
	}
}

func (f *metricsFor) evicted(reason string) {
	if f != nil {
		f.m.evicted.WithLabelValues(f.listener, reason).Inc()
	}
}

func (f *metricsFor) refused(reason string) {
	if f != nil {
		f.m.refused.WithLabelValues(f.listener, reason).Inc()
	}
}
