// Package node is the ticketing node (`ticketd`), wired together in
// Run(ctx, cfg): configuration, the durable single-voter Raft
// (hashicorp/raft + raft-boltdb/v2) around the ticket FSM, the leader's
// expiry loop, and the HTTP API of SPEC §4.1.
//
// Invariants:
//   - Nothing is served from partial state: the newest snapshot is verified
//     (format, checksum, Δ) before Raft starts, and a bad log entry found in
//     replay stops the node with the file and the reason (fail closed).
//     Raft's own fall-back to an older snapshot is disabled.
//   - Writes carry the leader's wall time; the ClockGuard is asked before
//     every Grant, Renew and Expire proposal, and a hold-off instant refuses
//     Grant and Expire until it has passed.
//   - Reads are linearizable: the leader has committed a Barrier in its
//     current term and VerifyLeader succeeds for the read.
//
// Time is injected (WallClock); tests run nodes on a manual clock. Every
// goroutine belongs to Run and ends before it returns.
package node
