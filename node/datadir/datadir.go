package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// File names under the data dir.
const (
	LockFile   = "LOCK"
	RaftDBFile = "raft.db"
	// WALDir holds the Raft log and stable store when the log store is
	// the write-ahead log (cluster.raft.log_store wal, the default for a
	// new data dir): wal-meta.db and the segment files.
	WALDir       = "wal"
	SnapshotsDir = "snapshots"
	FailedFile   = "clock-failed"
	RetiredFile  = "retired"
	// HighWaterFile records the Raft log's last index and term at each
	// clean stop; a log found behind it is an older copy.
	HighWaterFile = "raft-hwm"
	// RecoveredFile marks a data dir built by `ticketd recover` (SPEC
	// §3.4): Grant and Expire are refused until the instant it names.
	RecoveredFile = "recovered"
)

// Error is a refusal because of the data dir's content or state: the file
// and what is wrong with it.
type Error struct {
	File string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("node: %s: %v", e.File, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Dir is an open, locked data dir.
type Dir struct {
	path string
	lock *os.File
}

// Open creates path (0700) if needed and takes an exclusive, non-blocking
// flock on path/LOCK, held until Close.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, &Error{File: path, Err: err}
	}
	p := filepath.Join(path, LockFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, &Error{File: p, Err: err}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = errors.New("locked by another process (is another ticketd running on this data dir?)")
		}
		return nil, &Error{File: p, Err: err}
	}
	return &Dir{path: path, lock: f}, nil
}

// Path is the data dir's path.
func (d *Dir) Path() string { return d.path }

// File is the path of name inside the data dir.
func (d *Dir) File(name string) string { return filepath.Join(d.path, name) }

// RaftDB is the path of raft.db.
func (d *Dir) RaftDB() string { return d.File(RaftDBFile) }

// WAL is the path of the write-ahead log's directory.
func (d *Dir) WAL() string { return d.File(WALDir) }

// Snapshots is the path of the snapshot directory.
func (d *Dir) Snapshots() string { return d.File(SnapshotsDir) }

// Close releases the lock.
func (d *Dir) Close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}
