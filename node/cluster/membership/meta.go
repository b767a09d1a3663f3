package membership

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
)

// MetaVersion is the format version Encode writes and the only one Decode
// accepts: signed metadata (SPEC §5 "Identity").
const MetaVersion = 2

// unsignedVersion is the format of earlier releases, which carried no
// signature: Decode refuses it with ErrUnsigned.
const unsignedVersion = 1

// MaxMetaSize is memberlist's limit on a node's metadata (memberlist.MetaMaxSize).
const MaxMetaSize = 512

// Bounds of the metadata fields.
const (
	MinDeltaMs          = 2     // SPEC §3.2
	MaxDeltaMs          = 60000 // SPEC §3.2
	MaxBootstrapExpect  = 32
	MaxNodeIDLen        = 80 // a cluster.name (≤ 64) with a generation suffix "~G" to spare
	MaxMeshAddrLen      = 96
	MaxFailureDomainLen = 64
	MaxVersionLen       = 64
)

// MaxEncodedLen is the longest encoding the bounds above allow (437 bytes),
// well within MaxMetaSize.
const MaxEncodedLen = fixedLen + 4 + MaxNodeIDLen + MaxMeshAddrLen + MaxFailureDomainLen + MaxVersionLen + ed25519.SignatureSize

// ClockState is the node's clock health as it advertises it (SPEC §3.5).
type ClockState uint8

// Clock states. The zero value is not a state: Encode refuses it.
const (
	ClockCheck   ClockState = 1 // clock_check: not yet proven healthy
	ClockHealthy ClockState = 2
	ClockFailed  ClockState = 3 // terminal
)

func (s ClockState) String() string {
	switch s {
	case ClockCheck:
		return "clock_check"
	case ClockHealthy:
		return "healthy"
	case ClockFailed:
		return "failed"
	}
	return "ClockState(" + strconv.Itoa(int(s)) + ")"
}

// Role is the Raft role a node believes it has (SPEC §5 "Bounded core").
type Role uint8

// Roles.
const (
	RoleNone    Role = 0 // not yet known (before bootstrap or join)
	RoleVoter   Role = 1
	RoleStandby Role = 2
	RoleClient  Role = 3 // gossip-only
)

func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleVoter:
		return "voter"
	case RoleStandby:
		return "standby"
	case RoleClient:
		return "client"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// BootstrapState is where the node is in SPEC §5 "Bootstrap".
type BootstrapState uint8

// Bootstrap states.
const (
	BootstrapNone     BootstrapState = 0 // bootstrap_expect 0: join only
	BootstrapWaiting  BootstrapState = 1 // waiting for bootstrap_expect eligible nodes
	BootstrapDone     BootstrapState = 2 // this node bootstrapped (or joined) a cluster
	BootstrapHasState BootstrapState = 3 // existing Raft state on disk: never bootstraps
)

func (b BootstrapState) String() string {
	switch b {
	case BootstrapNone:
		return "none"
	case BootstrapWaiting:
		return "waiting"
	case BootstrapDone:
		return "bootstrapped"
	case BootstrapHasState:
		return "has_state"
	}
	return "BootstrapState(" + strconv.Itoa(int(b)) + ")"
}

