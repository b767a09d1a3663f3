package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client forwards requests to the leader over one connection at a time,
// with any number of requests in flight on it (matched by request id).
// A broken connection fails the requests in flight on it with
// ErrOutcomeUnknown and is redialled by the next Do. Safe for concurrent
// use; Close releases its goroutine.
type Client struct {
	dial func(ctx context.Context) (net.Conn, error)

	dialing chan struct{} // holds a token while one caller dials (or checks)
	mu      sync.Mutex    // guards cur, nextID, closed
	cur     *clientConn
	nextID  uint64
	closed  bool
	alone   map[net.Conn]struct{} // DoAlone's connections, closed by Close
	wg      sync.WaitGroup        // readers
	active  int                   // Do and DoAlone calls in progress (under mu)
	idle    chan struct{}         // under mu: closed when active drops to 0 (Retire)
}

type result struct {
	resp Response
	err  error
}

type clientConn struct {
	c    net.Conn
	wmu  sync.Mutex // one frame written at a time
	done chan struct{}

	mu      sync.Mutex
	pending map[uint64]chan result
	err     error // why it died (set once, before done closes)
}

// NewClient returns a Client that opens connections with dial (a mesh
// stream of the forwarding class, in the node). It dials lazily.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return &Client{dial: dial, dialing: make(chan struct{}, 1)}
}

// errNotSent marks failures before the request left: safe to try again.
var errNotSent = errors.New("forward: connection lost before the request was sent")

// Do sends req and waits for the answer or ctx. It returns the Response
// whenever one arrived, with err = the response's *Error when its code is
// not ok. Errors without a response: ctx.Err() or a dial/encode error when
// nothing was sent; an error wrapping ErrOutcomeUnknown (and ctx.Err() or
// the connection's error) when the request was sent but no answer came —
// Do never resends it.
func (c *Client) Do(ctx context.Context, req Request) (Response, error) {
	if !c.begin() {
		return Response{}, ErrClosed
	}
	defer c.end()
	for attempt := 0; ; attempt++ {
		resp, err := c.do(ctx, req)
		if errors.Is(err, errNotSent) && attempt == 0 {
			continue // the connection died before we wrote: one fresh one
		}
		return resp, err
	}
}

func (c *Client) do(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	cc, id, err := c.conn(ctx)
	if err != nil {
		return Response{}, err
	}
	body, err := AppendRequest(id, req)
	if err != nil {
		return Response{}, err
	}
	ch := make(chan result, 1)
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return Response{}, errNotSent
	}
	cc.pending[id] = ch
	cc.mu.Unlock()
	forget := func() {
		cc.mu.Lock()
		delete(cc.pending, id)
		cc.mu.Unlock()
	}

	cc.wmu.Lock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(defaultWriteTimeout) // socket plumbing, not logic
	}
	_ = cc.c.SetWriteDeadline(dl)
	werr := WriteFrame(cc.c, body)
	cc.wmu.Unlock()
	if werr != nil {
		// A write that failed did not hand the whole frame over, and the
		// server acts on whole frames only: not applied.
		forget()
		cc.kill(fmt.Errorf("forward: write: %w", werr))
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("forward: sending %v: %w", req.Op, ctx.Err())
		}
		return Response{}, fmt.Errorf("forward: sending %v: %w", req.Op, werr)
	}

	select {
	case r := <-ch:
		if r.err != nil {
			return Response{}, r.err
		}
		return r.resp, r.resp.Err()
	case <-ctx.Done():
		forget()
		return Response{}, fmt.Errorf("%w (%v): %w", ErrOutcomeUnknown, req.Op, ctx.Err())
	}
}

// conn returns the live connection (dialling if there is none) and a new
// request id.
func (c *Client) conn(ctx context.Context) (*clientConn, uint64, error) {
	select {
	case c.dialing <- struct{}{}:
		defer func() { <-c.dialing }()
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, 0, ErrClosed
	}
	if cc := c.cur; cc != nil && cc.alive() {
		c.nextID++
		id := c.nextID
		c.mu.Unlock()
		return cc, id, nil
	}
	c.mu.Unlock()

	nc, err := c.dial(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("forward: dialling the leader: %w", err)
	}
	cc := &clientConn{c: nc, done: make(chan struct{}), pending: map[uint64]chan result{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		nc.Close()
		return nil, 0, ErrClosed
	}
	c.cur = cc
	c.nextID++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		cc.read()
	}()
	return cc, c.nextID, nil
}

