package ticket

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testPosition is a three-voter configuration at a Raft index past the
// FSM's last command (barriers and configuration entries count in Raft's
// index, not in the command index).
func testPosition(h *harness) *Position {
	return &Position{
		Index: h.idx + 3, Term: 7, TakenMs: 1_700_000_123_456, ConfigurationIndex: 2,
		Servers: []Server{
			{SuffrageVoter, "node-1", "127.0.0.1:7001"},
			{SuffrageNonvoter, "node-4", "127.0.0.1:7004"},
			{SuffrageVoter, "node-2", "[::1]:7002"},
			{SuffrageStaging, "node-3", "node-3.example:7003"},
		},
	}
}

func positioned(t *testing.T, h *harness, edit func(*Position)) ([]byte, *Snapshot) {
	t.Helper()
	s, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Raft = testPosition(h)
	if edit != nil {
		edit(s.Raft)
	}
	var b bytes.Buffer
	if _, err := s.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), s
}

// SPEC §4 ("snapshots carry a format version and a checksum"): version 4
// (as 3 before it) carries the Raft position under the checksum; it reads back field for
// field, re-encodes byte for byte, restores, and its header alone reads
// the same position without the tickets.
func TestSnapshotPositionRoundTrip(t *testing.T) {
	h := filled(t)
	b, s := positioned(t, h, nil)
	if v := uint16(b[8])<<8 | uint16(b[9]); v != 4 {
		t.Fatalf("written as version %d", v)
	}
	back, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if back.Raft == nil || back.Raft.TakenMs != s.Raft.TakenMs {
		t.Fatalf("position %+v", back.Raft)
	}
	if f, _, _ := back.Raft.Mismatch(s.Raft); f != "" {
		t.Fatalf("read back differs in %s", f)
	}
	var again bytes.Buffer
	if _, err := back.WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), b) {
		t.Fatalf("re-encoding differs (%v)", err)
	}
	hdr, v, err := ReadSnapshotHeader(bytes.NewReader(b[:len(b)/2+40])) // the head is enough
	if err != nil || v != 4 || hdr.Index != h.f.Index() || hdr.DeltaMs != testDelta {
		t.Fatalf("header %+v v%d %v", hdr, v, err)
	}
	if f, _, _ := hdr.Raft.Mismatch(s.Raft); f != "" {
		t.Fatalf("header position differs in %s", f)
	}
	f := New(testDelta)
	var seen *Position
	if err := f.RestoreChecked(bytes.NewReader(b), func(s *Snapshot) error { seen = s.Raft; return nil }); err != nil {
		t.Fatal(err)
	}
	want, _ := h.f.List("", 0)
	got, _ := f.List("", 0)
	if !slices.Equal(got, want) || f.Index() != h.f.Index() || seen == nil || seen.Index != s.Raft.Index {
		t.Fatalf("restored %d tickets at %d (position %+v)", len(got), f.Index(), seen)
	}
	// A version 3 snapshot may have no retired NodeId (version 2 may not).
	if len(back.Retired) != 0 {
		t.Fatalf("retired %v", back.Retired)
	}
}

// A position that Raft could not have written is refused by WriteTo
// (nothing written) and by ReadSnapshot (ErrFormat), each naming the rule.
func TestSnapshotPositionRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Position)
		msg  string
	}{
		{"term 0", func(p *Position) { p.Term = 0 }, "term 0"},
		{"index before the last command", func(p *Position) { p.Index = 2 }, "before the last applied command"},
		{"configuration index 0", func(p *Position) { p.ConfigurationIndex = 0 }, "configuration index 0"},
		{"configuration index after the index", func(p *Position) { p.ConfigurationIndex = p.Index + 1 }, "configuration index"},
		{"no server", func(p *Position) { p.Servers = nil }, "0 servers"},
		{"no voter", func(p *Position) { p.Servers[0].Suffrage, p.Servers[2].Suffrage = SuffrageNonvoter, SuffrageStaging }, "no voter"},
		{"unknown suffrage", func(p *Position) { p.Servers[1].Suffrage = 3 }, "unknown suffrage 3"},
		{"empty ID", func(p *Position) { p.Servers[1].ID = "" }, "ID of 0 bytes"},
		{"empty address", func(p *Position) { p.Servers[1].Address = "" }, "address of 0 bytes"},
		{"ID twice", func(p *Position) { p.Servers[2].ID = "node-1" }, `ID "node-1" twice`},
		{"address twice", func(p *Position) { p.Servers[2].Address = "127.0.0.1:7001" }, "twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := filled(t)
			s, _ := h.f.Snapshot()
			s.Raft = testPosition(h)
			c.edit(s.Raft)
			var out bytes.Buffer
			if _, err := s.WriteTo(&out); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) || out.Len() != 0 {
				t.Fatalf("WriteTo: %v (%d bytes), want ErrFormat with %q", err, out.Len(), c.msg)
			}
			// The same position forged into a valid snapshot's bytes.
			good, _ := positioned(t, h, nil)
			hdr := 8 + 2 + 8 + 8
			bad := append(append([]byte(nil), good[:hdr]...), s.Raft.append(nil)...)
			bad = append(bad, good[hdr+len(testPosition(h).append(nil)):]...)
			bad = resealSnap(bad)
			if _, err := ReadSnapshot(bytes.NewReader(bad)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("ReadSnapshot: %v, want ErrFormat with %q", err, c.msg)
			}
			if err := h.f.Restore(bytes.NewReader(bad)); err == nil || h.f.Fatal() == nil {
				t.Fatal("restored")
			}
		})
	}
}

