package ticket

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// goldenNames mix what the snapshot's name order has to get right: shared
// prefixes longer than 8 bytes, a name that is a prefix of another,
// lengths from 1 to MaxNameLen, bytes on both sides of every separator.
func goldenNames() []string {
	names := []string{"a", "ab", "abc", "b", "Z", "0", "job:", "job:a", "job:b", "job:ab",
		"lock-00000000", "lock-00000001", "lock-000000010", "lock-0000000", "lock-00000009",
		"tenant-1.queue.shard-07", "tenant-1.queue.shard-7", "tenant-10.queue.shard-07",
		strings.Repeat("x", MaxNameLen), strings.Repeat("x", MaxNameLen-1) + "y", strings.Repeat("x", 9)}
	for i := range 40 {
		names = append(names, fmt.Sprintf("fill-%08d", i*37%41))
	}
	return names
}

// goldenFSM holds goldenNames in a fixed order with fixed times, and (v2)
// two retired NodeIds.
func goldenFSM(t *testing.T, retired bool) *harness {
	h := newHarness(t)
	for i, name := range goldenNames() {
		wantCode(t, "grant "+name, h.grant(name, fmt.Sprintf("holder %d", i%3), uint8(1+i%250), t0+uint64(i)), CodeOK)
	}
	if retired {
		for _, id := range []string{"node-9", "node-1"} {
			b, _ := EncodeEntry(&Entry{Op: OpRetire, NodeID: id})
			h.idx++
			if r := h.f.Apply(h.idx, b); r.Code != CodeOK {
				t.Fatal(r.Code)
			}
		}
	}
	return h
}

// Snapshots written by the release before the sort-key encoder (issue 16
// item 6) restore, and today's encoder writes the same bytes for the same
// state: testdata/snapshot-v{1,2}.golden were written by that release and
// are never regenerated (TCKCLK_WRITE_GOLDEN=1 exists only to show how
// they were made).
func TestSnapshotGoldenFiles(t *testing.T) {
	for _, c := range []struct {
		file    string
		retired bool
		version uint16
	}{{"snapshot-v1.golden", false, 1}, {"snapshot-v2.golden", true, 2}} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", c.file)
			h := goldenFSM(t, c.retired)
			now := snapBytes(t, h.f)
			if os.Getenv("TCKCLK_WRITE_GOLDEN") == "1" {
				if err := os.WriteFile(path, now, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if v := uint16(old[8])<<8 | uint16(old[9]); v != c.version {
				t.Fatalf("%s is version %d, want %d", c.file, v, c.version)
			}
			f := New(testDelta)
			if err := f.Restore(bytes.NewReader(old)); err != nil {
				t.Fatalf("restore %s: %v", c.file, err)
			}
			want, _ := h.f.List("", 0)
			got, _ := f.List("", 0)
			if !slices.Equal(got, want) || f.Index() != h.f.Index() || len(f.Retired()) != len(h.f.Retired()) {
				t.Fatalf("restored %d tickets (index %d, retired %v), want %d (index %d, retired %v)",
					len(got), f.Index(), f.Retired(), len(want), h.f.Index(), h.f.Retired())
			}
			if !bytes.Equal(now, old) {
				t.Fatalf("today's encoder writes %d bytes for the golden state, the old release wrote %d; they differ", len(now), len(old))
			}
			if again := snapBytes(t, f); !bytes.Equal(again, old) {
				t.Fatal("re-encoding the restored golden snapshot changes its bytes")
			}
		})
	}
}

// Any set of valid names is written in strictly increasing byte order
// (ReadSnapshot refuses anything else) and round-trips.
func TestSnapshotNameOrderProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		// Long names over two letters share their first 8 bytes after
		// the common prefix often (the sort key's ties); the wider
		// alphabet and short names cover the rest.
		alphabet := rapid.SampledFrom([]string{"ab", "ab-.0:_Zz"}).Draw(rt, "alphabet")
		minLen := rapid.SampledFrom([]int{0, 8}).Draw(rt, "min_len")
		rest := rapid.StringOfN(rapid.SampledFrom([]rune(alphabet)), minLen, 23, -1)
		nameGen := rapid.Custom(func(t *rapid.T) string {
			return rapid.SampledFrom([]string{"a", "b"}).Draw(t, "first") + rest.Draw(t, "rest")
		})
		names := rapid.SliceOfNDistinct(nameGen, 0, 300, func(s string) string { return s }).Draw(rt, "names")
		prefix := rapid.SampledFrom([]string{"", "p", "common-prefix-longer-than-eight."}).Draw(rt, "prefix")
		h := newHarness(rt)
		for i, n := range names {
			if r := h.grant(prefix+n, "h", 30, t0+uint64(i)); r.Code != CodeOK {
				rt.Fatalf("grant %q: %v", prefix+n, r.Code)
			}
		}
		s, err := h.f.Snapshot()
		if err != nil {
			rt.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := s.WriteTo(&b); err != nil {
			rt.Fatal(err)
		}
		back, err := ReadSnapshot(bytes.NewReader(b.Bytes()))
		if err != nil {
			rt.Fatalf("read back: %v", err)
		}
		want, _ := h.f.List("", 0)
		if !slices.Equal(back.Tickets, want) {
			rt.Fatalf("read back %d tickets, want %d in name order", len(back.Tickets), len(want))
		}
		sorted := make([]string, len(names))
		for i, n := range names {
			sorted[i] = prefix + n
		}
		slices.Sort(sorted)
		for i := range back.Tickets {
			if back.Tickets[i].Name != sorted[i] {
				rt.Fatalf("ticket %d is %q, want %q", i, back.Tickets[i].Name, sorted[i])
			}
		}
		// The same state as a list in any order (a decoded or hand-made
		// snapshot: WriteTo sorts it) writes the same bytes.
		loose := thaw(s)
		perm := rapid.Permutation(loose.Tickets).Draw(rt, "order")
		loose.Tickets = perm
		var b2 bytes.Buffer
		if _, err := loose.WriteTo(&b2); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(b2.Bytes(), b.Bytes()) {
			rt.Fatal("the tickets as a list in another order write other bytes than the FSM's tree")
		}
		s.Release()
	})
}
