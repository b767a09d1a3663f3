// Package consensus is hashicorp/raft around the ticket FSM: the log and
// stable store (raft-wal in wal/, the default for a new data dir, or
// raft-boltdb/v2 in raft.db: LogStoreWAL, LogStoreBolt) with a CRC seal on
// every entry and the file snapshot store under a node/datadir, the FSM
// adapter, snapshot verification before Raft starts, and Propose,
// Barrier and VerifyLeader bounded by a context.
//
// The transport is injected: an in-memory one for a single node, the mesh's
// raft.StreamLayer in cluster mode. So is the bootstrap decision (a
// configuration to bootstrap with when the data dir holds no Raft state, or
// none: wait to be added by a leader).
//
// Invariants: the newest snapshot is verified and restored before Raft
// starts, never falling back to an older one (NoSnapshotRestoreOnStart):
// every field of every snapshot's meta.json against itself and state.bin
// (size, CRC-64), then the newest one's state.bin (format, checksum, Δ)
// and the Raft position it carries (index, term, configuration and its
// index; snapshot format 3) against its meta.json — Raft trusts the
// metadata, and its CRC covers only state.bin. A snapshot installed from
// the leader is checked against the request the same way
// (positionSink). Every wait on a raft future ends with the caller's
// context, and its reader ends at the latest when Raft's shutdown has
// (endsAtShutdown: raft drops futures queued for its FSM goroutine,
// hashicorp/raft#498).
//
// Hazard: a Propose whose context ends has an unknown outcome: the entry may
// still commit. Callers report it as such, never as a refusal.
package consensus
