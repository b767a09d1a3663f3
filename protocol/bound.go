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

// ErrorBound computes SPEC §3.1:
//
//	error_bound = ceil_ms(rtt) + u + ceil_ms(|w1 − R×10^6|) + 1
//
// in saturating u64. It also returns the rtt and offset terms (ms). ok is
// false when any term or the sum overflows: that is an offset failure.
func ErrorBound(s Sample) (bound, rttMs, offsetMs uint64, ok bool) {
	rttMs = CeilMs(s.RTTNs)
	offsetMs, ok = OffsetMs(s.W1UnixNs, s.ReferenceUnixMs)
	b, ok1 := AddSat(rttMs, s.UncertaintyMs)
	b, ok2 := AddSat(b, offsetMs)
	b, ok3 := AddSat(b, 1)
	return b, rttMs, offsetMs, ok && ok1 && ok2 && ok3
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

// RunningBound computes SPEC §3.2 at an evaluation instant:
//
//	bound(t) = error_bound + |Δwall − Δmono| + ceil_ms(max_drift_ppm × (t − t_sample))
//
// with Δwall, Δmono measured from the sample to now, the whole rounded up to
// ms, saturating at 2^64−1.
func RunningBound(errorBoundMs uint64, dWallNs, dMonoNs int64, ppm uint64) uint64 {
	skew := CeilMs(AbsDiff(dWallNs, dMonoNs))
	var elapsed uint64
	if dMonoNs > 0 {
		elapsed = uint64(dMonoNs)
	}
	b, _ := AddSat(errorBoundMs, skew)
	b, _ = AddSat(b, DriftMs(ppm, elapsed))
	return b
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
