package node

import (
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §3.5: /readyz and /v1/status asked while a cluster node is still
// opening (clock_check passed, stage raft; the mesh, Raft and gossip not
// set up yet) answer "not ready: raft" instead of reading the membership
// that does not exist yet (seen as a nil-pointer panic in the status
// handler of real processes polled every 50 ms, cmd/ticketd's netns test).
func TestReadinessWhileClusterOpens(t *testing.T) {
	n := &Node{stage: stage.NewHolder(), fsm: ticket.New(500)}
	n.cfg.Clock.DeltaMs = 500
	n.cfg.Cluster.Enabled = true
	n.mode = clusterMode{n: n, cl: &clusterNode{host: clusterHost{n}}}
	n.stage.Set(stage.Raft, "opening the data dir")
	h := n.Readiness()
	if h.Status == "ok" || h.Stage != string(stage.Raft) || !strings.Contains(h.Detail, "opening") {
		t.Fatalf("readiness while opening: %+v, want not ready at stage raft, opening", h)
	}
}
