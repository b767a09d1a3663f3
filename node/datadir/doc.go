// Package datadir owns a ticketd data dir: the lock, the file layout, the
// markers (FAILED, retired) and the integrity checks run before anything in
// it is served.
//
// Layout (every file 0600, every directory 0700):
//
//	LOCK          flock held by the one process using the dir
//	wal/          the Raft log and stable store, raft-wal (a new dir's default)
//	raft.db       or that, raft-boltdb/v2 (never both: refused)
//	raft-hwm      the log's last index and term at the last clean stop
//	snapshots/    Raft snapshots (FileSnapshotStore, the newest two kept)
//	clock-failed  single node: its clock FAILED; restarts hold off 250 s + Δ
//	retired       cluster mode: this NodeId's clock FAILED after it joined;
//	              the dir never serves again (SPEC §3.4)
//	recovered     built by ticketd recover or restore: Grant and Expire
//	              refused until the instant it names
//	generation    the NodeId NAME~G of a later generation's dir (SPEC §3.4);
//	              retired dirs moved aside live beside it (retired-*)
//
// Invariants: every marker is written through a temporary file, fsync,
// rename and an fsync of the directory, so after the call returns it
// survives a crash; a marker that exists but cannot be read refuses the
// start (fail closed); marker text is flattened to one printable line
// before it reaches a log. Errors are *Error values naming the file.
//
// Hazard: the lock is advisory (flock); it keeps a second ticketd out, not
// an operator with an editor.
package datadir
