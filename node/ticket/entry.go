package ticket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/tckclk/tckclk/protocol"
)

// EntryVersion is the newest log-entry format this code writes and reads.
// Version 2 added OpRetire (SPEC §3.4), version 3 OpRevoke (SPEC §4); it
// reads versions 1 and 2 too. Each entry is written in the oldest version
// that has its op (versionFor), so a node of the previous release keeps
// reading everything but the ops it does not know, and every accepted
// entry re-encodes to the same bytes. Any other version stops the node
// (SPEC §4: never a skip).
const EntryVersion = 3

// versionFor is the version an entry with op is written in.
func versionFor(op Op) byte {
	switch op {
	case OpRetire:
		return 2
	case OpRevoke:
		return 3
	}
	return 1
}

// Op is the operation a log entry carries.
type Op uint8

// Operations. Init records Δ in the replicated state at bootstrap.
const (
	OpInit    Op = 1
	OpGrant   Op = 2
	OpRenew   Op = 3
	OpRelease Op = 4
	OpExpire  Op = 5
	// OpRetire records a NodeId whose clock FAILED after it joined (SPEC
	// §3.4): never added to the configuration again (entry version 2).
	OpRetire Op = 6
	// OpRevoke is an administrator's Revoke (SPEC §4): the holder can no
	// longer Renew; the ticket frees at its expiry (entry version 3).
	OpRevoke Op = 7
)

