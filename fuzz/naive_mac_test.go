package fuzz

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/tckclk/tckclk/protocol"
	"github.com/tckclk/tckclk/protocol/vectors"
)

// The naive MAC: SPEC §1.3 written out with crypto/hmac, the 50 input bytes
// laid down one by one, sharing nothing with protocol's Key, Sign or Verify.
// The fuzz targets judge protocol's MAC verdicts against it.

// naiveMACInput is "TCKCLK" 0x00 || u16 BE 2 || nonce (16) || reference u64
// BE || uncertainty u64 BE || synced u8 || source age u64 BE: 50 bytes.
func naiveMACInput(r protocol.Response) []byte {
	b := []byte{'T', 'C', 'K', 'C', 'L', 'K', 0x00, 0x00, 0x02}
	b = append(b, r.Nonce[:]...)
	be64 := func(v uint64) {
		for shift := 56; shift >= 0; shift -= 8 {
			b = append(b, byte(v>>shift))
		}
	}
	be64(r.ReferenceUnixMs)
	be64(r.UncertaintyMs)
	if r.Synced {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	be64(r.SourceAgeMs)
	if len(b) != 50 {
		panic("naive MAC input is not 50 bytes")
	}
	return b
}

// naiveMAC is HMAC-SHA-256(secret, naiveMACInput(r)).
func naiveMAC(secret []byte, r protocol.Response) protocol.MAC {
	h := hmac.New(sha256.New, secret)
	h.Write(naiveMACInput(r))
	return protocol.MAC(h.Sum(nil))
}

// naiveMACValid reports whether r carries the MAC of its fields under secret.
func naiveMACValid(secret []byte, r protocol.Response) bool {
	want := naiveMAC(secret, r)
	return hmac.Equal(want[:], r.MAC[:])
}

// naiveDevKey is SPEC §1.3's dev_key = HMAC-SHA-256(secret, "TCKCLK/2 dev-reference").
func naiveDevKey(secret []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("TCKCLK/2 dev-reference"))
	return h.Sum(nil)
}

// SPEC §1.3: the oracle itself agrees with the independent implementation's
// vectors byte for byte (input and MAC), for the plain and the dev key.
func TestNaiveMACMatchesVectors(t *testing.T) {
	v, err := vectors.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Valid) == 0 {
		t.Fatal("no valid vectors")
	}
	for _, vv := range v.Valid {
		r, err := protocol.ParseResponseAny([]byte(vv.ResponseLine))
		if err != nil {
			t.Fatalf("%s: %v", vv.Name, err)
		}
		if got := hex.EncodeToString(naiveMACInput(r)); got != vv.MACInputHex {
			t.Errorf("%s: MAC input %s, vector %s", vv.Name, got, vv.MACInputHex)
		}
		if !naiveMACValid([]byte(vv.SecretASCII), r) {
			t.Errorf("%s: the naive MAC does not verify the vector", vv.Name)
		}
		r.MAC[31] ^= 1
		if naiveMACValid([]byte(vv.SecretASCII), r) {
			t.Errorf("%s: the naive MAC verifies a flipped MAC", vv.Name)
		}
	}
	d := v.DevReference
	if got := hex.EncodeToString(naiveDevKey([]byte(d.SecretASCII))); got != d.DevKeyHex {
		t.Errorf("dev_key %s, vector %s", got, d.DevKeyHex)
	}
	r, err := protocol.ParseResponseAny([]byte(d.ResponseLine))
	if err != nil {
		t.Fatal(err)
	}
	if !naiveMACValid(naiveDevKey([]byte(d.SecretASCII)), r) || naiveMACValid([]byte(d.SecretASCII), r) {
		t.Error("the dev vector must verify under dev_key and only under it")
	}
}
