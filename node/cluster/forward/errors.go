package forward

import (
	"errors"
	"fmt"
)

// Error is a non-ok answer of the leader. errors.Is matches it against
// another *Error by Code only: errors.Is(err, ErrNotFound), or
// errors.Is(err, &Error{Code: CodeHeld}) for any other code.
type Error struct {
	Code    Code
	Message string
	Stage   string // unavailable: the readiness stage
	Reason  string // unavailable: the SPEC §1.5 reason
	Holder  string // held: the current holder
	Token   uint64 // held: the current token
}

func (e *Error) Error() string {
	s := "forward: " + e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Code == CodeHeld && e.Holder != "" {
		s += fmt.Sprintf(" (held by %q, token %d)", e.Holder, e.Token)
	}
	if e.Stage != "" || e.Reason != "" {
		s += fmt.Sprintf(" (stage %q, reason %q)", e.Stage, e.Reason)
	}
	return s
}

// Is reports whether target is an *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// ErrNotFound matches (errors.Is) a not_found answer.
var ErrNotFound = &Error{Code: CodeNotFound}

// ErrOutcomeUnknown: the request was sent but no answer came (the
// connection broke, or ctx ended while waiting). A write may or may not
// have been applied; the client never retries it by itself.
var ErrOutcomeUnknown = errors.New("forward: outcome unknown: the request was sent but no answer arrived")

// ErrClosed: the Client or Server was closed.
var ErrClosed = errors.New("forward: closed")
