package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Handler answers forwarded requests on the leader. It runs on its own
// goroutine per request, with ctx cancelled when the connection breaks or
// the server closes; it must honour ctx. peerID is the NodeId of the
// sending node when the connection has a PeerID() string method (mesh
// streams do), else "".
type Handler interface {
	Forwarded(ctx context.Context, peerID string, req Request) Response
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, peerID string, req Request) Response

// Forwarded calls f.
func (f HandlerFunc) Forwarded(ctx context.Context, peerID string, req Request) Response {
	return f(ctx, peerID, req)
}

// Server defaults.
const (
	DefaultMaxInFlight  = 256
	DefaultMaxConns     = 1024
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultFrameTimeout = 10 * time.Second
)

// ServerConfig configures a Server; zero values take the defaults.
type ServerConfig struct {
	// MaxInFlight bounds the requests being handled at once, over all
	// connections; a connection's reader waits for a slot (back-pressure).
	MaxInFlight int
	// MaxConns bounds the open connections; one more is closed at once.
	MaxConns int
	// IdleTimeout closes a connection with nothing in flight that sends
	// nothing for this long.
	IdleTimeout time.Duration
	// FrameTimeout: once a frame's first byte has arrived the rest must
	// follow within this (a stalled sender is dropped).
	FrameTimeout time.Duration
	// WriteTimeout bounds the write of one answer. Default 10 s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

// Server serves forwarded requests on the leader.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup

	dropped atomic.Uint64
	read    atomic.Uint64 // requests read (Drain)
	busy    atomic.Int64  // requests read and not yet answered (Drain)
}

// NewServer returns a Server; call Serve for each listener, Close once.
func NewServer(cfg ServerConfig) *Server {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = DefaultFrameTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxInFlight), lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "forward")
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Dropped counts connections dropped for bad input (garbage, oversize or
// stalled frames) or over MaxConns.
func (s *Server) Dropped() uint64 { return s.dropped.Load() }

// Serve accepts connections on ln until ln fails or the server closes (then
// ErrClosed). It takes ownership of ln.
func (s *Server) Serve(ln net.Listener, h Handler) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return fmt.Errorf("forward: accept: %w", err)
		}
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			c.Close()
			return ErrClosed
		case len(s.conns) >= s.cfg.MaxConns:
			s.mu.Unlock()
			s.dropped.Add(1)
			s.log.Warn("forwarding connection refused: too many open", "peer", peerOf(c), "max_conns", s.cfg.MaxConns)
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(c, h)
		}()
	}
}

func peerOf(c net.Conn) string {
	if p, ok := c.(interface{ PeerID() string }); ok {
		return p.PeerID()
	}
	return ""
}

// serveConn reads frames until the connection fails, goes idle, or sends
// something bad, handing each request to h on its own goroutine.
func (s *Server) serveConn(c net.Conn, h Handler) {
	peer := peerOf(c)
	ctx, cancel := context.WithCancel(s.ctx)
	var (
		wmu      sync.Mutex
		inflight atomic.Int64
		handlers sync.WaitGroup
	)
	defer func() {
		cancel()
		c.Close()
		handlers.Wait()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	for {
		body, err := s.readFrame(c, &inflight)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.drop(peer, "reading a frame", err)
			return
		}
		id, req, err := ParseRequest(body)
		if err != nil {
			s.drop(peer, "decoding a request", err)
			return
		}
		s.read.Add(1)
		s.busy.Add(1)
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			s.busy.Add(-1)
			return
		}
		inflight.Add(1)
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			defer s.busy.Add(-1) // once the answer is written
			defer func() { <-s.sem; inflight.Add(-1) }()
			resp := h.Forwarded(ctx, peer, req)
			out, err := AppendResponse(id, resp)
			if err != nil {
				s.log.Error("forwarding handler returned an answer that cannot be encoded", "peer", peer, "op", req.Op.String(), "err", err)
				out, _ = AppendResponse(id, Response{Code: CodeInternal, Message: "the leader could not encode its answer"})
			}
			wmu.Lock()
			defer wmu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) // socket plumbing
			if err := WriteFrame(c, out); err != nil && ctx.Err() == nil {
				s.log.Warn("writing a forwarded answer failed; closing the connection", "peer", peer, "err", err)
				c.Close()
			}
		}()
	}
}

// readFrame reads one frame: the first byte may take IdleTimeout (longer
// while requests are in flight on the connection: the peer is waiting for
// answers, not idle), the rest FrameTimeout.
func (s *Server) readFrame(c net.Conn, inflight *atomic.Int64) ([]byte, error) {
	var first [1]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		_, err := io.ReadFull(c, first[:])
		if err == nil {
			break
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && inflight.Load() > 0 {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, io.EOF // idle: a quiet close, not bad input
		}
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.FrameTimeout))
	return ReadFrame(io.MultiReader(bytes.NewReader(first[:]), c))
}

func (s *Server) drop(peer, what string, err error) {
	s.dropped.Add(1)
	s.log.Warn("forwarding connection dropped", "peer", peer, "while", what, "err", err)
}

// Drain waits, at most bound, until no request is being handled and none
// has arrived for quiet, and reports whether that came. A node that stops
// keeps answering forwarded requests (with its refusals: it no longer
// leads) until the nodes that forward to it have moved on to the next
// leader, and only then closes: a request it would cut off unanswered
// is an unknown outcome to its sender.
func (s *Server) Drain(quiet, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(max(quiet/4, time.Millisecond))
	defer tick.Stop()
	last, since := s.read.Load(), time.Now()
	for {
		if s.busy.Load() == 0 && time.Since(since) >= quiet {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		<-tick.C
		if n := s.read.Load(); n != last {
			last, since = n, time.Now()
		}
	}
}

// Close stops every Serve, closes every connection, cancels the handlers'
// contexts and waits for all of the server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
