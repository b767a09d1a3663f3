package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tckclk/tckclk/protocol/vectors"
)

// sharedVectors is the independent implementation's original, which the
// embedded copy in protocol/vectors must equal byte for byte.
const sharedVectors = "../../shared/vectors/tckclk2.json"

func loadVectors(t *testing.T) *vectors.File {
	t.Helper()
	v, err := vectors.Load()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// SPEC §1.3: the committed copy must stay byte-identical to the shared file.
func TestVectorsCopyIdentical(t *testing.T) {
	shared, err := os.ReadFile(sharedVectors)
	if os.IsNotExist(err) {
		abs, _ := filepath.Abs(sharedVectors)
		t.Skipf("shared vectors not present at %s (clone without ../shared); committed copy used", abs)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shared, vectors.Raw()) {
		t.Fatalf("protocol/vectors/tckclk2.json differs from %s: copy it again", sharedVectors)
	}
}

func mustU64(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// SPEC §1.2, §1.3: every valid vector encodes, parses and signs exactly.
func TestVectorsValid(t *testing.T) {
	v := loadVectors(t)
	for _, tc := range v.Valid {
		t.Run(tc.Name, func(t *testing.T) {
			nonce, err := ParseNonce(tc.Nonce)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(nonce[:]); got != tc.NonceHex {
				t.Fatalf("nonce hex %s, want %s", got, tc.NonceHex)
			}
			resp := Response{
				Nonce:           nonce,
				ReferenceUnixMs: mustU64(t, tc.ReferenceUnixMs),
				UncertaintyMs:   mustU64(t, tc.UncertaintyMs),
				Synced:          tc.Synced == 1,
				SourceAgeMs:     mustU64(t, tc.SourceAgeMs),
			}
			if got := hex.EncodeToString(AppendMACInput(nil, &resp)); got != tc.MACInputHex {
				t.Fatalf("MAC input\n got %s\nwant %s", got, tc.MACInputHex)
			}
			key := NewKey([]byte(tc.SecretASCII))
			key.Sign(&resp)
			if resp.MAC.String() != tc.MAC {
				t.Fatalf("MAC %s, want %s", resp.MAC, tc.MAC)
			}
			if got := string(EncodeRequest(Request{Nonce: nonce})); got != tc.RequestLine+"\n" {
				t.Fatalf("request %q, want %q", got, tc.RequestLine)
			}
			ch := NewChallenge(nonce)
			if got := string(ch.AppendRequest(nil)); got != tc.RequestLine+"\n" {
				t.Fatalf("challenge's request %q, want %q", got, tc.RequestLine)
			}
			if got, err := ch.ParseVerify([]byte(tc.ResponseLine), KeyRing{key}); err != nil || got != resp {
				t.Fatalf("Challenge.ParseVerify: %+v %v, want %+v", got, err, resp)
			}
			if got := string(EncodeResponse(&resp)); got != tc.ResponseLine+"\n" {
				t.Fatalf("response %q, want %q", got, tc.ResponseLine)
			}
			req, err := ParseRequest([]byte(tc.RequestLine))
			if err != nil || req.Nonce != nonce {
				t.Fatalf("ParseRequest: %v %v", req, err)
			}
			parsed, err := ParseResponse([]byte(tc.ResponseLine), nonce)
			if err != nil {
				t.Fatal(err)
			}
			if parsed != resp {
				t.Fatalf("parsed %+v, want %+v", parsed, resp)
			}
			if err := key.Verify(&parsed); err != nil {
				t.Fatal(err)
			}
			if err := Verify([]byte(tc.SecretASCII), &parsed); err != nil {
				t.Fatal(err)
			}
			// a verifier told the agent is a dev reference refuses a real one
			if err := Verify(DevKey([]byte(tc.SecretASCII)), &parsed); !hasReason(err, ReasonMAC) {
				t.Fatalf("dev key accepted a production MAC: %v", err)
			}
		})
	}
}

// SPEC §1.3: the dev-reference sample verifies only under dev_key.
func TestVectorsDevReference(t *testing.T) {
	d := loadVectors(t).DevReference
	secret := []byte(d.SecretASCII)
	if got := hex.EncodeToString(DevKey(secret)); got != d.DevKeyHex {
		t.Fatalf("dev_key %s, want %s", got, d.DevKeyHex)
	}
	nonce, err := ParseNonce(d.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseResponse([]byte(d.ResponseLine), nonce)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReferenceUnixMs != mustU64(t, d.ReferenceUnixMs) || r.UncertaintyMs != mustU64(t, d.UncertaintyMs) ||
		r.Synced != (d.Synced == 1) || r.SourceAgeMs != mustU64(t, d.SourceAgeMs) || r.MAC.String() != d.MAC {
		t.Fatalf("parsed %+v differs from the vector", r)
	}
	if err := Verify(DevKey(secret), &r); err != nil {
		t.Fatalf("dev_key: %v", err)
	}
	ch := NewChallenge(nonce)
	if got, err := ch.ParseVerify([]byte(d.ResponseLine), KeyRing{NewKey(DevKey(secret))}); err != nil || got != r {
		t.Fatalf("Challenge.ParseVerify with dev_key: %+v %v", got, err)
	}
	if _, err := ch.ParseVerify([]byte(d.ResponseLine), KeyRing{NewKey(secret)}); !hasReason(err, ReasonMAC) {
		t.Fatalf("Challenge.ParseVerify with the plain secret: %v, want reason mac", err)
	}
	if err := Verify(secret, &r); !hasReason(err, ReasonMAC) {
		t.Fatalf("plain secret: got %v, want reason mac", err)
	}
	resigned := r
	resigned.MAC = MAC{}
	Sign(DevKey(secret), &resigned)
	if resigned.MAC != r.MAC {
		t.Fatal("signing with dev_key does not reproduce the vector")
	}
}

// SPEC §1.5: each invalid response is rejected for exactly the stated reason.
func TestVectorsInvalidResponses(t *testing.T) {
	v := loadVectors(t)
	key := NewKey([]byte(v.Valid[0].SecretASCII))
	for _, tc := range v.InvalidResponses {
		t.Run(tc.Name, func(t *testing.T) {
			want := Reason(tc.Reason)
			if !want.Valid() {
				t.Fatalf("vector names unknown reason %q", tc.Reason)
			}
			nonce, err := ParseNonce(tc.ExpectNonce)
			if err != nil {
				t.Fatal(err)
			}
			got := CheckResponse([]byte(tc.Line), nonce, KeyRing{key})
			if !hasReason(got, want) {
				t.Fatalf("got %v, want reason %s", got, want)
			}
			ch := NewChallenge(nonce)
			if r, err := ch.ParseVerify([]byte(tc.Line), KeyRing{key}); !hasReason(err, want) || r != (Response{}) {
				t.Fatalf("Challenge.ParseVerify: %+v %v, want reason %s", r, err, want)
			}
			// the same line from a stream (with its LF) gives the same reason
			lr := NewLineReader(bytes.NewReader([]byte(tc.Line + "\n")))
			line, err := lr.ReadLine()
			if err == nil {
				err = CheckResponse(line, nonce, KeyRing{key})
			}
			if !hasReason(err, want) {
				t.Fatalf("via LineReader: got %v, want reason %s", err, want)
			}
		})
	}
}

// SPEC §2.1: an agent answers none of the invalid requests.
func TestVectorsInvalidRequests(t *testing.T) {
	for _, tc := range loadVectors(t).InvalidRequests {
		t.Run(tc.Name, func(t *testing.T) {
			if req, err := ParseRequest([]byte(tc.Line)); err == nil {
				t.Fatalf("accepted %q as %+v", tc.Line, req)
			}
			stream := tc.Line + "\n"
			if tc.Name == "oversize-no-lf" {
				stream = tc.Line
			}
			lr := NewLineReader(bytes.NewReader([]byte(stream)))
			line, err := lr.ReadLine()
			if err == nil {
				_, err = ParseRequest(line)
			}
			if err == nil {
				t.Fatalf("stream %q accepted", stream)
			}
			if _, ok := ReasonOf(err); !ok {
				t.Fatalf("error without reason: %v", err)
			}
		})
	}
}

func hasReason(err error, want Reason) bool {
	r, ok := ReasonOf(err)
	return ok && r == want
}

func TestNonceRoundTrip(t *testing.T) {
	seen := map[Nonce]bool{}
	for i := 0; i < 1000; i++ {
		n, err := NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatal("nonce repeated")
		}
		seen[n] = true
		back, err := ParseNonce(n.String())
		if err != nil || back != n {
			t.Fatalf("round trip %v: %v %v", n, back, err)
		}
		if got := base64.RawURLEncoding.EncodeToString(n[:]); got != n.String() {
			t.Fatal("nonce string is not base64url")
		}
	}
}
