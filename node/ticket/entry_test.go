package ticket

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func validEntries() []Entry {
	return []Entry{
		{Op: OpInit, NowMs: 0, DeltaMs: 500},
		{Op: OpGrant, NowMs: 1700000000001, RecvMs: 1700000000000, Name: "db.migrate:1", Holder: "worker-1", LeaseS: 30, ExpiryMs: 1700000000001 + 30000 + 500},
		{Op: OpRenew, NowMs: 1700000000100, RecvMs: 1700000000100, Name: "a", Holder: "h", Token: 7, LeaseS: 250, ExpiryMs: 1700000000100 + 250000 + 2},
		{Op: OpRelease, NowMs: 5, Name: strings.Repeat("n", 128), Holder: strings.Repeat("~", 128), Token: 1 << 62},
		{Op: OpExpire, NowMs: 99, Name: "Z9", Token: 3},
		{Op: OpRevoke, NowMs: 1700000000200, Name: "db.migrate:1", Token: 0},
		{Op: OpRevoke, NowMs: 7, Name: "a", Token: TokenFor(3, 12)},
	}
}

// SPEC §4-8: log entries carry a format version and a checksum.
func TestEntryRoundTrip(t *testing.T) {
	for _, e := range validEntries() {
		b, err := EncodeEntry(&e)
		if err != nil {
			t.Fatalf("%s: encode: %v", e.Op, err)
		}
		if b[0] != versionFor(e.Op) {
			t.Fatalf("%s: version byte %d", e.Op, b[0])
		}
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", e.Op, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", e.Op, got, e)
		}
		again, _ := EncodeEntry(&got)
		if !bytes.Equal(again, b) {
			t.Fatalf("%s: re-encoding differs", e.Op)
		}
	}
}

