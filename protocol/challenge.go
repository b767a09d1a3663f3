package protocol

import "encoding/binary"

// Challenge is one request's nonce in both its forms: the 16 bytes the MAC
// covers and the 22 characters the request line carries (SPEC §1.2). A
// prober makes one per request (NewChallenge), writes the request with it
// and checks the answer with its ParseVerify. A response's nonce field
// equal to the request's text is canonical, in the alphabet and the right
// nonce, so one comparison of text passes both its grammar check and the
// nonce check of SPEC §1.5; only a field that differs is decoded, by the
// ordered checks, which name its reason (format or nonce). Make one with
// NewChallenge: the zero Challenge holds no text.
type Challenge struct {
	nonce Nonce
	text  [3]uint64 // characters 0–7, 8–15 and 14–21 as little-endian words (wire order in memory)
}

// NewChallenge holds n and its wire text.
func NewChallenge(n Nonce) Challenge {
	be := binary.BigEndian
	mid := encode48(be.Uint64(n[6:]) >> 16)          // characters 8–15
	end := encode48(uint64(be.Uint32(n[12:])) << 16) // 16–21 (the 4 unused bits zero), then two of no use
	return Challenge{nonce: n, text: [3]uint64{encode48(be.Uint64(n[0:]) >> 16), mid, mid>>48 | end<<16}}
}

// Nonce is the request's 16 bytes.
func (c *Challenge) Nonce() Nonce { return c.nonce }

// String is the nonce's wire form (22 base64url characters).
func (c *Challenge) String() string {
	var t [NonceChars]byte
	c.putText(&t)
	return string(t[:])
}

func (c *Challenge) putText(t *[NonceChars]byte) {
	le := binary.LittleEndian
	le.PutUint64(t[0:], c.text[0])
	le.PutUint64(t[8:], c.text[1])
	le.PutUint64(t[14:], c.text[2])
}

// AppendRequest appends the request line, LF included, to dst.
func (c *Challenge) AppendRequest(dst []byte) []byte {
	var t [NonceChars]byte
	c.putText(&t)
	dst = append(dst, head...)
	dst = append(dst, t[:]...)
	return append(dst, '\n')
}

// echoed reports whether the 22 characters at t are the nonce's text.
func (c *Challenge) echoed(t *[NonceChars]byte) bool {
	le := binary.LittleEndian
	return (c.text[0]^le.Uint64(t[0:]))|(c.text[1]^le.Uint64(t[8:]))|(c.text[2]^le.Uint64(t[14:])) == 0
}

// ParseVerify is ParseResponse followed by keys.Verify for the response to
// this request: the package's ParseVerify with c's nonce, the same checks
// in the same order (SPEC §1.5), the same reasons and values.
func (c *Challenge) ParseVerify(line []byte, keys KeyRing) (r Response, err error) {
	if parseVerifyFast(&r, line, c, keys) {
		return r, nil
	}
	return parseVerifyOrdered(line, c.nonce, keys)
}
