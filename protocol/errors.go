package protocol

import (
	"errors"
	"fmt"
)

// Reason names why an exchange was rejected (SPEC §1.5). Every rejected
// exchange has exactly one; it is used verbatim in logs, metric labels and
// conformance reports.
type Reason string

// The reasons of SPEC §1.5, in the order the checks run.
const (
	ReasonConnect     Reason = "connect"
	ReasonTimeout     Reason = "timeout"
	ReasonIO          Reason = "io"
	ReasonSize        Reason = "size"
	ReasonFormat      Reason = "format"
	ReasonVersion     Reason = "version"
	ReasonNonce       Reason = "nonce"
	ReasonMAC         Reason = "mac"
	ReasonUnsynced    Reason = "unsynced"
	ReasonSourceAge   Reason = "source_age"
	ReasonUncertainty Reason = "uncertainty"
	ReasonRTT         Reason = "rtt"
	ReasonOffset      Reason = "offset"
	ReasonBound       Reason = "bound"
	ReasonStale       Reason = "stale"
	ReasonRollback    Reason = "rollback"
	ReasonStep        Reason = "step"
)

// Reasons returns every reason of SPEC §1.5 in check order (for
// pre-registering metric label values).
func Reasons() []Reason {
	return []Reason{
		ReasonConnect, ReasonTimeout, ReasonIO, ReasonSize, ReasonFormat,
		ReasonVersion, ReasonNonce, ReasonMAC, ReasonUnsynced, ReasonSourceAge,
		ReasonUncertainty, ReasonRTT, ReasonOffset, ReasonBound, ReasonStale,
		ReasonRollback, ReasonStep,
	}
}

// Valid reports whether r is one of the reasons of SPEC §1.5.
func (r Reason) Valid() bool {
	for _, x := range Reasons() {
		if r == x {
			return true
		}
	}
	return false
}

// Error is a rejected exchange: one Reason plus a human-readable detail.
// Detail never contains secret material.
type Error struct {
	Reason Reason
	Detail string
	Err    error // optional underlying cause
}

func (e *Error) Error() string {
	s := "protocol: " + string(e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Reason: r}) match on the reason alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason && t.Detail == "" && t.Err == nil
}

// Errorf builds an *Error with the given reason.
func Errorf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error with the given reason around a cause.
func Wrap(r Reason, detail string, err error) *Error {
	return &Error{Reason: r, Detail: detail, Err: err}
}

// ReasonOf returns the Reason carried by err (anywhere in its chain).
func ReasonOf(err error) (Reason, bool) {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Reason, true
	}
	return "", false
}

// static errors for the hot path (no allocation on rejection of common cases)
var (
	errSize      = &Error{Reason: ReasonSize, Detail: "line longer than 256 bytes"}
	errNoLF      = &Error{Reason: ReasonFormat, Detail: "missing LF before EOF"}
	errTrailing  = &Error{Reason: ReasonFormat, Detail: "bytes after the response LF"}
	errBytes     = &Error{Reason: ReasonFormat, Detail: "byte outside printable ASCII (CR, TAB, NUL or non-ASCII)"}
	errFields    = &Error{Reason: ReasonFormat, Detail: "wrong field count or separator"}
	errMagic     = &Error{Reason: ReasonFormat, Detail: `magic is not "TCKCLK"`}
	errVersion   = &Error{Reason: ReasonVersion, Detail: `version is not "2"`}
	errNonceGram = &Error{Reason: ReasonFormat, Detail: "nonce is not 22 canonical base64url characters"}
	errMACGram   = &Error{Reason: ReasonFormat, Detail: "mac is not 43 canonical base64url characters"}
	errSynced    = &Error{Reason: ReasonFormat, Detail: `synced is not "0" or "1"`}
	errNonce     = &Error{Reason: ReasonNonce, Detail: "response nonce differs from the request nonce"}
	errMAC       = &Error{Reason: ReasonMAC, Detail: "MAC does not verify"}
)

func errNumber(field string) *Error {
	return &Error{Reason: ReasonFormat, Detail: field + " is not a canonical decimal u64"}
}

var (
	errRefNum = errNumber("reference_unix_ms")
	errUncNum = errNumber("uncertainty_ms")
	errAgeNum = errNumber("source_age_ms")
)
