package ticket

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// scaleCounts are the ticket counts of the snapshot benchmarks: 100k by
// default, TCKCLK_SCALE_N="1000000,5000000" for issue 16 item 6.
func scaleCounts(b *testing.B) []int {
	s := os.Getenv("TCKCLK_SCALE_N")
	if s == "" {
		return []int{100_000}
	}
	var ns []int
	for _, f := range bytes.Split([]byte(s), []byte(",")) {
		n, err := strconv.Atoi(string(bytes.TrimSpace(f)))
		if err != nil || n < 1 {
			b.Fatalf("TCKCLK_SCALE_N: %q is not a positive integer", f)
		}
		ns = append(ns, n)
	}
	return ns
}

// scaleFSM applies n Grant entries with distinct names, as a leader
// proposes them (the names tckbench's scale fill uses).
func scaleFSM(b *testing.B, n int) *FSM { return scaleHarness(b, n).f }

func scaleHarness(b *testing.B, n int) *harness {
	h := newHarness(b)
	for i := range n {
		if r := h.grant(fmt.Sprintf("fill-%08d", i), "filler", 250, t0+uint64(i/1000)); r.Code != CodeOK {
			b.Fatalf("grant %d: %v %v", i, r.Code, r.Err)
		}
	}
	return h
}

// BenchmarkApplyScale measures the FSM holding N tickets: its live heap
// per ticket (after a GC; names of 13 bytes, one holder), a Renew of a held
// ticket picked all over the name space (a lookup, a replace and an
// expiry-heap fix) and a Grant of a new name (an insert), each a whole
// Apply (decode, checks) of a pre-encoded entry:
//
//	TCKCLK_SCALE_N=1000000,5000000 go test -run '^$' -bench ApplyScale -benchtime 200000x ./node/ticket
func BenchmarkApplyScale(b *testing.B) {
	for _, n := range scaleCounts(b) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		h := scaleHarness(b, n)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.Run(fmt.Sprintf("heap/%d", n), func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/float64(n), "heap-B/ticket")
		})
		now := t0 + uint64(n/1000) + 1
		b.Run(fmt.Sprintf("renew/%d", n), func(b *testing.B) {
			entries := make([][]byte, 0, 4096)
			for i := range cap(entries) {
				name := fmt.Sprintf("fill-%08d", i*7919%n)
				cur, ok := h.f.Get(name)
				if !ok {
					b.Fatalf("%s not held", name)
				}
				e, err := EncodeEntry(&Entry{Op: OpRenew, NowMs: now, RecvMs: now, Name: name, Holder: "filler", Token: cur.Token, LeaseS: 200, ExpiryMs: h.expiry(now, 200)})
				if err != nil {
					b.Fatal(err)
				}
				entries = append(entries, e)
			}
			i := 0
			for b.Loop() {
				h.idx++
				if r := h.f.Apply(h.idx, entries[i%len(entries)]); r.Code != CodeOK {
					b.Fatalf("renew: %v", r.Code)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("grant/%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				b.StopTimer()
				name := fmt.Sprintf("more-%08d", i*7919%(1<<26))
				e, err := EncodeEntry(&Entry{Op: OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: "filler", LeaseS: 200, ExpiryMs: h.expiry(now, 200)})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				h.idx++
				if r := h.f.Apply(h.idx, e); r.Code != CodeOK {
					b.Fatalf("grant %s: %v", name, r.Code)
				}
				i++
			}
		})
	}
}

// snapshotTo writes f's snapshot to w.
func (f *FSM) snapshotTo(w io.Writer) (int64, error) {
	s, err := f.Snapshot()
	if err != nil {
		return 0, err
	}
	return s.WriteTo(w)
}

// cpuPerOp reports the process's CPU seconds (user + system, every
// thread: the GC's too) per op, when the returned func runs: on a shared
// machine the wall time per op also holds other users' time.
func cpuPerOp(b *testing.B) func() {
	start := cpuSeconds(b)
	return func() { b.ReportMetric((cpuSeconds(b)-start)/float64(b.N), "cpu-s/op") }
}

func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkSnapshotScale (issue 16 item 6, in process, no Raft, no disk)
// times a snapshot of N active tickets — FSM.Snapshot (the copy under the
// lock), WriteTo into memory — and its restore into an empty FSM
// (ReadSnapshot: decode, verify, checksum; then the map and the heap):
//
//	TCKCLK_SCALE_N=1000000,5000000 go test -run '^$' -bench SnapshotScale -benchtime 3x ./node/ticket
//
// cpu-s/op is the process's CPU time per op (the GC's included), less
// disturbed than ns/op by other users of a shared machine.
func BenchmarkSnapshotScale(b *testing.B) {
	for _, n := range scaleCounts(b) {
		f := scaleFSM(b, n)
		var snap bytes.Buffer
		if _, err := f.snapshotTo(&snap); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("write/%d", n), func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				snap.Reset()
				if _, err := f.snapshotTo(&snap); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(snap.Len()), "bytes")
		})
		b.Run(fmt.Sprintf("restore/%d", n), func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				g := New(testDelta)
				if err := g.Restore(bytes.NewReader(snap.Bytes())); err != nil {
					b.Fatal(err)
				}
				if g.Len() != n {
					b.Fatalf("restored %d tickets, want %d", g.Len(), n)
				}
			}
		})
	}
}
