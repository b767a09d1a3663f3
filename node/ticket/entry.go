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
// Version 2 added OpRetire (SPEC §3.4), version 3 OpRevoke (SPEC §4),
// version 4 OpKeepAlive; it reads versions 1 to 3 too. Each entry is
// written in the oldest version that has its op (versionFor), so a node
// of the previous release keeps reading everything but the ops it does
// not know, and every accepted entry re-encodes to the same bytes. Any
// other version stops the node (SPEC §4: never a skip): a leader proposes
// an op of a newer version only once every server of its configuration
// says it reads that version (node/cluster/features.go).
const EntryVersion = 4

// versionFor is the version an entry with op is written in.
func versionFor(op Op) byte {
	switch op {
	case OpRetire:
		return 2
	case OpRevoke:
		return 3
	case OpKeepAlive:
		return 4
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
	// OpKeepAlive renews many tickets in one entry (entry version 4): its
	// items apply in order, each exactly as a Renew entry with the
	// entry's now and receive time would (SPEC §4), each with its own
	// result.
	OpKeepAlive Op = 8
)

// MaxKeepAliveItems is the most renewals one OpKeepAlive entry carries.
const MaxKeepAliveItems = 1024

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
	case OpKeepAlive:
		return "keepalive"
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
//	KeepAlive RecvMs Items (each: Name Holder Token LeaseS ExpiryMs)
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
	// Items are a KeepAlive's renewals, in the order they apply; every
	// other op has none.
	Items []RenewItem
}

// RenewItem is one renewal of a KeepAlive entry: the fields of a Renew
// entry that are not the entry's own (its now and receive time are).
// ExpiryMs = the entry's now + LeaseS×1000 + Δ, computed once by the
// proposer and carried absolute, as a Renew's.
type RenewItem struct {
	Name     string
	Holder   string
	Token    uint64
	LeaseS   uint8
	ExpiryMs uint64
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
	if len(e.Items) > 0 && e.Op != OpKeepAlive {
		return fmt.Errorf("%s carries no renewal items", e.Op)
	}
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
	case OpKeepAlive:
		return e.validateKeepAlive()
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
		if e.RecvMs > e.NowMs {
			return fmt.Errorf("recv_ms %d is after now_ms %d", e.RecvMs, e.NowMs)
		}
		return validLeaseExpiry(e.NowMs, e.LeaseS, e.ExpiryMs)
	}
	return nil
}

// validLeaseExpiry checks a Grant's or Renew's lease and that its expiry
// is now + lease_s×1000 + some Δ in 2..=60000.
func validLeaseExpiry(nowMs uint64, leaseS uint8, expiryMs uint64) error {
	if err := ValidLease(int64(leaseS)); err != nil {
		return err
	}
	lo, ok1 := ExpiryFor(nowMs, leaseS, 2)
	hi, ok2 := ExpiryFor(nowMs, leaseS, protocol.MaxDeltaMs)
	if !ok1 || !ok2 {
		return fmt.Errorf("now_ms %d overflows with the lease", nowMs)
	}
	if expiryMs < lo || expiryMs > hi {
		return fmt.Errorf("expiry_ms %d is not now_ms %d + lease + Δ (Δ in 2..=60000)", expiryMs, nowMs)
	}
	return nil
}

// validateKeepAlive checks a KeepAlive: 1..=MaxKeepAliveItems items, each
// valid as a Renew entry with the entry's now and receive time would be;
// the fields of a single-ticket op stay empty.
func (e *Entry) validateKeepAlive() error {
	if n := len(e.Items); n < 1 || n > MaxKeepAliveItems {
		return fmt.Errorf("keepalive carries %d items; want 1..=%d", n, MaxKeepAliveItems)
	}
	if e.Name != "" || e.Holder != "" || e.Token != 0 || e.LeaseS != 0 || e.ExpiryMs != 0 || e.DeltaMs != 0 || e.NodeID != "" {
		return errors.New("keepalive carries its tickets in its items only")
	}
	if e.RecvMs > e.NowMs {
		return fmt.Errorf("recv_ms %d is after now_ms %d", e.RecvMs, e.NowMs)
	}
	for i := range e.Items {
		if err := e.Items[i].validate(e.NowMs); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	return nil
}

// validate checks one renewal of a KeepAlive whose now is nowMs.
func (it *RenewItem) validate(nowMs uint64) error {
	if err := ValidName(it.Name); err != nil {
		return err
	}
	if err := ValidHolder(it.Holder); err != nil {
		return err
	}
	if it.Token == 0 {
		return errors.New("renew needs a token ≥ 1")
	}
	return validLeaseExpiry(nowMs, it.LeaseS, it.ExpiryMs)
}

// EncodeEntry returns the versioned, checksummed bytes of e. It refuses an
// entry that Decode would refuse.
func EncodeEntry(e *Entry) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ticket: encode %s: %w", e.Op, err)
	}
	size := 64 + len(e.Name) + len(e.Holder)
	for i := range e.Items {
		size += keepAliveItemFixed + len(e.Items[i].Name) + len(e.Items[i].Holder)
	}
	return appendEntry(make([]byte, 0, size), e), nil
}

// keepAliveItemFixed is an item's size in a KeepAlive without its name's
// and holder's bytes: their length bytes, token, lease, expiry.
const keepAliveItemFixed = 1 + 1 + 8 + 1 + 8

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
	case OpKeepAlive:
		b = binary.BigEndian.AppendUint64(b, e.RecvMs)
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Items)))
		for i := range e.Items {
			it := &e.Items[i]
			b = appendStr(b, it.Name)
			b = appendStr(b, it.Holder)
			b = binary.BigEndian.AppendUint64(b, it.Token)
			b = append(b, it.LeaseS)
			b = binary.BigEndian.AppendUint64(b, it.ExpiryMs)
		}
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
	case OpKeepAlive:
		e.RecvMs = r.u64()
		n := int(r.u16())
		// Every item takes at least keepAliveItemFixed bytes: a count the
		// body cannot hold is refused before anything is allocated for it.
		switch {
		case r.short:
			return Entry{}, entryErr(ErrFormat, "%s body is truncated", e.Op)
		case n < 1 || n > MaxKeepAliveItems:
			return Entry{}, entryErr(ErrFormat, "keepalive carries %d items; want 1..=%d", n, MaxKeepAliveItems)
		case n*keepAliveItemFixed > len(r.b):
			return Entry{}, entryErr(ErrFormat, "%s body is truncated", e.Op)
		}
		e.Items = make([]RenewItem, n)
		for i := range e.Items {
			it := &e.Items[i]
			it.Name, it.Holder, it.Token, it.LeaseS, it.ExpiryMs = r.str(), r.str(), r.u64(), r.u8(), r.u64()
		}
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

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
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