// SPEC §4-8: an unknown version or a bad checksum is refused with its kind.
func TestDecodeEntryRefuses(t *testing.T) {
	grant := validEntries()[1]
	good, _ := EncodeEntry(&grant)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	withBody := func(mut func(e *Entry)) []byte {
		e := grant
		mut(&e)
		return reseal(appendEntry(nil, &e))
	}
	cases := []struct {
		name string
		in   []byte
		kind error
		msg  string
	}{
		{"empty", nil, ErrFormat, "empty"},
		{"version 0", edit(func(b []byte) []byte { b[0] = 0; return reseal(b) }), ErrVersion, "version 0"},
		{"version 5", edit(func(b []byte) []byte { b[0] = 5; return reseal(b) }), ErrVersion, "version 5"},
		{"grant as version 4", edit(func(b []byte) []byte { b[0] = 4; return reseal(b) }), ErrFormat, "grant is a version-1 entry"},
		{"grant as version 3", edit(func(b []byte) []byte { b[0] = 3; return reseal(b) }), ErrFormat, "grant is a version-1 entry"},
		{"grant as version 2", edit(func(b []byte) []byte { b[0] = 2; return reseal(b) }), ErrFormat, "grant is a version-1 entry"},
		{"version 9 unsealed", edit(func(b []byte) []byte { b[0] = 9; return b }), ErrVersion, "version 9"},
		{"short", good[:8], ErrFormat, "shorter"},
		{"flipped body bit", edit(func(b []byte) []byte { b[12] ^= 1; return b }), ErrChecksum, "CRC-32C"},
		{"flipped crc bit", edit(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), ErrChecksum, "CRC-32C"},
		{"unknown op", edit(func(b []byte) []byte { b[1] = 42; return reseal(b) }), ErrFormat, "unknown op 42"},
		{"op 0", edit(func(b []byte) []byte { b[1] = 0; return reseal(b) }), ErrFormat, "unknown op 0"},
		{"truncated body", reseal(append(append([]byte(nil), good[:20]...), 0, 0, 0, 0)), ErrFormat, "truncated"},
		{"trailing bytes", edit(func(b []byte) []byte {
			return reseal(append(append(b[:len(b)-4:len(b)-4], 7), 0, 0, 0, 0))
		}), ErrFormat, "trailing"},
		{"bad name", withBody(func(e *Entry) { e.Name = "-x" }), ErrFormat, "name must start"},
		{"empty name", withBody(func(e *Entry) { e.Name = "" }), ErrFormat, "name is empty"},
		{"holder with tab", withBody(func(e *Entry) { e.Holder = "a\tb" }), ErrFormat, "holder has byte 0x09"},
		{"holder with DEL", withBody(func(e *Entry) { e.Holder = "a\x7f" }), ErrFormat, "holder has byte 0x7f"},
		{"lease 0", withBody(func(e *Entry) { e.LeaseS = 0; e.ExpiryMs = e.NowMs + 500 }), ErrFormat, "lease_s 0"},
		{"lease 251", withBody(func(e *Entry) { e.LeaseS = 251; e.ExpiryMs = e.NowMs + 251000 + 500 }), ErrFormat, "lease_s 251"},
		{"recv after now", withBody(func(e *Entry) { e.RecvMs = e.NowMs + 1 }), ErrFormat, "after now_ms"},
		{"expiry without Δ", withBody(func(e *Entry) { e.ExpiryMs = e.NowMs + 30000 }), ErrFormat, "expiry_ms"},
		{"expiry Δ too big", withBody(func(e *Entry) { e.ExpiryMs = e.NowMs + 30000 + 60001 }), ErrFormat, "expiry_ms"},
		{"renew token 0", reseal(appendEntry(nil, &Entry{Op: OpRenew, NowMs: 1, RecvMs: 1, Name: "a", Holder: "h", LeaseS: 1, ExpiryMs: 1003})), ErrFormat, "token"},
		{"init Δ 1", reseal(appendEntry(nil, &Entry{Op: OpInit, DeltaMs: 1})), ErrFormat, "2..=60000"},
		{"init Δ 60001", reseal(appendEntry(nil, &Entry{Op: OpInit, DeltaMs: 60001})), ErrFormat, "2..=60000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeEntry(c.in)
			if !errors.Is(err, c.kind) {
				t.Fatalf("got %v, want kind %v", err, c.kind)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.What != "log entry" {
				t.Fatalf("not a *DecodeError for a log entry: %T %v", err, err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("message %q lacks %q", err, c.msg)
			}
		})
	}
}

func TestEncodeEntryRefusesInvalid(t *testing.T) {
	bad := []Entry{
		{Op: 0},
		{Op: OpGrant, Name: "ok", Holder: "", LeaseS: 1, NowMs: 1, ExpiryMs: 1003},
		{Op: OpExpire, Name: "ok", Token: 0},
		{Op: OpInit, DeltaMs: 0},
		{Op: OpGrant, Name: "ok", Holder: "h", LeaseS: 1, NowMs: ^uint64(0) - 10, ExpiryMs: 0},
	}
	for _, e := range bad {
		if b, err := EncodeEntry(&e); err == nil {
			t.Fatalf("%+v encoded to %x", e, b)
		}
	}
}

func TestValidNameHolderLease(t *testing.T) {
	for _, n := range []string{"a", "A", "0", "a.b_c:d-e", strings.Repeat("x", 128)} {
		if err := ValidName(n); err != nil {
			t.Errorf("ValidName(%q): %v", n, err)
		}
	}
	for _, n := range []string{"", ".a", "_a", ":a", "-a", "a/b", "a b", "é", strings.Repeat("x", 129), "a\x00"} {
		if ValidName(n) == nil {
			t.Errorf("ValidName(%q) accepted", n)
		}
	}
	// SPEC §4: holder is 1..=128 printable ASCII, the space (0x20) included.
	for _, h := range []string{"h", "!~", strings.Repeat("h", 128), "user@host:1", " ", "a b", " lead", "trail ", strings.Repeat(" ", 128)} {
		if err := ValidHolder(h); err != nil {
			t.Errorf("ValidHolder(%q): %v", h, err)
		}
	}
	for _, h := range []string{"", "a\tb", "\x7f", "\x1f", "a\nb", "ü", strings.Repeat("h", 129), strings.Repeat(" ", 129)} {
		if ValidHolder(h) == nil {
			t.Errorf("ValidHolder(%q) accepted", h)
		}
	}
	for _, l := range []int64{1, 30, 250} {
		if ValidLease(l) != nil {
			t.Errorf("lease %d refused", l)
		}
	}
	for _, l := range []int64{-1, 0, 251, 1 << 40} {
		if ValidLease(l) == nil {
			t.Errorf("lease %d accepted", l)
		}
	}
}
