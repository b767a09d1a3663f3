package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// captureLimit bounds what the suite reads from one connection: enough for a
// full line, its LF and the start of whatever follows, never more.
const captureLimit = 1024

// endKind says how reading a connection stopped.
type endKind int

const (
	endEOF     endKind = iota // the target closed the connection (FIN)
	endTimeout                // the deadline passed first
	endReset                  // a read error: reset, or another I/O failure
	endFlood                  // captureLimit bytes arrived; the suite stopped reading
	endConnect                // the connection could not be opened
)

// errFlood stands for a target that sent more than captureLimit bytes.
var errFlood = fmt.Errorf("target sent more than %d bytes; the suite stopped reading", captureLimit)

// send describes what a check writes and how long the exchange may take.
type send struct {
	parts [][]byte      // written in order
	gap   time.Duration // pause before each part after the first, reading meanwhile
	limit time.Duration // the whole exchange, connect included
}

// exchange is one connection as the suite saw it.
type exchange struct {
	nonce    protocol.Nonce
	limit    time.Duration
	raw      []byte    // every byte received, at most captureLimit
	end      endKind   // how reading stopped
	err      error     // the error behind end (nil for EOF)
	writeErr error     // the request could not be (fully) written
	sent     time.Time // just before the first byte went out
	lfAt     time.Time // when the first LF arrived; zero if none did
	lfWall   time.Time // the local wall clock (Config.Clock) at that moment
	endAt    time.Time // when reading stopped
}

// do opens one connection to the target, writes s.parts and reads until the
// target closes, the deadline passes, or captureLimit bytes have arrived.
// Between parts it keeps reading, so a target that answers or closes early
// is seen at once.
func (t *Target) do(ctx context.Context, nonce protocol.Nonce, s send) *exchange {
	x := &exchange{nonce: nonce, limit: s.limit, raw: make([]byte, 0, captureLimit)}
	// Deadlines and durations use the real clock; only the plausibility
	// check reads the injected wall clock (lfWall).
	start := time.Now()
	deadline := start.Add(s.limit)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Connecting never takes longer than --timeout, even for the checks
	// that then wait up to SilentCloseLimit.
	dialCtx, cancelDial := context.WithTimeout(ctx, min(t.timeout, s.limit))
	conn, err := t.dialer.DialContext(dialCtx, "tcp", t.addr)
	cancelDial()
	if err != nil {
		x.end, x.err, x.sent, x.endAt = endConnect, err, start, time.Now()
		return x
	}
	defer conn.Close()
	// A cancelled run (Ctrl-C) interrupts the connection at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = conn.SetDeadline(deadline)
	x.sent = time.Now()
	for i, p := range s.parts {
		if i > 0 && s.gap > 0 {
			until := time.Now().Add(s.gap)
			if until.After(deadline) {
				until = deadline
			}
			if x.readUntil(ctx, conn, until, false, t.clock) {
				x.endAt = time.Now()
				return x
			}
		}
		if _, err := conn.Write(p); err != nil {
			x.writeErr = err
			break
		}
	}
	x.readUntil(ctx, conn, deadline, true, t.clock)
	x.endAt = time.Now()
	return x
}

// readUntil captures what the target sends until the read deadline until,
// bounded by captureLimit. It reports whether the connection is finished:
// closed, failed, flooded, or (when final) out of time. A non-final deadline
// only ends a pause between parts. A done ctx makes every read time out.
func (x *exchange) readUntil(ctx context.Context, conn net.Conn, until time.Time, final bool, wall Clock) bool {
	_ = conn.SetReadDeadline(until)
	if ctx.Err() != nil { // cancelled before the deadline above replaced the one AfterFunc set
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	}
	for {
		n := len(x.raw)
		if n == captureLimit {
			x.end, x.err = endFlood, errFlood
			return true
		}
		m, err := conn.Read(x.raw[n:captureLimit])
		if m > 0 {
			if x.lfAt.IsZero() && bytes.IndexByte(x.raw[n:n+m], '\n') >= 0 {
				x.lfAt, x.lfWall = time.Now(), wall.Now()
			}
			x.raw = x.raw[:n+m]
		}
		if err != nil {
			kind, cause := classify(err)
			if kind == endTimeout && !final {
				return false
			}
			x.end, x.err = kind, cause
			return true
		}
	}
}

func classify(err error) (endKind, error) {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return endEOF, nil
	case errors.As(err, &ne) && ne.Timeout():
		return endTimeout, err
	default:
		return endReset, err
	}
}

// closed reports whether the target ended the connection itself (FIN or
// reset) rather than leaving it open until the deadline.
func (x *exchange) closed() bool { return x.end == endEOF || x.end == endReset }

// elapsed is the time from the first byte sent to the end of reading.
func (x *exchange) elapsed() time.Duration { return x.endAt.Sub(x.sent) }

// rtt is the time from the first byte sent to the response's LF.
func (x *exchange) rtt() time.Duration { return x.lfAt.Sub(x.sent) }

// describeEnd says in words how the connection ended, for details.
func (x *exchange) describeEnd() string {
	switch x.end {
	case endConnect:
		return "connect failed: " + x.err.Error()
	case endEOF:
		return fmt.Sprintf("EOF after %d bytes", len(x.raw))
	case endTimeout:
		return fmt.Sprintf("no EOF within %s (%d bytes received)", x.limit, len(x.raw))
	case endFlood:
		return errFlood.Error()
	default:
		return fmt.Sprintf("connection error after %d bytes: %v", len(x.raw), x.err)
	}
}

// strict judges the exchange as a node would (SPEC §1.1, §1.5): one line
// read with protocol.LineReader, EOF after it, then ParseVerify. The error
// carries the SPEC §1.5 reason.
func (x *exchange) strict(keys protocol.KeyRing) (protocol.Response, error) {
	switch {
	case x.end == endConnect:
		return protocol.Response{}, protocol.Wrap(protocol.ReasonConnect, "connecting", x.err)
	case x.writeErr != nil:
		return protocol.Response{}, protocol.Wrap(protocol.ReasonIO, "writing the request", x.writeErr)
	}
	lr := protocol.NewLineReader(&replay{data: x.raw, err: x.endError()})
	line, err := lr.ReadLine()
	if err != nil {
		return protocol.Response{}, err
	}
	if err := lr.ExpectEOF(); err != nil {
		return protocol.Response{}, err
	}
	return protocol.ParseVerify(line, x.nonce, keys)
}

func (x *exchange) endError() error {
	if x.end == endEOF {
		return io.EOF
	}
	return x.err
}

// replay hands out captured bytes, then the error that ended the capture, so
// that protocol.LineReader classifies the exchange exactly as it would live.
type replay struct {
	data []byte
	err  error
}

func (r *replay) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// inspectLine returns the bytes a reader takes as the response line: up to
// the first LF, or everything received when no LF came (at most MaxLine
// bytes). When there is nothing to inspect it says why.
func (x *exchange) inspectLine() ([]byte, string) {
	if x.end == endConnect {
		return nil, x.describeEnd()
	}
	if i := bytes.IndexByte(x.raw, '\n'); i >= 0 {
		if i > protocol.MaxLine {
			return nil, fmt.Sprintf("size: the LF came after %d bytes", i)
		}
		return x.raw[:i], ""
	}
	switch {
	case len(x.raw) > protocol.MaxLine:
		return nil, fmt.Sprintf("size: %d bytes without LF", len(x.raw))
	case len(x.raw) == 0:
		return nil, "no response: " + x.describeEnd()
	}
	return x.raw, ""
}
