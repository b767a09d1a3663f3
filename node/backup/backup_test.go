package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

const t0 = uint64(1_800_000_000_000)

// fixture is a fixed state: tickets granted in epoch 0 and, after a
// NextEpoch, in epoch 1; one revoked; a retired NodeId; taken under a
// configuration of three voters and a non-voter.
func fixture(t testing.TB) *ticket.Snapshot {
	t.Helper()
	f := ticket.New(500)
	idx := uint64(0)
	apply := func(e ticket.Entry) {
		b, err := ticket.EncodeEntry(&e)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		if r := f.Apply(idx, b); r.Code != ticket.CodeOK {
			t.Fatalf("entry %+v: %v", e, r.Code)
		}
	}
	grant := func(name, holder string, lease uint8, now uint64) {
		exp, _ := ticket.ExpiryFor(now, lease, 500)
		apply(ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now - 1, Name: name, Holder: holder, LeaseS: lease, ExpiryMs: exp})
	}
	apply(ticket.Entry{Op: ticket.OpInit, NowMs: t0, DeltaMs: 500})
	grant("alpha", "worker-1", 30, t0+1)
	grant("beta", "worker-2", 250, t0+2)
	apply(ticket.Entry{Op: ticket.OpRetire, NowMs: t0 + 3, NodeID: "node-0"})
	if _, err := f.NextEpoch(); err != nil {
		t.Fatal(err)
	}
	grant("gamma", "worker-1", 10, t0+4)
	g, _ := f.Get("beta")
	apply(ticket.Entry{Op: ticket.OpRevoke, NowMs: t0 + 5, Name: "beta", Token: g.Token})
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Raft = &ticket.Position{Index: idx + 3, Term: 4, TakenMs: t0 + 6, ConfigurationIndex: 2, Servers: []ticket.Server{
		{Suffrage: ticket.SuffrageVoter, ID: "node-1", Address: "10.0.0.1:7947"},
		{Suffrage: ticket.SuffrageVoter, ID: "node-2", Address: "10.0.0.2:7947"},
		{Suffrage: ticket.SuffrageNonvoter, ID: "node-4", Address: "10.0.0.4:7947"},
		{Suffrage: ticket.SuffrageVoter, ID: "node-3", Address: "10.0.0.3:7947"},
	}}
	return s
}

