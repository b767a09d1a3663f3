package mesh

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// Reason says why a handshake ended; it is the result label of
// mesh_handshakes_total and the Reason of a *HandshakeError.
type Reason string

// Handshake results.
const (
	ReasonOK                 Reason = "ok"
	ReasonTimeout            Reason = "timeout"             // the deadline on the whole handshake passed
	ReasonIO                 Reason = "io"                  // the connection failed or closed mid-handshake
	ReasonFormat             Reason = "format"              // a malformed frame, or garbage
	ReasonOversize           Reason = "oversize"            // a length prefix above MaxFrame
	ReasonVersion            Reason = "version"             // a handshake version this node does not speak
	ReasonTLS                Reason = "tls"                 // TLS failed, or one side speaks TLS and the other not
	ReasonSelf               Reason = "self"                // the peer claims this node's own id
	ReasonUntrusted          Reason = "untrusted"           // the peer's id is not in the trust map
	ReasonKeyMismatch        Reason = "key_mismatch"        // the peer's key differs from the trust map's
	ReasonUnadvertised       Reason = "unadvertised"        // the peer advertises no key in gossip
	ReasonAdvertisedMismatch Reason = "advertised_mismatch" // the peer's key differs from the one it advertises in gossip
	ReasonWrongPeer          Reason = "wrong_peer"          // the dialed address answered with another id than wanted
	ReasonMAC                Reason = "mac"                 // the peer does not prove the gossip secret
	ReasonSignature          Reason = "signature"           // the peer's signature does not verify
	ReasonRefused            Reason = "refused"             // the acceptor closed instead of accepting us (see its log)
	ReasonBusy               Reason = "busy"                // gave its place up to a newer connection: too many handshakes in progress from its source, or in all
	ReasonClosed             Reason = "closed"              // this mesh is closing
)

// Reasons lists every handshake result.
func Reasons() []Reason {
	return []Reason{ReasonOK, ReasonTimeout, ReasonIO, ReasonFormat, ReasonOversize, ReasonVersion,
		ReasonTLS, ReasonSelf, ReasonUntrusted, ReasonKeyMismatch, ReasonUnadvertised,
		ReasonAdvertisedMismatch, ReasonWrongPeer, ReasonMAC, ReasonSignature, ReasonRefused,
		ReasonBusy, ReasonClosed}
}

// HandshakeError is a refused handshake: who (address, and the id the peer
// claimed if it got that far) and why. Err never holds secret bytes.
type HandshakeError struct {
	Reason Reason
	Addr   string // the peer's network address
	ID     string // the NodeId the peer claimed; "" before its hello
	Err    error
}

