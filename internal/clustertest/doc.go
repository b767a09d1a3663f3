// Package clustertest holds what tests and the bench need to run clusters
// and no shipped binary may carry: free loopback ports for real processes
// (FreePorts, Ports), the fault-injecting network of in-process clusters
// (faultnet) and forged gossip datagrams (gossipforge).
//
// Invariant: no non-test package of the module imports anything under
// internal/clustertest (TestNoShippedPackageImportsClusterTest); the bench
// module's tools (bench/cmd/tckbench) may.
package clustertest
