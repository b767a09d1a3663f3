package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/consensus"
)

// naiveSeal is the WAL entry seal computed the long way: CRC-32C over
// index, term, type, data length, own-extensions length, data, own
// extensions, all big-endian, as docs/data-dir.md and logcheck.go describe.
func naiveSeal(l *raft.Log, own []byte) uint32 {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(own)))
	b = append(b, l.Data...)
	b = append(b, own...)
	return crc32.Checksum(b, naiveCRC)
}

// FuzzLogSeal: OpenLogSeal never panics; it accepts exactly the entries
// whose extensions end with "tk" and the naive CRC of the rest, strips just
// those six bytes, and SealLog of what it returns gives the input back.
func FuzzLogSeal(f *testing.F) {
	for _, l := range []raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg")},
		{Index: 99, Term: 7, Type: raft.LogCommand, Data: []byte{1, 2, 3}, Extensions: []byte("own")},
		{Index: 5, Term: 2, Type: raft.LogNoop},
	} {
		s := consensus.SealLog(&l)
		f.Add(s.Index, s.Term, uint8(s.Type), s.Data, s.Extensions)
	}
	f.Fuzz(func(t *testing.T, index, term uint64, typ uint8, data, ext []byte) {
		in := raft.Log{Index: index, Term: term, Type: raft.LogType(typ), Data: data, Extensions: ext}
		l := in
		err := consensus.OpenLogSeal(&l)
		valid := len(ext) >= 6 && bytes.Equal(ext[len(ext)-6:len(ext)-4], []byte("tk")) &&
			binary.BigEndian.Uint32(ext[len(ext)-4:]) == naiveSeal(&in, ext[:len(ext)-6])
		if (err == nil) != valid {
			t.Fatalf("OpenLogSeal says %v, the naive check says valid=%v", err, valid)
		}
		if err != nil {
			if !errors.Is(err, consensus.ErrLogSeal) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		if !bytes.Equal(l.Extensions, ext[:len(ext)-6]) || l.Index != index || !bytes.Equal(l.Data, data) {
			t.Fatalf("opened %+v from %+v", l, in)
		}
		if again := consensus.SealLog(&l); !bytes.Equal(again.Extensions, ext) {
			t.Fatalf("re-sealed %x, want %x", again.Extensions, ext)
		}
	})
}