// Meta is the metadata a node advertises in gossip. It is comparable (==).
//
// Every encoding is signed with the node's ed25519 identity key over all
// of it: NodeID, Seq and every other field (SPEC §5 "Identity"). The
// gossip key only lets a node into the conversation; what a Meta claims
// (retired, clock FAILED, role, eligibility) is believed only when the key
// the trust map holds for the node's name verifies it.
type Meta struct {
	// NodeID is the node's NodeId: its cluster.name, or NAME~G for a later
	// generation of NAME (SPEC §3.4), whose key and gossip name stay
	// NAME's (see identity.TrustName).
	NodeID string
	// Seq orders one node's metadata: each new encoding carries a higher
	// Seq than the last (Membership seeds it from the wall clock in ns, so
	// it grows across restarts too). Peers refuse a Seq older than the
	// last they accepted from that node: a replayed capture changes nothing.
	Seq               uint64
	MeshAddr          string // host:port of the internode mesh
	PublicKey         [ed25519.PublicKeySize]byte
	DeltaMs           uint16 // Δ, MinDeltaMs..MaxDeltaMs
	ProtocolVersion   uint8  // TCKCLK protocol version, ≥ 1
	ClockState        ClockState
	ClockBoundMs      uint32
	ClockSampleUnixMs int64 // wall time of the last clock sample, unix ms; 0: none yet
	RaftEligible      bool
	RaftPriority      int32 // lower first
	FailureDomain     string
	Role              Role
	Bootstrap         BootstrapState
	BootstrapExpect   uint8 // 0..MaxBootstrapExpect
	Retired           bool
	DataDirOK         bool
	Leaving           bool   // set by Leave before the leave broadcast: peers record "left", not "failed"
	Version           string // software version
}

// Key returns the advertised public key as an ed25519.PublicKey (a copy).
func (m *Meta) Key() ed25519.PublicKey {
	return append(ed25519.PublicKey(nil), m.PublicKey[:]...)
}

// ErrMalformedMeta is matched (errors.Is) by every *MetaError.
var ErrMalformedMeta = errors.New("membership: malformed meta")

// Refusals of well-formed metadata that is not what the trusted key signed.
var (
	ErrUnsigned     = errors.New("membership: meta is unsigned (the format of an earlier release)")
	ErrKeyMismatch  = errors.New("membership: meta advertises another public key than the trusted one")
	ErrBadSignature = errors.New("membership: meta signature does not verify under the trusted key")
)

// MetaError says which field of an encoding is wrong and why.
type MetaError struct {
	Field  string // "version", "length", "delta_ms", …
	Reason string
}

func (e *MetaError) Error() string { return "membership: meta " + e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrMalformedMeta) true.
func (e *MetaError) Is(target error) bool { return target == ErrMalformedMeta }

func metaErr(field, reason string) error { return &MetaError{Field: field, Reason: reason} }

// Flag bits.
const (
	flagEligible  = 1 << 0
	flagRetired   = 1 << 1
	flagDataDirOK = 1 << 2
	flagLeaving   = 1 << 3
	flagsKnown    = flagEligible | flagRetired | flagDataDirOK | flagLeaving
)

// fixedLen is the size of the fixed part of a version-2 encoding:
// version, flags, key, Δ, protocol, clock state, bound, sample time,
// role, bootstrap, expect, priority, sequence.
const fixedLen = 1 + 1 + 32 + 2 + 1 + 1 + 4 + 8 + 1 + 1 + 1 + 4 + 8

// signContext separates these signatures from every other use of the
// identity key (the mesh handshake signs its transcript).
const signContext = "TCKCLK gossip meta v2\x00"

