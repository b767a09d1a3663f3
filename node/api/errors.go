package api

import (
	"fmt"
	"net/http"
)

// Kind classifies a Backend's refusal. The handler maps each kind to its
// HTTP status in one place (status); Backends never choose a status.
type Kind int

// The kinds of refusal.
const (
	KindUnavailable Kind = iota + 1 // 503: not ready, FAILED clock, hold-off, shutting down
	KindNotLeader                   // 503 not_leader: ask the leader (or retry)
	KindBadRequest                  // 400
	KindConflict                    // 409
	KindNotFound                    // 404
	KindTooMany                     // 429: a per-node cap on waiters or watchers

	// The handler's own refusals (HTTP by nature; no Backend returns them).
	kindMethod       // 405
	kindForbidden    // 403
	kindUnauthorized // 401
	kindTooLarge     // 413
)

// The codes of KindTooMany: the node's cap on blocking grants (wait_ms)
// and on blocking reads (?wait=) (SPEC §4.2).
const (
	CodeTooManyWaiters  = "too_many_waiters"
	CodeTooManyWatchers = "too_many_watchers"
)

// Error is a Backend's refusal: its kind, a short code, a message for a
// person, and for 503s the readiness stage and the reason (a SPEC §1.5
// reason for a FAILED clock).
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Stage   string
	Reason  string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches the sentinel of the same kind (errors.Is(err, ErrNotLeader)).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == "" && t.Kind == e.Kind
}

// Sentinels for errors.Is, one per kind.
var (
	ErrUnavailable = &Error{Kind: KindUnavailable}
	ErrNotLeader   = &Error{Kind: KindNotLeader}
	ErrBadRequest  = &Error{Kind: KindBadRequest}
	ErrConflict    = &Error{Kind: KindConflict}
	ErrNotFound    = &Error{Kind: KindNotFound}
)

// Unavailable is a 503 carrying the readiness stage or the failure reason.
func Unavailable(stage, reason, format string, args ...any) *Error {
	return &Error{Kind: KindUnavailable, Code: "unavailable", Stage: stage, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// NotLeader is a 503 not_leader.
func NotLeader(stage, format string, args ...any) *Error {
	return &Error{Kind: KindNotLeader, Code: "not_leader", Stage: stage, Message: fmt.Sprintf(format, args...)}
}

// Refuse builds an error of another kind with its code.
func Refuse(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// status is the one mapping from kinds to HTTP statuses.
func (e *Error) status() int {
	switch e.Kind {
	case KindUnavailable, KindNotLeader:
		return http.StatusServiceUnavailable
	case KindBadRequest:
		return http.StatusBadRequest
	case KindConflict:
		return http.StatusConflict
	case KindNotFound:
		return http.StatusNotFound
	case KindTooMany:
		return http.StatusTooManyRequests
	case kindMethod:
		return http.StatusMethodNotAllowed
	case kindForbidden:
		return http.StatusForbidden
	case kindUnauthorized:
		return http.StatusUnauthorized
	case kindTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}
