package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/tckclk/tckclk/node/ticket"
)

// Files under the data dir.
const (
	raftDBFile   = "raft.db"
	snapshotsDir = "snapshots"
	retainSnaps  = 2
)

// raftFSM adapts ticket.FSM to raft.BatchingFSM.
type raftFSM struct {
	t *ticket.FSM
}

func (f *raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.t.Apply(l.Index, l.Data)
}

func (f *raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	return out
}

func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.t.Snapshot()
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{s: s}, nil
}

// Restore is Raft's snapshot install (from a leader, or a user restore). A
// refused snapshot stops the FSM, and the node with it.
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.t.Restore(rc)
}

type fsmSnapshot struct{ s *ticket.Snapshot }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// DataError is a refusal to start because of the data dir's content: the
// file and the reason.
type DataError struct {
	File string
	Err  error
}

func (e *DataError) Error() string { return fmt.Sprintf("node: %s: %v", e.File, e.Err) }
func (e *DataError) Unwrap() error { return e.Err }

// snapMeta is the part of raft's meta.json this node checks.
type snapMeta struct {
	ID    string
	Index uint64
	Term  uint64
}

// restoreNewestSnapshot verifies every snapshot's metadata and restores the
// newest one into the FSM, refusing (never skipping to an older snapshot)
// when anything is wrong. It returns the restored snapshot's ID, or "".
func restoreNewestSnapshot(dataDir string, store *raft.FileSnapshotStore, fsm *ticket.FSM) (string, error) {
	dir := filepath.Join(dataDir, snapshotsDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", &DataError{File: dir, Err: err}
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		p := filepath.Join(dir, e.Name(), "meta.json")
		b, err := os.ReadFile(p)
		if err != nil {
			return "", &DataError{File: p, Err: err}
		}
		var m snapMeta
		if err := json.Unmarshal(b, &m); err != nil || m.ID != e.Name() {
			return "", &DataError{File: p, Err: fmt.Errorf("unreadable snapshot metadata (id %q): %v", m.ID, err)}
		}
	}
	metas, err := store.List()
	if err != nil {
		return "", &DataError{File: dir, Err: err}
	}
	if len(metas) == 0 {
		return "", nil
	}
	newest := metas[0]
	state := filepath.Join(dir, newest.ID, "state.bin")
	_, rc, err := store.Open(newest.ID) // verifies raft's CRC-64 of state.bin
	if err != nil {
		return "", &DataError{File: state, Err: fmt.Errorf("snapshot refused: %w", err)}
	}
	defer rc.Close()
	if err := fsm.Restore(rc); err != nil {
		return "", &DataError{File: state, Err: err}
	}
	return newest.ID, nil
}

// lockFile guards a data dir against a second process (or node) using it.
const lockFile = "LOCK"

// lockDataDir creates dataDir if needed and takes an exclusive,
// non-blocking flock on dataDir/LOCK, held until the returned file is
// closed.
func lockDataDir(dataDir string) (*os.File, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, &DataError{File: dataDir, Err: err}
	}
	p := filepath.Join(dataDir, lockFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, &DataError{File: p, Err: err}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = errors.New("locked by another process (is another ticketd running on this data dir?)")
		}
		return nil, &DataError{File: p, Err: err}
	}
	return f, nil
}

// raftParts are the durable pieces of a single-voter Raft.
type raftParts struct {
	lock   *os.File // holds the data dir's flock
	r      *raft.Raft
	store  *raftboltdb.BoltStore
	trans  *raft.InmemTransport
	snaps  *raft.FileSnapshotStore
	dbPath string
}

func (p *raftParts) close() error {
	var errs []error
	if p.r != nil {
		errs = append(errs, p.r.Shutdown().Error())
	}
	if p.trans != nil {
		errs = append(errs, p.trans.Close())
	}
	if p.store != nil {
		errs = append(errs, p.store.Close())
	}
	if p.lock != nil {
		errs = append(errs, p.lock.Close()) // releases the flock
	}
	return errors.Join(errs...)
}

