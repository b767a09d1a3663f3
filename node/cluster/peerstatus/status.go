package peerstatus

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame constants.
const (
	Op      = 1         // the request byte
	Version = 1         // the answer's format version
	Len     = 1 + 1 + 8 // the answer's length
)

const flagHasState = 1 << 0

// ErrMalformed is matched (errors.Is) by every malformed answer.
var ErrMalformed = errors.New("peerstatus: malformed answer")

// Status is one peer's answer.
type Status struct {
	HasState  bool   // its Raft configuration is not empty
	LastIndex uint64 // its last log index
}

// Encode returns s's answer frame.
func Encode(s Status) []byte {
	b := make([]byte, 2, Len)
	b[0] = Version
	if s.HasState {
		b[1] = flagHasState
	}
	return binary.BigEndian.AppendUint64(b, s.LastIndex)
}

// Decode parses an answer strictly: a wrong length, an unknown version or
// unknown flag bits wrap ErrMalformed.
func Decode(b []byte) (Status, error) {
	switch {
	case len(b) != Len:
		return Status{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), Len)
	case b[0] != Version:
		return Status{}, fmt.Errorf("%w: version %d", ErrMalformed, b[0])
	case b[1]&^flagHasState != 0:
		return Status{}, fmt.Errorf("%w: unknown flag bits %#x", ErrMalformed, b[1])
	}
	return Status{HasState: b[1]&flagHasState != 0, LastIndex: binary.BigEndian.Uint64(b[2:])}, nil
}
