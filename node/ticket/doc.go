// Package ticket is the replicated state machine of the ticketing node
// (SPEC §4): named leases ("tickets") with at most one holder, fencing
// tokens and absolute server-side expiries.
//
// Invariants:
//   - The FSM never reads a clock. Every time it uses comes from the log
//     entry: the proposer's `now` (ms) and the absolute expiry computed once
//     by the proposer as now + lease_s×1000 + Δ. Apply decides against the
//     CURRENT state, so a Renew that commits before a racing Expire wins.
//   - A fencing token is the Raft index of the Grant entry in its low 48
//     bits and the token epoch in its high 16 (token.go): a cluster restored
//     from a backup moves to the next epoch, so its tokens are above any
//     the old cluster can issue. Tokens are strictly increasing per ticket
//     and globally. Renew keeps the token.
//   - A revoked ticket (OpRevoke, entry version 3) keeps its holder and
//     expiry: its holder can no longer Renew (nor re-Grant it), Release and
//     Expire free it as before.
//   - Δ is part of the replicated state (an Init entry written at
//     bootstrap). Replay, snapshot, restore and leader change store expiries
//     verbatim: nothing ever adds Δ again.
//   - Log entries and snapshots are versioned and checksummed (CRC-32C). An
//     unknown version, a bad checksum or a malformed body is fatal: the FSM
//     latches the error, applies nothing after it and refuses to snapshot,
//     so the node stops instead of skipping (fail closed).
//   - Retired NodeIds (SPEC §3.4) are replicated state too: an OpRetire
//     entry (entry version 2) adds one, the snapshot (version 2) carries
//     them. Each entry and snapshot is written in the oldest version that
//     can hold it, and both versions are read, so a rolling upgrade keeps
//     the previous release reading everything but a retirement.
//   - Restore decodes and verifies a whole snapshot, including Δ ∈ 2..=60000
//     and Δ equal to the node's configured Δ, before it replaces any state.
//   - A snapshot of version 3 or 4 carries the Raft position it was taken
//     at (index, term, configuration and its index: Position) under its
//     checksum, so node/consensus can check Raft's metadata against it.
//     The FSM does not know the position; the Raft adapter supplies it.
//     Version 4 adds the token epoch, the highest token issued and the
//     revoked flag; every snapshot a node persists is version 4.
//
// Hazards: Apply is called by Raft's FSM goroutine only; readers (Get, List,
// Due, Len) take a read lock and may run concurrently with it.
package ticket