func (e *HandshakeError) Error() string {
	who := e.Addr
	if e.ID != "" {
		who = fmt.Sprintf("%q at %s", e.ID, e.Addr)
	}
	return fmt.Sprintf("mesh: handshake with %s refused (%s): %v", who, e.Reason, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// hsErr is an error with a known reason, raised inside the handshake.
type hsErr struct {
	reason Reason
	err    error
}

func (e *hsErr) Error() string { return e.err.Error() }
func (e *hsErr) Unwrap() error { return e.err }

func fail(r Reason, format string, args ...any) error {
	return &hsErr{reason: r, err: fmt.Errorf(format, args...)}
}

// classify maps an error from the handshake to its reason.
func classify(err error) Reason {
	var h *hsErr
	var ne net.Error
	switch {
	case errors.As(err, &h):
		return h.reason
	case errors.Is(err, ErrOversize):
		return ReasonOversize
	case errors.Is(err, ErrVersion):
		return ReasonVersion
	case errors.Is(err, ErrFormat):
		return ReasonFormat
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	}
	return ReasonIO
}

// Labels of the transcript, the two roles and the two directions' keys. A
// proof made as acceptor never verifies as a dialer's and vice versa, so
// a reflected handshake fails; the nonces make every transcript fresh, so
// a replayed one fails.
const (
	labelHMACKey    = "tckclk mesh handshake v1"
	labelTranscript = "tckclk mesh transcript v2\x00"
	labelSession    = "tckclk mesh session v1\x00"
	labelKeyD2A     = "tckclk mesh seal v2 dialer to acceptor"
	labelKeyA2D     = "tckclk mesh seal v2 acceptor to dialer"
	roleDialer      = "dialer\x00"
	roleAcceptor    = "acceptor\x00"
)

// handshakeKey derives the HMAC key of the handshake from the gossip
// secret, so the memberlist key itself is never used for a second purpose.
func handshakeKey(gossipSecret []byte) []byte {
	h := hmac.New(sha256.New, gossipSecret)
	h.Write([]byte(labelHMACKey))
	return h.Sum(nil)
}

// transcript binds the protocol label, version, both ids, both addresses,
// both nonces, both keys, both key shares and the roles (the dialer's
// hello comes first).
func transcript(dialer, acceptor Hello) []byte {
	t := []byte(labelTranscript)
	t = AppendFrame(t, EncodeHello(dialer))
	return AppendFrame(t, EncodeHello(acceptor))
}

// sessionID names a session identically on both ends.
func sessionID(t []byte) string {
	s := sha256.Sum256(append([]byte(labelSession), t...))
	return hex.EncodeToString(s[:8])
}

// SessionKeys derives the two directions' sealing keys of a session:
// HKDF-SHA-256 with the X25519 secret of the two key shares and the
// gossip secret as input, the SHA-256 of the transcript as salt, and the
// direction as info. Both proofs sign the transcript, shares included, so
// the keys are known to the two authenticated ends only: not to an
// on-path attacker, even one holding the gossip secret, and not from a
// recording once the ephemeral keys are gone.
func SessionKeys(shared, gossipSecret, transcript []byte) (dialerToAcceptor, acceptorToDialer []byte, err error) {
	ikm := append(append(make([]byte, 0, len(shared)+len(gossipSecret)), shared...), gossipSecret...)
	defer clear(ikm)
	salt := sha256.Sum256(transcript)
	if dialerToAcceptor, err = hkdf.Key(sha256.New, ikm, salt[:], labelKeyD2A, KeySize); err != nil {
		return nil, nil, err
	}
	if acceptorToDialer, err = hkdf.Key(sha256.New, ikm, salt[:], labelKeyA2D, KeySize); err != nil {
		return nil, nil, err
	}
	return dialerToAcceptor, acceptorToDialer, nil
}

func proofMAC(hkey []byte, role string, t []byte) [32]byte {
	h := hmac.New(sha256.New, hkey)
	h.Write([]byte(role))
	h.Write(t)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func makeProof(hkey []byte, priv ed25519.PrivateKey, role string, t []byte) Proof {
	p := Proof{MAC: proofMAC(hkey, role, t)}
	copy(p.Sig[:], ed25519.Sign(priv, append([]byte(role), t...)))
	return p
}

// checkProof verifies the peer's proof made in role: the MAC first
// (constant time), then the signature with pub (the key from the peer's
// hello, already checked equal to the trusted and the advertised key).
func checkProof(hkey []byte, pub []byte, role string, t []byte, p Proof) error {
	want := proofMAC(hkey, role, t)
	if !hmac.Equal(want[:], p.MAC[:]) {
		return fail(ReasonMAC, "the peer's HMAC over the transcript does not verify: it does not hold this cluster's gossip secret, or the transcript was tampered with")
	}
	if !ed25519.Verify(ed25519.PublicKey(pub), append([]byte(role), t...), p.Sig[:]) {
		return fail(ReasonSignature, "the peer's ed25519 signature over the transcript does not verify")
	}
	return nil
}

// readFrame reads one frame, naming a TLS record where a frame was
// expected: a TLS record starts 0x14–0x17 0x03, never a valid length here.
func readFrame(r io.Reader, tlsOn bool) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if !tlsOn && hdr[0] >= 0x14 && hdr[0] <= 0x17 && hdr[1] == 0x03 {
		return nil, fail(ReasonTLS, "the peer speaks TLS, but cluster.internode.tls is not enabled on this node")
	}
	return readBody(r, hdr)
}