// Encode validates m, checks that key is the one m advertises and returns
// m's version-2 encoding signed with key (at most MaxEncodedLen bytes).
// Layout, big-endian:
//
//	version u8 | flags u8 | public key [32] | Δ ms u16 | protocol u8 |
//	clock state u8 | clock bound ms u32 | clock sample unix ms i64 |
//	role u8 | bootstrap u8 | bootstrap_expect u8 | raft priority i32 |
//	seq u64 | node id (u8 len + bytes) | mesh addr (u8 len + bytes) |
//	failure domain (u8 len + bytes) | version string (u8 len + bytes) |
//	signature [64]
//
// The signature is ed25519 over signContext followed by every byte before
// the signature.
func Encode(m Meta, key ed25519.PrivateKey) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, metaErr("signing_key", "not an ed25519 private key")
	}
	if !keyEqual(key.Public().(ed25519.PublicKey), m.PublicKey) {
		return nil, metaErr("public_key", "not the signing key's public key")
	}
	b := make([]byte, 0, fixedLen+4+len(m.NodeID)+len(m.MeshAddr)+len(m.FailureDomain)+len(m.Version)+ed25519.SignatureSize)
	var flags byte
	if m.RaftEligible {
		flags |= flagEligible
	}
	if m.Retired {
		flags |= flagRetired
	}
	if m.DataDirOK {
		flags |= flagDataDirOK
	}
	if m.Leaving {
		flags |= flagLeaving
	}
	b = append(b, MetaVersion, flags)
	b = append(b, m.PublicKey[:]...)
	b = binary.BigEndian.AppendUint16(b, m.DeltaMs)
	b = append(b, m.ProtocolVersion, byte(m.ClockState))
	b = binary.BigEndian.AppendUint32(b, m.ClockBoundMs)
	b = binary.BigEndian.AppendUint64(b, uint64(m.ClockSampleUnixMs))
	b = append(b, byte(m.Role), byte(m.Bootstrap), m.BootstrapExpect)
	b = binary.BigEndian.AppendUint32(b, uint32(m.RaftPriority))
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	for _, s := range []string{m.NodeID, m.MeshAddr, m.FailureDomain, m.Version} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	b = append(b, ed25519.Sign(key, signedBytes(b))...)
	if len(b) > MaxMetaSize { // unreachable with the bounds above (MaxEncodedLen); kept as the contract
		return nil, metaErr("length", "encoding exceeds "+strconv.Itoa(MaxMetaSize)+" bytes")
	}
	return b, nil
}

func signedBytes(body []byte) []byte {
	return append([]byte(signContext), body...)
}

// Decode parses b strictly and verifies it against key, the trust map's
// key for the node's name: a malformed encoding is a *MetaError, the
// earlier unsigned format ErrUnsigned, another advertised key
// ErrKeyMismatch, a signature that does not verify ErrBadSignature. Only
// what Decode returns without error may be acted on. It never panics.
func Decode(b []byte, key ed25519.PublicKey) (Meta, error) {
	m, err := DecodeUnverified(b)
	switch {
	case err != nil:
		return Meta{}, err
	case !keyEqual(key, m.PublicKey):
		return Meta{}, ErrKeyMismatch
	case !ed25519.Verify(key, signedBytes(b[:len(b)-ed25519.SignatureSize]), b[len(b)-ed25519.SignatureSize:]):
		return Meta{}, ErrBadSignature
	}
	return m, nil
}

