package ticket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Edge cases found by mutation testing (docs/mutants.md): each test names
// the SPEC rule whose boundary a surviving mutant showed was unguarded.

// SPEC §4 (rounding): server-side expiry = now + lease_s×1000 + Δ, exact up
// to 2^64−1 itself; only a sum beyond that is refused.
func TestExpiryForTop(t *testing.T) {
	add := uint64(250)*1000 + 60000
	if got, ok := ExpiryFor(math.MaxUint64-add, 250, 60000); !ok || got != math.MaxUint64 {
		t.Fatalf("ExpiryFor(max-add) = %d %v, want 2^64-1 true", got, ok)
	}
	if _, ok := ExpiryFor(math.MaxUint64-add+1, 250, 60000); ok {
		t.Fatal("ExpiryFor one past the top did not refuse")
	}
}

// SPEC §3.2, §4-9: the Init entry's Δ is in 2..=60000, both ends included.
func TestInitDeltaRange(t *testing.T) {
	for _, d := range []uint64{2, 3, 59999, 60000} {
		b, err := EncodeEntry(&Entry{Op: OpInit, DeltaMs: d})
		if err != nil {
			t.Fatalf("Δ %d refused: %v", d, err)
		}
		if e, err := DecodeEntry(b); err != nil || e.DeltaMs != d {
			t.Fatalf("Δ %d: decoded %+v %v", d, e, err)
		}
	}
	for _, d := range []uint64{0, 1, 60001} {
		if _, err := EncodeEntry(&Entry{Op: OpInit, DeltaMs: d}); err == nil {
			t.Fatalf("Δ %d accepted", d)
		}
		body := append([]byte{EntryVersion, byte(OpInit)}, make([]byte, 16)...) // version, op, now, Δ
		binary.BigEndian.PutUint64(body[10:], d)
		if _, err := DecodeEntry(sealed(body)); !errors.Is(err, ErrFormat) {
			t.Fatalf("decoding Init Δ %d: %v, want ErrFormat", d, err)
		}
	}
}

// sealed appends a CRC-32C to body.
func sealed(body []byte) []byte {
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

// SPEC §4-8: decoding checks length, then version, then checksum, then the
// body, and the first failing one names the kind: one byte of another
// version is ErrVersion; the 14-byte minimum (header and checksum, no
// body) is read far enough to check its checksum.
func TestDecodeEntryCheckOrderAtMinimum(t *testing.T) {
	if _, err := DecodeEntry([]byte{EntryVersion + 1}); !errors.Is(err, ErrVersion) {
		t.Fatalf("one byte of version %d: %v, want ErrVersion", EntryVersion+1, err)
	}
	if _, err := DecodeEntry([]byte{EntryVersion}); !errors.Is(err, ErrFormat) {
		t.Fatalf("one byte of version %d: %v, want ErrFormat", EntryVersion, err)
	}
	min := sealed(append([]byte{EntryVersion, byte(OpExpire)}, make([]byte, 8)...))
	if len(min) != entryHeader+entryTrailer {
		t.Fatalf("minimum is %d bytes", len(min))
	}
	if _, err := DecodeEntry(min); !errors.Is(err, ErrFormat) {
		t.Fatalf("minimum with a good checksum: %v, want ErrFormat (truncated body)", err)
	}
	min[len(min)-1] ^= 1
	if _, err := DecodeEntry(min); !errors.Is(err, ErrChecksum) {
		t.Fatalf("minimum with a bad checksum: %v, want ErrChecksum", err)
	}
	if _, err := DecodeEntry(min[:len(min)-1]); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "13 bytes is shorter than the 14-byte minimum") {
		t.Fatalf("one byte short of the minimum: %v, want ErrFormat saying 13 of 14 bytes", err)
	}
}

// SPEC §4.1 (GET /v1/tickets?prefix=p, truncated): List returns at most
// limit tickets and says "more" only when more matched.
func TestListLimit(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		wantCode(t, "grant", h.grant(fmt.Sprintf("job-%d", i), "h", 30, t0), CodeOK)
	}
	for _, c := range []struct {
		limit int
		n     int
		more  bool
	}{{0, 5, false}, {-1, 5, false}, {1, 1, true}, {4, 4, true}, {5, 5, false}, {6, 5, false}, {100, 5, false}} {
		got, more := h.f.List("job-", c.limit)
		if len(got) != c.n || more != c.more {
			t.Errorf("List(limit %d) = %d tickets, more %v; want %d, %v", c.limit, len(got), more, c.n, c.more)
		}
		for i, tk := range got {
			if want := fmt.Sprintf("job-%d", i); tk.Name != want {
				t.Errorf("List(limit %d)[%d] = %s, want %s (sorted by name)", c.limit, i, tk.Name, want)
			}
		}
	}
}

