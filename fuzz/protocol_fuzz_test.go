package fuzz

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/protocol"
)

var fuzzNonce = protocol.Nonce{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

func reasonOf(t *testing.T, err error) protocol.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	r, ok := protocol.ReasonOf(err)
	if !ok {
		t.Fatalf("error without a SPEC §1.5 reason: %v", err)
	}
	return r
}

// FuzzParseRequest: never panics; accepted requests re-encode exactly; the
// naive parser agrees on accept/reject, the reason and the nonce.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw"))
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODx"))
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := protocol.ParseRequest(line)
		got := reasonOf(t, err)
		nonce, want := naiveParseRequest(string(line))
		if got != want {
			t.Fatalf("%q: protocol says %q, naive says %q (%v)", line, got, want, err)
		}
		if err != nil {
			return
		}
		if req.Nonce != nonce {
			t.Fatalf("%q: nonce %x vs naive %x", line, req.Nonce, nonce)
		}
		if enc := protocol.EncodeRequest(req); !bytes.Equal(enc, append(append([]byte(nil), line...), '\n')) {
			t.Fatalf("round trip: %q -> %q", line, enc)
		}
	})
}

// FuzzParseResponse: never panics; exactly one reason in SPEC §1.5 order,
// identical to the naive parser's; accepted responses re-encode exactly and
// carry the same values; the MAC check comes only after the nonce check,
// and CheckResponse accepts a parsed line iff the naive HMAC of SPEC §1.3
// (naiveMAC, crypto/hmac over the 50 bytes built by hand) verifies it;
// Challenge.ParseVerify judges every line as CheckResponse does.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 1767225600123 3 1 812 rVusL1GxDVk7IWEilpKLF9xYXWkm7-_TF8g-w3xLszk"))
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 18446744073709551615 0 0 0 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
	secret := []byte("tckclk-test-vector-secret-0123456789abcdef")
	key := protocol.NewKey(secret)
	ch := protocol.NewChallenge(fuzzNonce)
	f.Fuzz(func(t *testing.T, line []byte) {
		resp, err := protocol.ParseResponse(line, fuzzNonce)
		got := reasonOf(t, err)
		naive := naiveParseResponse(string(line), fuzzNonce)
		if got != naive.reason {
			t.Fatalf("%q: protocol says %q, naive says %q (%v)", line, got, naive.reason, err)
		}
		full := reasonOf(t, protocol.CheckResponse(line, fuzzNonce, protocol.KeyRing{key}))
		if cr, cerr := ch.ParseVerify(line, protocol.KeyRing{key}); reasonOf(t, cerr) != full || cerr == nil && cr != resp {
			t.Fatalf("%q: Challenge.ParseVerify says %q %+v, CheckResponse %q", line, reasonOf(t, cerr), cr, full)
		}
		if err != nil {
			if full != got {
				t.Fatalf("%q: CheckResponse says %q, ParseResponse %q", line, full, got)
			}
			return
		}
		if resp != naive.resp {
			t.Fatalf("%q: values %+v vs naive %+v", line, resp, naive.resp)
		}
		if full != "" && full != protocol.ReasonMAC {
			t.Fatalf("%q: parsed but CheckResponse says %q", line, full)
		}
		if macOK := naiveMACValid(secret, naive.resp); macOK != (full == "") {
			t.Fatalf("%q: CheckResponse says %q, the naive HMAC says valid=%v", line, full, macOK)
		}
		if enc := protocol.EncodeResponse(&resp); !bytes.Equal(enc, append(append([]byte(nil), line...), '\n')) {
			t.Fatalf("round trip: %q -> %q", line, enc)
		}
		any, err := protocol.ParseResponseAny(line)
		if err != nil || any != resp {
			t.Fatalf("ParseResponseAny disagrees: %v", err)
		}
	})
}

// chunkReader returns data in pieces whose sizes come from the fuzzer, then
// a final error (EOF or a deadline).
type chunkReader struct {
	data  []byte
	sizes []byte
	final error
	reads int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.final
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = int(c.sizes[0])%32 + 1
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	c.reads++
	return n, nil
}

type deadline struct{}

func (deadline) Error() string { return "deadline" }
func (deadline) Timeout() bool { return true }

