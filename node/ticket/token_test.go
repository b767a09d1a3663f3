package ticket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// SPEC §3.4 (backup and restore): after NextEpoch every token is above
// every token of the epochs before, whatever the Raft index — also above
// a token the old epoch issues at a far higher index after the backup.
func TestNextEpochTokens(t *testing.T) {
	h := newHarness(t)
	old := h.grant("a", "h", 30, t0)
	wantCode(t, "grant", old, CodeOK)
	if old.Ticket.Token != h.idx || h.f.HighestToken() != old.Ticket.Token {
		t.Fatalf("epoch 0 token %d at index %d, highest %d", old.Ticket.Token, h.idx, h.f.HighestToken())
	}
	if e, err := h.f.NextEpoch(); err != nil || e != 1 || h.f.Epoch() != 1 {
		t.Fatalf("NextEpoch: %d %v", e, err)
	}
	r := h.grant("b", "h", 30, t0+1)
	wantCode(t, "grant in epoch 1", r, CodeOK)
	if r.Ticket.Token != TokenFor(1, h.idx) || TokenEpoch(r.Ticket.Token) != 1 || TokenIndex(r.Ticket.Token) != h.idx {
		t.Fatalf("epoch 1 token %#x at index %d", r.Ticket.Token, h.idx)
	}
	// The old cluster, left running after the backup, can reach at most
	// MaxTokenIndex in epoch 0.
	if r.Ticket.Token <= TokenFor(0, MaxTokenIndex) || h.f.HighestToken() != r.Ticket.Token {
		t.Fatalf("epoch 1 token %d not above every epoch 0 token", r.Ticket.Token)
	}
	// The old ticket keeps its token: its holder renews and releases it.
	wantCode(t, "renew old", h.renew("a", "h", old.Ticket.Token, 30, t0+2), CodeOK)
	wantCode(t, "release old", h.release("a", "h", old.Ticket.Token, t0+3), CodeOK)
}

// The end of an epoch's room: a Grant whose entry lands above
// MaxTokenIndex is refused (its token would reach into the next epoch);
// Renew and Release go on. The last epoch has no next one.
func TestTokenSpaceEnds(t *testing.T) {
	h := newHarness(t)
	g := h.grant("a", "h", 30, t0)
	h.idx = MaxTokenIndex - 1
	last := h.grant("b", "h", 30, t0)
	wantCode(t, "grant at the last index", last, CodeOK)
	if last.Ticket.Token != MaxTokenIndex {
		t.Fatalf("token %d", last.Ticket.Token)
	}
	wantCode(t, "grant past it", h.grant("c", "h", 30, t0), CodeTokenSpace)
	if _, ok := h.f.Get("c"); ok || h.f.HighestToken() != MaxTokenIndex {
		t.Fatal("a refused grant changed the state")
	}
	wantCode(t, "renew", h.renew("a", "h", g.Ticket.Token, 30, t0+1), CodeOK)
	wantCode(t, "release", h.release("b", "h", last.Ticket.Token, t0+1), CodeOK)

	f := New(testDelta)
	f.epoch = MaxTokenEpoch
	if _, err := f.NextEpoch(); err == nil || !strings.Contains(err.Error(), "no new epoch") {
		t.Fatalf("NextEpoch after the last: %v", err)
	}
}

// goldenV4 is goldenFSM with two tickets revoked, then a new token epoch
// and grants in it.
func goldenV4(t *testing.T) *harness {
	h := goldenFSM(t, true)
	for _, name := range []string{"abc", "job:a"} {
		cur, _ := h.f.Get(name)
		wantCode(t, "revoke "+name, h.revoke(name, cur.Token, t0+100), CodeOK)
	}
	if _, err := h.f.NextEpoch(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"epoch1-a", "epoch1-b"} {
		wantCode(t, "grant "+name, h.grant(name, "new", 60, t0+200), CodeOK)
	}
	return h
}

