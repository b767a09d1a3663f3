package node

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"hash/crc64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// editLastGrant rewrites the newest Grant entry in raft.db with edit.
func editLastGrant(t *testing.T, dir string, edit func([]byte) []byte) uint64 {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, datadir.RaftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		if e, err := ticket.DecodeEntry(l.Data); err != nil || e.Op != ticket.OpGrant {
			continue
		}
		l.Data = edit(append([]byte(nil), l.Data...))
		if err := store.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
		return i
	}
	t.Fatal("no grant entry in the log")
	return 0
}

func reseal(b []byte) []byte {
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func seeded(t *testing.T, dir string, cfg Config, deps Deps, opts ...client.Option) {
	t.Helper()
	tn := startNode(t, cfg, deps, opts...)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := tn.c.Grant(bg, n, "h", 30); err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
}

// SPEC §4-8: a log entry with a bad checksum or an unknown version stops
// the node at start-up, naming the file, the index and the reason — never a
// skip, never serving from the state before it.
func TestCorruptLogEntryStopsNode(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func([]byte) []byte
		kind error
		msg  string
	}{
		{"bad checksum", func(b []byte) []byte { b[12] ^= 0x40; return b }, ticket.ErrChecksum, "bad checksum"},
		{"unknown version", func(b []byte) []byte { b[0] = 9; return reseal(b) }, ticket.ErrVersion, "version 9"},
		{"unknown op", func(b []byte) []byte { b[1] = 77; return reseal(b) }, ticket.ErrFormat, "unknown op 77"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := newManualClock()
			cfg := testConfig(t, dir)
			cfg.Cluster.Raft.LogStore = consensus.LogStoreBolt // edited below with raft-boltdb (the WAL's own seal: TestDataDirFaultTable, node/consensus)
			seeded(t, dir, cfg, Deps{Wall: clk})
			idx := editLastGrant(t, dir, c.edit)
			_, err := tryStart(t, testConfig(t, dir), Deps{Wall: clk}, true)
			var de *DataError
			if !errors.As(err, &de) || de.File != filepath.Join(dir, datadir.RaftDBFile) || !errors.Is(err, c.kind) {
				t.Fatalf("got %v, want a DataError on raft.db of kind %v", err, c.kind)
			}
			var ae *ticket.ApplyError
			if !errors.As(err, &ae) || ae.Index != idx || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want index %d and %q", err, idx, c.msg)
			}
		})
	}
}

func adminSetup(t *testing.T, dir string) (Config, []client.Option) {
	cfg := testConfig(t, filepath.Join(dir, "data"))
	tok := strings.Repeat("k", 40)
	cfg.API.AdminTokenFile = writeFile(t, dir, "admin", tok, 0o600)
	return cfg, []client.Option{client.WithAdminToken(tok)}
}

// snapshotted runs a node, grants, snapshots twice with grants between, stops;
// it returns the tickets as the node listed them last.
func snapshotted(t *testing.T, cfg Config, clk *clockhealthtest.Clock, opts []client.Option) []byte {
	t.Helper()
	tn := startNode(t, cfg, Deps{Wall: clk}, opts...)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := tn.c.Grant(bg, n, "h", 30); err != nil {
			t.Fatal(err)
		}
	}
	// Two snapshots: when the newest is bad, the node must refuse rather
	// than fall back to the older one (which would forget grants).
	for _, n := range []string{"d", "e"} {
		if _, err := tn.c.Snapshot(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.c.Grant(bg, n, "h", 30); err != nil {
			t.Fatal(err)
		}
	}
	l, err := tn.c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	return must(json.Marshal(l))
}