// SPEC §4 (names, holders): the longest name with the shortest holder, and
// the reverse, encode and decode (the encoder sizes its buffer from both).
func TestEncodeLongestNameOrHolder(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	for _, c := range []struct{ name, holder string }{{long, "h"}, {"n", strings.Repeat("h", MaxHolderLen)}} {
		for _, e := range []Entry{
			{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: c.name, Holder: c.holder, LeaseS: 1, ExpiryMs: t0 + 1000 + testDelta},
			{Op: OpRelease, NowMs: t0, Name: c.name, Holder: c.holder, Token: 1},
		} {
			b, err := EncodeEntry(&e)
			if err != nil {
				t.Fatalf("%s %d/%d: %v", e.Op, len(c.name), len(c.holder), err)
			}
			if got, err := DecodeEntry(b); err != nil || !reflect.DeepEqual(got, e) {
				t.Fatalf("%s %d/%d: decoded %+v %v", e.Op, len(c.name), len(c.holder), got, err)
			}
		}
	}
}

// SPEC §4-8: snapshot restore validates Δ ∈ 2..=60000, both ends included.
func TestSnapshotDeltaRange(t *testing.T) {
	for _, d := range []uint64{2, 60000} {
		f := New(d)
		b, _ := EncodeEntry(&Entry{Op: OpInit, DeltaMs: d})
		if r := f.Apply(1, b); r.Code != CodeOK {
			t.Fatalf("init Δ %d: %v %v", d, r.Code, r.Err)
		}
		f2 := New(d)
		if err := f2.Restore(bytes.NewReader(snapBytes(t, f))); err != nil || f2.Delta() != d {
			t.Fatalf("restore of a snapshot with Δ %d: %v (Δ %d)", d, err, f2.Delta())
		}
	}
}

// SPEC §3.2, §4 (rounding): an entry's expiry is now + lease + Δ for any Δ
// in 2..=60000, both ends included; one ms outside either end is refused.
func TestEntryExpiryAtDeltaEnds(t *testing.T) {
	for _, d := range []uint64{2, 60000} {
		e := Entry{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: "a", Holder: "h", LeaseS: 1, ExpiryMs: t0 + 1000 + d}
		b, err := EncodeEntry(&e)
		if err != nil {
			t.Fatalf("expiry with Δ %d refused: %v", d, err)
		}
		if got, err := DecodeEntry(b); err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("Δ %d: decoded %+v %v", d, got, err)
		}
	}
	for _, exp := range []uint64{t0 + 1000 + 1, t0 + 1000 + 60001} {
		if _, err := EncodeEntry(&Entry{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: "a", Holder: "h", LeaseS: 1, ExpiryMs: exp}); err == nil {
			t.Fatalf("expiry %d (Δ %d) accepted", exp, exp-t0-1000)
		}
	}
}

// SPEC §4-8: a snapshot's names are strictly increasing; two tickets of one
// name are refused (restoring both would leave one in the map and two in
// the expiry index).
func TestSnapshotDuplicateNameRefused(t *testing.T) {
	tk := Ticket{Name: "job", Holder: "h", Token: 3, LeaseS: 1, ValidBeforeMs: t0 + 1000, ExpiryMs: t0 + 1000 + testDelta}
	for _, tickets := range [][]Ticket{{tk, tk}, {tk, {Name: "job", Holder: "other", Token: 4, LeaseS: 1, ValidBeforeMs: t0 + 1000, ExpiryMs: t0 + 1000 + testDelta}}} {
		var buf bytes.Buffer
		if _, err := (&Snapshot{DeltaMs: testDelta, Index: 10, Tickets: tickets}).WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		_, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "strictly increasing") {
			t.Fatalf("snapshot with a name twice: %v, want ErrFormat (names not strictly increasing)", err)
		}
		if err := New(testDelta).Restore(bytes.NewReader(buf.Bytes())); err == nil {
			t.Fatal("restore accepted a name twice")
		}
	}
}