// RestoreChecked's check refuses as any refused restore does: the state
// stays, the FSM stops. Stop stops it the same way from outside.
func TestRestoreCheckedRefusal(t *testing.T) {
	h := filled(t)
	b, _ := positioned(t, h, nil)
	f := New(testDelta)
	no := errors.New("metadata disagrees")
	err := f.RestoreChecked(bytes.NewReader(b), func(*Snapshot) error { return no })
	var re *RestoreError
	if !errors.Is(err, no) || !errors.As(err, &re) || f.Fatal() == nil || f.Len() != 0 || f.Delta() != 0 {
		t.Fatalf("err %v fatal %v len %d", err, f.Fatal(), f.Len())
	}
	g := New(testDelta)
	g.Stop(no)
	if !errors.Is(g.Fatal(), no) || g.Restore(bytes.NewReader(b)) == nil {
		t.Fatal("Stop did not stop the FSM")
	}
	select {
	case <-g.Stopped():
	default:
		t.Fatal("Stopped not closed")
	}
}

// Mismatch names the first differing field, TakenMs aside.
func TestPositionMismatch(t *testing.T) {
	h := filled(t)
	p := testPosition(h)
	for _, c := range []struct {
		edit  func(*Position)
		field string
	}{
		{func(q *Position) { q.TakenMs++ }, ""},
		{func(q *Position) { q.Index += 9000 }, "Index"},
		{func(q *Position) { q.Term-- }, "Term"},
		{func(q *Position) { q.ConfigurationIndex++ }, "ConfigurationIndex"},
		{func(q *Position) { q.Servers = q.Servers[:3] }, "Configuration"},
		{func(q *Position) { q.Servers[2].Address = "[::1]:7012" }, "Configuration server 2"},
		{func(q *Position) { q.Servers[1].Suffrage = SuffrageVoter }, "Configuration server 1"},
		{func(q *Position) { q.Servers[0].ID = "node-7" }, "Configuration server 0"},
	} {
		q := testPosition(h)
		q.Servers = slices.Clone(q.Servers)
		c.edit(q)
		if f, _, _ := p.Mismatch(q); f != c.field {
			t.Errorf("mismatch %q, want %q", f, c.field)
		}
	}
}

// testdata/snapshot-v3.golden was written by the release that introduced
// version 3 and is never regenerated: it restores to the state it was
// written from; the highest token, which version 3 does not carry, reads
// as the bound of its command index (epoch 0); written again it is
// version 4 and restores to the same state.
func TestSnapshotGoldenV3(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v3.golden")
	h := goldenFSM(t, true)
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if v := uint16(old[8])<<8 | uint16(old[9]); v != 3 {
		t.Fatalf("%s is version %d", path, v)
	}
	f := New(testDelta)
	if err := f.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	want, _ := h.f.List("", 0)
	got, _ := f.List("", 0)
	if !slices.Equal(got, want) || !slices.Equal(f.Retired(), h.f.Retired()) {
		t.Fatal("restored state differs")
	}
	if f.Epoch() != 0 || f.HighestToken() != h.f.Index() || f.HighestToken() < h.f.HighestToken() {
		t.Fatalf("epoch %d, highest token %d (exact %d, index %d)", f.Epoch(), f.HighestToken(), h.f.HighestToken(), h.f.Index())
	}
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Raft = testPosition(h)
	var now bytes.Buffer
	if _, err := s.WriteTo(&now); err != nil {
		t.Fatal(err)
	}
	if v := uint16(now.Bytes()[8])<<8 | uint16(now.Bytes()[9]); v != 4 {
		t.Fatalf("written again as version %d", v)
	}
	g := New(testDelta)
	if err := g.Restore(bytes.NewReader(now.Bytes())); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.List("", 0); !slices.Equal(again, want) || g.HighestToken() != f.HighestToken() {
		t.Fatal("version 4 written from the version 3 state restores to another state")
	}
}
