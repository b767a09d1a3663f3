package node

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §3.5: /readyz and /v1/status asked while a cluster node is still
// opening (clock_check passed, stage raft; the mesh, Raft and gossip not
// set up yet) answer "not ready: raft" instead of reading the membership
// that does not exist yet (seen as a nil-pointer panic in the status
// handler of real processes polled every 50 ms, cmd/ticketd's netns test).
func TestReadinessWhileClusterOpens(t *testing.T) {
	keys := newTestCluster(t, "n1")
	n := &server{cfg: DefaultConfig(), stage: stage.NewHolder(), fsm: ticket.New(500), log: testLogger(t), reg: prometheus.NewRegistry()}
	n.cfg.Clock.DeltaMs = 500
	n.cfg.Cluster.Enabled = true
	n.cfg.Cluster.Name = "n1"
	n.cfg.Cluster.Membership.SecretKey = cluster.SecretString(gossipSecret)
	n.cfg.Cluster.Internode.IdentityKey = cluster.SecretString(base64.StdEncoding.EncodeToString(keys.keys["n1"].Seed()))
	n.cfg.Cluster.Internode.TrustedPeerKeys = keys.trust
	m, err := newClusterMode(n, nil) // built, not opened: no mesh, Raft or gossip yet
	if err != nil {
		t.Fatal(err)
	}
	n.mode = m
	n.stage.Set(stage.Raft, "opening the data dir")
	h := n.Readiness()
	if h.Status == "ok" || h.Stage != string(stage.Raft) || !strings.Contains(h.Detail, "opening") {
		t.Fatalf("readiness while opening: %+v, want not ready at stage raft, opening", h)
	}
}
