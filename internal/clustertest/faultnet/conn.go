package faultnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Dialer wraps dial (nil: a net.Dialer) for the node from: a dial to an
// address registered as to fails with ErrCut while from → to or to → from
// is cut; otherwise the conn it returns applies from → to on what it
// writes and to → from on what it reads (use it as mesh.Config.Dial).
func (n *Net) Dialer(from string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := n.Name(addr)
		if n.cutEither(from, to) {
			return nil, fmt.Errorf("faultnet: dialing %s (%s) from %s: %w", addr, to, from, ErrCut)
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return n.Conn(from, to, c), nil
	}
}

// maxQueued bounds the bytes each direction of a conn holds (in flight
// under a delay, or held by a cut); beyond it the writer (or the socket
// reader) waits, as TCP's windows make a sender wait.
const maxQueued = 256 << 10

// Conn wraps c, a stream from the node from to the node to: what is
// written obeys the rule from → to, what is read the rule to → from.
//
// Each direction is a delay line owned by the conn: Write queues the bytes
// (returning at once, as into a socket buffer, unless maxQueued are
// already queued) and a pump writes them to c when their delay has passed
// and the link is not cut; a second pump reads c and Read hands bytes out
// when theirs has. Bytes keep their order. Close flushes what is queued
// for writing (dropping it if the link is cut), closes c and waits for
// both pumps. Deadlines are the conn's own (c never sees them), so a
// deadline interrupts a wait and never loses queued bytes.
func (n *Net) Conn(from, to string, c net.Conn) net.Conn {
	w := &conn{Conn: c, n: n, closed: make(chan struct{}), dl: make(chan struct{})}
	w.out = line{n: n, from: from, to: to, signal: make(chan struct{})}
	w.in = line{n: n, from: to, to: from, signal: make(chan struct{})}
	n.mu.Lock()
	n.conns[w] = struct{}{}
	n.mu.Unlock()
	w.pumps.Add(2)
	go w.writePump()
	go w.readPump()
	return w
}

type conn struct {
	net.Conn
	n       *Net
	out, in line
	pumps   sync.WaitGroup

	closeOnce sync.Once
	closed    chan struct{}

	mu     sync.Mutex
	rd, wd time.Time     // deadlines
	dl     chan struct{} // closed and replaced when a deadline changes
}

// line is one direction's queue.
type line struct {
	n        *Net
	from, to string

	mu     sync.Mutex
	q      []chunk
	size   int
	err    error         // the end of the line: once q is empty, what Read (or Write) returns
	signal chan struct{} // closed and replaced on every change of q or err
}

type chunk struct {
	b   []byte
	due time.Time
}

func (l *line) notifyLocked() {
	close(l.signal)
	l.signal = make(chan struct{})
}

// push queues b, due after the link's delay, waiting for room until stop
// is closed or deadline (from dl) passes.
func (l *line) push(b []byte, stop <-chan struct{}, deadline func() (time.Time, <-chan struct{})) error {
	due := time.Now().Add(l.n.wait(l.from, l.to, l.n.Rule(l.from, l.to)))
	for {
		l.mu.Lock()
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			return err
		}
		if l.size < maxQueued {
			if k := len(l.q); k > 0 && due.Before(l.q[k-1].due) {
				due = l.q[k-1].due // jitter never reorders a stream
			}
			l.q = append(l.q, chunk{append([]byte(nil), b...), due})
			l.size += len(b)
			l.notifyLocked()
			l.mu.Unlock()
			return nil
		}
		sig := l.signal
		l.mu.Unlock()
		if err := waitOn(sig, nil, stop, deadline); err != nil {
			return err
		}
	}
}

// abort ends the line with err at once, dropping what is queued.
func (l *line) abort(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.q, l.size = nil, 0
	if l.err == nil {
		l.err = err
	}
	l.notifyLocked()
}

// fail ends the line with err (after what is queued).
func (l *line) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		l.notifyLocked()
	}
}

// pop waits until the head chunk is due and the link is not cut, then
// returns up to max bytes of it (max <= 0: all of it); with nothing queued
// and the line ended it returns the line's error.
func (l *line) pop(max int, stop <-chan struct{}, deadline func() (time.Time, <-chan struct{})) ([]byte, error) {
	for {
		select {
		case <-stop:
			return nil, net.ErrClosed
		default:
		}
		rule, changed := l.n.state(l.from, l.to)
		l.mu.Lock()
		var due <-chan time.Time
		var timer *time.Timer
		if len(l.q) > 0 && !rule.Cut {
			head := &l.q[0]
			wait := time.Until(head.due)
			if wait <= 0 {
				b := head.b
				if max > 0 && len(b) > max {
					b, head.b = b[:max], b[max:]
				} else {
					l.q = l.q[1:]
				}
				l.size -= len(b)
				l.notifyLocked()
				l.mu.Unlock()
				return b, nil
			}
			timer = time.NewTimer(wait)
			due = timer.C
		}
		if len(l.q) == 0 && l.err != nil {
			err := l.err
			l.mu.Unlock()
			return nil, err
		}
		sig := l.signal
		l.mu.Unlock()
		err := waitOn(sig, changed, stop, deadline, due)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
	}
}

