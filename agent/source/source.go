package source

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Source is one synchronisation source the agent polls.
type Source interface {
	// Name identifies the source in logs, metrics and /v1/status
	// ("ntp", "chrony", "ptp", "kernel").
	Name() string
	// Poll takes one measurement. A nil error means the sample was verified
	// healthy; otherwise the error is an *Error saying why not.
	Poll(ctx context.Context) (Sample, error)
}

// Closer is implemented by sources that hold a connection or a socket file.
type Closer interface {
	Close() error
}

// Sample is one verified measurement. All durations are non-negative except
// Offset.
type Sample struct {
	// At is the local clock reading (wall and monotonic) the measurement
	// refers to; Age, Offset and Uncertainty hold at that instant.
	At time.Time
	// Offset is true time minus local time at At: the best estimate of true
	// time at a later local instant t is t + Offset.
	Offset time.Duration
	// Uncertainty bounds |At + Offset − true time| at At, before any drift
	// growth. It is always > 0 for a healthy sample.
	Uncertainty time.Duration
	// Age is how old the underlying source measurement already was at At
	// (e.g. the time since chronyd's last clock update).
	Age time.Duration
	// Info describes the source's state for /v1/status (stratum, refid, …).
	// It never holds secrets.
	Info map[string]any
}

// Reason classifies why a source is unhealthy; it is a metric label.
type Reason string

// Reasons a source is unhealthy.
const (
	// ReasonUnreachable: no answer (timeout, connection refused, I/O error).
	// The agent keeps the previous sample until it is older than
	// max_source_age: a single lost packet does not make the agent unsynced.
	ReasonUnreachable Reason = "unreachable"
	// ReasonGarbage: the source answered something that does not parse or
	// makes no sense (negative delays, NaN, wrong reply type).
	ReasonGarbage Reason = "garbage"
	// ReasonLeap: the source reports leap status "unsynchronised".
	ReasonLeap Reason = "leap"
	// ReasonLocal: the source is a free-running local clock (chrony's
	// refid 7F7F0101), not a synchronisation source.
	ReasonLocal Reason = "local_clock"
	// ReasonStale: the source's own last update is too old.
	ReasonStale Reason = "stale"
	// ReasonQuality: stratum, root distance, RTT, accuracy or port state out
	// of bounds.
	ReasonQuality Reason = "quality"
	// ReasonTruechimers: too few servers agree (NTP intersection).
	ReasonTruechimers Reason = "truechimers"
)

// Reasons lists every Reason (for pre-registering metric labels).
func Reasons() []Reason {
	return []Reason{ReasonUnreachable, ReasonGarbage, ReasonLeap, ReasonLocal, ReasonStale, ReasonQuality, ReasonTruechimers}
}

// Error is an unhealthy poll result.
type Error struct {
	Source string
	Reason Reason
	Detail string
	Err    error
}

func (e *Error) Error() string {
	s := e.Source + ": " + string(e.Reason) + ": " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error.
func Errorf(src string, r Reason, format string, args ...any) *Error {
	return &Error{Source: src, Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error around a cause.
func Wrap(src string, r Reason, detail string, err error) *Error {
	return &Error{Source: src, Reason: r, Detail: detail, Err: err}
}

// ReasonOf returns the Reason of err, ReasonGarbage for an error that is not
// an *Error (a source bug must not pass for a transient failure).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonGarbage
}

// Clock reads the local wall clock with its monotonic reading.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// CeilDuration converts a non-negative number of seconds to a Duration,
// rounding up to the next nanosecond. It reports false for NaN, infinities,
// negative values and values that do not fit.
func CeilDuration(seconds float64) (time.Duration, bool) {
	if seconds != seconds || seconds < 0 || seconds > float64(1<<62)/1e9 {
		return 0, false
	}
	ns := seconds * 1e9
	d := time.Duration(ns)
	if float64(d) < ns {
		d++
	}
	return d, true
}

// DialUnixgram connects a datagram socket to the Unix socket remote from a
// socket file bound at local (the peer — chronyd, ptp4l — sends its reply
// to that file). mode, when not 0, is set on the file so a peer running as
// another user can write to it. close closes the socket and removes the
// file; it is safe to call once.
func DialUnixgram(remote, local string, mode os.FileMode) (conn *net.UnixConn, close func(), err error) {
	os.Remove(local) // a leftover of a crashed run with a recycled pid
	c, err := net.DialUnix("unixgram", &net.UnixAddr{Name: local, Net: "unixgram"}, &net.UnixAddr{Name: remote, Net: "unixgram"})
	if err != nil {
		os.Remove(local)
		return nil, nil, err
	}
	close = func() { c.Close(); os.Remove(local) }
	if mode != 0 {
		if err := os.Chmod(local, mode); err != nil {
			close()
			return nil, nil, err
		}
	}
	return c, close, nil
}

// Deadline is ctx's deadline, or one second from now when it has none.
func Deadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(time.Second)
}

// Exchanged classifies the error of a request/reply with a source: a
// network error or a timeout is ReasonUnreachable (no answer); anything
// else — an undecodable or unexpected reply — is ReasonGarbage.
func Exchanged(src, detail string, err error) *Error {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Wrap(src, ReasonUnreachable, detail, err)
	}
	return Wrap(src, ReasonGarbage, detail, err)
}
