package node

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/consensus"
)

// settleWait bounds settleProposals: a proposal answered by the hand-off
// waits at most consensus.FateWait for its entry's fate, and one still
// waiting for Raft when the hand-off returned a little longer.
const settleWait = consensus.FateWait + time.Second

// settleProposals lets the proposals in flight when this node handed its
// leadership off learn their entries' fates under the next leader
// (consensus.Raft.Settle) while Raft still runs and forwarded requests
// are still served, so their callers get the applied result or a
// refusal they may repeat rather than an unknown outcome. A node that
// still leads (the hand-off failed) has nothing to wait for, nor has a
// gossip-only client (no Raft: it proposes nothing).
func (n *server) settleProposals() {
	c := n.cons.Load()
	if c == nil || c.Raft() == nil || c.Raft().State() == raft.Leader {
		return
	}
	start := time.Now()
	if !c.Settle(settleWait) {
		n.log.Warn("stopping: proposals still in flight; stopping anyway (their outcome is unknown to their callers)", "waited", settleWait)
		return
	}
	if f := c.Fates(); f != (consensus.FateCounts{}) {
		n.log.Info("stopping: the proposals that lost their leadership in flight (since start) have their answers", "took", time.Since(start).Round(time.Millisecond),
			"applied", f.Applied, "replaced", f.Replaced, "unknown", f.Unknown)
	}
}
