package protocol

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Edge cases found by mutation testing (docs/mutants.md): each test names
// the SPEC rule whose boundary a surviving mutant showed was unguarded.

// SPEC §1.1: a line is at most 256 bytes without the LF. A 256-byte line
// that is wrong in some other way is judged on that fault (format), not on
// its size; 257 bytes is size.
func TestLine256IsNotSize(t *testing.T) {
	req256 := "TCKCLK 2 " + strings.Repeat("A", MaxLine-len("TCKCLK 2 "))
	if _, err := ParseRequest([]byte(req256)); !hasReason(err, ReasonFormat) {
		t.Fatalf("256-byte request: %v, want format", err)
	}
	if _, err := ParseRequest([]byte(req256 + "A")); !hasReason(err, ReasonSize) {
		t.Fatalf("257-byte request: %v, want size", err)
	}
	resp256 := goodLine + strings.Repeat("0", MaxLine-len(goodLine))
	if _, err := ParseResponse([]byte(resp256), testNonce); !hasReason(err, ReasonFormat) {
		t.Fatalf("256-byte response: %v, want format", err)
	}
}

// SPEC §1.5 (field count): any number of extra fields is format, never a
// panic or an out-of-range write.
func TestManyFields(t *testing.T) {
	for extra := 1; extra <= 12; extra++ {
		tail := strings.Repeat(" x", extra)
		if _, err := ParseRequest([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw" + tail)); !hasReason(err, ReasonFormat) {
			t.Fatalf("request with %d extra fields: %v", extra, err)
		}
		if _, err := ParseResponse([]byte(goodLine+tail), testNonce); !hasReason(err, ReasonFormat) {
			t.Fatalf("response with %d extra fields: %v", extra, err)
		}
	}
}

// SPEC §1.2: every canonical number, the digit 9 and u64 max included, is
// read by the fast path too (it falls back to the ordered checks only on
// doubt; a fast path that doubts valid lines hides its own bugs and loses
// its speed).
func TestFastPathAcceptsCanonicalNumbers(t *testing.T) {
	for _, num := range []string{"0", "9", "19", "99999", "9999999999999999999", "10000000000000000000",
		"18446744073709551615", "18446744073709551609", "17999999999999999999"} {
		for field := 3; field <= 6; field++ {
			if field == 5 {
				continue // synced
			}
			f := strings.Split(goodLine, " ")
			f[field] = num
			line := []byte(strings.Join(f, " "))
			var fast, slow Response
			if err := parseResponseOrdered(&slow, line); err != nil {
				t.Fatalf("%q: ordered checks refuse it: %v", line, err)
			}
			if !parseResponseFast(&fast, line) || fast != slow {
				t.Fatalf("%q: fast path refuses a canonical line or reads %+v, ordered %+v", line, fast, slow)
			}
		}
	}
}

// SPEC §3.1: ceil_ms(|w1 − R×10^6|) is exact in 128 bits, including a carry
// out of the low word (w1 < 0), a borrow (R×10^6 ≥ 2^64 with w1 above its
// low word) and a quotient that just does not fit (overflow, no panic).
func TestOffsetMsMatchesBigInt(t *testing.T) {
	const maxFit = math.MaxUint64 / 1_000_000
	type tc struct {
		w int64
		r uint64
	}
	edge := []tc{
		{0, 0}, {1, 0}, {-1, 0}, {999_999, 0}, {1_000_000, 1}, {1_000_001, 1},
		{-1_000_000, math.MaxUint64},    // |d| = 10^6 × 2^64: the quotient is 2^64
		{-999_999, math.MaxUint64},      // just below
		{-1, math.MaxUint64},            // carry
		{1_000_000_000, maxFit + 1},     // borrow: R×10^6 = 2^64 + 290448384
		{math.MaxInt64, maxFit + 1},     // borrow, large w
		{math.MaxInt64, math.MaxUint64}, // borrow at the top
		{math.MinInt64, math.MaxUint64}, // carry at the top
		{math.MinInt64, 0}, {math.MaxInt64, 0},
	}
	rng := rand.New(rand.NewPCG(17, 3))
	for range 20000 {
		w := int64(rng.Uint64())
		r := rng.Uint64()
		switch rng.IntN(3) {
		case 0:
			r >>= rng.IntN(64)
		case 1:
			r = uint64(max(w, -w)/1_000_000) + rng.Uint64N(3) - 1 // near |w|
		}
		edge = append(edge, tc{w, r})
	}
	million := big.NewInt(1_000_000)
	limit := new(big.Int).SetUint64(math.MaxUint64)
	for _, c := range edge {
		d := new(big.Int).Sub(big.NewInt(c.w), new(big.Int).Mul(new(big.Int).SetUint64(c.r), million))
		d.Abs(d)
		q, m := new(big.Int).QuoRem(d, million, new(big.Int))
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		got, ok := OffsetMs(c.w, c.r)
		if q.Cmp(limit) > 0 {
			if ok || got != math.MaxUint64 {
				t.Fatalf("OffsetMs(%d, %d) = %d %v; the exact %v does not fit: want overflow", c.w, c.r, got, ok, q)
			}
			continue
		}
		if !ok || got != q.Uint64() {
			t.Fatalf("OffsetMs(%d, %d) = %d %v, exact %v", c.w, c.r, got, ok, q)
		}
	}
}

// SPEC §3.2: ceil_ms(max_drift_ppm × elapsed) is exact in 128 bits and
// saturates (no panic) when the product's ms do not fit 64 bits.
func TestDriftMsMatchesBigInt(t *testing.T) {
	type tc struct{ ppm, ns uint64 }
	edge := []tc{{0, 0}, {1, 999_999_999_999}, {1, 1_000_000_000_000}, {1, 1_000_000_000_001},
		{1_000_000 << 32, 1_000_000 << 32}, // product = 10^12 × 2^64: the quotient is 2^64
		{1_000_000 << 32, 1_000_000<<32 - 1},
		{math.MaxUint64, math.MaxUint64}, {100000, math.MaxUint64},
		{1_000_000_000_001, 18446744073691104871}, // ⌊product/10^12⌋ = 2^64−1 with a remainder: the ceiling is 2^64
	}
	rng := rand.New(rand.NewPCG(5, 8))
	for range 20000 {
		edge = append(edge, tc{rng.Uint64() >> rng.IntN(64), rng.Uint64() >> rng.IntN(64)})
	}
	tera := big.NewInt(1_000_000_000_000)
	limit := new(big.Int).SetUint64(math.MaxUint64)
	for _, c := range edge {
		p := new(big.Int).Mul(new(big.Int).SetUint64(c.ppm), new(big.Int).SetUint64(c.ns))
		q, m := new(big.Int).QuoRem(p, tera, new(big.Int))
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		if q.Cmp(limit) > 0 {
			q = limit
		}
		if got := DriftMs(c.ppm, c.ns); got != q.Uint64() {
			t.Fatalf("DriftMs(%d, %d) = %d, exact %v", c.ppm, c.ns, got, q)
		}
	}
}

// DESIGN §6: errors are "protocol: REASON[: detail][: cause]".
func TestErrorText(t *testing.T) {
	cases := []struct {
		e    *Error
		want string
	}{
		{&Error{Reason: ReasonSize}, "protocol: size"},
		{&Error{Reason: ReasonFormat, Detail: "bad byte"}, "protocol: format: bad byte"},
		{&Error{Reason: ReasonIO, Err: errors.New("reset")}, "protocol: io: reset"},
		{&Error{Reason: ReasonIO, Detail: "reading line", Err: errors.New("reset")}, "protocol: io: reading line: reset"},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.e, got, c.want)
		}
	}
}

