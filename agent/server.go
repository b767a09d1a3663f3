package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	ResultOverload = "overload" // reset at once: max_conns reached
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
	MaxConns     int           // connections beyond this are reset at once
}

// Server answers TCKCLK/2 on a TCP listener: one exchange per connection
// (SPEC §1.1), answers only requests protocol.ParseRequest accepts, never
// issues a read after the first LF, closes after the answer. A connection
// it does not answer — over max_conns, an invalid request, the read
// timeout, a shutdown past its deadline — ends with a TCP reset (see drop).
type Server struct {
	cfg    ServerConfig
	ans    Answerer
	obs    ServerObserver
	log    *slog.Logger
	clock  interface{ Now() time.Time }
	lrPool sync.Pool

	open    atomic.Int64
	buffers atomic.Int64 // connStates taken from lrPool (tests)
	waiting atomic.Int64 // connections parked before their first byte (tests)
	wg      sync.WaitGroup

	mu       sync.Mutex
	ln       net.Listener
	closing  bool
	held     map[net.Conn]struct{} // connections being served, for Shutdown past its deadline
	accepted chan struct{}         // closed when Serve returns
}

// NewServer returns a server; Serve starts it.
func NewServer(cfg ServerConfig, ans Answerer, obs ServerObserver, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, ans: ans, obs: obs, log: log, clock: systemClock{},
		held: make(map[net.Conn]struct{}), accepted: make(chan struct{})}
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
			drop(c)
			s.obs.Exchange(ResultOverload, 0)
			continue
		}
		s.mu.Lock()
		s.held[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handle(c)
	}
}

// drop ends a connection the server does not answer with a TCP reset
// (SO_LINGER 0) instead of a FIN. A client whose request was not read yet
// — over max_conns, say — then gets "connection reset", an exchange that
// could not complete (io, tried again within its burst: SPEC §3.1), where
// a clean EOF before any byte would read as a missing LF, format (§1.1):
// a lying agent's reason, which fails a node for good (§3.4).
func drop(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = tc.SetLinger(0) // on error the Close below still ends it, with a FIN
	}
	_ = c.Close()
}

// end closes c after an exchange with result: a FIN after an answer (the
// client waits for that EOF, SPEC §1.1), a reset (drop) after none. The
// agent's listener hands out sockets that reset on close (resetOnClose),
// so that one held by a process that dies resets too: an answer turns
// lingering off first (with it on, the reset could overtake the answer).
func end(c net.Conn, result string) {
	if result == ResultSynced || result == ResultUnsynced {
		if tc, ok := c.(interface{ SetLinger(sec int) error }); ok {
			_ = tc.SetLinger(-1) // on error the close resets: an io failure, tried again (SPEC §3.1)
		}
		_ = c.Close()
		return
	}
	drop(c)
}

// ServeConn runs one exchange on c in the calling goroutine, closes c and
// returns the result label (for in-process use and fuzzing: neither the cap
// nor Shutdown covers it).
func (s *Server) ServeConn(c net.Conn) string {
	result := s.exchange(c, s.clock.Now())
	end(c, result)
	return result
}

func (s *Server) handle(c net.Conn) {
	start := s.clock.Now()
	result := s.exchange(c, start)
	end(c, result)
	s.mu.Lock()
	delete(s.held, c)
	s.mu.Unlock()
	s.open.Add(-1)
	s.obs.Exchange(result, s.clock.Now().Sub(start))
	s.wg.Done()
}

// exchange reads one line, answers it if valid and returns the result label.
func (s *Server) exchange(c net.Conn, start time.Time) string {
	if err := c.SetReadDeadline(start.Add(s.cfg.ReadTimeout)); err != nil {
		return string(protocol.ReasonIO)
	}
	// A silent connection holds no buffer, only its goroutine: the line
	// buffer is taken once bytes (or the EOF) can be read, and the first
	// read goes straight into it.
	st, err := s.firstRead(c)
	if err != nil {
		return reasonOf(err)
	}
	defer func() {
		st.lr.Reset(nil)
		s.putState(st)
	}()
	line, err := st.lr.ReadLine()
	if err != nil {
		return reasonOf(err)
	}
	req, err := protocol.ParseRequest(line)
	if err != nil {
		return reasonOf(err)
	}
	// Bytes after the LF (st.lr.Extra) are never answered: one exchange
	// per connection.
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

// reasonOf is the SPEC §1.5 reason of a failed read or parse.
func reasonOf(err error) string {
	if r, ok := protocol.ReasonOf(err); ok {
		return string(r)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(protocol.ReasonTimeout)
	}
	return string(protocol.ReasonIO)
}

// firstRead parks until c has bytes or an EOF to read, or its read deadline
// passes, without a buffer; then it takes a pooled connState and reads the
// first bytes straight into its line reader (one read syscall, no peek).
// A socket found empty gives its buffer back before parking again.
func (s *Server) firstRead(c net.Conn) (*connState, error) {
	st := s.getState()
	st.lr.Reset(c)
	sc, ok := c.(syscall.Conn)
	if !ok {
		return st, nil // not a socket (tests' pipes): ReadLine reads it
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return st, nil
	}
	waiting := false
	err = rc.Read(func(fd uintptr) bool {
		if st == nil {
			st = s.getState()
			st.lr.Reset(c)
		}
		again := false
		st.lr.ReadOnce(func(p []byte) (int, error) {
			for {
				n, err := unix.Read(int(fd), p)
				switch {
				case err == unix.EINTR:
					continue
				case err == unix.EAGAIN:
					again = true
					return 0, nil
				case err != nil:
					return 0, err
				case n == 0:
					return 0, io.EOF
				}
				return n, nil
			}
		})
		if again {
			st.lr.Reset(nil)
			s.putState(st)
			st = nil
			if !waiting {
				waiting = true
				s.waiting.Add(1)
			}
			return false
		}
		return true
	})
	if waiting {
		s.waiting.Add(-1)
	}
	if err != nil {
		if st != nil {
			st.lr.Reset(nil)
			s.putState(st)
		}
		return nil, err
	}
	return st, nil
}

func (s *Server) getState() *connState {
	s.buffers.Add(1)
	return s.lrPool.Get().(*connState)
}

func (s *Server) putState(st *connState) {
	s.lrPool.Put(st)
	s.buffers.Add(-1)
}

// Shutdown stops accepting (the kernel resets connections still waiting in
// the listen queue), lets every held connection finish its exchange (each is
// bounded by the read and write timeouts) and returns when all are closed.
// If ctx ends first, the rest are reset at once (drop: never a clean EOF,
// as the process exiting would give them) and Shutdown returns ctx's error
// once their goroutines are done.
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
	}
	s.mu.Lock()
	for c := range s.held {
		drop(c) // its exchange fails at once on the closed connection
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}