func (cc *clientConn) alive() bool {
	select {
	case <-cc.done:
		return false
	default:
		return true
	}
}

// read dispatches answers until the connection fails.
func (cc *clientConn) read() {
	for {
		body, err := ReadFrame(cc.c)
		if err != nil {
			cc.kill(fmt.Errorf("forward: reading: %w", err))
			return
		}
		id, resp, err := ParseResponse(body)
		if err != nil {
			cc.kill(err)
			return
		}
		cc.mu.Lock()
		ch, ok := cc.pending[id]
		delete(cc.pending, id)
		cc.mu.Unlock()
		if ok {
			ch <- result{resp: resp}
		} // else: an answer to a call whose ctx ended; dropped
	}
}

// kill closes the connection once and fails every request in flight.
func (cc *clientConn) kill(cause error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = cause
	pending := cc.pending
	cc.pending = map[uint64]chan result{}
	close(cc.done)
	cc.mu.Unlock()
	cc.c.Close()
	for _, ch := range pending {
		ch <- result{err: fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)}
	}
}

// DoAlone is Do on a connection of its own, for a request that may wait
// long (a blocking grant, a watch): when ctx ends first the connection is
// closed, and with it the request's context on the leader (a Server's
// handler context ends with its connection), so a caller that went away
// stops waiting on the leader too. Errors are as Do's.
func (c *Client) DoAlone(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	if !c.begin() {
		return Response{}, ErrClosed
	}
	defer c.end()
	body, err := AppendRequest(1, req)
	if err != nil {
		return Response{}, err
	}
	nc, err := c.dial(ctx)
	if err != nil {
		return Response{}, fmt.Errorf("forward: dialling the leader: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return Response{}, ErrClosed
	}
	if c.alone == nil {
		c.alone = map[net.Conn]struct{}{}
	}
	c.alone[nc] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.alone, nc)
		c.mu.Unlock()
		nc.Close()
	}()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	_ = nc.SetWriteDeadline(time.Now().Add(defaultWriteTimeout)) // socket plumbing
	if err := WriteFrame(nc, body); err != nil {
		// The server acts on whole frames only: not applied.
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("forward: sending %v: %w", req.Op, ctx.Err())
		}
		return Response{}, fmt.Errorf("forward: sending %v: %w", req.Op, err)
	}
	rb, err := ReadFrame(nc)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return Response{}, fmt.Errorf("%w (%v): %w", ErrOutcomeUnknown, req.Op, err)
	}
	id, resp, err := ParseResponse(rb)
	if err == nil && id != 1 {
		err = malformed("answer to request %d on a connection that sent only request 1", id)
	}
	if err != nil {
		return Response{}, fmt.Errorf("%w (%v): %w", ErrOutcomeUnknown, req.Op, err)
	}
	return resp, resp.Err()
}

// begin counts a call in progress, unless the client is closed or
// retired.
func (c *Client) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.active++
	return true
}

func (c *Client) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active--; c.active == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// Retire refuses new calls (ErrClosed: nothing sent) and closes the
// client once every call in progress has its answer, or when stop is
// closed or d has passed, whichever comes first (then as Close): a node
// whose leader changed lets the requests it forwarded to the previous one
// finish (that leader still answers them: its proposals learn their
// entries' fates) instead of cutting them into unknown outcomes.
func (c *Client) Retire(stop <-chan struct{}, d time.Duration) {
	c.mu.Lock()
	c.closed = true
	var idle chan struct{}
	if c.active > 0 {
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle = c.idle
	}
	c.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(d)
		select {
		case <-idle:
		case <-stop:
		case <-t.C:
		}
		t.Stop()
	}
	c.Close()
}

// Close closes the connection (requests in flight get ErrOutcomeUnknown)
// and waits for the reader; later calls to Do return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cc := c.cur
	c.cur = nil
	for nc := range c.alone {
		nc.Close() // DoAlone's callers see ErrOutcomeUnknown
	}
	c.mu.Unlock()
	if cc != nil {
		cc.kill(ErrClosed)
	}
	c.wg.Wait()
	return nil
}

// defaultWriteTimeout bounds the write of one frame when nothing else
// does (a ctx without deadline; the server's answers).
const defaultWriteTimeout = 10 * time.Second
