package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"
	"github.com/tckclk/tckclk/node/datadir"
	"go.etcd.io/bbolt"
)

// The log stores (cluster.raft.log_store). A data dir holds exactly one:
// raft.db (bolt) or wal/ (the write-ahead log).
const (
	// LogStoreAuto: the store the data dir already holds; a new data dir
	// gets the write-ahead log.
	LogStoreAuto = "auto"
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files, one
	// fsync per appended batch, where bolt does two fsyncs and page writes
	// per batch on the leader and again on each follower — the serial
	// commit round that bounds throughput (bench/report.md).
	LogStoreWAL = "wal"
	// LogStoreBolt is hashicorp/raft-boltdb/v2 in raft.db (data dirs
	// created with it keep it; a new one gets it only when asked for).
	LogStoreBolt = "bolt"
)

// LogStores are the values cluster.raft.log_store takes.
var LogStores = []string{LogStoreAuto, LogStoreWAL, LogStoreBolt}

// walSegmentSize is each WAL segment's preallocated size. The live log is
// trailing_logs (10,240) plus snapshot_threshold (8,192) entries of about
// 150 bytes — a few MB — so 8 MiB segments rotate rarely and keep a data
// dir's preallocated disk small (raft-wal's default is 64 MiB).
const walSegmentSize = 8 << 20

// logStore is what Raft needs of a log store, and Close.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// heldStore says which store d holds: LogStoreBolt, LogStoreWAL or "" for
// none; both at once is refused (which one holds the acknowledged writes
// is unknowable).
func heldStore(d *datadir.Dir) (string, error) {
	bolt, walDir := d.Exists(datadir.RaftDBFile), d.Exists(datadir.WALDir)
	switch {
	case bolt && walDir:
		return "", &datadir.Error{File: d.Path(), Err: fmt.Errorf("holds both %s and %s/: a data dir has one Raft log; refusing to start (which one holds the acknowledged writes is unknown); see docs/data-dir.md",
			datadir.RaftDBFile, datadir.WALDir)}
	case bolt:
		return LogStoreBolt, nil
	case walDir:
		return LogStoreWAL, nil
	}
	return "", nil
}

// chooseStore resolves cluster.raft.log_store against held, the store d
// holds (heldStore).
func chooseStore(d *datadir.Dir, held, want string) (string, error) {
	switch want {
	case "", LogStoreAuto:
		if held == "" {
			return LogStoreWAL, nil
		}
		return held, nil
	case LogStoreWAL, LogStoreBolt:
		if held != "" && held != want {
			return "", &datadir.Error{File: d.Path(), Err: fmt.Errorf("cluster.raft.log_store is %s but this data dir holds a %s log (%s): the store of an existing data dir cannot change; "+
				"set log_store to %s or auto, or replace the node with a fresh data dir; see docs/data-dir.md", want, held, storeLabel(storePath(d, held)), held)}
		}
		return want, nil
	}
	return "", fmt.Errorf("consensus: log store %q: want one of %v", want, LogStores)
}

// storePath is the path of kind's file or directory in d.
func storePath(d *datadir.Dir, kind string) string {
	if kind == LogStoreWAL {
		return d.WAL()
	}
	return d.RaftDB()
}

// openStore opens (creating when absent) the log store of kind in d and
// reads every entry once (scanLog) before Raft sees it. fence is the
// running Raft's (nil offline).
func openStore(d *datadir.Dir, kind string, log hclog.Logger, fence *installFence) (logStore, error) {
	if kind == LogStoreBolt {
		s, err := openBolt(d.RaftDB())
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	dir := d.WAL()
	w, err := openWAL(dir, log)
	if err != nil {
		return nil, err
	}
	s := checkedStore{logStore: w, fence: fence}
	if err := scanLog(dir, s); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openWAL opens the write-ahead log in dir (created 0700 when absent)
// after checkWAL, turning a panic of its readers on a damaged file into an
// error naming the directory.
func openWAL(dir string, log hclog.Logger) (_ *wal.WAL, err error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, &datadir.Error{File: dir, Err: err}
	}
	if err := checkWAL(dir); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = &datadir.Error{File: dir, Err: fmt.Errorf("damaged Raft log (the WAL is unreadable: %v); see docs/data-dir.md", r)}
		}
	}()
	if log == nil {
		log = hclog.NewNullLogger()
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithSegmentSize(walSegmentSize), wal.WithLogger(log), wal.WithMetaStore(meta))
	if err != nil {
		meta.Close()
		return nil, &datadir.Error{File: dir, Err: fmt.Errorf("cannot open the Raft log: %w; see docs/data-dir.md", err)}
	}
	return w, nil
}

