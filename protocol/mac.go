package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
	"sync/atomic"
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
	dst = append(dst, Magic...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, Version)
	dst = append(dst, r.Nonce[:]...)
	dst = binary.BigEndian.AppendUint64(dst, r.ReferenceUnixMs)
	dst = binary.BigEndian.AppendUint64(dst, r.UncertaintyMs)
	if r.Synced {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	return binary.BigEndian.AppendUint64(dst, r.SourceAgeMs)
}

// Key is an HMAC key prepared for signing and verifying many samples; it is
// safe for concurrent use. The key bytes are never exposed or printed.
type Key struct {
	key  []byte
	idle atomic.Pointer[macState] // one prepared state kept for the next caller
	pool sync.Pool                // more, under concurrency
}

// NewKey prepares key (a secret, or DevKey(secret)). The bytes are copied.
func NewKey(key []byte) *Key {
	return &Key{key: append([]byte(nil), key...)}
}

type macState struct {
	h   hash.Hash
	in  [MACInputSize]byte
	sum [MACSize]byte
}

// String hides the key material.
func (k *Key) String() string { return "protocol.Key(redacted)" }

func (k *Key) get() *macState {
	if s := k.idle.Swap(nil); s != nil {
		return s
	}
	if s, ok := k.pool.Get().(*macState); ok {
		return s
	}
	return &macState{h: hmac.New(sha256.New, k.key)}
}

func (k *Key) put(s *macState) {
	if !k.idle.CompareAndSwap(nil, s) {
		k.pool.Put(s)
	}
}

// compute leaves the MAC of r in s.sum; the caller returns s to the pool.
func (k *Key) compute(r *Response) *macState {
	s := k.get()
	s.h.Reset()
	s.h.Write(AppendMACInput(s.in[:0], r))
	s.h.Sum(s.sum[:0])
	return s
}

// Sign sets r.MAC.
func (k *Key) Sign(r *Response) {
	s := k.compute(r)
	r.MAC = s.sum
	k.put(s)
}

// Verify checks r.MAC in constant time; a mismatch has reason mac.
func (k *Key) Verify(r *Response) error {
	s := k.compute(r)
	equal := constantTimeEqual(&s.sum, (*[MACSize]byte)(&r.MAC))
	k.put(s)
	if !equal {
		return errMAC
	}
	return nil
}

// constantTimeEqual compares two MACs word by word with no early exit, so
// the time taken does not depend on where they differ.
func constantTimeEqual(a, b *[MACSize]byte) bool {
	var diff uint64
	for i := 0; i < MACSize; i += 8 {
		diff |= binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
	}
	return diff == 0
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
			s := k.compute(r)
			ok = constantTimeEqual(&s.sum, (*[MACSize]byte)(&r.MAC)) || ok
			k.put(s)
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

// ParseVerify is ParseResponse followed by keys.Verify.
func ParseVerify(line []byte, wantNonce Nonce, keys KeyRing) (r Response, err error) {
	if err = parseResponseInto(&r, line); err != nil {
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
