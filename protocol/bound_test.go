package protocol

import (
	"math"
	"testing"
)

// SPEC §3.2: Δ ∈ 2..=60000.
func TestValidateDelta(t *testing.T) {
	for _, d := range []uint64{0, 1, 60001, math.MaxUint64} {
		if ValidateDelta(d) == nil {
			t.Errorf("Δ=%d accepted", d)
		}
	}
	for _, d := range []uint64{2, 3, 500, 60000} {
		if err := ValidateDelta(d); err != nil {
			t.Errorf("Δ=%d: %v", d, err)
		}
	}
}

// SPEC §3.2: healthy only while bound ≤ Δ/2.
func TestWithinHalfDelta(t *testing.T) {
	cases := []struct {
		b, d uint64
		ok   bool
	}{{0, 2, true}, {1, 2, true}, {2, 2, false}, {2, 5, true}, {3, 5, false}, {250, 500, true}, {251, 500, false},
		{30000, 60000, true}, {30001, 60000, false}, {math.MaxUint64, 60000, false}, {math.MaxUint64, math.MaxUint64, false}}
	for _, c := range cases {
		if got := WithinHalfDelta(c.b, c.d); got != c.ok {
			t.Errorf("bound %d Δ %d: %v", c.b, c.d, got)
		}
	}
}

func TestCeilMs(t *testing.T) {
	cases := map[uint64]uint64{0: 0, 1: 1, 999_999: 1, 1_000_000: 1, 1_000_001: 2, math.MaxUint64: math.MaxUint64/1_000_000 + 1}
	for ns, want := range cases {
		if got := CeilMs(ns); got != want {
			t.Errorf("CeilMs(%d)=%d want %d", ns, got, want)
		}
	}
}

// SPEC §3.1: error_bound = ceil_ms(rtt_ns + u×10^6 + |w1 − R×10^6| + 10^6),
// summed in ns and rounded up once, saturating; rtt and offset are each
// rounded up for their own limits.
func TestErrorBound(t *testing.T) {
	const R = 1767225600123
	const maxU = math.MaxUint64 / 1_000_000 // the largest u whose ns fit a u64
	cases := []struct {
		name         string
		s            Sample
		want         uint64
		rttMs, offMs uint64
		wantOK       bool
	}{
		{"exact", Sample{W1UnixNs: R * 1e6, ReferenceUnixMs: R}, 1, 0, 0, true},
		// 1.5 + 3 + 2.000001 + 1 = 7.500001 ms → 8 (rounded per term: 9)
		{"typical", Sample{RTTNs: 1_500_000, UncertaintyMs: 3, W1UnixNs: R*1e6 + 2_000_001, ReferenceUnixMs: R}, 8, 2, 3, true},
		// 1 ns + 1 ms + 1 ns + 1 ms → 3 (rounded per term: 4)
		{"local behind", Sample{RTTNs: 1, UncertaintyMs: 1, W1UnixNs: R*1e6 - 1, ReferenceUnixMs: R}, 3, 1, 1, true},
		{"on the ms boundary", Sample{RTTNs: 500_000, UncertaintyMs: 1, W1UnixNs: R*1e6 + 500_000, ReferenceUnixMs: R}, 3, 1, 1, true},
		{"one ns past it", Sample{RTTNs: 500_001, UncertaintyMs: 1, W1UnixNs: R*1e6 + 500_000, ReferenceUnixMs: R}, 4, 1, 1, true},
		{"wall before epoch", Sample{W1UnixNs: -1_000_000, ReferenceUnixMs: 0}, 2, 0, 1, true},
		{"R u64 max", Sample{W1UnixNs: R * 1e6, ReferenceUnixMs: math.MaxUint64}, math.MaxUint64, 0, math.MaxUint64 - R, false},
		{"R u64 max, wall negative", Sample{W1UnixNs: -1, ReferenceUnixMs: math.MaxUint64}, math.MaxUint64, 0, math.MaxUint64, false},
		{"u u64 max", Sample{W1UnixNs: R * 1e6, ReferenceUnixMs: R, UncertaintyMs: math.MaxUint64}, math.MaxUint64, 0, 0, false},
		{"u whose ns just fit", Sample{W1UnixNs: R * 1e6, ReferenceUnixMs: R, UncertaintyMs: maxU - 1}, maxU, 0, 0, true},
		{"u whose ns plus the truncation do not", Sample{W1UnixNs: R * 1e6, ReferenceUnixMs: R, UncertaintyMs: maxU}, math.MaxUint64, 0, 0, false},
		{"R zero, wall max", Sample{W1UnixNs: math.MaxInt64, ReferenceUnixMs: 0}, uint64(math.MaxInt64)/1e6 + 1 + 1, 0, uint64(math.MaxInt64)/1e6 + 1, true},
		{"wall min", Sample{W1UnixNs: math.MinInt64, ReferenceUnixMs: 0}, uint64(1<<63)/1e6 + 1 + 1, 0, uint64(1<<63)/1e6 + 1, true},
	}
	for _, c := range cases {
		got, rtt, off, ok := ErrorBound(c.s)
		if got != c.want || ok != c.wantOK || rtt != c.rttMs || off != c.offMs {
			t.Errorf("%s: got %d (rtt %d, offset %d) ok=%v, want %d (rtt %d, offset %d) ok=%v",
				c.name, got, rtt, off, ok, c.want, c.rttMs, c.offMs, c.wantOK)
		}
	}
}

