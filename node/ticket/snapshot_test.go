package ticket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
)

func filled(t *testing.T) *harness {
	h := newHarness(t)
	for i, name := range []string{"b", "a", "c.d", "Z:1"} {
		wantCode(t, "grant", h.grant(name, "h"+name, uint8(10+i), t0+uint64(i)), CodeOK)
	}
	cur, _ := h.f.Get("a")
	wantCode(t, "renew", h.renew("a", "ha", cur.Token, 200, t0+5000), CodeOK)
	return h
}

func snapBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := s.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// SPEC §4-7: snapshot and restore keep every expiry verbatim and never add Δ
// again, however often they run.
func TestSnapshotRestoreKeepsExpiries(t *testing.T) {
	h := filled(t)
	before, _ := h.f.List("", 0)
	b := snapBytes(t, h.f)
	f := New(testDelta)
	for range 3 {
		if err := f.Restore(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		b = snapBytes(t, f)
	}
	after, _ := f.List("", 0)
	if len(after) != len(before) {
		t.Fatalf("%d tickets after, %d before", len(after), len(before))
	}
	for i := range before {
		if after[i] != before[i] {
			t.Fatalf("ticket changed:\n%+v\n%+v", before[i], after[i])
		}
	}
	if f.Delta() != testDelta || f.Index() != h.f.Index() {
		t.Fatalf("Δ %d index %d", f.Delta(), f.Index())
	}
	if !bytes.Equal(b, snapBytes(t, h.f)) {
		t.Fatal("snapshot bytes differ after restores")
	}
	// The restored FSM keeps deciding the same way (tokens keep rising).
	h.f = f
	r := h.grant("new", "x", 1, t0)
	if r.Code != CodeOK || r.Ticket.Token <= before[len(before)-1].Token {
		t.Fatalf("grant after restore: %+v", r)
	}
}

// resealSnap recomputes a snapshot's trailing checksum after an edit.
func resealSnap(b []byte) []byte {
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	return b
}

// SPEC §4-8, §3.2: a snapshot with Δ out of range or another Δ, an unknown
// version, a bad checksum or a malformed body is refused; the state stays
// as it was and the FSM stops.
func TestRestoreRefuses(t *testing.T) {
	good := snapBytes(t, filled(t).f)
	edit := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	setDelta := func(d uint64) []byte {
		return edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[10:18], d); return resealSnap(b) })
	}
	cases := []struct {
		name string
		in   []byte
		kind error
		msg  string
	}{
		{"Δ 0", setDelta(0), ErrDeltaRange, "outside 2..=60000"},
		{"Δ 1", setDelta(1), ErrDeltaRange, "outside 2..=60000"},
		{"Δ 60001", setDelta(60001), ErrDeltaRange, "outside 2..=60000"},
		{"other Δ", setDelta(400), ErrDeltaMismatch, "snapshot's Δ is 400"},
		{"version 5", edit(func(b []byte) []byte { b[9] = 5; return resealSnap(b) }), ErrVersion, "version 5"},
		{"version 0", edit(func(b []byte) []byte { b[9] = 0; return resealSnap(b) }), ErrVersion, "version 0"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return resealSnap(b) }), ErrFormat, "magic"},
		{"bad checksum", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrChecksum, "CRC-32C"},
		{"flipped expiry bit", edit(func(b []byte) []byte { b[len(b)-6] ^= 1; return b }), ErrChecksum, "CRC-32C"},
		{"truncated", good[:len(good)-9], ErrFormat, "truncated"},
		{"empty", nil, ErrFormat, "truncated"},
		{"trailing byte", append(append([]byte(nil), good...), 0), ErrFormat, "follow the checksum"},
		{"count too big", edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[26:34], 1<<60); return resealSnap(b) }), ErrFormat, "truncated"},
		{"count too small", edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[26:34], 3); return resealSnap(b) }), ErrChecksum, "CRC-32C"},
		{"expiry without Δ", craft(t, func(s *Snapshot) { s.Tickets[0].ExpiryMs = s.Tickets[0].ValidBeforeMs }), ErrFormat, "earlier than valid_before"},
		{"unsorted", craft(t, func(s *Snapshot) { s.Tickets[0].Name = "zz" }), ErrFormat, "strictly increasing"},
		{"token beyond index", craft(t, func(s *Snapshot) { s.Tickets[0].Token = s.Index + 1 }), ErrFormat, "token"},
		{"bad holder", craft(t, func(s *Snapshot) { s.Tickets[0].Holder = "a\x1fb" }), ErrFormat, "holder"},
		{"lease 0", craft(t, func(s *Snapshot) { s.Tickets[0].LeaseS = 0 }), ErrFormat, "lease_s 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := filled(t)
			before := snapBytes(t, h.f)
			err := h.f.Restore(bytes.NewReader(c.in))
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v with %q", err, c.kind, c.msg)
			}
			var re *RestoreError
			if !errors.As(err, &re) {
				t.Fatalf("not a *RestoreError: %T", err)
			}
			if h.f.Fatal() == nil {
				t.Fatal("refused restore did not stop the FSM")
			}
			if h.f.Delta() != testDelta || h.f.Len() != 4 {
				t.Fatal("refused restore changed the state")
			}
			h.f.fatal = nil // look at the state the refusal left behind
			if !bytes.Equal(before, snapBytes(t, h.f)) {
				t.Fatal("refused restore changed the state")
			}
		})
	}
}

