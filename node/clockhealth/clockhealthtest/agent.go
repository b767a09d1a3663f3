package clockhealthtest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// Reply is what the fake agent does with one well-formed request.
type Reply struct {
	Before func() // runs before anything is written (e.g. advance a manual clock: RTT)
	Bytes  []byte // written verbatim (include the LF yourself)
	Reset  bool   // after Bytes, abort the connection with a TCP RST (an I/O error mid-line)
	Hold   bool   // after Bytes, keep the connection open (no EOF) until the client leaves
	After  func() // runs after the connection is finished
}

// Handler scripts the agent: it gets each request and returns the reply.
type Handler func(req protocol.Request) Reply

// Agent is an in-process TCKCLK/2 agent on a real 127.0.0.1 TCP listener.
// Close (registered with t.Cleanup) stops it and waits for every goroutine.
type Agent struct {
	ln      net.Listener
	key     *protocol.Key
	handler atomic.Pointer[Handler]
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	conns   atomic.Int64
	once    sync.Once
}

// StartAgent starts an agent signing with key (a secret, or DevKey(secret)).
func StartAgent(tb testing.TB, key []byte, h Handler) *Agent {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{ln: ln, key: protocol.NewKey(key), ctx: ctx, cancel: cancel}
	a.SetHandler(h)
	a.wg.Go(a.accept)
	tb.Cleanup(a.Close)
	return a
}

// Addr is the agent's HOST:PORT.
func (a *Agent) Addr() string { return a.ln.Addr().String() }

// SetHandler replaces the agent's behaviour.
func (a *Agent) SetHandler(h Handler) { a.handler.Store(&h) }

// Conns is how many connections the agent has accepted.
func (a *Agent) Conns() int64 { return a.conns.Load() }

// Close stops the listener, cuts open connections and waits.
func (a *Agent) Close() {
	a.once.Do(func() {
		a.cancel()
		_ = a.ln.Close()
		a.wg.Wait()
	})
}

// Sign returns the signed response line (LF included) for the fields.
func (a *Agent) Sign(nonce protocol.Nonce, refUnixMs, uncMs uint64, synced bool, ageMs uint64) []byte {
	return SignedLine(a.key, nonce, refUnixMs, uncMs, synced, ageMs)
}

// SignedLine encodes and signs a response with key.
func SignedLine(key *protocol.Key, nonce protocol.Nonce, refUnixMs, uncMs uint64, synced bool, ageMs uint64) []byte {
	r := protocol.Response{Nonce: nonce, ReferenceUnixMs: refUnixMs, UncertaintyMs: uncMs, Synced: synced, SourceAgeMs: ageMs}
	key.Sign(&r)
	return protocol.EncodeResponse(&r)
}

func (a *Agent) accept() {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.conns.Add(1)
		a.wg.Go(func() { a.serve(c) })
	}
}

func (a *Agent) serve(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(a.ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := protocol.NewLineReader(c).ReadLine()
	if err != nil {
		return
	}
	req, err := protocol.ParseRequest(line)
	if err != nil {
		return // SPEC §2.1: no answer to a malformed request
	}
	_ = c.SetReadDeadline(time.Time{})
	rep := (*a.handler.Load())(req)
	if rep.Before != nil {
		rep.Before()
	}
	if _, err := c.Write(rep.Bytes); err != nil {
		return
	}
	if rep.Reset {
		resetConn(c)
		return
	}
	if rep.Hold {
		// Wait for the client to give up (EOF or reset) or for Close.
		var one [1]byte
		_ = c.SetReadDeadline(time.Time{})
		for {
			if _, err := c.Read(one[:]); err != nil {
				break
			}
		}
	}
	if rep.After != nil {
		rep.After()
	}
}

// resetConn closes c with SO_LINGER 0, so the peer sees ECONNRESET.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
