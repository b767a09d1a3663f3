package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// liveness is the cluster's part of /livez: the gossip health score
// (after a boot grace) and Raft last contact; "" when live.
func (cl *Node) Liveness() (reason, detail string) {
	lc := &cl.cfg.Liveness // cluster.liveness.* (cluster/config.go)
	if mem := cl.mem; mem != nil && time.Since(cl.opts.Started) > lc.BootGrace {
		if s := mem.HealthScore(); s >= lc.MaxHealthScore {
			return "gossip", fmt.Sprintf("gossip health score %d (≥ cluster.liveness.max_health_score %d: this node misses its own probe deadlines)", s, lc.MaxHealthScore)
		}
	}
	r := cl.raft()
	if r == nil || r.State() == raft.Leader || r.State() == raft.Shutdown {
		return "", ""
	}
	limit, key := lc.VoterLastContact, "voter_last_contact"
	if !cl.isVoter(r) {
		limit, key = lc.StandbyLastContact, "standby_last_contact"
	}
	if last := r.LastContact(); !last.IsZero() && time.Since(last) > limit {
		return "raft", fmt.Sprintf("raft last contact with the leader %v ago (cluster.liveness.%s %v)", time.Since(last).Round(100*time.Millisecond), key, limit)
	}
	return "", ""
}

// isVoter reports whether this node is a voter in the configuration.
func (cl *Node) isVoter(r *raft.Raft) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == cl.cfg.Name {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}
