package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// Answerer produces the signed response to one valid request.
type Answerer interface {
	Answer(nonce protocol.Nonce) protocol.Response
}

// Result labels of the requests counter besides the SPEC §1.5 reasons
// (timeout, io, size, format, version) an invalid request is counted under.
const (
	ResultSynced   = "synced"   // answered with synced=1
	ResultUnsynced = "unsynced" // answered with synced=0
	ResultOverload = "overload" // closed at once: max_conns reached
)

// ServerObserver receives the outcome of every connection (metrics).
type ServerObserver interface {
	// Exchange reports one connection's result label and its duration from
	// accept to close.
	Exchange(result string, d time.Duration)
}

// ServerConfig bounds what a client can make the server hold.
type ServerConfig struct {
	ReadTimeout  time.Duration // a connection must deliver its line within this (SPEC §2.1)
	WriteTimeout time.Duration // the answer must be written within this
	MaxConns     int           // connections beyond this are closed at once
}

// Server answers TCKCLK/2 on a TCP listener: one exchange per connection
// (SPEC §1.1), answers only requests protocol.ParseRequest accepts, never
// issues a read after the first LF, closes after the answer.
type Server struct {
	cfg    ServerConfig
	ans    Answerer
	obs    ServerObserver
	log    *slog.Logger
	clock  interface{ Now() time.Time }
	lrPool sync.Pool

	open atomic.Int64
	wg   sync.WaitGroup

	mu       sync.Mutex
	ln       net.Listener
	closing  bool
	accepted chan struct{} // closed when Serve returns
}

// NewServer returns a server; Serve starts it.
func NewServer(cfg ServerConfig, ans Answerer, obs ServerObserver, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, ans: ans, obs: obs, log: log, clock: systemClock{}, accepted: make(chan struct{})}
	s.lrPool.New = func() any { return new(connState) }
	return s
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// connState is the per-connection memory, pooled: a fixed line buffer and a
// fixed answer buffer. Nothing a client sends grows it.
type connState struct {
	lr  protocol.LineReader
	out [protocol.MaxLine + 1]byte
}

// OpenConns is the number of connections currently held.
func (s *Server) OpenConns() int64 { return s.open.Load() }

// Serve accepts until Shutdown closes ln. It returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.mu.Unlock()
	defer close(s.accepted)

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors or a transient accept error: back
			// off briefly instead of spinning, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; backing off", "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			<-t.C
			continue
		}
		backoff = 0
		if s.open.Add(1) > int64(s.cfg.MaxConns) {
			s.open.Add(-1)
			c.Close()
			s.obs.Exchange(ResultOverload, 0)
			continue
		}
		s.wg.Add(1)
		go s.handle(c)
	}
}

// ServeConn runs one exchange on c in the calling goroutine, closes c and
// returns the result label (for in-process use and fuzzing: neither the cap
// nor Shutdown covers it).
func (s *Server) ServeConn(c net.Conn) string {
	st := s.lrPool.Get().(*connState)
	result := s.exchange(c, st, s.clock.Now())
	c.Close()
	st.lr.Reset(nil)
	s.lrPool.Put(st)
	return result
}

func (s *Server) handle(c net.Conn) {
	start := s.clock.Now()
	st := s.lrPool.Get().(*connState)
	result := s.exchange(c, st, start)
	c.Close()
	st.lr.Reset(nil)
	s.lrPool.Put(st)
	s.open.Add(-1)
	s.obs.Exchange(result, s.clock.Now().Sub(start))
	s.wg.Done()
}

// exchange reads one line, answers it if valid and returns the result label.
func (s *Server) exchange(c net.Conn, st *connState, start time.Time) string {
	if err := c.SetReadDeadline(start.Add(s.cfg.ReadTimeout)); err != nil {
		return string(protocol.ReasonIO)
	}
	st.lr.Reset(c)
	line, err := st.lr.ReadLine()
	if err == nil {
		var req protocol.Request
		if req, err = protocol.ParseRequest(line); err == nil {
			// Bytes after the LF (st.lr.Extra) are never answered: one
			// exchange per connection.
			resp := s.ans.Answer(req.Nonce)
			out := protocol.AppendResponse(st.out[:0], &resp)
			if err = c.SetWriteDeadline(s.clock.Now().Add(s.cfg.WriteTimeout)); err == nil {
				_, err = c.Write(out)
			}
			if err != nil {
				return string(protocol.ReasonIO)
			}
			if resp.Synced {
				return ResultSynced
			}
			return ResultUnsynced
		}
	}
	r, ok := protocol.ReasonOf(err)
	if !ok {
		r = protocol.ReasonIO
	}
	return string(r)
}

// Shutdown stops accepting, lets every held connection finish its exchange
// (each is bounded by the read and write timeouts) and returns when all are
// closed or ctx ends; then the rest are abandoned to their deadlines.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
		<-s.accepted
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
