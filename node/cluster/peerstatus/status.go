package peerstatus

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame constants.
const (
	Op           = 1             // the request byte
	Version      = 1             // the answer's format version
	MinLen       = 1 + 1 + 8 + 1 // the answer's length with no leader
	MaxLeaderLen = 128           // NodeIds are at most this long
	MaxLen       = MinLen + MaxLeaderLen
)

const flagHasState = 1 << 0

// ErrMalformed is matched (errors.Is) by every malformed answer.
var ErrMalformed = errors.New("peerstatus: malformed answer")

// Status is one peer's answer.
type Status struct {
	HasState  bool   // its Raft configuration is not empty
	LastIndex uint64 // its last log index
	Leader    string // the leader's NodeId it knows, "" for none
}

// Encode returns s's answer frame; a Leader longer than MaxLeaderLen is
// an error.
func Encode(s Status) ([]byte, error) {
	if len(s.Leader) > MaxLeaderLen {
		return nil, fmt.Errorf("peerstatus: leader id of %d bytes, above %d", len(s.Leader), MaxLeaderLen)
	}
	b := make([]byte, 2, MinLen+len(s.Leader))
	b[0] = Version
	if s.HasState {
		b[1] = flagHasState
	}
	b = binary.BigEndian.AppendUint64(b, s.LastIndex)
	b = append(b, byte(len(s.Leader)))
	return append(b, s.Leader...), nil
}

// Decode parses an answer strictly: a wrong length, an unknown version,
// unknown flag bits, a leader id longer than MaxLeaderLen or not the rest
// of the frame wrap ErrMalformed.
func Decode(b []byte) (Status, error) {
	switch {
	case len(b) < MinLen || len(b) > MaxLen:
		return Status{}, fmt.Errorf("%w: %d bytes, want %d..%d", ErrMalformed, len(b), MinLen, MaxLen)
	case b[0] != Version:
		return Status{}, fmt.Errorf("%w: version %d", ErrMalformed, b[0])
	case b[1]&^flagHasState != 0:
		return Status{}, fmt.Errorf("%w: unknown flag bits %#x", ErrMalformed, b[1])
	case int(b[10]) != len(b)-MinLen:
		return Status{}, fmt.Errorf("%w: leader id length %d, %d bytes follow", ErrMalformed, b[10], len(b)-MinLen)
	}
	return Status{HasState: b[1]&flagHasState != 0, LastIndex: binary.BigEndian.Uint64(b[2:]), Leader: string(b[MinLen:])}, nil
}

// OpRetiredGeneration asks a peer for the highest generation of the
// asker's own name (the mesh peer id of the stream) that the replicated
// state holds retired (SPEC §3.4): a node started on a data dir lost
// entirely learns there that its NodeId was retired and must come back as
// a later generation. The answer is GenLen bytes: version u8 (1) |
// generation u32 (0: none retired).
const OpRetiredGeneration = 2

// GenLen is the length of an OpRetiredGeneration answer.
const GenLen = 1 + 4

// EncodeGeneration returns the OpRetiredGeneration answer for gen.
func EncodeGeneration(gen uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{Version}, gen)
}

// DecodeGeneration parses an OpRetiredGeneration answer strictly.
func DecodeGeneration(b []byte) (uint32, error) {
	switch {
	case len(b) != GenLen:
		return 0, fmt.Errorf("%w: generation answer of %d bytes, want %d", ErrMalformed, len(b), GenLen)
	case b[0] != Version:
		return 0, fmt.Errorf("%w: version %d", ErrMalformed, b[0])
	}
	return binary.BigEndian.Uint32(b[1:]), nil
}
