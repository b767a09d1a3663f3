package consensus

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/crc64"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// singleVoter opens a single voter on path (as single-node ticketd does),
// waits for its leadership and returns it with its FSM and what closes
// both it and the data dir.
func singleVoter(t *testing.T, path string, trailing uint64) (*Raft, *ticket.FSM, func()) {
	t.Helper()
	fsm := ticket.New(500)
	d, err := datadir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(Options{
		Dir: d, FSM: fsm, LocalID: "solo", RequireVoter: true, Logger: testLogger(t), TrailingLogs: trailing,
		Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leadership", 10*time.Second, func() bool { return r.Raft().State() == raft.Leader })
	return r, fsm, func() { must(t, r.Close()); must(t, d.Close()) }
}

func propose(t *testing.T, r *Raft, e ticket.Entry) {
	t.Helper()
	b, err := ticket.EncodeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Propose(context.Background(), b); err != nil || res.Code != ticket.CodeOK {
		t.Fatalf("propose %+v: %v %v", e, res.Code, err)
	}
}

func grantN(t *testing.T, r *Raft, prefix string, n int) {
	now := uint64(time.Now().UnixMilli())
	for i := range n {
		propose(t, r, ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: prefix + strconv.Itoa(i), Holder: "h", LeaseS: 250, ExpiryMs: now + 250_000 + 500})
	}
}

// snapshotDir builds a closed single-voter data dir whose newest snapshot
// covers grants "a0".."a4" and whose log holds "b0".."b2" after it; it
// returns the dir's path and the newest snapshot's directory.
func snapshotDir(t *testing.T, trailing uint64) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	r, _, closeAll := singleVoter(t, path, trailing)
	propose(t, r, ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	grantN(t, r, "a", 5)
	if err := r.Raft().Barrier(time.Second).Error(); err != nil { // Raft's index moves past the last command
		t.Fatal(err)
	}
	if err := r.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	grantN(t, r, "b", 3)
	closeAll()
	snaps, _ := filepath.Glob(filepath.Join(path, datadir.SnapshotsDir, "*"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v", snaps)
	}
	return path, snaps[0]
}

func readPair(t *testing.T, snap string) (meta, state []byte) {
	t.Helper()
	meta, err := os.ReadFile(filepath.Join(snap, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	state, err = os.ReadFile(filepath.Join(snap, "state.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return meta, state
}

// SPEC §4: a snapshot's payload carries, under its checksum, the position
// Raft's meta.json claims — the index and term of the last entry applied
// (a barrier here, past the last command), the committed configuration
// and its index — and the pair passes the start-up checks.
func TestSnapshotCarriesItsPosition(t *testing.T) {
	_, snap := snapshotDir(t, 10240)
	meta, state := readPair(t, snap)
	m, hdr, err := CheckSnapshotFiles(filepath.Base(snap), meta, state, ticket.New(500))
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.BigEndian.Uint16(state[8:10]); v != ticket.SnapshotVersion {
		t.Fatalf("state.bin is version %d", v)
	}
	p := hdr.Raft
	if p == nil || p.Index != m.Index || p.Term != m.Term || p.ConfigurationIndex != m.ConfigurationIndex || p.Index <= hdr.Index {
		t.Fatalf("payload %+v (commands to %d), meta %+v", p, hdr.Index, m)
	}
	if want := (ticket.Server{Suffrage: ticket.SuffrageVoter, ID: "solo", Address: "solo"}); len(p.Servers) != 1 || p.Servers[0] != want {
		t.Fatalf("servers %+v", p.Servers)
	}
	if p.TakenMs == 0 || time.Since(time.UnixMilli(int64(p.TakenMs))) > time.Minute {
		t.Fatalf("taken at %d", p.TakenMs)
	}
}

// rewriteOldFormat replaces a snapshot's state.bin with the same state in
// the format before version 3 (no position) and fixes meta.json's Size and
// CRC: the newest snapshot of a node upgraded from the previous release.
func rewriteOldFormat(t *testing.T, snap string) {
	t.Helper()
	meta, state := readPair(t, snap)
	s, err := ticket.ReadSnapshot(bytes.NewReader(state))
	if err != nil {
		t.Fatal(err)
	}
	s.Raft = nil
	var old bytes.Buffer
	if _, err := s.WriteTo(&old); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(meta, &m); err != nil {
		t.Fatal(err)
	}
	m["Size"] = old.Len()
	m["CRC"] = binary.BigEndian.AppendUint64(nil, crc64.Checksum(old.Bytes(), crc64.MakeTable(crc64.ECMA)))
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(snap, "state.bin"), old.Bytes(), 0o600))
	must(t, os.WriteFile(filepath.Join(snap, "meta.json"), out, 0o600))
}

// A node upgraded with a newest snapshot of the previous format (no
// position) still starts on it with every ticket, and its next snapshot is
// written in version 3. What its meta.json can still be checked against:
// itself, state.bin's size and CRC, the last command, and (single voter)
// the log — a Term or a server changed with everything that names it
// consistently is refused by the log; docs/data-dir.md names the limit in
// a cluster.
func TestOldFormatSnapshotStillRestores(t *testing.T) {
	path, snap := snapshotDir(t, 10240)
	rewriteOldFormat(t, snap)
	r, fsm, closeAll := singleVoter(t, path, 10240)
	waitFor(t, "the log after the snapshot replayed", 10*time.Second, func() bool { return fsm.Len() == 8 })
	grantN(t, r, "c", 1)
	if err := r.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	closeAll()
	newest := newestSnap(t, path)
	if _, state := readPair(t, newest); binary.BigEndian.Uint16(state[8:10]) != ticket.SnapshotVersion {
		t.Fatal("the snapshot after the upgrade is not in the new format")
	}

	for _, c := range []struct {
		name string
		edit func(t *testing.T, snap string) string // returns the new snapshot dir
		msg  string
	}{
		{"Term -1 with its ID and directory", func(t *testing.T, snap string) string { return renameMeta(t, snap, ^uint64(0), 0) }, "the log's entry there has term"},
		{"Term +1 with its ID and directory", func(t *testing.T, snap string) string { return renameMeta(t, snap, 1, 0) }, "before snapshot"},
		{"Index with its ID and directory", func(t *testing.T, snap string) string { return renameMeta(t, snap, 0, 9000) }, "before snapshot"},
		{"a server's ID", func(t *testing.T, snap string) string {
			editFile(t, filepath.Join(snap, "meta.json"), `"ID":"solo"`, `"ID":"sola"`)
			return snap
		}, "the log's configuration entry"},
		{"Index lowered below the last command, with its ID and directory", func(t *testing.T, snap string) string {
			return renameMeta(t, snap, 0, ^uint64(1)) // -2: the barrier's index is the last command's + 1
		}, "holds commands up to index"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, snap := snapshotDir(t, 10240)
			rewriteOldFormat(t, snap)
			c.edit(t, snap)
			_, err := Open(Options{
				Dir: openDir(t, path), FSM: ticket.New(500), LocalID: "solo", RequireVoter: true, Logger: testLogger(t),
				Bootstrap: &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "solo"}}},
			})
			if err == nil {
				t.Fatal("started")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), path) {
				t.Fatalf("refused with %v, want %q naming the dir", err, c.msg)
			}
		})
	}
}