// waitOn returns nil when any of the channels fires, net.ErrClosed when
// stop closes, os.ErrDeadlineExceeded when the deadline passes (a change
// of deadline returns nil: look again).
func waitOn(a, b <-chan struct{}, stop <-chan struct{}, deadline func() (time.Time, <-chan struct{}), due ...<-chan time.Time) error {
	var dlChanged <-chan struct{}
	var expired <-chan time.Time
	if deadline != nil {
		var d time.Time
		d, dlChanged = deadline()
		if !d.IsZero() {
			wait := time.Until(d)
			if wait <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			expired = t.C
		}
	}
	var tick <-chan time.Time
	if len(due) > 0 {
		tick = due[0]
	}
	select {
	case <-a:
	case <-b:
	case <-dlChanged:
	case <-tick:
	case <-stop:
		return net.ErrClosed
	case <-expired:
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (c *conn) readDeadline() (time.Time, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rd, c.dl
}

func (c *conn) writeDeadline() (time.Time, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wd, c.dl
}

// Write queues b for the pump (see Conn).
func (c *conn) Write(b []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := c.out.push(b, c.closed, c.writeDeadline); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Read hands out bytes the read pump queued once they are due.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	got, err := c.in.pop(len(b), c.closed, c.readDeadline)
	return copy(b, got), err
}

// writePump writes queued bytes to the socket when due; after Close it
// flushes what is due and not cut, then closes the socket.
func (c *conn) writePump() {
	defer c.pumps.Done()
	for {
		b, err := c.out.pop(0, c.closed, nil)
		if err != nil {
			break
		}
		if _, err := c.Conn.Write(b); err != nil {
			c.out.fail(err)
			break
		}
	}
	c.flush()
	c.Conn.Close()
}

// flush writes what is still queued, each chunk when due, unless the link
// is cut now (a partitioned conn's last bytes are lost with it).
func (c *conn) flush() {
	for {
		c.out.mu.Lock()
		if len(c.out.q) == 0 || c.out.err != nil {
			c.out.mu.Unlock()
			return
		}
		head := c.out.q[0]
		c.out.q = c.out.q[1:]
		c.out.mu.Unlock()
		if c.n.Rule(c.out.from, c.out.to).Cut {
			return
		}
		if wait := time.Until(head.due); wait > 0 {
			time.Sleep(wait) // at most the link's delay: the conn is closing
		}
		if _, err := c.Conn.Write(head.b); err != nil {
			return
		}
	}
}

func (c *conn) readPump() {
	defer c.pumps.Done()
	buf := make([]byte, 32<<10)
	for {
		k, err := c.Conn.Read(buf)
		if k > 0 {
			if perr := c.in.push(buf[:k], c.closed, nil); perr != nil {
				return
			}
		}
		if err != nil {
			c.in.fail(err)
			return
		}
	}
}

// reset is Net.Reset on c: both lines end with ECONNRESET, their bytes
// dropped, and the socket closes (the pumps end; Close still waits for them).
func (c *conn) reset() {
	err := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	c.in.abort(err)
	c.out.abort(err)
	c.Conn.Close()
}

// Close ends both directions: queued writes are flushed (see Conn), the
// socket is closed and both pumps have ended when it returns.
func (c *conn) Close() error {
	c.n.mu.Lock()
	delete(c.n.conns, c)
	c.n.mu.Unlock()
	first := false
	c.closeOnce.Do(func() {
		first = true
		close(c.closed)
	})
	c.pumps.Wait()
	if !first {
		return net.ErrClosed
	}
	return nil
}

func (c *conn) setDeadline(read, write bool, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if read {
		c.rd = t
	}
	if write {
		c.wd = t
	}
	close(c.dl)
	c.dl = make(chan struct{})
	return nil
}

// SetDeadline and its two halves bound Read's and Write's waits; the
// socket under the pumps never has a deadline.
func (c *conn) SetDeadline(t time.Time) error      { return c.setDeadline(true, true, t) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.setDeadline(true, false, t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(false, true, t) }
