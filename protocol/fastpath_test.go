package protocol

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// signedLine is a canonical response line signed by a key, with the nonce
// it answers.
type signedLine struct {
	line  []byte
	nonce Nonce
}

// signedLines returns canonical responses signed by key: the edges of every
// number field (1 to 20 digits, u64 max), both synced values, and nonces
// whose characters cover the whole alphabet, '-' and '_' included.
func signedLines(key *Key) []signedLine {
	nums := []uint64{0, 1, 9, 10, 99, 100, 12345678, 99999999, 100000000, 1767225600123,
		9999999999999999, 10000000000000000, 9999999999999999999, 10000000000000000000,
		18446744073709551609, 1<<64 - 1}
	var lines []signedLine
	for i, v := range nums {
		var n Nonce
		for j := range n {
			n[j] = byte(i*53 + j*251) // every 6-bit value appears across the nonces
		}
		for _, r := range []Response{
			{Nonce: n, ReferenceUnixMs: v, UncertaintyMs: 3, Synced: true, SourceAgeMs: 812},
			{Nonce: n, ReferenceUnixMs: 1767225600123, UncertaintyMs: v, SourceAgeMs: nums[len(nums)-1-i]},
			{Nonce: Nonce{0xff, 0xff, 0xff, 0xfb, 0xef, 0xbe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, SourceAgeMs: v},
		} {
			key.Sign(&r)
			line := EncodeResponse(&r)
			lines = append(lines, signedLine{line[:len(line)-1], r.Nonce})
		}
	}
	return lines
}

// SPEC §1.5: ParseVerify's accept-only path never accepts a line the
// ordered checks reject, accepts every valid line, and reads the same
// values; every single-byte change of a valid line, and a wrong nonce, is
// judged as the ordered checks judge it, reason included.
func TestParseVerifyFastAgrees(t *testing.T) {
	key := NewKey(benchSecret)
	ring := KeyRing{key}
	valid := signedLines(key)
	var changed []signedLine
	for _, s := range valid[:9] {
		l := s.line
		for i := range l {
			for _, c := range []byte{' ', '0', '1', '9', 'A', 'B', 'a', '-', '_', '=', '+', '/', '\x00', 0x80, 0xff} {
				if l[i] == c {
					continue
				}
				b := append([]byte(nil), l...)
				b[i] = c
				changed = append(changed, signedLine{b, s.nonce})
			}
		}
		other := s.nonce
		other[15] ^= 1
		changed = append(changed, signedLine{l[:len(l)-1], s.nonce}, signedLine{append(append([]byte(nil), l...), 'A'), s.nonce},
			signedLine{l[1:], s.nonce}, signedLine{l, other})
	}
	accepted := 0
	for k, s := range append(valid, changed...) {
		var fast Response
		c := NewChallenge(s.nonce)
		fok := parseVerifyFast(&fast, s.line, &c, ring)
		slow, serr := parseVerifyOrdered(s.line, s.nonce, ring)
		if fok && serr != nil {
			t.Fatalf("fast accepts what ordered rejects (%v): %q", serr, s.line)
		}
		if k < len(valid) && !fok {
			t.Fatalf("fast refuses a valid line (ordered: %v): %q", serr, s.line)
		}
		if fok {
			accepted++
			if fast != slow {
				t.Fatalf("values differ for %q: %+v vs %+v", s.line, fast, slow)
			}
		}
		got, gerr := ParseVerify(s.line, s.nonce, ring)
		if r1, r2 := reasonOrEmpty(gerr), reasonOrEmpty(serr); r1 != r2 || got != slow {
			t.Fatalf("%q: ParseVerify says %q %+v, the ordered checks %q %+v", s.line, r1, got, r2, slow)
		}
	}
	if accepted != len(valid) {
		t.Fatalf("%d lines accepted, %d valid: a change went unnoticed", accepted, len(valid))
	}
}

func reasonOrEmpty(err error) Reason {
	r, _ := ReasonOf(err)
	return r
}

// SPEC §1.2 (number), §1.5: the accept-only path reads exactly the
// canonical decimals up to 2^64−1 in each number field, as the ordered
// checks do, for numbers of every length and for non-digits in every place.
func TestReadNumbersAgrees(t *testing.T) {
	cases := []string{"0", "00", "01", "1", "9", "10", "12345678", "123456789", "1234567890123456",
		"12345678901234567", "9999999999999999999", "10000000000000000000", "18446744073709551615",
		"18446744073709551616", "18446744073709551620", "19000000000000000000", "99999999999999999999",
		"100000000000000000000", "000000000000000000000", "", "-1", "+1", "1a", "a", ":", "/", "1\x80", "\xb0",
		"1 2", "0 0", "2", "1 ", " 1"}
	rng := rand.New(rand.NewPCG(3, 4))
	num := func() string {
		if rng.IntN(2) == 0 {
			return strconv.FormatUint(rng.Uint64()>>rng.IntN(64), 10)
		}
		var sb strings.Builder
		for range rng.IntN(22) + 1 {
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
		return sb.String()
	}
	var lines []string
	for _, c := range cases {
		for field := 3; field <= 6; field++ {
			f := strings.Split(goodLine, " ")
			f[field] = c
			lines = append(lines, strings.Join(f, " "))
		}
	}
	for range 20000 {
		f := strings.Split(goodLine, " ")
		f[3], f[4], f[5], f[6] = num(), num(), []string{"0", "1"}[rng.IntN(2)], num()
		lines = append(lines, strings.Join(f, " "))
	}
	accepted := 0
	for _, l := range lines {
		var fast, slow Response
		fok := parseResponseFast(&fast, []byte(l))
		serr := parseResponseOrdered(&slow, []byte(l))
		switch {
		case fok && (serr != nil || fast != slow):
			t.Fatalf("%q: fast reads %+v, ordered %+v %v", l, fast, slow, serr)
		case !fok && serr == nil:
			t.Fatalf("%q: fast refuses a canonical line", l)
		case fok:
			accepted++
		}
	}
	if accepted < 5000 {
		t.Fatalf("only %d lines accepted: the table does not exercise the fast path", accepted)
	}
	// the longest numbers in every field at once
	long := strings.Split(goodLine, " ")
	long[3], long[4], long[6] = "18446744073709551615", "18446744073709551615", "18446744073709551615"
	var r Response
	if !parseResponseFast(&r, []byte(strings.Join(long, " "))) || r.SourceAgeMs != 1<<64-1 || r.ReferenceUnixMs != 1<<64-1 {
		t.Fatalf("three u64 max: %+v", r)
	}
}

// SPEC §1.4: ParseVerify passes a MAC of either key of a ring, whatever
// the order and with nil entries, and returns that MAC; a MAC of neither is
// mac, and the accept-only path agrees.
func TestParseVerifyKeyRing(t *testing.T) {
	a, b := NewKey([]byte("old-secret-0123456789abcdef012345")), NewKey([]byte("new-secret-0123456789abcdef012345"))
	other := NewKey([]byte("other-secret-0123456789abcdef0123"))
	for _, signer := range []*Key{a, b, other} {
		r := Response{Nonce: testNonce, ReferenceUnixMs: 1767225600123, UncertaintyMs: 2, Synced: true, SourceAgeMs: 7}
		signer.Sign(&r)
		line := EncodeResponse(&r)
		line = line[:len(line)-1]
		for _, ring := range []KeyRing{{a, b}, {b, a}, {nil, a, nil, b}, {a}, {}, {nil}} {
			want := signer != other && (slices.Contains(ring, signer))
			var fast Response
			c := NewChallenge(testNonce)
			if ok := parseVerifyFast(&fast, line, &c, ring); ok != want || ok && fast != r {
				t.Fatalf("ring of %d, signer %p: fast path %v %+v", len(ring), signer, ok, fast)
			}
			got, err := ParseVerify(line, testNonce, ring)
			if want && (err != nil || got != r) || !want && !hasReason(err, ReasonMAC) {
				t.Fatalf("ring of %d, signer %p: %+v %v", len(ring), signer, got, err)
			}
		}
	}
}

// oneCharChanges calls fn with every copy of text that has one of its first
// n bytes replaced by a base64url character or by a byte outside the
// alphabet.
func oneCharChanges(text []byte, n int, fn func([]byte)) {
	for i := range n {
		for _, c := range []byte("AQgwBCDEabcz09-_=+/.\x00\x80\xff") {
			b := append([]byte(nil), text...)
			b[i] = c
			fn(b)
		}
	}
}

func randomFill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// SPEC §1.2 (base64url, strict): the unrolled MAC decoder agrees with
// decodeB64 (itself checked against encoding/base64) on every
// one-character change of random MACs.
func TestDecodeMACMatchesDecodeB64(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		var m MAC
		randomFill(rng, m[:])
		oneCharChanges([]byte(m.String()), MACChars, func(b []byte) {
			var fast, slow MAC
			fok := decodeMAC(&fast, (*[MACChars]byte)(b))
			sok := decodeB64(slow[:], b, MACChars)
			if fok != sok || fok && fast != slow {
				t.Fatalf("%q: decodeMAC %x %v, decodeB64 %x %v", b, fast, fok, slow, sok)
			}
		})
	}
}

// SPEC §1.2 (base64url, strict): a Challenge's text is the nonce's
// canonical encoding (String, the request line), and comparing a field with
// it accepts exactly that text, for every one-character change.
func TestChallengeText(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	nonces := []Nonce{{}, testNonce, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for range 500 {
		var n Nonce
		randomFill(rng, n[:])
		nonces = append(nonces, n)
	}
	for _, n := range nonces {
		c := NewChallenge(n)
		if c.Nonce() != n || c.String() != n.String() {
			t.Fatalf("nonce %x: challenge holds %x %q, want %q", n, c.Nonce(), c.String(), n.String())
		}
		if got, want := c.AppendRequest([]byte("x")), append([]byte("x"), EncodeRequest(Request{Nonce: n})...); string(got) != string(want) {
			t.Fatalf("nonce %x: request %q, want %q", n, got, want)
		}
		nt := []byte(n.String())
		if !c.echoed((*[NonceChars]byte)(nt)) {
			t.Fatalf("canonical text refused: %s", nt)
		}
		oneCharChanges(nt, NonceChars, func(b []byte) {
			if c.echoed((*[NonceChars]byte)(b)) != (string(b) == string(nt)) {
				t.Fatalf("nonce %x: %q judged wrong", n, b)
			}
		})
	}
}

// SPEC §1.2, §1.5: Challenge.ParseVerify, whose accept-only path compares
// the nonce field as text and never decodes it, judges every line as the
// ordered checks do — reason and values — above all where the nonce field
// differs from the request's text: every byte value in every place of it
// (a character outside the alphabet or a non-canonical last character is
// format, another canonical nonce is nonce), a field a character short or
// long, every other nonce one bit away, and those together with a later
// fault (a bad number still beats the nonce: format; a bad MAC loses to
// it). The package's ParseVerify with the bare nonce agrees too.
func TestChallengeAgrees(t *testing.T) {
	key := NewKey(benchSecret)
	ring := KeyRing{key}
	valid := signedLines(key)
	var cases []signedLine
	for k, s := range valid {
		cases = append(cases, s)
		if k%3 != 0 { // one line per nonce is enough for the sweeps
			continue
		}
		l := s.line
		field := l[nonceAt : nonceAt+NonceChars]
		for i := range field {
			for c := range 256 {
				if field[i] == byte(c) {
					continue
				}
				b := append([]byte(nil), l...)
				b[nonceAt+i] = byte(c)
				cases = append(cases, signedLine{b, s.nonce})
			}
		}
		short := append(append([]byte(nil), l[:nonceAt+NonceChars-1]...), l[nonceAt+NonceChars:]...)
		long := append(append(append([]byte(nil), l[:nonceAt+NonceChars]...), 'A'), l[nonceAt+NonceChars:]...)
		cases = append(cases, signedLine{short, s.nonce}, signedLine{long, s.nonce})
		for bit := range NonceSize * 8 {
			other := s.nonce
			other[bit/8] ^= 1 << (bit % 8)
			badNumber := append(append(append([]byte(nil), l[:numbersAt]...), '0'), l[numbersAt:]...) // a leading zero: format
			badMAC := append([]byte(nil), l...)
			badMAC[len(l)-MACChars] = 'A' + 'B' - min(max(badMAC[len(l)-MACChars], 'A'), 'B') // still canonical, another MAC: mac
			cases = append(cases, signedLine{l, other}, signedLine{badNumber, other}, signedLine{badMAC, other})
		}
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 20000 { // a few bytes of a valid line changed at random, the nonce field most often
		s := valid[rng.IntN(len(valid))]
		b := append([]byte(nil), s.line...)
		for range rng.IntN(3) + 1 {
			i := nonceAt + rng.IntN(NonceChars+2) - 1
			if rng.IntN(4) == 0 {
				i = rng.IntN(len(b))
			}
			b[i] = b64alphabet[rng.IntN(64)]
			if rng.IntN(8) == 0 {
				b[i] = byte(rng.Uint32())
			}
		}
		cases = append(cases, signedLine{b, s.nonce})
	}
	reasons := map[Reason]int{}
	for _, s := range cases {
		c := NewChallenge(s.nonce)
		got, gerr := c.ParseVerify(s.line, ring)
		want, werr := parseVerifyOrdered(s.line, s.nonce, ring)
		if g, w := reasonOrEmpty(gerr), reasonOrEmpty(werr); g != w || got != want {
			t.Fatalf("%q, nonce %s: Challenge.ParseVerify says %q %+v, the ordered checks %q %+v", s.line, s.nonce, g, got, w, want)
		}
		if bare, berr := ParseVerify(s.line, s.nonce, ring); reasonOrEmpty(berr) != reasonOrEmpty(werr) || bare != want {
			t.Fatalf("%q, nonce %s: ParseVerify says %v %+v, the ordered checks %v %+v", s.line, s.nonce, berr, bare, werr, want)
		}
		reasons[reasonOrEmpty(werr)]++
	}
	for _, r := range []Reason{"", ReasonFormat, ReasonNonce, ReasonMAC} {
		if reasons[r] < len(valid) {
			t.Fatalf("reasons seen %v: too few %q for the table to mean anything", reasons, r)
		}
	}
}
