package mesh

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The edges of the handshake frame codec (SPEC §5 Mesh; the layout in
// frame.go's comment), one case per boundary, with the exact error kind.

// helloBody builds a hello body by hand: id and addr with their length
// bytes, then extra bytes of nonce and key.
func helloBody(id, addr string, tail int) []byte {
	b := []byte{Version, frameHello, byte(len(id))}
	b = append(b, id...)
	b = append(b, byte(len(addr)))
	b = append(b, addr...)
	return append(b, bytes.Repeat([]byte{0x42}, tail)...)
}

func TestReadFrameLengthEdges(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		want error
	}{
		{"empty", 0, ErrFormat},
		{"one byte", 1, nil},
		{"MaxFrame", MaxFrame, nil},
		{"MaxFrame+1", MaxFrame + 1, ErrOversize},
	} {
		in := []byte{byte(c.n >> 8), byte(c.n)}
		in = append(in, bytes.Repeat([]byte{7}, c.n)...)
		body, err := ReadFrame(bytes.NewReader(in))
		switch {
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		case c.want == nil && (err != nil || len(body) != c.n):
			t.Errorf("%s: %d bytes, %v; want %d bytes", c.name, len(body), err, c.n)
		}
	}
}

func TestHeadEdges(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"one byte", []byte{Version}, ErrFormat},
		{"version 0", []byte{0, frameProof}, ErrVersion},
		{"version 1 (before the dialer proved first)", []byte{1, frameProof}, ErrVersion},
		{"version 3", []byte{3, frameProof}, ErrVersion},
		{"wrong type", []byte{Version, frameHello}, ErrFormat},
		{"the accept frame of version 1", []byte{Version, 3}, ErrFormat},
	} {
		_, err := DecodeProof(c.b)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("DecodeProof(%s): %v, want %v", c.name, err, c.want)
		}
	}
	p := Proof{}
	p.MAC[0], p.Sig[63] = 0xaa, 0xbb
	enc := EncodeProof(p)
	if got, err := DecodeProof(enc); err != nil || got != p {
		t.Fatalf("proof round trip: %+v %v", got, err)
	}
	for _, b := range [][]byte{enc[:len(enc)-1], append(bytes.Clone(enc), 0)} {
		if _, err := DecodeProof(b); !errors.Is(err, ErrFormat) {
			t.Errorf("proof body of %d bytes: %v, want ErrFormat", len(b), err)
		}
	}
}

func TestHelloEdges(t *testing.T) {
	const tail = helloTail
	longAddr := strings.Repeat("a", MaxAddrLen)
	for _, c := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"minimal", helloBody("n", "!", tail), true},
		{"longest address", helloBody("n", longAddr, tail), true},
		{"longest id", helloBody(strings.Repeat("n", 128), "a", tail), true},
		{"~ in the address", helloBody("n", "a~", tail), true},
		{"space in the address", helloBody("n", "a b", tail), false},
		{"DEL in the address", helloBody("n", "a\x7f", tail), false},
		{"empty address", helloBody("n", "", tail), false},
		{"empty id", helloBody("", "a", tail), false},
		{"a later generation", helloBody("n~2", "a", tail), true},
		{"the highest generation", helloBody("n~999999", "a", tail), true},
		{"generation 1 spelled out", helloBody("n~1", "a", tail), false},
		{"generation with a leading zero", helloBody("n~02", "a", tail), false},
		{"generation not a number", helloBody("n~x", "a", tail), false},
		{"generation without a name", helloBody("~2", "a", tail), false},
		{"two generations", helloBody("n~2~3", "a", tail), false},
		{"one byte short", helloBody("n", "a", tail-1), false},
		{"one byte over", helloBody("n", "a", tail+1), false},
		{"only the head", []byte{Version, frameHello}, false},
		{"id length past the end", []byte{Version, frameHello, 1}, false},
		{"address length past the end", append(helloBody("n", "", 0)[:4], 1), false},
	} {
		h, err := DecodeHello(c.b)
		if c.ok != (err == nil) {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", c.name, err)
		}
		if c.ok && !bytes.Equal(EncodeHello(h), c.b) {
			t.Errorf("%s: hello does not re-encode to its bytes", c.name)
		}
	}
}

// A hello with the wrong number of bytes after its address says how many
// it needs (DESIGN §6).
func TestHelloTailLengthNamed(t *testing.T) {
	_, err := DecodeHello(helloBody("n", "a", 3))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "has 3 bytes after the address, want 96") {
		t.Fatalf("%v", err)
	}
}

// SPEC §5 Mesh: a node without TLS names a TLS record where a frame was
// expected — record types 0x14 to 0x17, then 0x03 — and only those.
func TestReadFrameNamesTLS(t *testing.T) {
	for _, c := range []struct {
		hdr  [2]byte
		want Reason
	}{
		{[2]byte{0x14, 0x03}, ReasonTLS},
		{[2]byte{0x17, 0x03}, ReasonTLS},
		{[2]byte{0x13, 0x03}, ReasonOversize},
		{[2]byte{0x18, 0x03}, ReasonOversize},
		{[2]byte{0x16, 0x02}, ReasonOversize},
	} {
		in := append(c.hdr[:], bytes.Repeat([]byte{0}, 8)...)
		if _, err := readFrame(bytes.NewReader(in), false); classify(err) != c.want {
			t.Errorf("header % x: %v (%s), want %s", c.hdr, err, classify(err), c.want)
		}
	}
	// With TLS on, the same bytes are just a length.
	if _, err := readFrame(bytes.NewReader([]byte{0x14, 0x03}), true); classify(err) != ReasonOversize {
		t.Errorf("TLS on: %v, want oversize", err)
	}
}
