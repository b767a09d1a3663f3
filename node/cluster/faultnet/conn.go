package faultnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Dialer wraps dial (nil: a net.Dialer) for the node from: a dial to an
// address registered as to fails with ErrCut while from → to or to → from
// is cut; otherwise the conn it returns applies from → to on Write and
// to → from on Read (use it as mesh.Config.Dial).
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

// Conn wraps c, a stream from the node from to the node to: Write obeys
// the rule from → to, Read the rule to → from.
func (n *Net) Conn(from, to string, c net.Conn) net.Conn {
	return &conn{Conn: c, n: n, from: from, to: to, closed: make(chan struct{}), dl: make(chan struct{})}
}

type conn struct {
	net.Conn
	n        *Net
	from, to string

	closeOnce sync.Once
	closed    chan struct{}

	mu     sync.Mutex
	rd, wd time.Time     // deadlines
	dl     chan struct{} // closed and replaced when a deadline changes

	rmu     sync.Mutex // one Read at a time: pending is the read side's
	pending []byte     // bytes read from the socket but not yet let through
	perr    error      // the error that came with them
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.pass(c.from, c.to, false); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Read reads from the socket, then holds the bytes until the rule to →
// from lets them through; bytes held past a deadline are kept for the next
// Read, so a timeout never loses stream data.
func (c *conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pending) == 0 {
		if c.perr != nil {
			err := c.perr
			c.perr = nil
			return 0, err
		}
		k, err := c.Conn.Read(b)
		if k == 0 {
			return 0, err
		}
		c.pending, c.perr = append(c.pending[:0], b[:k]...), err
	}
	if err := c.pass(c.to, c.from, true); err != nil {
		return 0, err
	}
	k := copy(b, c.pending)
	c.pending = c.pending[k:]
	if len(c.pending) > 0 {
		return k, nil
	}
	err := c.perr
	c.perr = nil
	return k, err
}

// pass waits while from → to is cut, then for its delay; it ends early
// with an error when the conn closes or its read (or write) deadline
// passes.
func (c *conn) pass(from, to string, read bool) error {
	delayed := false
	var until time.Time
	for {
		r, changed := c.n.state(from, to)
		if !r.Cut && !delayed {
			delayed = true
			d := c.n.wait(from, to, r)
			if d <= 0 {
				return nil
			}
			until = time.Now().Add(d)
		}
		if !r.Cut && !time.Now().Before(until) {
			return nil
		}
		c.mu.Lock()
		deadline, dlChanged := c.wd, c.dl
		if read {
			deadline = c.rd
		}
		c.mu.Unlock()
		var expired, arrived <-chan time.Time
		var timers []*time.Timer
		if !deadline.IsZero() {
			if !time.Now().Before(deadline) {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(time.Until(deadline))
			timers, expired = append(timers, t), t.C
		}
		if !r.Cut {
			t := time.NewTimer(time.Until(until))
			timers, arrived = append(timers, t), t.C
		}
		var err error
		done := false
		select {
		case <-changed: // a rule changed: look again
		case <-dlChanged: // a deadline changed: look again
		case <-expired:
			err, done = os.ErrDeadlineExceeded, true
		case <-arrived:
			done = true
		case <-c.closed:
			err, done = net.ErrClosed, true
		}
		for _, t := range timers {
			t.Stop()
		}
		if done {
			return err
		}
	}
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *conn) setDeadline(read, write bool, t time.Time) {
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
}

func (c *conn) SetDeadline(t time.Time) error {
	c.setDeadline(true, true, t)
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.setDeadline(true, false, t)
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.setDeadline(false, true, t)
	return c.Conn.SetWriteDeadline(t)
}
