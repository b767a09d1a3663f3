package consensus

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
	"go.etcd.io/bbolt"
)

// RecoverInfo describes a recovered state.
type RecoverInfo struct {
	// LastIndex and LastTerm are the newest position of the old state
	// (snapshot or log); the new log continues after it, so every new
	// fencing token (the Raft index of its Grant) is above every token the
	// old cluster ever issued.
	LastIndex, LastTerm uint64
	Tickets             int
	// OldServers are the NodeIds the old configuration ever named (its
	// snapshot's and every configuration entry after it).
	OldServers map[string]bool
}

// ReadState rebuilds the newest state of a data dir into fsm, offline and
// read-only: the newest snapshot, verified (never an older one), then every
// log entry after it. Entries whose commit is unknown are applied too: an
// unacknowledged Grant or Renew only makes a ticket held longer, a Release
// came from its holder, an Expire only frees a lease that had run out — all
// covered by the hold-off of a recovered node (SPEC §3.4).
func ReadState(d *datadir.Dir, fsm *ticket.FSM) (RecoverInfo, error) {
	info := RecoverInfo{OldServers: map[string]bool{}}
	kind, err := heldStore(d)
	if err != nil {
		return info, err
	}
	if kind == "" {
		return info, &datadir.Error{File: d.Path(), Err: fmt.Errorf("no Raft log here (neither %s nor %s/): not a ticketd data dir", datadir.RaftDBFile, datadir.WALDir)}
	}
	logPath := storePath(d, kind)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(d.Path(), retainSnaps, nil)
	if err != nil {
		return info, &datadir.Error{File: d.Snapshots(), Err: err}
	}
	snap, _, err := restoreNewestSnapshot(d, snaps, fsm)
	if err != nil {
		return info, err
	}
	if snap != nil {
		info.LastIndex, info.LastTerm = snap.Index, snap.Term
		for _, s := range snap.Configuration.Servers {
			info.OldServers[string(s.ID)] = true
		}
	}
	store, err := openReadOnly(d, kind)
	if err != nil {
		return info, err
	}
	defer store.Close()
	if err := scanLog(logPath, store); err != nil {
		return info, err
	}
	last, _ := store.LastIndex()
	first, _ := store.FirstIndex()
	if first > 1 && (snap == nil || snap.Index+1 < first) {
		return info, &datadir.Error{File: logPath, Err: fmt.Errorf("the log starts at %d and no snapshot covers what is before it", first)}
	}
	for i := max(first, info.LastIndex+1); i <= last && i > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return info, &datadir.Error{File: logPath, Err: fmt.Errorf("log entry %d: %w", i, err)}
		}
		switch l.Type {
		case raft.LogCommand:
			fsm.Apply(l.Index, l.Data)
		case raft.LogConfiguration:
			for _, s := range raft.DecodeConfiguration(l.Data).Servers {
				info.OldServers[string(s.ID)] = true
			}
		}
		info.LastIndex, info.LastTerm = l.Index, l.Term
	}
	if err := fsm.Fatal(); err != nil {
		return info, &datadir.Error{File: logPath, Err: fmt.Errorf("replaying the old log: %w", err)}
	}
	if info.LastIndex == 0 {
		return info, &datadir.Error{File: logPath, Err: errors.New("the old state is empty: nothing to recover")}
	}
	info.Tickets = fsm.Len()
	return info, nil
}

// WriteRecovered makes to (an empty, locked data dir) a one-voter Raft
// whose state is fsm at info's position: a snapshot at (LastIndex,
// LastTerm) naming newID (at addr) as the only voter, a no-op entry after
// it, the stable store at that term and the high-water mark. The node that
// opens it never bootstraps and leads at once.
// logStore is its cluster.raft.log_store ("" or auto: the write-ahead log).
func WriteRecovered(to *datadir.Dir, fsm *ticket.FSM, info RecoverInfo, newID, addr, logStore string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	held, err := heldStore(to)
	if err != nil {
		return err
	}
	kind, err := chooseStore(to, held, logStore)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(to.Path())
	if err != nil {
		return &datadir.Error{File: to.Path(), Err: err}
	}
	for _, e := range ents {
		if e.Name() != datadir.LockFile {
			return &datadir.Error{File: to.Path(), Err: fmt.Errorf("not empty (holds %s): recover writes a new data dir", e.Name())}
		}
	}
	snaps, err := raft.NewFileSnapshotStore(to.Path(), retainSnaps, &hclogWriter{log: log})
	if err != nil {
		return &datadir.Error{File: to.Snapshots(), Err: err}
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(newID), Address: raft.ServerAddress(addr)}}}
	_, tr := raft.NewInmemTransport(raft.ServerAddress(addr))
	defer tr.Close()
	sink, err := (&positionStore{SnapshotStore: snaps}).Create(fileSnapshotVersion, info.LastIndex, info.LastTerm, conf, 1, tr)
	if err != nil {
		return &datadir.Error{File: to.Snapshots(), Err: err}
	}
	s, err := fsm.Snapshot()
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	err = persist(s, sink)
	s.Release()
	if err != nil {
		return &datadir.Error{File: to.Snapshots(), Err: err}
	}
	store, err := openStore(to, kind, nil, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	next := &raft.Log{Index: info.LastIndex + 1, Term: info.LastTerm, Type: raft.LogNoop, AppendedAt: time.Now()}
	for _, step := range []error{
		store.StoreLog(next),
		store.SetUint64([]byte("CurrentTerm"), info.LastTerm),
	} {
		if step != nil {
			return &datadir.Error{File: storePath(to, kind), Err: step}
		}
	}
	return writeHighWater(to, store, info.LastIndex)
}

// openReadOnly opens d's log of kind without changing d: bolt read-only;
// the write-ahead log, which has no read-only mode (its open recovers the
// tail and deletes leftover segments), from a private copy of wal/.
func openReadOnly(d *datadir.Dir, kind string) (logStore, error) {
	if kind == LogStoreBolt {
		if err := checkBolt(d.RaftDB()); err != nil {
			return nil, err
		}
		s, err := raftboltdb.New(raftboltdb.Options{Path: d.RaftDB(), BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second}})
		if err != nil {
			return nil, &datadir.Error{File: d.RaftDB(), Err: fmt.Errorf("cannot open the Raft log read-only: %w", err)}
		}
		return s, nil
	}
	if err := checkWAL(d.WAL()); err != nil {
		return nil, err // on the original: the copy's paths would mislead
	}
	tmp, err := os.MkdirTemp("", "ticketd-recover-wal-")
	if err != nil {
		return nil, err
	}
	if err := copyDir(d.WAL(), tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, &datadir.Error{File: d.WAL(), Err: fmt.Errorf("copying the WAL to read it: %w", err)}
	}
	w, err := openWAL(tmp, nil)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, &datadir.Error{File: d.WAL(), Err: err}
	}
	return &tempStore{logStore: checkedStore{logStore: w}, dir: tmp}, nil
}

// tempStore is a log store opened from a private copy, removed on Close.
type tempStore struct {
	logStore
	dir string
}

func (t *tempStore) Close() error {
	err := t.logStore.Close()
	return errors.Join(err, os.RemoveAll(t.dir))
}

// copyDir copies the regular files of src into dst.
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
