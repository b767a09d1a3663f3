package consensus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
	"go.etcd.io/bbolt"
)

// restoreNewestSnapshot verifies every snapshot's metadata (checkMeta)
// and restores the newest one into the FSM after checking its payload
// against that metadata, refusing (never skipping to an older snapshot)
// when anything is wrong. It returns the restored snapshot's metadata and
// whether its payload carries its position (format version 3), or nil
// when there is none.
func restoreNewestSnapshot(d *datadir.Dir, store raft.SnapshotStore, fsm *ticket.FSM) (*raft.SnapshotMeta, bool, error) {
	dir := d.Snapshots()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, &datadir.Error{File: dir, Err: err}
	}
	var newest *diskMeta
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		m, err := checkMeta(dir, e.Name())
		if err != nil {
			return nil, false, err
		}
		if newest == nil || newer(&m.SnapshotMeta, &newest.SnapshotMeta) {
			newest = m
		}
	}
	if newest == nil {
		return nil, false, nil
	}
	metaPath := filepath.Join(dir, newest.ID, "meta.json")
	state := filepath.Join(dir, newest.ID, "state.bin")
	metas, err := store.List()
	if err != nil {
		return nil, false, &datadir.Error{File: dir, Err: err}
	}
	if len(metas) == 0 || metas[0].ID != newest.ID {
		return nil, false, &datadir.Error{File: metaPath, Err: fmt.Errorf("raft's snapshot store does not list snapshot %s as the newest; refusing to start; see docs/data-dir.md", newest.ID)}
	}
	_, rc, err := store.Open(newest.ID) // verifies raft's CRC-64 of state.bin
	if err != nil {
		if strings.Contains(err.Error(), "CRC mismatch") { // raft's only word for it
			err = fmt.Errorf("%w: %s", err, errCRC)
		}
		return nil, false, &datadir.Error{File: state, Err: fmt.Errorf("snapshot refused: %w", err)}
	}
	defer rc.Close()
	var hdr *ticket.Snapshot
	if err := restoreChecked(metaPath, state, &newest.SnapshotMeta, rc, fsm, &hdr); err != nil {
		return nil, false, err
	}
	return &newest.SnapshotMeta, hdr.Raft != nil, nil
}

// openBolt opens raft.db after checking its meta pages against its size,
// then reads every entry once (scanLog). bbolt panics on some damaged files;
// a panic in this goroutine is turned into an error naming the file.
func openBolt(path string) (_ *raftboltdb.BoltStore, err error) {
	if err := checkBolt(path); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log (the bolt file is unreadable: %v)", r)}
		}
	}()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: 2 * time.Second}})
	if err != nil {
		return nil, &datadir.Error{File: path, Err: fmt.Errorf("cannot open the Raft log: %w", err)}
	}
	if err := scanLog(path, s); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkBolt validates an existing raft.db before bbolt maps it: bbolt
// trusts its meta page, and a file shorter than the pages it names is a
// SIGBUS (unrecoverable) when mapped. So the two meta pages are parsed here
// (magic, version, FNV-64a checksum), and the file must hold every page
// the newest valid meta claims.
func checkBolt(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the caller decides whether a missing log is allowed
	}
	if err != nil {
		return &datadir.Error{File: path, Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return &datadir.Error{File: path, Err: err}
	}
	if fi.Size() == 0 {
		return &datadir.Error{File: path, Err: errors.New("the Raft log is empty (0 bytes): refusing to start on it, it would forget every acknowledged write; see docs/data-dir.md")}
	}
	m, err := readBoltMeta(f)
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log: %v; see docs/data-dir.md", err)}
	}
	if need := int64(m.pgid) * int64(m.pageSize); fi.Size() < need {
		return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log: the file holds %d bytes but its meta page names %d pages of %d bytes (truncated?); see docs/data-dir.md",
			fi.Size(), m.pgid, m.pageSize)}
	}
	return nil
}

// boltMeta is the part of a bbolt meta page checkBolt needs.
type boltMeta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