func newestSnap(t *testing.T, path string) string {
	t.Helper()
	metas, err := raft.NewFileSnapshotStoreWithLogger(path, retainSnaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := metas.List()
	if err != nil || len(l) == 0 {
		t.Fatalf("no snapshot: %v", err)
	}
	return filepath.Join(path, datadir.SnapshotsDir, l[0].ID)
}

func editFile(t *testing.T, p, from, to string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(from)) {
		t.Fatalf("%s has no %s: %s", p, from, b)
	}
	must(t, os.WriteFile(p, bytes.Replace(b, []byte(from), []byte(to), 1), 0o600))
}

// renameMeta adds dTerm and dIndex to a snapshot's meta.json Term and
// Index, its ID to match, and renames its directory: a metadata
// consistent in itself.
func renameMeta(t *testing.T, snap string, dTerm, dIndex uint64) string {
	t.Helper()
	p := filepath.Join(snap, "meta.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	parts := strings.Split(m["ID"].(string), "-")
	term, _ := strconv.ParseUint(parts[0], 10, 64)
	index, _ := strconv.ParseUint(parts[1], 10, 64)
	term, index = term+dTerm, index+dIndex
	id := strconv.FormatUint(term, 10) + "-" + strconv.FormatUint(index, 10) + "-" + parts[2]
	m["ID"], m["Term"], m["Index"] = id, term, index
	out, err := json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(p, out, 0o600))
	to := filepath.Join(filepath.Dir(snap), id)
	must(t, os.Rename(snap, to))
	return to
}

