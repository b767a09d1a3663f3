package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	waltypes "github.com/hashicorp/raft-wal/types"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
	"go.etcd.io/bbolt"
)

func openDir(t *testing.T, path string) *datadir.Dir {
	t.Helper()
	d, err := datadir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// appendN stores entries from..to (data of size bytes each, naming its
// index) and the term.
func appendN(t *testing.T, s logStore, from, to uint64, size int) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		data := bytes.Repeat([]byte{byte(i)}, size)
		logs = append(logs, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(0, int64(i))})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
}

func mustOpenStore(t *testing.T, d *datadir.Dir, kind string) logStore {
	t.Helper()
	s, err := openStore(d, kind, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantDataErr(t *testing.T, err error, file, msg string) {
	t.Helper()
	var de *datadir.Error
	if !errors.As(err, &de) || (file != "" && de.File != file) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("got %v, want a data-dir error on %s saying %q", err, file, msg)
	}
}

// SPEC §4: log entries carry a checksum and a bad one stops the node — in
// the WAL every entry's seal, checked on every read.
func TestLogSeal(t *testing.T) {
	in := raft.Log{Index: 7, Term: 2, Type: raft.LogConfiguration, Data: []byte("config"), Extensions: []byte{1, 2}, AppendedAt: time.Unix(5, 6)}
	sealed := SealLog(&in)
	if !bytes.Equal(in.Extensions, []byte{1, 2}) {
		t.Fatal("SealLog changed its argument")
	}
	out := *sealed
	if err := OpenLogSeal(&out); err != nil {
		t.Fatal(err)
	}
	if out.Index != 7 || out.Term != 2 || out.Type != raft.LogConfiguration || string(out.Data) != "config" || !bytes.Equal(out.Extensions, []byte{1, 2}) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
	// Any change to the index, term, type, data or extensions is refused.
	for _, c := range []struct {
		name string
		edit func(l *raft.Log)
		msg  string
	}{
		{"index", func(l *raft.Log) { l.Index++ }, "bad checksum"},
		{"term", func(l *raft.Log) { l.Term ^= 1 << 40 }, "bad checksum"},
		{"type", func(l *raft.Log) { l.Type = raft.LogNoop }, "bad checksum"},
		{"data", func(l *raft.Log) { l.Data = []byte("conFig") }, "bad checksum"},
		{"data cut", func(l *raft.Log) { l.Data = l.Data[:5] }, "bad checksum"},
		{"own extension", func(l *raft.Log) { l.Extensions = append([]byte{9}, l.Extensions[1:]...) }, "bad checksum"},
		{"seal flipped", func(l *raft.Log) {
			l.Extensions = append([]byte(nil), l.Extensions...)
			l.Extensions[len(l.Extensions)-1] ^= 1
		}, "bad checksum"},
		{"no seal", func(l *raft.Log) { l.Extensions = nil }, "no checksum seal"},
		{"magic gone", func(l *raft.Log) { l.Extensions = append([]byte(nil), l.Extensions...); l.Extensions[2] = 'x' }, "no checksum seal"},
	} {
		l := *sealed
		c.edit(&l)
		if err := OpenLogSeal(&l); !errors.Is(err, ErrLogSeal) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.msg)
		}
	}
	// AppendedAt (metrics only) is outside the seal; nil extensions stay nil.
	l := *SealLog(&raft.Log{Index: 1, Term: 1, Data: []byte("x")})
	l.AppendedAt = time.Unix(99, 0)
	if err := OpenLogSeal(&l); err != nil || l.Extensions != nil {
		t.Fatalf("got %v, extensions %v", err, l.Extensions)
	}
}

// The store a data dir holds decides; a new dir gets the write-ahead log;
// a configured store the dir does not hold, or both stores at once, are
// refused naming the key or the dir.
func TestLogStoreChoice(t *testing.T) {
	for _, c := range []struct{ held, want, got, err string }{
		{"", "", LogStoreWAL, ""},
		{"", LogStoreAuto, LogStoreWAL, ""},
		{"", LogStoreBolt, LogStoreBolt, ""},
		{LogStoreBolt, LogStoreAuto, LogStoreBolt, ""},
		{LogStoreWAL, LogStoreAuto, LogStoreWAL, ""},
		{LogStoreBolt, LogStoreWAL, "", "cluster.raft.log_store is wal but this data dir holds a bolt log (raft.db)"},
		{LogStoreWAL, LogStoreBolt, "", "cluster.raft.log_store is bolt but this data dir holds a wal log (wal/)"},
		{"both", LogStoreAuto, "", "holds both raft.db and wal/"},
		{"", "lsm", "", `log store "lsm"`},
	} {
		d := openDir(t, t.TempDir())
		if c.held == LogStoreBolt || c.held == "both" {
			mustOpenStore(t, d, LogStoreBolt).Close()
		}
		if c.held == LogStoreWAL || c.held == "both" {
			mustOpenStore(t, d, LogStoreWAL).Close()
		}
		var got string
		held, err := heldStore(d)
		if err == nil {
			got, err = chooseStore(d, held, c.want)
		}
		if got != c.got || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("held %q, want %q: got %q, %v; want %q, %q", c.held, c.want, got, err, c.got, c.err)
		}
	}
}

