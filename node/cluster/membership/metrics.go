package membership

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons: the gossip_refused_total reason label and the "reason"
// attribute of the refusal log line.
const (
	ReasonUntrustedName = "untrusted_name" // the name is not in the trust map
	ReasonMalformedMeta = "malformed_meta" // the metadata does not Decode
	ReasonKeyMismatch   = "key_mismatch"   // the advertised key differs from the trust map's
	ReasonForeignMerge  = "foreign_merge"  // a join merge whose live peers are all refused
)

var refusalReasons = []string{ReasonUntrustedName, ReasonMalformedMeta, ReasonKeyMismatch, ReasonForeignMerge}

// Metadata refusals (SPEC §5 "Identity"): the gossip_meta_refused_total
// reason label and the "reason" attribute of the refusal log line.
const (
	ReasonUnsigned     = "unsigned"      // the earlier release's unsigned format
	ReasonBadSignature = "bad_signature" // does not verify under the trust map's key for the name
	ReasonReplay       = "replay"        // older than the metadata last accepted from that node
	ReasonNodeID       = "node_id"       // signed for a NodeId that is not this gossip name's
)

var metaRefusalReasons = []string{ReasonUnsigned, ReasonBadSignature, ReasonReplay, ReasonNodeID}

func isMetaReason(r string) bool { return slices.Contains(metaRefusalReasons, r) }

type metrics struct {
	members     *prometheus.GaugeVec
	convergence prometheus.Histogram
	refused     *prometheus.CounterVec
	metaRefused *prometheus.CounterVec
	dropped     prometheus.Counter
	joins       *prometheus.CounterVec
}

// newMetrics builds the gossip metrics of SPEC §5 (plus refusal, join and
// dropped-event counters) and registers them on reg (nil: not registered).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gossip_members",
			Help: "Trusted members in this node's gossip view by state (alive, suspect, dead, left); this node included. " +
				"suspect is not observable through memberlist v0.5.4's API and stays 0: suspects count as alive.",
		}, []string{"state"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gossip_convergence_seconds",
			Help: "Time from the moment this node found itself alone with join addresses configured (start-up or isolation) " +
				"until a join merged a peer's view or the peers' gossip reached it again, back-off and retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16), // 5 ms … 164 s
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gossip_refused_total",
			Help: "Gossip messages about a peer refused by the trust check, by reason.",
		}, []string{"reason"}),
		metaRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gossip_meta_refused_total",
			Help: "Gossip metadata about a trusted peer refused because it is not what that peer's identity key signed, by reason " +
				"(unsigned, bad_signature, replay, node_id). Anything above 0 outside an upgrade means someone holding the gossip key is forging or replaying claims.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gossip_events_dropped_total",
			Help: "Membership events dropped (oldest first) because the consumer fell behind.",
		}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gossip_join_attempts_total",
			Help: "Join attempts against the configured join addresses, by result (ok, error).",
		}, []string{"result"}),
	}
	for _, s := range []State{StateAlive, StateSuspect, StateDead, StateLeft} {
		m.members.WithLabelValues(s.String())
	}
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r)
	}
	for _, r := range metaRefusalReasons {
		m.metaRefused.WithLabelValues(r)
	}
	m.joins.WithLabelValues("ok")
	m.joins.WithLabelValues("error")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.members, m.convergence, m.refused, m.metaRefused, m.dropped, m.joins} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("membership: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}