// SPEC §4: a snapshot installed from the leader is checked the same way:
// the request's index, term and configuration against the position in the
// payload. The leader's meta.json changed on its disk after it started
// (raft's file store reads it again for every install) makes the
// follower refuse the install and stop with the field named; it installs
// nothing.
func TestInstalledSnapshotCheckedAgainstItsMetadata(t *testing.T) {
	for _, c := range []struct {
		name, re, field string
		change          func(string) string
	}{
		{"Index +9000", `"Index":(\d+)`, "Index", func(v string) string { return "9" + v }},
		{"Index -1", `"Index":(\d+)`, "Index", func(v string) string { n, _ := strconv.Atoi(v); return strconv.Itoa(n - 1) }},
		{"Term +1", `"Term":(\d+)`, "Term", func(v string) string { n, _ := strconv.Atoi(v); return strconv.Itoa(n + 1) }},
		{"ConfigurationIndex +1", `"ConfigurationIndex":(\d+)`, "ConfigurationIndex", func(v string) string { n, _ := strconv.Atoi(v); return strconv.Itoa(n + 1) }},
		{"a server's address", `"Address":"([^"]+)"`, "Configuration server 0", func(v string) string { return v + "0" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := raft.NewFileSnapshotStoreWithLogger(dir, retainSnaps, nil)
			must(t, err)
			l := leaderWithSnapshotIn(t, files, nil)
			metas, _ := filepath.Glob(filepath.Join(dir, datadir.SnapshotsDir, "*", "meta.json"))
			if len(metas) != 1 {
				t.Fatalf("snapshots %v", metas)
			}
			b, err := os.ReadFile(metas[0])
			must(t, err)
			loc := regexp.MustCompile(c.re).FindSubmatchIndex(b)
			if loc == nil {
				t.Fatalf("no %s in %s", c.re, b)
			}
			edited := append(append(append([]byte(nil), b[:loc[2]]...), c.change(string(b[loc[2]:loc[3]]))...), b[loc[3]:]...)
			must(t, os.WriteFile(metas[0], edited, 0o600))

			f := newMemRaft(t, "follower", 500, false)
			join(t, l, f)
			select {
			case <-f.fsm.Stopped():
			case <-time.After(10 * time.Second):
				t.Fatalf("the follower did not stop; it holds %d tickets", f.fsm.Len())
			}
			err = f.fsm.Fatal()
			t.Log(err)
			if !strings.Contains(err.Error(), "claims "+c.field) || f.fsm.Len() != 0 || f.fsm.Delta() != 0 {
				t.Fatalf("stopped with %v, holding %d tickets; want the %s named and nothing installed", err, f.fsm.Len(), c.field)
			}
		})
	}
}

// oldFormatFSM persists snapshots as the previous release did: no
// position (format version 1 or 2).
type oldFormatFSM struct{ raft.FSM }

func (o oldFormatFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := o.FSM.(*raftFSM).t.Snapshot()
	return oldFormatSnapshot{s}, err
}

type oldFormatSnapshot struct{ s *ticket.Snapshot }

func (o oldFormatSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := o.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (o oldFormatSnapshot) Release() { o.s.Release() }

// During a rolling upgrade a leader of the previous release sends
// snapshots without a position: a follower of this release installs them
// (all that can be checked is that no command in it is past the claimed
// index).
func TestOldFormatSnapshotInstalls(t *testing.T) {
	l := leaderWithSnapshotIn(t, raft.NewInmemSnapshotStore(), func(f raft.FSM) raft.FSM { return oldFormatFSM{f} })
	f := newMemRaft(t, "follower", 500, false)
	join(t, l, f)
	wantInstalled(t, l, f)
	if f.fsm.Fatal() != nil {
		t.Fatal(f.fsm.Fatal())
	}
}
