package protocol

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"io"
)

// Wire constants of SPEC §1.
const (
	Magic        = "TCKCLK"
	Version      = 2
	MaxLine      = 256 // bytes, excluding the LF
	NonceSize    = 16  // raw nonce bytes
	MACSize      = 32  // raw MAC bytes
	NonceChars   = 22  // base64url characters of a nonce
	MACChars     = 43  // base64url characters of a MAC
	MACInputSize = 50  // bytes HMAC'd, SPEC §1.3
	// RequestLen is the length of a request line including its LF.
	RequestLen = len("TCKCLK 2 ") + NonceChars + 1
)

// b64 is the strict base64url alphabet of RFC 4648 §5 without padding.
var b64 = base64.RawURLEncoding.Strict()

// Nonce is the 16 raw bytes a request carries.
type Nonce [NonceSize]byte

// MAC is the 32-byte HMAC-SHA-256 of a response.
type MAC [MACSize]byte

// NewNonce returns a fresh nonce from crypto/rand (SPEC §1.1).
func NewNonce() (Nonce, error) { return NonceFrom(rand.Reader) }

// NonceFrom reads a nonce from r (tests inject a deterministic source).
func NonceFrom(r io.Reader) (Nonce, error) {
	var n Nonce
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return Nonce{}, Wrap(ReasonIO, "reading nonce randomness", err)
	}
	return n, nil
}

// String is the nonce's wire form (22 base64url characters).
func (n Nonce) String() string { return b64.EncodeToString(n[:]) }

// String is the MAC's wire form (43 base64url characters).
func (m MAC) String() string { return b64.EncodeToString(m[:]) }

// ParseNonce decodes the 22-character wire form of a nonce.
func ParseNonce(s string) (Nonce, error) {
	var n Nonce
	if !decodeB64(n[:], []byte(s), NonceChars) {
		return Nonce{}, errNonceGram
	}
	return n, nil
}

// Request is a TCKCLK/2 request.
type Request struct {
	Nonce Nonce
}

// Response is a TCKCLK/2 response.
type Response struct {
	Nonce           Nonce
	ReferenceUnixMs uint64
	UncertaintyMs   uint64
	Synced          bool
	SourceAgeMs     uint64
	MAC             MAC
}

// AppendRequest appends the request line, LF included, to dst.
func AppendRequest(dst []byte, req Request) []byte {
	dst = append(dst, "TCKCLK 2 "...)
	dst = b64.AppendEncode(dst, req.Nonce[:])
	return append(dst, '\n')
}

// EncodeRequest returns the request line, LF included.
func EncodeRequest(req Request) []byte {
	return AppendRequest(make([]byte, 0, RequestLen), req)
}

// AppendResponse appends the response line, LF included, to dst. The MAC
// field is written as it stands: call Sign first.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, "TCKCLK 2 "...)
	dst = b64.AppendEncode(dst, r.Nonce[:])
	dst = append(dst, ' ')
	dst = appendUint(dst, r.ReferenceUnixMs)
	dst = append(dst, ' ')
	dst = appendUint(dst, r.UncertaintyMs)
	if r.Synced {
		dst = append(dst, " 1 "...)
	} else {
		dst = append(dst, " 0 "...)
	}
	dst = appendUint(dst, r.SourceAgeMs)
	dst = append(dst, ' ')
	dst = b64.AppendEncode(dst, r.MAC[:])
	return append(dst, '\n')
}

// EncodeResponse returns the response line, LF included.
func EncodeResponse(r *Response) []byte {
	return AppendResponse(make([]byte, 0, MaxLine+1), r)
}

func appendUint(dst []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for v >= 10 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	buf[i] = byte('0' + v)
	return append(dst, buf[i:]...)
}

// ParseRequest parses a request line without its LF (SPEC §1.2), checking
// in the order of SPEC §1.5. An agent answers only requests it accepts.
func ParseRequest(line []byte) (Request, error) {
	var f [3][]byte
	if err := splitFields(line, f[:]); err != nil {
		return Request{}, err
	}
	if err := checkHead(f[0], f[1]); err != nil {
		return Request{}, err
	}
	var req Request
	if !decodeB64(req.Nonce[:], f[2], NonceChars) {
		return Request{}, errNonceGram
	}
	return req, nil
}

// ParseResponse parses a response line without its LF (SPEC §1.2) and checks
// that it echoes wantNonce. It checks size, bytes, fields, magic, version,
// each field's grammar and the nonce, in that order (SPEC §1.5); the MAC is
// checked separately by Verify, which comes next in that order.
func ParseResponse(line []byte, wantNonce Nonce) (Response, error) {
	var r Response
	if err := parseResponseInto(&r, line); err != nil {
		return Response{}, err
	}
	if r.Nonce != wantNonce {
		return Response{}, errNonce
	}
	return r, nil
}

// ParseResponseAny parses a response line without checking the nonce (for
// tools that inspect a line they did not request, and for fuzzing).
func ParseResponseAny(line []byte) (Response, error) {
	var r Response
	if err := parseResponseInto(&r, line); err != nil {
		return Response{}, err
	}
	return r, nil
}

func parseResponseInto(r *Response, line []byte) error {
	if parseResponseFast(r, line) {
		return nil
	}
	return parseResponseOrdered(r, line)
}

