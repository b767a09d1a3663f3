package connlimit

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one listener's limits.
type Config struct {
	// MaxConns caps the open connections (≥ 1).
	MaxConns int
	// Reserved of MaxConns are for authenticated connections only
	// (0..MaxConns-1): unauthenticated ones hold at most MaxConns−Reserved.
	Reserved int
	// PerSource caps the unauthenticated connections of one source (≥ 1).
	PerSource int
	// UnauthIdle closes an unauthenticated connection idle this long
	// (0: never; the server's own idle timeout still applies).
	UnauthIdle time.Duration
}

// Reasons a connection is evicted or refused (the metrics' reason label).
const (
	ReasonPerSource  = "per_source"            // its source is at PerSource
	ReasonUnauth     = "unauthenticated_share" // unauthenticated connections are at MaxConns−Reserved
	ReasonMaxConns   = "max_conns"             // all connections are at MaxConns
	ReasonUnauthIdle = "unauthenticated_idle"  // idle, never authenticated, for UnauthIdle
)

// phase is where a connection is in its request cycle.
type phase uint8

const (
	reading phase = iota // a TLS handshake or a request's header: evictable, unauthenticated only
	active               // a request is being served: never evicted
	idle                 // between requests: evictable
)

// Limiter admits connections to one listener. Use Listener to wrap the
// listener, and set the http.Server's ConnState and ConnContext to the
// Limiter's.
type Limiter struct {
	cfg Config
	m   *metricsFor

	mu      sync.Mutex
	seq     uint64 // orders phase entries: lower entered earlier
	total   int
	unauth  int
	sources map[string]map[*conn]struct{} // unauthenticated connections by source
	// The evictable connections, oldest first.
	unauthIdle, unauthReading, authIdle list.List
}

// New returns a Limiter; m may be nil (no metrics). The caller has
// validated cfg (MaxConns ≥ 1, 0 ≤ Reserved < MaxConns, PerSource ≥ 1).
func New(cfg Config, m *Metrics, listener string) *Limiter {
	return &Limiter{cfg: cfg, m: m.forListener(listener), sources: map[string]map[*conn]struct{}{}}
}

// Stats are a Limiter's counts now.
type Stats struct {
	Open, Unauthenticated int
}

// Stats returns the open and unauthenticated connection counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.total, Unauthenticated: l.unauth}
}

// conn is an admitted connection.
type conn struct {
	net.Conn
	l   *Limiter
	src string

	// readWatch is set while the connection is idle with nothing read
	// since: the next byte read moves it to reading (Read).
	readWatch atomic.Bool
	closeOnce sync.Once

	// Guarded by l.mu.
	phase phase
	auth  bool
	gone  bool          // no longer counted (closed or evicted)
	seq   uint64        // when it entered its phase
	elem  *list.Element // in one of the Limiter's lists, or nil
	in    *list.List
	timer *time.Timer // the unauthenticated idle timeout
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.readWatch.Load() {
		c.l.readAgain(c)
	}
	return n, err
}

// Close closes the connection and gives its slot back.
func (c *conn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		c.l.drop(c)
		c.l.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

type listener struct {
	net.Listener
	l *Limiter
}

// Listener wraps ln: every accepted connection is admitted (evicting
// others as the rules say) or closed at once.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

func (ln *listener) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, victims := ln.l.admit(nc)
		for _, v := range victims {
			v.Close()
		}
		if c != nil {
			return c, nil
		}
		nc.Close()
	}
}

// admit counts nc in, or returns nil (refused). The victims are to be
// closed by the caller (outside the lock); they are already uncounted.
func (l *Limiter) admit(nc net.Conn) (*conn, []*conn) {
	src := SourceOf(nc.RemoteAddr())
	l.m.accept()
	l.mu.Lock()
	defer l.mu.Unlock()
	var victims []*conn
	excluded := func(c *conn) bool {
		for _, v := range victims {
			if v == c {
				return true
			}
		}
		return false
	}
	// Each rule takes at most one victim; a victim counted for an earlier
	// rule counts for the later ones too.
	unauth, total := l.unauth, l.total
	if mine := l.sources[src]; len(mine) >= l.cfg.PerSource {
		v := l.sourceVictim(mine)
		if v == nil {
			l.m.refused(ReasonPerSource)
			return nil, nil
		}
		victims = append(victims, v)
		l.m.evicted(ReasonPerSource)
		unauth, total = unauth-1, total-1
	}
	if unauth >= l.cfg.MaxConns-l.cfg.Reserved {
		v := first(excluded, &l.unauthIdle, &l.unauthReading)
		if v == nil {
			l.m.refused(ReasonUnauth)
			return nil, nil
		}
		victims = append(victims, v)
		l.m.evicted(ReasonUnauth)
		total--
	}
	if total >= l.cfg.MaxConns {
		v := first(excluded, &l.unauthIdle, &l.authIdle, &l.unauthReading)
		if v == nil {
			l.m.refused(ReasonMaxConns)
			return nil, nil
		}
		victims = append(victims, v)
		l.m.evicted(ReasonMaxConns)
	}
	for _, v := range victims {
		l.drop(v)
	}
	c := &conn{Conn: nc, l: l, src: src}
	l.total++
	l.unauth++
	mine := l.sources[src]
	if mine == nil {
		mine = map[*conn]struct{}{}
		l.sources[src] = mine
	}
	mine[c] = struct{}{}
	l.enter(c, reading)
	l.m.open(l.total, l.unauth)
	return c, victims
}