func encode(t testing.TB, s *ticket.Snapshot) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := Encode(&b, "node-2", s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func read(b []byte) (*Backup, error) { return Read(bytes.NewReader(b), int64(len(b))) }

// The backup format (SPEC §3.4) is pinned by testdata/backup-v1.golden:
// today's encoder writes exactly its bytes for the fixture, and the golden
// file reads back as the fixture — header, every ticket with its token,
// absolute expiry and revoked flag, the retired NodeId, the Raft position,
// the token epoch and highest token. TCKCLK_WRITE_GOLDEN=1 rewrites it
// (only for a new format version, with a new file).
func TestBackupGoldenFile(t *testing.T) {
	path := filepath.Join("testdata", "backup-v1.golden")
	s := fixture(t)
	now := encode(t, s)
	if os.Getenv("TCKCLK_WRITE_GOLDEN") == "1" {
		if err := os.WriteFile(path, now, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now, golden) {
		t.Fatalf("the encoder no longer writes %s (%d bytes now, %d golden): a format change needs a new version", path, len(now), len(golden))
	}
	if string(golden[:8]) != wire.BackupMagic || binary.BigEndian.Uint16(golden[8:10]) != 1 {
		t.Fatalf("%s starts %q", path, golden[:10])
	}
	b, err := read(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.BackupHeader{Version: 1, TakenUnixMs: t0 + 6, NodeID: "node-2", Voters: []string{"node-1", "node-2", "node-3"}, DeltaMs: 500,
		Index: s.Raft.Index, Term: 4, Epoch: 1, HighestToken: ticket.TokenFor(1, 5), Tickets: 3, StateBytes: b.Header.StateBytes}
	if !headerEqual(b.Header, want) {
		t.Fatalf("header %+v, want %+v", b.Header, want)
	}
	if b.SHA256 != sha256.Sum256(golden) {
		t.Fatalf("SHA256 %x is not the file's", b.SHA256)
	}
	if !slices.Equal(b.Retired, []string{"node-0"}) || b.Position.Index != s.Raft.Index || len(b.Position.Servers) != 4 {
		t.Fatalf("retired %v, position %+v", b.Retired, b.Position)
	}
	got, _ := b.State.List("", 0)
	var wantT []ticket.Ticket
	s.Each(func(t *ticket.Ticket) bool { wantT = append(wantT, *t); return true })
	slices.SortFunc(wantT, func(a, b ticket.Ticket) int { return strings.Compare(a.Name, b.Name) })
	if !slices.Equal(got, wantT) {
		t.Fatalf("tickets %+v, want %+v", got, wantT)
	}
	if beta, _ := b.State.Get("beta"); !beta.Revoked || ticket.TokenEpoch(beta.Token) != 0 {
		t.Fatalf("beta %+v: want revoked, granted in epoch 0", beta)
	}
	if gamma, _ := b.State.Get("gamma"); gamma.Token != ticket.TokenFor(1, 5) || gamma.ExpiryMs != t0+4+10_000+500 {
		t.Fatalf("gamma %+v: want token epoch 1 index 5, absolute expiry t0+4+10.5 s", gamma)
	}
	if b.State.Epoch() != 1 || b.State.HighestToken() != ticket.TokenFor(1, 5) {
		t.Fatalf("epoch %d highest %d", b.State.Epoch(), b.State.HighestToken())
	}
}

func headerEqual(a, b wire.BackupHeader) bool {
	return slices.Equal(a.Voters, b.Voters) && a.Version == b.Version && a.TakenUnixMs == b.TakenUnixMs && a.NodeID == b.NodeID &&
		a.DeltaMs == b.DeltaMs && a.Index == b.Index && a.Term == b.Term && a.Epoch == b.Epoch &&
		a.HighestToken == b.HighestToken && a.Tickets == b.Tickets && a.StateBytes == b.StateBytes
}

// SPEC §3.4: a truncated, bit-flipped, foreign or future-format backup is
// refused, each with its kind; so is one whose header and state disagree
// although its SHA-256 matches (a writer's bug), and one whose state has
// no Raft position.
func TestBackupRefusals(t *testing.T) {
	s := fixture(t)
	good := encode(t, s)
	if _, err := read(good); err != nil {
		t.Fatal(err)
	}
	for n := range len(good) {
		_, err := read(good[:n])
		want := wire.ErrBackupTruncated
		if n < 8 {
			want = wire.ErrBackupForeign
		}
		if !errors.Is(err, want) {
			t.Fatalf("the first %d of %d bytes: %v, want %v", n, len(good), err, want)
		}
	}
	for i := range len(good) {
		for bit := range 8 {
			b := slices.Clone(good)
			b[i] ^= 1 << bit
			if _, err := read(b); err == nil {
				t.Fatalf("bit %d of byte %d flipped: accepted", bit, i)
			}
		}
	}
	if _, err := read(append(slices.Clone(good), 0)); !errors.Is(err, wire.ErrBackupFormat) || !strings.Contains(err.Error(), "follow the SHA-256") {
		t.Fatalf("a byte after the SHA-256: %v", err)
	}
	var raw bytes.Buffer
	if _, err := s.WriteTo(&raw); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"a ticket snapshot": raw.Bytes(), "text": []byte("node-1 tickets: alpha beta gamma\n"), "empty": nil} {
		if _, err := read(b); !errors.Is(err, wire.ErrBackupForeign) {
			t.Fatalf("%s: %v, want foreign", name, err)
		}
	}
	future := slices.Clone(good)
	binary.BigEndian.PutUint16(future[8:], wire.BackupVersion+1)
	resum(future)
	if _, err := read(future); !errors.Is(err, wire.ErrBackupVersion) || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("a future format: %v", err)
	}

	// Header and state disagree under a matching SHA-256.
	n, _ := countTickets(raw.Bytes())
	h, err := Header("node-2", s, n, uint64(raw.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for field, change := range map[string]func(h *wire.BackupHeader){
		"tickets":       func(h *wire.BackupHeader) { h.Tickets++ },
		"index":         func(h *wire.BackupHeader) { h.Index++ },
		"term":          func(h *wire.BackupHeader) { h.Term-- },
		"token_epoch":   func(h *wire.BackupHeader) { h.Epoch = 0 },
		"highest_token": func(h *wire.BackupHeader) { h.HighestToken-- },
		"taken_unix_ms": func(h *wire.BackupHeader) { h.TakenUnixMs++ },
		"voters":        func(h *wire.BackupHeader) { h.Voters = h.Voters[:2] },
		"node-9":        func(h *wire.BackupHeader) { h.Voters = []string{"node-1", "node-9", "node-3"} },
		"Δ":             func(h *wire.BackupHeader) { h.DeltaMs = 600 },
	} {
		bad := *h
		bad.Voters = slices.Clone(h.Voters)
		change(&bad)
		var b bytes.Buffer
		if _, err := wire.WriteBackup(&b, &bad, bytes.NewReader(raw.Bytes())); err != nil {
			t.Fatal(err)
		}
		if _, err := read(b.Bytes()); err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("header %s changed: %v", field, err)
		}
	}

	// A state without a Raft position (ticket snapshot version 1 or 2).
	empty := ticket.New(500)
	init, _ := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, NowMs: t0, DeltaMs: 500})
	empty.Apply(1, init)
	old, err := empty.Snapshot() // no Raft position: version 1
	if err != nil {
		t.Fatal(err)
	}
	var v1 bytes.Buffer
	if _, err := old.WriteTo(&v1); err != nil {
		t.Fatal(err)
	}
	oh := *h
	oh.StateBytes, oh.Tickets, oh.Epoch = uint64(v1.Len()), 0, 0
	var b bytes.Buffer
	if _, err := wire.WriteBackup(&b, &oh, &v1); err != nil {
		t.Fatal(err)
	}
	if _, err := read(b.Bytes()); err == nil || !strings.Contains(err.Error(), "no Raft position") {
		t.Fatalf("a state without its position: %v", err)
	}
}

// resum rewrites the SHA-256 at the end of b after a change.
func resum(b []byte) {
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	copy(b[len(b)-sha256.Size:], sum[:])
}

func countTickets(state []byte) (uint64, error) {
	_, n, err := ticket.ScanSnapshot(bytes.NewReader(state))
	return n, err
}

// ReadFile names the file in every refusal.
func TestReadFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	good := encode(t, fixture(t))
	for name, b := range map[string][]byte{"ok.snap": good, "cut.snap": good[:len(good)/2]} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "ok.snap")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cut.snap", "missing.snap", "."} {
		p := filepath.Join(dir, name)
		if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: %v, want an error naming it", p, err)
		}
	}
}
