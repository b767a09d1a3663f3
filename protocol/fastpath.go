package protocol

import "encoding/binary"

// The accept-only paths. A response line that passes every check of SPEC
// §1.5 is read once, in place, each field with the least work its check
// needs; on any doubt they return false and the ordered checks
// (parseResponseOrdered, then the nonce, then the MAC) run and name the
// reason, so the order of rejection reasons is theirs alone.
// TestFastPathAgrees, TestParseVerifyFastAgrees, TestChallengeAgrees and
// the differential fuzz targets hold the two paths together.

const (
	head      = "TCKCLK 2 "
	nonceAt   = len(head)                   // first character of the nonce
	numbersAt = nonceAt + NonceChars + 1    // first digit of reference_unix_ms
	minLine   = numbersAt + len("0 0 0 0 ") // + MACChars: one-digit numbers
)

// frameOK checks the length, the fixed head and the space after the nonce.
func frameOK(line []byte) bool {
	return len(line) >= minLine+MACChars && len(line) <= MaxLine &&
		string(line[:len(head)]) == head && line[numbersAt-1] == ' '
}

// readNumbers reads "reference uncertainty synced age " from numbersAt to
// the MAC field, which must fill the last MACChars bytes: each number a run
// of digits ended by a space, synced one digit, 0 or 1. Digits are taken two
// a step (v×100 + a two-digit value): half the multiply-adds on the chain
// that builds each value, and half the loop's branches.
func readNumbers(r *Response, line []byte) bool {
	l := line[:len(line)-MACChars]
	var f [3]uint64 // reference, uncertainty, age
	i := numbersAt
	for k := range f {
		if k == 2 { // synced, before the age
			if i+1 >= len(l) || l[i]|1 != '1' || l[i+1] != ' ' {
				return false
			}
			r.Synced = l[i] == '1'
			i += 2
		}
		start := i
		var v uint64
		for ; i+1 < len(l); i += 2 {
			d0, d1 := l[i]-'0', l[i+1]-'0'
			if d0 > 9 || d1 > 9 {
				break
			}
			v = v*100 + uint64(d0)*10 + uint64(d1) // wraps only past u64 max: refused below
		}
		if i < len(l) && l[i]-'0' <= 9 { // an odd digit left
			v = v*10 + uint64(l[i]-'0')
			i++
		}
		n := i - start
		if i == len(l) || l[i] != ' ' || n == 0 || n > 1 && l[start] == '0' ||
			n >= 20 && (n > 20 || string(l[start:i]) > "18446744073709551615") { // same length: lexical order is numeric
			return false
		}
		f[k] = v
		i++
	}
	if i != len(l) {
		return false
	}
	r.ReferenceUnixMs, r.UncertaintyMs, r.SourceAgeMs = f[0], f[1], f[2]
	return true
}

// parseResponseFast accepts exactly the canonical lines parseResponseOrdered
// accepts, with the same values.
func parseResponseFast(r *Response, line []byte) bool {
	return frameOK(line) && decodeB64(r.Nonce[:], line[nonceAt:nonceAt+NonceChars], NonceChars) &&
		readNumbers(r, line) && decodeB64(r.MAC[:], line[len(line)-MACChars:], MACChars)
}

// parseVerifyFast is Challenge.ParseVerify for a line that passes. The
// nonce field is compared as text with c's (echoed): equal, it is c's nonce,
// canonical, and needs no decoding. The numbers then make the MAC input
// complete, so the first MAC is computed before the received MAC is even
// looked at: its decoding does not depend on the hashing and overlaps it.
// Every key is tried, so the time taken does not reveal which one matched.
func parseVerifyFast(r *Response, line []byte, c *Challenge, keys KeyRing) bool {
	if !frameOK(line) || !c.echoed((*[NonceChars]byte)(line[nonceAt:])) || !readNumbers(r, line) {
		return false
	}
	r.Nonce = c.nonce
	checked, ok := false, false
	for _, k := range keys {
		if k == nil {
			continue
		}
		var sum [MACSize]byte
		k.mac(r, &sum)
		if !checked {
			if !decodeMAC(&r.MAC, (*[MACChars]byte)(line[len(line)-MACChars:])) {
				return false
			}
			checked = true
		}
		ok = constantTimeEqual(&sum, (*[MACSize]byte)(&r.MAC)) || ok
	}
	return ok
}

// decodeMAC is decodeB64(dst[:], t[:], MACChars) unrolled: ten groups of
// four characters and three more, packed into the four big-endian words of
// dst. Any character outside the alphabet sets bit 31 of its group, which
// may spill into the packed words; then the words do not matter.
func decodeMAC(dst *MAC, t *[MACChars]byte) bool {
	q := func(i int) uint64 {
		return uint64(b64quad[0][t[i]] | b64quad[1][t[i+1]] | b64quad[2][t[i+2]] | b64quad[3][t[i+3]])
	}
	g0, g1, g2, g3, g4 := q(0), q(4), q(8), q(12), q(16)
	g5, g6, g7, g8, g9 := q(20), q(24), q(28), q(32), q(36)
	x := uint64(b64quad[0][t[40]] | b64quad[1][t[41]] | b64quad[2][t[42]]) // 16 bits and 2 unused
	be := binary.BigEndian
	be.PutUint64(dst[0:], g0<<40|g1<<16|g2>>8)
	be.PutUint64(dst[8:], g2<<56|g3<<32|g4<<8|g5>>16)
	be.PutUint64(dst[16:], g5<<48|g6<<24|g7)
	be.PutUint64(dst[24:], g8<<40|g9<<16|x>>8)
	return (g0|g1|g2|g3|g4|g5|g6|g7|g8|g9|x)&b64invalid|x&0xc0 == 0
}

// b64pairs maps 12 bits to their two base64url characters, the first in the
// low byte (wire order for a little-endian load).
var b64pairs = func() (t [4096]uint16) {
	for i := range t {
		t[i] = uint16(b64alphabet[i>>6]) | uint16(b64alphabet[i&63])<<8
	}
	return t
}()

// encode48 returns the 8 characters of the 48 bits in the low bits of v, in
// wire order for a little-endian load. For public data only (a nonce): the
// table lookups are indexed by v.
func encode48(v uint64) uint64 {
	return uint64(b64pairs[v>>36&0xfff]) | uint64(b64pairs[v>>24&0xfff])<<16 |
		uint64(b64pairs[v>>12&0xfff])<<32 | uint64(b64pairs[v&0xfff])<<48
}
