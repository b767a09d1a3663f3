package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Back-off of Acquire's and Session's retries: doubling from the first to
// the cap, each wait drawn from [d/2, d) so clients do not retry in step.
const (
	retryFirst = 50 * time.Millisecond
	retryCap   = 2 * time.Second
)

// backoff doubles from first to cap (zero: retryFirst, retryCap).
type backoff struct{ d, first, cap time.Duration }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = cmp.Or(b.first, retryFirst)
	} else {
		b.d = min(2*b.d, cmp.Or(b.cap, retryCap))
	}
	return b.d/2 + rand.N(b.d/2)
}

func (b *backoff) reset() { b.d = 0 }

// sleep waits d or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable reports whether a failed request may be tried again as it
// is: the node was not ready or not the leader (503), over its cap of
// waiters (429), or unreachable. A Grant is safe to repeat: a repeat by
// the holder returns its current grant, unchanged.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode == http.StatusServiceUnavailable || e.StatusCode == http.StatusTooManyRequests
	}
	return true // transport errors: connection refused, reset, timeout
}

// Acquire blocks until holder has the ticket name for leaseS seconds, or
// ctx ends. It waits on the server (blocking grants of at most MaxWait,
// or what is left of ctx's deadline, first come first served), and
// retries leader changes, nodes that are not ready, 429s and network
// errors with back-off. Other refusals (400, 401, ...) are returned.
func (c *Client) Acquire(ctx context.Context, name, holder string, leaseS int) (*Lease, error) {
	var b backoff
	start := time.Now()
	var last error // the last refusal, to say why the wait ended without the ticket
	for {
		wait := MaxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait < time.Millisecond {
			wait = 0
		}
		l, err := c.GrantWait(ctx, name, holder, leaseS, wait)
		switch {
		case err == nil:
			return l, nil
		case ctx.Err() != nil:
			if !errors.Is(last, ErrHeld) {
				last = err // it carries the failover's last error
			}
			return nil, waitedOut(name, time.Since(start), ctx.Err(), last)
		case errors.Is(err, ErrHeld):
			if wait == 0 { // no time left to wait
				if last == nil {
					return nil, err
				}
				return nil, fmt.Errorf("client: waited %v for ticket %q: %w", time.Since(start).Round(time.Millisecond), name, err)
			}
			last = err
			b.reset() // the wait ran out: wait again at once
			continue
		case !retryable(err):
			return nil, err
		}
		last = err
		if serr := sleep(ctx, b.next()); serr != nil {
			return nil, waitedOut(name, time.Since(start), serr, last)
		}
	}
}

// waitedOut is Acquire's error when ctx ended first: what it waited for,
// how long, and the last answer (who holds the ticket).
func waitedOut(name string, waited time.Duration, ctxErr, last error) error {
	waited = waited.Round(time.Millisecond)
	var e *Error
	switch {
	case errors.As(last, &e) && e.ErrorBody.Error == "held":
		return fmt.Errorf("client: waited %v for ticket %q, still held by %q (token %d): %w", waited, name, e.Holder, e.Token, ctxErr)
	case errors.Is(last, ctxErr):
		return fmt.Errorf("client: waited %v for ticket %q: %w", waited, name, last)
	case last != nil:
		return fmt.Errorf("client: waited %v for ticket %q: %w (last error: %v)", waited, name, ctxErr, last)
	}
	return fmt.Errorf("client: waited %v for ticket %q: %w", waited, name, ctxErr)
}

// ErrSessionLost is Session.Err when the local deadline passed without a
// successful renew, or the server said the ticket is no longer this
// holder's or was revoked (errors.Is(err, ErrRevoked)): stop using the
// token.
var ErrSessionLost = errors.New("client: session lost: the ticket's local deadline passed without a successful renew")

// ErrSessionClosed is Session.Err after Close.
var ErrSessionClosed = errors.New("client: session closed")

