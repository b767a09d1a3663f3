package clockhealth

import (
	"math"
	"math/bits"

	"github.com/tckclk/tckclk/protocol"
)

const nsPerMs = 1_000_000

// sampleError is SPEC §3.1's sum in nanoseconds, before its one rounding:
//
//	e_ns = rtt_ns + u×10^6 + |w1 − R×10^6| + 10^6
//
// It also returns the offset term |w1 − R×10^6| in ns. ok is false when a
// term or the sum does not fit a u64 (an offset failure, never a wrap).
func sampleError(rttNs, uMs uint64, w1UnixNs int64, refUnixMs uint64) (eNs, offNs uint64, ok bool) {
	offNs, ok = offsetNs(w1UnixNs, refUnixMs)
	if !ok {
		return math.MaxUint64, math.MaxUint64, false
	}
	uHi, uNs := bits.Mul64(uMs, nsPerMs)
	e, ok1 := protocol.AddSat(rttNs, uNs)
	e, ok2 := protocol.AddSat(e, offNs)
	e, ok3 := protocol.AddSat(e, nsPerMs) // R's truncation to whole ms
	return e, offNs, uHi == 0 && ok1 && ok2 && ok3
}

// offsetNs is |w1 − R×10^6| in ns, in 128 bits; ok is false when it does
// not fit a u64.
func offsetNs(w1UnixNs int64, refUnixMs uint64) (uint64, bool) {
	rHi, rLo := bits.Mul64(refUnixMs, nsPerMs)
	if w1UnixNs < 0 { // |w1 − R| = R + |w1|
		lo, c := bits.Add64(rLo, protocol.AbsNs(w1UnixNs), 0)
		return lo, rHi+c == 0
	}
	w := uint64(w1UnixNs)
	if rHi == 0 && rLo <= w {
		return w - rLo, true
	}
	lo, b := bits.Sub64(rLo, w, 0)
	return lo, rHi-b == 0
}

// runningBound is SPEC §3.2 at one evaluation, rounded up once:
//
//	bound(t) = ceil_ms(e_ns + |Δwall − Δmono| + max_drift_ppm × Δmono / 10^6)
//
// exactly (the drift term is not rounded to a whole ns first), with Δwall
// and Δmono measured from the sample; it saturates at 2^64−1. With Δwall =
// Δmono = 0 it is the sample's own error bound, ceil_ms(e_ns).
func runningBound(eNs uint64, dWallNs, dMonoNs int64, ppm uint64) uint64 {
	// In units of 10^-6 ns: (e_ns + skew_ns)×10^6 + ppm×elapsed_ns, then
	// one ceiling division by 10^12 (= ns per ms × 10^6).
	sumLo, sumHi := bits.Add64(eNs, protocol.AbsDiff(dWallNs, dMonoNs), 0)
	hi, lo := bits.Mul64(sumLo, 1_000_000)
	hi += sumHi * 1_000_000 // sumHi ≤ 1: no overflow
	var elapsed uint64
	if dMonoNs > 0 {
		elapsed = uint64(dMonoNs)
	}
	dHi, dLo := bits.Mul64(ppm, elapsed)
	var c uint64
	lo, c = bits.Add64(lo, dLo, 0)
	hi, c = bits.Add64(hi, dHi, c)
	const div = 1_000_000_000_000
	if c != 0 || hi >= div {
		return math.MaxUint64
	}
	q, r := bits.Div64(hi, lo, div)
	if r != 0 {
		if q == math.MaxUint64 {
			return q
		}
		q++
	}
	return q
}