// SPEC §4-7: snapshot then restart: every expiry is unchanged and Δ is not
// added again; tokens keep rising.
func TestSnapshotRestart(t *testing.T) {
	dir := t.TempDir()
	cfg, opts := adminSetup(t, dir)
	cfg.Cluster.Raft.TrailingLogs = 0 // the snapshot alone must carry the state
	clk := newManualClock()
	before := snapshotted(t, cfg, clk, opts)
	for range 2 { // twice: a restart after a restart adds nothing either
		tn := startNode(t, cfg, Deps{Wall: clk}, opts...)
		l, err := tn.c.List(bg, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if after := must(json.Marshal(l)); string(after) != string(before) {
			t.Fatalf("tickets changed across snapshot + restart:\n%s\n%s", before, after)
		}
		st, _ := tn.c.Status(bg)
		if st.Raft.LastSnapshotIndex == 0 || st.DeltaMs != 500 {
			t.Fatalf("status %+v", st)
		}
		if _, err := tn.c.Snapshot(bg); err != nil && !strings.Contains(err.Error(), "nothing_new") {
			t.Fatal(err)
		}
		tn.stop()
	}
	tn := startNode(t, cfg, Deps{Wall: clk}, opts...)
	g, err := tn.c.Grant(bg, "f", "z", 1)
	var l struct{ Tickets []struct{ Token uint64 } }
	json.Unmarshal(before, &l)
	for _, tk := range l.Tickets {
		if err != nil || g.Token <= tk.Token {
			t.Fatalf("token after restore %+v %v, old %d", g, err, tk.Token)
		}
	}
}

func snapDir(t *testing.T, dataDir string) string {
	ents, err := os.ReadDir(filepath.Join(dataDir, datadir.SnapshotsDir))
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	for _, e := range ents {
		if e.IsDir() && e.Name() > newest {
			newest = e.Name()
		}
	}
	if newest == "" {
		t.Fatal("no snapshot")
	}
	return filepath.Join(dataDir, datadir.SnapshotsDir, newest)
}

// fixRaftCRC rewrites meta.json's CRC-64 so only our own checks can object.
func fixRaftCRC(t *testing.T, sdir string) {
	state := must(os.ReadFile(filepath.Join(sdir, "state.bin")))
	var meta map[string]any
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(sdir, "meta.json"))), &meta); err != nil {
		t.Fatal(err)
	}
	sum := crc64.New(crc64.MakeTable(crc64.ECMA))
	sum.Write(state)
	meta["CRC"] = base64.StdEncoding.EncodeToString(sum.Sum(nil))
	meta["Size"] = len(state)
	if err := os.WriteFile(filepath.Join(sdir, "meta.json"), must(json.Marshal(meta)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SPEC §4-8, §3.2: a corrupt snapshot, one with an unknown version, one
// with Δ out of range, or a node configured with another Δ: refuse to
// start naming the file and the reason (never fall back to an older
// snapshot or an empty state).
func TestSnapshotRefusedAtStart(t *testing.T) {
	edit := func(f func(b []byte) []byte) func(t *testing.T, sdir string) {
		return func(t *testing.T, sdir string) {
			p := filepath.Join(sdir, "state.bin")
			if err := os.WriteFile(p, f(must(os.ReadFile(p))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	resealSnap := func(b []byte) []byte { return reseal(b) }
	cases := []struct {
		name   string
		break_ func(t *testing.T, sdir string)
		delta  uint64
		kind   error
		msg    string
	}{
		{"raft CRC", edit(func(b []byte) []byte { b[40] ^= 1; return b }), 500, nil, "CRC mismatch"},
		{"our checksum", func(t *testing.T, sdir string) {
			// The last expiry's low bit (before the retired count and
			// the checksum): still a plausible value, so only the
			// checksum can tell.
			edit(func(b []byte) []byte { b[len(b)-4-8-1] ^= 1; return b })(t, sdir)
			fixRaftCRC(t, sdir)
		}, 500, ticket.ErrChecksum, "bad checksum"},
		{"unknown version", func(t *testing.T, sdir string) {
			edit(func(b []byte) []byte { b[9] = 7; return resealSnap(b) })(t, sdir)
			fixRaftCRC(t, sdir)
		}, 500, ticket.ErrVersion, "version 7"},
		{"Δ out of range", func(t *testing.T, sdir string) {
			edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[10:18], 60001); return resealSnap(b) })(t, sdir)
			fixRaftCRC(t, sdir)
		}, 500, ticket.ErrDeltaRange, "60001"},
		{"other Δ configured", func(t *testing.T, sdir string) {}, 400, ticket.ErrDeltaMismatch, "snapshot's Δ is 500"},
		{"meta unreadable", func(t *testing.T, sdir string) {
			os.WriteFile(filepath.Join(sdir, "meta.json"), []byte("{"), 0o600)
		}, 500, nil, "meta.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, opts := adminSetup(t, dir)
			clk := newManualClock()
			snapshotted(t, cfg, clk, opts)
			sdir := snapDir(t, cfg.Cluster.Raft.DataDir)
			c.break_(t, sdir)
			cfg.Clock.DeltaMs = c.delta
			_, err := tryStart(t, cfg, Deps{Wall: clk}, true, opts...)
			var de *DataError
			if !errors.As(err, &de) || !strings.HasPrefix(de.File, sdir) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want a DataError under %s with %q", err, sdir, c.msg)
			}
			if c.kind != nil && !errors.Is(err, c.kind) {
				t.Fatalf("got %v, want kind %v", err, c.kind)
			}
		})
	}
}

// SPEC §4-9: Δ is replicated state; a node configured with another Δ
// refuses to start on the data dir (here without a snapshot: the Init
// entry in the log is what refuses).
func TestDeltaMismatchFromLog(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	seeded(t, dir, testConfig(t, dir), Deps{Wall: clk})
	cfg := testConfig(t, dir)
	cfg.Clock.DeltaMs = 1000
	_, err := tryStart(t, cfg, Deps{Wall: clk}, true)
	if !errors.Is(err, ticket.ErrDeltaMismatch) || !strings.Contains(err.Error(), "configured with 1000 ms") {
		t.Fatalf("got %v", err)
	}
}

// The data dir belongs to one node ID.
func TestOtherNodeNameRefused(t *testing.T) {
	dir := t.TempDir()
	seeded(t, dir, testConfig(t, dir), Deps{})
	cfg := testConfig(t, dir)
	cfg.Cluster.Name = "node-2"
	_, err := tryStart(t, cfg, Deps{}, true)
	var ie *IdentityError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "node-1") {
		t.Fatalf("got %v", err)
	}
}

// Two nodes on one data dir: the second refuses (bolt's file lock) instead
// of waiting forever or sharing the log.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	startNode(t, testConfig(t, dir), Deps{})
	_, err := tryStart(t, testConfig(t, dir), Deps{}, true)
	var de *DataError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("got %v", err)
	}
}
