//go:build race

package node

// raceEnabled: this test binary runs under the race detector, which slows
// this package's code five to ten times (more on a loaded machine); the
// in-process clusters then take longer Raft and gossip timeouts
// (testCluster.scaled).
const raceEnabled = true