// readBoltMeta returns the newest valid of the two meta pages. Layout (bbolt
// v1.3): page header 16 bytes (id u64, flags u16, count u16, overflow u32),
// then magic u32, version u32, pageSize u32, flags u32, root bucket (root
// u64, sequence u64), freelist u64, pgid u64, txid u64, checksum u64
// (FNV-64a of the meta up to the checksum), native byte order.
func readBoltMeta(f *os.File) (boltMeta, error) {
	const hdr, metaLen = 16, 64
	var best boltMeta
	found := false
	var firstErr error
	read := func(off int64) {
		b := make([]byte, hdr+metaLen)
		if _, err := f.ReadAt(b, off); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("cannot read the meta page at %d: %v", off, err)
			}
			return
		}
		m := b[hdr:]
		le := binary.LittleEndian
		magic, version, psz := le.Uint32(m[0:]), le.Uint32(m[4:]), le.Uint32(m[8:])
		h := fnv.New64a()
		h.Write(m[:56])
		switch {
		case magic != 0xED0CDAED:
			firstErr = errors.Join(firstErr, fmt.Errorf("meta page at %d: bad magic %#x", off, magic))
			return
		case version != 2:
			firstErr = errors.Join(firstErr, fmt.Errorf("meta page at %d: unknown version %d", off, version))
			return
		case le.Uint64(m[56:]) != h.Sum64():
			firstErr = errors.Join(firstErr, fmt.Errorf("meta page at %d: checksum mismatch", off))
			return
		case psz < 512 || psz > 1<<20:
			firstErr = errors.Join(firstErr, fmt.Errorf("meta page at %d: page size %d", off, psz))
			return
		}
		cur := boltMeta{pageSize: psz, pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}
		if !found || cur.txid > best.txid {
			best, found = cur, true
		}
	}
	read(0)
	if found {
		read(int64(best.pageSize)) // the second meta page sits one page in
	} else {
		for _, psz := range []int64{4096, 8192, 16384, 65536} {
			if read(psz); found {
				break
			}
		}
	}
	if !found {
		return boltMeta{}, fmt.Errorf("no valid meta page: %v", firstErr)
	}
	return best, nil
}

// scanLog reads every entry of the log once, in this goroutine, so that a
// damaged page makes bbolt panic here (recovered, naming the file) and not
// later in one of Raft's goroutines.
func scanLog(path string, s logStore) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log (reading it failed: %v); see docs/data-dir.md", r)}
		}
	}()
	first, err := s.FirstIndex()
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log: %w", err)}
	}
	last, err := s.LastIndex()
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log: %w", err)}
	}
	var l raft.Log
	for i := first; i <= last && i > 0; i++ {
		if err := s.GetLog(i, &l); err != nil {
			return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log at index %d (the log has %d..%d): %w; see docs/data-dir.md", i, first, last, err)}
		}
		if l.Index != i {
			return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft log: entry at %d says index %d; see docs/data-dir.md", i, l.Index)}
		}
	}
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		if _, err := s.GetUint64([]byte(k)); err != nil && !strings.Contains(err.Error(), "not found") {
			return &datadir.Error{File: path, Err: fmt.Errorf("damaged Raft stable store (%s): %w; see docs/data-dir.md", k, err)}
		}
	}
	return nil
}

