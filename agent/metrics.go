package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/protocol"
)

// metrics is the agent's Prometheus registry (one per Agent, no globals).
type metrics struct {
	reg      *prometheus.Registry
	requests map[string]prometheus.Counter // by result, resolved once
	other    prometheus.Counter            // a result label we did not foresee
	latency  prometheus.Histogram
	polls    *prometheus.CounterVec
	reloads  *prometheus.CounterVec
}

// requestResults are every label value of tckclk_agent_requests_total.
func requestResults() []string {
	return []string{ResultSynced, ResultUnsynced, ResultOverload,
		string(protocol.ReasonTimeout), string(protocol.ReasonIO), string(protocol.ReasonSize),
		string(protocol.ReasonFormat), string(protocol.ReasonVersion)}
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), requests: map[string]prometheus.Counter{}}
	req := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tckclk_agent_requests_total",
		Help: "TCKCLK/2 connections by result: synced / unsynced (answered), overload (closed at max_conns), or the SPEC §1.5 reason an invalid request was dropped for (no answer).",
	}, []string{"result"})
	for _, r := range requestResults() {
		m.requests[r] = req.WithLabelValues(r)
	}
	m.other = req.WithLabelValues("other")
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tckclk_agent_answer_duration_seconds",
		Help:    "Time from accept to close of answered TCKCLK/2 exchanges.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
	})
	m.polls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tckclk_agent_source_polls_total",
		Help: "Source polls by source and result (ok or the reason the source was unhealthy).",
	}, []string{"source", "result"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tckclk_agent_secret_reloads_total",
		Help: "Secret reloads (SIGHUP) by result; on error the previous secret stays in use.",
	}, []string{"result"})
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	m.reg.MustRegister(req, m.latency, m.polls, m.reloads, &stateCollector{a: a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Exchange implements ServerObserver.
func (m *metrics) Exchange(result string, d time.Duration) {
	if c, ok := m.requests[result]; ok {
		c.Inc()
	} else {
		m.other.Inc()
	}
	if result == ResultSynced || result == ResultUnsynced {
		m.latency.Observe(d.Seconds())
	}
}

// knownSources creates every source's poll series at zero (Prometheus
// instrumentation guidelines: no series missing on a fresh agent).
func (m *metrics) knownSources(names []string) {
	for _, n := range names {
		m.polls.WithLabelValues(n, "ok")
		for _, r := range source.Reasons() {
			m.polls.WithLabelValues(n, string(r))
		}
	}
}

// Poll implements PollObserver.
func (m *metrics) Poll(src string, err error) {
	r := "ok"
	if err != nil {
		r = string(source.ReasonOf(err))
	}
	m.polls.WithLabelValues(src, r).Inc()
}

// stateCollector reads the sampler and server at scrape time.
type stateCollector struct{ a *Agent }

var (
	descSynced     = prometheus.NewDesc("tckclk_agent_synced", "1 while the agent answers synced=1 (a healthy source is selected).", nil, nil)
	descUnc        = prometheus.NewDesc("tckclk_agent_uncertainty_ms", "uncertainty_ms the agent answers now (drift included).", nil, nil)
	descAge        = prometheus.NewDesc("tckclk_agent_source_age_ms", "source_age_ms the agent answers now.", nil, nil)
	descDev        = prometheus.NewDesc("tckclk_agent_dev_reference", "1 when this agent is a --dev development reference signing with dev_key (never trust it in production).", nil, nil)
	descOpen       = prometheus.NewDesc("tckclk_agent_connections_open", "TCKCLK/2 connections currently held.", nil, nil)
	descMaxConns   = prometheus.NewDesc("tckclk_agent_max_conns", "The cap on concurrent connections (max_conns).", nil, nil)
	descSrcHealthy = prometheus.NewDesc("tckclk_agent_source_healthy", "1 while the source has a usable sample.", []string{"source"}, nil)
	descSrcSel     = prometheus.NewDesc("tckclk_agent_source_selected", "1 for the source the agent answers from.", []string{"source"}, nil)
	descSrcOffset  = prometheus.NewDesc("tckclk_agent_source_offset_seconds", "True time minus local time measured by the source.", []string{"source"}, nil)
	descSrcUnc     = prometheus.NewDesc("tckclk_agent_source_uncertainty_ms", "The source's uncertainty now (drift included), ms.", []string{"source"}, nil)
	descSrcAge     = prometheus.NewDesc("tckclk_agent_source_age_seconds", "Age of the source's last valid sample.", []string{"source"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSynced, descUnc, descAge, descDev, descOpen, descMaxConns, descSrcHealthy, descSrcSel, descSrcOffset, descSrcUnc, descSrcAge} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	now := a.clock.Now()
	sel := a.sampler.Select(now)
	ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, b2f(sel.Synced))
	if sel.Synced {
		ch <- prometheus.MustNewConstMetric(descUnc, prometheus.GaugeValue, float64(sel.UncertaintyMs))
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, float64(sel.SourceAgeMs))
	}
	ch <- prometheus.MustNewConstMetric(descDev, prometheus.GaugeValue, b2f(a.cfg.Dev))
	ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, float64(a.server.OpenConns()))
	ch <- prometheus.MustNewConstMetric(descMaxConns, prometheus.GaugeValue, float64(a.cfg.MaxConns))
	for _, s := range a.sampler.Sources(now, sel.Source) {
		ch <- prometheus.MustNewConstMetric(descSrcHealthy, prometheus.GaugeValue, b2f(s.Healthy), s.Name)
		ch <- prometheus.MustNewConstMetric(descSrcSel, prometheus.GaugeValue, b2f(s.Selected), s.Name)
		if s.HasSample {
			ch <- prometheus.MustNewConstMetric(descSrcOffset, prometheus.GaugeValue, float64(s.OffsetNs)/1e9, s.Name)
			ch <- prometheus.MustNewConstMetric(descSrcUnc, prometheus.GaugeValue, float64(s.UncertaintyMs), s.Name)
			ch <- prometheus.MustNewConstMetric(descSrcAge, prometheus.GaugeValue, float64(s.AgeMs)/1e3, s.Name)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
