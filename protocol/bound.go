package protocol

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Δ limits (SPEC §3.2).
const (
	MinDeltaMs     = 2
	MaxDeltaMs     = 60000
	DefaultDeltaMs = 500
	nsPerMs        = 1_000_000
)

// ValidateDelta checks Δ ∈ 2..=60000 ms (SPEC §3.2). Outside that range a
// node refuses to start and refuses to restore a snapshot.
func ValidateDelta(deltaMs uint64) error {
	if deltaMs < MinDeltaMs || deltaMs > MaxDeltaMs {
		return fmt.Errorf("protocol: delta_ms %d outside %d..=%d", deltaMs, MinDeltaMs, MaxDeltaMs)
	}
	return nil
}

// WithinHalfDelta reports bound ≤ Δ/2, computed as 2×bound ≤ Δ without
// overflow: then any two healthy nodes differ by at most Δ.
func WithinHalfDelta(boundMs, deltaMs uint64) bool {
	return boundMs <= deltaMs/2
}

// CeilMs rounds a non-negative nanosecond span up to whole milliseconds.
func CeilMs(ns uint64) uint64 {
	q := ns / nsPerMs
	if ns%nsPerMs != 0 {
		q++
	}
	return q
}

// AbsNs returns |d| as a uint64 (|MinInt64| included).
func AbsNs(d int64) uint64 {
	if d < 0 {
		return uint64(-(d + 1)) + 1
	}
	return uint64(d)
}

// AddSat returns a+b, saturating at 2^64−1; ok is false on saturation.
func AddSat(a, b uint64) (sum uint64, ok bool) {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64, false
	}
	return s, true
}

// OffsetMs returns ceil_ms(|w1 − R×10^6|) for a wall time w1 (Unix ns) and a
// reference R (Unix ms), computed in 128 bits; ok is false when the result
// does not fit a u64.
func OffsetMs(w1UnixNs int64, refUnixMs uint64) (ms uint64, ok bool) {
	rHi, rLo := bits.Mul64(refUnixMs, nsPerMs) // R×10^6 as 128 bits
	var dHi, dLo uint64
	if w1UnixNs < 0 {
		// |w1 − R| = R + |w1|
		var c uint64
		dLo, c = bits.Add64(rLo, AbsNs(w1UnixNs), 0)
		dHi = rHi + c
	} else {
		w := uint64(w1UnixNs)
		if rHi == 0 && rLo <= w {
			dLo = w - rLo
		} else {
			var b uint64
			dLo, b = bits.Sub64(rLo, w, 0)
			dHi = rHi - b
		}
	}
	// ceil(d / 10^6) over 128 bits
	if dHi >= nsPerMs { // quotient would not fit 64 bits
		return math.MaxUint64, false
	}
	q, r := bits.Div64(dHi, dLo, nsPerMs)
	if r != 0 {
		if q == math.MaxUint64 {
			return math.MaxUint64, false
		}
		q++
	}
	return q, true
}

// Sample is the arithmetic input of SPEC §3.1 for one exchange.
type Sample struct {
	RTTNs           uint64 // m1 − m0 (monotonic)
	UncertaintyMs   uint64 // u
	W1UnixNs        int64  // wall time when the response LF arrived
	ReferenceUnixMs uint64 // R
}

// SampleError is SPEC §3.1's sum in nanoseconds, before its one rounding:
//
//	e_ns = rtt_ns + u×10^6 + |w1 − R×10^6| + 10^6      (the 10^6 is R's truncation)
//
// It also returns the offset term |w1 − R×10^6| in ns. ok is false when a
// term or the sum does not fit a u64 (an offset failure, never a wrap);
// both results are then MaxUint64.
func SampleError(s Sample) (eNs, offNs uint64, ok bool) {
	offNs, ok = offsetNs(s.W1UnixNs, s.ReferenceUnixMs)
	if !ok {
		return math.MaxUint64, math.MaxUint64, false
	}
	uHi, uNs := bits.Mul64(s.UncertaintyMs, nsPerMs)
	e, ok1 := AddSat(s.RTTNs, uNs)
	e, ok2 := AddSat(e, offNs)
	e, ok3 := AddSat(e, nsPerMs)
	if uHi != 0 || !ok1 || !ok2 || !ok3 {
		return math.MaxUint64, offNs, false
	}
	return e, offNs, true
}

// offsetNs is |w1 − R×10^6| in ns, in 128 bits; ok is false when it does
// not fit a u64.
func offsetNs(w1UnixNs int64, refUnixMs uint64) (uint64, bool) {
	rHi, rLo := bits.Mul64(refUnixMs, nsPerMs)
	if w1UnixNs < 0 { // |w1 − R| = R + |w1|
		lo, c := bits.Add64(rLo, AbsNs(w1UnixNs), 0)
		return lo, rHi+c == 0
	}
	w := uint64(w1UnixNs)
	if rHi == 0 && rLo <= w {
		return w - rLo, true
	}
	lo, b := bits.Sub64(rLo, w, 0)
	return lo, rHi-b == 0
}

