// Package node is the ticketing node (`ticketd`), wired together in
// Run(ctx, cfg): configuration, clock health (node/clockhealth), the
// durable single-voter Raft (hashicorp/raft + raft-boltdb/v2) around the
// ticket FSM, the leader's expiry loop, and the HTTP API of SPEC §4.1.
//
// Start-up (SPEC §3.5): lock the data dir (a retired one is refused, a
// FAILED marker sets a hold-off), listen for the API (probes see every
// stage), clock_check with an agent (3 consecutive healthy samples; a
// failure exits and records nothing), open Raft, lead, ready.
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
//     after a hold-off passed with a healthy clock.
//   - Reads are linearizable: the leader has committed a Barrier in its
//     current term and VerifyLeader succeeds for the read.
//
// Time is injected (WallClock, clockhealth.MonoClock, tickers, dialer);
// tests run nodes on a manual clock. Every goroutine belongs to Run and ends
// before it returns.
package node