// readOnce returns its data in one Read and fails the test on any later Read.
type readOnce struct {
	t    *testing.T
	data string
	done bool
}

func (r *readOnce) Read(p []byte) (int, error) {
	if r.done {
		r.t.Error("Read called after the chunk that held the LF (SPEC §1.1: never read past the LF)")
		return 0, errors.New("read past the LF")
	}
	r.done = true
	return copy(p, r.data), nil
}

// SPEC §1.1: an empty line is a line (the LF at index 0 ends the reading at
// once), and bytes after it are seen as trailing (a client's format error).
func TestLineReaderLFAtZero(t *testing.T) {
	lr := NewLineReader(&readOnce{t: t, data: "\n"})
	if line, err := lr.ReadLine(); err != nil || len(line) != 0 || lr.Extra() != 0 {
		t.Fatalf("\"\\n\": %q %v extra %d", line, err, lr.Extra())
	}
	lr = NewLineReader(&readOnce{t: t, data: "\nabc"})
	if line, err := lr.ReadLine(); err != nil || len(line) != 0 {
		t.Fatalf("\"\\nabc\": %q %v", line, err)
	}
	if lr.Extra() != 3 {
		t.Fatalf("extra %d, want 3", lr.Extra())
	}
	if err := lr.ExpectEOF(); !hasReason(err, ReasonFormat) {
		t.Fatalf("ExpectEOF after trailing bytes: %v, want format", err)
	}
}