func (o Op) String() string {
	switch o {
	case OpInit:
		return "init"
	case OpGrant:
		return "grant"
	case OpRenew:
		return "renew"
	case OpRelease:
		return "release"
	case OpExpire:
		return "expire"
	case OpRetire:
		return "retire"
	case OpRevoke:
		return "revoke"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Sentinel kinds of a decoding failure; every one is fatal for the node.
var (
	ErrVersion  = errors.New("unknown format version")
	ErrChecksum = errors.New("bad checksum")
	ErrFormat   = errors.New("malformed")
)

// DecodeError says why bytes from the log or a snapshot were refused. Kind
// is ErrVersion, ErrChecksum or ErrFormat (errors.Is works on it).
type DecodeError struct {
	What   string // "log entry" or "snapshot"
	Kind   error
	Detail string
}

func (e *DecodeError) Error() string {
	return "ticket: " + e.What + ": " + e.Kind.Error() + ": " + e.Detail
}

func (e *DecodeError) Unwrap() error { return e.Kind }

func entryErr(kind error, format string, args ...any) *DecodeError {
	return &DecodeError{What: "log entry", Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Entry is one decoded log entry. Which fields matter depends on Op:
//
//	Init    DeltaMs
//	Grant   Name Holder LeaseS RecvMs ExpiryMs
//	Renew   Name Holder Token LeaseS RecvMs ExpiryMs
//	Release Name Holder Token
//	Expire  Name Token
//	Retire  NodeID
//	Revoke  Name Token (0: whoever holds it at the entry's now)
//
// NowMs is the proposer's wall time in ms: rounded up for Grant and Renew,
// rounded down for Expire and Revoke. RecvMs is the wall ms (rounded down) at which the
// proposer received the request; the client's conservative bound is
// RecvMs + lease_s×1000. ExpiryMs = NowMs + lease_s×1000 + Δ, computed once
// by the proposer and carried absolute.
type Entry struct {
	Op       Op
	NowMs    uint64
	DeltaMs  uint64
	Name     string
	Holder   string
	Token    uint64
	LeaseS   uint8
	RecvMs   uint64
	ExpiryMs uint64
	NodeID   string // Retire: the retired NodeId
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	entryHeader  = 1 + 1 + 8 // version, op, now
	entryTrailer = 4         // CRC-32C
)

// ExpiryFor returns now + lease_s×1000 + Δ, or false on overflow.
func ExpiryFor(nowMs uint64, leaseS uint8, deltaMs uint64) (uint64, bool) {
	add := uint64(leaseS)*1000 + deltaMs
	if nowMs > math.MaxUint64-add {
		return 0, false
	}
	return nowMs + add, true
}

// Validate checks an entry's fields against SPEC §4 (names, holders,
// lease, Δ range, token, time relations). Encode and Decode both use it.
func (e *Entry) Validate() error {
	switch e.Op {
	case OpInit:
		if protocol.ValidateDelta(e.DeltaMs) != nil {
			return fmt.Errorf("init delta_ms %d is outside %d..=%d", e.DeltaMs, protocol.MinDeltaMs, protocol.MaxDeltaMs)
		}
		return nil
	case OpRetire:
		return ValidNodeID(e.NodeID)
	case OpRevoke:
		return ValidName(e.Name)
	case OpGrant, OpRenew, OpRelease, OpExpire:
	default:
		return fmt.Errorf("unknown op %d", uint8(e.Op))
	}
	if err := ValidName(e.Name); err != nil {
		return err
	}
	if e.Op != OpExpire {
		if err := ValidHolder(e.Holder); err != nil {
			return err
		}
	}
	if e.Op != OpGrant && e.Token == 0 {
		return fmt.Errorf("%s needs a token ≥ 1", e.Op)
	}
	if e.Op == OpGrant || e.Op == OpRenew {
		if err := ValidLease(int64(e.LeaseS)); err != nil {
			return err
		}
		if e.RecvMs > e.NowMs {
			return fmt.Errorf("recv_ms %d is after now_ms %d", e.RecvMs, e.NowMs)
		}
		lo, ok1 := ExpiryFor(e.NowMs, e.LeaseS, 2)
		hi, ok2 := ExpiryFor(e.NowMs, e.LeaseS, protocol.MaxDeltaMs)
		if !ok1 || !ok2 {
			return fmt.Errorf("now_ms %d overflows with the lease", e.NowMs)
		}
		if e.ExpiryMs < lo || e.ExpiryMs > hi {
			return fmt.Errorf("expiry_ms %d is not now_ms %d + lease + Δ (Δ in 2..=60000)", e.ExpiryMs, e.NowMs)
		}
	}
	return nil
}

// EncodeEntry returns the versioned, checksummed bytes of e. It refuses an
// entry that Decode would refuse.
func EncodeEntry(e *Entry) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ticket: encode %s: %w", e.Op, err)
	}
	return appendEntry(make([]byte, 0, 64+len(e.Name)+len(e.Holder)), e), nil
}

func appendEntry(b []byte, e *Entry) []byte {
	start := len(b)
	b = append(b, versionFor(e.Op), byte(e.Op))
	b = binary.BigEndian.AppendUint64(b, e.NowMs)
	switch e.Op {
	case OpInit:
		b = binary.BigEndian.AppendUint64(b, e.DeltaMs)
	case OpGrant:
		b = appendStr(b, e.Name)
		b = appendStr(b, e.Holder)
		b = append(b, e.LeaseS)
		b = binary.BigEndian.AppendUint64(b, e.RecvMs)
		b = binary.BigEndian.AppendUint64(b, e.ExpiryMs)
	case OpRenew:
		b = appendStr(b, e.Name)
		b = appendStr(b, e.Holder)
		b = binary.BigEndian.AppendUint64(b, e.Token)
		b = append(b, e.LeaseS)
		b = binary.BigEndian.AppendUint64(b, e.RecvMs)
		b = binary.BigEndian.AppendUint64(b, e.ExpiryMs)
	case OpRelease:
		b = appendStr(b, e.Name)
		b = appendStr(b, e.Holder)
		b = binary.BigEndian.AppendUint64(b, e.Token)
	case OpExpire:
		b = appendStr(b, e.Name)
		b = binary.BigEndian.AppendUint64(b, e.Token)
	case OpRetire:
		b = appendStr(b, e.NodeID)
	case OpRevoke:
		b = appendStr(b, e.Name)
		b = binary.BigEndian.AppendUint64(b, e.Token)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func appendStr(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// DecodeEntry parses bytes written by EncodeEntry. Checks run in order:
// length, version (ErrVersion), checksum (ErrChecksum), then the body and
// its fields (ErrFormat). Anything it accepts re-encodes to the same bytes.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	if len(b) < 1 {
		return e, entryErr(ErrFormat, "empty")
	}
	if b[0] < 1 || b[0] > EntryVersion {
		return e, entryErr(ErrVersion, "version %d; this node reads versions 1..=%d", b[0], EntryVersion)
	}
	if len(b) < entryHeader+entryTrailer {
		return e, entryErr(ErrFormat, "%d bytes is shorter than the %d-byte minimum", len(b), entryHeader+entryTrailer)
	}
	body, sum := b[:len(b)-entryTrailer], binary.BigEndian.Uint32(b[len(b)-entryTrailer:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return e, entryErr(ErrChecksum, "stored CRC-32C %08x, computed %08x", sum, got)
	}
	r := reader{b: body[entryHeader:]}
	e.Op = Op(body[1])
	e.NowMs = binary.BigEndian.Uint64(body[2:10])
	switch e.Op {
	case OpInit:
		e.DeltaMs = r.u64()
	case OpGrant:
		e.Name, e.Holder, e.LeaseS, e.RecvMs, e.ExpiryMs = r.str(), r.str(), r.u8(), r.u64(), r.u64()
	case OpRenew:
		e.Name, e.Holder, e.Token = r.str(), r.str(), r.u64()
		e.LeaseS, e.RecvMs, e.ExpiryMs = r.u8(), r.u64(), r.u64()
	case OpRelease:
		e.Name, e.Holder, e.Token = r.str(), r.str(), r.u64()
	case OpExpire:
		e.Name, e.Token = r.str(), r.u64()
	case OpRetire:
		e.NodeID = r.str()
	case OpRevoke:
		e.Name, e.Token = r.str(), r.u64()
	default:
		return Entry{}, entryErr(ErrFormat, "unknown op %d", body[1])
	}
	if v := versionFor(e.Op); body[0] != v {
		return Entry{}, entryErr(ErrFormat, "%s is a version-%d entry, not version %d", e.Op, v, body[0])
	}
	if r.short {
		return Entry{}, entryErr(ErrFormat, "%s body is truncated", e.Op)
	}
	if len(r.b) != 0 {
		return Entry{}, entryErr(ErrFormat, "%d trailing bytes after the %s body", len(r.b), e.Op)
	}
	if err := e.Validate(); err != nil {
		return Entry{}, entryErr(ErrFormat, "%v", err)
	}
	return e, nil
}

// reader consumes big-endian fields; a short read sets short and yields zero.
type reader struct {
	b     []byte
	short bool
}

func (r *reader) take(n int) []byte {
	if r.short || len(r.b) < n {
		r.short = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) str() string {
	n := int(r.u8())
	return string(r.take(n))
}