// first returns the oldest connection of the first list that has one not
// excluded.
func first(excluded func(*conn) bool, lists ...*list.List) *conn {
	for _, ls := range lists {
		for e := ls.Front(); e != nil; e = e.Next() {
			if c := e.Value.(*conn); !excluded(c) {
				return c
			}
		}
	}
	return nil
}

// sourceVictim is the source's oldest idle connection, else the one
// reading a request longest; nil when every one is being served.
func (l *Limiter) sourceVictim(mine map[*conn]struct{}) *conn {
	var best *conn
	for c := range mine {
		switch {
		case c.phase == active:
		case best == nil,
			c.phase == idle && best.phase != idle,
			c.phase == best.phase && c.seq < best.seq:
			best = c
		}
	}
	return best
}

// enter moves c to phase p (under l.mu): out of its list, into the one
// for p, its idle timer armed or stopped.
func (l *Limiter) enter(c *conn, p phase) {
	c.detach()
	l.seq++
	c.phase, c.seq = p, l.seq
	c.readWatch.Store(p == idle)
	var to *list.List
	switch {
	case p == idle && c.auth:
		to = &l.authIdle
	case p == idle:
		to = &l.unauthIdle
		if l.cfg.UnauthIdle > 0 {
			seq := c.seq
			c.timer = time.AfterFunc(l.cfg.UnauthIdle, func() { l.idleExpired(c, seq) })
		}
	case p == reading && !c.auth:
		to = &l.unauthReading
	}
	if to != nil {
		c.elem, c.in = to.PushBack(c), to
	}
}

// detach takes c out of its list and stops its idle timer (under l.mu).
func (c *conn) detach() {
	if c.elem != nil {
		c.in.Remove(c.elem)
		c.elem, c.in = nil, nil
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// drop uncounts c (under l.mu); idempotent.
func (l *Limiter) drop(c *conn) {
	if c.gone {
		return
	}
	c.gone = true
	c.detach()
	c.readWatch.Store(false)
	l.total--
	if !c.auth {
		l.unauth--
		l.forget(c)
	}
	l.m.open(l.total, l.unauth)
}

// forget removes an unauthenticated connection from its source's set.
func (l *Limiter) forget(c *conn) {
	if mine := l.sources[c.src]; mine != nil {
		delete(mine, c)
		if len(mine) == 0 {
			delete(l.sources, c.src)
		}
	}
}

// readAgain: bytes arrived on an idle connection, a request begins.
func (l *Limiter) readAgain(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.gone && c.phase == idle {
		l.enter(c, reading)
	}
}

// idleExpired closes c if it is still in the idle phase it was in when
// the timer was armed.
func (l *Limiter) idleExpired(c *conn, seq uint64) {
	l.mu.Lock()
	expired := !c.gone && c.phase == idle && c.seq == seq && !c.auth
	if expired {
		l.drop(c)
		l.m.evicted(ReasonUnauthIdle)
	}
	l.mu.Unlock()
	if expired {
		c.Close()
	}
}

// ConnState is the http.Server's ConnState hook.
func (l *Limiter) ConnState(nc net.Conn, s http.ConnState) {
	c := unwrap(nc)
	if c == nil || c.l != l {
		return
	}
	switch s {
	case http.StateActive:
		l.mu.Lock()
		if !c.gone {
			l.enter(c, active)
		}
		l.mu.Unlock()
	case http.StateIdle:
		l.mu.Lock()
		if !c.gone {
			l.enter(c, idle)
		}
		l.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		l.mu.Lock()
		l.drop(c)
		l.mu.Unlock()
	}
}

type ctxKey struct{}

// ConnContext is the http.Server's ConnContext hook: requests on the
// connection carry it, for MarkAuthenticated.
func (l *Limiter) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c := unwrap(nc); c != nil {
		return context.WithValue(ctx, ctxKey{}, c)
	}
	return ctx
}

// MarkAuthenticated records that a request on ctx's connection passed the
// token check: the connection is authenticated for the rest of its life.
// Without a Limiter's connection in ctx it does nothing.
func MarkAuthenticated(ctx context.Context) {
	c, ok := ctx.Value(ctxKey{}).(*conn)
	if !ok {
		return
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone || c.auth {
		return
	}
	c.auth = true
	l.unauth--
	l.forget(c)
	if c.elem != nil {
		l.enter(c, c.phase) // into the authenticated lists
	}
	l.m.open(l.total, l.unauth)
}

// Authenticated reports whether ctx's connection has authenticated (tests).
func Authenticated(ctx context.Context) bool {
	c, ok := ctx.Value(ctxKey{}).(*conn)
	if !ok {
		return false
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.auth
}

func unwrap(nc net.Conn) *conn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, _ := nc.(*conn)
	return c
}

// SourceOf is the source a remote address is counted under: an IPv4
// address, or an IPv6 address's /64 (one site's prefix); "" for anything
// else (all such connections share one source).
func SourceOf(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return ""
	}
	if v4 := ta.IP.To4(); v4 != nil {
		return v4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
