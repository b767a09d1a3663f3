// Package cluster is the cluster half of a ticketd node (SPEC §5): the
// `cluster:` section of ticketd.yaml and its validation (config.go), and
// Node — the mesh and Raft over it (node.go: open, bootstrap_expect, the
// reconciler while leading), readiness and uniform (ready.go), the peer
// status queries (peer.go), the leader's Raft contact (contact.go),
// forwarding to the leader and its codec (forward.go, forward_codec.go),
// the clock-failure lifecycle (failed.go), a reused NodeId
// (generation.go), crash failover (crashfailover.go), leadership
// transfers (transfer.go), the admin and health views (admin.go,
// health.go, boundhistory.go) and liveness (liveness.go). The libraries
// it is built from live below it (identity, membership, mesh, forward,
// reconcile, peerstatus).
//
// The node (package node) builds a Node with New and drives it through
// its exported methods (node/mode_cluster.go); the Node reaches the node
// only through Host (host.go) and what Options gave it at construction.
//
// Invariants:
//   - Nothing under node/cluster imports the node (node/fence_test.go,
//     TestClusterLibrariesDoNotImportNode): the node reaches the cluster,
//     never the other way round.
//   - Every goroutine a Node starts belongs to Run or Lead and has ended
//     when they return; Close (after Raft closed) ends gossip and the mesh.
//   - Until Host.Consensus is non-nil the mesh, Raft and gossip are being
//     set up and nothing reads them (Readiness, Members, Health answer
//     "starting").
//   - A FAILED clock or a retired NodeId is terminal for the process
//     (failed.go, generation.go); a removed node serves and forwards
//     nothing.
package cluster