func TestWALReopenKeepsEverything(t *testing.T) {
	d := openDir(t, t.TempDir())
	s := mustOpenStore(t, d, LogStoreWAL)
	appendN(t, s, 1, 500, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpenStore(t, d, LogStoreWAL)
	defer s.Close()
	last, _ := s.LastIndex()
	term, _ := s.GetUint64([]byte("CurrentTerm"))
	var l raft.Log
	if err := s.GetLog(250, &l); err != nil || last != 500 || term != 3 || l.Index != 250 || len(l.Data) != 100 || l.Data[0] != 250 {
		t.Fatalf("after reopen: last %d term %d, entry 250 %+v %v", last, term, l.Index, err)
	}
	fi, err := os.Stat(d.WAL())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("wal/ mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}

// rotated builds a WAL with at least two sealed segments and a tail; it
// returns the segment file names, oldest first, and a copy of wal-meta.db
// taken after the first segment was created (an "older copy").
func rotated(t *testing.T, d *datadir.Dir) ([]string, []byte) {
	t.Helper()
	s := mustOpenStore(t, d, LogStoreWAL)
	appendN(t, s, 1, 10, 1000)
	oldMeta, err := os.ReadFile(filepath.Join(d.WAL(), "wal-meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	// 64 KiB entries: each segment (8 MiB) fills after ~128.
	var next uint64 = 11
	for segs := 0; segs < 3; segs = len(segments(t, d)) {
		appendN(t, s, next, next+31, 64<<10)
		next += 32
	}
	// Two more batches: the tail's first records are not its last batch
	// (which a crash may tear: raft-wal's recovery drops a last batch whose
	// CRC does not match, by design).
	appendN(t, s, next, next+9, 1000)
	appendN(t, s, next+10, next+19, 1000)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return segments(t, d), oldMeta
}

func segments(t *testing.T, d *datadir.Dir) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(d.WAL(), "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return m // zero-padded names: sorted oldest first
}

// A damaged WAL is refused at open, naming the file, and nothing in it is
// deleted or rewritten by the refusal (SPEC §4: a bad checksum stops the
// node, never a skip; issue 10's data-dir rule for the rest).
func TestWALDamageRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, d *datadir.Dir, segs []string, oldMeta []byte) string // returns the file the error must name ("" = any)
		msg    string
	}{
		{"meta missing", func(t *testing.T, d *datadir.Dir, _ []string, _ []byte) string {
			p := filepath.Join(d.WAL(), "wal-meta.db")
			must(t, os.Remove(p))
			return p
		}, "missing beside"},
		{"meta older copy", func(t *testing.T, d *datadir.Dir, _ []string, old []byte) string {
			p := filepath.Join(d.WAL(), "wal-meta.db")
			must(t, os.WriteFile(p, old, 0o600))
			return p
		}, "older than the WAL's segment files"},
		{"meta emptied", func(t *testing.T, d *datadir.Dir, _ []string, _ []byte) string {
			p := filepath.Join(d.WAL(), "wal-meta.db")
			must(t, os.Truncate(p, 0))
			return p
		}, "empty (0 bytes)"},
		{"meta truncated", func(t *testing.T, d *datadir.Dir, _ []string, _ []byte) string {
			p := filepath.Join(d.WAL(), "wal-meta.db")
			must(t, os.Truncate(p, 8192))
			return p
		}, "truncated?"},
		{"sealed segment missing", func(t *testing.T, d *datadir.Dir, segs []string, _ []byte) string {
			must(t, os.Remove(segs[1]))
			return segs[1]
		}, "is missing"},
		{"tail truncated", func(t *testing.T, d *datadir.Dir, segs []string, _ []byte) string {
			tail := segs[len(segs)-1]
			must(t, os.Truncate(tail, 4096))
			return tail
		}, "less than the"},
		{"sealed segment without its index block", func(t *testing.T, d *datadir.Dir, segs []string, _ []byte) string {
			// What raft-wal v0.4.0 left after clearing a log suffix.
			p := filepath.Join(d.WAL(), "wal-meta.db")
			editWALState(t, p, func(st *waltypes.PersistentState) { st.Segments[0].IndexStart = 0 })
			return segs[0]
		}, "has no index block"},
		{"record flipped in a sealed segment", func(t *testing.T, d *datadir.Dir, segs []string, _ []byte) string {
			b, err := os.ReadFile(segs[0])
			must(t, err)
			i := bytes.Index(b, bytes.Repeat([]byte{5}, 1000)) // entry 5's data
			if i < 0 {
				t.Fatal("entry 5 not found in the first segment")
			}
			b[i+500] ^= 0x10
			must(t, os.WriteFile(segs[0], b, 0o644))
			return d.WAL()
		}, "damaged Raft log at index 5"}, // the seal's "bad checksum" inside
		{"record flipped in the tail", func(t *testing.T, d *datadir.Dir, segs []string, _ []byte) string {
			tail := segs[len(segs)-1]
			b, err := os.ReadFile(tail)
			must(t, err)
			var base uint64 // the name is the segment's first index, then its ID
			if _, err := fmt.Sscanf(filepath.Base(tail), "%d-", &base); err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, bytes.Repeat([]byte{byte(base)}, 1000)) // the tail's first record's data
			if i < 0 {
				t.Fatalf("entry %d's data not found in the tail", base)
			}
			b[i+100] ^= 0x10
			must(t, os.WriteFile(tail, b, 0o644))
			return d.WAL()
		}, "bad checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := openDir(t, t.TempDir())
			segs, oldMeta := rotated(t, d)
			file := c.damage(t, d, segs, oldMeta)
			before := listing(t, d.WAL())
			_, err := openStore(d, LogStoreWAL, nil, nil)
			wantDataErr(t, err, file, c.msg)
			if after := listing(t, d.WAL()); after != before {
				t.Fatalf("the refusal changed wal/:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A segment file older than every segment the meta lists is what a crash
// between a head truncation's meta commit and the file's removal leaves:
// not damage.
func TestWALOlderLeftoverSegmentAccepted(t *testing.T) {
	d := openDir(t, t.TempDir())
	segs, _ := rotated(t, d)
	s := mustOpenStore(t, d, LogStoreWAL)
	last, _ := s.LastIndex()
	keep, err := os.ReadFile(segs[0])
	must(t, err)
	if err := s.DeleteRange(1, 200); err != nil { // drops the first segment
		t.Fatal(err)
	}
	must(t, s.Close())
	if _, err := os.Stat(segs[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the truncated segment is still there (%v)", err)
	}
	must(t, os.WriteFile(segs[0], keep, 0o644)) // as if the crash came before its removal
	s = mustOpenStore(t, d, LogStoreWAL)
	defer s.Close()
	first, _ := s.FirstIndex()
	if l, _ := s.LastIndex(); l != last || first <= 1 {
		t.Fatalf("after the leftover: first %d last %d, want last %d and the head truncated", first, l, last)
	}
}

// SPEC §5 (the log durable under data_dir) and issue 10's rule (a damaged
// data dir is never served, an intact one is not refused): a crash between
// raft-wal creating the tail segment and preallocating it leaves an empty
// file with nothing acknowledged in it: like a missing
// tail, not damage. Open keeps the log before it, preallocates the tail
// (else the next start would read it as truncated) and appends go on; a
// refusal for another reason leaves the empty file as it was.
func TestWALEmptyTailAfterCrashAccepted(t *testing.T) {
	d := openDir(t, t.TempDir())
	segs, _ := rotated(t, d)
	tail := segs[len(segs)-1]
	var base uint64
	if _, err := fmt.Sscanf(filepath.Base(tail), "%d-", &base); err != nil {
		t.Fatal(err)
	}
	s := mustOpenStore(t, d, LogStoreWAL)
	must(t, writeHighWater(d, s, 0)) // as a clean stop leaves it
	must(t, s.Close())
	must(t, os.Truncate(tail, 0))

	// Refused (the clean stop's mark says the log reached further): the
	// empty tail is not touched.
	if _, err := Open(Options{Dir: d, FSM: ticket.New(500), LocalID: "self", Logger: testLogger(t)}); err == nil || !strings.Contains(err.Error(), datadir.HighWaterFile) {
		t.Fatalf("open with a high-water mark past the log: %v, want the raft-hwm refusal", err)
	}
	if fi, err := os.Stat(tail); err != nil || fi.Size() != 0 {
		t.Fatalf("the refusal changed the empty tail: %v %v", fi.Size(), err)
	}
	must(t, os.Remove(filepath.Join(d.Path(), datadir.HighWaterFile)))

	r, err := Open(Options{Dir: d, FSM: ticket.New(500), LocalID: "self", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	must(t, r.Close())
	if fi, err := os.Stat(tail); err != nil || fi.Size() != walSegmentSize {
		t.Fatalf("Open did not preallocate the empty tail again: %v %v", fi.Size(), err)
	}
	s = mustOpenStore(t, d, LogStoreWAL)
	if last, _ := s.LastIndex(); last != base-1 {
		t.Fatalf("after an empty tail the log ends at %d, want %d (the sealed segments' end)", last, base-1)
	}
	appendN(t, s, base, base+4, 100)
	must(t, s.Close())
	s = mustOpenStore(t, d, LogStoreWAL)
	defer s.Close()
	var l raft.Log
	if err := s.GetLog(base+4, &l); err != nil || l.Index != base+4 {
		t.Fatalf("entry %d appended after the empty tail: %+v %v", base+4, l.Index, err)
	}
}

// editWALState rewrites the segment list in wal-meta.db.
func editWALState(t *testing.T, metaPath string, edit func(*waltypes.PersistentState)) {
	t.Helper()
	st, err := readWALState(metaPath)
	must(t, err)
	edit(&st)
	raw, err := json.Marshal(st)
	must(t, err)
	db, err := bbolt.Open(metaPath, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	must(t, err)
	defer db.Close()
	must(t, db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte(metadb.MetaBucket)).Put([]byte(metadb.MetaKey), raw)
	}))
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		fi, _ := e.Info()
		b.WriteString(e.Name())
		b.WriteString(":")
		b.WriteString(fi.ModTime().String())
		b.WriteString(" ")
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// SPEC §5: the Raft log is durable under cluster.raft.data_dir — across
// the truncations Raft makes, too. A follower whose log conflicts with its
// leader's clears the suffix
// (Raft's DeleteRange from the conflict to the end) and appends the
// leader's entries: after a restart every entry must read back. raft-wal
// v0.4.0 marked the truncated tail sealed without writing its index block,
// so the next open could not read a single entry of it ("sealed segment
// has no index block") — found by the netns cluster test's kill -9 and
// restart, fixed in raft-wal v0.4.1 (ForceSeal). Both stores, a truncation
// inside the tail, one reaching back across a sealed segment, and one
// right after a reopen.
func TestLogSuffixClearedThenReopened(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			d := openDir(t, t.TempDir())
			s := mustOpenStore(t, d, kind)
			appendN(t, s, 1, 20, 100)
			truncate := func(from, last uint64) {
				t.Helper()
				if err := s.DeleteRange(from, last); err != nil {
					t.Fatalf("clearing %d..%d: %v", from, last, err)
				}
			}
			reopen := func() {
				t.Helper()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = mustOpenStore(t, d, kind)
			}
			truncate(15, 20)
			appendN(t, s, 15, 30, 100)
			reopen()
			// Big entries fill segments (8 MiB each) so the next
			// truncation reaches back across a sealed one.
			appendN(t, s, 31, 200, 64<<10)
			truncate(100, 200)
			appendN(t, s, 100, 120, 100)
			reopen()
			truncate(118, 120) // straight after an open: the recovered tail
			appendN(t, s, 118, 125, 100)
			reopen()
			defer s.Close()
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			if first != 1 || last != 125 {
				t.Fatalf("after the reopens the log has %d..%d, want 1..125", first, last)
			}
			for i := first; i <= last; i++ {
				var l raft.Log
				if err := s.GetLog(i, &l); err != nil {
					t.Fatalf("entry %d after truncations and reopens: %v", i, err)
				}
				if l.Index != i || len(l.Data) == 0 || l.Data[0] != byte(i) {
					t.Fatalf("entry %d reads back as index %d data %x…", i, l.Index, l.Data[:min(len(l.Data), 4)])
				}
			}
			if kind == LogStoreWAL && len(segments(t, d)) < 2 {
				t.Fatalf("the WAL has %d segment files: the test never crossed a segment", len(segments(t, d)))
			}
		})
	}
}
