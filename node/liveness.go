package node

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api/wire"
)

// Liveness thresholds (SPEC §5 "Liveness checks").
const (
	// livenessBootGrace: gossip's health score is not judged this long
	// after start (memberlist's awareness starts high while it settles).
	livenessBootGrace = 30 * time.Second
	// maxHealthScore: memberlist's awareness at or above it means this
	// node misses its own probe deadlines (0 healthy, 8 worst).
	maxHealthScore = 6
	// voterContact, standbyContact: Raft last contact a follower voter
	// (strict) or a standby (lenient) may go without; the leader passes.
	voterContact   = 15 * time.Second
	standbyContact = 2 * time.Minute
)

// Liveness is /livez (api.Backend): the clock (a FAILED clock is not live:
// the process must not linger as if it could recover), and in cluster mode
// the gossip health score (after a boot grace) and Raft last contact
// (voters strict, standbys lenient, the leader always passes; a
// gossip-only client has no Raft to judge).
func (n *Node) Liveness() wire.Health {
	h := wire.Health{Status: "ok"}
	fail := func(reason, detail string) wire.Health {
		return wire.Health{Status: "unavailable", Reason: reason, Detail: detail}
	}
	if ce := n.clockErr(); ce != nil {
		return fail("clock", ce.Error())
	}
	if n.cl == nil {
		return h
	}
	if mem := n.cl.mem; mem != nil && time.Since(n.started) > livenessBootGrace {
		if s := mem.HealthScore(); s >= maxHealthScore {
			return fail("gossip", fmt.Sprintf("gossip health score %d (≥ %d: this node misses its own probe deadlines)", s, maxHealthScore))
		}
	}
	r := n.raft()
	if r == nil || r.State() == raft.Leader || r.State() == raft.Shutdown {
		return h
	}
	limit := voterContact
	if n.countMembers(raft.Nonvoter) > 0 && !n.isVoter(r) {
		limit = standbyContact
	}
	if last := r.LastContact(); !last.IsZero() && time.Since(last) > limit {
		return fail("raft", fmt.Sprintf("no contact from the leader for %v (limit %v)", time.Since(last).Round(time.Second), limit))
	}
	return h
}

// isVoter reports whether this node is a voter in the configuration.
func (n *Node) isVoter(r *raft.Raft) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.Cluster.Name {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}