// DecodeUnverified parses a version-2 encoding strictly without checking
// its signature (for the fuzz target and diagnostics; nothing may act on
// its result): an unknown version, a short or oversize input, trailing
// bytes, unknown flag bits, an out-of-range enum or value, or a malformed
// string is a *MetaError; version 1 is ErrUnsigned. It never panics.
func DecodeUnverified(b []byte) (Meta, error) {
	var m Meta
	if len(b) > MaxMetaSize {
		return Meta{}, metaErr("length", "longer than "+strconv.Itoa(MaxMetaSize)+" bytes")
	}
	if len(b) == 0 {
		return Meta{}, metaErr("version", "empty")
	}
	if b[0] == unsignedVersion {
		return Meta{}, ErrUnsigned
	}
	if b[0] != MetaVersion {
		return Meta{}, metaErr("version", "unknown format version "+strconv.Itoa(int(b[0])))
	}
	if len(b) < fixedLen {
		return Meta{}, metaErr("length", "truncated")
	}
	flags := b[1]
	if flags&^flagsKnown != 0 {
		return Meta{}, metaErr("flags", "unknown flag bits")
	}
	m.RaftEligible = flags&flagEligible != 0
	m.Retired = flags&flagRetired != 0
	m.DataDirOK = flags&flagDataDirOK != 0
	m.Leaving = flags&flagLeaving != 0
	copy(m.PublicKey[:], b[2:34])
	m.DeltaMs = binary.BigEndian.Uint16(b[34:])
	m.ProtocolVersion = b[36]
	m.ClockState = ClockState(b[37])
	m.ClockBoundMs = binary.BigEndian.Uint32(b[38:])
	m.ClockSampleUnixMs = int64(binary.BigEndian.Uint64(b[42:]))
	m.Role = Role(b[50])
	m.Bootstrap = BootstrapState(b[51])
	m.BootstrapExpect = b[52]
	m.RaftPriority = int32(binary.BigEndian.Uint32(b[53:]))
	m.Seq = binary.BigEndian.Uint64(b[57:])
	rest := b[fixedLen:]
	var strs [4]string
	for i, field := range []string{"node_id", "mesh_addr", "failure_domain", "software_version"} {
		if len(rest) < 1 {
			return Meta{}, metaErr(field, "truncated")
		}
		n := int(rest[0])
		if len(rest) < 1+n {
			return Meta{}, metaErr(field, "length past the end")
		}
		strs[i] = string(rest[1 : 1+n])
		rest = rest[1+n:]
	}
	if len(rest) != ed25519.SignatureSize {
		if len(rest) < ed25519.SignatureSize {
			return Meta{}, metaErr("signature", "truncated")
		}
		return Meta{}, metaErr("length", "trailing bytes")
	}
	m.NodeID, m.MeshAddr, m.FailureDomain, m.Version = strs[0], strs[1], strs[2], strs[3]
	if err := m.Validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// Validate checks every field against its bounds (what Encode and Decode
// enforce).
func (m *Meta) Validate() error {
	if m.NodeID == "" {
		return metaErr("node_id", "empty")
	}
	if err := checkText("node_id", m.NodeID, MaxNodeIDLen); err != nil {
		return err
	}
	if m.Seq == 0 {
		return metaErr("seq", "0 (unset)")
	}
	if m.PublicKey == ([ed25519.PublicKeySize]byte{}) {
		return metaErr("public_key", "all zero (unset)")
	}
	if m.DeltaMs < MinDeltaMs || m.DeltaMs > MaxDeltaMs {
		return metaErr("delta_ms", strconv.Itoa(int(m.DeltaMs))+" outside 2..60000")
	}
	if m.ProtocolVersion == 0 {
		return metaErr("protocol_version", "0 (unset)")
	}
	if m.ClockState < ClockCheck || m.ClockState > ClockFailed {
		return metaErr("clock_state", "unknown value "+strconv.Itoa(int(m.ClockState)))
	}
	if m.ClockSampleUnixMs < 0 {
		return metaErr("clock_sample_unix_ms", "negative")
	}
	if m.Role > RoleClient {
		return metaErr("role", "unknown value "+strconv.Itoa(int(m.Role)))
	}
	if m.Bootstrap > BootstrapHasState {
		return metaErr("bootstrap_state", "unknown value "+strconv.Itoa(int(m.Bootstrap)))
	}
	if m.BootstrapExpect > MaxBootstrapExpect {
		return metaErr("bootstrap_expect", strconv.Itoa(int(m.BootstrapExpect))+" above "+strconv.Itoa(MaxBootstrapExpect))
	}
	if err := checkMeshAddr(m.MeshAddr); err != nil {
		return err
	}
	if err := checkText("failure_domain", m.FailureDomain, MaxFailureDomainLen); err != nil {
		return err
	}
	return checkText("software_version", m.Version, MaxVersionLen)
}

// checkText allows printable ASCII without spaces (0x21..0x7e), up to max bytes.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return metaErr(field, "longer than "+strconv.Itoa(max)+" bytes")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return metaErr(field, "byte "+strconv.Itoa(i)+" is not printable ASCII")
		}
	}
	return nil
}

func checkMeshAddr(s string) error {
	if err := checkText("mesh_addr", s, MaxMeshAddrLen); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return metaErr("mesh_addr", "not host:port")
	}
	if !validPort(port) {
		return metaErr("mesh_addr", "port not in 1..65535")
	}
	return nil
}

// validPort accepts a canonical decimal port 1..65535 (no sign, no leading zero).
func validPort(p string) bool {
	if p == "" || len(p) > 5 || p[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n >= 1 && n <= 65535
}
