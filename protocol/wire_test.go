package protocol

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

var testNonce = Nonce{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

const goodLine = "TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 1767225600123 3 1 812 rVusL1GxDVk7IWEilpKLF9xYXWkm7-_TF8g-w3xLszk"

// SPEC §1.5: the first failing check in the fixed order names the reason,
// even when a line has several faults.
func TestParseResponseCheckOrder(t *testing.T) {
	long := goodLine + " " + strings.Repeat("A", MaxLine-len(goodLine))
	cases := []struct {
		name string
		line string
		want Reason
	}{
		{"size beats bytes", strings.Repeat("\r", MaxLine+1), ReasonSize},
		{"exactly 257", long, ReasonSize},
		{"bytes beat fields", "TCKCLK\t2", ReasonFormat},
		{"fields beat magic", "XX 2", ReasonFormat},
		{"magic beats version", strings.Replace(goodLine, "TCKCLK 2", "TCKCLX 3", 1), ReasonFormat},
		{"version beats grammar", strings.Replace(goodLine, " 2 AAEC", " 1 !AEC", 1), ReasonVersion},
		{"empty version", "TCKCLK  AAECAwQFBgcICQoLDA0ODw 1 1 1 1 rVusL1GxDVk7IWEilpKLF9xYXWkm7-_TF8g-w3xLszk", ReasonFormat},
		{"grammar beats nonce", strings.Replace(strings.Replace(goodLine, "AAECAw", "AQIDBA", 1), " 3 1 ", " 03 1 ", 1), ReasonFormat},
		{"nonce beats mac", strings.Replace(goodLine, "AAECAw", "AQIDBA", 1), ReasonNonce},
		{"u64 max ok but +1 format", strings.Replace(goodLine, "1767225600123", "18446744073709551616", 1), ReasonFormat},
		{"21 digits", strings.Replace(goodLine, "1767225600123", "100000000000000000000", 1), ReasonFormat},
		{"empty line", "", ReasonFormat},
		{"synced x", strings.Replace(goodLine, " 1 812", " x 812", 1), ReasonFormat},
		{"del byte", strings.Replace(goodLine, "812", "8\x7f2", 1), ReasonFormat},
		{"nonce with LF", strings.Replace(goodLine, "AAECAwQFBgcICQoLDA0ODw", "AAECAwQFBgcICQoLDA0O\nw", 1), ReasonFormat},
	}
	key := NewKey([]byte("tckclk-test-vector-secret-0123456789abcdef"))
	if err := CheckResponse([]byte(goodLine), testNonce, KeyRing{key}); err != nil {
		t.Fatalf("good line rejected: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckResponse([]byte(tc.line), testNonce, KeyRing{key})
			if !hasReason(err, tc.want) {
				t.Fatalf("%q: got %v, want %s", tc.line, err, tc.want)
			}
		})
	}
}

// SPEC §1.2: canonical decimal u64.
func TestParseUint(t *testing.T) {
	ok := map[string]uint64{"0": 0, "1": 1, "10": 10, "18446744073709551615": 1<<64 - 1, "9999999999999999999": 9999999999999999999}
	for s, want := range ok {
		if got, good := parseUint([]byte(s)); !good || got != want {
			t.Errorf("%q: got %d %v", s, got, good)
		}
	}
	for _, s := range []string{"", "00", "01", "-1", "+1", "1e3", "18446744073709551616", "99999999999999999999", "1 ", "0x1", "１"} {
		if _, good := parseUint([]byte(s)); good {
			t.Errorf("%q accepted", s)
		}
	}
}

// SPEC §1.2: nonce and MAC are strict base64url without padding.
func TestStrictBase64(t *testing.T) {
	var n [16]byte
	bad := []string{"AAECAwQFBgcICQoLDA0ODx", "AAECAwQFBgcICQoLDA0OD", "AAECAwQFBgcICQoLDA0ODw=", "+AECAwQFBgcICQoLDA0ODw", "/AECAwQFBgcICQoLDA0ODw", "AAECAwQFBgcICQoLDA0O\rw", "AAECAwQFBgcICQoLDA0O\nw"}
	for _, s := range bad {
		if decodeB64(n[:], []byte(s), NonceChars) {
			t.Errorf("%q accepted", s)
		}
	}
	if !decodeB64(n[:], []byte("_____________________w"), NonceChars) || n[15] != 0xff {
		t.Fatal("canonical all-ones nonce rejected")
	}
}

// SPEC §1.2: requests must be exactly "TCKCLK 2 <nonce>".
func TestParseRequest(t *testing.T) {
	good := "TCKCLK 2 AAECAwQFBgcICQoLDA0ODw"
	r, err := ParseRequest([]byte(good))
	if err != nil || r.Nonce != testNonce {
		t.Fatalf("%v %v", r, err)
	}
	cases := map[string]Reason{
		"TCKCLK 2":                            ReasonFormat,
		"TCKCLK 1 AAECAwQFBgcICQoLDA0ODw":     ReasonVersion,
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 1":   ReasonFormat,
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n":   ReasonFormat,
		strings.Repeat("A", 257):              ReasonSize,
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\x00": ReasonFormat,
	}
	for line, want := range cases {
		if _, err := ParseRequest([]byte(line)); !hasReason(err, want) {
			t.Errorf("%q: got %v, want %s", line, err, want)
		}
	}
}