// ErrorBound computes SPEC §3.1's error bound, the sum in ns rounded up
// once:
//
//	error_bound = ceil_ms(rtt_ns + u×10^6 + |w1 − R×10^6| + 10^6)
//
// with the rtt and offset terms each rounded up to ms for the limits they
// are compared with (max_rtt_ms, max_offset_ms). ok is false when a term or
// the sum does not fit a u64: that is an offset failure.
func ErrorBound(s Sample) (bound, rttMs, offsetMs uint64, ok bool) {
	eNs, offNs, ok := SampleError(s)
	rttMs = CeilMs(s.RTTNs)
	if !ok {
		off, _ := OffsetMs(s.W1UnixNs, s.ReferenceUnixMs)
		return math.MaxUint64, rttMs, off, false
	}
	return CeilMs(eNs), rttMs, CeilMs(offNs), true
}

// DriftMs returns ceil_ms(ppm × elapsed): the clock-rate error accumulated
// over elapsedNs at ppm parts per million, in 128 bits, saturating.
func DriftMs(ppm, elapsedNs uint64) uint64 {
	// ppm × ns / 10^6 = drift in ns; ceil to ms => ceil(ppm×ns / 10^12)
	return mulDivCeil(ppm, elapsedNs, 1_000_000_000_000)
}

// DriftNs returns ceil(ppm × elapsed / 10^6): the clock-rate error in ns
// accumulated over elapsedNs, in 128 bits, saturating (the agent's
// uncertainty sums its terms in ns before rounding them up once).
func DriftNs(ppm, elapsedNs uint64) uint64 {
	return mulDivCeil(ppm, elapsedNs, 1_000_000)
}

// mulDivCeil is ceil(a × b / div) over the 128-bit product, saturating at
// MaxUint64.
func mulDivCeil(a, b, div uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= div {
		return math.MaxUint64
	}
	q, r := bits.Div64(hi, lo, div)
	if r != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// RunningBound computes SPEC §3.2 at an evaluation instant, rounded up
// once:
//
//	bound(t) = ceil_ms(e_ns + |Δwall − Δmono| + max_drift_ppm × Δmono / 10^6)
//
// exactly (the drift term is not rounded to a whole ns first), where eNs is
// the sample's SampleError and Δwall, Δmono are measured from the sample to
// now; it saturates at 2^64−1. With Δwall = Δmono = 0 it is the sample's own
// error bound, ceil_ms(e_ns).
func RunningBound(eNs uint64, dWallNs, dMonoNs int64, ppm uint64) uint64 {
	// In units of 10^-6 ns: (e_ns + skew_ns)×10^6 + ppm×elapsed_ns, then
	// one ceiling division by 10^12 (= ns per ms × 10^6).
	sumLo, sumHi := bits.Add64(eNs, AbsDiff(dWallNs, dMonoNs), 0)
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
	if r != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// AbsDiff returns |a − b| without overflow.
func AbsDiff(a, b int64) uint64 {
	if a >= b {
		return uint64(a) - uint64(b)
	}
	return uint64(b) - uint64(a)
}

// StepThresholdNs and RollbackThresholdNs are the 1 ms allowances of SPEC
// §3.2 for the gap between reading the wall and the monotonic clock.
const (
	StepThresholdNs     = nsPerMs
	RollbackThresholdNs = nsPerMs
)

// IsRollback reports Δwall < −1 ms between two evaluations (SPEC §3.2).
func IsRollback(dWallNs int64) bool { return dWallNs < -RollbackThresholdNs }

// IsStep reports |Δwall − Δmono| > 1 ms (SPEC §3.2).
func IsStep(dWallNs, dMonoNs int64) bool { return AbsDiff(dWallNs, dMonoNs) > StepThresholdNs }

// FloorUnixMs and CeilUnixMs turn a wall time into Unix ms rounded down or
// up (SPEC §4 rounding); ok is false before 1970.
func FloorUnixMs(t time.Time) (ms uint64, ok bool) {
	ns := t.UnixNano()
	if ns < 0 {
		return 0, false
	}
	return uint64(ns) / nsPerMs, true
}

// CeilUnixMs: see FloorUnixMs.
func CeilUnixMs(t time.Time) (ms uint64, ok bool) {
	ns := t.UnixNano()
	if ns < 0 {
		return 0, false
	}
	return CeilMs(uint64(ns)), true
}