// checkWAL refuses a WAL directory that raft-wal would open by destroying
// or silently forgetting data. raft-wal trusts wal-meta.db: with the meta
// missing it starts an empty log and deletes every segment file, with an
// older copy of it it deletes the newer segments; a tail segment shorter
// than the size it was preallocated to was truncated (it would read as a
// log that ends early). So before it opens: the meta is a sound bolt file
// whose state parses; every sealed segment it lists exists; the tail, when
// present, has its full size; and no segment file is newer than the meta
// knows (ID ≥ its NextSegmentID). Segment files it lists nowhere with an
// older ID are what a crash between a truncation's meta commit and the
// file's removal leaves: raft-wal deletes them, as designed.
func checkWAL(dir string) error {
	files, err := segment.NewFiler(dir, walfs.New()).List()
	if err != nil {
		return &datadir.Error{File: dir, Err: fmt.Errorf("damaged Raft log: unreadable segment file names (%v); see docs/data-dir.md", err)}
	}
	metaPath := filepath.Join(dir, metadb.FileName)
	if _, err := os.Stat(metaPath); errors.Is(err, os.ErrNotExist) {
		if len(files) == 0 {
			return nil // new, or a crash before the first meta commit: nothing was ever appended
		}
		return &datadir.Error{File: metaPath, Err: fmt.Errorf("missing beside %d WAL segment files: refusing to start (the log's metadata is gone; opening would delete the segments); see docs/data-dir.md", len(files))}
	}
	if err := checkBolt(metaPath); err != nil {
		return err
	}
	st, err := readWALState(metaPath)
	if err != nil {
		return err
	}
	for _, si := range st.Segments {
		name := segment.FileName(si)
		fi, err := os.Stat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist) && si.SealTime.IsZero(),
			err == nil && si.SealTime.IsZero() && fi.Size() == 0:
			// The tail: created right after its meta commit, then
			// preallocated; a crash before the file's first fsync leaves
			// it absent, or empty when it came between the create and the
			// preallocation, with nothing acknowledged in it either way
			// (raft-wal starts such a tail afresh). Losing it later cannot
			// be told apart: checkLog's high-water mark catches a clean
			// stop's.
		case errors.Is(err, os.ErrNotExist):
			return &datadir.Error{File: filepath.Join(dir, name), Err: fmt.Errorf("WAL segment (entries from %d) is missing: refusing to start; see docs/data-dir.md", si.BaseIndex)}
		case err != nil:
			return &datadir.Error{File: filepath.Join(dir, name), Err: err}
		case !si.SealTime.IsZero() && si.IndexStart == 0:
			// raft-wal v0.4.0 sealed a segment this way when Raft cleared
			// the log's suffix; no entry in it can be read.
			return &datadir.Error{File: filepath.Join(dir, name), Err: fmt.Errorf("damaged Raft log: the sealed WAL segment (entries from %d) has no index block (written by raft-wal v0.4.0 after a log-suffix truncation?): refusing to start; see docs/data-dir.md", si.BaseIndex)}
		case si.SealTime.IsZero() && si.SizeLimit > 0 && fi.Size() < int64(si.SizeLimit):
			return &datadir.Error{File: filepath.Join(dir, name), Err: fmt.Errorf("damaged Raft log: the WAL tail segment holds %d bytes, less than the %d it was created with (truncated?); see docs/data-dir.md",
				fi.Size(), si.SizeLimit)}
		}
	}
	var newer []uint64
	for id := range files {
		if id >= st.NextSegmentID {
			newer = append(newer, id)
		}
	}
	if len(newer) > 0 {
		sort.Slice(newer, func(i, j int) bool { return newer[i] < newer[j] })
		return &datadir.Error{File: metaPath, Err: fmt.Errorf("older than the WAL's segment files (segment %d exists, the meta's next segment is %d): an older copy of wal-meta.db? refusing to start; see docs/data-dir.md",
			newer[0], st.NextSegmentID)}
	}
	return nil
}

// emptyWALTail finds what a crash between raft-wal creating the tail
// segment and preallocating it leaves (checkWAL accepts the empty file):
// its path and the size it should have, "" when the tail is not empty. It
// reads wal-meta.db, so it runs before raft-wal opens (and locks) it; the
// rest of the checks are checkWAL's, when the store opens.
func emptyWALTail(dir string) (string, int64, error) {
	metaPath := filepath.Join(dir, metadb.FileName)
	if _, err := os.Stat(metaPath); err != nil {
		return "", 0, nil // new
	}
	if err := checkBolt(metaPath); err != nil {
		return "", 0, err // mapping a truncated bolt file is a SIGBUS
	}
	st, err := readWALState(metaPath)
	if err != nil || len(st.Segments) == 0 {
		return "", 0, err
	}
	tail := st.Segments[len(st.Segments)-1]
	p := filepath.Join(dir, segment.FileName(tail))
	if fi, err := os.Stat(p); err != nil || fi.Size() != 0 || !tail.SealTime.IsZero() || tail.SizeLimit == 0 {
		return "", 0, nil
	}
	return p, int64(tail.SizeLimit), nil
}

// preallocate finishes the preallocation of an empty tail: raft-wal would
// append to it without one, and the tail's full size is how checkWAL tells
// a truncated tail from a whole one. Open calls it once every check has
// passed (a refusal changes nothing) and before Raft starts: nothing
// writes the tail yet, and raft-wal's writer keeps its own offsets, so the
// file growing under it changes nothing it reads.
func preallocate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return &datadir.Error{File: path, Err: err}
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("preallocating the empty WAL tail: %w", err)}
	}
	return nil
}

// readWALState reads raft-wal's persisted state from wal-meta.db without
// changing the file (bolt read-only).
func readWALState(metaPath string) (st waltypes.PersistentState, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &datadir.Error{File: metaPath, Err: fmt.Errorf("damaged WAL metadata (unreadable bolt file: %v); see docs/data-dir.md", r)}
		}
	}()
	db, err := bbolt.Open(metaPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return st, &datadir.Error{File: metaPath, Err: fmt.Errorf("cannot open the WAL metadata: %w", err)}
	}
	defer db.Close()
	var raw []byte
	_ = db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte(metadb.MetaBucket)); b != nil {
			raw = append([]byte(nil), b.Get([]byte(metadb.MetaKey))...)
		}
		return nil
	})
	if len(raw) == 0 {
		return st, nil // created, nothing committed yet
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, &datadir.Error{File: metaPath, Err: fmt.Errorf("damaged WAL metadata (the segment list does not parse: %v); see docs/data-dir.md", err)}
	}
	return st, nil
}