// parseResponseOrdered runs the checks of SPEC §1.5 one after the other, so
// the first failing one names the reason.
func parseResponseOrdered(r *Response, line []byte) error {
	var f [8][]byte
	if err := splitFields(line, f[:]); err != nil {
		return err
	}
	if err := checkHead(f[0], f[1]); err != nil {
		return err
	}
	if !decodeB64(r.Nonce[:], f[2], NonceChars) {
		return errNonceGram
	}
	var ok bool
	if r.ReferenceUnixMs, ok = parseUint(f[3]); !ok {
		return errRefNum
	}
	if r.UncertaintyMs, ok = parseUint(f[4]); !ok {
		return errUncNum
	}
	switch {
	case len(f[5]) == 1 && f[5][0] == '0':
		r.Synced = false
	case len(f[5]) == 1 && f[5][0] == '1':
		r.Synced = true
	default:
		return errSynced
	}
	if r.SourceAgeMs, ok = parseUint(f[6]); !ok {
		return errAgeNum
	}
	if !decodeB64(r.MAC[:], f[7], MACChars) {
		return errMACGram
	}
	return nil
}

// charClass: 0 = forbidden byte, 1 = space, 2 = printable ASCII 0x21–0x7E.
var charClass = func() (t [256]uint8) {
	t[' '] = 1
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = 2
	}
	return t
}()

// splitFields applies the size, byte and field-count checks of SPEC §1.5, in
// that order, and fills f with exactly len(f) non-empty fields separated by
// single spaces. One pass: a field error seen early still loses to a bad
// byte seen later, as the check order demands.
func splitFields(line []byte, f [][]byte) error {
	if len(line) > MaxLine {
		return errSize
	}
	n, start, fieldsBad := 0, 0, false
	for i, c := range line {
		switch charClass[c] {
		case 2:
			continue
		case 0:
			return errBytes
		}
		if i == start || n == len(f)-1 { // empty field, or one field too many
			fieldsBad = true
			continue
		}
		f[n] = line[start:i]
		n++
		start = i + 1
	}
	if fieldsBad || start == len(line) || n != len(f)-1 {
		return errFields
	}
	f[n] = line[start:]
	return nil
}

func checkHead(magic, version []byte) error {
	if string(magic) != Magic {
		return errMagic
	}
	if len(version) != 1 || version[0] != '2' {
		return errVersion
	}
	return nil
}

// parseUint accepts only canonical decimal: "0" or a non-zero digit followed
// by digits, value ≤ 2^64−1.
func parseUint(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	if len(s) == 20 && string(s) > "18446744073709551615" { // same length: lexical order is numeric order
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0') // cannot wrap: at most 20 digits, checked above
	}
	return v, true
}

// b64quad[j][c] is the 6-bit value of the base64url character c as the
// j-th of a group of four (shifted left by 18−6j, so a group's four values
// OR together into its 24 bits), or b64invalid for any other byte
// (encoding/base64 would skip CR and LF, so the table is ours).
var b64quad = func() (t [4][256]uint32) {
	for j := range t {
		for c := range t[j] {
			t[j][c] = b64invalid
		}
		for v, c := range []byte(b64alphabet) {
			t[j][c] = uint32(v) << (18 - 6*j)
		}
	}
	return t
}()

const (
	b64alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b64invalid  = 1 << 31
)

// quad decodes the group of four characters at s into its 24 bits; bit 31
// is set if any of them is outside the alphabet.
func quad(s []byte) uint32 {
	s = s[:4]
	return b64quad[0][s[0]] | b64quad[1][s[1]] | b64quad[2][s[2]] | b64quad[3][s[3]]
}

// decodeB64 decodes exactly chars base64url characters (no padding) into
// dst, which must hold chars*6/8 bytes, rejecting any other character and
// non-zero unused trailing bits (RFC 4648 §3.5 canonical form). Invalid
// characters are collected and checked once; eight characters are decoded
// per step while an 8-byte store still fits in dst.
func decodeB64(dst []byte, src []byte, chars int) bool {
	if len(src) != chars || len(dst) != chars*6/8 {
		return false
	}
	var bad uint32
	si, di := 0, 0
	for ; si+8 <= len(src) && di+8 <= len(dst); si, di = si+8, di+6 {
		g, h := quad(src[si:]), quad(src[si+4:])
		bad |= g | h
		binary.BigEndian.PutUint64(dst[di:], uint64(g)<<40|uint64(h)<<16) // the last 2 bytes are rewritten next
	}
	for ; si+4 <= len(src); si, di = si+4, di+3 {
		g := quad(src[si:])
		bad |= g
		d := (*[3]byte)(dst[di:])
		d[0], d[1], d[2] = byte(g>>16), byte(g>>8), byte(g)
	}
	s, d := src[si:], dst[di:]
	switch len(s) {
	case 0:
	case 2: // 12 bits: one byte, 4 unused bits must be zero
		g := b64quad[0][s[0]] | b64quad[1][s[1]]
		if g&0xf000 != 0 {
			return false
		}
		bad |= g
		d[0] = byte(g >> 16)
	case 3: // 18 bits: two bytes, 2 unused bits must be zero
		g := b64quad[0][s[0]] | b64quad[1][s[1]] | b64quad[2][s[2]]
		if g&0xc0 != 0 {
			return false
		}
		bad |= g
		d[0], d[1] = byte(g>>16), byte(g>>8)
	default:
		return false
	}
	return bad&b64invalid == 0
}
