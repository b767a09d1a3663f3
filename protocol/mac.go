package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
)

// DevReferenceLabel is the HMAC message that derives the key a --dev agent
// signs with (SPEC §1.3).
const DevReferenceLabel = "TCKCLK/2 dev-reference"

// DevKey returns HMAC-SHA-256(secret, "TCKCLK/2 dev-reference"), the only key
// a development-reference agent signs with and the only key a verifier told
// it talks to one accepts.
func DevKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(DevReferenceLabel))
	return m.Sum(nil)
}

// AppendMACInput appends the 50 bytes the MAC covers (SPEC §1.3) to dst.
func AppendMACInput(dst []byte, r *Response) []byte {
	var in [MACInputSize]byte
	putMACInput(&in, r)
	return append(dst, in[:]...)
}

// putMACInput lays down the 50 bytes of SPEC §1.3 at their fixed offsets.
func putMACInput(in *[MACInputSize]byte, r *Response) {
	copy(in[:6], Magic)
	in[6] = 0
	binary.BigEndian.PutUint16(in[7:], Version)
	copy(in[9:25], r.Nonce[:])
	binary.BigEndian.PutUint64(in[25:], r.ReferenceUnixMs)
	binary.BigEndian.PutUint64(in[33:], r.UncertaintyMs)
	in[41] = 0
	if r.Synced {
		in[41] = 1
	}
	binary.BigEndian.PutUint64(in[42:], r.SourceAgeMs)
}

// Key is an HMAC-SHA-256 key prepared for signing and verifying many
// samples: it holds the SHA-256 states after the key's inner and outer pad
// blocks (FIPS 198-1 §6 allows precomputing them; they are as secret as the
// key), as crypto/hmac keeps them after its first Reset. A Key never
// changes, so it is safe for concurrent use without locks or pools; each MAC
// runs on a digest on the caller's stack. Make one with NewKey (a zero Key
// holds no states and panics when used). The key material is never exposed
// or printed.
type Key struct {
	inner, outer []byte // marshaled SHA-256 states after K⊕ipad and K⊕opad
}

// NewKey prepares key (a secret, or DevKey(secret)). The bytes are not kept.
func NewKey(key []byte) *Key {
	if len(key) > sha256.BlockSize { // RFC 2104 §2: a longer key is hashed first
		sum := sha256.Sum256(key)
		key = sum[:]
	}
	var ipad, opad [sha256.BlockSize]byte
	copy(ipad[:], key)
	copy(opad[:], key)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	return &Key{inner: padState(&ipad), outer: padState(&opad)}
}

// padState is the marshaled SHA-256 state after one pad block.
func padState(pad *[sha256.BlockSize]byte) []byte {
	h := sha256.New()
	h.Write(pad[:])
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil { // crypto/sha256 documents that its digests marshal
		panic("protocol: SHA-256 state does not marshal: " + err.Error())
	}
	return state
}

// String hides the key material.
func (k *Key) String() string { return "protocol.Key(redacted)" }

// mac sets sum to HMAC-SHA-256(key, MAC input of r). sha256.New is inlined
// here, so its digest stays on the stack and its methods are called
// directly.
func (k *Key) mac(r *Response, sum *[MACSize]byte) {
	var in [MACInputSize]byte
	putMACInput(&in, r)
	h := sha256.New()
	u := h.(encoding.BinaryUnmarshaler)
	if err := u.UnmarshalBinary(k.inner); err != nil {
		panic("protocol: SHA-256 state does not unmarshal: " + err.Error())
	}
	h.Write(in[:])
	h.Sum(sum[:0])
	if err := u.UnmarshalBinary(k.outer); err != nil {
		panic("protocol: SHA-256 state does not unmarshal: " + err.Error())
	}
	h.Write(sum[:])
	h.Sum(sum[:0])
}

// Sign sets r.MAC.
func (k *Key) Sign(r *Response) {
	var sum [MACSize]byte
	k.mac(r, &sum)
	r.MAC = sum
}

// Verify checks r.MAC in constant time; a mismatch has reason mac.
func (k *Key) Verify(r *Response) error {
	var sum [MACSize]byte
	k.mac(r, &sum)
	if !constantTimeEqual(&sum, (*[MACSize]byte)(&r.MAC)) {
		return errMAC
	}
	return nil
}

// constantTimeEqual compares two MACs word by word with no early exit, so
// the time taken does not depend on where they differ.
func constantTimeEqual(a, b *[MACSize]byte) bool {
	le := binary.LittleEndian
	return (le.Uint64(a[0:])^le.Uint64(b[0:]))|(le.Uint64(a[8:])^le.Uint64(b[8:]))|
		(le.Uint64(a[16:])^le.Uint64(b[16:]))|(le.Uint64(a[24:])^le.Uint64(b[24:])) == 0
}

// Sign sets r.MAC = HMAC-SHA-256(key, MAC input). For many samples prefer a
// Key, which keeps the prepared HMAC state.
func Sign(key []byte, r *Response) { NewKey(key).Sign(r) }

// Verify checks r.MAC against key in constant time (reason mac on mismatch).
func Verify(key []byte, r *Response) error { return NewKey(key).Verify(r) }

// KeyRing verifies with any of several keys (secret rotation, SPEC §1.4):
// a MAC valid under either key passes.
type KeyRing []*Key

// Verify passes if any key verifies r; every key is tried so the time taken
// does not reveal which one matched.
func (kr KeyRing) Verify(r *Response) error {
	ok := false
	for _, k := range kr {
		if k != nil {
			var sum [MACSize]byte
			k.mac(r, &sum)
			ok = constantTimeEqual(&sum, (*[MACSize]byte)(&r.MAC)) || ok
		}
	}
	if !ok {
		return errMAC
	}
	return nil
}

// CheckResponse runs every wire check of SPEC §1.5 on a line (without its
// LF) in order — size, bytes, fields, magic, version, grammar, nonce, MAC —
// and returns the first failure, whose reason names it.
func CheckResponse(line []byte, wantNonce Nonce, keys KeyRing) error {
	_, err := ParseVerify(line, wantNonce, keys)
	return err
}

// ParseVerify is ParseResponse followed by keys.Verify. A prober that
// keeps its request's Challenge calls Challenge.ParseVerify, which does not
// encode the nonce again.
func ParseVerify(line []byte, wantNonce Nonce, keys KeyRing) (r Response, err error) {
	c := NewChallenge(wantNonce)
	if parseVerifyFast(&r, line, &c, keys) {
		return r, nil
	}
	return parseVerifyOrdered(line, wantNonce, keys)
}

// parseVerifyOrdered runs the checks of SPEC §1.5 one after the other and
// returns the first failure.
func parseVerifyOrdered(line []byte, wantNonce Nonce, keys KeyRing) (r Response, err error) {
	if err = parseResponseOrdered(&r, line); err != nil {
		return Response{}, err
	}
	if r.Nonce != wantNonce {
		return Response{}, errNonce
	}
	if err = keys.Verify(&r); err != nil {
		return Response{}, err
	}
	return r, nil
}
