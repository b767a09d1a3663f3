package peerstatus

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// naiveDecode is the differential oracle for Decode: the frame read byte
// by byte, the index summed as a base-256 number.
func naiveDecode(b []byte) (Status, bool) {
	if len(b) < 11 || b[0] != 1 || (b[1] != 0 && b[1] != 1) {
		return Status{}, false
	}
	var idx uint64
	for _, c := range b[2:10] {
		idx = idx*256 + uint64(c)
	}
	n := int(b[10])
	if n > 128 || len(b) != 11+n {
		return Status{}, false
	}
	leader := ""
	for _, c := range b[11:] {
		leader += string([]byte{c})
	}
	return Status{HasState: b[1] == 1, LastIndex: idx, Leader: leader}, true
}

func mustEncode(t testing.TB, s Status) []byte {
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecode: Decode never panics, agrees with the naive oracle on
// acceptance and value, refuses with ErrMalformed, and an accepted frame
// re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range [][]byte{
		nil, {1}, mustEncode(f, Status{}), mustEncode(f, Status{HasState: true, LastIndex: 1 << 40, Leader: "n1"}),
		{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 'a'},
		bytes.Repeat([]byte{0xff}, 140),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		want, ok := naiveDecode(b)
		if (err == nil) != ok {
			t.Fatalf("decode %x: err %v, oracle accepts %v", b, err, ok)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode %x: %v is not ErrMalformed", b, err)
			}
			return
		}
		if got != want {
			t.Fatalf("decode %x = %+v, oracle %+v", b, got, want)
		}
		if re := mustEncode(t, got); !bytes.Equal(re, b) {
			t.Fatalf("re-encode %x = %x", b, re)
		}
	})
}

// The peer-status frame: round trip, and every malformed answer refused.
func TestFrame(t *testing.T) {
	for _, s := range []Status{{}, {HasState: true, LastIndex: 1<<64 - 1, Leader: strings.Repeat("x", MaxLeaderLen)}, {LastIndex: 42, Leader: "n1"}} {
		got, err := Decode(mustEncode(t, s))
		if err != nil || got != s {
			t.Fatalf("round trip %+v: %+v, %v", s, got, err)
		}
	}
	if _, err := Encode(Status{Leader: strings.Repeat("x", MaxLeaderLen+1)}); err == nil {
		t.Fatal("an oversize leader id encoded")
	}
	good := mustEncode(t, Status{HasState: true, LastIndex: 7, Leader: "ab"})
	for name, b := range map[string][]byte{
		"empty": nil, "short": good[:10], "long": append(append([]byte{}, good...), 0), "leader cut": good[:12],
		"version": append([]byte{2}, good[1:]...), "flags": append([]byte{1, 3}, good[2:]...),
		"oversize": append(append([]byte{}, good[:10]...), append([]byte{129}, bytes.Repeat([]byte{'a'}, 129)...)...),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// The OpRetiredGeneration answer round-trips; every other length or
// version is refused.
func TestGenerationFrame(t *testing.T) {
	for _, g := range []uint32{0, 1, 2, 999999, 1<<32 - 1} {
		got, err := DecodeGeneration(EncodeGeneration(g))
		if err != nil || got != g {
			t.Fatalf("round trip of %d: %d, %v", g, got, err)
		}
	}
	for _, b := range [][]byte{nil, {Version}, {Version, 0, 0, 0}, {Version, 0, 0, 0, 1, 0}, {2, 0, 0, 0, 1}} {
		if _, err := DecodeGeneration(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeGeneration(%x): %v, want ErrMalformed", b, err)
		}
	}
}