// testdata/snapshot-v4.golden was written by the release that introduced
// version 4 (TCKCLK_WRITE_GOLDEN=1 shows how) and is never regenerated:
// it restores with its revocations, token epoch and highest token, and
// today's encoder writes the same bytes for its state.
func TestSnapshotGoldenV4(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v4.golden")
	h := goldenV4(t)
	now, _ := positioned(t, h, nil)
	if os.Getenv("TCKCLK_WRITE_GOLDEN") == "1" {
		if err := os.WriteFile(path, now, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := New(testDelta)
	if err := f.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	want, _ := h.f.List("", 0)
	got, _ := f.List("", 0)
	if !slices.Equal(got, want) || !slices.Equal(f.Retired(), h.f.Retired()) || f.Epoch() != 1 || f.HighestToken() != h.f.HighestToken() {
		t.Fatalf("restored state differs (epoch %d, highest token %d)", f.Epoch(), f.HighestToken())
	}
	revoked := 0
	for _, tk := range got {
		if tk.Revoked {
			revoked++
		}
	}
	if revoked != 2 {
		t.Fatalf("%d revoked tickets restored, want 2", revoked)
	}
	if !bytes.Equal(now, old) {
		t.Fatal("today's encoder writes other bytes than the golden version 4 file")
	}
}

// rawV4 encodes s in version 4 without any check (a second, naive
// encoder, for states WriteTo refuses to write).
func rawV4(s *Snapshot, flags func(i int) byte) []byte {
	b := append([]byte(SnapshotMagic), 0, 4)
	b = binary.BigEndian.AppendUint64(b, s.DeltaMs)
	b = binary.BigEndian.AppendUint64(b, s.Index)
	b = s.Raft.append(b)
	b = binary.BigEndian.AppendUint64(b, s.Epoch)
	b = binary.BigEndian.AppendUint64(b, s.MaxToken)
	b = binary.BigEndian.AppendUint64(b, uint64(len(s.Tickets)))
	for i, tk := range s.Tickets {
		b = appendStr(b, tk.Name)
		b = appendStr(b, tk.Holder)
		b = binary.BigEndian.AppendUint64(b, tk.Token)
		b = append(b, tk.LeaseS)
		b = binary.BigEndian.AppendUint64(b, tk.ValidBeforeMs)
		b = binary.BigEndian.AppendUint64(b, tk.ExpiryMs)
		b = append(b, flags(i))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(s.Retired)))
	for _, id := range s.Retired {
		b = appendStr(b, id)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// SPEC §4 ("an unknown version or a bad checksum stops the node"):
// version 4's token fields and flags are checked like every other field.
func TestRestoreRefusesV4(t *testing.T) {
	base := func(t *testing.T) *Snapshot {
		h := filled(t)
		frozen, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		s := thaw(frozen) // in name order
		s.Raft = testPosition(h)
		return s
	}
	none := func(int) byte { return 0 }
	cases := []struct {
		name  string
		edit  func(*Snapshot)
		flags func(int) byte
		msg   string
	}{
		{"same as WriteTo", func(*Snapshot) {}, none, ""},
		{"revoked flag", func(*Snapshot) {}, func(i int) byte { return byte(i % 2) }, ""},
		{"unknown flag", func(*Snapshot) {}, func(i int) byte { return 2 }, "unknown flags"},
		{"epoch past the last", func(s *Snapshot) { s.Epoch = MaxTokenEpoch + 1 }, none, "token epoch"},
		{"highest token past the index", func(s *Snapshot) { s.MaxToken = s.Index + 1 }, none, "highest token"},
		{"highest token in a later epoch", func(s *Snapshot) { s.MaxToken = TokenFor(1, 1) }, none, "highest token"},
		{"ticket above the highest token", func(s *Snapshot) { s.MaxToken = s.Tickets[0].Token - 1 }, none, "highest token"},
		{"old epoch's tokens below a new one", func(s *Snapshot) { s.Epoch = 2; s.MaxToken = TokenFor(2, s.Index) }, none, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base(t)
			c.edit(s)
			b := rawV4(s, c.flags)
			f := New(testDelta)
			err := f.Restore(bytes.NewReader(b))
			if c.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				back, _ := f.Snapshot()
				back.Raft = s.Raft
				if _, err := back.WriteTo(&out); err != nil || !bytes.Equal(out.Bytes(), b) {
					t.Fatalf("re-encoding differs (%v)", err)
				}
				return
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want a format error with %q", err, c.msg)
			}
			if f.Len() != 0 || f.Fatal() == nil {
				t.Fatal("a refused restore changed the state or did not stop the FSM")
			}
		})
	}
}