// craft writes a snapshot built from a valid one after an edit that
// WriteTo's sorting would otherwise hide.
func craft(t *testing.T, edit func(*Snapshot)) []byte {
	frozen, err := filled(t).f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s := thaw(frozen)
	var b bytes.Buffer
	s.WriteTo(&b) // sorts
	edit(s)
	var out bytes.Buffer
	cw := s.Tickets
	s.Tickets = nil
	s.WriteTo(&out)
	hdr := out.Bytes()[:len(out.Bytes())-4]
	body := append([]byte(nil), hdr...)
	binary.BigEndian.PutUint64(body[26:34], uint64(len(cw)))
	for _, tk := range cw {
		body = appendStr(body, tk.Name)
		body = appendStr(body, tk.Holder)
		body = binary.BigEndian.AppendUint64(body, tk.Token)
		body = append(body, tk.LeaseS)
		body = binary.BigEndian.AppendUint64(body, tk.ValidBeforeMs)
		body = binary.BigEndian.AppendUint64(body, tk.ExpiryMs)
	}
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

func TestSnapshotBeforeInitRefused(t *testing.T) {
	if _, err := New(testDelta).Snapshot(); err == nil {
		t.Fatal("snapshot without Δ accepted")
	}
}

// gateWriter holds its first Write until open is closed.
type gateWriter struct {
	w       io.Writer
	started chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.open
	})
	return g.w.Write(p)
}

// Raft writes a snapshot (Persist) beside the FSM goroutine, which goes on
// applying: what it writes is the state when it was taken, whatever the
// entries applied meanwhile change (renewed, released, revoked, granted
// again, new names), and the race detector sees no write to what it reads.
// Released, the FSM changes its tickets in place again.
func TestSnapshotWrittenWhileApplying(t *testing.T) {
	h := newHarness(t)
	const n = 20000 // its encoding is many times the writer's 64 KiB buffer: most of it is encoded after the gate
	tokens := make([]uint64, n)
	for i := range n {
		tokens[i] = h.grant(fmt.Sprintf("t-%05d", i), "h", 30, t0).Ticket.Token
	}
	first, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if _, err := first.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	first.Release()

	s, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	gw := &gateWriter{w: &got, started: make(chan struct{}), open: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.WriteTo(gw)
		done <- err
	}()
	<-gw.started // the writer is inside WriteTo, holding the clone, its first 64 KiB encoded
	change := func(from, to int, now uint64) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("t-%05d", i)
			switch i % 4 {
			case 0:
				wantCode(t, "renew", h.renew(name, "h", tokens[i], 100, now), CodeOK)
			case 1:
				wantCode(t, "release", h.release(name, "h", tokens[i], now), CodeOK)
				tokens[i] = h.grant(name, "h2", 10, now).Ticket.Token
			case 2:
				h.idx++
				b, _ := EncodeEntry(&Entry{Op: OpRevoke, NowMs: now, Name: name})
				wantCode(t, "revoke", h.f.Apply(h.idx, b), CodeOK)
			case 3:
				wantCode(t, "grant", h.grant(fmt.Sprintf("u-%05d", i), "h", 30, now), CodeOK)
			}
		}
	}
	change(0, n/2, t0+1000)
	close(gw.open) // the rest while the snapshot is being written
	change(n/2, n, t0+2000)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("a snapshot written while entries applied holds other bytes than the state when it was taken")
	}
	s.Release()
	if _, err := s.WriteTo(io.Discard); !errors.Is(err, ErrReleased) {
		t.Fatalf("write after Release: %v, want ErrReleased", err)
	}
	for i := 0; i < n; i += 4 { // in place now
		wantCode(t, "renew", h.renew(fmt.Sprintf("t-%05d", i), "h", tokens[i], 200, t0+3000), CodeOK)
	}
	last, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	last.Raft = &Position{Index: h.idx, Term: 1, ConfigurationIndex: 1, Servers: []Server{{ID: "n1", Address: "a1"}}}
	var b bytes.Buffer
	if _, err := last.WriteTo(&b); err != nil { // version 4: revoked tickets
		t.Fatal(err)
	}
	back, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := h.f.List("", 0); !slices.Equal(back.Tickets, all) || len(all) != n+n/4 || all[0].LeaseS != 200 {
		t.Fatalf("a snapshot after the changes holds %d tickets, the FSM %d (want %d, the first renewed)", len(back.Tickets), len(all), n+n/4)
	}
}
