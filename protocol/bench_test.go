package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

var benchSecret = []byte("tckclk-test-vector-secret-0123456789abcdef")

// BenchmarkHMACBaseline is the floor: HMAC-SHA-256 over the same 50 bytes
// with a prepared, reused HMAC state (no parsing, no pooling).
func BenchmarkHMACBaseline(b *testing.B) {
	r, _ := ParseResponseAny([]byte(goodLine))
	in := AppendMACInput(nil, &r)
	h := hmac.New(sha256.New, benchSecret)
	var sum [32]byte
	b.ReportAllocs()
	for b.Loop() {
		h.Reset()
		h.Write(in)
		h.Sum(sum[:0])
	}
}

// BenchmarkParseVerify is a full client-side check of one response line.
func BenchmarkParseVerify(b *testing.B) {
	key := NewKey(benchSecret)
	line := []byte(goodLine)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseVerify(line, testNonce, KeyRing{key}); err != nil {
			b.Fatal(err)
		}
	}
}

// ratioBlock is how many operations of one kind run before switching to the
// other: large enough that each side runs warm, small enough that noise from
// the machine falls on both.
const ratioBlock = 1024

// BenchmarkParseVerifyRatio runs ParseVerify and an HMAC-SHA-256 over the
// same 50 bytes alternately in one benchmark and reports full/baseline as
// "ratio", so machine noise falls on both sides. Two baselines:
//   - prepared: the floor — one hmac state reused with Reset, as Key does;
//   - fresh: hmac.New per message, what computing "an HMAC" costs in
//     straightforward code.
func BenchmarkParseVerifyRatio(b *testing.B) {
	key := NewKey(benchSecret)
	line := []byte(goodLine)
	r, _ := ParseResponseAny(line)
	in := AppendMACInput(nil, &r)
	var sum [32]byte
	h := hmac.New(sha256.New, benchSecret)
	baselines := []struct {
		name string
		mac  func()
	}{
		{"vs_prepared_hmac", func() { h.Reset(); h.Write(in); h.Sum(sum[:0]) }},
		{"vs_fresh_hmac", func() { m := hmac.New(sha256.New, benchSecret); m.Write(in); m.Sum(sum[:0]) }},
	}
	for _, bl := range baselines {
		b.Run(bl.name, func(b *testing.B) {
			var base, full int64
			b.ReportAllocs()
			for b.Loop() {
				t0 := nanotime()
				for range ratioBlock {
					bl.mac()
				}
				t1 := nanotime()
				for range ratioBlock {
					if _, err := ParseVerify(line, testNonce, KeyRing{key}); err != nil {
						b.Fatal(err)
					}
				}
				t2 := nanotime()
				base += t1 - t0
				full += t2 - t1
			}
			b.ReportMetric(float64(full)/float64(base), "ratio")
		})
	}
}

func BenchmarkEncodeSignedResponse(b *testing.B) {
	key := NewKey(benchSecret)
	r, _ := ParseResponseAny([]byte(goodLine))
	buf := make([]byte, 0, MaxLine+1)
	b.ReportAllocs()
	for b.Loop() {
		key.Sign(&r)
		buf = AppendResponse(buf[:0], &r)
	}
}