// Encoding a response and parsing it back is the identity, at the edges.
func TestResponseRoundTrip(t *testing.T) {
	key := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	for _, v := range []uint64{0, 1, 9, 10, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		for _, synced := range []bool{false, true} {
			r := Response{Nonce: testNonce, ReferenceUnixMs: v, UncertaintyMs: v / 3, Synced: synced, SourceAgeMs: v / 7}
			key.Sign(&r)
			line := EncodeResponse(&r)
			if len(line)-1 > MaxLine {
				t.Fatalf("encoded line of %d bytes", len(line)-1)
			}
			back, err := ParseVerify(line[:len(line)-1], testNonce, KeyRing{key})
			if err != nil || back != r {
				t.Fatalf("round trip %+v: %+v %v", r, back, err)
			}
		}
	}
}

// SPEC §1.4: with rotation a MAC valid under either key passes.
func TestKeyRing(t *testing.T) {
	oldK, newK := NewKey([]byte("old-secret-0123456789abcdef012345")), NewKey([]byte("new-secret-0123456789abcdef012345"))
	other := NewKey([]byte("other-secret-0123456789abcdef0123"))
	r := Response{Nonce: testNonce, ReferenceUnixMs: 5, Synced: true, UncertaintyMs: 2}
	ring := KeyRing{oldK, newK}
	for _, k := range []*Key{oldK, newK} {
		k.Sign(&r)
		if err := ring.Verify(&r); err != nil {
			t.Fatal(err)
		}
	}
	other.Sign(&r)
	if err := ring.Verify(&r); !hasReason(err, ReasonMAC) {
		t.Fatalf("foreign key accepted: %v", err)
	}
	if s := oldK.String(); strings.Contains(s, "old-secret") {
		t.Fatalf("key printed: %s", s)
	}
}

func TestErrorsIs(t *testing.T) {
	_, err := ParseRequest([]byte("TCKCLK 3 AAECAwQFBgcICQoLDA0ODw"))
	if !strings.HasPrefix(err.Error(), "protocol: version") {
		t.Fatalf("message %q", err)
	}
	if r, _ := ReasonOf(err); r != ReasonVersion {
		t.Fatal(r)
	}
	if !errors.Is(err, &Error{Reason: ReasonVersion}) || errors.Is(err, &Error{Reason: ReasonFormat}) {
		t.Fatal("errors.Is on reason")
	}
	for _, r := range Reasons() {
		if !r.Valid() {
			t.Fatal(r)
		}
	}
	if len(Reasons()) != 17 || Reason("nope").Valid() {
		t.Fatal("reason set")
	}
}

// The fast path never accepts what the ordered checks reject, and agrees on
// the values of what both accept.
func TestFastPathAgrees(t *testing.T) {
	lines := []string{goodLine, "", "TCKCLK 2 ", goodLine + " ", goodLine + "=",
		strings.Replace(goodLine, " 3 ", " 03 ", 1), strings.Replace(goodLine, " 1 812", " 2 812", 1),
		strings.Replace(goodLine, " 1 812", " 1  812", 1), strings.Replace(goodLine, "812 ", "812", 1),
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 0 0 0 0 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 0 0 0 0 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 18446744073709551616 0 0 0 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	}
	for i := range len(goodLine) {
		for _, c := range []byte{' ', '0', 'A', '\x00', '-', '+'} {
			b := []byte(goodLine)
			b[i] = c
			lines = append(lines, string(b))
		}
	}
	accepted := 0
	for _, l := range lines {
		var fast, slow Response
		fok := parseResponseFast(&fast, []byte(l))
		serr := parseResponseOrdered(&slow, []byte(l))
		if fok && serr != nil {
			t.Fatalf("fast accepts what ordered rejects (%v): %q", serr, l)
		}
		if serr == nil && !fok {
			t.Fatalf("fast rejects a valid line: %q", l)
		}
		if fok {
			accepted++
			if fast != slow {
				t.Fatalf("values differ for %q: %+v vs %+v", l, fast, slow)
			}
		}
	}
	if accepted < 2 {
		t.Fatalf("only %d lines accepted: the table does not exercise the fast path", accepted)
	}
}

// decodeB64 agrees with encoding/base64's strict decoder on every single-
// character change of valid nonces and MACs, and on random strings.
func TestDecodeB64MatchesStdlib(t *testing.T) {
	alphabet := []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=\x00\x7f\x80\xff\r\n .")
	check := func(src []byte, size int) {
		t.Helper()
		mine := make([]byte, size)
		ok := decodeB64(mine, src, len(src))
		std, err := b64.DecodeString(string(src))
		stdOK := err == nil && len(std) == size && !bytes.ContainsAny(src, "\r\n")
		if ok != stdOK || ok && !bytes.Equal(mine, std) {
			t.Fatalf("%q: mine %x %v, stdlib %x %v", src, mine, ok, std, err)
		}
	}
	for _, size := range []int{NonceSize, MACSize} {
		chars := (size*8 + 5) / 6
		for i := range chars {
			for _, c := range alphabet {
				src := bytes.Repeat([]byte("Q"), chars)
				src[i] = c
				check(src, size)
				src = []byte(b64.EncodeToString(bytes.Repeat([]byte{byte(i * 37)}, size)))
				src[i] = c
				check(src, size)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		size := []int{NonceSize, MACSize}[rng.IntN(2)]
		raw := make([]byte, size)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		check([]byte(b64.EncodeToString(raw)), size)
	}
}
