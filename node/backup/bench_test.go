package backup

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tckclk/tckclk/node/ticket"
)

// benchState is a state of n tickets (names of 13 bytes, as the sizing
// figures in docs/operations.md) with its Raft position.
func benchState(b *testing.B, n int) *ticket.Snapshot {
	f := ticket.New(500)
	e, _ := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, NowMs: t0, DeltaMs: 500})
	f.Apply(1, e)
	for i := range n {
		exp, _ := ticket.ExpiryFor(t0, 250, 500)
		e, _ := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpGrant, NowMs: t0, RecvMs: t0, Name: fmt.Sprintf("job-%09d", i), Holder: "worker-1", LeaseS: 250, ExpiryMs: exp})
		if r := f.Apply(uint64(i+2), e); r.Code != ticket.CodeOK {
			b.Fatal(r.Code)
		}
	}
	s, err := f.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	s.Raft = &ticket.Position{Index: uint64(n + 1), Term: 1, TakenMs: t0, ConfigurationIndex: 1, Servers: []ticket.Server{{ID: "node-1", Address: "node-1"}}}
	return s
}

// BenchmarkRestoreRead measures what a restore reads: the backup (SHA-256
// over the file, then the state into an FSM, checked against the header)
// against the baseline of restoring the bare ticket snapshot into an FSM,
// in the same process. The ratio is the envelope's cost.
func BenchmarkRestoreRead(b *testing.B) {
	const n = 100_000
	s := benchState(b, n)
	var file, state bytes.Buffer
	if _, err := Encode(&file, "node-1", s); err != nil {
		b.Fatal(err)
	}
	if _, err := s.WriteTo(&state); err != nil {
		b.Fatal(err)
	}
	b.Run("snapshot", func(b *testing.B) {
		b.SetBytes(int64(state.Len()))
		for b.Loop() {
			if err := ticket.New(500).Restore(bytes.NewReader(state.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("backup", func(b *testing.B) {
		b.SetBytes(int64(file.Len()))
		for b.Loop() {
			if _, err := Read(bytes.NewReader(file.Bytes()), int64(file.Len())); err != nil {
				b.Fatal(err)
			}
		}
	})
}
