package fuzz

import (
	"bytes"
	"crypto/sha256"
	"os"
	"testing"

	"github.com/tckclk/tckclk/node/backup"
)

// FuzzBackupFile feeds the backup reader of `ticketd restore
// --from-snapshot` (node/backup, SPEC §3.4) arbitrary files. With fixSum
// the SHA-256 at the end is recomputed first, so the fuzzer gets past it
// into the header checks, the ticket snapshot decoder and the header/state
// cross-checks. Nothing may panic, and an accepted backup re-encodes to
// the same bytes.
func FuzzBackupFile(f *testing.F) {
	golden, err := os.ReadFile("../node/backup/testdata/backup-v1.golden")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden, false)
	f.Add(golden[:len(golden)/2], false)
	f.Add(golden, true)
	f.Add([]byte("TCKTBKUP\x00\x01"), true)
	f.Fuzz(func(t *testing.T, data []byte, fixSum bool) {
		if fixSum && len(data) >= sha256.Size {
			data = bytes.Clone(data)
			sum := sha256.Sum256(data[:len(data)-sha256.Size])
			copy(data[len(data)-sha256.Size:], sum[:])
		}
		b, err := backup.Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		s, err := b.State.Snapshot()
		if err != nil {
			t.Fatalf("accepted, but its state cannot be snapshotted: %v", err)
		}
		defer s.Release()
		s.Raft = &b.Position
		var again bytes.Buffer
		if _, err := backup.Encode(&again, b.Header.NodeID, s); err != nil {
			t.Fatalf("accepted, but does not re-encode: %v", err)
		}
		if !bytes.Equal(again.Bytes(), data) {
			t.Fatalf("accepted %d bytes re-encode to %d other bytes", len(data), again.Len())
		}
	})
}
