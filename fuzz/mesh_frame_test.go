package fuzz

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"testing"

	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// The naive mesh frame decoder: written from the frame layout in
// node/cluster/mesh/frame.go's comment, with slicing and regular
// expressions, not from its code paths.

var (
	// NAME, or NAME~G with G in 2..999999 without a leading zero (SPEC §3.4).
	naiveNodeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(~([2-9]|[1-9][0-9]{1,5}))?$`)
	naiveAddr   = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)
)

type naiveFrame struct {
	kind  string // "hello", "proof", or an error kind: "format", "version", "oversize", "short"
	body  []byte
	hello mesh.Hello
	proof mesh.Proof
}

// naiveMeshSplit takes the first frame off in: "short" when in ends early.
func naiveMeshSplit(in []byte) (body []byte, kind string) {
	if len(in) < 2 {
		return nil, "short"
	}
	n := int(in[0])*256 + int(in[1])
	switch {
	case n == 0:
		return nil, "format"
	case n > 512:
		return nil, "oversize"
	case len(in) < 2+n:
		return nil, "short"
	}
	return in[2 : 2+n], ""
}

// naiveMeshBody classifies a body as the frame type it claims to be (want).
func naiveMeshBody(b []byte, want byte) naiveFrame {
	if len(b) < 2 {
		return naiveFrame{kind: "format"}
	}
	if b[0] != 2 {
		return naiveFrame{kind: "version"}
	}
	if b[1] != want {
		return naiveFrame{kind: "format"}
	}
	switch want {
	case 2:
		if len(b) != 2+32+64 {
			return naiveFrame{kind: "format"}
		}
		var p mesh.Proof
		copy(p.MAC[:], b[2:34])
		copy(p.Sig[:], b[34:])
		return naiveFrame{kind: "proof", body: b, proof: p}
	}
	// hello
	if len(b) < 3 {
		return naiveFrame{kind: "format"}
	}
	idEnd := 3 + int(b[2])
	if len(b) < idEnd+1 {
		return naiveFrame{kind: "format"}
	}
	addrEnd := idEnd + 1 + int(b[idEnd])
	if len(b) != addrEnd+96 {
		return naiveFrame{kind: "format"}
	}
	id, addr := string(b[3:idEnd]), string(b[idEnd+1:addrEnd])
	if !naiveNodeID.MatchString(id) || !naiveAddr.MatchString(addr) {
		return naiveFrame{kind: "format"}
	}
	h := mesh.Hello{ID: id, Addr: addr}
	copy(h.Nonce[:], b[addrEnd:addrEnd+32])
	copy(h.Key[:], b[addrEnd+32:addrEnd+64])
	copy(h.Share[:], b[addrEnd+64:])
	return naiveFrame{kind: "hello", body: b, hello: h}
}

func meshKindOf(t *testing.T, err error) string {
	t.Helper()
	switch {
	case err == nil:
		return ""
	case errors.Is(err, mesh.ErrOversize):
		return "oversize"
	case errors.Is(err, mesh.ErrVersion):
		return "version"
	case errors.Is(err, mesh.ErrFormat):
		return "format"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "short"
	}
	t.Fatalf("error of no known kind: %v", err)
	return ""
}

// FuzzMeshFrames: the mesh handshake decoders never panic, agree with the
// naive decoder on accept/reject, the error kind and every field, and
// re-encode accepted frames byte for byte.
func FuzzMeshFrames(f *testing.F) {
	var nonce, key, share [32]byte
	for i := range nonce {
		nonce[i], key[i], share[i] = byte(i), byte(0xff-i), byte(0x40+i)
	}
	hello := mesh.EncodeHello(mesh.Hello{ID: "node-1", Addr: "10.0.0.1:7950", Nonce: nonce, Key: key, Share: share})
	later := mesh.EncodeHello(mesh.Hello{ID: "node-1~12", Addr: "10.0.0.1:7950", Nonce: nonce, Key: key, Share: share})
	proof := mesh.EncodeProof(mesh.Proof{MAC: nonce, Sig: [64]byte{1, 2, 3}})
	for _, s := range [][]byte{
		mesh.AppendFrame(nil, hello),
		mesh.AppendFrame(nil, later),
		mesh.AppendFrame(nil, proof),
		mesh.AppendFrame(nil, []byte{2, 3}), // version 1's accept frame, a type version 2 lacks
		mesh.AppendFrame(mesh.AppendFrame(nil, hello), proof),
		{0xff, 0xff},
		{0x02, 0x01},
		{0, 0},
		{0x16, 0x03, 0x01, 0x00, 0x05},
		[]byte("GET / HTTP/1.1\r\n"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		body, err := mesh.ReadFrame(bytes.NewReader(in))
		nbody, nkind := naiveMeshSplit(in)
		if got := meshKindOf(t, err); got != nkind {
			t.Fatalf("%q: ReadFrame says %q (%v), naive %q", in, got, err, nkind)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(body, nbody) {
			t.Fatalf("%q: body %q, naive %q", in, body, nbody)
		}
		if enc := mesh.AppendFrame(nil, body); !bytes.Equal(enc, in[:len(enc)]) {
			t.Fatalf("frame round trip: %q -> %q", in, enc)
		}
		h, err := mesh.DecodeHello(body)
		n := naiveMeshBody(body, 1)
		if got := meshKindOf(t, err); got != "" && got != n.kind || got == "" && n.kind != "hello" {
			t.Fatalf("%q: DecodeHello %v, naive %q", body, err, n.kind)
		}
		if err == nil {
			if h != n.hello || !bytes.Equal(mesh.EncodeHello(h), body) {
				t.Fatalf("%q: hello %+v, naive %+v, re-encoded %q", body, h, n.hello, mesh.EncodeHello(h))
			}
		}
		p, err := mesh.DecodeProof(body)
		n = naiveMeshBody(body, 2)
		if got := meshKindOf(t, err); got != "" && got != n.kind || got == "" && n.kind != "proof" {
			t.Fatalf("%q: DecodeProof %v, naive %q", body, err, n.kind)
		}
		if err == nil && (p != n.proof || !bytes.Equal(mesh.EncodeProof(p), body)) {
			t.Fatalf("%q: proof %+v, naive %+v", body, p, n.proof)
		}
	})
}
