// Package clustertest holds what tests need to run clusters and no
// shipped binary may carry: the fault-injecting network of in-process
// clusters (faultnet) and forged gossip datagrams (gossipforge).
//
// Invariant: no non-test package of the module imports anything under
// internal/clustertest (TestNoShippedPackageImportsClusterTest).
package clustertest
