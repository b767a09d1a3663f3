package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// The naive record opener: written from the record layout in
// node/cluster/mesh/seal.go's comment (length[2] ciphertext[length],
// ChaCha20-Poly1305, nonce = 4 zero bytes and the record number
// big-endian, the length bytes as additional data), with slicing.

var recordKey = bytes.Repeat([]byte{0x5c}, chacha20poly1305.KeySize)

// naiveOpenAll opens records from in until one fails: the plaintexts, the
// bytes each record took, and how it ended: "end" (in ran out at a record
// boundary), "short" (in a record) or "refused".
func naiveOpenAll(in []byte) (plains [][]byte, sizes []int, end string) {
	aead, err := chacha20poly1305.New(recordKey)
	if err != nil {
		panic(err)
	}
	for seq := uint64(0); ; seq++ {
		if len(in) == 0 {
			return plains, sizes, "end"
		}
		if len(in) < 2 {
			return plains, sizes, "short"
		}
		n := int(in[0])<<8 | int(in[1])
		if n < 17 || n > 16384+16 {
			return plains, sizes, "refused"
		}
		if len(in) < 2+n {
			return plains, sizes, "short"
		}
		nonce := make([]byte, 12)
		binary.BigEndian.PutUint64(nonce[4:], seq)
		p, err := aead.Open(nil, nonce, in[2:2+n], in[:2])
		if err != nil {
			return plains, sizes, "refused"
		}
		plains, sizes = append(plains, p), append(sizes, 2+n)
		in = in[2+n:]
	}
}

func sealAll(t testing.TB, msgs ...[]byte) []byte {
	t.Helper()
	s, err := mesh.NewSealer(recordKey)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, m := range msgs {
		if out, err = s.AppendRecords(out, m); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// FuzzMeshSealedRecords: the sealed record reader never panics, opens
// exactly the records the naive opener opens (same plaintexts, same way
// of ending), and every record it opens is what the sealer makes of that
// plaintext at that position, byte for byte.
func FuzzMeshSealedRecords(f *testing.F) {
	one, two := sealAll(f, []byte("raft entry")), sealAll(f, []byte("raft entry"), []byte("forwarded grant"))
	second := two[len(one):]
	flipped := bytes.Clone(two)
	flipped[len(one)+5] ^= 1
	for _, s := range [][]byte{
		one,
		two,
		sealAll(f, bytes.Repeat([]byte{0xab}, 16384+3)), // two records
		flipped,
		append(bytes.Clone(one), one...),    // replayed
		append(bytes.Clone(second), one...), // reordered
		second,                              // the first dropped
		two[:len(two)-1],                    // cut
		{0x00, 0x10},                        // a tag-only (empty) record
		{0xff, 0xff},                        // oversize length
		append([]byte{0x00, 0x11}, make([]byte, 17)...), // forged
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		o, err := mesh.NewOpener(recordKey)
		if err != nil {
			t.Fatal(err)
		}
		r := bytes.NewReader(in)
		var plains [][]byte
		var end string
		for {
			p, err := o.ReadRecord(r)
			if err == nil {
				plains = append(plains, bytes.Clone(p))
				continue
			}
			switch {
			case errors.Is(err, mesh.ErrRecord):
				end = "refused"
			case errors.Is(err, io.EOF):
				end = "end"
			case errors.Is(err, io.ErrUnexpectedEOF):
				end = "short"
			default:
				t.Fatalf("error of no known kind: %v", err)
			}
			break
		}
		nplains, sizes, nend := naiveOpenAll(in)
		if end != nend || len(plains) != len(nplains) {
			t.Fatalf("%x: opened %d records ending %q, naive %d ending %q", in, len(plains), end, len(nplains), nend)
		}
		off := 0
		for i := range plains {
			if !bytes.Equal(plains[i], nplains[i]) {
				t.Fatalf("record %d: %x, naive %x", i, plains[i], nplains[i])
			}
			off += sizes[i]
		}
		if resealed := sealAll(t, plains...); !bytes.Equal(resealed, in[:off]) {
			t.Fatalf("the opened records do not re-seal to their bytes")
		}
	})
}
