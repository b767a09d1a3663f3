package mesh

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

// Handshake frames (SPEC §5 "Mesh"). Every frame is a 2-byte big-endian
// body length followed by the body; every body starts with the protocol
// version and the frame type:
//
//	hello = version 0x01 idLen id addrLen addr nonce[32] key[32] share[32]
//	proof = version 0x02 mac[32] sig[64]
//
// id is the sender's full NodeId, NAME or NAME~G (identity.ValidNodeID;
// its key is the trust-map entry of NAME, identity.TrustName), addr the
// sender's advertised mesh
// address (1..=255 bytes 0x21–0x7E), key its ed25519 public key, share
// its ephemeral X25519 public key for this handshake. After the two
// proofs every byte is in sealed records (seal.go).
const (
	// Version is the handshake protocol version this package speaks. 2:
	// the dialer proves first, key shares, sealed records.
	Version = 2
	// MaxFrame is the largest frame body accepted; a longer length prefix
	// drops the connection before anything else is read.
	MaxFrame = 512
	// NonceSize is the size of each side's fresh handshake nonce.
	NonceSize = 32
	// MaxAddrLen is the longest advertised address in a hello.
	MaxAddrLen = 255
)

// Frame types.
const (
	frameHello = 1
	frameProof = 2
)

// Frame decoding errors, matched with errors.Is.
var (
	ErrFormat   = errors.New("mesh: malformed handshake frame")
	ErrVersion  = errors.New("mesh: unsupported handshake version")
	ErrOversize = errors.New("mesh: handshake frame too large")
)

// Hello is the first frame from each side.
type Hello struct {
	ID    string
	Addr  string
	Nonce [NonceSize]byte
	Key   [ed25519.PublicKeySize]byte
	Share [ShareSize]byte // ephemeral X25519 public key
}

// ShareSize is the size of a hello's X25519 key share.
const ShareSize = 32

// helloTail is the fixed-size part of a hello after its address.
const helloTail = NonceSize + ed25519.PublicKeySize + ShareSize

// Proof carries a side's HMAC over the transcript (proof of the gossip
// secret) and its ed25519 signature over the transcript.
type Proof struct {
	MAC [32]byte
	Sig [ed25519.SignatureSize]byte
}

// ReadFrame reads one frame and returns its body (1..=MaxFrame bytes).
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	return readBody(r, hdr)
}

// readBody reads the body announced by hdr.
func readBody(r io.Reader, hdr [2]byte) ([]byte, error) {
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrFormat)
	}
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes announced, at most %d allowed", ErrOversize, n, MaxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// AppendFrame appends body, length-prefixed, to dst. body must be
// 1..=MaxFrame bytes (the encoders below always are).
func AppendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(body)))
	return append(dst, body...)
}

// checkHead checks version and type, in that order.
func checkHead(b []byte, typ byte) error {
	if len(b) < 2 {
		return fmt.Errorf("%w: %d-byte body", ErrFormat, len(b))
	}
	if b[0] != Version {
		return fmt.Errorf("%w: version %d, this node speaks %d", ErrVersion, b[0], Version)
	}
	if b[1] != typ {
		return fmt.Errorf("%w: frame type %d where %d was expected", ErrFormat, b[1], typ)
	}
	return nil
}

// EncodeHello returns the body of a hello frame. It does not validate h;
// DecodeHello(EncodeHello(h)) succeeds only for a valid h.
func EncodeHello(h Hello) []byte {
	b := make([]byte, 0, 4+len(h.ID)+len(h.Addr)+helloTail)
	b = append(b, Version, frameHello, byte(len(h.ID)))
	b = append(b, h.ID...)
	b = append(b, byte(len(h.Addr)))
	b = append(b, h.Addr...)
	b = append(b, h.Nonce[:]...)
	b = append(b, h.Key[:]...)
	return append(b, h.Share[:]...)
}

// DecodeHello parses a hello body strictly: a valid NodeId (generation
// included), a valid
// address, the three fixed-size fields, nothing after them.
func DecodeHello(b []byte) (Hello, error) {
	var h Hello
	if err := checkHead(b, frameHello); err != nil {
		return h, err
	}
	rest := b[2:]
	id, rest, ok := cutLen(rest)
	if !ok {
		return h, fmt.Errorf("%w: hello truncated in the node id", ErrFormat)
	}
	if err := identity.ValidNodeID(id); err != nil {
		return h, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	addr, rest, ok := cutLen(rest)
	if !ok {
		return h, fmt.Errorf("%w: hello truncated in the address", ErrFormat)
	}
	if err := validAddr(addr); err != nil {
		return h, err
	}
	if len(rest) != helloTail {
		return h, fmt.Errorf("%w: hello has %d bytes after the address, want %d", ErrFormat, len(rest), helloTail)
	}
	h.ID, h.Addr = id, addr
	rest = rest[copy(h.Nonce[:], rest):]
	rest = rest[copy(h.Key[:], rest):]
	copy(h.Share[:], rest)
	return h, nil
}

// cutLen splits a 1-byte-length-prefixed string off b.
func cutLen(b []byte) (string, []byte, bool) {
	if len(b) < 1 || len(b)-1 < int(b[0]) {
		return "", nil, false
	}
	n := int(b[0])
	return string(b[1 : 1+n]), b[1+n:], true
}

func validAddr(a string) error {
	if a == "" {
		return fmt.Errorf("%w: empty address", ErrFormat)
	}
	for i := 0; i < len(a); i++ {
		if a[i] < 0x21 || a[i] > 0x7e {
			return fmt.Errorf("%w: address has byte 0x%02x at %d", ErrFormat, a[i], i)
		}
	}
	return nil
}

// EncodeProof returns the body of a proof frame.
func EncodeProof(p Proof) []byte {
	b := make([]byte, 0, 2+len(p.MAC)+len(p.Sig))
	b = append(b, Version, frameProof)
	b = append(b, p.MAC[:]...)
	return append(b, p.Sig[:]...)
}

// DecodeProof parses a proof body: exactly a MAC and a signature.
func DecodeProof(b []byte) (Proof, error) {
	var p Proof
	if err := checkHead(b, frameProof); err != nil {
		return p, err
	}
	if len(b) != 2+len(p.MAC)+len(p.Sig) {
		return p, fmt.Errorf("%w: proof body is %d bytes, want %d", ErrFormat, len(b), 2+len(p.MAC)+len(p.Sig))
	}
	copy(p.MAC[:], b[2:])
	copy(p.Sig[:], b[2+len(p.MAC):])
	return p, nil
}