func TestOffsetMsEdges(t *testing.T) {
	// largest R whose ×10^6 still fits 64 bits, and the first that does not
	const maxFit uint64 = math.MaxUint64 / 1_000_000
	if got, ok := OffsetMs(0, maxFit); !ok || got != maxFit {
		t.Fatalf("maxFit: %d %v", got, ok)
	}
	if got, ok := OffsetMs(0, maxFit+1); !ok || got != maxFit+1 {
		t.Fatalf("maxFit+1 (128-bit path): %d %v", got, ok)
	}
	if _, ok := OffsetMs(-1, math.MaxUint64); ok {
		t.Fatal("R=u64max, w<0 must overflow")
	}
}

// SPEC §3.2: bound(t) = ceil_ms(e_ns + |Δwall−Δmono| + ppm × Δmono / 10^6),
// one rounding at each evaluation.
func TestRunningBound(t *testing.T) {
	cases := []struct {
		name         string
		eNs          uint64
		dWall, dMono int64
		ppm          uint64
		want         uint64
	}{
		{"no time", 4_200_000, 0, 0, 500, 5},
		{"1s at 500ppm", 4_200_000, 1e9, 1e9, 500, 5},     // 4.2 + 0.5 = 4.7 → 5 (per term: 6)
		{"10s at 500ppm", 4_200_000, 10e9, 10e9, 500, 10}, // 4.2 + 5 = 9.2 → 10
		{"10s at 50ppm", 4_000_000, 10e9, 10e9, 50, 5},    // 4 + 0.5 → 5
		{"step 0.3ms + drift", 4_000_000, 1e9 + 3e5, 1e9, 500, 5},
		{"rollback 2ms", 4_000_000, 1e9 - 2e6, 1e9, 1, 7}, // 4 + 2 + 0.001 → 7
		{"exactly whole", 4_000_000, 1e9 + 5e5, 1e9, 500, 5},
		{"a drift of a fraction of a ns still counts", 4_000_000, 1, 1, 1, 5},
		{"a 65-bit sum does not wrap", math.MaxUint64 - 1, math.MaxInt64, math.MinInt64, 100000, 36893488147420}, // ceil((2^65 − 3) ns / 10^6)
		{"saturates", math.MaxUint64, math.MaxInt64, math.MaxInt64, math.MaxUint64, math.MaxUint64},
		{"huge elapsed", 0, math.MaxInt64, math.MaxInt64, 100000, 922337203686}, // ceil(1e5 × 9.22e18 ns / 1e12)
	}
	for _, c := range cases {
		if got := RunningBound(c.eNs, c.dWall, c.dMono, c.ppm); got != c.want {
			t.Errorf("%s: got %d want %d", c.name, got, c.want)
		}
	}
}

// SPEC §3.2: rollback is Δwall < −1 ms; step is |Δwall − Δmono| > 1 ms.
func TestRollbackAndStep(t *testing.T) {
	if IsRollback(-1_000_000) || !IsRollback(-1_000_001) || IsRollback(0) {
		t.Fatal("rollback threshold")
	}
	if IsStep(1e9+1e6, 1e9) || !IsStep(1e9+1e6+1, 1e9) || !IsStep(1e9-1e6-1, 1e9) || IsStep(math.MinInt64, math.MinInt64) {
		t.Fatal("step threshold")
	}
	if !IsStep(math.MaxInt64, math.MinInt64) {
		t.Fatal("step at extremes")
	}
}

func TestAddSat(t *testing.T) {
	if s, ok := AddSat(math.MaxUint64, 0); !ok || s != math.MaxUint64 {
		t.Fatal()
	}
	if s, ok := AddSat(math.MaxUint64, 1); ok || s != math.MaxUint64 {
		t.Fatal()
	}
	if AbsNs(math.MinInt64) != 1<<63 || AbsNs(-5) != 5 || AbsNs(7) != 7 {
		t.Fatal("AbsNs")
	}
}

func TestDriftMs(t *testing.T) {
	if DriftMs(0, math.MaxUint64) != 0 || DriftMs(1, 1) != 1 || DriftMs(1e6, 1e6) != 1 || DriftMs(1e6, 1e6+1) != 2 {
		t.Fatal("DriftMs")
	}
	if DriftMs(math.MaxUint64, math.MaxUint64) != math.MaxUint64 {
		t.Fatal("DriftMs saturation")
	}
}