// FuzzLineReader: whatever the bytes and however they are split, the line
// reader reads at most 257 bytes before deciding, and its verdict matches a
// naive reading of the whole input.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n"), []byte{3, 5}, false)
	f.Add([]byte("abc\nxyz"), []byte{}, true)
	f.Add(bytes.Repeat([]byte("A"), 300), []byte{31}, false)
	f.Fuzz(func(t *testing.T, data, sizes []byte, timeout bool) {
		final := error(io.EOF)
		if timeout {
			final = deadline{}
		}
		cr := &chunkReader{data: data, sizes: sizes, final: final}
		lr := protocol.NewLineReader(cr)
		line, err := lr.ReadLine()
		consumed := len(data) - len(cr.data)
		if consumed > protocol.MaxLine+1 {
			t.Fatalf("read %d bytes before deciding", consumed)
		}

		// naive verdict
		lf := bytes.IndexByte(data, '\n')
		var want protocol.Reason
		switch {
		case lf >= 0 && lf <= protocol.MaxLine:
			if bytes.IndexByte(data[:lf], '\r') >= 0 {
				want = protocol.ReasonFormat
			}
		case len(data) > protocol.MaxLine:
			want = protocol.ReasonSize
		case timeout:
			want = protocol.ReasonTimeout
		default:
			want = protocol.ReasonFormat
		}
		if got := reasonOf(t, err); got != want {
			t.Fatalf("%q (sizes %v): got %q (%v), want %q", data, sizes, got, err, want)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(line, data[:lf]) {
			t.Fatalf("line %q, want %q", line, data[:lf])
		}
		if lr.Extra() != consumed-lf-1 {
			t.Fatalf("Extra %d, consumed %d, lf %d", lr.Extra(), consumed, lf)
		}
		eof := lr.ExpectEOF()
		switch {
		case len(data) > lf+1:
			if reasonOf(t, eof) != protocol.ReasonFormat {
				t.Fatalf("trailing bytes not reported: %v", eof)
			}
		case timeout:
			if reasonOf(t, eof) != protocol.ReasonTimeout {
				t.Fatalf("deadline while waiting for EOF: %v", eof)
			}
		default:
			if eof != nil {
				t.Fatalf("clean EOF reported as %v", eof)
			}
		}
		var pe *protocol.Error
		if eof != nil && !errors.As(eof, &pe) {
			t.Fatal("untyped error")
		}
	})
}

// FuzzParseVerify builds correctly signed responses from fuzzed fields (the
// naive MAC, base64 and decimal of the standard library: nothing of
// protocol's), signed by one key of a ring, the other, or a key outside it,
// optionally with one byte changed and the nonce expected differently; then
// ParseVerify must give the reason and values the naive parser and naive MAC
// give, and Challenge.ParseVerify the same as ParseVerify. Mutated-line targets rarely carry a valid MAC; this one reaches
// ParseVerify's accepting path with every shape of number and nonce.
func FuzzParseVerify(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, uint64(1767225600123), uint64(3), true, uint64(812), uint8(0), uint16(0), byte(0), false)
	f.Add([]byte{0xff, 0xfb, 0xef}, uint64(1<<64-1), uint64(0), false, uint64(1e19), uint8(5), uint16(40), byte('0'), false)
	f.Add([]byte{0x3e, 0x3f}, uint64(0), uint64(9), true, uint64(10), uint8(2), uint16(0), byte(0), true)
	secrets := [][]byte{
		[]byte("tckclk-test-vector-secret-0123456789abcdef"),
		[]byte("tckclk-next-secret-0123456789abcdef-rotation"),
		[]byte("tckclk-other-secret-0123456789abcdef-foreign"),
	}
	keys := []*protocol.Key{protocol.NewKey(secrets[0]), protocol.NewKey(secrets[1])}
	f.Fuzz(func(t *testing.T, nonce []byte, ref, unc uint64, synced bool, age uint64, signer uint8, pos uint16, b byte, wrongNonce bool) {
		r := protocol.Response{ReferenceUnixMs: ref, UncertaintyMs: unc, Synced: synced, SourceAgeMs: age}
		copy(r.Nonce[:], nonce)
		r.MAC = naiveMAC(secrets[int(signer)%3], r)
		ring := protocol.KeyRing{keys[0], keys[1]}
		if signer&4 != 0 {
			ring = ring[:1]
		}
		s := "0"
		if synced {
			s = "1"
		}
		line := []byte(strings.Join([]string{"TCKCLK", "2", strictB64.EncodeToString(r.Nonce[:]),
			strconv.FormatUint(ref, 10), strconv.FormatUint(unc, 10), s, strconv.FormatUint(age, 10),
			strictB64.EncodeToString(r.MAC[:])}, " "))
		if pos > 0 {
			line[int(pos)%len(line)] = b
		}
		want := r.Nonce
		if wrongNonce {
			want[15] ^= 1
		}

		got, err := protocol.ParseVerify(line, want, ring)
		ch := protocol.NewChallenge(want)
		if cgot, cerr := ch.ParseVerify(line, ring); reasonOf(t, cerr) != reasonOf(t, err) || cgot != got {
			t.Fatalf("%q: Challenge.ParseVerify says %q %+v, ParseVerify %q %+v", line, reasonOf(t, cerr), cgot, reasonOf(t, err), got)
		}
		naive := naiveParseResponse(string(line), want)
		if naive.reason == "" && !naiveMACValid(secrets[0], naive.resp) && (len(ring) == 1 || !naiveMACValid(secrets[1], naive.resp)) {
			naive.reason = protocol.ReasonMAC
		}
		if reason := reasonOf(t, err); reason != naive.reason {
			t.Fatalf("%q: ParseVerify says %q (%v), naive %q", line, reason, err, naive.reason)
		}
		if err == nil && got != naive.resp {
			t.Fatalf("%q: values %+v vs naive %+v", line, got, naive.resp)
		}
		if err != nil && got != (protocol.Response{}) {
			t.Fatalf("%q: rejected with values %+v", line, got)
		}
	})
}