// SPEC §1.1: no CR anywhere, the first byte included.
func TestLineReaderCRFirst(t *testing.T) {
	if _, err := NewLineReader(strings.NewReader("\rabc\n")).ReadLine(); !hasReason(err, ReasonFormat) {
		t.Fatalf("CR at index 0: %v, want format", err)
	}
}

// SPEC §1.5 (field count): a line that ends inside a number, long enough
// for the fast path to read it, is format (no read past the end).
func TestLineEndingInANumber(t *testing.T) {
	for _, tail := range []string{" 1 1 1 ", " 1 1 ", " 1 ", " "} {
		prefix := "TCKCLK 2 AAECAwQFBgcICQoLDA0ODw" + tail
		for n := 1; len(prefix)+n <= MaxLine; n += 7 {
			line := prefix + strings.Repeat("7", n)
			if _, err := ParseResponse([]byte(line), testNonce); !hasReason(err, ReasonFormat) {
				t.Fatalf("%q: %v, want format", line, err)
			}
		}
	}
}

// SPEC §1.2 (strict base64url): decodeB64 agrees with the standard
// library's strict decoder for every length, not only the nonce's and the
// MAC's, so its 8- and 4-character steps hand over at every position.
func TestDecodeB64EveryLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for size := 1; size <= 64; size++ {
		chars := (size*8 + 5) / 6
		for range 50 {
			raw := make([]byte, size)
			for i := range raw {
				raw[i] = byte(rng.Uint32())
			}
			src := []byte(b64.EncodeToString(raw))
			if len(src) != chars {
				t.Fatalf("size %d: %d chars", size, len(src))
			}
			dst := make([]byte, size)
			if !decodeB64(dst, src, chars) || string(dst) != string(raw) {
				t.Fatalf("size %d: %q decoded to %x, want %x", size, src, dst, raw)
			}
			src[rng.IntN(chars)] = '='
			if decodeB64(dst, src, chars) {
				t.Fatalf("size %d: %q accepted", size, src)
			}
		}
	}
}

// SPEC §1.5 (bytes): 0x21–0x7E are allowed bytes, '~' (0x7E) and '!'
// (0x21) included, so a line whose only fault is a version of "~" or "!"
// fails on the version, not on its bytes.
func TestTildeAndBangArePrintable(t *testing.T) {
	for _, v := range []string{"~", "!"} {
		if _, err := ParseRequest([]byte("TCKCLK " + v + " AAECAwQFBgcICQoLDA0ODw")); !hasReason(err, ReasonVersion) {
			t.Fatalf("request with version %q: %v, want version", v, err)
		}
		if _, err := ParseResponse([]byte(strings.Replace(goodLine, " 2 ", " "+v+" ", 1)), testNonce); !hasReason(err, ReasonVersion) {
			t.Fatalf("response with version %q: %v, want version", v, err)
		}
	}
}

// SPEC §4 (rounding): a Grant's or Renew's now is the wall time rounded up
// to ms, an Expire's rounded down; before 1970 there is no Unix ms.
func TestUnixMsRounding(t *testing.T) {
	base := time.Unix(1_767_225_600, 0) // a whole second
	for _, c := range []struct {
		t           time.Time
		floor, ceil uint64
		ok          bool
	}{
		{time.Unix(0, 0), 0, 0, true},
		{time.Unix(0, 1), 0, 1, true},
		{base, 1_767_225_600_000, 1_767_225_600_000, true},
		{base.Add(time.Nanosecond), 1_767_225_600_000, 1_767_225_600_001, true},
		{base.Add(time.Millisecond - time.Nanosecond), 1_767_225_600_000, 1_767_225_600_001, true},
		{base.Add(time.Millisecond), 1_767_225_600_001, 1_767_225_600_001, true},
		{time.Unix(0, -1), 0, 0, false},
		{time.Unix(-1, 0), 0, 0, false},
	} {
		f, fok := FloorUnixMs(c.t)
		g, gok := CeilUnixMs(c.t)
		if f != c.floor || g != c.ceil || fok != c.ok || gok != c.ok {
			t.Errorf("%v: floor %d %v, ceil %d %v; want %d, %d, %v", c.t, f, fok, g, gok, c.floor, c.ceil, c.ok)
		}
	}
}
