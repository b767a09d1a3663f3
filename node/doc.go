// Package node is the ticketing node (`ticketd`), wired together in
// Run(ctx, cfg): configuration, clock health (node/clockhealth), durable
// Raft (node/consensus: hashicorp/raft with the raft-wal or raft-boltdb
// log) around the ticket FSM, the leader's expiry loop, and the HTTP API of
// SPEC §4.1. A single node is the one voter of its Raft on an in-memory
// transport; in cluster mode (package node/cluster, SPEC §5) the node is
// a voter, a non-voter or a gossip-only client, with Raft over the
// authenticated mesh, gossip membership, the leader's reconciler and
// forwarding of writes and reads to the leader. What differs between the
// two is the mode interface (mode.go: singleMode; mode_cluster.go:
// clusterMode drives a cluster.Node, and clusterHost is the node as that
// Node's cluster.Host, the one way back).
//
// Start-up (SPEC §3.5): lock the data dir (a retired one is refused or,
// in cluster mode with auto_replace, moved aside for the next generation;
// a FAILED marker sets a single node's hold-off), listen for the API
// (probes see every stage), clock_check with an agent (3 consecutive
// healthy samples; a failure exits and records nothing), open Raft,
// bootstrap or join, uniform (cluster mode), ready.
//
// Invariants:
//   - Nothing is served from partial state: the newest snapshot is verified
//     (format, checksum, Δ) before Raft starts, and a bad log entry found in
//     replay stops the node with the file and the reason (fail closed).
//     Raft's own fall-back to an older snapshot is disabled.
//   - Writes carry the leader's wall time — the same clock the monitor
//     checks; the ClockGuard is asked before every Grant, Renew and Expire
//     proposal, and a hold-off instant refuses Grant and Expire until it
//     has passed.
//   - FAILED is terminal for the process: stage failed, every ticket call a
//     503 with the SPEC §1.5 reason, no expiry. A single node records it in
//     the data dir (clock-failed, fsynced) unless it failed in clock_check;
//     every later start then holds off 250 s + Δ, and the marker goes only
//     after a hold-off passed with a healthy clock. A cluster node instead
//     writes the retired marker, hands leadership off, shuts Raft down and
//     exits (node/cluster/failed.go, SPEC §3.4).
//   - Reads are linearizable: the leader has committed a Barrier in its
//     current term and VerifyLeader succeeds for the read.
//
// Time is injected (WallClock, clockhealth.MonoClock, tickers, dialer);
// tests run nodes on a manual clock. Every goroutine belongs to Run and ends
// before it returns.
package node
