package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ticket metrics of SPEC §5: ticket_ops_total{op,result}
// and the op latency histogram ticket_op_duration_seconds{op}. The node
// registers tickets_active itself (it owns the state).
type Metrics struct {
	ops *prometheus.CounterVec
	dur *prometheus.HistogramVec
	// known holds the series of KnownResults, made at start: Observe
	// finds them in a map of its own instead of hashing the labels into
	// the vectors on every request (rarer labels still go through them).
	known map[opResult]observed
	// POST /v1/batch: requests by result, and the ops they carried (each
	// op is also counted in ops and dur under its own op).
	batches  *prometheus.CounterVec
	batchOps prometheus.Counter
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ticket_ops_total",
			Help: "Ticket operations by op (grant, renew, release, get, list, expire) and result.",
		}, []string{"op", "result"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ticket_op_duration_seconds",
			Help:    "Latency of ticket operations, from request to answer (expire: proposal to commit).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"op"}),
	}
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ticket_batch_requests_total",
		Help: "POST /v1/batch requests by result (ok: answered with per-op results; otherwise the whole request was refused).",
	}, []string{"result"})
	m.batchOps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ticket_batch_ops_total",
		Help: "Ops carried by accepted POST /v1/batch requests (each also in ticket_ops_total under its op).",
	})
	// Every known series from the start (Prometheus instrumentation
	// guidelines): a dashboard or an alert on a fresh node sees zeros,
	// not missing series.
	m.known = map[opResult]observed{}
	for op, results := range KnownResults {
		d := m.dur.WithLabelValues(op)
		for _, r := range results {
			m.known[opResult{op, r}] = observed{m.ops.WithLabelValues(op, r), d}
		}
	}
	for _, r := range KnownResults["batch"] {
		m.batches.WithLabelValues(r)
	}
	reg.MustRegister(m.ops, m.dur, m.batches, m.batchOps)
	return m
}

// Result labels every answer can carry, whatever the op.
var anyResult = []string{"ok", "bad_request", "unauthorized", "unavailable", "error"}

// KnownResults are the result labels of ticket_ops_total created at zero
// on a fresh node, by op (the FSM's outcomes and the API's refusals each
// op can answer); "batch" is ticket_batch_requests_total's. Other labels
// (rarer refusals) appear at their first use.
var KnownResults = map[string][]string{
	"grant":   append([]string{"existing", "held", "revoked", "too_many_waiters"}, anyResult...),
	"renew":   append([]string{"not_held", "wrong_holder", "wrong_token", "lease_over", "revoked"}, anyResult...),
	"release": append([]string{"not_held", "wrong_holder", "wrong_token"}, anyResult...),
	"revoke":  append([]string{"existing", "not_found", "wrong_token", "forbidden"}, anyResult...),
	"get":     append([]string{"not_found", "too_many_watchers"}, anyResult...),
	"list":    anyResult,
	"expire":  {"ok", "noop", "unavailable", "error"},
	"batch":   {"ok", "bad_request", "unauthorized", "too_large", "unavailable"},
}

type opResult struct{ op, result string }

// observed is one op and result's counter and the op's histogram.
type observed struct {
	n   prometheus.Counter
	dur prometheus.Observer
}

// Observe counts one op with its result and latency.
func (m *Metrics) Observe(op, result string, d time.Duration) {
	if m == nil {
		return
	}
	if o, ok := m.known[opResult{op, result}]; ok {
		o.n.Inc()
		o.dur.Observe(d.Seconds())
		return
	}
	m.ops.WithLabelValues(op, result).Inc()
	m.dur.WithLabelValues(op).Observe(d.Seconds())
}

// Batch counts one POST /v1/batch request with its result.
func (m *Metrics) Batch(result string) {
	if m == nil {
		return
	}
	m.batches.WithLabelValues(result).Inc()
}

// BatchOps counts the ops of an accepted batch.
func (m *Metrics) BatchOps(n int) {
	if m == nil {
		return
	}
	m.batchOps.Add(float64(n))
}
