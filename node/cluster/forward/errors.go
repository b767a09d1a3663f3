package forward

import (
	"errors"
	"fmt"
)

// Error is a non-ok answer of the leader. errors.Is matches it against the
// sentinels below by Code only: errors.Is(err, ErrNotLeader).
type Error struct {
	Code    Code
	Message string
	Stage   string // unavailable, hold_off: the readiness stage
	Reason  string // clock_failed, unavailable: the SPEC §1.5 reason
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

// Sentinels for errors.Is, one per non-ok Code.
var (
	ErrHeld        = &Error{Code: CodeHeld}
	ErrMismatch    = &Error{Code: CodeMismatch}
	ErrNotFound    = &Error{Code: CodeNotFound}
	ErrBadRequest  = &Error{Code: CodeBadRequest}
	ErrNotLeader   = &Error{Code: CodeNotLeader}
	ErrUnavailable = &Error{Code: CodeUnavailable}
	ErrClockFailed = &Error{Code: CodeClockFailed}
	ErrHoldOff     = &Error{Code: CodeHoldOff}
	ErrInternal    = &Error{Code: CodeInternal}
)

// ErrOutcomeUnknown: the request was sent but no answer came (the
// connection broke, or ctx ended while waiting). A write may or may not
// have been applied; the client never retries it by itself.
var ErrOutcomeUnknown = errors.New("forward: outcome unknown: the request was sent but no answer arrived")

// ErrClosed: the Client or Server was closed.
var ErrClosed = errors.New("forward: closed")