// checkLog refuses a log that cannot hold what the data dir has already
// served: a stable store whose term is older than the newest snapshot's (a
// new empty raft.db beside kept snapshots, or an older copy), a log
// position behind the high-water mark of the last clean stop, and — for a
// single voter, whose log always reaches its own snapshots — a log that is
// empty or ends before the newest snapshot. Starting on any of them could
// forget acknowledged writes and issue a fencing token twice (SPEC §4). A
// cluster follower's log may legitimately end before a snapshot it
// installed from the leader; its stable store's term never does.
func checkLog(path string, s logStore, snap *raft.SnapshotMeta, hwm highWater, strict bool) error {
	name := storeLabel(path)
	last, err := s.LastIndex()
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("cannot read the Raft log: %w", err)}
	}
	term, err := s.GetUint64([]byte("CurrentTerm"))
	if err != nil && !strings.Contains(err.Error(), "not found") {
		return &datadir.Error{File: path, Err: fmt.Errorf("cannot read the Raft stable store: %w", err)}
	}
	first, err := s.FirstIndex()
	if err != nil {
		return &datadir.Error{File: path, Err: fmt.Errorf("cannot read the Raft log: %w", err)}
	}
	if first > 1 && (snap == nil || snap.Index+1 < first) {
		covered := "no snapshot"
		if snap != nil {
			covered = fmt.Sprintf("the newest snapshot ends at %d", snap.Index)
		}
		return &datadir.Error{File: path, Err: fmt.Errorf("the Raft log starts at index %d but %s: the entries before it are gone (snapshots/ deleted?); "+
			"refusing to start; see docs/data-dir.md", first, covered)}
	}
	pos := last
	if snap != nil {
		pos = max(pos, snap.Index)
	}
	if pos < hwm.index || term < hwm.term {
		return &datadir.Error{File: path, Err: fmt.Errorf("the Raft log reaches index %d term %d, before the index %d term %d it had reached at the last clean stop (%s): "+
			"%s is an older copy or was replaced; refusing to start; see docs/data-dir.md", pos, term, hwm.index, hwm.term, datadir.HighWaterFile, name)}
	}
	if snap == nil {
		return nil
	}
	switch {
	case term < snap.Term:
		return &datadir.Error{File: path, Err: fmt.Errorf("the Raft stable store is at term %d, before snapshot %s (term %d): %s was deleted, emptied or replaced by an older copy; "+
			"refusing to start (it would forget acknowledged writes and reuse fencing tokens); see docs/data-dir.md", term, snap.ID, snap.Term, name)}
	case strict && last == 0:
		return &datadir.Error{File: path, Err: fmt.Errorf("the Raft log is empty but snapshot %s (index %d) exists: %s was deleted or replaced; "+
			"refusing to start (it would forget acknowledged writes and reuse fencing tokens); see docs/data-dir.md", snap.ID, snap.Index, name)}
	case strict && last < snap.Index:
		return &datadir.Error{File: path, Err: fmt.Errorf("the Raft log ends at index %d, before snapshot %s (index %d): %s is an older copy; "+
			"refusing to start; see docs/data-dir.md", last, snap.ID, snap.Index, name)}
	}
	return nil
}

// storeLabel is how checkLog's messages name the log at path: raft.db or
// wal/.
func storeLabel(path string) string {
	if filepath.Base(path) == datadir.WALDir {
		return datadir.WALDir + "/"
	}
	return filepath.Base(path)
}

// highWater is the log position recorded at the last clean stop.
type highWater struct{ index, term uint64 }

func readHighWater(d *datadir.Dir) (highWater, error) {
	f, ok, err := d.ReadMarker(datadir.HighWaterFile)
	if err != nil || !ok {
		return highWater{}, err
	}
	var h highWater
	var e1, e2 error
	h.index, e1 = strconv.ParseUint(f["last_index"], 10, 64)
	h.term, e2 = strconv.ParseUint(f["term"], 10, 64)
	if e1 != nil || e2 != nil {
		return highWater{}, &datadir.Error{File: d.File(datadir.HighWaterFile), Err: errors.New("unreadable high-water mark (refusing to start); see docs/data-dir.md")}
	}
	return h, nil
}

func writeHighWater(d *datadir.Dir, s logStore, snapIndex uint64) error {
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	last = max(last, snapIndex)
	term, _ := s.GetUint64([]byte("CurrentTerm"))
	return d.WriteMarker(datadir.HighWaterFile, fmt.Sprintf("raft log high-water mark at the last clean stop\nlast_index: %d\nterm: %d\n", last, term))
}