// Session holds a ticket and renews it in the background at a third of
// the lease (SPEC §4.2). Deadline is the local monotonic deadline of the
// last successful grant or renew; Done is closed the moment it passes
// without a successful renew, so code can stop using the token before
// anyone else can get the ticket. Done closes at once, before the
// deadline, when the server refuses a renew: the ticket is no longer ours,
// or an administrator revoked it (SPEC §4: no renew can succeed again, so
// the token must not be used on — the safe reading of "closed when the
// deadline passes without a successful renew"). Close stops renewing and
// releases.
type Session struct {
	c      *Client
	name   string
	holder string
	leaseS int

	ctx    context.Context // ends with Close: cancels an in-flight renew
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	lease  Lease
	err    error
	done   chan struct{}
	closed bool
}

// NewSession acquires the ticket (as Acquire) and keeps it renewed until
// Close, or until the session is lost.
func (c *Client) NewSession(ctx context.Context, name, holder string, leaseS int) (*Session, error) {
	l, err := c.Acquire(ctx, name, holder, leaseS)
	if err != nil {
		return nil, err
	}
	return c.SessionFor(l, leaseS), nil
}

// SessionFor starts renewing a lease already granted to this client.
func (c *Client) SessionFor(l *Lease, leaseS int) *Session {
	s := &Session{c: c, name: l.Name, holder: l.Holder, leaseS: leaseS, lease: *l, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(s.run)
	return s
}

// Lease returns the last successful grant or renew.
func (s *Session) Lease() Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// Token is the fencing token: pass it with every write the ticket guards.
func (s *Session) Token() uint64 { return s.Lease().Token }

// Deadline is the local monotonic deadline: trust the ticket only before
// it (time.Now().Before(s.Deadline())), and only while Done is open.
func (s *Session) Deadline() time.Time { return s.Lease().Deadline }

// Done is closed when the session is lost or closed (Err says which).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session holds, then ErrSessionLost (wrapping the
// last renew error, if any) or ErrSessionClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// end closes Done once with err.
func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// run renews at a third of the lease after each success, and after a
// failure again with back-off, until the deadline passes, the server
// refuses, or Close.
func (s *Session) run() {
	var b backoff
	var last error
	retryAt := time.Time{}
	for {
		l := s.Lease()
		next := l.SentAt.Add(time.Duration(s.leaseS) * time.Second / 3)
		if !retryAt.IsZero() {
			next = retryAt
		}
		t := time.NewTimer(time.Until(earlier(next, l.Deadline)))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(l.Deadline) {
			s.lost(last)
			return
		}
		if time.Now().Before(next) {
			continue
		}
		rctx, cancel := context.WithDeadline(s.ctx, l.Deadline) // a renew after it is no use
		nl, err := s.c.Renew(rctx, s.name, s.holder, l.Token, s.leaseS)
		cancel()
		switch {
		case err == nil:
			s.mu.Lock()
			s.lease = *nl
			s.mu.Unlock()
			b.reset()
			retryAt, last = time.Time{}, nil
		case s.ctx.Err() != nil:
			return
		case !retryable(err):
			s.lost(err) // 409: released, expired, re-granted, revoked: not ours
			return
		default:
			last = err
			retryAt = time.Now().Add(b.next())
		}
	}
}

func (s *Session) lost(cause error) {
	if cause != nil {
		s.end(fmt.Errorf("%w (last renew: %w)", ErrSessionLost, cause))
		return
	}
	s.end(ErrSessionLost)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Close stops renewing and releases the ticket (also after the session
// was lost: the server may still hold it for this token, and a token is
// never anyone else's). A ticket already gone is not an error. Done is
// closed afterwards.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.end(ErrSessionClosed)
	l := s.Lease()
	_, err := s.c.Release(ctx, s.name, s.holder, l.Token)
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrWrongToken) || errors.Is(err, ErrWrongHolder) || errors.Is(err, ErrNotFound) {
		return nil // already gone: expired or released
	}
	return err
}