// openRaft opens (or bootstraps) the single-voter Raft under dataDir. It
// takes ownership of lock (lockDataDir's) and closes it on failure.
func openRaft(cfg *Config, lock *os.File, fsm *ticket.FSM, notify chan bool, log *slog.Logger) (*raftParts, error) {
	dataDir := cfg.Cluster.Raft.DataDir
	raftLog := &hclogWriter{log: log.With("component", "raft")}
	p := &raftParts{lock: lock, dbPath: filepath.Join(dataDir, raftDBFile)}
	var err error
	p.snaps, err = raft.NewFileSnapshotStore(dataDir, retainSnaps, raftLog)
	if err != nil {
		p.close()
		return nil, &DataError{File: filepath.Join(dataDir, snapshotsDir), Err: err}
	}
	id, err := restoreNewestSnapshot(dataDir, p.snaps, fsm)
	if err != nil {
		p.close()
		return nil, err
	}
	if id != "" {
		log.Info("restored snapshot", "id", id, "tickets", fsm.Len(), "delta_ms", fsm.Delta())
	}
	p.store, err = raftboltdb.New(raftboltdb.Options{Path: p.dbPath})
	if err != nil {
		p.close()
		return nil, &DataError{File: p.dbPath, Err: err}
	}
	name := cfg.Cluster.Name
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(name))
	p.trans = trans

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(name)
	rc.LogOutput, rc.LogLevel = raftLog, "INFO"
	rc.NotifyCh = notify
	rc.NoSnapshotRestoreOnStart = true // restoreNewestSnapshot did it, without fall-back
	// BatchApplyCh stays off: with a buffered applyCh a future still in the
	// buffer when Raft shuts down is never answered and its waiter hangs
	// (seen when the FSM stops during replay). Group commit works without
	// it: the leader drains every Apply blocked on the channel into one
	// StoreLogs (one fsync'd bolt transaction), up to MaxAppendEntries.
	rc.MaxAppendEntries = 512
	rc.SnapshotThreshold = cfg.Cluster.Raft.SnapshotThreshold
	rc.SnapshotInterval = cfg.Cluster.Raft.SnapshotInterval
	rc.TrailingLogs = cfg.Cluster.Raft.TrailingLogs
	// One voter, no network: elect at once.
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	if err := raft.ValidateConfig(rc); err != nil {
		p.close()
		return nil, fmt.Errorf("node: raft config: %w", err)
	}
	existing, err := raft.HasExistingState(p.store, p.store, p.snaps)
	if err != nil {
		p.close()
		return nil, &DataError{File: p.dbPath, Err: err}
	}
	if !existing {
		conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: addr}}}
		if err := raft.BootstrapCluster(rc, p.store, p.store, p.snaps, trans, conf); err != nil {
			p.close()
			return nil, &DataError{File: p.dbPath, Err: fmt.Errorf("bootstrap: %w", err)}
		}
		log.Info("bootstrapped a new single-node cluster", "node_id", name, "data_dir", dataDir)
	}
	cache, err := raft.NewLogCache(1024, p.store)
	if err != nil {
		p.close()
		return nil, err
	}
	p.r, err = raft.NewRaft(rc, &raftFSM{t: fsm}, cache, p.store, p.snaps, trans)
	if err != nil {
		p.close()
		return nil, &DataError{File: p.dbPath, Err: err}
	}
	fut := p.r.GetConfiguration()
	if err := fut.Error(); err != nil {
		p.close()
		return nil, err
	}
	var ids []string
	for _, s := range fut.Configuration().Servers {
		if s.ID == rc.LocalID && s.Suffrage == raft.Voter {
			return p, nil
		}
		ids = append(ids, string(s.ID))
	}
	p.close()
	return nil, &IdentityError{DataDir: dataDir, Name: name, Members: ids}
}

// IdentityError: the data dir belongs to another node ID.
type IdentityError struct {
	DataDir string
	Name    string
	Members []string
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("node: data dir %s belongs to a cluster whose voters are %v; cluster.name is %q (use the node's own name, or another data dir)", e.DataDir, e.Members, e.Name)
}

// hclogWriter turns the lines of Raft's own logger (hclog's text format,
// "TIME [LEVEL]  raft: message: k=v") into slog records.
type hclogWriter struct{ log *slog.Logger }

func (w *hclogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		lvl, msg := slog.LevelInfo, line
		if i := strings.Index(line, "["); i >= 0 {
			if j := strings.Index(line[i:], "]"); j > 0 {
				switch line[i+1 : i+j] {
				case "TRACE", "DEBUG":
					lvl = slog.LevelDebug
				case "WARN":
					lvl = slog.LevelWarn
				case "ERROR":
					lvl = slog.LevelError
				}
				msg = strings.TrimSpace(line[i+j+1:])
			}
		}
		for _, name := range []string{"raft: ", "snapshot: "} {
			msg = strings.TrimPrefix(msg, name)
		}
		w.log.Log(context.Background(), lvl, msg)
	}
	return len(p), nil
}
