// Package cluster is the cluster half of a ticketd node (SPEC §5): today
// the `cluster:` section of ticketd.yaml with its validation (config.go).
// The libraries it is built from live below it (identity, membership,
// mesh, forward, reconcile, peerstatus).
//
// Invariant: nothing under node/cluster imports the node (node/fence_test.go,
// TestClusterLibrariesDoNotImportNode); the node reaches the cluster, never
// the other way round.
package cluster
