package peerstatus

import (
	"bytes"
	"errors"
	"testing"
)

// naiveDecode is the differential oracle for Decode: the
// frame read byte by byte, the index summed as a base-256 number.
func naiveDecode(b []byte) (Status, bool) {
	if len(b) != 10 || b[0] != 1 || (b[1] != 0 && b[1] != 1) {
		return Status{}, false
	}
	var idx uint64
	for _, c := range b[2:] {
		idx = idx*256 + uint64(c)
	}
	return Status{HasState: b[1] == 1, LastIndex: idx}, true
}

// FuzzDecode: Decode never panics, agrees with the naive
// oracle on acceptance and value, refuses with ErrMalformed, and an
// accepted frame re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range [][]byte{
		nil, {1}, Encode(Status{}), Encode(Status{HasState: true, LastIndex: 1 << 40}),
		{1, 2, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte{0xff}, 11),
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
		if !bytes.Equal(Encode(got), b) {
			t.Fatalf("re-encode %x = %x", b, Encode(got))
		}
	})
}

// The peer-status frame: round trip, and every malformed answer refused.
func TestFrame(t *testing.T) {
	for _, s := range []Status{{}, {HasState: true, LastIndex: 1<<64 - 1}, {LastIndex: 42}} {
		got, err := Decode(Encode(s))
		if err != nil || got != s {
			t.Fatalf("round trip %+v: %+v, %v", s, got, err)
		}
	}
	good := Encode(Status{HasState: true, LastIndex: 7})
	for name, b := range map[string][]byte{
		"empty": nil, "short": good[:9], "long": append(append([]byte{}, good...), 0),
		"version": append([]byte{2}, good[1:]...), "flags": append([]byte{1, 3}, good[2:]...),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
